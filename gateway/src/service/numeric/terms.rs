//! An output column's numeric arithmetic as a small program the gateway evaluates with
//! PostgreSQL's rules: [`Term`]s over *leaves*, sub-expressions the engine computes (and that
//! every engine computes exactly: columns, literals, sums, counts).
//!
//! `qty - avg(qty) OVER ()` becomes `leaf0 - leaf1 / leaf2` with leaves `qty`,
//! `sum(qty) OVER ()`, `count(qty) OVER ()`; `coalesce(price, 0)` becomes a choice between
//! arms of scale 2 and 0, whose value is the engine's and whose scale is the arm taken (an
//! indicator leaf numbers it). PostgreSQL's scales: `a + b` and `a - b` keep the larger,
//! `a * b` adds them, `a / b` is [`pg_numeric::divide`], `round(a, n)` has `n`, and an integer
//! divided by an integer is an integer (truncated).

use datafusion::sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CaseWhen, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator,
    Value,
};
use lakegate_engines::pg_numeric::{self, DivisionByZero, Numeric};
use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{Signed, Zero};

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
    /// `avg`'s `sum / count`: a numeric quotient even of integers.
    Average,
}

/// A numeric program over leaves (indices into the candidate's leaves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Term {
    Leaf(usize),
    Neg(Box<Term>),
    Binary(Op, Box<Term>, Box<Term>),
    /// `round(t, n)`.
    Round(Box<Term>, i64),
    /// `var_samp`/`var_pop` (`variance`) and `stddev_samp`/`stddev_pop` (`stddev`) of an exact
    /// input: leaves `count(x)`, `sum(x)` and `sum(x * x)`, arm `input` is `x` (its scale).
    Variance {
        count: usize,
        sum: usize,
        squares: usize,
        input: usize,
        sample: bool,
        root: bool,
    },
    /// A `CASE` or `coalesce` whose arms have their own scales: the value is leaf `value`, the
    /// arm taken is leaf `indicator` (0-based), arm `j`'s type is typing column `arms[j]`.
    Branches {
        value: usize,
        indicator: usize,
        arms: Vec<usize>,
    },
    /// `sum` of a `CASE` or `coalesce` whose arms have their own scales: PostgreSQL's sum has
    /// the largest scale among the values summed (`sum(coalesce(price, 0))` of a group whose
    /// prices are all NULL is `0`). The value is leaf `value`; leaf `counts[j]` counts the
    /// non-NULL values arm `j` gave; arm `j`'s type is typing column `arms[j]` (`min` of it).
    SummedBranches {
        value: usize,
        counts: Vec<usize>,
        arms: Vec<usize>,
    },
    /// `max` or `min` of a `CASE` or `coalesce` whose arms have their own scales: PostgreSQL's
    /// extreme is one of the values, with the scale of the arm that gave it
    /// (`max(coalesce(price, 0))` of a group whose prices are all NULL is `0`). The value is
    /// leaf `value`; leaf `extremes[j]` is the extreme among the values arm `j` gave; arm `j`'s
    /// type is typing column `arms[j]`. Equal values from arms of different scales are taken
    /// in row order by PostgreSQL (either is its answer); the smaller scale is taken here.
    ExtremeBranches {
        value: usize,
        extremes: Vec<usize>,
        arms: Vec<usize>,
    },
}

/// What an output column computes, and the SQL of what the engine must select for it.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub term: Term,
    /// The leaves' expressions, selected alongside and executed.
    pub leaves: Vec<Expr>,
    /// The arms' expressions, selected only to learn their types (never executed).
    pub arms: Vec<Expr>,
}

fn unnested(mut e: &Expr) -> &Expr {
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

fn integer_literal(e: &Expr) -> Option<i64> {
    match unnested(e) {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => integer_literal(expr).map(|n| -n),
        _ => None,
    }
}

fn function_args(e: &Expr, names: &[&str]) -> Option<Vec<Expr>> {
    let Expr::Function(f) = e else {
        return None;
    };
    let name = f.name.to_string().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    if !names.contains(&name) || f.over.is_some() || f.filter.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Whether `e` divides or averages somewhere (its PostgreSQL scale is then per value).
fn divides(e: &Expr) -> bool {
    let mut found = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(e, |x| {
        let avg = matches!(x, Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("avg"));
        if avg
            || matches!(
                x,
                Expr::BinaryOp {
                    op: BinaryOperator::Divide,
                    ..
                }
            )
        {
            found = true;
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    });
    found
}

/// PostgreSQL's variance and standard deviation aggregates.
const VARIANCES: &[&str] = &[
    "variance",
    "var_samp",
    "var_pop",
    "stddev",
    "stddev_samp",
    "stddev_pop",
];

/// (sample, square root) of a variance aggregate call.
fn variance_of(e: &Expr) -> Option<(bool, bool)> {
    let Expr::Function(f) = e else {
        return None;
    };
    let name = f.name.to_string().to_ascii_lowercase();
    Some(match name.strip_prefix("pg_catalog.").unwrap_or(&name) {
        "variance" | "var_samp" => (true, false),
        "var_pop" => (false, false),
        "stddev" | "stddev_samp" => (true, true),
        "stddev_pop" => (false, true),
        _ => return None,
    })
}

/// The argument of a one-argument call (`x` of the typing arm `min(x)`).
pub(crate) fn argument(call: &Expr) -> Option<Expr> {
    let Expr::Function(f) = call else {
        return None;
    };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(x))] => Some(x.clone()),
        _ => None,
    }
}

/// The SQL of `sum(x * x)` for an exact `x`: an integer is squared as a numeric, so no
/// engine's integer multiplication overflows.
pub(crate) fn squares_of(x: &Expr, integer: bool) -> Expr {
    let wide = |e: &Expr| {
        if integer {
            Expr::Cast {
                kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                expr: Box::new(e.clone()),
                data_type: datafusion::sql::sqlparser::ast::DataType::Decimal(
                    datafusion::sql::sqlparser::ast::ExactNumberInfo::PrecisionAndScale(38, 0),
                ),
                array: false,
                format: None,
            }
        } else {
            e.clone()
        }
    };
    lakegate_sql::semantics::function_call(
        "sum",
        vec![Expr::BinaryOp {
            left: Box::new(wide(x)),
            op: BinaryOperator::Multiply,
            right: Box::new(wide(x)),
        }],
    )
}

/// Adds `e` as a leaf; its index.
fn leaf_index(program: &mut Program, e: Expr) -> usize {
    program.leaves.push(e);
    program.leaves.len() - 1
}

fn leaf(program: &mut Program, e: Expr) -> Term {
    Term::Leaf(leaf_index(program, e))
}

fn is_not_null(e: &Expr) -> Expr {
    Expr::IsNotNull(Box::new(e.clone()))
}

fn number(n: usize) -> Expr {
    Expr::value(Value::Number(n.to_string(), false))
}

/// `CASE` numbering the argument `greatest` (or `least`) returns: PostgreSQL skips NULLs and
/// keeps the first of equal values, so argument `j` is taken when it is not NULL, every
/// argument before it is NULL or strictly smaller (larger), and every one after it NULL or
/// not larger (smaller).
fn extreme_indicator(args: &[Expr], greatest: bool) -> Expr {
    let (before, after) = if greatest {
        (BinaryOperator::Lt, BinaryOperator::LtEq)
    } else {
        (BinaryOperator::Gt, BinaryOperator::GtEq)
    };
    let last = args.len() - 1;
    let conditions = (0..last)
        .map(|j| {
            let mut condition = is_not_null(&args[j]);
            for (k, other) in args.iter().enumerate().filter(|(k, _)| *k != j) {
                let op = if k < j { before.clone() } else { after.clone() };
                let smaller = Expr::BinaryOp {
                    left: Box::new(nested(other)),
                    op,
                    right: Box::new(nested(&args[j])),
                };
                let allowed = Expr::BinaryOp {
                    left: Box::new(Expr::IsNull(Box::new(other.clone()))),
                    op: BinaryOperator::Or,
                    right: Box::new(smaller),
                };
                condition = Expr::BinaryOp {
                    left: Box::new(condition),
                    op: BinaryOperator::And,
                    right: Box::new(Expr::Nested(Box::new(allowed))),
                };
            }
            CaseWhen {
                condition,
                result: number(j),
            }
        })
        .collect();
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions,
        else_result: Some(Box::new(number(last))),
    }
}

fn nested(e: &Expr) -> Expr {
    Expr::Nested(Box::new(e.clone()))
}

/// The arms of a `coalesce`, `greatest`, `least` or `CASE`, and the `CASE` that numbers the
/// arm taken.
fn branches(e: &Expr) -> Option<(Vec<Expr>, Expr)> {
    for (name, greatest) in [("greatest", true), ("least", false)] {
        if let Some(args) = function_args(e, &[name]) {
            if args.len() < 2 {
                return None;
            }
            let indicator = extreme_indicator(&args, greatest);
            return Some((args, indicator));
        }
    }
    if let Some(args) = function_args(e, &["coalesce"]) {
        if args.len() < 2 {
            return None;
        }
        let last = args.len() - 1;
        let conditions = args[..last]
            .iter()
            .enumerate()
            .map(|(j, a)| CaseWhen {
                condition: is_not_null(a),
                result: number(j),
            })
            .collect();
        let indicator = Expr::Case {
            case_token: AttachedToken::empty(),
            end_token: AttachedToken::empty(),
            operand: None,
            conditions,
            else_result: Some(Box::new(number(last))),
        };
        return Some((args, indicator));
    }
    let Expr::Case {
        case_token,
        end_token,
        operand,
        conditions,
        else_result,
    } = e
    else {
        return None;
    };
    let mut arms: Vec<Expr> = conditions.iter().map(|c| c.result.clone()).collect();
    let numbered = conditions
        .iter()
        .enumerate()
        .map(|(j, c)| CaseWhen {
            condition: c.condition.clone(),
            result: number(j),
        })
        .collect();
    let else_result = else_result.as_ref().map(|other| {
        arms.push(other.as_ref().clone());
        Box::new(number(arms.len() - 1))
    });
    let indicator = Expr::Case {
        case_token: case_token.clone(),
        end_token: end_token.clone(),
        operand: operand.clone(),
        conditions: numbered,
        else_result,
    };
    Some((arms, indicator))
}

fn build(program: &mut Program, e: &Expr) -> Term {
    let e = unnested(e);
    match e {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => Term::Neg(Box::new(build(program, expr))),
        Expr::BinaryOp { left, op, right } => {
            let op = match op {
                BinaryOperator::Plus => Op::Add,
                BinaryOperator::Minus => Op::Sub,
                BinaryOperator::Multiply => Op::Mul,
                BinaryOperator::Divide => Op::Div,
                _ => return leaf(program, e.clone()),
            };
            let l = build(program, left);
            let r = build(program, right);
            Term::Binary(op, Box::new(l), Box::new(r))
        }
        _ => {
            if let Some((sum, count)) = super::average_parts(e) {
                let s = build(program, &sum);
                let c = leaf(program, count);
                return Term::Binary(Op::Average, Box::new(s), Box::new(c));
            }
            if let Some((sample, root)) = variance_of(e)
                && let Some([x]) = function_args(e, VARIANCES).as_deref()
            {
                let call =
                    |name: &str, arg: Expr| lakegate_sql::semantics::function_call(name, vec![arg]);
                let square = Expr::BinaryOp {
                    left: Box::new(x.clone()),
                    op: BinaryOperator::Multiply,
                    right: Box::new(x.clone()),
                };
                let leaves = [
                    call("count", x.clone()),
                    call("sum", x.clone()),
                    call("sum", square),
                ];
                let first = program.leaves.len();
                program.leaves.extend(leaves);
                // Typed in the aggregate's own context: `min(x)` has `x`'s type.
                program.arms.push(call("min", x.clone()));
                return Term::Variance {
                    count: first,
                    sum: first + 1,
                    squares: first + 2,
                    input: program.arms.len() - 1,
                    sample,
                    root,
                };
            }
            if let Some(args) = function_args(e, &["round"])
                && let Some(places) = match args.as_slice() {
                    [_] => Some(0),
                    [_, n] => integer_literal(n),
                    _ => None,
                }
            {
                return Term::Round(Box::new(build(program, &args[0])), places);
            }
            if let Some(Expr::Function(f)) = Some(e)
                && let Some([x]) = function_args(e, &["sum", "max", "min"]).as_deref()
                && let Some((arms, indicator)) = branches(unnested(x))
                && !arms.iter().any(divides)
            {
                let aggregate = f.name.to_string().to_ascii_lowercase();
                let summed = aggregate.ends_with("sum");
                let call =
                    |name: &str, arg: Expr| lakegate_sql::semantics::function_call(name, vec![arg]);
                let value = leaf_index(program, e.clone());
                let counts = (0..arms.len())
                    .map(|j| {
                        let from_arm = Expr::Case {
                            case_token: AttachedToken::empty(),
                            end_token: AttachedToken::empty(),
                            operand: None,
                            conditions: vec![CaseWhen {
                                condition: Expr::BinaryOp {
                                    left: Box::new(Expr::Nested(Box::new(indicator.clone()))),
                                    op: BinaryOperator::Eq,
                                    right: Box::new(number(j)),
                                },
                                result: x.clone(),
                            }],
                            else_result: None,
                        };
                        let per_arm = if summed { "count" } else { aggregate.as_str() };
                        leaf_index(program, call(per_arm, from_arm))
                    })
                    .collect();
                let first = program.arms.len();
                // Typed in the aggregate's own context: `min(arm)` has the arm's type.
                program
                    .arms
                    .extend(arms.into_iter().map(|a| call("min", a)));
                let arms = (first..program.arms.len()).collect();
                return if summed {
                    Term::SummedBranches {
                        value,
                        counts,
                        arms,
                    }
                } else {
                    Term::ExtremeBranches {
                        value,
                        extremes: counts,
                        arms,
                    }
                };
            }
            if let Some((arms, indicator)) = branches(e)
                && !arms.iter().any(divides)
            {
                let value = leaf_index(program, e.clone());
                let indicator = leaf_index(program, indicator);
                let first = program.arms.len();
                program.arms.extend(arms);
                return Term::Branches {
                    value,
                    indicator,
                    arms: (first..program.arms.len()).collect(),
                };
            }
            leaf(program, e.clone())
        }
    }
}

impl Term {
    /// Whether the engine's value could differ from PostgreSQL's: a division, or arms.
    fn computes(&self) -> bool {
        match self {
            Self::Leaf(_) => false,
            Self::Neg(t) | Self::Round(t, _) => t.computes(),
            Self::Binary(Op::Div | Op::Average, _, _)
            | Self::Branches { .. }
            | Self::SummedBranches { .. }
            | Self::ExtremeBranches { .. }
            | Self::Variance { .. } => true,
            Self::Binary(_, l, r) => l.computes() || r.computes(),
        }
    }
}

/// The program of an output expression, when it has arithmetic the gateway must compute.
pub(crate) fn program(e: &Expr) -> Option<Program> {
    let mut program = Program {
        term: Term::Leaf(0),
        leaves: Vec::new(),
        arms: Vec::new(),
    };
    program.term = build(&mut program, e);
    program.term.computes().then_some(program)
}

/// A value's PostgreSQL type in a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Integer,
    /// A numeric (its scale is the value's).
    Numeric,
}

/// A leaf's or arm's type, as far as the program cares: `None` is not exact (a float).
pub(crate) fn kind_of(t: &arrow::datatypes::DataType) -> Option<(Kind, u32)> {
    use arrow::datatypes::DataType;
    match t {
        DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => {
            Some((Kind::Numeric, (*s).max(0) as u32))
        }
        DataType::Null => Some((Kind::Integer, 0)),
        t if t.is_integer() => Some((Kind::Integer, 0)),
        _ => None,
    }
}

/// The types a program is evaluated with.
pub(crate) struct Types<'a> {
    pub leaves: &'a [(Kind, u32)],
    pub arms: &'a [(Kind, u32)],
}

impl Term {
    /// The PostgreSQL type of the program's value.
    pub(crate) fn kind(&self, types: &Types<'_>) -> Kind {
        match self {
            Self::Leaf(i) => types.leaves.get(*i).map_or(Kind::Numeric, |k| k.0),
            Self::Neg(t) => t.kind(types),
            Self::Round(..) | Self::Binary(Op::Average, ..) | Self::Variance { .. } => {
                Kind::Numeric
            }
            Self::Binary(_, l, r) => {
                if l.kind(types) == Kind::Integer && r.kind(types) == Kind::Integer {
                    Kind::Integer
                } else {
                    Kind::Numeric
                }
            }
            Self::Branches { arms, .. }
            | Self::SummedBranches { arms, .. }
            | Self::ExtremeBranches { arms, .. } => {
                if arms
                    .iter()
                    .all(|a| types.arms.get(*a).is_some_and(|k| k.0 == Kind::Integer))
                {
                    Kind::Integer
                } else {
                    Kind::Numeric
                }
            }
        }
    }

    /// Whether this program changes anything the engine gives: a numeric division, or arms of
    /// different scales.
    pub(crate) fn matters(&self, types: &Types<'_>) -> bool {
        match self {
            Self::Leaf(_) => false,
            Self::Variance { .. } => true,
            Self::Neg(t) | Self::Round(t, _) => t.matters(types),
            Self::Binary(op, l, r) => {
                (matches!(op, Op::Div | Op::Average) && self.kind(types) == Kind::Numeric)
                    || l.matters(types)
                    || r.matters(types)
            }
            Self::Branches { arms, .. }
            | Self::SummedBranches { arms, .. }
            | Self::ExtremeBranches { arms, .. } => {
                let scales: Vec<u32> = arms
                    .iter()
                    .filter_map(|a| types.arms.get(*a).map(|k| k.1))
                    .collect();
                scales.windows(2).any(|w| w[0] != w[1])
            }
        }
    }
}

fn ten(power: u32) -> BigInt {
    BigInt::from(10).pow(power)
}

/// PostgreSQL's `numeric_var`/`numeric_stddev` from `n`, `Σx` and `Σx²` of inputs of `scale`
/// decimals: `(nΣx² − (Σx)²) / (n(n−1))` (`n²` for the population), divided with
/// [`pg_numeric::divide`]'s scale, its square root rounded to that scale; NULL for too few
/// rows, `0` when rounding made the numerator not positive.
fn variance(
    n: &BigInt,
    sum: &Numeric,
    squares: &Numeric,
    scale: u32,
    sample: bool,
    root: bool,
) -> Option<Numeric> {
    if n.is_zero() || (sample && *n == BigInt::from(1)) {
        return None;
    }
    let sum = sum.unscaled_at(scale);
    let squares = squares.unscaled_at(2 * scale);
    let numerator = n * &squares - &sum * &sum;
    if !numerator.is_positive() {
        return Some(Numeric::new(0, 0));
    }
    let denominator = if sample { n * (n - 1) } else { n * n };
    let quotient = pg_numeric::divide(
        &Numeric::new(numerator, 2 * scale),
        &Numeric::new(denominator, 0),
    )
    .ok()?;
    if !root {
        return Some(quotient);
    }
    // √(u·10⁻ʳ) = √(u·10ʳ)·10⁻ʳ: one more digit, truncated, then rounded half up.
    let r = quotient.scale;
    let wide = quotient.unscaled * ten(r + 2);
    let truncated = wide.sqrt();
    Some(Numeric::new((truncated + 5) / 10, r))
}

impl Term {
    /// The value for one row (`leaves` and `indicators` by leaf index).
    pub(crate) fn eval(
        &self,
        leaves: &[Option<Numeric>],
        types: &Types<'_>,
    ) -> Result<Option<Numeric>, DivisionByZero> {
        Ok(match self {
            Self::Leaf(i) => leaves.get(*i).cloned().flatten(),
            Self::Neg(t) => t
                .eval(leaves, types)?
                .map(|n| Numeric::new(-n.unscaled, n.scale)),
            Self::Round(t, places) => t.eval(leaves, types)?.map(|n| n.round(*places)),
            Self::Binary(op, l, r) => {
                let (Some(a), Some(b)) = (l.eval(leaves, types)?, r.eval(leaves, types)?) else {
                    return Ok(None);
                };
                let integers = self.kind(types) == Kind::Integer;
                Some(match op {
                    Op::Add | Op::Sub => {
                        let scale = a.scale.max(b.scale);
                        let (x, y) = (a.unscaled_at(scale), b.unscaled_at(scale));
                        Numeric::new(if *op == Op::Add { x + y } else { x - y }, scale)
                    }
                    Op::Mul => Numeric::new(a.unscaled * b.unscaled, a.scale + b.scale),
                    Op::Div if integers => {
                        if b.unscaled.is_zero() {
                            return Err(DivisionByZero);
                        }
                        // Truncated toward zero, as PostgreSQL's integer division.
                        Numeric::new(a.unscaled / b.unscaled, 0)
                    }
                    Op::Div | Op::Average => pg_numeric::divide(&a, &b)?,
                })
            }
            Self::Variance {
                count,
                sum,
                squares,
                input,
                sample,
                root,
            } => {
                let at = |i: &usize| leaves.get(*i).cloned().flatten();
                let (Some(n), Some(sum), Some(squares)) = (at(count), at(sum), at(squares)) else {
                    return Ok(None);
                };
                let scale = types.arms.get(*input).map_or(0, |k| k.1);
                variance(&n.unscaled, &sum, &squares, scale, *sample, *root)
            }
            Self::Branches {
                value,
                indicator,
                arms,
            } => {
                let Some(v) = leaves.get(*value).cloned().flatten() else {
                    return Ok(None);
                };
                let taken = leaves
                    .get(*indicator)
                    .cloned()
                    .flatten()
                    .and_then(|k| usize::try_from(&k.unscaled).ok());
                let scale = taken
                    .and_then(|k| arms.get(k))
                    .and_then(|a| types.arms.get(*a))
                    .map(|k| k.1);
                Some(at_scale(v, scale))
            }
            Self::SummedBranches {
                value,
                counts,
                arms,
            } => {
                let Some(v) = leaves.get(*value).cloned().flatten() else {
                    return Ok(None);
                };
                // The largest scale among the arms that gave a value.
                let scale =
                    arm_scales(leaves, types, counts, arms, |n| n.unscaled.is_positive()).max();
                Some(at_scale(v, scale))
            }
            Self::ExtremeBranches {
                value,
                extremes,
                arms,
            } => {
                let Some(v) = leaves.get(*value).cloned().flatten() else {
                    return Ok(None);
                };
                // The smallest scale among the arms whose extreme is the value.
                let scale = arm_scales(leaves, types, extremes, arms, |x| {
                    let s = x.scale.max(v.scale);
                    x.unscaled_at(s) == v.unscaled_at(s)
                })
                .min();
                Some(at_scale(v, scale))
            }
        })
    }
}

/// The scales of the arms whose per-arm leaf (`per_arm[j]` for arm `arms[j]`) is not NULL and
/// satisfies `keep`.
fn arm_scales<'a>(
    leaves: &'a [Option<Numeric>],
    types: &'a Types<'_>,
    per_arm: &'a [usize],
    arms: &'a [usize],
    keep: impl Fn(&Numeric) -> bool + 'a,
) -> impl Iterator<Item = u32> + 'a {
    per_arm
        .iter()
        .zip(arms)
        .filter(move |(leaf, _)| {
            leaves
                .get(**leaf)
                .and_then(Option::as_ref)
                .is_some_and(&keep)
        })
        .filter_map(|(_, a)| types.arms.get(*a).map(|k| k.1))
}

/// `v` with `scale` decimals when that drops only zeros (the engine's value has the widest
/// arm's scale); `v` itself otherwise.
fn at_scale(v: Numeric, scale: Option<u32>) -> Numeric {
    match scale {
        Some(s) if s < v.scale => {
            let (q, r) = v.unscaled.div_rem(&ten(v.scale - s));
            if r.is_zero() { Numeric::new(q, s) } else { v }
        }
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn expr(sql: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .expect("sql")
            .parse_expr()
            .expect("expr")
    }

    fn n(text: &str) -> Option<Numeric> {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        Some(Numeric::new(
            format!("{int}{frac}").parse::<BigInt>().expect("digits"),
            frac.len() as u32,
        ))
    }

    fn text(v: Option<Numeric>) -> String {
        v.map_or("NULL".into(), |n| n.to_text())
    }

    #[test]
    fn an_average_in_arithmetic_is_postgresqls() {
        let p = program(&expr("qty - avg(qty) OVER ()")).expect("computes");
        let leaves: Vec<String> = p.leaves.iter().map(ToString::to_string).collect();
        assert_eq!(leaves, ["qty", "sum(qty) OVER ()", "count(qty) OVER ()"]);
        let types = Types {
            leaves: &[(Kind::Integer, 0); 3],
            arms: &[],
        };
        assert!(p.term.matters(&types));
        assert_eq!(
            p.term.kind(&types),
            Kind::Numeric,
            "avg of integers is numeric"
        );
        let v = p.term.eval(&[n("8"), n("3430"), n("190")], &types);
        assert_eq!(text(v.expect("evaluates")), "-10.0526315789473684");
        // 100.0 * a / b, rounded: the scales of *, / and round.
        let p = program(&expr("round(100.0 * a / b, 1)")).expect("computes");
        let types = Types {
            leaves: &[(Kind::Numeric, 1), (Kind::Integer, 0), (Kind::Integer, 0)],
            arms: &[],
        };
        let v = p.term.eval(&[n("100.0"), n("1"), n("3")], &types);
        assert_eq!(text(v.expect("evaluates")), "33.3");
    }

    #[test]
    fn integer_division_stays_integer_and_plain_leaves_need_nothing() {
        assert!(program(&expr("a + b * 2")).is_none());
        let p = program(&expr("a / b")).expect("a division");
        let ints = Types {
            leaves: &[(Kind::Integer, 0); 2],
            arms: &[],
        };
        assert!(!p.term.matters(&ints), "int / int is the engine's");
        assert_eq!(
            text(p.term.eval(&[n("-7"), n("2")], &ints).expect("ok")),
            "-3"
        );
        assert_eq!(p.term.eval(&[n("1"), n("0")], &ints), Err(DivisionByZero));
    }

    #[test]
    fn an_arm_keeps_its_own_scale() {
        let p = program(&expr("coalesce(price, 0)")).expect("arms");
        assert_eq!(
            p.leaves[1].to_string(),
            "CASE WHEN price IS NOT NULL THEN 0 ELSE 1 END"
        );
        let types = Types {
            leaves: &[(Kind::Numeric, 2), (Kind::Integer, 0)],
            arms: &[(Kind::Numeric, 2), (Kind::Integer, 0)],
        };
        assert!(p.term.matters(&types));
        let zero = p.term.eval(&[n("0.00"), n("1")], &types).expect("ok");
        assert_eq!(text(zero), "0");
        let price = p.term.eval(&[n("99.65"), n("0")], &types).expect("ok");
        assert_eq!(text(price), "99.65");
        let p = program(&expr("CASE WHEN x > 0 THEN 1.5 WHEN x < 0 THEN -1 END")).expect("arms");
        assert_eq!(
            p.leaves[1].to_string(),
            "CASE WHEN x > 0 THEN 0 WHEN x < 0 THEN 1 END"
        );
        // An arm that divides has a scale per value: not attempted.
        assert!(program(&expr("coalesce(a / b, 0)")).is_none());
    }

    #[test]
    fn variances_are_postgresqls_numerics() {
        // qty = 1, 2, 3, 4, 10: PostgreSQL 15 gives var_samp 12.5000000000000000,
        // stddev_pop 3.1622776601683793, var_pop 10.0000000000000000.
        let p = program(&expr("var_samp(qty)")).expect("computes");
        assert_eq!(p.leaves[2].to_string(), "sum(qty * qty)");
        let types = Types {
            leaves: &[(Kind::Integer, 0); 3],
            arms: &[(Kind::Integer, 0)],
        };
        let leaves = [n("5"), n("20"), n("130")];
        assert_eq!(
            text(p.term.eval(&leaves, &types).expect("ok")),
            "12.5000000000000000"
        );
        let pop = program(&expr("stddev_pop(qty)")).expect("computes");
        assert_eq!(
            text(pop.term.eval(&leaves, &types).expect("ok")),
            "3.1622776601683793"
        );
        let one = [n("1"), n("7"), n("49")];
        assert_eq!(text(p.term.eval(&one, &types).expect("ok")), "NULL");
        let same = [n("3"), n("6"), n("12")];
        assert_eq!(text(p.term.eval(&same, &types).expect("ok")), "0");
        assert_eq!(
            squares_of(&expr("qty"), true).to_string(),
            "sum(CAST(qty AS DECIMAL(38,0)) * CAST(qty AS DECIMAL(38,0)))"
        );
    }
}

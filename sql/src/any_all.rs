//! `x op ANY (array)` and `x op ALL (array)` over a literal array (`ARRAY[10, 20]`,
//! `'{a,b}'`, either with a `::type[]` cast), written out as PostgreSQL evaluates them: `ANY` is
//! `x op e1 OR x op e2 …` (true if one comparison is true, else NULL if one is NULL, else
//! false; an empty array is false), `ALL` the same with `AND` (an empty array is true).
//! Three-valued `OR`/`AND` give exactly PostgreSQL's answer, NULL elements included, with every
//! comparison operator; engines have at most `= ANY` (as an array membership test that answers
//! false, not NULL, when the array holds a NULL) and no `ALL` over arrays.
//!
//! Not rewritten (left to the planner, which refuses what it cannot answer): arrays that are not
//! literals, multi-dimensional literals, and a left side calling a volatile function (it
//! would be evaluated once per element).

use sqlparser::ast::{ArrayElemTypeDef, BinaryOperator, CastKind, DataType, Expr, Value};

/// Functions whose value changes per call: a left side calling one is not copied.
const VOLATILE: &[&str] = &[
    "random",
    "nextval",
    "clock_timestamp",
    "timeofday",
    "gen_random_uuid",
    "uuid",
    "setseed",
];

/// Rewrites `expr` if it is a quantified comparison with a literal array.
pub(crate) fn expand(expr: &mut Expr) {
    let (left, op, right, any) = match expr {
        Expr::AnyOp {
            left,
            compare_op,
            right,
            ..
        } => (left, compare_op, right, true),
        Expr::AllOp {
            left,
            compare_op,
            right,
        } => (left, compare_op, right, false),
        _ => return,
    };
    if !is_comparison(op) || calls_volatile(left) {
        return;
    }
    let Some(elements) = literal_elements(right) else {
        return;
    };
    let joined = elements
        .into_iter()
        .map(|e| Expr::BinaryOp {
            left: left.clone(),
            op: op.clone(),
            right: Box::new(e),
        })
        .reduce(|a, b| Expr::BinaryOp {
            left: Box::new(a),
            op: if any {
                BinaryOperator::Or
            } else {
                BinaryOperator::And
            },
            right: Box::new(b),
        });
    *expr = match joined {
        Some(e) => Expr::Nested(Box::new(e)),
        None => Expr::value(Value::Boolean(!any)),
    };
}

/// Rewrites `x [NOT] [I]LIKE ANY|ALL (literal array)` the same way: `x LIKE p1 OR x LIKE p2 …`
/// (`ALL`: `AND`).
pub(crate) fn expand_like(expr: &mut Expr) {
    let (negated, any, of, pattern, escape_char, insensitive) = match expr {
        Expr::Like {
            negated,
            any,
            expr,
            pattern,
            escape_char,
        } => (*negated, *any, expr, pattern, escape_char, false),
        Expr::ILike {
            negated,
            any,
            expr,
            pattern,
            escape_char,
        } => (*negated, *any, expr, pattern, escape_char, true),
        _ => return,
    };
    // `LIKE ALL (…)` parses as a call of a function `ALL`.
    let (quantified_any, array) = match pattern.as_ref() {
        _ if any => (true, pattern.as_ref()),
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("all") => match &f.args {
            sqlparser::ast::FunctionArguments::List(list) if list.args.len() == 1 => {
                match &list.args[0] {
                    sqlparser::ast::FunctionArg::Unnamed(
                        sqlparser::ast::FunctionArgExpr::Expr(e),
                    ) => (false, e),
                    _ => return,
                }
            }
            _ => return,
        },
        _ => return,
    };
    if calls_volatile(of) {
        return;
    }
    let Some(elements) = literal_elements(array) else {
        return;
    };
    let one = |p: Expr| {
        if insensitive {
            Expr::ILike {
                negated,
                any: false,
                expr: of.clone(),
                pattern: Box::new(p),
                escape_char: escape_char.clone(),
            }
        } else {
            Expr::Like {
                negated,
                any: false,
                expr: of.clone(),
                pattern: Box::new(p),
                escape_char: escape_char.clone(),
            }
        }
    };
    let joined = elements.into_iter().map(one).reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: if quantified_any {
            BinaryOperator::Or
        } else {
            BinaryOperator::And
        },
        right: Box::new(b),
    });
    *expr = match joined {
        Some(e) => Expr::Nested(Box::new(e)),
        None => Expr::value(Value::Boolean(!quantified_any)),
    };
}

/// `=`, `<>`, `<`, `<=`, `>`, `>=`.
pub(crate) fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

fn calls_volatile(expr: &Expr) -> bool {
    use sqlparser::ast::Visit;
    use std::ops::ControlFlow;
    struct Finder;
    impl sqlparser::ast::Visitor for Finder {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::Function(f) = expr
                && let Some(last) = f.name.0.last()
                && let Some(ident) = last.as_ident()
                && VOLATILE.iter().any(|v| ident.value.eq_ignore_ascii_case(v))
            {
                return ControlFlow::Break(());
            }
            // A subquery on the left is evaluated once per copy too.
            if matches!(expr, Expr::Subquery(_) | Expr::Exists { .. }) {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    expr.visit(&mut Finder).is_break()
}

/// The elements of a one-dimensional literal array, each cast to the array's element type when
/// the literal has one.
fn literal_elements(array: &Expr) -> Option<Vec<Expr>> {
    match array {
        Expr::Nested(inner) => literal_elements(inner),
        Expr::Array(a) => {
            if a.elem.iter().any(|e| matches!(e, Expr::Array(_))) {
                return None;
            }
            Some(a.elem.clone())
        }
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(text) => parse_array_text(text),
            _ => None,
        },
        Expr::Cast {
            kind: kind @ (CastKind::Cast | CastKind::DoubleColon),
            expr,
            data_type: DataType::Array(elem),
            array: false,
            format: None,
        } => {
            let element_type = match elem {
                ArrayElemTypeDef::SquareBracket(t, None) | ArrayElemTypeDef::AngleBracket(t) => {
                    t.as_ref().clone()
                }
                _ => return None,
            };
            let elements = literal_elements(expr)?;
            Some(
                elements
                    .into_iter()
                    .map(|e| Expr::Cast {
                        kind: kind.clone(),
                        expr: Box::new(e),
                        data_type: element_type.clone(),
                        array: false,
                        format: None,
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

/// PostgreSQL's array text `{a, "b,c", NULL}`: elements as string literals (`NULL` unquoted is
/// the null value); `None` for nested or malformed text.
fn parse_array_text(text: &str) -> Option<Vec<Expr>> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut elements = Vec::new();
    if inner.trim().is_empty() {
        return Some(elements);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let element = if chars.next_if_eq(&'"').is_some() {
            let mut s = String::new();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => s.push(chars.next()?),
                    c => s.push(c),
                }
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            Expr::value(Value::SingleQuotedString(s))
        } else {
            let mut s = String::new();
            while let Some(c) = chars.next_if(|c| *c != ',') {
                match c {
                    '{' | '}' | '"' => return None,
                    '\\' => s.push(chars.next()?),
                    c => s.push(c),
                }
            }
            let s = s.trim_end();
            if s.is_empty() {
                return None;
            }
            if s.eq_ignore_ascii_case("null") {
                Expr::value(Value::Null)
            } else {
                Expr::value(Value::SingleQuotedString(s.to_string()))
            }
        };
        elements.push(element);
        match chars.next() {
            None => return Some(elements),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::semantics::tests::rewritten;

    #[test]
    fn literal_arrays_become_or_and_chains() {
        assert_eq!(
            rewritten("SELECT count(*) FROM t WHERE qty > ALL(ARRAY[10, 20])"),
            "SELECT count(*) FROM t WHERE (qty > 10 AND qty > 20)"
        );
        assert_eq!(
            rewritten("SELECT x <> ALL(ARRAY[1, NULL]), x = ANY(ARRAY[1, 2, 3]) FROM t"),
            "SELECT (x <> 1 AND x <> NULL), (x = 1 OR x = 2 OR x = 3) FROM t"
        );
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE s = ANY('{a, \"b,c\", NULL}'::text[])"),
            "SELECT 1 FROM t WHERE (s = 'a'::TEXT OR s = 'b,c'::TEXT OR s = NULL::TEXT)"
        );
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE s = ANY('{}') OR s = ALL('{}')"),
            "SELECT 1 FROM t WHERE false OR true"
        );
    }

    #[test]
    fn like_any_and_all_become_or_and_chains() {
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE s ILIKE ANY (ARRAY['%a%', '%b%'])"),
            "SELECT 1 FROM t WHERE (s ILIKE '%a%' OR s ILIKE '%b%')"
        );
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE s LIKE ALL (ARRAY['%a%', 'b%'])"),
            "SELECT 1 FROM t WHERE (s LIKE '%a%' AND s LIKE 'b%')"
        );
        assert_eq!(
            rewritten("SELECT s NOT LIKE ANY (ARRAY['x']) FROM t"),
            "SELECT (s NOT LIKE 'x') FROM t"
        );
    }

    #[test]
    fn what_cannot_be_copied_exactly_is_left() {
        for sql in [
            "SELECT 1 FROM t WHERE x = ANY(arr)",
            "SELECT 1 FROM t WHERE random() < ANY(ARRAY[0.5])",
            "SELECT 1 FROM t WHERE x = ANY(ARRAY[ARRAY[1], ARRAY[2]])",
            "SELECT 1 FROM t WHERE x = ANY('{{1},{2}}')",
            "SELECT 1 FROM t WHERE x = ANY('{1,2')",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}

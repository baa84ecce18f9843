//! PostgreSQL's integer arithmetic on DataFusion.
//!
//! - An integer literal is an `integer` when it fits in 32 bits, a `bigint` otherwise
//!   (PostgreSQL's rule); DataFusion reads every one as a `bigint`, so `qty * 2` of an `integer`
//!   column, `length(s) + 1` and `SELECT 1` were described as `bigint`. [`literals`] retypes them
//!   in the planned statement, before analysis, so the described schema is PostgreSQL's.
//! - `+ - * / %` and unary minus of integers fail with 22003 (`integer out of range`, `bigint
//!   out of range`) where DataFusion's arithmetic wraps around (`2147483647 + 1` would be
//!   `-2147483648`). The analyzer rule [`PgIntegerArithmetic`] runs after type coercion (both
//!   operands then have one type) and replaces each of them by a checked function.

use std::any::Any;
use std::sync::Arc;

use arrow::array::{ArrayRef, Datum, Scalar};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue, exec_err};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::{Error, ErrorKind};

/// `plan` with its integer literals typed as PostgreSQL types them (see the module docs).
///
/// `LIMIT`/`OFFSET` keep DataFusion's 64-bit literals (it reads them as such), and `VALUES`
/// rows keep theirs (their schema is fixed when they are planned). So does a plan with a
/// recursive CTE: its work table's types are fixed when it is planned.
///
/// # Errors
/// A node whose schema cannot be recomputed.
pub fn literals(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    let mut recursive = false;
    plan.apply_with_subqueries(|node| {
        recursive = matches!(node, LogicalPlan::RecursiveQuery(_));
        Ok(if recursive {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if recursive {
        return Ok(plan);
    }
    crate::semantics::rewrite_plan(
        plan,
        |node| {
            matches!(
                node,
                LogicalPlan::Projection(_)
                    | LogicalPlan::Filter(_)
                    | LogicalPlan::Aggregate(_)
                    | LogicalPlan::Window(_)
                    | LogicalPlan::Sort(_)
                    | LogicalPlan::Join(_)
            )
        },
        |e, _| {
            Ok(match &e {
                Expr::Literal(ScalarValue::Int64(Some(v)), meta) => match i32::try_from(*v) {
                    Ok(v) => {
                        Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v)), meta.clone()))
                    }
                    Err(_) => Transformed::no(e),
                },
                _ => Transformed::no(e),
            })
        },
    )
}

/// The analyzer rule (see the module docs).
#[derive(Debug, Default)]
pub struct PgIntegerArithmetic;

impl AnalyzerRule for PgIntegerArithmetic {
    fn name(&self) -> &str {
        "lakegate_pg_integer_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let functions: Vec<Arc<ScalarUDF>> = IntOp::ALL
            .iter()
            .map(|op| Arc::new(ScalarUDF::from(Checked::new(*op))))
            .collect();
        crate::semantics::rewrite_plan(plan, |_| true, |e, schema| checked(e, schema, &functions))
    }
}

/// `e` as a checked function call if it is integer arithmetic.
fn checked(
    e: Expr,
    schema: &DFSchema,
    functions: &[Arc<ScalarUDF>],
) -> DfResult<Transformed<Expr>> {
    let integer = |x: &Expr| x.get_type(schema).ok().filter(|t| t.is_signed_integer());
    let (op, args) = match &e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let Some(op) = IntOp::of(*op) else {
                return Ok(Transformed::no(e));
            };
            match (integer(left), integer(right)) {
                (Some(l), Some(r)) if l == r => {}
                _ => return Ok(Transformed::no(e)),
            }
            (op, vec![left.as_ref().clone(), right.as_ref().clone()])
        }
        Expr::Negative(inner) if integer(inner).is_some() => {
            (IntOp::Negate, vec![inner.as_ref().clone()])
        }
        _ => return Ok(Transformed::no(e)),
    };
    Ok(Transformed::yes(functions[op as usize].call(args)))
}

/// The integer operations that are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum IntOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    Remainder,
    Negate,
}

impl IntOp {
    /// Every operation, in discriminant order (an index into the rule's functions).
    const ALL: [IntOp; 6] = [
        IntOp::Add,
        IntOp::Subtract,
        IntOp::Multiply,
        IntOp::Divide,
        IntOp::Remainder,
        IntOp::Negate,
    ];

    fn of(op: Operator) -> Option<Self> {
        match op {
            Operator::Plus => Some(Self::Add),
            Operator::Minus => Some(Self::Subtract),
            Operator::Multiply => Some(Self::Multiply),
            Operator::Divide => Some(Self::Divide),
            Operator::Modulo => Some(Self::Remainder),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Add => "lakegate_int_add",
            Self::Subtract => "lakegate_int_subtract",
            Self::Multiply => "lakegate_int_multiply",
            Self::Divide => "lakegate_int_divide",
            Self::Remainder => "lakegate_int_remainder",
            Self::Negate => "lakegate_int_negate",
        }
    }

    fn arity(self) -> usize {
        if self == Self::Negate { 1 } else { 2 }
    }
}

/// One checked integer operation: the operands' type in, the same type out.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Checked {
    op: IntOp,
    signature: Signature,
}

impl Checked {
    fn new(op: IntOp) -> Self {
        Self {
            op,
            signature: Signature::any(op.arity(), Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Checked {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        self.op.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(t) if t.is_signed_integer() && arg_types.iter().all(|a| a == t) => Ok(t.clone()),
            _ => exec_err!(
                "{} takes integers of one type, not {arg_types:?}",
                self.name()
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let all_scalars = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let data_type = args.return_field.data_type().clone();
        let result = match (self.op, args.args.as_slice()) {
            (IntOp::Negate, [x]) => {
                let x = x.to_array(if all_scalars { 1 } else { args.number_rows })?;
                arrow::compute::kernels::numeric::neg(x.as_ref())
            }
            (op, [l, r]) => {
                let l = datum(l)?;
                let r = datum(r)?;
                binary(op, l.as_ref(), r.as_ref(), &data_type)
            }
            _ => return exec_err!("{} got {} arguments", self.name(), args.args.len()),
        };
        let array = result.map_err(|e| out_of_range(e, &data_type))?;
        if all_scalars {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                array.as_ref(),
                0,
            )?))
        } else {
            Ok(ColumnarValue::Array(array))
        }
    }
}

/// An argument as an arrow `Datum` (a scalar stays a one-element scalar).
fn datum(value: &ColumnarValue) -> DfResult<Box<dyn Datum>> {
    Ok(match value {
        ColumnarValue::Array(a) => Box::new(a.clone()),
        ColumnarValue::Scalar(s) => Box::new(s.to_scalar()?),
    })
}

fn binary(
    op: IntOp,
    l: &dyn Datum,
    r: &dyn Datum,
    data_type: &DataType,
) -> Result<ArrayRef, ArrowError> {
    use arrow::compute::kernels::numeric;
    match op {
        IntOp::Add => numeric::add(l, r),
        IntOp::Subtract => numeric::sub(l, r),
        IntOp::Multiply => numeric::mul(l, r),
        IntOp::Divide => numeric::div(l, r),
        // PostgreSQL's `x % -1` is 0, even for the smallest integer (whose quotient overflows):
        // `x % 1` is the same for every other x.
        IntOp::Remainder => match numeric::rem(l, r) {
            Err(ArrowError::ArithmeticOverflow(_)) => {
                let (divisor, is_scalar) = r.get();
                let minus_one = ScalarValue::Int64(Some(-1))
                    .cast_to(data_type)
                    .and_then(|v| v.to_scalar())
                    .map_err(|e| ArrowError::ComputeError(e.to_string()))?;
                let one = ScalarValue::Int64(Some(1))
                    .cast_to(data_type)
                    .and_then(|v| v.to_scalar())
                    .map_err(|e| ArrowError::ComputeError(e.to_string()))?;
                let is_minus_one = arrow::compute::kernels::cmp::eq(&divisor, &minus_one)?;
                let divisor = arrow::compute::kernels::zip::zip(&is_minus_one, &one, &divisor)?;
                if is_scalar {
                    numeric::rem(l, &Scalar::new(divisor))
                } else {
                    numeric::rem(l, &divisor)
                }
            }
            other => other,
        },
        IntOp::Negate => Err(ArrowError::InvalidArgumentError(
            "negation takes one operand".to_string(),
        )),
    }
}

/// An arrow arithmetic error as PostgreSQL reports it.
fn out_of_range(e: ArrowError, data_type: &DataType) -> datafusion::error::DataFusionError {
    let (kind, message) = match e {
        ArrowError::ArithmeticOverflow(_) => (
            ErrorKind::NumericOutOfRange,
            format!("{} out of range", pg_name(data_type)),
        ),
        ArrowError::DivideByZero => (ErrorKind::DivisionByZero, "division by zero".to_string()),
        other => return other.into(),
    };
    Error::Value { kind, message }.into_datafusion()
}

/// PostgreSQL's name of an integer type, as its range errors say it.
fn pg_name(data_type: &DataType) -> &'static str {
    match data_type {
        DataType::Int8 | DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        _ => "bigint",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::record_batch::RecordBatch;
    use datafusion::prelude::SessionContext;

    fn context() -> SessionContext {
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(Arc::new(PgIntegerArithmetic));
        ctx
    }

    /// Plans `sql` with its literals retyped, runs it, and returns the described types and
    /// the rows (or the error's kind and message).
    async fn run(sql: &str) -> Result<(Vec<DataType>, String), (ErrorKind, String)> {
        let ctx = context();
        let plan = ctx.state().create_logical_plan(sql).await.expect("plans");
        let plan = literals(plan).expect("retypes");
        let described: Vec<DataType> = plan
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let ran: DfResult<Vec<RecordBatch>> =
            async { ctx.execute_logical_plan(plan).await?.collect().await }.await;
        match ran {
            Ok(batches) => {
                let returned: Vec<DataType> = batches[0]
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect();
                assert_eq!(returned, described, "described = returned for {sql}");
                let shown = arrow::util::pretty::pretty_format_batches(&batches)
                    .expect("prints")
                    .to_string();
                Ok((described, shown))
            }
            Err(e) => {
                let e = Error::DataFusion(Box::new(e));
                Err((e.kind(), e.to_string()))
            }
        }
    }

    #[tokio::test]
    async fn integer_literals_are_integers_and_their_arithmetic_keeps_the_type() {
        let (types, shown) = run(
            "SELECT 1 AS one, q * 2 AS doubled, q + 2147483648 AS wide, b - 1 AS big, \
             coalesce(q, 0) AS c, 7 / 2 AS quotient, -7 % 3 AS remainder FROM \
             (VALUES (CAST(5 AS INT), CAST(9 AS BIGINT))) AS v(q, b)",
        )
        .await
        .expect("runs");
        use DataType::{Int32, Int64};
        assert_eq!(types, [Int32, Int32, Int64, Int64, Int32, Int32, Int32]);
        assert!(
            shown.contains("| 1   | 10      | 2147483653 | 8   | 5 | 3        | -1        |"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn integer_overflow_is_an_error_not_a_wrapped_value() {
        for (sql, message) in [
            (
                "SELECT q + 1 FROM (VALUES (CAST(2147483647 AS INT))) AS v(q)",
                "integer out of range",
            ),
            (
                "SELECT q * 2 FROM (VALUES (CAST(2000000000 AS INT))) AS v(q)",
                "integer out of range",
            ),
            (
                "SELECT -q FROM (VALUES (CAST(-2147483648 AS INT))) AS v(q)",
                "integer out of range",
            ),
            (
                "SELECT q / -1 FROM (VALUES (CAST(-2147483648 AS INT))) AS v(q)",
                "integer out of range",
            ),
            (
                "SELECT b * 2 FROM (VALUES (9223372036854775807)) AS v(b)",
                "bigint out of range",
            ),
            // Constant folding must not wrap either.
            (
                "SELECT 2147483647 + 1 FROM (VALUES (1)) AS v(x)",
                "integer out of range",
            ),
        ] {
            let (kind, text) = run(sql).await.expect_err(sql);
            assert_eq!(kind, ErrorKind::NumericOutOfRange, "{sql}: {text}");
            assert!(text.contains(message), "{sql}: {text}");
        }
        let (kind, text) = run("SELECT q / 0 FROM (VALUES (CAST(1 AS INT))) AS v(q)")
            .await
            .expect_err("divides by zero");
        assert_eq!(kind, ErrorKind::DivisionByZero, "{text}");
    }

    #[tokio::test]
    async fn a_recursive_cte_keeps_its_work_tables_types() {
        let (_, shown) = run(
            "WITH RECURSIVE n AS (SELECT 1 AS i UNION ALL SELECT i + 1 FROM n WHERE i < 3) \
             SELECT sum(i) AS s FROM n",
        )
        .await
        .expect("runs");
        assert!(shown.contains("| 6 |"), "{shown}");
    }

    #[tokio::test]
    async fn the_smallest_integer_modulo_minus_one_is_zero() {
        let (_, shown) = run("SELECT q % -1 AS scalar, q % d AS column FROM \
             (VALUES (CAST(-2147483648 AS INT), CAST(-1 AS INT)), \
             (CAST(7 AS INT), CAST(2 AS INT))) AS v(q, d)")
        .await
        .expect("runs");
        assert!(shown.contains("| 0      | 0      |"), "{shown}");
        assert!(shown.contains("| 0      | 1      |"), "{shown}");
    }
}

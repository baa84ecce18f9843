//! PostgreSQL's types and values for date and time arithmetic on DataFusion (an analyzer rule,
//! after type coercion):
//!
//! - `date ± interval` is a `timestamp` (DataFusion keeps a date; `date ± integer` stays a date);
//! - `timestamp - timestamp` is an interval with whole days split off, as PostgreSQL's
//!   subtraction justifies hours (`9 days 01:30:00`, not `217:30:00`);
//! - `date_trunc(field, date)` truncates the date as a `timestamptz` in the session's time zone,
//!   PostgreSQL's resolution of that call.
//!
//! Only in what a query returns (projections, aggregates, windows); other engines are conformed
//! to these types by position (`conform.rs`).

use std::any::Any;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit, TimeUnit,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result as DfResult, exec_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module docs).
#[derive(Debug, Default)]
pub struct PgTemporal;

const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// The function a `timestamp - timestamp` difference is justified by.
pub const JUSTIFY_HOURS: &str = "lakegate_justify_hours";

impl AnalyzerRule for PgTemporal {
    fn name(&self) -> &str {
        "lakegate_pg_temporal"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let zone: Arc<str> = config
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "UTC".to_string())
            .into();
        let justify = Arc::new(ScalarUDF::from(JustifyHours::default()));
        // Only values a query returns: in a filter or a join the truth of a comparison is the
        // same either way, and iceberg-rust cannot push a date compared with a timestamp.
        let returned = |node: &LogicalPlan| {
            matches!(
                node,
                LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)
            )
        };
        crate::semantics::rewrite_plan(plan, returned, |e, schema| {
            rewrite(e, schema, &zone, &justify)
        })
    }
}

fn rewrite(
    e: Expr,
    schema: &DFSchema,
    zone: &Arc<str>,
    justify: &Arc<ScalarUDF>,
) -> DfResult<Transformed<Expr>> {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, None);
    match &e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Plus | Operator::Minus) =>
        {
            let (Ok(l), Ok(r)) = (left.get_type(schema), right.get_type(schema)) else {
                return Ok(Transformed::no(e));
            };
            let date = |t: &DataType| matches!(t, DataType::Date32 | DataType::Date64);
            // `date + 7` reaches here as `date + CAST(CAST(7 * 86400 AS duration) AS interval)`:
            // PostgreSQL's date + integer is a date, and stays one.
            let from_integer = |mut e: &Expr| {
                while let Expr::Cast(Cast { expr, .. }) = e {
                    if expr
                        .get_type(schema)
                        .is_ok_and(|t| t.is_integer() || matches!(t, DataType::Duration(_)))
                    {
                        return true;
                    }
                    e = expr;
                }
                false
            };
            if from_integer(left) || from_integer(right) {
                return Ok(Transformed::no(e));
            }
            let interval = |t: &DataType| matches!(t, DataType::Interval(_));
            if date(&l) && interval(&r) {
                return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(Expr::Cast(Cast::new(left.clone(), timestamp))),
                    *op,
                    right.clone(),
                ))));
            }
            if *op == Operator::Plus && interval(&l) && date(&r) {
                return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    left.clone(),
                    *op,
                    Box::new(Expr::Cast(Cast::new(right.clone(), timestamp))),
                ))));
            }
            if *op == Operator::Minus
                && matches!(l, DataType::Timestamp(..))
                && matches!(r, DataType::Timestamp(..))
            {
                return Ok(Transformed::yes(justify.call(vec![e.clone()])));
            }
            Ok(Transformed::no(e))
        }
        Expr::ScalarFunction(ScalarFunction { func, args })
            if func.name() == "date_trunc" && args.len() == 2 =>
        {
            // Type coercion has cast the date to a timestamp already: find the date.
            let date = match &args[1] {
                Expr::Cast(Cast { expr, .. }) => expr.as_ref(),
                other => other,
            };
            if !matches!(
                date.get_type(schema),
                Ok(DataType::Date32 | DataType::Date64)
            ) {
                return Ok(Transformed::no(e));
            }
            let tz = DataType::Timestamp(TimeUnit::Microsecond, Some(zone.clone()));
            let as_tz = Expr::Cast(Cast::new(
                Box::new(Expr::Cast(Cast::new(Box::new(date.clone()), timestamp))),
                tz,
            ));
            Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                func: func.clone(),
                args: vec![args[0].clone(), as_tz],
            })))
        }
        _ => Ok(Transformed::no(e)),
    }
}

/// An interval of a time difference with every whole 24 hours moved to days (PostgreSQL's
/// `justify_hours`, which its timestamp subtraction applies).
pub fn justify_hours(nanos: i64, days: i32, months: i32) -> IntervalMonthDayNano {
    let whole = nanos / NANOS_PER_DAY;
    let days = i64::from(days) + whole;
    IntervalMonthDayNano::new(
        months,
        i32::try_from(days).unwrap_or(if days < 0 { i32::MIN } else { i32::MAX }),
        nanos - whole * NANOS_PER_DAY,
    )
}

/// `lakegate_justify_hours(difference)`: a duration or interval as a justified interval.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JustifyHours {
    signature: Signature,
}

impl Default for JustifyHours {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for JustifyHours {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        JUSTIFY_HOURS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let (array, scalar) = crate::semantics::argument_array(&args, 0)?;
        let intervals = match array.data_type() {
            DataType::Duration(_) => {
                let nanos = cast(array.as_ref(), &DataType::Duration(TimeUnit::Nanosecond))?;
                let nanos = cast(nanos.as_ref(), &DataType::Int64)?;
                let nanos = nanos.as_primitive::<arrow::datatypes::Int64Type>();
                let out: IntervalMonthDayNanoArray = nanos.unary(|n| justify_hours(n, 0, 0));
                out
            }
            DataType::Interval(_) => {
                let mdn = cast(
                    array.as_ref(),
                    &DataType::Interval(IntervalUnit::MonthDayNano),
                )?;
                mdn.as_primitive::<IntervalMonthDayNanoType>()
                    .unary(|v| justify_hours(v.nanoseconds, v.days, v.months))
            }
            other => return exec_err!("lakegate_justify_hours of {other}"),
        };
        let out: ArrayRef = Arc::new(intervals);
        crate::semantics::columnar(out, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_days_move_out_of_the_hours() {
        let nine_days = 9 * NANOS_PER_DAY + 5_400_000_000_000;
        assert_eq!(
            justify_hours(nine_days, 0, 0),
            IntervalMonthDayNano::new(0, 9, 5_400_000_000_000)
        );
        // Negative differences keep one sign, as PostgreSQL's (-1 days -02:00:00).
        assert_eq!(
            justify_hours(-(NANOS_PER_DAY + 7_200_000_000_000), 0, 0),
            IntervalMonthDayNano::new(0, -1, -7_200_000_000_000)
        );
    }

    #[tokio::test]
    async fn dates_with_intervals_are_timestamps_and_differences_have_days() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.add_analyzer_rule(Arc::new(PgTemporal));
        let frame = ctx
            .sql(
                "SELECT date '1998-12-01' - interval '90 days' AS a, \
                 timestamp '2024-03-10 10:00:00' - timestamp '2024-03-01 08:30:00' AS b, \
                 date_trunc('month', date '2024-03-17') AS c, date '2024-02-29' + 1 AS d",
            )
            .await
            .expect("plans");
        let batches = frame.collect().await.expect("runs");
        let schema = batches[0].schema();
        let types: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().to_string())
            .collect();
        assert_eq!(
            types,
            [
                "Timestamp(µs)",
                "Interval(MonthDayNano)",
                "Timestamp(µs, \"UTC\")",
                "Date32"
            ]
        );
        let b = batches[0]
            .column(1)
            .as_primitive::<IntervalMonthDayNanoType>()
            .value(0);
        assert_eq!(b, IntervalMonthDayNano::new(0, 9, 5_400_000_000_000));
    }
}

//! PostgreSQL's `extract` and `date_part` on DataFusion.
//!
//! Since PostgreSQL 14 `extract(f FROM x)` is a `numeric` — `extract(second FROM ts)` is
//! `12.500000`, `extract(epoch FROM ts)` has six decimals (none for a `date`), every other field
//! is an integer — while `date_part('f', x)` stays `double precision` (`12.5`). DataFusion plans
//! both as one `date_part` that answers `Int32` and truncates seconds. [`rewrite`] renames them in
//! the statement DataFusion plans to [`pg_extract`] and [`pg_date_part`], which compute the field
//! with DataFusion's own `date_part` and give it PostgreSQL's type and fractional part.
//!
//! Other engines run the statement as the client wrote it: their integer fields are exact once
//! conformed to the planned type; [`fractional`] and [`weekday`] name the fields where an engine's
//! own extract differs (whole seconds; Trino's and Spark's day-of-week numbering).

use std::any::Any;
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, AsArray, Decimal128Array, Float64Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef, Int32Type, Int64Type};
use datafusion::common::{Result as DfResult, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    DateTimeField, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    ObjectName, Statement, Value, visit_expressions_mut,
};
use lakegate_sql::semantics::function_call;

/// The name of the `numeric` extract.
pub const EXTRACT: &str = "lakegate_pg_extract";
/// The name of the `double precision` date_part.
pub const DATE_PART: &str = "lakegate_pg_date_part";

/// Renames `EXTRACT(f FROM x)` and `date_part('f', x)` in `statement` to the PostgreSQL ones.
pub fn rewrite(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |expr| {
        match expr {
            Expr::Extract {
                field, expr: of, ..
            } => {
                if let Some(name) = field_name(field) {
                    let of = std::mem::replace(of.as_mut(), Expr::value(Value::Null));
                    *expr = function_call(
                        EXTRACT,
                        vec![Expr::value(Value::SingleQuotedString(name)), of],
                    );
                }
            }
            Expr::Function(f) if is_date_part(f) => {
                if let FunctionArguments::List(list) = &mut f.args
                    && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(part)), _] =
                        list.args.as_slice()
                    && matches!(part, Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_)))
                {
                    f.name = ObjectName::from(vec![Ident::new(DATE_PART)]);
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

fn is_date_part(f: &Function) -> bool {
    f.name.0.len() == 1
        && f.name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| i.value.eq_ignore_ascii_case("date_part"))
}

/// The field as `date_part` names it (`None`: one DataFusion has no name for; left as it is).
fn field_name(field: &DateTimeField) -> Option<String> {
    use DateTimeField as F;
    Some(
        match field {
            F::Year | F::Years => "year",
            F::Month | F::Months => "month",
            F::Week(_) | F::Weeks => "week",
            F::Day | F::Days => "day",
            F::Hour | F::Hours => "hour",
            F::Minute | F::Minutes => "minute",
            F::Second | F::Seconds => "second",
            F::Millisecond | F::Milliseconds => "milliseconds",
            F::Microsecond | F::Microseconds => "microseconds",
            F::Epoch => "epoch",
            F::Dow | F::DayOfWeek => "dow",
            F::Isodow => "isodow",
            F::Doy | F::DayOfYear => "doy",
            F::Quarter => "quarter",
            F::Isoyear => "isoyear",
            F::Custom(i) => return Some(i.value.to_lowercase()),
            _ => return None,
        }
        .to_string(),
    )
}

/// What a field is, as PostgreSQL computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The seconds of the minute with their fraction, from DataFusion's microseconds of the
    /// minute read with `scale` decimals (second: 6, milliseconds: 3, microseconds: 0).
    Micros { scale: i8 },
    /// Seconds since the epoch (six decimals; none for a date).
    Epoch,
    /// A whole number DataFusion's date_part gives as it is.
    Whole,
}

fn part(name: &str) -> Part {
    match name {
        "second" | "seconds" | "s" | "sec" | "secs" => Part::Micros { scale: 6 },
        "milliseconds" | "millisecond" | "ms" | "msec" | "msecs" => Part::Micros { scale: 3 },
        "microseconds" | "microsecond" | "us" | "usec" | "usecs" => Part::Micros { scale: 0 },
        "epoch" => Part::Epoch,
        _ => Part::Whole,
    }
}

/// Whether `field` has a fraction (an engine's own extract gives whole seconds there).
pub fn fractional(field: &str) -> bool {
    !matches!(part(&field.to_lowercase()), Part::Whole)
}

/// Whether `field` counts days in a way Trino's and Spark's extract do not (`dow` from Sunday = 0,
/// ISO weeks and years, day of year).
pub fn weekday(field: &str) -> bool {
    matches!(
        field.to_lowercase().as_str(),
        "dow" | "isodow" | "doy" | "week" | "isoyear"
    )
}

static DF_DATE_PART: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(datafusion::functions::datetime::date_part);

/// The two functions, for a DataFusion context.
pub fn udfs() -> [ScalarUDF; 2] {
    [
        ScalarUDF::new_from_impl(PgDatePart::new(true)),
        ScalarUDF::new_from_impl(PgDatePart::new(false)),
    ]
}

/// `extract` (numeric) or `date_part` (double precision).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgDatePart {
    numeric: bool,
    signature: Signature,
}

impl PgDatePart {
    fn new(numeric: bool) -> Self {
        Self {
            numeric,
            signature: Signature::new(TypeSignature::Any(2), Volatility::Immutable),
        }
    }
}

/// The field name of a call's first argument.
fn literal_field(value: Option<&ScalarValue>) -> Option<String> {
    value
        .and_then(|v| v.try_as_str().flatten())
        .map(|s| s.trim().to_lowercase())
}

impl ScalarUDFImpl for PgDatePart {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        if self.numeric { EXTRACT } else { DATE_PART }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        exec_err!("return_field_from_args is used instead")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let Some(field) = literal_field(args.scalar_arguments.first().copied().flatten()) else {
            return exec_err!("{}: the field must be a constant string", self.name());
        };
        let nullable = args.arg_fields.get(1).is_none_or(|f| f.is_nullable());
        let date = args
            .arg_fields
            .get(1)
            .is_some_and(|f| matches!(f.data_type(), DataType::Date32 | DataType::Date64));
        let data_type = if !self.numeric {
            DataType::Float64
        } else {
            match part(&field) {
                Part::Micros { scale, .. } => DataType::Decimal128(38, scale),
                Part::Epoch if !date => DataType::Decimal128(38, 6),
                Part::Epoch | Part::Whole => DataType::Decimal128(38, 0),
            }
        };
        Ok(Arc::new(Field::new(self.name(), data_type, nullable)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let field = match args.args.first() {
            Some(ColumnarValue::Scalar(v)) => literal_field(Some(v)),
            _ => None,
        };
        let Some(field) = field else {
            return exec_err!("{}: the field must be a constant string", self.name());
        };
        let target = args.return_field.data_type().clone();
        let of = args.args.get(1).cloned();
        let Some(of) = of else {
            return exec_err!("{} takes a field and a value", self.name());
        };
        let scalar = matches!(of, ColumnarValue::Scalar(_));
        let rows = args.number_rows;
        let df = |name: &str| -> DfResult<ArrayRef> {
            let out = DF_DATE_PART.invoke_with_args(ScalarFunctionArgs {
                args: vec![
                    ColumnarValue::Scalar(ScalarValue::Utf8(Some(name.to_string()))),
                    of.clone(),
                ],
                arg_fields: args.arg_fields.clone(),
                number_rows: rows,
                return_field: Arc::new(Field::new(
                    "date_part",
                    if name == "epoch" {
                        DataType::Float64
                    } else {
                        DataType::Int32
                    },
                    true,
                )),
                config_options: args.config_options.clone(),
            })?;
            out.into_array(rows)
        };
        let array: ArrayRef = match part(&field) {
            Part::Micros { scale } => {
                let micros = df("microsecond")?;
                let micros = micros.as_primitive::<Int32Type>();
                if self.numeric {
                    // 12.5 s is 12500000 µs: 12.500000 s, 12500.000 ms, 12500000 µs.
                    let values: Decimal128Array = micros.unary(i128::from);
                    Arc::new(values.with_precision_and_scale(38, scale)?)
                } else {
                    let divisor = 10_f64.powi(i32::from(scale));
                    let values: Float64Array = micros.unary(|v| f64::from(v) / divisor);
                    Arc::new(values)
                }
            }
            Part::Epoch => {
                let value = of.clone().into_array(rows)?;
                match epoch_micros(value.as_ref())? {
                    Some(micros) => match target {
                        DataType::Decimal128(_, scale) => {
                            // A date's epoch is whole seconds (scale 0).
                            let per = if scale == 0 { 1_000_000 } else { 1 };
                            let values: Decimal128Array = micros.unary(|us| i128::from(us) / per);
                            Arc::new(values.with_precision_and_scale(38, scale)?)
                        }
                        // PostgreSQL's float8 epoch: the microseconds over 10^6.
                        _ => {
                            let values: Float64Array = micros.unary(|us| us as f64 / 1e6);
                            Arc::new(values)
                        }
                    },
                    None => {
                        let seconds = df("epoch")?;
                        cast(seconds.as_ref(), &target)?
                    }
                }
            }
            Part::Whole => {
                let mut whole = df(&field)?;
                if field == "isodow" {
                    // DataFusion counts Monday as 0; PostgreSQL's ISO day is Monday 1 … Sunday 7.
                    let days = whole
                        .as_primitive::<Int32Type>()
                        .unary::<_, Int32Type>(|d| d + 1);
                    whole = Arc::new(days);
                }
                cast(whole.as_ref(), &target)?
            }
        };
        crate::semantics::columnar(array, scalar)
    }
}

/// Microseconds since the epoch of a timestamp or date array (`None` for other types).
fn epoch_micros(array: &dyn arrow::array::Array) -> DfResult<Option<Int64Array>> {
    use arrow::datatypes::TimeUnit;
    let per_unit = |raw: &dyn arrow::array::Array, f: fn(i64) -> i64| -> DfResult<Int64Array> {
        let raw = cast(raw, &DataType::Int64)?;
        Ok(raw.as_primitive::<Int64Type>().unary(f))
    };
    Ok(Some(match array.data_type() {
        DataType::Timestamp(unit, _) => match unit {
            TimeUnit::Second => per_unit(array, |v| v.saturating_mul(1_000_000))?,
            TimeUnit::Millisecond => per_unit(array, |v| v.saturating_mul(1_000))?,
            TimeUnit::Microsecond => per_unit(array, |v| v)?,
            TimeUnit::Nanosecond => per_unit(array, |v| v.div_euclid(1_000))?,
        },
        DataType::Date32 => {
            let days = cast(array, &DataType::Int32)?;
            days.as_primitive::<Int32Type>()
                .unary(|d| i64::from(d) * 86_400_000_000)
        }
        _ => return Ok(None),
    }))
}

/// The field of a call to one of the two functions (for the planner's features).
pub fn call_field(name: &str, args: &[datafusion::logical_expr::Expr]) -> Option<String> {
    if name != EXTRACT && name != DATE_PART {
        return None;
    }
    match args.first() {
        Some(datafusion::logical_expr::Expr::Literal(v, _)) => literal_field(Some(v)),
        _ => None,
    }
}

/// Plans `sql` on `ctx` after `rewrite` and collects its batches (the rewrites' tests).
#[cfg(test)]
pub(crate) async fn run_rewritten(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
    rewrite: fn(&mut Statement),
) -> Vec<arrow::array::RecordBatch> {
    let mut statement = datafusion::sql::parser::DFParser::parse_sql(sql)
        .expect("parses")
        .pop_front()
        .expect("one statement");
    if let datafusion::sql::parser::Statement::Statement(s) = &mut statement {
        rewrite(s);
    }
    let plan = ctx
        .state()
        .statement_to_plan(statement)
        .await
        .expect("plans");
    let frame = ctx.execute_logical_plan(plan).await.expect("runs");
    frame.collect().await.expect("collects")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn text(sql: &str) -> Vec<String> {
        let ctx = SessionContext::new();
        for udf in udfs() {
            ctx.register_udf(udf);
        }
        let batches = run_rewritten(&ctx, sql, rewrite).await;
        let batch = &batches[0];
        (0..batch.num_columns())
            .map(|c| {
                let col = batch.column(c);
                format!(
                    "{}:{}",
                    col.data_type(),
                    arrow::util::display::array_value_to_string(col, 0).expect("prints")
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn extract_is_numeric_with_postgresqls_fraction() {
        let got = text(
            "SELECT extract(second FROM timestamp '2024-03-17 10:11:12.5'), \
             extract(milliseconds FROM timestamp '2024-03-17 10:11:12.5'), \
             extract(year FROM date '2024-03-17'), \
             extract(epoch FROM timestamp '2024-03-17 10:11:12.25'), \
             extract(epoch FROM date '2024-03-17'), \
             extract(dow FROM date '2024-03-17'), extract(isodow FROM date '2024-03-17')",
        )
        .await;
        assert_eq!(
            got,
            [
                "Decimal128(38, 6):12.500000",
                "Decimal128(38, 3):12500.000",
                "Decimal128(38, 0):2024",
                "Decimal128(38, 6):1710670272.250000",
                "Decimal128(38, 0):1710633600",
                "Decimal128(38, 0):0",
                "Decimal128(38, 0):7",
            ]
        );
    }

    #[tokio::test]
    async fn date_part_is_a_double_with_the_fraction() {
        let got = text(
            "SELECT date_part('second', timestamp '2024-03-17 10:11:12.5'), \
             date_part('year', date '2024-03-17'), \
             date_part('epoch', timestamp '2024-03-17 10:11:12.25')",
        )
        .await;
        assert_eq!(
            got,
            ["Float64:12.5", "Float64:2024.0", "Float64:1710670272.25"]
        );
    }

    #[test]
    fn fields_other_engines_differ_on() {
        assert!(fractional("second") && fractional("EPOCH") && !fractional("year"));
        assert!(weekday("dow") && !weekday("month"));
    }
}

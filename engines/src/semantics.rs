//! PostgreSQL's value semantics, where engines differ: what the embedded engine does to give
//! PostgreSQL's answer, and which PostgreSQL behaviours a statement relies on, so that an
//! engine that cannot reproduce one refuses the statement instead of answering differently.
//!
//! - [`PgTextCasts`]: an analyzer rule that turns every cast of a timestamp, date, time,
//!   interval, float or boolean to text (explicit, or inserted by type coercion as in
//!   `'at ' || ts`) into [`pg_text`](crate::pg_text)'s formatting, in the session's time zone;
//!   and gives casts to integers PostgreSQL's rounding: a numeric rounds half away from zero
//!   (`2.5::int` is 3), a float to the nearest even (`2.5::float8::int` is 2, as `rint`), and
//!   `round(float8)` rounds to even too; a float meets a numeric as in PostgreSQL
//!   ([`pg_float_numeric`](crate::pg_float_numeric)).
//! - [`features`]: the [`Feature`]s of a planned statement, read from its analyzed plan.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::expr::{AggregateFunction, Cast, TryCast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use serde::Serialize;

use crate::pg_text::{self, Booleans};

/// A PostgreSQL behaviour a statement relies on that not every engine reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// A timestamp, date or time printed as text (`ts::text`, `'at ' || ts`).
    TemporalText,
    /// An interval printed as text.
    IntervalText,
    /// A float printed as text (PostgreSQL's shortest form, `1e+20`).
    FloatText,
    /// A boolean printed as text (`true` / `false`).
    BooleanText,
    /// `numeric / numeric`: PostgreSQL's result scale depends on the values.
    NumericDivision,
    /// `avg(numeric)`: likewise.
    NumericAverage,
    /// Date and time arithmetic with intervals whose value is returned (PostgreSQL: `date +
    /// interval` is a timestamp); in a filter only the comparison's truth matters, which every
    /// engine gets right for dates and timestamps (not a timestamptz: its days are the session
    /// zone's).
    IntervalArithmetic,
    /// A numeric or float cast to an integer (PostgreSQL rounds: half away from zero for
    /// numeric, to even for floats).
    IntegerCast,
    /// `concat` / `concat_ws` (PostgreSQL skips NULL arguments).
    Concat,
    /// `initcap` (PostgreSQL starts a word after any non-alphanumeric character).
    Initcap,
    /// `date - date` (PostgreSQL: the days between, an integer).
    DateDifference,
    /// `extract`/`date_part` of seconds, milliseconds or the epoch (PostgreSQL keeps the
    /// fraction).
    FractionalDatePart,
    /// `extract`/`date_part` of `dow`, `isodow`, `doy`, `week` or `isoyear` (PostgreSQL counts
    /// the week from Sunday = 0 and ISO weeks).
    WeekdayDatePart,
    /// A float cast to a numeric (PostgreSQL keeps the float's 15 significant digits).
    FloatToNumeric,
    /// `timestamp - timestamp` (PostgreSQL: an interval of days and a time, `9 days 01:30:00`).
    TimestampDifference,
    /// `AT TIME ZONE` (PostgreSQL: a `timestamptz` becomes the zone's wall-clock `timestamp`,
    /// a `timestamp` the `timestamptz` of that wall clock).
    AtTimeZone,
    /// A `timestamptz`'s day, hour, wall clock or calendar arithmetic, or the instant a text or
    /// date compared with one stands for, in a session whose `TimeZone` is not UTC
    /// ([`crate::session_zone`]).
    SessionZone,
    /// A function computed by the embedded engine with PostgreSQL's definition
    /// ([`pg_functions`](crate::pg_functions)): `age`, `percentile_disc`, `sign` of a float.
    EmbeddedFunction,
}

impl Feature {
    /// What the behaviour is, for a refusal's message.
    pub fn describe(self) -> &'static str {
        match self {
            Self::TemporalText => "a timestamp, date or time converted to text",
            Self::IntervalText => "an interval converted to text",
            Self::FloatText => "a float converted to text",
            Self::BooleanText => "a boolean converted to text",
            Self::NumericDivision => "numeric division (PostgreSQL's result scale)",
            Self::NumericAverage => "avg of a numeric (PostgreSQL's result scale)",
            Self::IntervalArithmetic => "date/time arithmetic with an interval",
            Self::IntegerCast => "a numeric or float cast to an integer (PostgreSQL rounds)",
            Self::Concat => "concat/concat_ws (PostgreSQL skips NULL arguments)",
            Self::Initcap => "initcap",
            Self::DateDifference => "date - date",
            Self::FractionalDatePart => "extract of seconds or the epoch with their fraction",
            Self::WeekdayDatePart => "extract of the day of the week or year, or ISO weeks",
            Self::AtTimeZone => "AT TIME ZONE",
            Self::FloatToNumeric => "a float cast to numeric (PostgreSQL's 15 significant digits)",
            Self::TimestampDifference => "timestamp - timestamp (an interval of days and time)",
            Self::SessionZone => {
                "a timestamptz's date, time or calendar arithmetic in a session TimeZone other than UTC"
            }
            Self::EmbeddedFunction => {
                "age, percentile_disc or sign of a float (PostgreSQL's definitions)"
            }
        }
    }

    /// The feature printing a value of `data_type` as text needs, if any.
    fn of_text(data_type: &DataType) -> Option<Self> {
        match data_type {
            DataType::Timestamp(_, _)
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_) => Some(Self::TemporalText),
            DataType::Interval(_) => Some(Self::IntervalText),
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Some(Self::FloatText),
            DataType::Boolean => Some(Self::BooleanText),
            _ => None,
        }
    }
}

/// `e` without the casts type coercion put over it (`sign(qty)` of an integer is
/// `sign(CAST(qty AS DOUBLE))`).
fn uncast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(Cast { expr, .. }) => uncast(expr),
        e => e,
    }
}

/// The set of [`Feature`]s a statement relies on.
pub type Features = BTreeSet<Feature>;

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}

/// Argument `index` of a function call as an array (one row when it was one value), and
/// whether it was one value (for [`columnar`]).
pub(crate) fn argument_array(
    args: &ScalarFunctionArgs,
    index: usize,
) -> DfResult<(arrow::array::ArrayRef, bool)> {
    let Some(value) = args.args.get(index) else {
        return datafusion::common::exec_err!("missing argument {}", index + 1);
    };
    let scalar = matches!(value, ColumnarValue::Scalar(_));
    let rows = if scalar { 1 } else { args.number_rows };
    Ok((value.clone().into_array(rows)?, scalar))
}

/// A function's result: one value when every argument was one (`scalar`), else the array.
pub(crate) fn columnar(out: arrow::array::ArrayRef, scalar: bool) -> DfResult<ColumnarValue> {
    Ok(if scalar && out.len() == 1 {
        ColumnarValue::Scalar(datafusion::scalar::ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

/// The input schema an expression of `plan` is typed against (its inputs, merged).
pub(crate) fn input_schema(plan: &LogicalPlan) -> DFSchema {
    let mut schema = DFSchema::empty();
    for input in plan.inputs() {
        schema.merge(input.schema());
    }
    schema
}

/// `plan` (subqueries included) with every expression of the nodes `chosen` picks rewritten
/// bottom-up by `rewrite(e, node's input schema)`. A rewrite may change a type (`ceil` of a
/// numeric, `date_trunc` of a date): each expression keeps its name, so the nodes above still
/// find it, and every node's schema is recomputed.
pub(crate) fn rewrite_plan(
    plan: LogicalPlan,
    chosen: impl Fn(&LogicalPlan) -> bool,
    rewrite: impl Fn(Expr, &DFSchema) -> DfResult<Transformed<Expr>>,
) -> DfResult<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let node = if chosen(&node) {
            let schema = input_schema(&node);
            let names = NamePreserver::new(&node);
            node.map_expressions(|expr| {
                let saved = names.save(&expr);
                let out = expr.transform_up(|e| rewrite(e, &schema))?;
                Ok(out.update_data(|e| saved.restore(e)))
            })?
        } else {
            Transformed::no(node)
        };
        let changed = node.transformed;
        let data = node.data.recompute_schema()?;
        Ok(if changed {
            Transformed::yes(data)
        } else {
            Transformed::no(data)
        })
    })
    .map(|t| t.data)
}

/// Rewrites casts to text of the types PostgreSQL prints its own way (see the module docs).
#[derive(Debug, Default)]
pub struct PgTextCasts;

impl AnalyzerRule for PgTextCasts {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let zone = config
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "UTC".to_string());
        let udf = Arc::new(ScalarUDF::from(PgText::new(zone)));
        let rint = Arc::new(ScalarUDF::from(Rint::default()));
        plan.transform_up_with_subqueries(|node| {
            let schema = input_schema(&node);
            node.map_expressions(|expr| {
                expr.transform_up(|e| {
                    if let Some(rewritten) = crate::pg_float_numeric::float_comparison(&e, &schema)
                        .or_else(|| crate::pg_float_numeric::float_to_numeric(&e, &schema))
                    {
                        return Ok(Transformed::yes(rewritten));
                    }
                    if let Expr::ScalarFunction(f) = &e
                        && f.name() == "round"
                        && f.args.len() == 1
                        && matches!(
                            f.args[0].get_type(&schema),
                            Ok(DataType::Float32 | DataType::Float64)
                        )
                    {
                        return Ok(Transformed::yes(rint.call(f.args.clone())));
                    }
                    let (inner, target, try_cast) = match &e {
                        Expr::Cast(Cast { expr, data_type }) => (expr, data_type, false),
                        Expr::TryCast(TryCast { expr, data_type }) => (expr, data_type, true),
                        _ => return Ok(Transformed::no(e)),
                    };
                    let Ok(from) = inner.get_type(&schema) else {
                        return Ok(Transformed::no(e));
                    };
                    let recast = |value: Expr| {
                        if try_cast {
                            Expr::TryCast(TryCast::new(Box::new(value), target.clone()))
                        } else {
                            Expr::Cast(Cast::new(Box::new(value), target.clone()))
                        }
                    };
                    if target.is_integer() {
                        let rounded = match from {
                            DataType::Decimal128(_, s) | DataType::Decimal256(_, s) if s > 0 => {
                                datafusion::functions::math::expr_fn::round(vec![
                                    inner.as_ref().clone(),
                                ])
                            }
                            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                                rint.call(vec![inner.as_ref().clone()])
                            }
                            _ => return Ok(Transformed::no(e)),
                        };
                        return Ok(Transformed::yes(recast(rounded)));
                    }
                    if !is_text(target) || !pg_text::formats(&from) {
                        return Ok(Transformed::no(e));
                    }
                    let printed = udf.call(vec![inner.as_ref().clone()]);
                    let printed = if *target == DataType::Utf8 {
                        printed
                    } else {
                        Expr::Cast(Cast::new(Box::new(printed), target.clone()))
                    };
                    Ok(Transformed::yes(printed))
                })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakegate_pg_text_casts"
    }
}

/// `lakegate_pg_text(x)`: `x` as PostgreSQL prints it as text.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgText {
    signature: Signature,
    zone: String,
}

impl PgText {
    fn new(zone: String) -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
            zone,
        }
    }
}

impl ScalarUDFImpl for PgText {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "lakegate_pg_text"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let Some(arg) = args.args.into_iter().next() else {
            return datafusion::common::plan_err!("lakegate_pg_text takes one argument");
        };
        let scalar = matches!(arg, ColumnarValue::Scalar(_));
        let array = arg.into_array(if scalar { 1 } else { rows })?;
        let text = match pg_text::to_text(array.as_ref(), &self.zone, Booleans::Words) {
            Some(text) => text,
            None => arrow::compute::cast(&array, &DataType::Utf8)?,
        };
        columnar(text, scalar)
    }
}

/// `lakegate_rint(x)`: `x` rounded to the nearest integer, ties to even (PostgreSQL's `rint`,
/// its float-to-integer cast and `round(float8)`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Rint {
    signature: Signature,
}

impl Default for Rint {
    fn default() -> Self {
        Self {
            signature: Signature::uniform(
                1,
                vec![DataType::Float64, DataType::Float32],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for Rint {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "lakegate_rint"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Float64))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        use arrow::array::{Float32Array, Float64Array};
        use datafusion::scalar::ScalarValue;
        let Some(arg) = args.args.into_iter().next() else {
            return datafusion::common::plan_err!("lakegate_rint takes one argument");
        };
        Ok(match arg {
            ColumnarValue::Scalar(ScalarValue::Float64(v)) => {
                ColumnarValue::Scalar(ScalarValue::Float64(v.map(f64::round_ties_even)))
            }
            ColumnarValue::Scalar(ScalarValue::Float32(v)) => {
                ColumnarValue::Scalar(ScalarValue::Float32(v.map(f32::round_ties_even)))
            }
            ColumnarValue::Array(a) => {
                if let Some(f) = a.as_any().downcast_ref::<Float64Array>() {
                    ColumnarValue::Array(Arc::new(
                        f.iter()
                            .map(|v| v.map(f64::round_ties_even))
                            .collect::<Float64Array>(),
                    ))
                } else if let Some(f) = a.as_any().downcast_ref::<Float32Array>() {
                    ColumnarValue::Array(Arc::new(
                        f.iter()
                            .map(|v| v.map(f32::round_ties_even))
                            .collect::<Float32Array>(),
                    ))
                } else {
                    return datafusion::common::plan_err!("lakegate_rint takes a float");
                }
            }
            other => {
                return datafusion::common::plan_err!(
                    "lakegate_rint takes a float, not {}",
                    other.data_type()
                );
            }
        })
    }
}

/// The features `plan` (analyzed: type coercion's casts are in it) relies on.
pub fn features(plan: &LogicalPlan) -> Features {
    let mut found = Features::new();
    let _ = plan.apply_with_subqueries(|node| {
        let schema = input_schema(node);
        let _ = node.apply_expressions(|expr| {
            expr.apply(|e| {
                if crate::session_zone::sensitive(e, &schema) {
                    found.insert(Feature::SessionZone);
                }
                match e {
                    Expr::Cast(Cast { expr, data_type })
                    | Expr::TryCast(TryCast { expr, data_type })
                        if is_text(data_type) =>
                    {
                        if let Some(f) = expr
                            .get_type(&schema)
                            .ok()
                            .as_ref()
                            .and_then(Feature::of_text)
                        {
                            found.insert(f);
                        }
                    }
                    Expr::Cast(Cast { expr, data_type })
                    | Expr::TryCast(TryCast { expr, data_type })
                        if data_type.is_integer() =>
                    {
                        let rounds = matches!(
                            expr.as_ref(),
                            Expr::ScalarFunction(f) if f.name() == "lakegate_rint" || f.name() == "round"
                        ) || matches!(
                            expr.get_type(&schema),
                            Ok(DataType::Float16
                                | DataType::Float32
                                | DataType::Float64
                                | DataType::Decimal128(..)
                                | DataType::Decimal256(..))
                        );
                        if rounds {
                            found.insert(Feature::IntegerCast);
                        }
                    }
                    Expr::ScalarFunction(f) if f.name() == "concat" || f.name() == "concat_ws" => {
                        found.insert(Feature::Concat);
                    }
                    Expr::ScalarFunction(f) if f.name() == "initcap" => {
                        found.insert(Feature::Initcap);
                    }
                    Expr::ScalarFunction(f)
                        if crate::pg_functions::embedded_only(
                            f.name(),
                            f.args.first().map(uncast).and_then(|a| a.get_type(&schema).ok()).as_ref(),
                        ) =>
                    {
                        found.insert(Feature::EmbeddedFunction);
                    }
                    Expr::AggregateFunction(AggregateFunction { func, .. })
                        if crate::pg_functions::embedded_only(func.name(), None) =>
                    {
                        found.insert(Feature::EmbeddedFunction);
                    }
                    Expr::ScalarFunction(f) if f.name() == crate::pg_float_numeric::NAME => {
                        found.insert(Feature::FloatToNumeric);
                    }
                    Expr::ScalarFunction(f) if f.name() == crate::pg_zone::NAME => {
                        found.insert(Feature::AtTimeZone);
                    }
                    Expr::ScalarFunction(f) if f.name() == crate::pg_temporal::JUSTIFY_HOURS => {
                        found.insert(Feature::TimestampDifference);
                    }
                    Expr::ScalarFunction(f)
                        if let Some(field) = crate::pg_extract::call_field(f.name(), &f.args) =>
                    {
                        if crate::pg_extract::fractional(&field) {
                            found.insert(Feature::FractionalDatePart);
                        }
                        if crate::pg_extract::weekday(&field) {
                            found.insert(Feature::WeekdayDatePart);
                        }
                    }
                    Expr::ScalarFunction(f) if f.name() == "lakegate_pg_text" => {
                        if let Some(feature) = f
                            .args
                            .first()
                            .and_then(|a| a.get_type(&schema).ok())
                            .as_ref()
                            .and_then(Feature::of_text)
                        {
                            found.insert(feature);
                        }
                    }
                    Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                        let types = (left.get_type(&schema), right.get_type(&schema));
                        if let (Ok(l), Ok(r)) = types {
                            let decimal = |t: &DataType| {
                                matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
                            };
                            if *op == Operator::Divide && (decimal(&l) || decimal(&r)) {
                                found.insert(Feature::NumericDivision);
                            }
                            if *op == Operator::Minus
                                && matches!((&l, &r), (DataType::Date32, DataType::Date32))
                            {
                                found.insert(Feature::DateDifference);
                            }
                            let interval = |t: &DataType| matches!(t, DataType::Interval(_));
                            if matches!(op, Operator::Plus | Operator::Minus)
                                && (interval(&l) || interval(&r))
                                // In a filter only the truth counts — but a timestamptz's days
                                // are the session zone's in PostgreSQL.
                                && (!matches!(node, LogicalPlan::Filter(_))
                                    || matches!(&l, DataType::Timestamp(_, Some(_)))
                                    || matches!(&r, DataType::Timestamp(_, Some(_))))
                            {
                                found.insert(Feature::IntervalArithmetic);
                            }
                        }
                    }
                    Expr::AggregateFunction(AggregateFunction { func, params })
                        if func.name().eq_ignore_ascii_case("avg")
                            && params.args.first().is_some_and(|a| {
                                matches!(
                                    a.get_type(&schema),
                                    Ok(DataType::Decimal128(..) | DataType::Decimal256(..))
                                )
                            }) =>
                    {
                        found.insert(Feature::NumericAverage);
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        });
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

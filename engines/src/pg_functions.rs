//! PostgreSQL functions DataFusion lacks or defines differently, as PostgreSQL defines them:
//!
//! - `sign(x)`: `double precision` for integers and floats (PostgreSQL resolves `sign(int)` to
//!   `sign(float8)`, its preferred numeric type), `numeric` -1/0/1 for numerics; a NaN's sign is
//!   0, as PostgreSQL's comparisons give it.
//! - `age(timestamp, timestamp)`: the symbolic difference in years, months, days and time,
//!   borrowing a month's days from the earlier argument's month as PostgreSQL's
//!   `timestamp_age` does (`age('2024-06-01', '2023-12-30 09:37:01')` is `5 mons 1 day
//!   14:22:59`). A `timestamptz` (split in the session zone) is not taken here.
//! - `percentile_disc(f) WITHIN GROUP (ORDER BY x)`: the first value, in the group's order,
//!   whose position reaches `f` of the non-NULL values (row `ceil(f × n)`, at least the first);
//!   NULL for no rows; `f` outside [0, 1] is error 22003.
//!
//! Other engines' functions of these names are not verified to agree, so a statement calling
//! them is refused there ([`Feature::EmbeddedFunction`](crate::semantics::Feature)).

use std::any::Any;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Float64Array, IntervalMonthDayNanoArray,
};
use arrow::compute::SortOptions;
use arrow::datatypes::{
    DataType, Field, FieldRef, IntervalMonthDayNano, IntervalUnit, TimeUnit,
    TimestampMicrosecondType,
};
use chrono::{Datelike, NaiveDate, Timelike};
use datafusion::common::{Result as DfResult, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

/// The scalar functions of this module.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(Sign::default()),
        ScalarUDF::from(Age::default()),
    ]
}

/// `percentile_disc`.
pub fn percentile_disc() -> AggregateUDF {
    AggregateUDF::from(PercentileDisc::default())
}

/// Names of this module's functions whose call other engines may answer differently.
pub(crate) fn embedded_only(name: &str, first_argument: Option<&DataType>) -> bool {
    match name {
        "age" | "percentile_disc" => true,
        "sign" => matches!(first_argument, Some(t) if t.is_floating() || t.is_integer()),
        _ => false,
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Sign {
    signature: Signature,
}

impl Default for Sign {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Sign {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "sign"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [DataType::Decimal128(..)] => Ok(arg_types.to_vec()),
            [DataType::Decimal256(p, s)] => Ok(vec![DataType::Decimal128((*p).min(38), *s)]),
            [t] if t.is_numeric() || t.is_null() => Ok(vec![DataType::Float64]),
            [t] => plan_err!("function sign({t}) does not exist"),
            _ => plan_err!("sign takes one argument"),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match arg_types.first() {
            Some(DataType::Decimal128(..)) => DataType::Decimal128(1, 0),
            _ => DataType::Float64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let (array, scalar) = crate::semantics::argument_array(&args, 0)?;
        let out: ArrayRef = match array.data_type() {
            DataType::Decimal128(..) => Arc::new(
                array
                    .as_primitive::<arrow::datatypes::Decimal128Type>()
                    .iter()
                    .map(|v| v.map(i128::signum))
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(1, 0)?,
            ),
            DataType::Float64 => Arc::new(
                array
                    .as_primitive::<arrow::datatypes::Float64Type>()
                    .iter()
                    .map(|v| v.map(float_sign))
                    .collect::<Float64Array>(),
            ),
            t => return exec_err!("sign of {t}"),
        };
        crate::semantics::columnar(out, scalar)
    }
}

/// PostgreSQL's `sign(float8)`: 1 above zero, -1 below, else 0 (NaN included).
fn float_sign(v: f64) -> f64 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Age {
    signature: Signature,
}

impl Default for Age {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

const MICROS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

impl ScalarUDFImpl for Age {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "age"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let timestamp = |t: &DataType| match t {
            // A date is its midnight (PostgreSQL casts it; the wall clocks' difference is the
            // same in any zone).
            DataType::Timestamp(_, None)
            | DataType::Date32
            | DataType::Utf8
            | DataType::Utf8View => Some(MICROS),
            _ => None,
        };
        match arg_types {
            [a, b] => match (timestamp(a), timestamp(b)) {
                (Some(a), Some(b)) => Ok(vec![a, b]),
                _ => {
                    plan_err!("age({a}, {b}) is computed only for two timestamps without time zone")
                }
            },
            _ => plan_err!("age takes two timestamps (the one-argument form is not supported)"),
        }
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let (a, scalar_a) = crate::semantics::argument_array(&args, 0)?;
        let (b, scalar_b) = crate::semantics::argument_array(&args, 1)?;
        let a = a.as_primitive::<TimestampMicrosecondType>();
        let b = b.as_primitive::<TimestampMicrosecondType>();
        let rows = a.len().max(b.len());
        let at = |array: &arrow::array::TimestampMicrosecondArray, i: usize| {
            let i = if array.len() == 1 { 0 } else { i };
            array.is_valid(i).then(|| array.value(i))
        };
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            out.push(match (at(a, i), at(b, i)) {
                (Some(x), Some(y)) => match age(x, y) {
                    Some(v) => Some(v),
                    None => return exec_err!("timestamp out of range"),
                },
                _ => None,
            });
        }
        let out: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(out));
        crate::semantics::columnar(out, scalar_a && scalar_b)
    }
}

/// The fields of a timestamp in microseconds: the date, hours, minutes, seconds, microseconds.
fn fields(micros: i64) -> Option<(NaiveDate, i64, i64, i64, i64)> {
    let t = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    Some((
        t.date(),
        i64::from(t.hour()),
        i64::from(t.minute()),
        i64::from(t.second()),
        i64::from(t.nanosecond() / 1000),
    ))
}

fn days_in_month(year: i32, month: u32) -> i64 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    match (
        NaiveDate::from_ymd_opt(year, month, 1),
        NaiveDate::from_ymd_opt(next_year, next_month, 1),
    ) {
        (Some(a), Some(b)) => (b - a).num_days(),
        _ => 30,
    }
}

/// PostgreSQL's `age(x, y)` of two timestamps in microseconds.
fn age(x: i64, y: i64) -> Option<IntervalMonthDayNano> {
    let (d1, h1, m1, s1, f1) = fields(x)?;
    let (d2, h2, m2, s2, f2) = fields(y)?;
    let mut v = [
        f1 - f2,
        s1 - s2,
        m1 - m2,
        h1 - h2,
        i64::from(d1.day()) - i64::from(d2.day()),
        i64::from(d1.month()) - i64::from(d2.month()),
        i64::from(d1.year()) - i64::from(d2.year()),
    ];
    let flip = x < y;
    if flip {
        v.iter_mut().for_each(|f| *f = -*f);
    }
    let [fsec, sec, min, hour, mday, mon, year] = &mut v;
    while *fsec < 0 {
        *fsec += 1_000_000;
        *sec -= 1;
    }
    while *sec < 0 {
        *sec += 60;
        *min -= 1;
    }
    while *min < 0 {
        *min += 60;
        *hour -= 1;
    }
    while *hour < 0 {
        *hour += 24;
        *mday -= 1;
    }
    // The days of the earlier timestamp's month.
    let borrow = if flip { d1 } else { d2 };
    while *mday < 0 {
        *mday += days_in_month(borrow.year(), borrow.month());
        *mon -= 1;
    }
    while *mon < 0 {
        *mon += 12;
        *year -= 1;
    }
    if flip {
        v.iter_mut().for_each(|f| *f = -*f);
    }
    let [fsec, sec, min, hour, mday, mon, year] = v;
    let months = i32::try_from(year * 12 + mon).ok()?;
    let days = i32::try_from(mday).ok()?;
    let nanos = (((hour * 60 + min) * 60 + sec) * 1_000_000 + fsec).checked_mul(1000)?;
    Some(IntervalMonthDayNano::new(months, days, nanos))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PercentileDisc {
    signature: Signature,
}

impl Default for PercentileDisc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for PercentileDisc {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "percentile_disc"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [value, fraction] if fraction.is_numeric() || fraction.is_null() => {
                Ok(vec![value.clone(), DataType::Float64])
            }
            _ => plan_err!(
                "percentile_disc takes a fraction and an ordering: \
                 percentile_disc(0.5) WITHIN GROUP (ORDER BY x)"
            ),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(t) => Ok(t.clone()),
            None => plan_err!("percentile_disc needs an ordering"),
        }
    }

    fn supports_within_group_clause(&self) -> bool {
        true
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let item = Field::new_list_field(args.input_fields[0].data_type().clone(), true);
        Ok(vec![Arc::new(Field::new(
            format!("{}[values]", args.name),
            DataType::List(Arc::new(item)),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let [_, fraction] = args.exprs else {
            return plan_err!("percentile_disc needs a fraction and an ordering");
        };
        let one_row = arrow::array::RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::empty()),
            vec![],
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let fraction = match fraction.evaluate(&one_row) {
            Ok(ColumnarValue::Scalar(ScalarValue::Float64(v))) => v,
            _ => return plan_err!("percentile_disc's fraction must be a constant"),
        };
        if let Some(f) = fraction
            && !(0.0..=1.0).contains(&f)
        {
            return Err(crate::Error::Value {
                kind: crate::ErrorKind::NumericOutOfRange,
                message: format!("percentile value {f} is not between 0 and 1"),
            }
            .into_datafusion());
        }
        Ok(Box::new(DiscAccumulator {
            data_type: args.expr_fields[0].data_type().clone(),
            fraction,
            descending: args.order_bys.first().is_some_and(|o| o.options.descending),
            values: Vec::new(),
        }))
    }
}

#[derive(Debug)]
struct DiscAccumulator {
    data_type: DataType,
    fraction: Option<f64>,
    descending: bool,
    /// The group's non-NULL values so far.
    values: Vec<ArrayRef>,
}

impl DiscAccumulator {
    fn all(&self) -> DfResult<Option<ArrayRef>> {
        if self.values.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&dyn Array> = self.values.iter().map(|a| a.as_ref()).collect();
        Ok(Some(arrow::compute::concat(&refs)?))
    }

    fn keep(&mut self, values: &ArrayRef) -> DfResult<()> {
        let values = if values.null_count() > 0 {
            let valid = arrow::compute::is_not_null(values)?;
            arrow::compute::filter(values, &valid)?
        } else {
            values.clone()
        };
        if !values.is_empty() {
            self.values.push(values);
        }
        Ok(())
    }
}

impl Accumulator for DiscAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        match values.first() {
            Some(v) => self.keep(v),
            None => Ok(()),
        }
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let Some(lists) = states.first() else {
            return Ok(());
        };
        let lists = lists.as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_valid(i) {
                self.keep(&lists.value(i))?;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let all = match self.all()? {
            Some(all) => all,
            None => arrow::array::new_empty_array(&self.data_type),
        };
        Ok(vec![ScalarValue::List(Arc::new(
            datafusion::common::utils::SingleRowListArrayBuilder::new(all)
                .with_nullable(true)
                .build_list_array(),
        ))])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let (Some(fraction), Some(all)) = (self.fraction, self.all()?) else {
            return ScalarValue::try_from(&self.data_type);
        };
        let n = all.len();
        let row = ((fraction * n as f64).ceil() as usize).clamp(1, n);
        let order = arrow::compute::sort_to_indices(
            &all,
            Some(SortOptions {
                descending: self.descending,
                nulls_first: false,
            }),
            Some(row),
        )?;
        ScalarValue::try_from_array(&all, order.value(row - 1) as usize)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .values
                .iter()
                .map(|a| a.get_array_memory_size())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(text: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
            .expect("timestamp")
            .and_utc()
            .timestamp_micros()
    }

    #[test]
    fn age_borrows_the_earlier_months_days() {
        let a = age(micros("2024-06-01 00:00:00"), micros("2023-12-30 09:37:01")).expect("age");
        let time = ((14 * 60 + 22) * 60 + 59) * 1_000_000_000;
        assert_eq!(a, IntervalMonthDayNano::new(5, 1, time));
        // Reversed: every field negative (PostgreSQL: -5 mons -1 days -14:22:59).
        let b = age(micros("2023-12-30 09:37:01"), micros("2024-06-01 00:00:00")).expect("age");
        assert_eq!(b, IntervalMonthDayNano::new(-5, -1, -time));
        // February of a leap year lends 29 days: age('2024-03-01', '2024-02-15') is 15 days.
        let c = age(micros("2024-03-01 00:00:00"), micros("2024-02-15 00:00:00")).expect("age");
        assert_eq!(c, IntervalMonthDayNano::new(0, 15, 0));
        let d = age(
            micros("2024-01-01 00:00:00.25"),
            micros("2023-12-31 23:59:59.5"),
        )
        .expect("age");
        assert_eq!(d, IntervalMonthDayNano::new(0, 0, 750_000_000));
    }

    #[test]
    fn percentile_disc_takes_row_ceil_of_the_fraction() {
        let values: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![
            Some(5),
            None,
            Some(1),
            Some(3),
            Some(2),
            Some(4),
        ]));
        let at = |fraction: f64, descending: bool| {
            let mut acc = DiscAccumulator {
                data_type: DataType::Int64,
                fraction: Some(fraction),
                descending,
                values: Vec::new(),
            };
            acc.update_batch(std::slice::from_ref(&values))
                .expect("update");
            acc.evaluate().expect("evaluate")
        };
        assert_eq!(at(0.0, false), ScalarValue::Int64(Some(1)));
        assert_eq!(at(0.5, false), ScalarValue::Int64(Some(3)));
        assert_eq!(at(0.9, false), ScalarValue::Int64(Some(5)));
        assert_eq!(at(0.41, false), ScalarValue::Int64(Some(3)));
        assert_eq!(at(0.2, true), ScalarValue::Int64(Some(5)));
        let mut empty = DiscAccumulator {
            data_type: DataType::Int64,
            fraction: Some(0.5),
            descending: false,
            values: Vec::new(),
        };
        assert_eq!(
            empty.evaluate().expect("evaluate"),
            ScalarValue::Int64(None)
        );
    }

    #[test]
    fn sign_of_a_nan_is_zero() {
        assert_eq!(float_sign(f64::NAN), 0.0);
        assert_eq!(float_sign(-0.0), 0.0);
        assert_eq!(float_sign(-3.5), -1.0);
    }
}

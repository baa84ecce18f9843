//! PostgreSQL's `to_char(timestamp | timestamptz | date, pattern)` on the embedded engine, with
//! PostgreSQL's template patterns (`YYYY-MM-DD`, `Mon DD, YYYY`, `HH12:MI AM`, `"Q"Q`, `FM`,
//! `IYYY-IW`, ...). DataFusion's own `to_char` reads chrono patterns (`%Y`), so PostgreSQL's
//! `'YYYY-MM'` came back as the text `YYYY-MM`. A timestamptz is shown in the session's time
//! zone. Characters that are not a pattern are copied, as PostgreSQL does; `to_char` of a
//! number is refused (not implemented) rather than answered differently.

use std::any::Any;
use std::fmt::Write;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use chrono::{Datelike, NaiveDateTime, Offset, TimeZone, Timelike};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The `to_char` UDF for a session in time zone `zone`.
pub fn udf(zone: &str) -> ScalarUDF {
    ScalarUDF::from(ToChar {
        signature: Signature::any(2, Volatility::Immutable),
        zone: zone.to_string(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToChar {
    signature: Signature,
    zone: String,
}

impl ScalarUDFImpl for ToChar {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64) => {
                Ok(DataType::Utf8)
            }
            Some(other) => datafusion::common::not_impl_err!(
                "to_char of {other} is not supported yet (only timestamps and dates)"
            ),
            None => datafusion::common::plan_err!("to_char takes a value and a pattern"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if all_scalar { 1 } else { rows };
        let mut arrays = args.args.into_iter().map(|a| a.into_array(n));
        let (Some(values), Some(patterns)) = (arrays.next(), arrays.next()) else {
            return datafusion::common::plan_err!("to_char takes a value and a pattern");
        };
        let (values, patterns) = (values?, patterns?);
        let patterns = arrow::compute::cast(&patterns, &DataType::Utf8)?;
        let patterns = patterns.as_string::<i32>();
        let zone = crate::pg_text::zone_for(&self.zone);
        let micros = micros_of(&values)?;
        let out: StringArray = (0..n)
            .map(|i| {
                if values.is_null(i) || patterns.is_null(i) {
                    return None;
                }
                let (local, abbrev) = local_time(micros(i), values.data_type(), &zone)?;
                Some(format(&local, patterns.value(i), &abbrev))
            })
            .collect();
        let out: ArrayRef = Arc::new(out);
        crate::semantics::columnar(out, all_scalar)
    }
}

/// Microseconds since the epoch of row `i` of a timestamp or date array.
fn micros_of(values: &ArrayRef) -> DfResult<Box<dyn Fn(usize) -> i64 + '_>> {
    use arrow::datatypes::*;
    Ok(match values.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => {
            let a = values.as_primitive::<TimestampSecondType>();
            Box::new(move |i| a.value(i).saturating_mul(1_000_000))
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            let a = values.as_primitive::<TimestampMillisecondType>();
            Box::new(move |i| a.value(i).saturating_mul(1000))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let a = values.as_primitive::<TimestampMicrosecondType>();
            Box::new(move |i| a.value(i))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            let a = values.as_primitive::<TimestampNanosecondType>();
            Box::new(move |i| a.value(i) / 1000)
        }
        DataType::Date32 => {
            let a = values.as_primitive::<Date32Type>();
            Box::new(move |i| i64::from(a.value(i)) * 86_400_000_000)
        }
        DataType::Date64 => {
            let a = values.as_primitive::<Date64Type>();
            Box::new(move |i| a.value(i) * 1000)
        }
        other => {
            return datafusion::common::not_impl_err!("to_char of {other} is not supported yet");
        }
    })
}

/// The wall-clock time to format and the zone's abbreviation (`TZ`).
fn local_time(
    micros: i64,
    data_type: &DataType,
    zone: &crate::pg_text::Zone,
) -> Option<(NaiveDateTime, String)> {
    let utc = chrono::DateTime::from_timestamp_micros(micros)?;
    if !matches!(data_type, DataType::Timestamp(_, Some(_))) {
        return Some((utc.naive_utc(), String::new()));
    }
    Some(match zone {
        crate::pg_text::Zone::Named(tz) => {
            let t = utc.with_timezone(tz);
            (t.naive_local(), t.offset().to_string())
        }
        crate::pg_text::Zone::Fixed(f) => {
            let t = f.from_utc_datetime(&utc.naive_utc());
            (t.naive_local(), f.fix().to_string())
        }
    })
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The patterns, longest first (so `MONTH` wins over `MON` and `MM`, `HH24` over `HH`).
const PATTERNS: &[&str] = &[
    "MONTH", "Month", "month", "HH24", "HH12", "IYYY", "YYYY", "Y,YYY", "A.M.", "a.m.", "P.M.",
    "p.m.", "DAY", "Day", "day", "MON", "Mon", "mon", "YYY", "IYY", "DDD", "IDDD", "SSSS", "SSSSS",
    "AM", "am", "PM", "pm", "DY", "Dy", "dy", "YY", "IY", "MM", "DD", "ID", "IW", "WW", "HH", "MI",
    "SS", "MS", "US", "TZ", "tz", "Q", "D", "Y", "I", "J",
];

/// `t` formatted with PostgreSQL template `pattern`.
pub fn format(t: &NaiveDateTime, pattern: &str, zone: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut rest = pattern;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            // Literal text in double quotes (a backslash escapes a quote).
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => out.push(c),
                }
            }
            rest = &quoted[end.min(quoted.len())..];
            continue;
        }
        let (fill, body) = match rest.strip_prefix("FM") {
            Some(b) => (true, b),
            None => (false, rest),
        };
        // The longest pattern at this point (PATTERNS is not sorted by length: pick it).
        let hit = PATTERNS
            .iter()
            .filter(|p| body.starts_with(**p))
            .max_by_key(|p| p.len());
        match hit {
            Some(p) => {
                field(&mut out, t, p, fill, zone);
                rest = &body[p.len()..];
            }
            None => {
                let mut chars = rest.chars();
                if let Some(c) = chars.next() {
                    out.push(c);
                }
                rest = chars.as_str();
            }
        }
    }
    out
}

fn field(out: &mut String, t: &NaiveDateTime, p: &str, fill: bool, zone: &str) {
    let num = |out: &mut String, v: i64, width: usize| {
        if fill {
            let _ = write!(out, "{v}");
        } else {
            let _ = write!(out, "{v:0width$}");
        }
    };
    let name = |out: &mut String, word: &str, upper: bool, lower: bool, width: usize| {
        let w = if upper {
            word.to_uppercase()
        } else if lower {
            word.to_lowercase()
        } else {
            word.to_string()
        };
        if fill {
            out.push_str(&w);
        } else {
            let _ = write!(out, "{w:<width$}");
        }
    };
    let hour12 = match t.hour() % 12 {
        0 => 12,
        h => h,
    };
    let pm = t.hour() >= 12;
    let iso = t.iso_week();
    match p {
        "YYYY" => num(out, i64::from(t.year()), 4),
        "Y,YYY" => {
            let y = t.year();
            let _ = write!(out, "{},{:03}", y / 1000, y % 1000);
        }
        "YYY" => num(out, i64::from(t.year() % 1000), 3),
        "YY" => num(out, i64::from(t.year() % 100), 2),
        "Y" => num(out, i64::from(t.year() % 10), 1),
        "IYYY" => num(out, i64::from(iso.year()), 4),
        "IYY" => num(out, i64::from(iso.year() % 1000), 3),
        "IY" => num(out, i64::from(iso.year() % 100), 2),
        "I" => num(out, i64::from(iso.year() % 10), 1),
        "MM" => num(out, i64::from(t.month()), 2),
        "MONTH" | "Month" | "month" => {
            let m = MONTHS[t.month0() as usize];
            name(out, m, p == "MONTH", p == "month", 9);
        }
        "MON" | "Mon" | "mon" => {
            let m = &MONTHS[t.month0() as usize][..3];
            name(out, m, p == "MON", p == "mon", 3);
        }
        "DAY" | "Day" | "day" => {
            let d = DAYS[t.weekday().num_days_from_sunday() as usize];
            name(out, d, p == "DAY", p == "day", 9);
        }
        "DY" | "Dy" | "dy" => {
            let d = &DAYS[t.weekday().num_days_from_sunday() as usize][..3];
            name(out, d, p == "DY", p == "dy", 3);
        }
        "DD" => num(out, i64::from(t.day()), 2),
        "DDD" => num(out, i64::from(t.ordinal()), 3),
        "IDDD" => num(
            out,
            i64::from((iso.week() - 1) * 7 + t.weekday().number_from_monday()),
            3,
        ),
        "D" => num(out, i64::from(t.weekday().num_days_from_sunday() + 1), 1),
        "ID" => num(out, i64::from(t.weekday().number_from_monday()), 1),
        "IW" => num(out, i64::from(iso.week()), 2),
        "WW" => num(out, i64::from((t.ordinal() - 1) / 7 + 1), 2),
        "Q" => num(out, i64::from(t.month0() / 3 + 1), 1),
        "J" => {
            let jd = t.date().num_days_from_ce() + 1_721_425;
            let _ = write!(out, "{jd}");
        }
        "HH" | "HH12" => num(out, i64::from(hour12), 2),
        "HH24" => num(out, i64::from(t.hour()), 2),
        "MI" => num(out, i64::from(t.minute()), 2),
        "SS" => num(out, i64::from(t.second()), 2),
        "MS" => num(out, i64::from(t.nanosecond() / 1_000_000), 3),
        "US" => num(out, i64::from(t.nanosecond() / 1000), 6),
        "SSSS" | "SSSSS" => {
            let _ = write!(out, "{}", t.num_seconds_from_midnight());
        }
        "AM" | "PM" => out.push_str(if pm { "PM" } else { "AM" }),
        "am" | "pm" => out.push_str(if pm { "pm" } else { "am" }),
        "A.M." | "P.M." => out.push_str(if pm { "P.M." } else { "A.M." }),
        "a.m." | "p.m." => out.push_str(if pm { "p.m." } else { "a.m." }),
        "TZ" => out.push_str(&zone.to_uppercase()),
        "tz" => out.push_str(&zone.to_lowercase()),
        _ => out.push_str(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").expect("time")
    }

    #[test]
    fn postgresql_patterns() {
        // (pattern, PostgreSQL 15's to_char(timestamp '2024-03-07 14:05:09.5', pattern))
        let t = at("2024-03-07 14:05:09.5");
        let cases = [
            ("YYYY-MM-DD", "2024-03-07"),
            ("HH24:MI:SS", "14:05:09"),
            ("Mon DD, YYYY", "Mar 07, 2024"),
            ("YYYY-MM-DD HH12:MI AM", "2024-03-07 02:05 PM"),
            ("Day", "Thursday "),
            ("FMDay", "Thursday"),
            ("DY", "THU"),
            ("YYYY\"Q\"Q", "2024Q1"),
            ("IYYY-IW", "2024-10"),
            ("DD/MM/YYYY", "07/03/2024"),
            ("FMMonth FMDD", "March 7"),
            ("MONTH", "MARCH    "),
            ("HH24:MI:SS.MS", "14:05:09.500"),
            ("DDD D", "067 5"),
            ("YYYY-MM", "2024-03"),
        ];
        for (pattern, pg) in cases {
            assert_eq!(format(&t, pattern, ""), pg, "{pattern}");
        }
    }
}

//! PostgreSQL's text output of values, exactly as `psql` shows them: what every engine's
//! answer is formatted with on the wire (text format), and what a `CAST(x AS text)` returns on
//! the embedded engine. Arrow, chrono and the other engines each print these types their own
//! way (`2024-03-01T00:00:01.500`, `1.0`, `inf`, `7.57E1`); PostgreSQL's rules are:
//!
//! - `timestamp`: `YYYY-MM-DD HH:MM:SS[.ffffff]`, trailing fractional zeros dropped, ` BC`
//!   for years before 1; `timestamptz` the same in the session's `TimeZone`, then the offset
//!   (`+00`, `+05:30`, `-03:30:15`); `date`: `YYYY-MM-DD`; `time`: `HH:MM:SS[.ffffff]`.
//! - `interval` (IntervalStyle `postgres`): `1 year 2 mons 3 days 04:05:06.5`,
//!   `-1 days +02:00:00`, `00:00:00`.
//! - `float8` / `float4`: the shortest text that reads back as the same value, in fixed
//!   notation for decimal exponents from -4 to 14 (float4: 5), else `1e+20`, `1.5e-05`;
//!   `Infinity`, `-Infinity`, `NaN`.
//! - `boolean`: `t` / `f` on the wire, `true` / `false` as text.

use std::fmt::Write;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float16Array, Float32Array, Float64Array, StringArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, IntervalDayTimeType, IntervalMonthDayNanoType, IntervalUnit,
    IntervalYearMonthType, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike};

/// How a boolean is spelled: on the wire (`t`) or as the text of a cast (`true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Booleans {
    /// `t` / `f` (a boolean column's text format).
    Wire,
    /// `true` / `false` (`CAST(b AS text)`).
    Words,
}

/// Whether [`to_text`] formats `data_type` differently from Arrow's own cast to text.
pub fn formats(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Timestamp(_, _)
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Interval(_)
            | DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Boolean
    )
}

/// `array` as PostgreSQL prints it (`time_zone` for `timestamptz`); `None` for a type Arrow's
/// cast already prints as PostgreSQL does (integers, text, decimals).
pub fn to_text(array: &dyn Array, time_zone: &str, booleans: Booleans) -> Option<ArrayRef> {
    let zone = zone(time_zone);
    let text: StringArray = match array.data_type() {
        DataType::Timestamp(unit, tz) => {
            let micros = |i: usize| -> i64 {
                match unit {
                    TimeUnit::Second => array
                        .as_primitive::<TimestampSecondType>()
                        .value(i)
                        .saturating_mul(1_000_000),
                    TimeUnit::Millisecond => array
                        .as_primitive::<TimestampMillisecondType>()
                        .value(i)
                        .saturating_mul(1000),
                    TimeUnit::Microsecond => {
                        array.as_primitive::<TimestampMicrosecondType>().value(i)
                    }
                    // PostgreSQL keeps microseconds: round half away from zero as it would
                    // on input.
                    TimeUnit::Nanosecond => {
                        let n = array.as_primitive::<TimestampNanosecondType>().value(i);
                        (n as f64 / 1000.0).round() as i64
                    }
                }
            };
            (0..array.len())
                .map(|i| {
                    (!array.is_null(i)).then(|| match tz {
                        Some(_) => timestamptz(micros(i), &zone),
                        None => timestamp(micros(i)),
                    })
                })
                .collect()
        }
        DataType::Date32 => {
            let a = array.as_primitive::<Date32Type>();
            a.iter().map(|d| d.map(|d| date(i64::from(d)))).collect()
        }
        DataType::Date64 => {
            let a = array.as_primitive::<Date64Type>();
            a.iter()
                .map(|d| d.map(|ms| date(ms.div_euclid(86_400_000))))
                .collect()
        }
        DataType::Time32(TimeUnit::Second) => {
            let a = array.as_primitive::<Time32SecondType>();
            a.iter()
                .map(|t| t.map(|s| time(i64::from(s) * 1_000_000)))
                .collect()
        }
        DataType::Time32(_) => {
            let a = array.as_primitive::<Time32MillisecondType>();
            a.iter()
                .map(|t| t.map(|ms| time(i64::from(ms) * 1000)))
                .collect()
        }
        DataType::Time64(TimeUnit::Nanosecond) => {
            let a = array.as_primitive::<Time64NanosecondType>();
            a.iter().map(|t| t.map(|n| time(n / 1000))).collect()
        }
        DataType::Time64(_) => {
            let a = array.as_primitive::<Time64MicrosecondType>();
            a.iter().map(|t| t.map(time)).collect()
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let a = array.as_primitive::<IntervalMonthDayNanoType>();
            a.iter()
                .map(|v| v.map(|v| interval(v.months, v.days, v.nanoseconds / 1000)))
                .collect()
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let a = array.as_primitive::<IntervalDayTimeType>();
            a.iter()
                .map(|v| v.map(|v| interval(0, v.days, i64::from(v.milliseconds) * 1000)))
                .collect()
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            let a = array.as_primitive::<IntervalYearMonthType>();
            a.iter().map(|v| v.map(|m| interval(m, 0, 0))).collect()
        }
        DataType::Float64 => {
            let a = array.as_any().downcast_ref::<Float64Array>()?;
            a.iter().map(|v| v.map(float8)).collect()
        }
        DataType::Float32 => {
            let a = array.as_any().downcast_ref::<Float32Array>()?;
            a.iter().map(|v| v.map(float4)).collect()
        }
        DataType::Float16 => {
            let a = array.as_any().downcast_ref::<Float16Array>()?;
            a.iter().map(|v| v.map(|v| float4(v.to_f32()))).collect()
        }
        DataType::Boolean => {
            let a = array.as_any().downcast_ref::<BooleanArray>()?;
            let (t, f) = match booleans {
                Booleans::Wire => ("t", "f"),
                Booleans::Words => ("true", "false"),
            };
            a.iter()
                .map(|v| v.map(|b| if b { t } else { f }.to_string()))
                .collect()
        }
        _ => return None,
    };
    Some(Arc::new(text))
}

/// The session's time zone: a name (`Europe/Paris`) or a fixed offset (`+02:00`); UTC when
/// neither parses.
pub(crate) fn zone_for(name: &str) -> Zone {
    zone(name)
}

fn zone(name: &str) -> Zone {
    if let Ok(tz) = name.parse::<chrono_tz::Tz>() {
        return Zone::Named(tz);
    }
    match parse_offset(name).and_then(chrono::FixedOffset::east_opt) {
        Some(offset) => Zone::Fixed(offset),
        None => Zone::Named(chrono_tz::UTC),
    }
}

/// `+HH[:MM]` / `-HH[:MM]` in seconds east of UTC.
fn parse_offset(v: &str) -> Option<i32> {
    let (sign, rest) = match v.as_bytes().first()? {
        b'+' => (1, &v[1..]),
        b'-' => (-1, &v[1..]),
        _ => return None,
    };
    let mut parts = rest.split(':');
    let h: i32 = parts.next()?.parse().ok()?;
    let m: i32 = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    (h <= 15 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// A session time zone, resolved.
pub(crate) enum Zone {
    /// A zone of the tz database.
    Named(chrono_tz::Tz),
    /// A fixed offset.
    Fixed(chrono::FixedOffset),
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff][ BC]` of microseconds since the Unix epoch.
pub fn timestamp(micros: i64) -> String {
    match DateTime::from_timestamp_micros(micros) {
        Some(t) => {
            let mut out = String::with_capacity(26);
            write_date_time(&mut out, &t.naive_utc());
            out
        }
        None => micros.to_string(),
    }
}

/// A `timestamptz` in `zone`: the local time, then the offset as PostgreSQL prints it.
fn timestamptz(micros: i64, zone: &Zone) -> String {
    let Some(utc) = DateTime::from_timestamp_micros(micros) else {
        return micros.to_string();
    };
    let (local, offset) = match zone {
        Zone::Named(tz) => {
            let t = utc.with_timezone(tz);
            (t.naive_local(), t.offset().fix().local_minus_utc())
        }
        Zone::Fixed(f) => {
            let t = f.from_utc_datetime(&utc.naive_utc());
            (t.naive_local(), f.local_minus_utc())
        }
    };
    let mut out = String::with_capacity(32);
    let bc = local.year() <= 0;
    write_date_time(&mut out, &local);
    // ` BC` goes after the offset in PostgreSQL.
    if bc {
        out.truncate(out.len() - 3);
    }
    let sign = if offset < 0 { '-' } else { '+' };
    let a = offset.unsigned_abs();
    let _ = write!(out, "{sign}{:02}", a / 3600);
    if a % 3600 != 0 {
        let _ = write!(out, ":{:02}", (a % 3600) / 60);
        if a % 60 != 0 {
            let _ = write!(out, ":{:02}", a % 60);
        }
    }
    if bc {
        out.push_str(" BC");
    }
    out
}

fn write_date_time(out: &mut String, t: &NaiveDateTime) {
    write_date(out, &t.date());
    out.push(' ');
    write_clock(out, t.hour(), t.minute(), t.second(), t.nanosecond() / 1000);
    if t.year() <= 0 {
        out.push_str(" BC");
    }
}

/// `YYYY-MM-DD` (` BC` for years before 1) of days since the Unix epoch.
pub fn date(days: i64) -> String {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    match epoch.checked_add_signed(chrono::Duration::days(days)) {
        Some(d) => {
            let mut out = String::with_capacity(13);
            write_date(&mut out, &d);
            if d.year() <= 0 {
                out.push_str(" BC");
            }
            out
        }
        None => days.to_string(),
    }
}

fn write_date(out: &mut String, d: &NaiveDate) {
    // PostgreSQL has no year 0: 1 BC is year 0 in the proleptic calendar chrono uses.
    let year = if d.year() <= 0 {
        1 - d.year()
    } else {
        d.year()
    };
    let _ = write!(out, "{year:04}-{:02}-{:02}", d.month(), d.day());
}

/// `HH:MM:SS[.ffffff]` of microseconds since midnight.
pub fn time(micros: i64) -> String {
    let total = micros.rem_euclid(86_400_000_000);
    let secs = total / 1_000_000;
    let mut out = String::with_capacity(15);
    write_clock(
        &mut out,
        (secs / 3600) as u32,
        ((secs / 60) % 60) as u32,
        (secs % 60) as u32,
        (total % 1_000_000) as u32,
    );
    out
}

fn write_clock(out: &mut String, h: u32, m: u32, s: u32, micros: u32) {
    let _ = write!(out, "{h:02}:{m:02}:{s:02}");
    write_fraction(out, u64::from(micros));
}

/// `.ffffff` without trailing zeros (nothing for zero).
fn write_fraction(out: &mut String, micros: u64) {
    if micros == 0 {
        return;
    }
    let mut digits = format!("{micros:06}");
    while digits.ends_with('0') {
        digits.pop();
    }
    out.push('.');
    out.push_str(&digits);
}

/// An interval as PostgreSQL prints it with `IntervalStyle = postgres`.
pub fn interval(months: i32, days: i32, micros: i64) -> String {
    let mut out = String::new();
    let (mut is_zero, mut is_before) = (true, false);
    let mut part = |out: &mut String, value: i64, unit: &str| {
        if value == 0 {
            return;
        }
        let _ = write!(
            out,
            "{}{}{value} {unit}{}",
            if is_zero { "" } else { " " },
            if is_before && value > 0 { "+" } else { "" },
            if value == 1 { "" } else { "s" }
        );
        is_before = value < 0;
        is_zero = false;
    };
    let months = i64::from(months);
    part(&mut out, months / 12, "year");
    part(&mut out, months % 12, "mon");
    part(&mut out, i64::from(days), "day");
    if is_zero || micros != 0 {
        let minus = micros < 0;
        let a = micros.unsigned_abs();
        let secs = a / 1_000_000;
        let _ = write!(
            out,
            "{}{}{:02}:{:02}:{:02}",
            if is_zero { "" } else { " " },
            if minus {
                "-"
            } else if is_before {
                "+"
            } else {
                ""
            },
            secs / 3600,
            (secs / 60) % 60,
            secs % 60
        );
        write_fraction(&mut out, a % 1_000_000);
    }
    out
}

/// A `float8` as PostgreSQL prints it (`extra_float_digits` ≥ 1, the default since 12).
pub fn float8(v: f64) -> String {
    if let Some(special) = special(v.is_nan(), v.is_infinite(), v.is_sign_negative()) {
        return special;
    }
    let mut buffer = ryu::Buffer::new();
    shortest(buffer.format_finite(v), 15)
}

/// A `float4` as PostgreSQL prints it.
pub fn float4(v: f32) -> String {
    if let Some(special) = special(v.is_nan(), v.is_infinite(), v.is_sign_negative()) {
        return special;
    }
    let mut buffer = ryu::Buffer::new();
    shortest(buffer.format_finite(v), 6)
}

fn special(nan: bool, infinite: bool, negative: bool) -> Option<String> {
    if nan {
        Some("NaN".into())
    } else if infinite {
        Some(if negative { "-Infinity" } else { "Infinity" }.into())
    } else {
        None
    }
}

/// Lays out ryu's shortest digits as PostgreSQL does: fixed notation when the decimal
/// exponent is in `-4..max_fixed`, else `d.ddde±XX`.
fn shortest(ryu: &str, max_fixed: i32) -> String {
    let (negative, body) = match ryu.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, ryu),
    };
    let (mantissa, exp) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int}{frac}");
    // The decimal exponent of the first digit, before leading zeros are dropped.
    let mut point = int.len() as i32 + exp;
    let leading = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..leading);
    point -= leading as i32;
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    if digits.is_empty() {
        return if negative { "-0".into() } else { "0".into() };
    }
    let exponent = point - 1;
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    if (-4..max_fixed).contains(&exponent) {
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        } else if point as usize >= digits.len() {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', point as usize - digits.len()));
        } else {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_postgresql_prints_them() {
        // (value, PostgreSQL 16's float8 output)
        let cases = [
            (1.0, "1"),
            (75.7, "75.7"),
            (-0.5, "-0.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e15, "1e+15"),
            (1e14, "100000000000000"),
            (123456789012345.6, "123456789012345.6"),
            (1e20, "1e+20"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (1e-100, "1e-100"),
            (0.0, "0"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
            (2.5e300, "2.5e+300"),
        ];
        for (v, pg) in cases {
            assert_eq!(float8(v), pg, "{v:e}");
        }
        assert_eq!(float4(1e6), "1e+06");
        assert_eq!(float4(100000.0), "100000");
        assert_eq!(float4(0.1), "0.1");
        assert_eq!(float8(-0.0), "-0");
    }

    #[test]
    fn timestamps_drop_trailing_zeros_and_show_the_offset() {
        // 2024-03-01 00:00:01.5 UTC
        let t = 1_709_251_201_500_000;
        assert_eq!(timestamp(t), "2024-03-01 00:00:01.5");
        assert_eq!(timestamp(t - 500_000), "2024-03-01 00:00:01");
        assert_eq!(timestamp(t + 3), "2024-03-01 00:00:01.500003");
        assert_eq!(timestamptz(t, &zone("UTC")), "2024-03-01 00:00:01.5+00");
        assert_eq!(
            timestamptz(t, &zone("Asia/Kolkata")),
            "2024-03-01 05:30:01.5+05:30"
        );
        assert_eq!(
            timestamptz(t, &zone("America/New_York")),
            "2024-02-29 19:00:01.5-05"
        );
        assert_eq!(
            timestamptz(t, &zone("-03:30")),
            "2024-02-29 20:30:01.5-03:30"
        );
        // 1 BC: PostgreSQL has no year zero.
        let bc = NaiveDate::from_ymd_opt(0, 6, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| d.and_utc().timestamp_micros())
            .expect("date");
        assert_eq!(timestamp(bc), "0001-06-01 00:00:00 BC");
        assert_eq!(timestamptz(bc, &zone("UTC")), "0001-06-01 00:00:00+00 BC");
        assert_eq!(date(19_783), "2024-03-01");
        assert_eq!(time(3_723_000_250), "01:02:03.00025");
    }

    #[test]
    fn intervals_follow_intervalstyle_postgres() {
        assert_eq!(interval(0, 0, 0), "00:00:00");
        assert_eq!(interval(0, 90, 0), "90 days");
        assert_eq!(
            interval(14, 3, 14_706_500_000),
            "1 year 2 mons 3 days 04:05:06.5"
        );
        assert_eq!(interval(0, -1, 7_200_000_000), "-1 days +02:00:00");
        assert_eq!(interval(1, 1, -1_000_000), "1 mon 1 day -00:00:01");
        assert_eq!(interval(-13, 0, 0), "-1 years -1 mons");
        assert_eq!(interval(0, 0, 90_000_000_000), "25:00:00");
    }

    #[test]
    fn arrays_are_formatted_per_type() {
        let ts =
            arrow::array::TimestampMicrosecondArray::from(vec![Some(1_709_251_201_500_000), None])
                .with_timezone("UTC");
        let text = to_text(&ts, "Europe/Paris", Booleans::Wire).expect("formatted");
        let text = text.as_string::<i32>();
        assert_eq!(text.value(0), "2024-03-01 01:00:01.5+01");
        assert!(text.is_null(1));
        let b = BooleanArray::from(vec![true, false]);
        let words = to_text(&b, "UTC", Booleans::Words).expect("formatted");
        assert_eq!(words.as_string::<i32>().value(0), "true");
        assert!(
            to_text(
                &arrow::array::Int32Array::from(vec![1]),
                "UTC",
                Booleans::Wire
            )
            .is_none()
        );
    }
}

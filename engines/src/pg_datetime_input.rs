//! PostgreSQL's reading of date and time literals on DataFusion (an analyzer rule, after type
//! coercion). Arrow's parser rejects text PostgreSQL reads (`'2024-02-01 12:00'`, without
//! seconds; `'2024-02-01 12:00:00 America/New_York'`) and places a wall-clock time that a
//! daylight-saving change skips or repeats by its own rules. [`PgDateTimeInput`] reads every
//! text literal cast to a `timestamp`, `timestamptz` or `date` in ISO 8601 form (date, optional
//! time with an optional fraction, optional zone: `Z`, an offset, or a zone name) as PostgreSQL
//! does and leaves any other text to Arrow (its error, or its answer for the forms both read
//! alike).
//!
//! PostgreSQL's rules: a `timestamp` ignores a zone written in the text; a `timestamptz`
//! without one is the wall clock in the session's zone (the type's zone here: see
//! [`crate::session_zone`]), a time the clocks skip taking the offset before the change and a
//! repeated time the offset after it; a `date` is the text's date.

use arrow::datatypes::{DataType, TimeUnit};
use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module docs).
#[derive(Debug, Default)]
pub struct PgDateTimeInput;

impl AnalyzerRule for PgDateTimeInput {
    fn name(&self) -> &str {
        "lakegate_pg_datetime_input"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        crate::semantics::rewrite_plan(
            plan,
            |_| true,
            |e, _| {
                let (inner, to) = match &e {
                    Expr::Cast(Cast { expr, data_type })
                    | Expr::TryCast(TryCast { expr, data_type }) => (expr, data_type),
                    _ => return Ok(Transformed::no(e)),
                };
                let Expr::Literal(value, _) = inner.as_ref() else {
                    return Ok(Transformed::no(e));
                };
                let Some(Some(text)) = value.try_as_str() else {
                    return Ok(Transformed::no(e));
                };
                Ok(match literal(text, to) {
                    Some(v) => Transformed::yes(Expr::Literal(v, None)),
                    None => Transformed::no(e),
                })
            },
        )
    }
}

/// `text` read as PostgreSQL reads it into `to` (`None`: not a form this module reads, or not
/// a date/time type).
pub fn literal(text: &str, to: &DataType) -> Option<ScalarValue> {
    let parsed = parse(text)?;
    match to {
        DataType::Date32 => {
            let days = parsed.local.date() - NaiveDate::from_ymd_opt(1970, 1, 1)?;
            Some(ScalarValue::Date32(Some(
                i32::try_from(days.num_days()).ok()?,
            )))
        }
        DataType::Timestamp(unit, zone) => {
            let local = parsed.local.and_utc().timestamp_micros();
            let micros = match zone {
                // A zone in the text means nothing to a `timestamp`.
                None => local,
                Some(z) => match parsed.zone {
                    Some(TextZone::Offset(seconds)) => local - i64::from(seconds) * 1_000_000,
                    Some(TextZone::Named(tz)) => crate::pg_zone::instant(local, &tz)?,
                    None => match crate::pg_text::zone_for(z) {
                        crate::pg_text::Zone::Named(tz) => crate::pg_zone::instant(local, &tz)?,
                        crate::pg_text::Zone::Fixed(off) => crate::pg_zone::instant(local, &off)?,
                    },
                },
            };
            let zone = zone.clone();
            Some(match unit {
                TimeUnit::Second => ScalarValue::TimestampSecond(
                    (micros % 1_000_000 == 0).then_some(micros / 1_000_000),
                    zone,
                ),
                TimeUnit::Millisecond => ScalarValue::TimestampMillisecond(
                    (micros % 1_000 == 0).then_some(micros / 1_000),
                    zone,
                ),
                TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(Some(micros), zone),
                TimeUnit::Nanosecond => {
                    ScalarValue::TimestampNanosecond(Some(micros.checked_mul(1_000)?), zone)
                }
            })
            // A value the unit cannot hold exactly is left to Arrow.
            .filter(|v| !v.is_null())
        }
        _ => None,
    }
}

/// A zone written in the text.
#[derive(Debug, Clone, PartialEq)]
enum TextZone {
    /// Seconds east of Greenwich (`Z`, `+05:30`, `-08`).
    Offset(i32),
    /// A tz database name (`America/New_York`, `UTC`).
    Named(chrono_tz::Tz),
}

#[derive(Debug, PartialEq)]
struct Parsed {
    local: NaiveDateTime,
    zone: Option<TextZone>,
}

/// `YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]][ ][zone]`.
fn parse(text: &str) -> Option<Parsed> {
    let s = text.trim();
    let (date, rest) = split_date(s)?;
    let rest = rest.trim_start_matches([' ', 'T', 't']);
    if rest.is_empty() {
        return Some(Parsed {
            local: date.and_time(NaiveTime::MIN),
            zone: None,
        });
    }
    let (time, rest) = split_time(rest)?;
    let rest = rest.trim_start();
    let zone = if rest.is_empty() {
        None
    } else {
        Some(text_zone(rest)?)
    };
    Some(Parsed {
        local: date.and_time(time),
        zone,
    })
}

/// Digits at the start of `s`, and what follows.
fn digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

fn split_date(s: &str) -> Option<(NaiveDate, &str)> {
    let (year, rest) = digits(s);
    let rest = rest.strip_prefix('-')?;
    let (month, rest) = digits(rest);
    let rest = rest.strip_prefix('-')?;
    let (day, rest) = digits(rest);
    if year.len() != 4 || !(1..=2).contains(&month.len()) || !(1..=2).contains(&day.len()) {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(year.parse().ok()?, month.parse().ok()?, day.parse().ok()?)?;
    // A date must end here or go on with a separator.
    match rest.chars().next() {
        None | Some(' ' | 'T' | 't') => Some((date, rest)),
        _ => None,
    }
}

fn split_time(s: &str) -> Option<(NaiveTime, &str)> {
    let (hour, rest) = digits(s);
    let rest = rest.strip_prefix(':')?;
    let (minute, mut rest) = digits(rest);
    if !(1..=2).contains(&hour.len()) || minute.len() != 2 {
        return None;
    }
    let mut second = 0;
    let mut micros = 0;
    if let Some(r) = rest.strip_prefix(':') {
        let (sec, r) = digits(r);
        if sec.len() != 2 {
            return None;
        }
        second = sec.parse().ok()?;
        rest = r;
        if let Some(r) = rest.strip_prefix('.') {
            let (fraction, r) = digits(r);
            // Past microseconds PostgreSQL rounds; leave that to Arrow's error or answer.
            if fraction.is_empty() || fraction.len() > 6 {
                return None;
            }
            micros = format!("{fraction:0<6}").parse().ok()?;
            rest = r;
        }
    }
    let time =
        NaiveTime::from_hms_micro_opt(hour.parse().ok()?, minute.parse().ok()?, second, micros)?;
    Some((time, rest))
}

fn text_zone(s: &str) -> Option<TextZone> {
    if s.eq_ignore_ascii_case("z") {
        return Some(TextZone::Offset(0));
    }
    if let Some(sign) = s
        .strip_prefix('+')
        .map(|r| (1, r))
        .or_else(|| s.strip_prefix('-').map(|r| (-1, r)))
    {
        let (sign, r) = sign;
        let (h, m, sec) = match r.split(':').collect::<Vec<_>>()[..] {
            [h] if h.len() == 4 => (&h[..2], &h[2..], "0"),
            [h] => (h, "0", "0"),
            [h, m] => (h, m, "0"),
            [h, m, s] => (h, m, s),
            _ => return None,
        };
        if !(1..=2).contains(&h.len())
            || !h
                .bytes()
                .chain(m.bytes())
                .chain(sec.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let (h, m, sec): (i32, i32, i32) = (h.parse().ok()?, m.parse().ok()?, sec.parse().ok()?);
        if h > 15 || m > 59 || sec > 59 {
            return None;
        }
        return Some(TextZone::Offset(sign * (h * 3600 + m * 60 + sec)));
    }
    s.parse::<chrono_tz::Tz>().ok().map(TextZone::Named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(v: Option<ScalarValue>) -> i64 {
        match v {
            Some(ScalarValue::TimestampMicrosecond(Some(m), _)) => m,
            other => panic!("not a timestamp: {other:?}"),
        }
    }

    fn utc(s: &str) -> i64 {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
            .expect("valid")
            .and_utc()
            .timestamp_micros()
    }

    const TS: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

    fn tstz(zone: &str) -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, Some(zone.into()))
    }

    #[test]
    fn forms_arrow_rejects_are_read() {
        assert_eq!(
            micros(literal("2024-02-01 12:00", &TS)),
            utc("2024-02-01 12:00:00")
        );
        assert_eq!(
            micros(literal(" 2024-2-1T9:05 ", &TS)),
            utc("2024-02-01 09:05:00")
        );
        assert_eq!(
            micros(literal("2024-02-01 12:00:07.25", &TS)),
            utc("2024-02-01 12:00:07.25")
        );
        assert_eq!(
            micros(literal("2024-02-01", &TS)),
            utc("2024-02-01 00:00:00")
        );
    }

    #[test]
    fn a_timestamp_ignores_the_zone_a_timestamptz_uses_it() {
        assert_eq!(
            micros(literal("2024-02-01 12:00+05", &TS)),
            utc("2024-02-01 12:00:00")
        );
        let z = tstz("+00:00");
        assert_eq!(
            micros(literal("2024-02-01 12:00+05", &z)),
            utc("2024-02-01 07:00:00")
        );
        assert_eq!(
            micros(literal("2024-02-01 12:00:00-0330", &z)),
            utc("2024-02-01 15:30:00")
        );
        assert_eq!(
            micros(literal("2024-02-01 12:00Z", &z)),
            utc("2024-02-01 12:00:00")
        );
        assert_eq!(
            micros(literal("2024-07-01 12:00 Europe/Paris", &z)),
            utc("2024-07-01 10:00:00")
        );
    }

    #[test]
    fn without_a_zone_a_timestamptz_is_the_sessions_wall_clock() {
        let ny = tstz("America/New_York");
        assert_eq!(
            micros(literal("2024-03-01", &ny)),
            utc("2024-03-01 05:00:00")
        );
        // Skipped by the clocks: the offset before the change (EST), as PostgreSQL.
        assert_eq!(
            micros(literal("2024-03-10 02:30", &ny)),
            utc("2024-03-10 07:30:00")
        );
        // Repeated: the offset after the change (EST).
        assert_eq!(
            micros(literal("2024-11-03 01:30", &ny)),
            utc("2024-11-03 06:30:00")
        );
        assert_eq!(
            micros(literal("2024-03-01", &tstz("+05:30"))),
            utc("2024-02-29 18:30:00")
        );
    }

    #[test]
    fn dates_take_the_date() {
        assert_eq!(
            literal("2024-02-01 23:59", &DataType::Date32),
            Some(ScalarValue::Date32(Some(19754)))
        );
    }

    #[test]
    fn other_text_is_left_to_arrow() {
        for text in [
            "infinity",
            "now",
            "2024-02-30",
            "2024-02-01 25:00",
            "24-02-01",
            "2024-02-01 12:00:00.1234567",
            "2024-02-01 12:00 Mars/Base",
            "2024-02-01x",
            "02/01/2024",
        ] {
            assert_eq!(literal(text, &TS), None, "{text}");
        }
        assert_eq!(literal("2024-02-01", &DataType::Utf8), None);
    }
}

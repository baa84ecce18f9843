//! PostgreSQL's `AT TIME ZONE` on DataFusion.
//!
//! PostgreSQL converts in both directions: `timestamptz AT TIME ZONE z` is the wall-clock
//! `timestamp` in `z`, and `timestamp AT TIME ZONE z` is the `timestamptz` of that wall-clock
//! time in `z`. DataFusion plans both as a cast to a timestamp with zone `z`, which keeps a
//! `timestamptz` a `timestamptz` (printed in the session's zone, not `z`'s wall clock).
//! [`rewrite`] turns the expression into `lakegate_at_time_zone(ts, 'z')` ([`udf`]) before
//! planning, for zones of the tz database (PostgreSQL reads them without regard to case);
//! other zone expressions (PostgreSQL's POSIX offsets count hours *west*, abbreviations come
//! from its own table) are refused, so another engine answers.

use std::any::Any;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone};
use datafusion::common::{Result as DfResult, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{Expr, Statement, Value, visit_expressions_mut};

use crate::error::{Error, Result};

/// The function [`rewrite`] calls.
pub const NAME: &str = "lakegate_at_time_zone";

/// A zone name PostgreSQL and the tz database agree on.
fn zone(name: &str) -> Option<chrono_tz::Tz> {
    name.parse::<chrono_tz::Tz>().ok().or_else(|| {
        chrono_tz::TZ_VARIANTS
            .iter()
            .find(|tz| tz.name().eq_ignore_ascii_case(name))
            .copied()
    })
}

/// Rewrites every `x AT TIME ZONE 'zone'` of `statement` into [`NAME`]`(x, 'zone')`.
///
/// # Errors
/// [`Error::Unsupported`] for a zone that is not a tz database name.
pub fn rewrite(statement: &mut Statement) -> Result<()> {
    // `date_trunc(field, ts, zone)` (PostgreSQL 12) truncates on the zone's wall clock:
    // `date_trunc(field, ts AT TIME ZONE zone) AT TIME ZONE zone`.
    let _ = visit_expressions_mut(statement, |expr| {
        if let Some((field, ts, zone)) = three_argument_date_trunc(expr) {
            let wall = Expr::AtTimeZone {
                timestamp: Box::new(Expr::Nested(Box::new(ts))),
                time_zone: Box::new(zone.clone()),
            };
            let truncated = lakegate_sql::semantics::function_call("date_trunc", vec![field, wall]);
            *expr = Expr::AtTimeZone {
                timestamp: Box::new(truncated),
                time_zone: Box::new(zone),
            };
        }
        ControlFlow::<()>::Continue(())
    });
    let flow = visit_expressions_mut(statement, |expr| {
        if let Expr::AtTimeZone {
            timestamp,
            time_zone,
        } = expr
        {
            let name = match time_zone.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(s) => s.clone(),
                    _ => return ControlFlow::Break(()),
                },
                _ => return ControlFlow::Break(()),
            };
            if zone(&name).is_none() {
                return ControlFlow::Break(());
            }
            let of = std::mem::replace(timestamp.as_mut(), Expr::value(Value::Null));
            *expr = lakegate_sql::semantics::function_call(
                NAME,
                vec![of, Expr::value(Value::SingleQuotedString(name))],
            );
        }
        ControlFlow::Continue(())
    });
    match flow {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(Error::Unsupported {
            what: "AT TIME ZONE with a zone that is not a time zone database name".into(),
        }),
    }
}

/// The arguments of `date_trunc(field, ts, zone)`.
fn three_argument_date_trunc(expr: &Expr) -> Option<(Expr, Expr, Expr)> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let Expr::Function(f) = expr else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("date_trunc") || f.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args: Vec<&Expr> = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match args[..] {
        [field, ts, zone] => Some((field.clone(), ts.clone(), zone.clone())),
        _ => None,
    }
}

/// `lakegate_at_time_zone(ts, zone)` for a session in `session_zone` (the zone a returned
/// `timestamptz` is shown in).
pub fn udf(session_zone: &str) -> ScalarUDF {
    ScalarUDF::from(AtTimeZone {
        signature: Signature::any(2, Volatility::Immutable),
        session: session_zone.into(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct AtTimeZone {
    signature: Signature,
    session: Arc<str>,
}

/// The zone the function converts to: a tz database name, or (for a session whose `TimeZone`
/// is an offset: [`crate::session_zone`]) an ISO 8601 offset, positive east of Greenwich.
fn target_zone(name: &str) -> Option<crate::pg_text::Zone> {
    zone(name)
        .map(crate::pg_text::Zone::Named)
        .or_else(|| match crate::pg_text::zone_for(name) {
            fixed @ crate::pg_text::Zone::Fixed(_) => Some(fixed),
            crate::pg_text::Zone::Named(_) => None,
        })
}

/// The wall-clock time in `tz` of the instant `micros` (microseconds since the epoch, UTC).
fn wall_clock<Z: TimeZone>(micros: i64, tz: &Z) -> Option<i64> {
    let t = DateTime::from_timestamp_micros(micros)?;
    Some(
        t.with_timezone(tz)
            .naive_local()
            .and_utc()
            .timestamp_micros(),
    )
}

/// The instant of the wall-clock time `micros` in `tz`. As PostgreSQL: a time a backward
/// transition repeats takes the offset after it, a time a forward transition skips the offset
/// before it.
pub(crate) fn instant<Z: TimeZone>(micros: i64, tz: &Z) -> Option<i64> {
    let local: NaiveDateTime = DateTime::from_timestamp_micros(micros)?.naive_utc();
    let utc = match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => t.naive_utc(),
        LocalResult::Ambiguous(_, later) => later.naive_utc(),
        LocalResult::None => {
            let before = tz
                .offset_from_utc_datetime(&(local - chrono::Duration::hours(6)))
                .fix();
            local - chrono::Duration::seconds(i64::from(before.local_minus_utc()))
        }
    };
    Some(utc.and_utc().timestamp_micros())
}

impl ScalarUDFImpl for AtTimeZone {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(DataType::Timestamp(_, Some(_))) => {
                Ok(DataType::Timestamp(TimeUnit::Microsecond, None))
            }
            Some(DataType::Timestamp(_, None)) => Ok(DataType::Timestamp(
                TimeUnit::Microsecond,
                Some(self.session.clone()),
            )),
            other => plan_err!("AT TIME ZONE of {other:?}: lakegate converts timestamps only"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let Some(zone_arg) = args.args.get(1) else {
            return exec_err!("{NAME} takes two arguments");
        };
        let Some(tz) = (match zone_arg {
            ColumnarValue::Scalar(v) => v.try_as_str().flatten().and_then(target_zone),
            ColumnarValue::Array(_) => None,
        }) else {
            return exec_err!("{NAME}: the zone must be a time zone database name");
        };
        let convert = |m: i64, aware: bool| match &tz {
            crate::pg_text::Zone::Named(z) if aware => wall_clock(m, z),
            crate::pg_text::Zone::Named(z) => instant(m, z),
            crate::pg_text::Zone::Fixed(z) if aware => wall_clock(m, z),
            crate::pg_text::Zone::Fixed(z) => instant(m, z),
        };
        let (array, scalar) = crate::semantics::argument_array(&args, 0)?;
        let aware = matches!(array.data_type(), DataType::Timestamp(_, Some(_)));
        let micros = cast(
            array.as_ref(),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        let converted: TimestampMicrosecondArray = micros
            .iter()
            .map(|v| v.and_then(|m| convert(m, aware)))
            .collect();
        let out: ArrayRef = if aware {
            Arc::new(converted)
        } else {
            Arc::new(converted.with_timezone(self.session.clone()))
        };
        crate::semantics::columnar(out, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(s: &str) -> i64 {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
            .expect("valid")
            .and_utc()
            .timestamp_micros()
    }

    #[test]
    fn an_instant_is_shown_on_the_zones_wall_clock() {
        let paris = zone("europe/paris").expect("known zone, any case");
        assert_eq!(
            wall_clock(micros("2024-07-01 10:00:00"), &paris),
            Some(micros("2024-07-01 12:00:00"))
        );
    }

    #[test]
    fn a_wall_clock_time_is_placed_as_postgresql_places_it() {
        let ny = zone("America/New_York").expect("known zone");
        assert_eq!(
            instant(micros("2024-01-15 09:00:00"), &ny),
            Some(micros("2024-01-15 14:00:00"))
        );
        // 01:30 happens twice on 2024-11-03: PostgreSQL takes the later offset (EST).
        assert_eq!(
            instant(micros("2024-11-03 01:30:00"), &ny),
            Some(micros("2024-11-03 06:30:00"))
        );
        // 02:30 never happens on 2024-03-10: PostgreSQL keeps the offset before (EST).
        assert_eq!(
            instant(micros("2024-03-10 02:30:00"), &ny),
            Some(micros("2024-03-10 07:30:00"))
        );
    }

    #[test]
    fn only_tz_database_zones_are_rewritten() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let parse = |sql: &str| {
            Parser::parse_sql(&PostgreSqlDialect {}, sql)
                .expect("parses")
                .remove(0)
        };
        let mut ok = parse("SELECT ts AT TIME ZONE 'UTC' FROM t");
        rewrite(&mut ok).expect("a tz database name");
        assert_eq!(
            ok.to_string(),
            "SELECT lakegate_at_time_zone(ts, 'UTC') FROM t"
        );
        let mut posix = parse("SELECT ts AT TIME ZONE 'UTC+5' FROM t");
        assert!(rewrite(&mut posix).is_err());
    }
}

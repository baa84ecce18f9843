//! Bound parameters as PostgreSQL reads them: arrow-pg decodes them by the planned types, and
//! a parameter planned as a `timestamptz` is then read in the session's `TimeZone`, as
//! PostgreSQL reads one: a text without an offset (`'2024-03-01'`, what psycopg sends for a
//! `str`), a `timestamp` or a `date` is that wall clock in the session's zone, not in UTC.
//! Every engine then gets the instant itself (see `lakegate_engines::dialect`).

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::error::PgWireResult;

/// The parameters of `portal`, planned as `types`. A planned `timestamptz` type is in the
/// session's zone (see `lakegate_engines::session_zone`; `+00:00` in a UTC session), so a wall
/// clock is read in that type's zone.
///
/// # Errors
/// A value that does not decode as its type (22P02-style, from arrow-pg).
pub(super) fn decode<S: Clone>(
    portal: &Portal<S>,
    types: &[Option<&DataType>],
) -> PgWireResult<ParamValues> {
    let decoded = arrow_pg::datatypes::df::deserialize_parameters(portal, types)?;
    let ParamValues::List(mut values) = decoded else {
        return Ok(decoded);
    };
    for (i, value) in values.iter_mut().enumerate() {
        let Some(Some(target @ DataType::Timestamp(_, Some(_)))) = types.get(i) else {
            continue;
        };
        let declared = portal.statement.parameter_types.get(i).cloned().flatten();
        let Some(Some(bytes)) = portal.parameters.get(i) else {
            continue;
        };
        let read = if portal.parameter_format.is_binary(i) {
            binary_in_zone(value.value.clone(), declared.as_ref(), target)
        } else {
            text_in_zone(bytes, declared.as_ref(), target)
        };
        if let Some(v) = read {
            value.value = v;
        }
    }
    Ok(ParamValues::List(values))
}

/// A text parameter of a type that does not carry its own zone, read as PostgreSQL reads it
/// into a `timestamptz` (`None`: left to arrow-pg's reading).
fn text_in_zone(bytes: &[u8], declared: Option<&Type>, target: &DataType) -> Option<ScalarValue> {
    let readable = match declared {
        None => true,
        Some(t) => [
            Type::UNKNOWN,
            Type::TEXT,
            Type::VARCHAR,
            Type::TIMESTAMP,
            Type::TIMESTAMPTZ,
            Type::DATE,
        ]
        .contains(t),
    };
    if !readable {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    if declared == Some(&Type::TIMESTAMP) {
        // A `timestamp` ignores a zone in its text; its wall clock is then placed in the zone.
        let wall = lakegate_engines::pg_datetime_input::literal(
            text,
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        return binary_in_zone(wall, declared, target);
    }
    lakegate_engines::pg_datetime_input::literal(text, target)
}

/// A `timestamp` parameter (a wall clock, decoded by arrow-pg as if in UTC) as the instant of
/// that wall clock in `target`'s zone; a binary `timestamptz` keeps its instant.
fn binary_in_zone(
    decoded: ScalarValue,
    declared: Option<&Type>,
    target: &DataType,
) -> Option<ScalarValue> {
    if declared != Some(&Type::TIMESTAMP) {
        return None;
    }
    let wall = match decoded
        .cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None))
        .ok()?
    {
        ScalarValue::TimestampMicrosecond(Some(m), _) => m,
        _ => return None,
    };
    let text = chrono::DateTime::from_timestamp_micros(wall)?
        .naive_utc()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string();
    lakegate_engines::pg_datetime_input::literal(&text, target)
}

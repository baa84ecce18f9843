//! How many bytes a query scans in one table: the pinned snapshot's data files that survive
//! partition pruning (and file min/max statistics) on the query's WHERE, as iceberg-rust plans
//! them. The router buckets queries by this size.
//!
//! Only what translates exactly becomes an Iceberg predicate (`col <op> literal`, `IN`,
//! `BETWEEN`, `AND`, `OR`); anything else is dropped from an AND (which only widens the scan)
//! or makes an OR unprunable, so the estimate never undercounts.

use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, UnaryOperator, Value};
use futures::TryStreamExt;
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::{Datum, PrimitiveType, Schema, Type};

use super::ResolvedTable;
use crate::error::Result;

/// The bytes the pinned snapshot holds in data files (its summary's `total-files-size`).
pub fn total_bytes(table: &ResolvedTable) -> u64 {
    table
        .table
        .metadata()
        .current_snapshot()
        .and_then(|s| s.summary().additional_properties.get("total-files-size"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The bytes of the data files a scan with `filter` reads at the pinned snapshot.
///
/// # Errors
/// When planning the scan fails (unreadable manifests).
pub async fn pruned_bytes(table: &ResolvedTable, filter: Predicate) -> Result<u64> {
    let Some(snapshot) = table.snapshot_id else {
        return Ok(0);
    };
    let scan = table
        .table
        .scan()
        .snapshot_id(snapshot)
        .select_empty()
        .with_filter(filter)
        .build()?;
    let tasks = scan.plan_files().await?;
    Ok(tasks
        .try_fold(0u64, |sum, task| async move { Ok(sum + task.length) })
        .await?)
}

/// The Iceberg predicate for a WHERE clause over `schema`, where one exists.
pub fn predicate(expr: &Expr, schema: &Schema) -> Option<Predicate> {
    match expr {
        Expr::Nested(inner) => predicate(inner, schema),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => match (predicate(left, schema), predicate(right, schema)) {
            (Some(l), Some(r)) => Some(l.and(r)),
            (one, other) => one.or(other),
        },
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Or,
            right,
        } => Some(predicate(left, schema)?.or(predicate(right, schema)?)),
        Expr::BinaryOp { left, op, right } => {
            let (column, value, op) = match (column(left, schema), column(right, schema)) {
                (Some(c), None) => (c, right.as_ref(), op.clone()),
                (None, Some(c)) => (c, left.as_ref(), flip(op)?),
                _ => return None,
            };
            let datum = literal(value, &column.1)?;
            let r = Reference::new(column.0);
            Some(match op {
                BinaryOperator::Eq => r.equal_to(datum),
                BinaryOperator::NotEq => r.not_equal_to(datum),
                BinaryOperator::Lt => r.less_than(datum),
                BinaryOperator::LtEq => r.less_than_or_equal_to(datum),
                BinaryOperator::Gt => r.greater_than(datum),
                BinaryOperator::GtEq => r.greater_than_or_equal_to(datum),
                _ => return None,
            })
        }
        Expr::InList {
            expr,
            list,
            negated: false,
        } => {
            let (name, t) = column(expr, schema)?;
            let values = list
                .iter()
                .map(|v| literal(v, &t))
                .collect::<Option<Vec<_>>>()?;
            Some(Reference::new(name).is_in(values))
        }
        Expr::Between {
            expr,
            negated: false,
            low,
            high,
        } => {
            let (name, t) = column(expr, schema)?;
            Some(
                Reference::new(name.clone())
                    .greater_than_or_equal_to(literal(low, &t)?)
                    .and(Reference::new(name).less_than_or_equal_to(literal(high, &t)?)),
            )
        }
        _ => None,
    }
}

/// `a < b` is `b > a`.
fn flip(op: &BinaryOperator) -> Option<BinaryOperator> {
    Some(match op {
        BinaryOperator::Eq => BinaryOperator::Eq,
        BinaryOperator::NotEq => BinaryOperator::NotEq,
        BinaryOperator::Lt => BinaryOperator::Gt,
        BinaryOperator::LtEq => BinaryOperator::GtEq,
        BinaryOperator::Gt => BinaryOperator::Lt,
        BinaryOperator::GtEq => BinaryOperator::LtEq,
        _ => return None,
    })
}

/// A column of the table (last part of a compound name) and its primitive type.
fn column(expr: &Expr, schema: &Schema) -> Option<(String, PrimitiveType)> {
    let ident = match expr {
        Expr::Identifier(i) => i,
        Expr::CompoundIdentifier(parts) => parts.last()?,
        _ => return None,
    };
    let name = if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    };
    let field = schema.field_by_name(&name)?;
    match field.field_type.as_ref() {
        Type::Primitive(p) => Some((name, p.clone())),
        _ => None,
    }
}

/// A literal as a datum of the column's type.
fn literal(expr: &Expr, t: &PrimitiveType) -> Option<Datum> {
    let text = match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.clone(),
            Value::SingleQuotedString(s) => s.clone(),
            _ => return None,
        },
        Expr::TypedString(ts) => match &ts.value.value {
            Value::SingleQuotedString(s) => s.clone(),
            _ => return None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => format!("-{n}"),
                _ => return None,
            },
            _ => return None,
        },
        Expr::Cast { expr, .. } | Expr::Nested(expr) => return literal(expr, t),
        _ => return None,
    };
    match t {
        PrimitiveType::Int => text.parse::<i32>().ok().map(Datum::int),
        PrimitiveType::Long => text.parse::<i64>().ok().map(Datum::long),
        PrimitiveType::Double => text.parse::<f64>().ok().map(Datum::double),
        PrimitiveType::Float => text.parse::<f32>().ok().map(Datum::float),
        PrimitiveType::String => Some(Datum::string(text)),
        PrimitiveType::Date => Datum::date_from_str(&text).ok(),
        PrimitiveType::Timestamp => Datum::timestamp_from_str(&text)
            .ok()
            .or_else(|| pg_timestamp_micros(&text).map(Datum::timestamp_micros)),
        PrimitiveType::Timestamptz => Datum::timestamptz_from_str(&text)
            .ok()
            .or_else(|| pg_timestamp_micros(&text).map(Datum::timestamptz_micros)),
        PrimitiveType::Decimal { .. } => Datum::decimal_from_str(&text).ok(),
        _ => None,
    }
}

/// Microseconds since the epoch of a timestamp as PostgreSQL writes it (`2026-11-25
/// 00:00:00+00`, `2026-11-25T10:00:00.5-05:30`, `2026-11-25 10:00`, `2026-11-25`); without a
/// zone it is read as UTC (an estimate only prunes: a session zone moves it by hours at most).
fn pg_timestamp_micros(text: &str) -> Option<i64> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    let text = text.trim();
    for format in [
        "%Y-%m-%d %H:%M:%S%.f%#z",
        "%Y-%m-%dT%H:%M:%S%.f%#z",
        "%Y-%m-%d %H:%M%#z",
    ] {
        if let Ok(t) = DateTime::parse_from_str(text, format) {
            return Some(t.timestamp_micros());
        }
    }
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    use iceberg::spec::NestedField;
    use std::sync::Arc;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "status",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "day",
                    Type::Primitive(PrimitiveType::Date),
                )),
            ])
            .build()
            .expect("schema")
    }

    fn where_of(sql: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_expr())
            .expect("expression")
    }

    #[test]
    fn translates_what_it_can_and_never_narrows() {
        let s = schema();
        let p = predicate(&where_of("id = 42 AND status IN ('a', 'b')"), &s).expect("pred");
        let text = p.to_string();
        assert!(
            text.contains("id = 42") && text.contains("status IN"),
            "{text}"
        );
        // An untranslatable conjunct is dropped (wider scan), an untranslatable disjunct
        // makes the whole OR unprunable.
        let p =
            predicate(&where_of("day >= '2024-03-01' AND lower(status) = 'x'"), &s).expect("pred");
        assert!(p.to_string().contains("day >="), "{p}");
        assert!(predicate(&where_of("id = 1 OR lower(status) = 'x'"), &s).is_none());
        assert!(
            predicate(&where_of("10 < id"), &s)
                .expect("flipped")
                .to_string()
                .contains("id > 10")
        );
        assert!(predicate(&where_of("nope = 1"), &s).is_none());
    }

    #[test]
    fn timestamps_as_postgresql_writes_them_are_understood() {
        let micros = |t: &str| pg_timestamp_micros(t).expect(t);
        let midnight = 1_795_564_800_000_000; // 2026-11-25T00:00:00Z
        assert_eq!(micros("2026-11-25 00:00:00+00"), midnight);
        assert_eq!(micros("2026-11-25T00:00:00.000+00:00"), midnight);
        assert_eq!(micros("2026-11-25 05:30:00+05:30"), midnight);
        assert_eq!(micros("2026-11-25 00:00"), midnight);
        assert_eq!(micros("2026-11-25"), midnight);
        assert!(pg_timestamp_micros("tomorrow").is_none());
    }
}

//! The session's `TimeZone` on DataFusion. PostgreSQL computes every calendar question about a
//! `timestamptz` in the session's zone: its day (`date_trunc('day', ts)`, `ts::date`), its hour
//! (`extract(hour FROM ts)`), its wall clock (`ts::timestamp`), and the instant a text or a date
//! compared with it stands for (`ts >= '2024-03-01'` is midnight in the session's zone).
//!
//! - DataFusion computes those in the zone a value's type carries. Lake `timestamptz` columns
//!   are read in the session's zone ([`column_zone`], [`zoned_schema`], [`in_zone`]: the
//!   instants are unchanged, only their type's zone), and literals, `now()` and casts to
//!   `timestamptz` are typed in it already (DataFusion's `execution.time_zone`), so type
//!   coercion and every date function see the session's zone.
//! - A cast of a `timestamptz` to a `timestamp` is the wall clock in the session's zone
//!   ([`SessionZoneCasts`]; Arrow's cast keeps the UTC wall clock).
//! - [`sensitive`] finds what depends on the zone, so that an engine computing in UTC refuses
//!   the statement when the session's zone is not UTC.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, lit};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;

/// Whether `zone` (a session `TimeZone` as engines read it, or an Arrow zone) is UTC.
pub fn is_utc(zone: &str) -> bool {
    [
        "UTC", "+00:00", "+00", "Z", "Etc/UTC", "GMT", "Etc/GMT", "UCT", "Zulu", "-00:00",
    ]
    .iter()
    .any(|z| z.eq_ignore_ascii_case(zone))
}

/// The zone lake `timestamptz` columns are read in for a session in `time_zone`: `None` for
/// UTC (they keep the catalog's type).
pub(crate) fn column_zone(time_zone: &str) -> Option<Arc<str>> {
    (!is_utc(time_zone)).then(|| Arc::from(time_zone))
}

/// `schema` with every `timestamptz` column in `zone`.
pub(crate) fn zoned_schema(schema: &SchemaRef, zone: &Arc<str>) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(unit, Some(_)) => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Timestamp(*unit, Some(zone.clone()))),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A table's `schema` as a session in `zone` reads it (`None`: UTC, unchanged).
pub(crate) fn schema_in(schema: SchemaRef, zone: Option<&Arc<str>>) -> SchemaRef {
    match zone {
        Some(z) => zoned_schema(&schema, z),
        None => schema,
    }
}

/// A table's `scan` as a session in `zone` reads it (`None`: UTC, unchanged).
///
/// # Errors
/// As [`in_zone`].
pub(crate) fn scan_in(
    scan: Arc<dyn ExecutionPlan>,
    zone: Option<&Arc<str>>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    match zone {
        Some(z) => in_zone(scan, z),
        None => Ok(scan),
    }
}

/// `plan` with its `timestamptz` columns in `zone` (a projection that only retypes them), or
/// `plan` itself when it has none.
///
/// # Errors
/// When the projection cannot be built (it always can for a plan's own columns).
pub(crate) fn in_zone(
    plan: Arc<dyn ExecutionPlan>,
    zone: &Arc<str>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(_, Some(_))))
    {
        return Ok(plan);
    }
    let target = zoned_schema(&schema, zone);
    let exprs: Vec<(Arc<dyn datafusion::physical_expr::PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let column: Arc<dyn datafusion::physical_expr::PhysicalExpr> =
                Arc::new(Column::new(f.name(), i));
            let to = target.field(i).data_type();
            let expr: Arc<dyn datafusion::physical_expr::PhysicalExpr> = if to == f.data_type() {
                column
            } else {
                Arc::new(CastExpr::new(column, to.clone(), None))
            };
            (expr, f.name().clone())
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

/// Gives a `timestamptz` cast to a `timestamp` the session's wall clock (see the module docs).
#[derive(Debug, Default)]
pub struct SessionZoneCasts;

impl AnalyzerRule for SessionZoneCasts {
    fn name(&self) -> &str {
        "lakegate_session_zone_casts"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let zone = config
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "UTC".to_string());
        if is_utc(&zone) {
            return Ok(plan);
        }
        let at = Arc::new(crate::pg_zone::udf(&zone));
        crate::semantics::rewrite_plan(
            plan,
            |_| true,
            |e, schema| {
                let (inner, to) = match &e {
                    Expr::Cast(Cast { expr, data_type }) => (expr, data_type),
                    Expr::TryCast(TryCast { expr, data_type }) => (expr, data_type),
                    _ => return Ok(Transformed::no(e)),
                };
                let from_zoned = matches!(
                    inner.get_type(schema),
                    Ok(DataType::Timestamp(_, Some(z))) if !is_utc(&z)
                );
                if !from_zoned || !matches!(to, DataType::Timestamp(_, None)) {
                    return Ok(Transformed::no(e));
                }
                let wall = at.call(vec![inner.as_ref().clone(), lit(zone.as_str())]);
                Ok(Transformed::yes(Expr::Cast(Cast::new(
                    Box::new(wall),
                    to.clone(),
                ))))
            },
        )
    }
}

fn zoned(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(_, Some(z)) if !is_utc(z))
}

/// Whether `e` (of an analyzed plan, over `schema`) computes something of a `timestamptz` in a
/// zone other than UTC: a function of one, a cast between one and another type (a text, a
/// date, a wall-clock timestamp), interval arithmetic on one, or a literal read in that zone.
/// Comparing, ordering and returning instants does not depend on the zone.
pub(crate) fn sensitive(e: &Expr, schema: &DFSchema) -> bool {
    let zoned_expr = |x: &Expr| x.get_type(schema).is_ok_and(|t| zoned(&t));
    match e {
        Expr::Cast(Cast { expr, data_type }) | Expr::TryCast(TryCast { expr, data_type }) => {
            let from = expr.get_type(schema).ok();
            let from_zoned = from.as_ref().is_some_and(zoned);
            let to_instant = matches!(data_type, DataType::Timestamp(_, Some(_)));
            let from_instant = matches!(from, Some(DataType::Timestamp(_, Some(_))));
            (from_zoned && !to_instant) || (zoned(data_type) && !from_instant)
        }
        Expr::ScalarFunction(f) => f.args.iter().any(zoned_expr),
        // A literal typed in the session's zone: a text or date read as that zone's wall clock
        // (what [`crate::pg_datetime_input`] makes of `ts >= '2024-03-01'`).
        Expr::Literal(v, _) => zoned(&v.data_type()),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Plus | Operator::Minus,
            right,
        }) => zoned_expr(left) || zoned_expr(right),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    const UNIT: TimeUnit = TimeUnit::Microsecond;

    #[test]
    fn utc_in_its_spellings_keeps_the_catalogs_types() {
        for z in ["UTC", "utc", "+00:00", "Etc/UTC", "GMT"] {
            assert!(column_zone(z).is_none(), "{z}");
        }
        for z in ["America/New_York", "+05:30", "-03:00", "Europe/Paris"] {
            assert_eq!(column_zone(z).as_deref(), Some(z));
        }
    }

    #[test]
    fn only_timestamptz_columns_change_zone() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Timestamp(UNIT, Some("+00:00".into())), true),
            Field::new("b", DataType::Timestamp(UNIT, None), true),
            Field::new("c", DataType::Int64, false),
        ]));
        let zoned = zoned_schema(&schema, &Arc::from("Asia/Tokyo"));
        assert_eq!(
            zoned.field(0).data_type(),
            &DataType::Timestamp(UNIT, Some("Asia/Tokyo".into()))
        );
        assert_eq!(zoned.field(1).data_type(), schema.field(1).data_type());
        assert_eq!(zoned.field(2), schema.field(2));
    }
}

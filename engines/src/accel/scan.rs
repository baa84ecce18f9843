//! The DataFusion table of an accelerated copy: its batches, narrowed by a hash index when a
//! filter looks a key up.
//!
//! Exactness does not rest on the index: every filter stays `Inexact`, so DataFusion checks
//! each row it is given exactly as it checks rows read from files. The index only has to give
//! a superset of the matching rows, and it gives exactly the rows holding the key: an index is
//! used only for `column = literal` (or `IN` a list of literals) where the literal is of the
//! column's kind (an integer for an integer column, text for text, a date for a date).

use std::any::Any;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::{BinaryExpr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::Expr;

use super::copy::{Key, KeyKind, TableCopy, key_kind};

/// An accelerated copy as one statement's table, its `timestamptz` columns in `zone`.
#[derive(Debug)]
pub(crate) struct HeldTable {
    copy: Arc<TableCopy>,
    zone: Option<Arc<str>>,
    schema: SchemaRef,
}

impl HeldTable {
    /// The copy as a table read in `zone` (`None`: UTC).
    pub(crate) fn new(copy: Arc<TableCopy>, zone: Option<Arc<str>>) -> Self {
        let schema = crate::session_zone::schema_in(copy.schema.clone(), zone.as_ref());
        Self { copy, zone, schema }
    }

    /// The rows an indexed filter narrows the copy to (`None`: no filter uses an index).
    fn narrowed(&self, filters: &[Expr]) -> DFResult<Option<Vec<RecordBatch>>> {
        for filter in filters {
            let Some((column, keys)) = lookup_of(filter, &self.copy.schema) else {
                continue;
            };
            if let Some(rows) = self
                .copy
                .lookup(column, &keys)
                .map_err(|e| DataFusionError::External(Box::new(e)))?
            {
                return Ok(Some(rows));
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl TableProvider for HeldTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let partitions = match self.narrowed(filters)? {
            Some(rows) => vec![rows],
            None => spread(&self.copy.batches, state.config().target_partitions()),
        };
        let scan: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(
            &partitions,
            self.copy.schema.clone(),
            projection.cloned(),
        )?;
        crate::session_zone::scan_in(scan, self.zone.as_ref())
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
}

/// `batches` dealt round-robin into `n` partitions (at least one).
fn spread(batches: &[RecordBatch], n: usize) -> Vec<Vec<RecordBatch>> {
    let n = n.clamp(1, batches.len().max(1));
    let mut out = vec![Vec::new(); n];
    for (i, b) in batches.iter().enumerate() {
        out[i % n].push(b.clone());
    }
    out
}

/// The column and keys `filter` looks up: `column = literal`, `literal = column` or
/// `column IN (literals)`, each literal of the column's kind.
fn lookup_of(filter: &Expr, schema: &SchemaRef) -> Option<(usize, Vec<Key>)> {
    let (column, literals): (&datafusion::common::Column, Vec<&ScalarValue>) = match filter {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => {
                (c, vec![v])
            }
            _ => return None,
        },
        Expr::InList(list) if !list.negated => {
            let Expr::Column(c) = list.expr.as_ref() else {
                return None;
            };
            let mut values = Vec::with_capacity(list.list.len());
            for e in &list.list {
                match e {
                    Expr::Literal(v, _) => values.push(v),
                    _ => return None,
                }
            }
            (c, values)
        }
        _ => return None,
    };
    let index = schema.index_of(&column.name).ok()?;
    let kind = key_kind(schema.field(index).data_type())?;
    let keys = literals
        .into_iter()
        .map(|v| key_of(v, kind))
        .collect::<Option<Vec<Key>>>()?;
    Some((index, keys))
}

/// The key `value` looks up in a column of `kind`; `None` when it is null or of another kind
/// (then the index is not used: the scan gives every row and the filter decides).
fn key_of(value: &ScalarValue, kind: KeyKind) -> Option<Key> {
    let int = |v: Option<i64>| v.map(Key::Int);
    match (kind, value) {
        (KeyKind::Int, ScalarValue::Int8(v)) => int(v.map(i64::from)),
        (KeyKind::Int, ScalarValue::Int16(v)) => int(v.map(i64::from)),
        (KeyKind::Int, ScalarValue::Int32(v)) => int(v.map(i64::from)),
        (KeyKind::Int, ScalarValue::Int64(v)) => int(*v),
        (KeyKind::Int, ScalarValue::UInt8(v)) => int(v.map(i64::from)),
        (KeyKind::Int, ScalarValue::UInt16(v)) => int(v.map(i64::from)),
        (KeyKind::Int, ScalarValue::UInt32(v)) => int(v.map(i64::from)),
        (KeyKind::Int, ScalarValue::UInt64(v)) => int(v.and_then(|v| i64::try_from(v).ok())),
        (KeyKind::Date, ScalarValue::Date32(v)) => int(v.map(i64::from)),
        (
            KeyKind::Text,
            ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v),
        ) => v.as_deref().map(|s| Key::Text(s.into())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::{col, lit};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("day", DataType::Date32, true),
        ]))
    }

    #[test]
    fn lookups_are_taken_only_for_a_literal_of_the_columns_kind() {
        let s = schema();
        assert_eq!(
            lookup_of(&col("id").eq(lit(7i64)), &s),
            Some((0, vec![Key::Int(7)]))
        );
        assert_eq!(
            lookup_of(&lit("x").eq(col("name")), &s),
            Some((1, vec![Key::Text("x".into())]))
        );
        assert_eq!(
            lookup_of(&col("id").in_list(vec![lit(1i32), lit(2i32)], false), &s),
            Some((0, vec![Key::Int(1), Key::Int(2)]))
        );
        // Another kind, a null, a negated list, a non-equality, an unindexable type: no lookup.
        assert_eq!(lookup_of(&col("id").eq(lit("7")), &s), None);
        assert_eq!(lookup_of(&col("name").eq(lit(7i64)), &s), None);
        assert_eq!(
            lookup_of(&col("id").eq(lit(ScalarValue::Int64(None))), &s),
            None
        );
        assert_eq!(
            lookup_of(&col("id").in_list(vec![lit(1i32)], true), &s),
            None
        );
        assert_eq!(lookup_of(&col("id").gt(lit(7i64)), &s), None);
        assert_eq!(
            lookup_of(
                &col("price").eq(lit(ScalarValue::Decimal128(Some(1), 10, 2))),
                &s
            ),
            None
        );
        assert_eq!(
            lookup_of(&col("day").eq(lit(ScalarValue::Date32(Some(3)))), &s),
            Some((3, vec![Key::Int(3)]))
        );
        assert_eq!(lookup_of(&col("day").eq(lit(3i32)), &s), None);
        // Out of an integer's range: no lookup (the filter still decides).
        assert_eq!(lookup_of(&col("id").eq(lit(u64::MAX)), &s), None);
    }

    #[test]
    fn batches_are_spread_over_at_most_as_many_partitions_as_there_are_batches() {
        assert_eq!(spread(&[], 4).len(), 1);
    }
}

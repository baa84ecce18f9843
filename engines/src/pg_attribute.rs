//! `pg_catalog.pg_attribute` with exact column types.
//!
//! `datafusion-pg-catalog` lists the columns (with table OIDs consistent with its `pg_class`)
//! but reports some types as `text` (timestamptz, arrays, intervals) and drops numeric
//! precision and scale. BI tools pick charts and filters from these types, so this wrapper
//! takes its rows and rewrites the type columns from each table's real Arrow schema.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Int16Array, Int32Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use postgres_types::Type;

use crate::system_catalog::LakeCatalogInfo;

/// The PostgreSQL storage facts of a type: (oid, typlen, byval, align, storage, typmod, ndims).
pub fn pg_type_facts(
    data_type: &DataType,
) -> (i32, i16, bool, &'static str, &'static str, i32, i32) {
    let ty = arrow_pg::datatypes::into_pg_type(data_type).unwrap_or(Type::TEXT);
    let oid = ty.oid() as i32;
    let typmod = match data_type {
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            ((i32::from(*p) << 16) | i32::from(*s as u8)) + 4
        }
        _ => -1,
    };
    let array = matches!(ty.kind(), postgres_types::Kind::Array(_));
    let (len, byval, align, storage) = if array {
        (-1, false, "d", "x")
    } else {
        match ty {
            Type::BOOL | Type::CHAR => (1, true, "c", "p"),
            Type::INT2 => (2, true, "s", "p"),
            Type::INT4 | Type::FLOAT4 | Type::DATE => (4, true, "i", "p"),
            Type::INT8 | Type::FLOAT8 | Type::TIME | Type::TIMESTAMP | Type::TIMESTAMPTZ => {
                (8, true, "d", "p")
            }
            Type::INTERVAL => (16, false, "d", "p"),
            Type::NUMERIC => (-1, false, "i", "m"),
            _ => (-1, false, "i", "x"),
        }
    };
    (
        oid,
        len,
        byval,
        align,
        storage,
        typmod,
        if array { 1 } else { 0 },
    )
}

/// `pg_attribute` rows from `datafusion-pg-catalog`, with types corrected.
#[derive(Debug)]
pub struct PgAttribute {
    inner: Arc<dyn SchemaProvider>,
    info: LakeCatalogInfo,
    database: String,
    schema: SchemaRef,
}

impl PgAttribute {
    /// Wraps the `pg_catalog` schema `inner` whose `pg_attribute` has the schema `schema`.
    pub fn new(
        inner: Arc<dyn SchemaProvider>,
        info: LakeCatalogInfo,
        database: String,
        schema: SchemaRef,
    ) -> Self {
        Self {
            inner,
            info,
            database,
            schema,
        }
    }

    async fn collect(&self, state: &dyn Session, table: &str) -> Result<Vec<RecordBatch>> {
        let provider = self
            .inner
            .table(table)
            .await?
            .ok_or_else(|| DataFusionError::Plan(format!("pg_catalog.{table} is missing")))?;
        let plan = provider.scan(state, None, &[], None).await?;
        datafusion::physical_plan::collect(plan, state.task_ctx()).await
    }

    /// relation oid → (schema, table) from pg_class and pg_namespace.
    async fn relations(&self, state: &dyn Session) -> Result<HashMap<i32, (String, String)>> {
        let mut namespaces = HashMap::new();
        for b in self.collect(state, "pg_namespace").await? {
            let oids = int32(&b, "oid")?;
            let names = text(&b, "nspname")?;
            for i in 0..b.num_rows() {
                namespaces.insert(oids.value(i), names.value(i).to_string());
            }
        }
        let mut out = HashMap::new();
        for b in self.collect(state, "pg_class").await? {
            let oids = int32(&b, "oid")?;
            let names = text(&b, "relname")?;
            let ns = int32(&b, "relnamespace")?;
            for i in 0..b.num_rows() {
                if let Some(schema) = namespaces.get(&ns.value(i)) {
                    out.insert(oids.value(i), (schema.clone(), names.value(i).to_string()));
                }
            }
        }
        Ok(out)
    }

    async fn corrected(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let relations = self.relations(state).await?;
        let mut schemas: HashMap<i32, Option<SchemaRef>> = HashMap::new();
        let mut out = Vec::new();
        for batch in self.collect(state, "pg_attribute").await? {
            let relids = int32(&batch, "attrelid")?;
            let attnums = batch
                .column_by_name("attnum")
                .and_then(|c| c.as_any().downcast_ref::<Int16Array>())
                .ok_or_else(|| DataFusionError::Plan("pg_attribute.attnum".into()))?;
            let n = batch.num_rows();
            let (mut typid, mut len, mut byval, mut align, mut storage, mut typmod, mut ndims) = (
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
            );
            for i in 0..n {
                let relid = relids.value(i);
                if let std::collections::hash_map::Entry::Vacant(slot) = schemas.entry(relid) {
                    let schema = match relations.get(&relid) {
                        Some((s, t)) => self.info.table_schema(&self.database, s, t).await?,
                        None => None,
                    };
                    slot.insert(schema);
                }
                let field_type = schemas
                    .get(&relid)
                    .and_then(|s| s.as_ref())
                    .and_then(|s| {
                        s.fields()
                            .get(attnums.value(i) as usize - 1)
                            .map(|f| f.data_type().clone())
                    })
                    .unwrap_or(DataType::Utf8);
                let (o, l, b, a, st, m, d) = pg_type_facts(&field_type);
                typid.push(o);
                len.push(l);
                byval.push(b);
                align.push(a);
                storage.push(st);
                typmod.push(m);
                ndims.push(d);
            }
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            let replace = |columns: &mut Vec<ArrayRef>, name: &str, array: ArrayRef| {
                if let Ok(idx) = batch.schema().index_of(name) {
                    columns[idx] = array;
                }
            };
            replace(&mut columns, "atttypid", Arc::new(Int32Array::from(typid)));
            replace(&mut columns, "attlen", Arc::new(Int16Array::from(len)));
            replace(
                &mut columns,
                "attbyval",
                Arc::new(BooleanArray::from(byval)),
            );
            replace(&mut columns, "attalign", Arc::new(StringArray::from(align)));
            replace(
                &mut columns,
                "attstorage",
                Arc::new(StringArray::from(storage)),
            );
            replace(
                &mut columns,
                "atttypmod",
                Arc::new(Int32Array::from(typmod)),
            );
            replace(&mut columns, "attndims", Arc::new(Int32Array::from(ndims)));
            out.push(RecordBatch::try_new(batch.schema(), columns)?);
        }
        Ok(out)
    }
}

fn int32<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a Int32Array> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<Int32Array>())
        .ok_or_else(|| DataFusionError::Plan(format!("pg_catalog column {name} is not int4")))
}

fn text<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| DataFusionError::Plan(format!("pg_catalog column {name} is not text")))
}

#[async_trait]
impl TableProvider for PgAttribute {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batches = self.corrected(state).await?;
        let table = MemTable::try_new(self.schema.clone(), vec![batches])?;
        table.scan(state, projection, filters, limit).await
    }
}

/// `pg_catalog` as served: the library's schema with [`PgAttribute`] in place of its own.
#[derive(Debug)]
pub struct PgCatalogSchema {
    inner: Arc<dyn SchemaProvider>,
    info: LakeCatalogInfo,
    database: String,
}

impl PgCatalogSchema {
    /// Wraps the library's `pg_catalog` schema.
    pub fn new(inner: Arc<dyn SchemaProvider>, info: LakeCatalogInfo, database: String) -> Self {
        Self {
            inner,
            info,
            database,
        }
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogSchema {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.inner.table(name).await?;
        if name.eq_ignore_ascii_case("pg_attribute")
            && let Some(t) = &table
        {
            return Ok(Some(Arc::new(PgAttribute::new(
                self.inner.clone(),
                self.info.clone(),
                self.database.clone(),
                t.schema(),
            ))));
        }
        Ok(table)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, TimeUnit};

    #[test]
    fn types_that_bi_tools_need() {
        let tz = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        assert_eq!(pg_type_facts(&tz).0, 1184);
        assert_eq!(
            pg_type_facts(&DataType::Timestamp(TimeUnit::Microsecond, None)).0,
            1114
        );
        let (oid, _, _, _, _, typmod, _) = pg_type_facts(&DataType::Decimal128(12, 2));
        assert_eq!((oid, typmod), (1700, (12 << 16 | 2) + 4));
        let list = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
        let (oid, _, _, _, _, _, ndims) = pg_type_facts(&list);
        assert_eq!((oid, ndims), (1016, 1));
    }
}

//! The DataFusion table of one pinned Iceberg snapshot, planned from the lake's kept data files
//! ([`crate::lake::files`]) and read by iceberg-rust's own Parquet reader, small files from
//! memory once read ([`crate::lake::decoded`]).
//!
//! A scan prunes the snapshot's files by the statement's filters (converted to an Iceberg
//! predicate the way iceberg-datafusion converts them) without reading a manifest; a snapshot
//! the index does not take (delete files, encryption, a name mapping) is planned by
//! iceberg-datafusion's own provider, as before. Filters stay `Inexact`: DataFusion checks
//! every row it is given.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::TableProviderFilterPushDown;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::prelude::Expr;
use futures::{StreamExt, TryStreamExt};
use iceberg::expr::Bind;
use iceberg::scan::FileScanTask;
use iceberg::spec::SnapshotRef;
use iceberg::table::Table;
use iceberg_datafusion::IcebergStaticTableProvider;
use iceberg_datafusion::physical_plan::convert_filters_to_predicate;

use crate::lake::Lake;
use crate::lake::decoded::DecodedFiles;

fn external(e: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// One table at one snapshot, for one statement.
#[derive(Debug)]
pub(crate) struct LakeTable {
    lake: Arc<Lake>,
    table: Table,
    snapshot: Option<SnapshotRef>,
    /// iceberg-datafusion's provider: the schema, and the scan of what the index does not take.
    fallback: IcebergStaticTableProvider,
    /// The session's zone its `timestamptz` columns are read in (`None`: UTC, as stored); see
    /// [`crate::session_zone`].
    zone: Option<Arc<str>>,
    /// The table's columns as the statement sees them (in `zone`).
    schema: SchemaRef,
}

impl LakeTable {
    /// The table at `snapshot_id` (`None`: a table with no snapshot yet), its `timestamptz`
    /// columns in `zone`.
    pub(crate) async fn try_new(
        lake: Arc<Lake>,
        table: Table,
        snapshot_id: Option<i64>,
        zone: Option<Arc<str>>,
    ) -> DFResult<Self> {
        let (snapshot, fallback) = match snapshot_id {
            Some(id) => (
                table.metadata().snapshot_by_id(id).cloned(),
                IcebergStaticTableProvider::try_new_from_table_snapshot(table.clone(), id).await,
            ),
            None => (
                None,
                IcebergStaticTableProvider::try_new_from_table(table.clone()).await,
            ),
        };
        let fallback = fallback.map_err(external)?;
        let schema = crate::session_zone::schema_in(fallback.schema(), zone.as_ref());
        Ok(Self {
            lake,
            table,
            snapshot,
            fallback,
            zone,
            schema,
        })
    }

    /// The table's columns as stored (UTC), whatever the session's zone.
    pub(crate) fn stored_schema(&self) -> SchemaRef {
        self.fallback.schema()
    }

    /// The filters iceberg-rust may prune with: none that reads a float column. Parquet writers
    /// leave NaN out of a row group's min/max, so iceberg-rust's row-group filter drops a group
    /// holding NaN for `score > 4`, where PostgreSQL counts NaN as above every number.
    /// DataFusion still applies every filter to the rows read (they are `Inexact`).
    fn pushable(&self, filters: &[Expr]) -> Vec<Expr> {
        let schema = self.fallback.schema();
        filters
            .iter()
            .filter(|f| {
                f.column_refs().iter().all(|c| {
                    schema
                        .field_with_name(&c.name)
                        .is_ok_and(|field| !field.data_type().is_floating())
                })
            })
            .cloned()
            .collect()
    }

    /// The indexed scan, or `None` when iceberg-datafusion must plan it.
    async fn indexed(
        &self,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DFResult<Option<LakeScanExec>> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(None);
        };
        let Some(files) = self
            .lake
            .files()
            .snapshot(&self.table, snapshot)
            .await
            .map_err(external)?
        else {
            return Ok(None);
        };
        let schema = snapshot.schema(self.table.metadata()).map_err(external)?;
        let arrow = self.fallback.schema();
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..arrow.fields().len()).collect(),
        };
        let mut field_ids = Vec::with_capacity(columns.len());
        for i in &columns {
            match schema.field_id_by_name(arrow.field(*i).name()) {
                Some(id) => field_ids.push(id),
                None => return Ok(None),
            }
        }
        // A filter that does not bind (a type iceberg cannot compare) prunes nothing.
        let predicate =
            convert_filters_to_predicate(filters).and_then(|p| p.bind(schema.clone(), true).ok());
        let tasks = files.tasks(&schema, &field_ids, predicate.as_ref());
        let output = Arc::new(arrow.project(&columns)?);
        Ok(Some(LakeScanExec {
            reader: self.lake.files().reader(&self.table),
            decoded: self.lake.files().decoded().cloned(),
            table: self.table.metadata().uuid(),
            files: files.len(),
            tasks: tasks.into(),
            properties: Arc::new(PlanProperties::new(
                EquivalenceProperties::new(output.clone()),
                Partitioning::UnknownPartitioning(1),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )),
            schema: output,
        }))
    }
}

#[async_trait]
impl TableProvider for LakeTable {
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
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let pushed = self.pushable(filters);
        // A pushed-down `limit` is only a hint: the limit above the scan stops pulling rows.
        let scan: Arc<dyn ExecutionPlan> = match self.indexed(projection, &pushed).await? {
            Some(scan) => Arc::new(scan),
            None => {
                self.fallback
                    .scan(state, projection, &pushed, limit)
                    .await?
            }
        };
        crate::session_zone::scan_in(scan, self.zone.as_ref())
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
}

/// The rows a lake scan gives at most (its files' row counts, before deletes and filters), when
/// `plan` is one ([`crate::direct`] runs a sort over at most so many rows).
pub(crate) fn rows_at_most(plan: &dyn Any) -> Option<usize> {
    let scan = plan.downcast_ref::<LakeScanExec>()?;
    scan.tasks.iter().try_fold(0usize, |sum, t| {
        sum.checked_add(usize::try_from(t.record_count?).ok()?)
    })
}

/// Reads the files a statement's filters left, with iceberg-rust's Parquet reader (small files
/// through the kept decoded ones when they are on).
struct LakeScanExec {
    reader: iceberg::arrow::ArrowReader,
    /// Small files kept decoded ([`crate::lake::decoded`]; `None`: off).
    decoded: Option<Arc<DecodedFiles>>,
    /// The table's UUID (part of a decoded file's key).
    table: uuid::Uuid,
    /// Data files of the snapshot (for EXPLAIN).
    files: usize,
    tasks: Arc<[FileScanTask]>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for LakeScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LakeScanExec")
            .field("files", &self.files)
            .field("reads", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl DisplayAs for LakeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LakeScan: {} of {} files, projection=[{}]",
            self.tasks.len(),
            self.files,
            self.schema
                .fields()
                .iter()
                .map(|c| c.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        match self.tasks.first().and_then(|t| t.predicate.as_ref()) {
            Some(p) => write!(f, ", predicate=[{p}]"),
            None => Ok(()),
        }
    }
}

impl ExecutionPlan for LakeScanExec {
    fn name(&self) -> &str {
        "LakeScan"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let read = match &self.decoded {
            Some(decoded) => decoded
                .read(&self.reader, self.table, &self.tasks)
                .map_err(external)?,
            None => crate::lake::files::read_tasks(&self.reader, self.tasks.to_vec())
                .map_err(external)?,
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            read.map_err(external).boxed(),
        )))
    }
}

//! Compaction of one partition's files on DataFusion: read them at the snapshot they were
//! planned at (delete files applied by iceberg-rust's reader), sort by the columns the table is
//! filtered on (DataFusion's sort, spilling past `sort_memory`), write files near the target
//! size, and commit a `replace` snapshot that swaps exactly those files — re-applied over newer
//! appends, abandoned (and the new files deleted) on a real conflict.

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef as ArrowSchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::{SessionConfig, SessionContext, ident};
use futures::{StreamExt, TryStreamExt};
use iceberg::TableIdent;
use iceberg::arrow::FieldMatchMode;
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, PartitionKey, SnapshotRef};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};

use crate::commit::Committer;
use crate::error::{Error, Result};
use crate::inventory::{LiveFile, ManifestCache};
use crate::snapshot::Replace;

/// One compaction: a partition's files as planned.
#[derive(Debug, Clone)]
pub struct Job {
    /// The table.
    pub ident: TableIdent,
    /// The snapshot the files were planned at.
    pub start: SnapshotRef,
    /// The partition's spec id and label.
    pub spec_id: i32,
    /// The partition, labelled.
    pub partition: String,
    /// Data files to rewrite.
    pub files: Vec<LiveFile>,
    /// Delete files of the partition at `start`; removed when `files` is the whole partition.
    pub deletes: Vec<LiveFile>,
    /// Whether `files` is every data file of the partition.
    pub whole_partition: bool,
    /// Sort columns (empty: keep the read order).
    pub sort: Vec<String>,
    /// Target file size.
    pub target_file_size: u64,
    /// Memory the sort may use before spilling.
    pub sort_memory: u64,
    /// The branch to commit to (`None`: main); a layout experiment's.
    pub branch: Option<String>,
}

/// What a compaction did.
#[derive(Debug, Clone, Default)]
pub struct Compacted {
    /// Files written.
    pub files_out: usize,
    /// Bytes written.
    pub bytes_out: u64,
    /// Rows read (after deletes) and written.
    pub rows: u64,
    /// Delete files removed.
    pub deletes_removed: usize,
    /// The new snapshot.
    pub snapshot_id: i64,
    /// Commit attempts (more than one: it was re-applied over newer commits).
    pub attempts: usize,
}

/// Runs `job`.
///
/// # Errors
/// [`Error::Conflict`] when the files changed under it (nothing committed, nothing lost);
/// [`Error::Invariant`] if rows read and written disagree; IO and catalog errors.
pub async fn run(committer: &Committer, cache: &ManifestCache, job: &Job) -> Result<Compacted> {
    let table = committer.load(&job.ident).await?;
    let written = write(&table, job).await?;
    let result = commit(committer, cache, job, &written.0).await;
    match result {
        Ok((snapshot_id, attempts)) => Ok(Compacted {
            files_out: written.0.len(),
            bytes_out: written.0.iter().map(|f| f.file_size_in_bytes()).sum(),
            rows: written.1,
            deletes_removed: if job.whole_partition {
                job.deletes.len()
            } else {
                0
            },
            snapshot_id,
            attempts,
        }),
        Err(e) => {
            // Known not committed (a conflict or a check): the new files are ours alone.
            if matches!(
                e,
                Error::Conflict(_) | Error::Invariant(_) | Error::Unsupported(_)
            ) {
                for f in &written.0 {
                    let _ = table.file_io().delete(f.file_path()).await;
                }
            }
            Err(e)
        }
    }
}

/// Reads, sorts and writes the job's rows; returns the new files and the row count.
async fn write(table: &Table, job: &Job) -> Result<(Vec<DataFile>, u64)> {
    let wanted: std::collections::HashSet<&str> = job.files.iter().map(|f| f.path()).collect();
    let scan = table
        .scan()
        .snapshot_id(job.start.snapshot_id())
        .select_all()
        .build()?;
    let tasks: Vec<_> = scan
        .plan_files()
        .await?
        .try_filter(|t| futures::future::ready(wanted.contains(t.data_file_path.as_str())))
        .try_collect()
        .await?;
    let planned: std::collections::HashSet<&str> =
        tasks.iter().map(|t| t.data_file_path.as_str()).collect();
    if planned.len() != wanted.len() {
        return Err(Error::Conflict(format!(
            "{} planned files are not in snapshot {}",
            wanted.len() - planned.len(),
            job.start.snapshot_id()
        )));
    }
    let deletes_apply = tasks.iter().any(|t| !t.deletes.is_empty());
    let records_in: u64 = job.files.iter().map(|f| f.data_file.record_count()).sum();
    let arrow_schema: ArrowSchemaRef = Arc::new(iceberg::arrow::schema_to_arrow_schema(
        table.metadata().current_schema(),
    )?);
    let rows = table
        .reader_builder()
        .build()
        .read(Box::pin(futures::stream::iter(tasks.into_iter().map(Ok))))?
        .stream()
        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
    let source: SendableRecordBatchStream =
        Box::pin(RecordBatchStreamAdapter::new(arrow_schema.clone(), rows));
    let sorted = sort(source, arrow_schema, &job.sort, job.sort_memory).await?;

    let props = table.metadata().table_properties()?;
    let parquet = ParquetWriterBuilder::from_table_properties(
        &props,
        table.metadata().current_schema().clone(),
    )
    .with_match_mode(FieldMatchMode::Name);
    let rolling = RollingFileWriterBuilder::new(
        parquet,
        job.target_file_size as usize,
        table.file_io().clone(),
        DefaultLocationGenerator::new(table.metadata())?,
        DefaultFileNameGenerator::new(
            format!("lakegate-{}", uuid::Uuid::now_v7()),
            None,
            DataFileFormat::Parquet,
        ),
    );
    let spec = table
        .metadata()
        .partition_spec_by_id(job.spec_id)
        .ok_or_else(|| Error::Invariant(format!("unknown partition spec {}", job.spec_id)))?;
    let key = match job.files.first() {
        Some(f) if !spec.is_unpartitioned() => Some(PartitionKey::new(
            spec.as_ref().clone(),
            table.metadata().current_schema().clone(),
            f.data_file.partition().clone(),
        )),
        _ => None,
    };
    let mut writer = DataFileWriterBuilder::new(rolling).build(key).await?;
    let mut sorted = sorted;
    let mut rows_out = 0u64;
    while let Some(batch) = sorted.next().await {
        let batch = batch?;
        rows_out += batch.num_rows() as u64;
        writer.write(batch).await?;
    }
    let files = writer.close().await?;
    let rows_written: u64 = files.iter().map(|f| f.record_count()).sum();
    let failed = if rows_written != rows_out {
        Some(format!("wrote {rows_written} rows but read {rows_out}"))
    } else if !deletes_apply && rows_out != records_in {
        Some(format!(
            "read {rows_out} rows from files holding {records_in} (no deletes apply)"
        ))
    } else if rows_out > records_in {
        Some(format!(
            "read {rows_out} rows from files holding {records_in}"
        ))
    } else {
        None
    };
    if let Some(why) = failed {
        for f in &files {
            let _ = table.file_io().delete(f.file_path()).await;
        }
        return Err(Error::Invariant(why));
    }
    Ok((files, rows_out))
}

/// Sorts `input` by `columns` (ascending, NULLs first) with DataFusion, spilling to disk past
/// `memory` bytes; no columns: the input as it is.
async fn sort(
    input: SendableRecordBatchStream,
    schema: ArrowSchemaRef,
    columns: &[String],
    memory: u64,
) -> Result<SendableRecordBatchStream> {
    if columns.is_empty() {
        return Ok(input);
    }
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(memory as usize)))
        .build_arc()?;
    let ctx =
        SessionContext::new_with_config_rt(SessionConfig::new().with_target_partitions(1), runtime);
    let source = OneShot {
        schema: schema.clone(),
        stream: Mutex::new(Some(input)),
    };
    let table = StreamingTable::try_new(schema, vec![Arc::new(source)])?;
    let df = ctx
        .read_table(Arc::new(table))?
        .sort(columns.iter().map(|c| ident(c).sort(true, true)).collect())?;
    Ok(df.execute_stream().await?)
}

/// A stream DataFusion reads once.
struct OneShot {
    schema: ArrowSchemaRef,
    stream: Mutex<Option<SendableRecordBatchStream>>,
}

impl std::fmt::Debug for OneShot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OneShot")
    }
}

impl PartitionStream for OneShot {
    fn schema(&self) -> &ArrowSchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<datafusion::execution::TaskContext>) -> SendableRecordBatchStream {
        let taken = self.stream.lock().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some(s) => s,
            None => Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                futures::stream::once(async {
                    Err(datafusion::error::DataFusionError::Internal(
                        "compaction input read twice".into(),
                    ))
                }),
            )),
        }
    }
}

/// Commits the swap, re-applying it over newer snapshots; returns the snapshot and attempts.
async fn commit(
    committer: &Committer,
    cache: &ManifestCache,
    job: &Job,
    added: &[DataFile],
) -> Result<(i64, usize)> {
    let mut remove: std::collections::HashSet<String> =
        job.files.iter().map(|f| f.path().to_string()).collect();
    if job.whole_partition {
        remove.extend(job.deletes.iter().map(|f| f.path().to_string()));
    }
    let replace = Replace {
        remove,
        add: added.to_vec(),
        add_sequence: Some(job.start.sequence_number()),
        merge_manifests_below: None,
        guard_partitions: [(job.spec_id, job.partition.clone())].into_iter().collect(),
        known_deletes: job
            .deletes
            .iter()
            .filter(|d| d.data_file.content_type() != DataContentType::Data)
            .map(|d| d.path().to_string())
            .collect(),
        branch: job.branch.clone(),
    };
    commit_replace(committer, cache, &job.ident, &replace).await
}

/// Commits `replace` on top of the table's current snapshot, retrying (re-validated and
/// re-applied on the newest snapshot) while other writers win the swap.
///
/// # Errors
/// [`Error::Conflict`] when validation fails or the table keeps moving for every attempt.
pub async fn commit_replace(
    committer: &Committer,
    cache: &ManifestCache,
    ident: &TableIdent,
    replace: &Replace,
) -> Result<(i64, usize)> {
    // A writer committing every 100 ms wins most races against a slow commit: keep trying
    // with short jittered pauses (the re-application itself is cheap; manifests are cached).
    const ATTEMPTS: usize = 25;
    let mut last = None;
    for attempt in 1..=ATTEMPTS {
        let table = committer.load(ident).await?;
        let produced = crate::snapshot::produce(&table, replace, cache).await?;
        match committer
            .commit(&table, produced.updates, produced.requirements)
            .await
        {
            Ok(_) => return Ok((produced.snapshot_id, attempt)),
            Err(Error::Conflict(why)) => {
                for path in &produced.written {
                    let _ = table.file_io().delete(path).await;
                }
                tracing::debug!(%ident, attempt, %why, "commit lost the race; re-applying");
                last = Some(why);
                tokio::time::sleep(jitter(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict(format!(
        "the table moved on every one of {ATTEMPTS} attempts: {}",
        last.unwrap_or_default()
    )))
}

/// A short pause before retry `attempt`: 5–40 ms, growing slowly, randomised so two
/// committers do not retry in lockstep.
pub fn jitter(attempt: usize) -> std::time::Duration {
    let spread = 5 + (attempt as u64).min(7) * 5;
    let r = uuid::Uuid::new_v4().as_u64_pair().0 % spread;
    std::time::Duration::from_millis(5 + r)
}

//! Scan planning that does not start from zero: the data files of each snapshot, kept.
//!
//! iceberg-rust plans a scan by reading the manifest list, every manifest, and evaluating each
//! entry on a task of its own through channels — per statement. On a table a streaming writer
//! left (hundreds of small files, one manifest per commit) that is most of a point lookup's
//! CPU. Manifests never change once written, so this keeps their live data entries by path
//! (after a commit only the new manifest is read) and each snapshot's entries by its manifest
//! list; a statement then prunes the kept entries by their column bounds and hands the
//! survivors to iceberg-rust's own Parquet reader.
//!
//! Exactness: pruning only drops a file whose bounds prove no row can match (the reader and
//! DataFusion's filter still check every row). A snapshot with delete files, an encrypted
//! table or one that needs a name mapping is not indexed: iceberg-rust plans it as before.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReader;
use iceberg::expr::{BoundPredicate, PredicateOperator};
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataContentType, DataFile, Datum, ManifestContentType, ManifestEntryRef, PrimitiveType,
    SchemaRef, SnapshotRef, Type,
};
use iceberg::table::Table;

use super::decoded::DecodedFiles;
use crate::error::Result;

/// Property that makes iceberg-rust map columns by name (files written without field ids).
const NAME_MAPPING: &str = "schema.name-mapping.default";
/// Manifests read at once when a snapshot is first indexed (object stores pay a round trip each).
const LOAD_CONCURRENCY: usize = 16;
/// Kept manifest entries, at most (each holds a file's path, partition and column bounds).
const MAX_ENTRIES: u64 = 200_000;

/// One manifest's live data files.
type Entries = Arc<[ManifestEntryRef]>;

/// A snapshot's data files, manifest by manifest.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotFiles {
    manifests: Arc<[Entries]>,
    /// The bounds of each column a filter compared, file by file (made at its first filter).
    columns: Arc<Columns>,
}

/// What pruning reads of one file's column, taken out of the file's maps once per snapshot:
/// looking four maps up per file and column was most of a point lookup's pruning of 666 files
/// (perf, release build, 2026-12-05: 7% of the statement's CPU).
#[derive(Debug)]
struct ColumnStat {
    lower: Option<Datum>,
    upper: Option<Datum>,
    only_nulls: bool,
}

impl ColumnStat {
    fn of(file: &DataFile, id: i32) -> Self {
        Self {
            lower: file.lower_bounds().get(&id).cloned(),
            upper: file.upper_bounds().get(&id).cloned(),
            only_nulls: only_nulls(
                file.null_value_counts().get(&id),
                file.value_counts().get(&id),
            ),
        }
    }
}

/// Each compared column's [`ColumnStat`]s, in the order of [`SnapshotFiles::data_files`].
#[derive(Debug, Default)]
struct Columns(std::sync::Mutex<std::collections::HashMap<i32, Arc<[ColumnStat]>>>);

impl SnapshotFiles {
    /// How many data files the snapshot has.
    pub(crate) fn len(&self) -> usize {
        self.manifests.iter().map(|m| m.len()).sum()
    }

    /// The scan tasks for the files `predicate` may match, reading `field_ids` with `schema`.
    pub(crate) fn tasks(
        &self,
        schema: &SchemaRef,
        field_ids: &[i32],
        predicate: Option<&BoundPredicate>,
    ) -> Vec<FileScanTask> {
        let Some(predicate) = predicate else {
            return self
                .data_files()
                .map(|file| task(file, schema, field_ids, None))
                .collect();
        };
        let columns = self.compared(predicate);
        self.data_files()
            .enumerate()
            .filter(|(at, file)| {
                // Every compared column is in `columns`; a file without a stat is kept.
                let stat = |id: i32| {
                    columns
                        .iter()
                        .find(|(c, _)| *c == id)
                        .and_then(|(_, stats)| stats.get(*at))
                };
                matches_with(predicate, file, &stat)
            })
            .map(|(_, file)| task(file, schema, field_ids, Some(predicate)))
            .collect()
    }

    /// The kept stats of every column `predicate` compares (made now for a column seen first).
    fn compared(&self, predicate: &BoundPredicate) -> Vec<(i32, Arc<[ColumnStat]>)> {
        let mut ids = Vec::new();
        compared_columns(predicate, &mut ids);
        let mut kept = self.columns.0.lock().unwrap_or_else(|p| p.into_inner());
        ids.into_iter()
            .map(|id| {
                let stats = kept
                    .entry(id)
                    .or_insert_with(|| self.data_files().map(|f| ColumnStat::of(f, id)).collect());
                (id, stats.clone())
            })
            .collect()
    }

    /// Every data file of the snapshot.
    pub(crate) fn data_files(&self) -> impl Iterator<Item = &DataFile> {
        self.manifests
            .iter()
            .flat_map(|m| m.iter())
            .map(|e| e.data_file())
    }
}

/// The batches `reader` gives for `tasks`, as one stream.
///
/// # Errors
/// The reader's, at once or in the stream.
pub(crate) fn read_tasks(
    reader: &ArrowReader,
    tasks: Vec<FileScanTask>,
) -> iceberg::Result<iceberg::scan::ArrowRecordBatchStream> {
    let tasks = futures::stream::iter(tasks.into_iter().map(Ok));
    Ok(reader.clone().read(Box::pin(tasks))?.stream())
}

/// Every batch `reader` gives for one task (one file).
///
/// # Errors
/// The reader's.
pub(crate) async fn read_file(
    reader: &ArrowReader,
    task: FileScanTask,
) -> iceberg::Result<Vec<arrow::array::RecordBatch>> {
    read_tasks(reader, vec![task])?.try_collect().await
}

/// The scan task reading `field_ids` of all of `file` with `schema`, filtered by `predicate`.
pub(crate) fn task(
    file: &DataFile,
    schema: &SchemaRef,
    field_ids: &[i32],
    predicate: Option<&BoundPredicate>,
) -> FileScanTask {
    FileScanTask {
        file_size_in_bytes: file.file_size_in_bytes(),
        start: 0,
        length: file.file_size_in_bytes(),
        record_count: Some(file.record_count()),
        data_file_path: file.file_path().to_string(),
        data_file_format: file.file_format(),
        schema: schema.clone(),
        project_field_ids: field_ids.to_vec(),
        predicate: predicate.cloned(),
        deletes: vec![],
        partition: Some(file.partition().clone()),
        partition_spec: None,
        name_mapping: None,
        case_sensitive: true,
    }
}

/// The kept manifests and snapshots of every table the lake reads.
pub(crate) struct FileIndex {
    /// Live data entries by manifest path.
    manifests: moka::sync::Cache<String, Entries>,
    /// Snapshots by manifest-list path; `None`: not indexable (iceberg-rust plans it).
    snapshots: moka::sync::Cache<String, Option<SnapshotFiles>>,
    /// A Parquet reader per table version (building one asks the OS for the CPU count).
    readers: moka::sync::Cache<String, ArrowReader>,
    /// Small data files kept decoded (`None`: off).
    decoded: Option<Arc<DecodedFiles>>,
}

impl std::fmt::Debug for FileIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileIndex")
            .field("manifests", &self.manifests.entry_count())
            .field("snapshots", &self.snapshots.entry_count())
            .finish()
    }
}

impl Default for FileIndex {
    fn default() -> Self {
        Self::new(0)
    }
}

impl FileIndex {
    /// An empty index that keeps up to `decoded_bytes` of small files decoded (0: none).
    pub(crate) fn new(decoded_bytes: u64) -> Self {
        let weigh = |n: usize| u32::try_from(n.saturating_add(1)).unwrap_or(u32::MAX);
        Self {
            manifests: moka::sync::Cache::builder()
                .max_capacity(MAX_ENTRIES)
                .weigher(move |_: &String, e: &Entries| weigh(e.len()))
                .build(),
            snapshots: moka::sync::Cache::builder()
                .max_capacity(MAX_ENTRIES)
                .weigher(move |_: &String, s: &Option<SnapshotFiles>| {
                    weigh(s.as_ref().map_or(0, |s| s.manifests.len()))
                })
                .build(),
            readers: moka::sync::Cache::new(1024),
            decoded: DecodedFiles::new(decoded_bytes),
        }
    }

    /// The small files kept decoded (`None`: off).
    pub(crate) fn decoded(&self) -> Option<&Arc<DecodedFiles>> {
        self.decoded.as_ref()
    }

    /// iceberg-rust's Parquet reader for `table` (kept per metadata location).
    pub(crate) fn reader(&self, table: &Table) -> ArrowReader {
        match table.metadata_location() {
            Some(location) => self
                .readers
                .get_with_by_ref(location, || table.reader_builder().build()),
            None => table.reader_builder().build(),
        }
    }

    /// The data files of `snapshot` of `table`, or `None` when iceberg-rust must plan it
    /// (delete files, encryption, a name mapping).
    ///
    /// # Errors
    /// Reading the manifest list or a manifest.
    pub(crate) async fn snapshot(
        &self,
        table: &Table,
        snapshot: &SnapshotRef,
    ) -> Result<Option<SnapshotFiles>> {
        if table.encryption_manager().is_some()
            || table.metadata().properties().contains_key(NAME_MAPPING)
        {
            return Ok(None);
        }
        let key = snapshot.manifest_list().to_string();
        if let Some(hit) = self.snapshots.get(&key) {
            return Ok(hit);
        }
        let list = table.manifest_list_reader(snapshot).load().await?;
        let indexable = list
            .entries()
            .iter()
            .all(|m| m.content == ManifestContentType::Data && m.key_metadata.is_none());
        let files = if indexable {
            let files: Vec<iceberg::spec::ManifestFile> = list.entries().to_vec();
            let manifests: Vec<Entries> = futures::stream::iter(files)
                .map(|m| async move { self.manifest(table, &m).await })
                .buffered(LOAD_CONCURRENCY)
                .try_collect()
                .await?;
            Some(SnapshotFiles {
                manifests: manifests.into(),
                columns: Arc::default(),
            })
        } else {
            None
        };
        self.snapshots.insert(key, files.clone());
        Ok(files)
    }

    async fn manifest(&self, table: &Table, file: &iceberg::spec::ManifestFile) -> Result<Entries> {
        if let Some(hit) = self.manifests.get(&file.manifest_path) {
            return Ok(hit);
        }
        let manifest = file.load_manifest(table.file_io()).await?;
        let live: Entries = manifest
            .entries()
            .iter()
            .filter(|e| e.is_alive() && e.content_type() == DataContentType::Data)
            .cloned()
            .collect();
        self.manifests
            .insert(file.manifest_path.clone(), live.clone());
        Ok(live)
    }
}

/// Whether `file` may hold a row `predicate` accepts (`false` only when its bounds prove not).
#[cfg(test)]
fn might_match(predicate: &BoundPredicate, file: &DataFile) -> bool {
    let mut ids = Vec::new();
    compared_columns(predicate, &mut ids);
    let stats: Vec<(i32, ColumnStat)> = ids
        .into_iter()
        .map(|id| (id, ColumnStat::of(file, id)))
        .collect();
    let stat = |id: i32| stats.iter().find(|(c, _)| *c == id).map(|(_, s)| s);
    matches_with(predicate, file, &stat)
}

/// The columns `predicate` compares with a value (what [`compare`] reads), once each.
fn compared_columns(predicate: &BoundPredicate, ids: &mut Vec<i32>) {
    let mut add = |id: i32| {
        if !ids.contains(&id) {
            ids.push(id);
        }
    };
    match predicate {
        BoundPredicate::And(e) | BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            compared_columns(a, ids);
            compared_columns(b, ids);
        }
        BoundPredicate::Binary(b) => add(b.term().field().id),
        BoundPredicate::Set(s) => add(s.term().field().id),
        _ => {}
    }
}

/// [`might_match`], reading a compared column's stats from `stat` (`None`: nothing known).
fn matches_with<'a>(
    predicate: &BoundPredicate,
    file: &DataFile,
    stat: &impl Fn(i32) -> Option<&'a ColumnStat>,
) -> bool {
    match predicate {
        BoundPredicate::AlwaysTrue => true,
        BoundPredicate::AlwaysFalse => false,
        BoundPredicate::And(e) => {
            let [a, b] = e.inputs();
            matches_with(a, file, stat) && matches_with(b, file, stat)
        }
        BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            matches_with(a, file, stat) || matches_with(b, file, stat)
        }
        // Bounds say nothing certain about a negation.
        BoundPredicate::Not(_) => true,
        BoundPredicate::Unary(u) => {
            let id = u.term().field().id;
            let nulls = file.null_value_counts().get(&id);
            let values = file.value_counts().get(&id);
            match u.op() {
                PredicateOperator::IsNull => nulls.is_none_or(|n| *n > 0),
                PredicateOperator::NotNull => !only_nulls(nulls, values),
                _ => true,
            }
        }
        BoundPredicate::Binary(b) => {
            let field = b.term().field();
            !comparable(&field.field_type)
                || stat(field.id).is_none_or(|s| compare(b.op(), b.literal(), s))
        }
        BoundPredicate::Set(s) => {
            let field = s.term().field();
            match s.op() {
                PredicateOperator::In if comparable(&field.field_type) => stat(field.id)
                    .is_none_or(|st| {
                        s.literals()
                            .iter()
                            .any(|d| compare(PredicateOperator::Eq, d, st))
                    }),
                _ => true,
            }
        }
    }
}

/// Types whose bounds order every value the way a comparison does. Floats are not among them
/// (NaN is left out of bounds), nor UUIDs (writers have disagreed on signed or unsigned order).
fn comparable(t: &Type) -> bool {
    matches!(t, Type::Primitive(p) if !matches!(
        p,
        PrimitiveType::Float | PrimitiveType::Double | PrimitiveType::Uuid
    ))
}

fn only_nulls(nulls: Option<&u64>, values: Option<&u64>) -> bool {
    matches!((nulls, values), (Some(n), Some(v)) if n == v)
}

/// Whether a column comparison `column <op> datum` may hold for a row of a file whose column
/// has `stat`.
fn compare(op: PredicateOperator, datum: &Datum, stat: &ColumnStat) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    if stat.only_nulls {
        // A comparison with NULL is never true.
        return !matches!(
            op,
            PredicateOperator::Eq
                | PredicateOperator::LessThan
                | PredicateOperator::LessThanOrEq
                | PredicateOperator::GreaterThan
                | PredicateOperator::GreaterThanOrEq
        );
    }
    let lower = stat.lower.as_ref().and_then(|l| l.partial_cmp(datum));
    let upper = stat.upper.as_ref().and_then(|u| u.partial_cmp(datum));
    match op {
        PredicateOperator::Eq => lower != Some(Greater) && upper != Some(Less),
        PredicateOperator::LessThan => !matches!(lower, Some(Greater | Equal)),
        PredicateOperator::LessThanOrEq => lower != Some(Greater),
        PredicateOperator::GreaterThan => !matches!(upper, Some(Less | Equal)),
        PredicateOperator::GreaterThanOrEq => upper != Some(Less),
        _ => true,
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;

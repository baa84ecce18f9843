//! Small data files kept decoded: the rows of a small Parquet file, as iceberg-rust's reader
//! gives them, kept in memory by the file's path, so a later scan of the same file skips the
//! Parquet decode.
//!
//! A streaming writer leaves hundreds of files of a few hundred rows; reading one costs far more
//! in per-file work than in rows (perf, release build, 2026-12-05: a point lookup on the
//! 518-file maintained `shop.orders` spent 16% of its CPU making zstd contexts, two per column
//! chunk, in parquet's `create_codec`; a `GROUP BY` over every file, half of DataFusion's share).
//! Data files never change once written, so the decoded rows of one stay right for as long as a
//! snapshot names its path.
//!
//! Exactness: a file is kept only as the reader returns it without a predicate (every row of the
//! projected columns), keyed by its path, the table (its UUID: two tables may name the same
//! file), the snapshot's schema and the projected field ids; the scan's filters are `Inexact`,
//! so DataFusion checks every row as before. Files with delete files are never taken (the
//! indexed scan does not take such snapshots anyway). Bounded by bytes (`[storage.cache]
//! decoded_bytes`, TinyLFU; `enabled = false` turns it off with the object cache); only files
//! of at most [`SMALL_FILE`] bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::RecordBatch;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReader;
use iceberg::scan::FileScanTask;
use uuid::Uuid;

use super::files::{read_file, read_tasks};

/// Files up to this size (the Parquet file, compressed) are kept decoded.
pub const SMALL_FILE: u64 = 1 << 20;
/// Files not yet kept that one scan reads at once.
const READ_CONCURRENCY: usize = 4;

/// What a kept file was read for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    path: String,
    table: Uuid,
    schema: i32,
    fields: Vec<i32>,
}

impl Key {
    fn of(table: Uuid, task: &FileScanTask) -> Self {
        Self {
            path: task.data_file_path.clone(),
            table,
            schema: task.schema.schema_id(),
            fields: task.project_field_ids.clone(),
        }
    }
}

/// A file's rows.
type Rows = Arc<[RecordBatch]>;

/// The counters of [`DecodedFiles`] (`lakegate.cache_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodedStats {
    /// Small files a scan found kept.
    pub hits: u64,
    /// Small files a scan read (and kept).
    pub misses: u64,
    /// Bytes kept (Arrow memory, as weighed).
    pub bytes: u64,
}

/// The kept files.
pub(crate) struct DecodedFiles {
    files: moka::sync::Cache<Key, Rows>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for DecodedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedFiles")
            .field("files", &self.files.entry_count())
            .field("bytes", &self.files.weighted_size())
            .finish()
    }
}

impl DecodedFiles {
    /// A cache of at most `max_bytes`; `None` for 0 (off).
    pub(crate) fn new(max_bytes: u64) -> Option<Arc<Self>> {
        (max_bytes > 0).then(|| {
            Arc::new(Self {
                files: moka::sync::Cache::builder()
                    .max_capacity(max_bytes)
                    .weigher(|key: &Key, rows: &Rows| {
                        let bytes: usize =
                            rows.iter().map(RecordBatch::get_array_memory_size).sum();
                        u32::try_from(bytes.saturating_add(key.path.len())).unwrap_or(u32::MAX)
                    })
                    .build(),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            })
        })
    }

    /// Whether `task`'s file may be kept decoded.
    fn takes(task: &FileScanTask) -> bool {
        task.deletes.is_empty() && task.file_size_in_bytes <= SMALL_FILE
    }

    /// The counters.
    pub(crate) fn stats(&self) -> DecodedStats {
        self.files.run_pending_tasks();
        DecodedStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.files.weighted_size(),
        }
    }

    /// The rows of `tasks` of the table `table`: kept small files from memory, the other
    /// small files read whole (and kept), the rest through `reader` as the tasks say (their
    /// predicate prunes row groups and rows). Batches come file by file, in no fixed order.
    ///
    /// # Errors
    /// The reader's, in the stream.
    pub(crate) fn read(
        self: &Arc<Self>,
        reader: &ArrowReader,
        table: Uuid,
        tasks: &[FileScanTask],
    ) -> iceberg::Result<BoxStream<'static, iceberg::Result<RecordBatch>>> {
        let (mut kept, mut unread, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        for task in tasks {
            if !Self::takes(task) {
                rest.push(task.clone());
                continue;
            }
            let key = Key::of(table, task);
            match self.files.get(&key) {
                Some(rows) => kept.push(rows),
                None => unread.push((key, task.clone())),
            }
        }
        self.hits.fetch_add(kept.len() as u64, Ordering::Relaxed);
        self.misses
            .fetch_add(unread.len() as u64, Ordering::Relaxed);
        let kept = stream::iter(kept).flat_map(|rows| stream::iter(batches(rows)));
        let this = Arc::clone(self);
        let file_reader = reader.clone();
        let unread = stream::iter(unread)
            .map(move |(key, mut task)| {
                let (this, reader) = (Arc::clone(&this), file_reader.clone());
                async move {
                    // Every row: the kept file answers later scans with other filters.
                    task.predicate = None;
                    let rows: Rows = read_file(&reader, task).await?.into();
                    this.files.insert(key, Arc::clone(&rows));
                    Ok::<_, iceberg::Error>(stream::iter(batches(rows)))
                }
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_flatten();
        let rest = if rest.is_empty() {
            stream::empty().boxed()
        } else {
            read_tasks(reader, rest)?
        };
        Ok(kept.chain(unread).chain(rest).boxed())
    }
}

/// A kept file's batches, as a stream's items.
fn batches(rows: Rows) -> impl Iterator<Item = iceberg::Result<RecordBatch>> {
    (0..rows.len()).map(move |i| Ok(rows[i].clone()))
}

#[cfg(test)]
#[path = "decoded_tests.rs"]
mod tests;

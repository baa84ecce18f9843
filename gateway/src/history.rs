//! The query history: every query's text, who ran it, which snapshots answered it, the cache
//! outcome, rows, time and error, bounded in memory and readable as `lakegate.queries`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arrow::array::{
    Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::Stream;

/// Longest query text kept per entry.
const MAX_SQL: usize = 2000;

/// One query.
#[derive(Debug, Clone)]
pub struct QueryRecord {
    /// Sequence number.
    pub id: u64,
    /// When it started (microseconds since the epoch).
    pub started_us: i64,
    /// Who ran it.
    pub user: String,
    /// Its text (normalised, truncated).
    pub sql: String,
    /// The snapshots that answered it: `schema.table@snapshot_id`, comma-separated.
    pub snapshots: String,
    /// `hit`, `miss`, `join`, `bypass`, `too_large` or `off`.
    pub cache: &'static str,
    /// The engine that computed it (empty on a cache hit).
    pub engine: String,
    /// Its shape (`point_lookup`, `aggregate`, ...).
    pub shape: &'static str,
    /// The routing group it ran in.
    pub group: String,
    /// Rows returned (so far, if it was abandoned).
    pub rows: u64,
    /// Wall time until the last row (or the error).
    pub millis: f64,
    /// The error, if it failed.
    pub error: Option<String>,
}

/// The bounded history.
pub struct QueryHistory {
    capacity: usize,
    next: AtomicU64,
    entries: Mutex<VecDeque<QueryRecord>>,
}

impl QueryHistory {
    /// A history keeping the last `capacity` queries.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            next: AtomicU64::new(1),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// Starts a record for a query that begins now.
    pub fn start(&self, user: &str, sql: &str) -> PendingQuery {
        let mut sql = sql.to_string();
        if sql.len() > MAX_SQL {
            let mut cut = MAX_SQL;
            while !sql.is_char_boundary(cut) {
                cut -= 1;
            }
            sql.truncate(cut);
        }
        let started_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        PendingQuery {
            record: QueryRecord {
                id: self.next.fetch_add(1, Ordering::Relaxed),
                started_us,
                user: user.to_string(),
                sql,
                snapshots: String::new(),
                cache: "off",
                engine: String::new(),
                shape: "",
                group: String::new(),
                rows: 0,
                millis: 0.0,
                error: None,
            },
            clock: Instant::now(),
        }
    }

    fn push(&self, record: QueryRecord) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity {
            entries.pop_front();
        }
        entries.push_back(record);
    }

    /// `lakegate.queries`, oldest first.
    pub fn batch(&self) -> RecordBatch {
        let entries: Vec<QueryRecord> = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let schema = Self::schema();
        let columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(UInt64Array::from_iter_values(entries.iter().map(|e| e.id))),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(entries.iter().map(|e| e.started_us))
                    .with_timezone("+00:00"),
            ),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.user.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.sql.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.snapshots.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.cache),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.engine.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.shape),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.group.as_str()),
            )),
            Arc::new(Int64Array::from_iter_values(
                entries.iter().map(|e| e.rows as i64),
            )),
            Arc::new(Float64Array::from_iter_values(
                entries.iter().map(|e| e.millis),
            )),
            Arc::new(StringArray::from_iter(
                entries.iter().map(|e| e.error.as_deref()),
            )),
        ];
        RecordBatch::try_new(schema.clone(), columns)
            .unwrap_or_else(|_| RecordBatch::new_empty(schema))
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("query_id", DataType::UInt64, false),
            Field::new(
                "started",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                false,
            ),
            Field::new("user_name", DataType::Utf8, false),
            Field::new("query", DataType::Utf8, false),
            Field::new("snapshots", DataType::Utf8, false),
            Field::new("cache", DataType::Utf8, false),
            Field::new("engine", DataType::Utf8, false),
            Field::new("shape", DataType::Utf8, false),
            Field::new("routing_group", DataType::Utf8, false),
            Field::new("rows", DataType::Int64, false),
            Field::new("duration_ms", DataType::Float64, false),
            Field::new("error", DataType::Utf8, true),
        ]))
    }
}

/// A query in flight; recorded when it finishes (or is abandoned).
pub struct PendingQuery {
    /// What is known so far.
    pub record: QueryRecord,
    clock: Instant,
}

impl PendingQuery {
    /// Records a failure now.
    pub fn fail(mut self, history: &QueryHistory, error: &str) {
        self.record.error = Some(error.to_string());
        self.record.millis = self.clock.elapsed().as_secs_f64() * 1000.0;
        history.push(self.record);
    }

    /// Wraps the result stream: rows are counted and the record is pushed when the stream ends
    /// or is dropped.
    pub fn track(
        self,
        history: Arc<QueryHistory>,
        stream: SendableRecordBatchStream,
    ) -> SendableRecordBatchStream {
        Box::pin(Tracked {
            inner: stream,
            pending: Some(self),
            history,
        })
    }
}

struct Tracked {
    inner: SendableRecordBatchStream,
    pending: Option<PendingQuery>,
    history: Arc<QueryHistory>,
}

impl Tracked {
    fn finish(&mut self, error: Option<String>) {
        if let Some(mut p) = self.pending.take() {
            p.record.millis = p.clock.elapsed().as_secs_f64() * 1000.0;
            p.record.error = error;
            self.history.push(p.record);
        }
    }
}

impl Stream for Tracked {
    type Item = datafusion::error::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(batch))) => {
                let n = batch.num_rows() as u64;
                if let Some(p) = self.pending.as_mut() {
                    p.record.rows += n;
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let message = e.to_string();
                self.finish(Some(message));
            }
            Poll::Ready(None) => self.finish(None),
            Poll::Pending => {}
        }
        polled
    }
}

impl RecordBatchStream for Tracked {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // Abandoned (client went away, cursor closed early): keep what we know.
        self.finish(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_bounded_and_keeps_the_newest() {
        let h = QueryHistory::new(2);
        for sql in ["a", "b", "c"] {
            h.start("u", sql).fail(&h, "boom");
        }
        let batch = h.batch();
        assert_eq!(batch.num_rows(), 2);
        let sql = batch
            .column(3)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("text");
        assert_eq!((sql.value(0), sql.value(1)), ("b", "c"));
    }
}

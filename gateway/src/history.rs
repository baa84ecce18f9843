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
    /// Through which frontend (`pg`, `flight`, `local`).
    pub frontend: &'static str,
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
    /// The scan estimate the router used (bytes).
    pub scan_bytes: u64,
    /// Rows returned (so far, if it was abandoned).
    pub rows: u64,
    /// Wall time until the last row (or the error).
    pub millis: f64,
    /// The error, if it failed.
    pub error: Option<String>,
}

/// A record as one JSON object (the history file, the admin API).
pub fn to_json(r: &QueryRecord) -> String {
    serde_json::json!({
        "id": r.id, "started_us": r.started_us, "user": r.user, "frontend": r.frontend, "sql": r.sql,
        "snapshots": r.snapshots, "cache": r.cache, "engine": r.engine, "shape": r.shape,
        "group": r.group, "scan_bytes": r.scan_bytes, "rows": r.rows, "millis": r.millis,
        "error": r.error,
    })
    .to_string()
}

fn from_json(line: &str) -> Option<QueryRecord> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let interned = |k: &str, set: &[&'static str]| {
        let value = v.get(k).and_then(|x| x.as_str()).unwrap_or_default();
        set.iter().find(|s| **s == value).copied().unwrap_or("")
    };
    let shapes = crate::profile::Shape::ALL.map(crate::profile::Shape::name);
    Some(QueryRecord {
        id: v.get("id")?.as_u64()?,
        started_us: v.get("started_us")?.as_i64()?,
        user: text("user"),
        frontend: interned("frontend", &["pg", "flight", "local"]),
        sql: text("sql"),
        snapshots: text("snapshots"),
        cache: match interned("cache", CACHE_OUTCOMES) {
            "" => "off",
            c => c,
        },
        engine: text("engine"),
        shape: interned("shape", &shapes),
        group: text("group"),
        scan_bytes: v.get("scan_bytes").and_then(|x| x.as_u64()).unwrap_or(0),
        rows: v.get("rows").and_then(|x| x.as_u64()).unwrap_or(0),
        millis: v.get("millis").and_then(|x| x.as_f64()).unwrap_or(0.0),
        error: v.get("error").and_then(|x| x.as_str()).map(str::to_string),
    })
}

/// The bounded history.
pub struct QueryHistory {
    capacity: usize,
    next: AtomicU64,
    entries: Mutex<VecDeque<QueryRecord>>,
    /// Appends finished records to the history file, off the query path.
    file: Option<std::sync::mpsc::Sender<String>>,
    /// Counts every finished query.
    metrics: std::sync::OnceLock<Arc<crate::metrics::Metrics>>,
    /// Tells the maintenance loop what each successful query read.
    telemetry: std::sync::OnceLock<lakegate_maintenance::telemetry::Telemetry>,
}

/// Interned values of the `&'static str` fields, for records read back from a file.
const CACHE_OUTCOMES: &[&str] = &["hit", "miss", "join", "bypass", "too_large", "off"];

impl QueryHistory {
    /// A history keeping the last `capacity` queries in memory only.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            next: AtomicU64::new(1),
            entries: Mutex::new(VecDeque::new()),
            file: None,
            metrics: std::sync::OnceLock::new(),
            telemetry: std::sync::OnceLock::new(),
        }
    }

    /// A history that survives restarts: the last `capacity` records of `path` (JSON lines)
    /// are loaded, and every finished query is appended by a writer thread. The file is
    /// rewritten with only the kept records at load, so it stays bounded.
    ///
    /// # Errors
    /// The file cannot be created or rewritten.
    pub fn persistent(capacity: usize, path: &std::path::Path) -> std::io::Result<Self> {
        use std::io::{BufRead, Write};
        let mut history = Self::new(capacity);
        let mut kept: VecDeque<QueryRecord> = VecDeque::new();
        if let Ok(file) = std::fs::File::open(path) {
            for line in std::io::BufReader::new(file).lines().map_while(|l| l.ok()) {
                if let Some(r) = from_json(&line) {
                    if kept.len() >= history.capacity {
                        kept.pop_front();
                    }
                    kept.push_back(r);
                }
            }
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = path.with_extension("tmp");
        {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            for r in &kept {
                writeln!(out, "{}", to_json(r))?;
            }
            out.flush()?;
        }
        std::fs::rename(&tmp, path)?;
        let next = kept.back().map_or(1, |r| r.id + 1);
        history.next = AtomicU64::new(next);
        *history.entries.lock().unwrap_or_else(|p| p.into_inner()) = kept;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let mut out = std::fs::OpenOptions::new().append(true).open(path)?;
        std::thread::Builder::new()
            .name("lakegate-history".into())
            .spawn(move || {
                while let Ok(line) = rx.recv() {
                    if writeln!(out, "{line}").is_err() {
                        tracing::warn!("query history file: write failed");
                    }
                }
            })?;
        history.file = Some(tx);
        Ok(history)
    }

    /// Starts a record for a query that begins now.
    pub fn start(&self, user: &str, frontend: &'static str, sql: &str) -> PendingQuery {
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
                frontend,
                sql,
                snapshots: String::new(),
                cache: "off",
                engine: String::new(),
                shape: "",
                group: String::new(),
                scan_bytes: 0,
                rows: 0,
                millis: 0.0,
                error: None,
            },
            clock: Instant::now(),
            observation: None,
        }
    }

    /// Every record kept, oldest first.
    pub fn all(&self) -> Vec<QueryRecord> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Sends what every successful query read to `telemetry` from now on.
    pub fn set_telemetry(&self, telemetry: lakegate_maintenance::telemetry::Telemetry) {
        let _ = self.telemetry.set(telemetry);
    }

    /// Records a finished query; a successful one's observation goes to the telemetry.
    fn finish(
        &self,
        record: QueryRecord,
        observation: Option<lakegate_maintenance::telemetry::Observation>,
    ) {
        if record.error.is_none()
            && let (Some(observation), Some(t)) = (observation, self.telemetry.get())
        {
            t.send(lakegate_maintenance::telemetry::Event {
                observation,
                millis: record.millis,
                at: record.started_us as f64 / 1e6,
            });
        }
        self.push(record);
    }

    /// Reports every finished query to `metrics` from now on.
    pub fn set_metrics(&self, metrics: Arc<crate::metrics::Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// The last `limit` queries, newest first (slowest first with `slowest`).
    pub fn recent(&self, limit: usize, slowest: bool) -> Vec<QueryRecord> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<QueryRecord> = entries.iter().rev().cloned().collect();
        if slowest {
            v.sort_by(|a, b| b.millis.total_cmp(&a.millis));
        }
        v.truncate(limit);
        v
    }

    fn push(&self, record: QueryRecord) {
        if let Some(m) = self.metrics.get() {
            m.observe(&record);
        }
        if let Some(file) = &self.file {
            let _ = file.send(to_json(&record));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity {
            entries.pop_front();
        }
        entries.push_back(record);
    }

    /// `lakegate.queries`, oldest first.
    pub fn batch(&self) -> RecordBatch {
        self.batch_for(None)
    }

    /// `lakegate.queries` with only `user`'s queries (all with `None`), oldest first.
    pub fn batch_for(&self, user: Option<&str>) -> RecordBatch {
        let entries: Vec<QueryRecord> = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|r| user.is_none_or(|u| r.user == u))
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
    /// What it read, for the maintenance loop's heat (set once routed).
    pub observation: Option<lakegate_maintenance::telemetry::Observation>,
}

impl PendingQuery {
    /// Records a failure now.
    pub fn fail(mut self, history: &QueryHistory, error: &str) {
        self.record.error = Some(error.to_string());
        self.record.millis = self.clock.elapsed().as_secs_f64() * 1000.0;
        history.finish(self.record, self.observation);
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
            self.history.finish(p.record, p.observation);
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
            h.start("u", "pg", sql).fail(&h, "boom");
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

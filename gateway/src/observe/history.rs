//! The query history: every query's text, who ran it, which snapshots answered it, the cache
//! outcome, rows, time and error, bounded in memory and readable as `lakegate.queries`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::profile::Shape;
use crate::service::cache::CacheOutcome;
use crate::service::context::{Frontend, StatementContext};
use crate::service::plan::Route;

/// Longest query text kept per entry.
const MAX_SQL: usize = 2000;

/// One query.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueryRecord {
    /// The statement's query id.
    pub id: u64,
    /// When it started (microseconds since the epoch).
    pub started_us: i64,
    /// Who ran it.
    pub user: String,
    /// Through which frontend.
    #[serde(default, deserialize_with = "lenient")]
    pub frontend: Frontend,
    /// Its text (normalised, truncated).
    pub sql: String,
    /// The snapshots that answered it: `schema.table@snapshot_id`, comma-separated.
    #[serde(default)]
    pub snapshots: String,
    /// The cache's part.
    #[serde(default, deserialize_with = "lenient")]
    pub cache: CacheOutcome,
    /// The engine that computed it (empty on a cache hit).
    #[serde(default)]
    pub engine: String,
    /// Its shape (`None`: it failed before it was planned).
    #[serde(default, deserialize_with = "lenient")]
    pub shape: Option<Shape>,
    /// How its engines were chosen (`None`: it failed before it was planned).
    #[serde(default, deserialize_with = "lenient")]
    pub route: Option<Route>,
    /// The routing group it ran in.
    #[serde(default)]
    pub group: String,
    /// The scan estimate the router used (bytes).
    #[serde(default)]
    pub scan_bytes: u64,
    /// Rows returned (so far, if it was abandoned).
    #[serde(default)]
    pub rows: u64,
    /// Wall time until the last row (or the error).
    #[serde(default)]
    pub millis: f64,
    /// Of which waiting in its routing group's queue for a slot.
    #[serde(default)]
    pub queued_ms: f64,
    /// The error, if it failed.
    #[serde(default)]
    pub error: Option<String>,
    /// The gateway that ran it (`[state] replica`; empty with no shared state).
    #[serde(default)]
    pub replica: String,
}

/// A field written by another version (an unknown name, a missing value) reads as its
/// default instead of losing the whole record.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

/// A record as one JSON object (the history file, the admin API).
pub fn to_json(r: &QueryRecord) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

fn from_json(line: &str) -> Option<QueryRecord> {
    serde_json::from_str(line).ok()
}

/// The bounded history.
pub struct QueryHistory {
    capacity: usize,
    next: AtomicU64,
    entries: Mutex<VecDeque<QueryRecord>>,
    /// Appends finished records to the history file, off the query path.
    file: Option<std::sync::mpsc::Sender<String>>,
    /// Counts every finished query.
    metrics: std::sync::OnceLock<Arc<crate::observe::metrics::Metrics>>,
    /// Tells the maintenance loop what each successful query read.
    telemetry: std::sync::OnceLock<lakegate_maintenance::telemetry::Telemetry>,
    /// With shared state: this replica's name, and where its records go to the database.
    shared: std::sync::OnceLock<(String, tokio::sync::mpsc::UnboundedSender<String>)>,
}

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
            shared: std::sync::OnceLock::new(),
        }
    }

    /// Shares the history through `state`: this replica's queries go to the database too (off
    /// the query path), and the others' are read in every poll interval until `stop` — kept
    /// here under fresh ids, and sent to the returned receiver (the maintenance heat).
    pub fn share(
        self: &Arc<Self>,
        state: Arc<lakegate_maintenance::state::SharedState>,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::sync::mpsc::UnboundedReceiver<QueryRecord> {
        use lakegate_maintenance::state::SharedLog;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let _ = self.shared.set((state.replica().to_string(), tx));
        let writer = Arc::clone(&state);
        tokio::spawn(async move {
            while let Some(json) = rx.recv().await {
                if let Err(e) = writer.append(SharedLog::Queries, &json).await {
                    tracing::warn!(error = %e, "query not written to the state database");
                }
            }
        });
        let (remote_tx, remote_rx) = tokio::sync::mpsc::unbounded_channel();
        let history = Arc::clone(self);
        tokio::spawn(async move {
            let me = state.replica().to_string();
            // Only what other replicas run from now on: their past is their own history's.
            let mut last = match state.read(SharedLog::Queries, 0, 1).await {
                Ok(rows) => rows.last().map_or(0, |r| r.id),
                Err(_) => 0,
            };
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(state.poll_interval()) => {}
                }
                let rows = match state
                    .read(SharedLog::Queries, last, history.capacity as i64)
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) => {
                        tracing::warn!(error = %e, "queries of other replicas not read");
                        continue;
                    }
                };
                for row in rows {
                    last = last.max(row.id);
                    if row.replica == me {
                        continue;
                    }
                    if let Some(mut record) = from_json(&row.json) {
                        record.id = history.next_id();
                        history.keep(record.clone());
                        let _ = remote_tx.send(record);
                    }
                }
            }
        });
        remote_rx
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

    /// A fresh query id.
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Starts a record for the query `ctx` names, beginning now.
    pub fn start(&self, ctx: &StatementContext, sql: String) -> PendingQuery {
        let sql = clipped(sql);
        let started_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        PendingQuery {
            record: QueryRecord {
                id: ctx.query_id,
                started_us,
                user: ctx.user.clone(),
                frontend: ctx.frontend,
                sql,
                snapshots: String::new(),
                cache: CacheOutcome::Off,
                engine: String::new(),
                shape: None,
                route: None,
                group: String::new(),
                scan_bytes: 0,
                rows: 0,
                millis: 0.0,
                queued_ms: 0.0,
                error: None,
                replica: String::new(),
            },
            clock: Instant::now(),
            observation: None,
        }
    }

    /// The record of query `id`, if it is still kept (and finished).
    pub fn find(&self, id: u64) -> Option<QueryRecord> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().rev().find(|r| r.id == id).cloned()
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
    pub fn set_metrics(&self, metrics: Arc<crate::observe::metrics::Metrics>) {
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

    fn push(&self, mut record: QueryRecord) {
        if let Some(m) = self.metrics.get() {
            m.observe(&record);
        }
        let to_db = self.shared.get().map(|(replica, to_db)| {
            record.replica = replica.clone();
            to_db
        });
        if to_db.is_some() || self.file.is_some() {
            // One serialization for the file and the database.
            let json = to_json(&record);
            if let Some(to_db) = to_db {
                let _ = to_db.send(json.clone());
            }
            if let Some(file) = &self.file {
                let _ = file.send(json);
            }
        }
        self.keep(record);
    }

    fn keep(&self, record: QueryRecord) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity {
            entries.pop_front();
        }
        entries.push_back(record);
    }

    /// The records of `user` (everyone's with `None`), oldest first.
    pub fn records_for(&self, user: Option<&str>) -> Vec<QueryRecord> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|r| user.is_none_or(|u| r.user == u))
            .cloned()
            .collect()
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

/// `sql` cut to at most [`MAX_SQL`] bytes (at a character boundary).
fn clipped(mut sql: String) -> String {
    sql.truncate(cut(&sql));
    sql
}

/// Where [`clipped`] cuts `sql`.
fn cut(sql: &str) -> usize {
    if sql.len() <= MAX_SQL {
        return sql.len();
    }
    (0..=MAX_SQL)
        .rev()
        .find(|i| sql.is_char_boundary(*i))
        .unwrap_or(0)
}

impl PendingQuery {
    /// The statement's text, when the record was started without it (a kept plan has it
    /// printed already: see [`crate::service::plan::Rewrites::text`]).
    pub fn set_sql(&mut self, sql: &str) {
        self.record.sql = sql[..cut(sql)].to_string();
    }

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
            ended: false,
        })
    }
}

struct Tracked {
    inner: SendableRecordBatchStream,
    pending: Option<PendingQuery>,
    history: Arc<QueryHistory>,
    /// The inner stream ended: it is not polled again (fused).
    ended: bool,
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
        if self.ended {
            return Poll::Ready(None);
        }
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
            Poll::Ready(None) => {
                self.ended = true;
                self.finish(None);
            }
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

    fn ctx(h: &QueryHistory) -> StatementContext {
        StatementContext::new(
            h.next_id(),
            "u",
            Frontend::Pg,
            tokio_util::sync::CancellationToken::new(),
            None,
        )
    }

    #[test]
    fn history_is_bounded_and_keeps_the_newest() {
        let h = QueryHistory::new(2);
        for sql in ["a", "b", "c"] {
            h.start(&ctx(&h), sql.to_string()).fail(&h, "boom");
        }
        let kept: Vec<String> = h.all().into_iter().map(|r| r.sql).collect();
        assert_eq!(kept, vec!["b", "c"]);
    }

    #[test]
    fn records_round_trip_as_json_and_old_lines_still_read() {
        let h = QueryHistory::new(4);
        let mut pending = h.start(&ctx(&h), "SELECT 1".into());
        pending.record.shape = Some(Shape::PointLookup);
        pending.record.route = Some(Route::Routed);
        pending.record.cache = CacheOutcome::TooLarge;
        let line = to_json(&pending.record);
        assert!(line.contains(r#""shape":"point_lookup""#), "{line}");
        assert!(line.contains(r#""cache":"too_large""#), "{line}");
        assert!(line.contains(r#""frontend":"pg""#), "{line}");
        let back = from_json(&line).expect("parses");
        assert_eq!(back.shape, Some(Shape::PointLookup));
        assert_eq!(back.route, Some(Route::Routed));
        // A line of the previous format: `shape` empty, `cache` a value it no longer has.
        let old = r#"{"id":7,"started_us":1,"user":"u","frontend":"pg","sql":"x","snapshots":"","cache":"join","engine":"","shape":"","group":"","scan_bytes":0,"rows":0,"millis":1.5,"error":null}"#;
        let old = from_json(old).expect("old lines read");
        assert_eq!((old.id, old.shape, old.cache), (7, None, CacheOutcome::Off));
    }
}

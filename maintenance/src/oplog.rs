//! The operations log: every maintenance operation with its table, partition, files and bytes
//! before and after, duration, result, snapshots and reason — kept in memory (bounded) and
//! appended to a JSON-lines file that is read back at start, so it survives restarts.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// Expire snapshots past retention (and delete the files only they referenced).
    ExpireSnapshots,
    /// Rewrite a partition's files (merged, sorted, deletes applied).
    Compact,
    /// Delete unreferenced files older than the threshold.
    RemoveOrphans,
    /// Merge small manifests.
    RewriteManifests,
    /// A table's effective policy changed (a rule or a table property): recorded, not run.
    PolicyChange,
    /// A new layout tried on a branch against main's, then applied or rejected.
    LayoutExperiment,
}

impl OperationKind {
    /// The name in the log, metrics and the console.
    pub fn name(self) -> &'static str {
        match self {
            Self::ExpireSnapshots => "expire_snapshots",
            Self::Compact => "compact",
            Self::RemoveOrphans => "remove_orphans",
            Self::RewriteManifests => "rewrite_manifests",
            Self::PolicyChange => "policy_change",
            Self::LayoutExperiment => "layout_experiment",
        }
    }
}

impl std::fmt::Display for OperationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationResult {
    /// Done and committed.
    Ok,
    /// Nothing needed doing after all.
    Noop,
    /// Another commit conflicted; retried next cycle.
    Conflict,
    /// It failed (the detail says why); nothing was committed.
    Failed,
}

impl OperationResult {
    /// The name in the log, metrics and the console.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Noop => "noop",
            Self::Conflict => "conflict",
            Self::Failed => "failed",
        }
    }
}

impl std::fmt::Display for OperationResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One operation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OperationRecord {
    /// Sequence number.
    pub id: u64,
    /// When it started (microseconds since the epoch).
    pub started_us: i64,
    /// `ns.table`.
    pub table: String,
    /// What it did.
    pub kind: OperationKind,
    /// The partition (compaction), else empty.
    pub partition: String,
    /// Files before (compaction: input files; manifests: data manifests; expiry: snapshots).
    pub files_before: u64,
    /// Files after.
    pub files_after: u64,
    /// Bytes before.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// Files deleted from storage.
    pub files_deleted: u64,
    /// Wall time.
    pub millis: f64,
    /// How it ended.
    pub result: OperationResult,
    /// The table's snapshot before.
    pub snapshot_before: Option<i64>,
    /// The snapshot it committed, if any.
    pub snapshot_after: Option<i64>,
    /// Why the planner chose it.
    pub reason: String,
    /// What happened (sort columns, attempts, the error).
    pub detail: String,
    /// The gateway that ran it (`[state] replica`; empty with no shared state).
    #[serde(default)]
    pub replica: String,
}

impl OperationRecord {
    /// A record of something decided, not run (a policy change, a re-planned approval): no
    /// files, no time, started now.
    pub fn decision(
        table: &str,
        kind: OperationKind,
        partition: &str,
        result: OperationResult,
        reason: String,
        detail: String,
    ) -> Self {
        Self {
            id: 0,
            started_us: chrono::Utc::now().timestamp_micros(),
            table: table.to_string(),
            kind,
            partition: partition.to_string(),
            files_before: 0,
            files_after: 0,
            bytes_before: 0,
            bytes_after: 0,
            files_deleted: 0,
            millis: 0.0,
            result,
            snapshot_before: None,
            snapshot_after: None,
            reason,
            detail,
            replica: String::new(),
        }
    }
}

/// The log.
pub struct OperationLog {
    capacity: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    records: VecDeque<OperationRecord>,
    next_id: u64,
    file: Option<std::fs::File>,
    /// With shared state: this replica's name, and where its records go to the database.
    shared: Option<(String, tokio::sync::mpsc::UnboundedSender<String>)>,
}

impl OperationLog {
    /// A log in memory only.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner {
                records: VecDeque::new(),
                next_id: 1,
                file: None,
                shared: None,
            }),
        }
    }

    /// A log kept in `path` (created if missing; its last `capacity` records loaded).
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn persistent(capacity: usize, path: &std::path::Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let log = Self::new(capacity);
        if let Ok(f) = std::fs::File::open(path) {
            let mut inner = log.lock();
            for line in std::io::BufReader::new(f).lines().map_while(|l| l.ok()) {
                // A torn last line (crash mid-write) is skipped, not fatal.
                if let Ok(r) = serde_json::from_str::<OperationRecord>(&line) {
                    inner.next_id = inner.next_id.max(r.id + 1);
                    inner.records.push_back(r);
                    if inner.records.len() > log.capacity {
                        inner.records.pop_front();
                    }
                }
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        // Start on a fresh line after a torn one.
        let ends_clean = std::fs::read(path)
            .map(|b| b.last().is_none_or(|c| *c == b'\n'))
            .unwrap_or(true);
        if !ends_clean {
            file.write_all(b"\n")?;
        }
        log.lock().file = Some(file);
        Ok(log)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `record` (its id is assigned here) and returns the id.
    pub fn push(&self, mut record: OperationRecord) -> u64 {
        let mut inner = self.lock();
        record.id = inner.next_id;
        inner.next_id += 1;
        if let Some((replica, to_db)) = &inner.shared {
            record.replica = replica.clone();
            if let Ok(json) = serde_json::to_string(&record) {
                let _ = to_db.send(json);
            }
        }
        if let Some(f) = inner.file.as_mut()
            && let Ok(line) = serde_json::to_string(&record)
            && let Err(e) = writeln!(f, "{line}")
        {
            tracing::warn!(error = %e, "operations log not written");
        }
        inner.records.push_back(record.clone());
        if inner.records.len() > self.capacity {
            inner.records.pop_front();
        }
        record.id
    }

    /// Every record kept, oldest first.
    pub fn all(&self) -> Vec<OperationRecord> {
        self.lock().records.iter().cloned().collect()
    }

    /// How many kept records `matches` accepts (no copies).
    pub fn count(&self, matches: impl Fn(&OperationRecord) -> bool) -> usize {
        self.lock().records.iter().filter(|r| matches(r)).count()
    }

    /// Appends a record another replica wrote (a fresh local id; its replica kept).
    fn merge(&self, mut record: OperationRecord) {
        let mut inner = self.lock();
        record.id = inner.next_id;
        inner.next_id += 1;
        inner.records.push_back(record);
        if inner.records.len() > self.capacity {
            inner.records.pop_front();
        }
    }

    /// Shares the log through `state`: the database's newest records (every replica's) replace
    /// what is kept here, this replica's records go there too (off the caller's path), and the
    /// others' are read in every poll interval until `stop`.
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn share(
        self: &std::sync::Arc<Self>,
        state: std::sync::Arc<crate::state::SharedState>,
        stop: tokio_util::sync::CancellationToken,
    ) -> crate::error::Result<()> {
        use crate::state::SharedLog;
        let rows = state
            .read(SharedLog::Operations, 0, self.capacity as i64)
            .await?;
        let mut last = rows.last().map_or(0, |r| r.id);
        {
            let mut inner = self.lock();
            inner.records.clear();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            inner.shared = Some((state.replica().to_string(), tx));
            let writer = std::sync::Arc::clone(&state);
            tokio::spawn(async move {
                while let Some(json) = rx.recv().await {
                    if let Err(e) = writer.append(SharedLog::Operations, &json).await {
                        tracing::warn!(error = %e, "operation not written to the state database");
                    }
                }
            });
        }
        for row in rows {
            if let Ok(r) = serde_json::from_str::<OperationRecord>(&row.json) {
                self.merge(r);
            }
        }
        let log = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            let me = state.replica().to_string();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(state.poll_interval()) => {}
                }
                match state
                    .read(SharedLog::Operations, last, log.capacity as i64)
                    .await
                {
                    Ok(rows) => {
                        for row in rows {
                            last = last.max(row.id);
                            if row.replica == me {
                                continue;
                            }
                            if let Ok(r) = serde_json::from_str::<OperationRecord>(&row.json) {
                                log.merge(r);
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "operations of other replicas not read"),
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(table: &str) -> OperationRecord {
        OperationRecord {
            id: 0,
            started_us: 1,
            table: table.into(),
            kind: OperationKind::Compact,
            partition: "day=2026-11-29".into(),
            files_before: 40,
            files_after: 1,
            bytes_before: 4000,
            bytes_after: 3000,
            files_deleted: 0,
            millis: 12.5,
            result: OperationResult::Ok,
            snapshot_before: Some(1),
            snapshot_after: Some(2),
            reason: "hot".into(),
            detail: String::new(),
            replica: String::new(),
        }
    }

    #[test]
    fn the_log_survives_a_restart_and_skips_a_torn_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("ops.jsonl");
        {
            let log = OperationLog::persistent(10, &path).expect("open");
            log.push(op("a.b"));
            log.push(op("a.c"));
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"id\": 9, \"tab"))
            .expect("tear");
        let log = OperationLog::persistent(10, &path).expect("reopen");
        let all = log.all();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].table, "a.c");
        assert_eq!(log.push(op("a.d")), 3);
        drop(log);
        let log = OperationLog::persistent(10, &path).expect("reopen again");
        assert_eq!(log.all().len(), 3, "the record after the torn line is kept");
    }
}

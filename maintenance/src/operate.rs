//! Running one planned operation: each kind has its own function that returns an
//! [`Outcome`] (files, bytes, snapshot, detail), and [`Maintainer::execute`] turns that — or
//! the error, or a panic — into the operation's [`OperationRecord`], counted and logged. A
//! panic inside one table's operation is caught here: it is recorded as a failed operation and
//! the loop goes on with the next.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures::FutureExt;
use iceberg::TableIdent;
use lakegate_engines::units::human_bytes;
use tracing::Instrument;

use crate::compact::{self, Job};
use crate::error::{Error, Result};
use crate::inventory::LiveFile;
use crate::layout::{self, Standing};
use crate::maintainer::{Assessment, Maintainer};
use crate::oplog::{OperationKind, OperationRecord, OperationResult};
use crate::plan::{Action, Planned};
use crate::snapshot::Replace;

/// What an operation did, before it becomes a record.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    partition: String,
    files_before: u64,
    files_after: u64,
    bytes_before: u64,
    bytes_after: u64,
    files_deleted: u64,
    snapshot_after: Option<i64>,
    detail: String,
    /// It found nothing to do.
    noop: bool,
}

impl Maintainer {
    /// Runs one planned operation and logs it, whatever happens inside (errors and panics
    /// become a `failed` or `conflict` record).
    pub(crate) async fn execute(&self, p: &Planned, a: &Assessment) -> OperationRecord {
        let kind = p.action.kind();
        let span =
            tracing::info_span!("maintenance_operation", table = %p.table, kind = kind.name());
        let started = Instant::now();
        let started_us = chrono::Utc::now().timestamp_micros();
        let outcome = caught(self.operate(&p.action, a))
            .instrument(span.clone())
            .await;
        let (result, outcome) = match outcome {
            Ok(o) if o.noop => (OperationResult::Noop, o),
            Ok(o) => (OperationResult::Ok, o),
            Err(e) => {
                let result = match e {
                    Error::Conflict(_) => OperationResult::Conflict,
                    _ => OperationResult::Failed,
                };
                span.in_scope(
                    || tracing::warn!(error = %e, "maintenance operation did not complete"),
                );
                let partition = match &p.action {
                    Action::Compact { partition, .. } => partition.clone(),
                    _ => String::new(),
                };
                let o = Outcome {
                    partition,
                    detail: e.to_string(),
                    ..Outcome::default()
                };
                (result, o)
            }
        };
        let r = OperationRecord {
            id: 0,
            started_us,
            table: p.table.clone(),
            kind,
            partition: outcome.partition,
            files_before: outcome.files_before,
            files_after: outcome.files_after,
            bytes_before: outcome.bytes_before,
            bytes_after: outcome.bytes_after,
            files_deleted: outcome.files_deleted,
            millis: started.elapsed().as_secs_f64() * 1000.0,
            result,
            snapshot_before: a
                .table
                .metadata()
                .current_snapshot()
                .map(|s| s.snapshot_id()),
            snapshot_after: outcome.snapshot_after,
            reason: p.reason.clone(),
            detail: outcome.detail,
            replica: String::new(),
        };
        self.count(&r);
        self.log().push(r.clone());
        r
    }

    async fn operate(&self, action: &Action, a: &Assessment) -> Result<Outcome> {
        let ident = a.table.identifier().clone();
        match action {
            Action::ExpireSnapshots { .. } => self.expire(&ident, a).await,
            Action::Compact {
                spec_id,
                partition,
                files,
                bytes,
                whole_partition,
                sort,
                ..
            } => {
                let work = Compaction {
                    spec_id: *spec_id,
                    partition,
                    files,
                    bytes: *bytes,
                    whole_partition: *whole_partition,
                    sort,
                };
                self.compact(&ident, a, work).await
            }
            Action::RemoveOrphans => self.remove_orphans(&ident, a).await,
            Action::RewriteManifests { manifests } => {
                self.rewrite_manifests(&ident, *manifests).await
            }
        }
    }

    async fn expire(&self, ident: &TableIdent, a: &Assessment) -> Result<Outcome> {
        let config = &a.policy.config;
        let key = &a.health.table;
        let e = crate::expire::run(
            self.committer(),
            self.manifests(),
            ident,
            config.keep_snapshots,
            config.snapshot_min_age,
            &|| self.readers().of(key),
            config.max_consumer_lag,
        )
        .await?;
        Ok(Outcome {
            files_before: a.health.snapshots as u64,
            files_after: e.remaining as u64,
            files_deleted: e.files_deleted as u64,
            bytes_before: e.bytes_deleted,
            detail: format!(
                "{} snapshots expired, {} files ({}) deleted",
                e.snapshots.len(),
                e.files_deleted,
                human_bytes(e.bytes_deleted)
            ),
            noop: e.snapshots.is_empty(),
            ..Outcome::default()
        })
    }

    async fn compact(
        &self,
        ident: &TableIdent,
        a: &Assessment,
        work: Compaction<'_>,
    ) -> Result<Outcome> {
        let config = &a.policy.config;
        let mut o = Outcome {
            partition: work.partition.to_string(),
            files_before: work.files.len() as u64,
            bytes_before: work.bytes,
            ..Outcome::default()
        };
        let inv = a
            .inventory()
            .ok_or_else(|| Error::Conflict("no snapshot".into()))?;
        let wanted: HashSet<&String> = work.files.iter().collect();
        let in_partition =
            |f: &&LiveFile| f.spec_id == work.spec_id && f.partition == work.partition;
        let data: Vec<LiveFile> = inv
            .files
            .iter()
            .filter(in_partition)
            .filter(|f| wanted.contains(&f.path().to_string()))
            .cloned()
            .collect();
        let deletes: Vec<LiveFile> = inv
            .files
            .iter()
            .filter(in_partition)
            .filter(|f| !f.is_data())
            .cloned()
            .collect();
        let partition_data = data.first().map(|f| f.data_file.partition().clone());
        let groups = split_groups(data, config.max_group_bytes);
        let single = groups.len() == 1;
        let (spec_id, partition) = (work.spec_id, work.partition);
        let job = |files: Vec<LiveFile>, sort: Vec<String>| Job {
            ident: ident.clone(),
            start: inv.snapshot.clone(),
            spec_id,
            partition: partition.to_string(),
            files,
            deletes: deletes.clone(),
            whole_partition: work.whole_partition && single,
            sort,
            target_file_size: config.target_file_size,
            sort_memory: config.sort_memory,
            branch: None,
        };
        let mut sample_done = false;
        let sort = match layout::standing(&a.table, work.sort) {
            Standing::Applied => work.sort.to_vec(),
            Standing::Rejected(kept) => kept,
            Standing::Untried => {
                let hot = self.hot_predicates(&a.health.table);
                let sample = groups.first().cloned().unwrap_or_default();
                if hot.is_empty() || sample.is_empty() {
                    work.sort.to_vec()
                } else {
                    let v = self
                        .try_layout(&a.health.table, job(sample, work.sort.to_vec()), &hot)
                        .await?;
                    if v.fast_forwarded {
                        // The sample (the first group) is on main already.
                        sample_done = true;
                        o.files_after = v.compacted.files_out as u64;
                        o.bytes_after = v.compacted.bytes_out;
                        o.snapshot_after = Some(v.branch_snapshot);
                        o.detail = format!(
                            "{} rows, sorted by {} (proven on branch {}, main fast-forwarded)",
                            v.compacted.rows,
                            work.sort.join(", "),
                            layout::BRANCH
                        );
                        if single {
                            return Ok(o);
                        }
                    }
                    if v.applied {
                        work.sort.to_vec()
                    } else {
                        layout::applied(&a.table)
                    }
                }
            }
        };
        let metadata = a.table.metadata();
        if let Some(executor) = self.executor()
            && !sample_done
            && work.bytes >= config.executor_min_bytes
            && let (Some(spec), Some(data)) = (
                metadata.partition_spec_by_id(spec_id),
                partition_data.as_ref(),
            )
            && let Some(filter) =
                crate::executor::partition_filter(spec, metadata.current_schema(), data)
        {
            let job = crate::executor::BigJob {
                table: a.health.table.clone(),
                filter: (!filter.is_empty()).then_some(filter),
                sort: sort.clone(),
                target_file_size: config.target_file_size,
            };
            return self
                .hand_over(
                    ident,
                    executor,
                    &job,
                    (spec_id, partition),
                    inv.snapshot.snapshot_id(),
                    o,
                )
                .await;
        }
        let mut details: Vec<String> = if sample_done {
            vec![std::mem::take(&mut o.detail)]
        } else {
            Vec::new()
        };
        for group in groups.into_iter().skip(usize::from(sample_done)) {
            let c = compact::run(
                self.committer(),
                self.manifests(),
                &job(group, sort.clone()),
            )
            .await?;
            o.files_after += c.files_out as u64;
            o.bytes_after += c.bytes_out;
            o.snapshot_after = Some(c.snapshot_id);
            let mut detail = format!("{} rows", c.rows);
            if !sort.is_empty() {
                detail.push_str(&format!(", sorted by {}", sort.join(", ")));
            }
            if c.deletes_removed > 0 {
                detail.push_str(&format!(", {} delete files dropped", c.deletes_removed));
            }
            if c.attempts > 1 {
                detail.push_str(&format!(
                    ", re-applied over newer commits ({} attempts)",
                    c.attempts
                ));
            }
            details.push(detail);
        }
        o.detail = details.join("; ");
        Ok(o)
    }

    /// Runs `job` on the executor and reports the partition `(spec id, label)` as it is after.
    async fn hand_over(
        &self,
        ident: &TableIdent,
        executor: &crate::executor::SparkExecutor,
        job: &crate::executor::BigJob,
        (spec_id, partition): (i32, &str),
        start: i64,
        mut o: Outcome,
    ) -> Result<Outcome> {
        executor.rewrite(job).await?;
        let table = self.committer().load(ident).await?;
        let after = match table.metadata().current_snapshot() {
            Some(s) => Some(crate::inventory::Inventory::load(&table, s, self.manifests()).await?),
            None => None,
        };
        let now: Vec<&LiveFile> = after
            .iter()
            .flat_map(|i| i.files.iter())
            .filter(|f| f.is_data() && f.spec_id == spec_id && f.partition == partition)
            .collect();
        o.files_after = now.len() as u64;
        o.bytes_after = now.iter().map(|f| f.bytes()).sum();
        let snapshot = table.metadata().current_snapshot_id();
        o.noop = snapshot == Some(start);
        o.snapshot_after = snapshot;
        o.detail = format!(
            "executor=spark: rewrite_data_files{}{}",
            if job.sort.is_empty() {
                String::new()
            } else {
                format!(", sorted by {}", job.sort.join(", "))
            },
            job.filter
                .as_deref()
                .map_or(String::new(), |f| format!(", where {f}"))
        );
        Ok(o)
    }

    /// The table's hottest predicates, for a layout experiment to replay.
    fn hot_predicates(&self, key: &str) -> Vec<iceberg::expr::Predicate> {
        self.heat_view(key)
            .predicates
            .into_iter()
            .take(layout::MAX_QUERIES)
            .map(|(p, _)| p)
            .collect()
    }

    /// Runs a layout experiment for `sample` and logs it as its own operation.
    async fn try_layout(
        &self,
        key: &str,
        sample: Job,
        hot: &[iceberg::expr::Predicate],
    ) -> Result<layout::Verdict> {
        let started = Instant::now();
        let started_us = chrono::Utc::now().timestamp_micros();
        let start = sample.start.snapshot_id();
        let partition = sample.partition.clone();
        let sort = sample.sort.join(", ");
        let verdict = layout::experiment(self.committer(), self.manifests(), sample, hot).await;
        let (result, detail) = match &verdict {
            Ok(v) => (OperationResult::Ok, v.detail.clone()),
            Err(Error::Conflict(e)) => (OperationResult::Conflict, e.clone()),
            Err(e) => (OperationResult::Failed, e.to_string()),
        };
        let measured = verdict.as_ref().ok();
        let mut r = OperationRecord::decision(
            key,
            OperationKind::LayoutExperiment,
            &partition,
            result,
            format!("compaction would sort by {sort}: proven on a branch first"),
            detail,
        );
        r.started_us = started_us;
        r.millis = started.elapsed().as_secs_f64() * 1000.0;
        r.snapshot_before = Some(start);
        r.snapshot_after = measured.map(|v| v.branch_snapshot);
        if let Some(v) = measured {
            r.files_before = v.main.files as u64;
            r.files_after = v.branch.files as u64;
            r.bytes_before = v.main.bytes;
            r.bytes_after = v.branch.bytes;
        }
        self.count(&r);
        self.log().push(r);
        verdict
    }

    async fn remove_orphans(&self, ident: &TableIdent, a: &Assessment) -> Result<Outcome> {
        let o = crate::orphans::run(
            self.committer(),
            self.manifests(),
            ident,
            a.policy.config.orphan_min_age,
        )
        .await?;
        Ok(Outcome {
            files_before: o.scanned as u64,
            files_after: (o.scanned - o.deleted) as u64,
            files_deleted: o.deleted as u64,
            bytes_before: o.bytes,
            detail: format!(
                "{} files scanned, {} orphans deleted ({}), {} unreferenced but younger than \
                 the threshold kept; threshold {} ({})",
                o.scanned,
                o.deleted,
                human_bytes(o.bytes),
                o.young,
                humantime_serde::re::humantime::format_duration(std::time::Duration::from_secs(
                    o.threshold.as_secs()
                )),
                match o.observed_gap {
                    Some(g) if o.threshold > a.policy.config.orphan_min_age => format!(
                        "{}× the longest write-to-commit gap seen, {}",
                        crate::orphans::GAP_FACTOR,
                        humantime_serde::re::humantime::format_duration(
                            std::time::Duration::from_secs(g.as_secs())
                        )
                    ),
                    _ => "orphan_min_age".to_string(),
                }
            ),
            noop: o.deleted == 0,
            ..Outcome::default()
        })
    }

    async fn rewrite_manifests(&self, ident: &TableIdent, manifests: usize) -> Result<Outcome> {
        let replace = Replace {
            merge_manifests_below: Some(self.config().target_manifest_size),
            ..Default::default()
        };
        let (id, attempts) =
            compact::commit_replace(self.committer(), self.manifests(), ident, &replace).await?;
        let after = self.committer().load(ident).await?;
        let mut files_after = 0;
        if let Some(s) = after.metadata().snapshot_by_id(id) {
            let list = after.manifest_list_reader(s).load().await?;
            files_after = list
                .entries()
                .iter()
                .filter(|m| m.content == iceberg::spec::ManifestContentType::Data)
                .count() as u64;
        }
        Ok(Outcome {
            files_before: manifests as u64,
            files_after,
            snapshot_after: Some(id),
            detail: if attempts > 1 {
                format!("re-applied over newer commits ({attempts} attempts)")
            } else {
                String::new()
            },
            ..Outcome::default()
        })
    }
}

/// A compaction's inputs, borrowed from its planned action.
struct Compaction<'a> {
    spec_id: i32,
    partition: &'a str,
    files: &'a [String],
    bytes: u64,
    whole_partition: bool,
    sort: &'a [String],
}

/// Input files in commit groups of at most `max_bytes` each (smallest first; a file larger
/// than the limit is a group of its own).
fn split_groups(mut files: Vec<LiveFile>, max_bytes: u64) -> Vec<Vec<LiveFile>> {
    files.sort_by_key(|f| f.bytes());
    let mut groups: Vec<Vec<LiveFile>> = vec![];
    let mut bytes = 0;
    for f in files {
        if groups.is_empty()
            || (bytes + f.bytes() > max_bytes && !groups.last().is_some_and(|g| g.is_empty()))
        {
            groups.push(vec![]);
            bytes = 0;
        }
        bytes += f.bytes();
        if let Some(g) = groups.last_mut() {
            g.push(f);
        }
    }
    groups
}

/// `work`'s result, or its panic as [`Error::Panicked`].
async fn caught<T>(work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(Error::Panicked(panic_message(panic.as_ref()))),
    }
}

/// The text a panic carried.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fault is injected (an operation that panics is a bug we cannot produce on demand):
    /// the panic becomes the operation's error, with its message, and nothing unwinds further.
    #[tokio::test]
    async fn a_panicking_operation_becomes_a_failed_outcome() {
        let boom = caught(async {
            if chrono::Utc::now().timestamp() > 0 {
                panic!("index out of bounds: the len is 3 but the index is 7");
            }
            Ok(Outcome::default())
        })
        .await;
        match boom {
            Err(Error::Panicked(message)) => assert!(message.contains("index out of bounds")),
            other => panic!("expected a caught panic, got {other:?}"),
        }
        let fine = caught(async { Ok(Outcome::default()) }).await;
        assert!(fine.is_ok());
    }
}

//! Layouts proven on a branch before they touch main. When compaction would sort a table by
//! columns it has not been laid out by, one sample partition is first compacted that way into
//! the Iceberg branch [`BRANCH`]; the table's hottest predicates (from the query telemetry) are
//! replayed against the branch and against main — files and bytes each scan plans, the time to
//! read the matching rows, and the rows themselves, which must agree — and the layout is
//! applied only when the branch reads clearly less. The decision is kept in a table property
//! ([`APPLIED`] or [`REJECTED`]), so it is made once per layout; a rejected layout leaves
//! compaction sorting as before. The branch is dropped either way; the experiment is an
//! operation in the log with its numbers.

use std::collections::HashSet;
use std::time::Instant;

use futures::TryStreamExt;
use iceberg::expr::Predicate;
use iceberg::scan::FileScanTask;
use iceberg::spec::{SnapshotReference, SnapshotRetention};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use lakegate_engines::units::human_bytes;

use crate::commit::Committer;
use crate::compact::{self, Job};
use crate::error::{Error, Result};
use crate::inventory::ManifestCache;

/// The branch an experiment compacts into.
pub const BRANCH: &str = "lakegate-layout";
/// Table property: the sort columns the table is laid out by (comma-separated).
pub const APPLIED: &str = "lakegate.layout.sort_columns";
/// Table property: the sort columns an experiment rejected last.
pub const REJECTED: &str = "lakegate.layout.rejected_sort_columns";
/// The branch must read at most this share of main's bytes to be applied.
const MAX_SHARE: f64 = 0.9;
/// Predicates replayed, hottest first.
pub const MAX_QUERIES: usize = 5;
/// Timed reads per predicate and side (the median counts).
const RUNS: usize = 3;

/// Where a table stands on a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It is laid out this way (or no layout change is asked for).
    Applied,
    /// An experiment rejected it: keep sorting by these columns instead.
    Rejected(Vec<String>),
    /// Not tried yet.
    Untried,
}

fn columns(table: &Table, key: &str) -> Option<Vec<String>> {
    table.metadata().properties().get(key).map(|v| {
        v.split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect()
    })
}

fn same(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y))
}

/// The columns `table` is laid out by (empty: none recorded).
pub fn applied(table: &Table) -> Vec<String> {
    columns(table, APPLIED).unwrap_or_default()
}

/// Where `table` stands on being sorted by `sort`.
pub fn standing(table: &Table, sort: &[String]) -> Standing {
    let applied = columns(table, APPLIED).unwrap_or_default();
    if sort.is_empty() || same(&applied, sort) {
        return Standing::Applied;
    }
    match columns(table, REJECTED) {
        Some(rejected) if same(&rejected, sort) => Standing::Rejected(applied),
        _ => Standing::Untried,
    }
}

/// What one side of the replay read, summed over the predicates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measure {
    /// Files the scans planned.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// Rows that matched.
    pub rows: u64,
    /// Median time to read them (ms).
    pub millis: f64,
}

impl std::fmt::Display for Measure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} files, {}, {:.1} ms",
            self.files,
            human_bytes(self.bytes),
            self.millis
        )
    }
}

/// An experiment's outcome.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Whether the layout was applied.
    pub applied: bool,
    /// What main read.
    pub main: Measure,
    /// What the branch read.
    pub branch: Measure,
    /// Predicates replayed.
    pub queries: usize,
    /// The branch's snapshot.
    pub branch_snapshot: i64,
    /// The branch's compaction.
    pub compacted: compact::Compacted,
    /// Main was moved to the branch's snapshot (it had not moved since the read).
    pub fast_forwarded: bool,
    /// The decision in words, with the numbers.
    pub detail: String,
}

/// Compacts `job` (its sample partition, sorted the new way) into [`BRANCH`], replays
/// `predicates` against the branch and main, and records the decision on the table.
///
/// # Errors
/// Catalog and IO errors; [`Error::Invariant`] when the two sides return different rows
/// (nothing is applied then).
pub async fn experiment(
    committer: &Committer,
    cache: &ManifestCache,
    mut job: Job,
    predicates: &[Predicate],
) -> Result<Verdict> {
    let start = job.start.snapshot_id();
    update(committer, &job, |table| {
        let mut updates = Vec::new();
        if table.metadata().snapshot_for_ref(BRANCH).is_some() {
            updates.push(TableUpdate::RemoveSnapshotRef {
                ref_name: BRANCH.into(),
            });
        }
        updates.push(TableUpdate::SetSnapshotRef {
            ref_name: BRANCH.into(),
            reference: SnapshotReference::new(start, SnapshotRetention::branch(None, None, None)),
        });
        updates
    })
    .await?;
    job.branch = Some(BRANCH.into());
    let mut result = prove(committer, cache, &job, predicates).await;
    // Decided or not, the branch goes; the decision is a property of the table. An applied
    // layout whose main has not moved since the read is fast-forwarded onto main: the sample
    // partition is then compacted already.
    let decided = |v: &Verdict| {
        let key = if v.applied { APPLIED } else { REJECTED };
        TableUpdate::SetProperties {
            updates: [(key.to_string(), job.sort.join(","))].into(),
        }
    };
    let drop_branch = TableUpdate::RemoveSnapshotRef {
        ref_name: BRANCH.into(),
    };
    if let Ok(v) = &mut result
        && v.applied
    {
        let table = committer.load(&job.ident).await?;
        let forward = vec![
            TableUpdate::SetSnapshotRef {
                ref_name: crate::snapshot::MAIN.into(),
                reference: SnapshotReference::new(
                    v.branch_snapshot,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
            drop_branch.clone(),
            decided(v),
        ];
        let mut requirements = vec![TableRequirement::UuidMatch {
            uuid: table.metadata().uuid(),
        }];
        requirements.push(TableRequirement::RefSnapshotIdMatch {
            r#ref: crate::snapshot::MAIN.into(),
            snapshot_id: Some(job.start.snapshot_id()),
        });
        match committer.commit(&table, forward, requirements).await {
            Ok(_) => {
                v.fast_forwarded = true;
                v.detail.push_str(" (main fast-forwarded to the branch)");
                return result;
            }
            Err(Error::Conflict(_)) => {} // main moved on: compacted there as usual
            Err(e) => return Err(e),
        }
    }
    update(committer, &job, |_| {
        let mut updates = vec![drop_branch.clone()];
        if let Ok(v) = &result {
            updates.push(decided(v));
        }
        updates
    })
    .await?;
    result
}

/// Commits `updates` (of refs and properties: nothing a writer's commit invalidates) on the
/// table as it is, again while other writers win the swap.
async fn update(
    committer: &Committer,
    job: &Job,
    updates: impl Fn(&Table) -> Vec<TableUpdate>,
) -> Result<()> {
    const ATTEMPTS: usize = 10;
    for attempt in 1..=ATTEMPTS {
        let table = committer.load(&job.ident).await?;
        let requirements = vec![TableRequirement::UuidMatch {
            uuid: table.metadata().uuid(),
        }];
        match committer
            .commit(&table, updates(&table), requirements)
            .await
        {
            Ok(_) => return Ok(()),
            Err(Error::Conflict(_)) if attempt < ATTEMPTS => {
                tokio::time::sleep(compact::jitter(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict(format!(
        "the table moved on every one of {ATTEMPTS} attempts"
    )))
}

async fn prove(
    committer: &Committer,
    cache: &ManifestCache,
    job: &Job,
    predicates: &[Predicate],
) -> Result<Verdict> {
    let compacted = compact::run(committer, cache, job).await?;
    let table = committer.load(&job.ident).await?;
    let start = job.start.snapshot_id();
    // The sample partition on each side: main's planned files; on the branch, what is not
    // main's outside them (the rewritten files, and any of the partition left as it was).
    let sample: HashSet<&str> = job.files.iter().map(|f| f.path()).collect();
    let main_all: HashSet<String> = plan(&table, start, None)
        .await?
        .into_iter()
        .map(|t| t.data_file_path)
        .collect();
    let outside: HashSet<&str> = main_all
        .iter()
        .map(String::as_str)
        .filter(|p| !sample.contains(p))
        .collect();
    let mut main = Measure::default();
    let mut branch = Measure::default();
    for p in predicates {
        let on_main = measure(&table, start, p, |path| sample.contains(path)).await?;
        let on_branch = measure(&table, compacted.snapshot_id, p, |path| {
            !outside.contains(path)
        })
        .await?;
        if on_main.rows != on_branch.rows {
            return Err(Error::Invariant(format!(
                "the branch returned {} rows for {p} where main returned {}",
                on_branch.rows, on_main.rows
            )));
        }
        add(&mut main, &on_main);
        add(&mut branch, &on_branch);
    }
    let applied = (branch.bytes as f64) <= main.bytes as f64 * MAX_SHARE
        || (branch.files as f64) <= main.files as f64 * MAX_SHARE && branch.bytes <= main.bytes;
    let sample = if job.partition.is_empty() {
        "the table".to_string()
    } else {
        format!("partition {}", job.partition)
    };
    let detail = format!(
        "{sample} sorted by {} on branch {BRANCH} (snapshot {}): {} hot {} read {} there vs {} \
         on main: {}",
        job.sort.join(", "),
        compacted.snapshot_id,
        predicates.len(),
        if predicates.len() == 1 {
            "query"
        } else {
            "queries"
        },
        branch,
        main,
        if applied {
            "applied".to_string()
        } else {
            format!(
                "rejected (the branch must read at most {:.0}% of main's bytes or files)",
                MAX_SHARE * 100.0
            )
        }
    );
    Ok(Verdict {
        applied,
        main,
        branch,
        queries: predicates.len(),
        branch_snapshot: compacted.snapshot_id,
        compacted,
        fast_forwarded: false,
        detail,
    })
}

fn add(sum: &mut Measure, m: &Measure) {
    sum.files += m.files;
    sum.bytes += m.bytes;
    sum.rows += m.rows;
    sum.millis += m.millis;
}

async fn plan(
    table: &Table,
    snapshot: i64,
    filter: Option<&Predicate>,
) -> Result<Vec<FileScanTask>> {
    let mut scan = table
        .scan()
        .snapshot_id(snapshot)
        .select_all()
        .with_case_sensitive(false);
    if let Some(p) = filter {
        scan = scan.with_filter(p.clone());
    }
    Ok(scan.build()?.plan_files().await?.try_collect().await?)
}

/// One predicate on one side: the files its scan plans among those `keep` accepts, and the
/// median time to read the rows that match.
async fn measure(
    table: &Table,
    snapshot: i64,
    predicate: &Predicate,
    keep: impl Fn(&str) -> bool,
) -> Result<Measure> {
    let tasks: Vec<FileScanTask> = plan(table, snapshot, Some(predicate))
        .await?
        .into_iter()
        .filter(|t| keep(&t.data_file_path))
        .collect();
    let mut m = Measure {
        files: tasks.len(),
        bytes: tasks.iter().map(|t| t.file_size_in_bytes).sum(),
        ..Measure::default()
    };
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let rows: u64 = table
            .reader_builder()
            .with_row_group_filtering_enabled(true)
            .build()
            .read(Box::pin(futures::stream::iter(
                tasks.clone().into_iter().map(Ok),
            )))?
            .stream()
            .try_fold(0u64, |n, b| {
                futures::future::ready(Ok(n + b.num_rows() as u64))
            })
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        m.rows = rows;
    }
    times.sort_by(f64::total_cmp);
    m.millis = times[times.len() / 2];
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_columns_ignore_case_and_order_matters() {
        let s = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert!(same(&s(&["Customer_ID"]), &s(&["customer_id"])));
        assert!(!same(&s(&["a", "b"]), &s(&["b", "a"])));
        assert!(!same(&s(&["a"]), &s(&["a", "b"])));
    }
}

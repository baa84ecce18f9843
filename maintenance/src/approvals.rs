//! Operations waiting for an operator. A table whose policy says `mode = "manual"` (every
//! operation) or lists a kind in `approve` (say expiry and orphan removal, while compaction runs
//! on its own) has those operations held here instead of run. An admin approves or rejects one;
//! an approved operation runs at the next cycle only if the table is still at the snapshot it
//! was planned against — otherwise it is planned again from the table as it is and waits for a
//! new approval (recorded in the operations log as re-planned), never executed blindly.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::oplog::OperationKind;

/// How a table's operations are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// As the table needs them (the kinds in `approve` excepted).
    #[default]
    Autopilot,
    /// Only what the policy allows: kinds, windows of time, a budget (`crate::autonomy`).
    Policies,
    /// Every operation waits for approval.
    Manual,
}

/// An operation held for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingOperation {
    /// Its number (for approve / reject).
    pub id: u64,
    /// `ns.table`.
    pub table: String,
    /// What it would do.
    pub kind: OperationKind,
    /// The partition (compaction), else empty.
    pub partition: String,
    /// Why the planner wants it.
    pub reason: String,
    /// The snapshot it was planned against.
    pub snapshot_id: Option<i64>,
    /// When it was (last) planned (ms since the epoch).
    pub planned_ms: i64,
    /// Who approved it, if anyone has.
    pub approved_by: Option<String>,
}

/// What to do with a planned operation that needs approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Approved by this operator for the table as it is: run it.
    Run(String),
    /// Not approved yet: hold it.
    Wait,
    /// Approved by this operator against an older snapshot: planned again, waiting anew.
    Replanned {
        /// Who had approved it.
        by: String,
        /// The snapshot the approval was for.
        was: Option<i64>,
    },
}

/// `decide` of an operation that is not waiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no maintenance operation {0} is waiting for approval")]
pub struct NotPending(pub u64);

/// The held operations.
#[derive(Debug, Default)]
pub struct Approvals {
    next: AtomicU64,
    ops: Mutex<BTreeMap<u64, PendingOperation>>,
}

impl Approvals {
    /// Numbers operations from `base` on (an id unique across replicas); before any is held.
    pub fn set_base(&self, base: u64) {
        let _ = self
            .next
            .compare_exchange(0, base, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, PendingOperation>> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The gate for an operation planned now on `table` at `snapshot_id` (the same table, kind
    /// and partition are one operation across cycles).
    pub fn gate(
        &self,
        table: &str,
        kind: OperationKind,
        partition: &str,
        reason: &str,
        snapshot_id: Option<i64>,
    ) -> Gate {
        let now = chrono::Utc::now().timestamp_millis();
        let mut ops = self.lock();
        let found = ops
            .values_mut()
            .find(|o| o.table == table && o.kind == kind && o.partition == partition);
        match found {
            Some(o) => match o.approved_by.take() {
                Some(by) if o.snapshot_id == snapshot_id => {
                    let id = o.id;
                    ops.remove(&id);
                    Gate::Run(by)
                }
                Some(by) => {
                    let was = o.snapshot_id;
                    o.snapshot_id = snapshot_id;
                    o.reason = reason.to_string();
                    o.planned_ms = now;
                    Gate::Replanned { by, was }
                }
                None => {
                    o.snapshot_id = snapshot_id;
                    o.reason = reason.to_string();
                    o.planned_ms = now;
                    Gate::Wait
                }
            },
            None => {
                let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
                ops.insert(
                    id,
                    PendingOperation {
                        id,
                        table: table.to_string(),
                        kind,
                        partition: partition.to_string(),
                        reason: reason.to_string(),
                        snapshot_id,
                        planned_ms: now,
                        approved_by: None,
                    },
                );
                Gate::Wait
            }
        }
    }

    /// Approves (`approve`) or rejects operation `id` as `by`. A rejected operation leaves the
    /// list (the planner may propose it again next time the table needs it).
    ///
    /// # Errors
    /// [`NotPending`] when no such operation is waiting.
    pub fn decide(&self, id: u64, approve: bool, by: &str) -> Result<PendingOperation, NotPending> {
        let mut ops = self.lock();
        if !approve {
            return ops.remove(&id).ok_or(NotPending(id));
        }
        let op = ops.get_mut(&id).ok_or(NotPending(id))?;
        op.approved_by = Some(by.to_string());
        Ok(op.clone())
    }

    /// Drops the operations of the tables a cycle just planned (`planned_tables`) that it did
    /// not plan again (`still`: table, kind, partition): the table no longer needs them.
    pub fn forget_unplanned(
        &self,
        planned_tables: &std::collections::HashSet<String>,
        still: &[(String, OperationKind, String)],
    ) {
        self.lock().retain(|_, o| {
            !planned_tables.contains(&o.table)
                || still
                    .iter()
                    .any(|(t, k, p)| *t == o.table && *k == o.kind && *p == o.partition)
        });
    }

    /// The operations waiting (approved ones until their cycle runs them), oldest first.
    pub fn list(&self) -> Vec<PendingOperation> {
        self.lock().values().cloned().collect()
    }

    /// Whether `table` has an approved operation waiting for its cycle.
    pub fn has_approved(&self, table: &str) -> bool {
        self.lock()
            .values()
            .any(|o| o.table == table && o.approved_by.is_some())
    }
}

/// Keeps `approvals` in the shared database until `stop`: what the leader holds is listed there
/// for every replica, and decisions made on other replicas are applied here.
pub fn share(
    approvals: std::sync::Arc<Approvals>,
    state: std::sync::Arc<crate::state::SharedState>,
    stop: tokio_util::sync::CancellationToken,
) {
    let listed = std::sync::Arc::clone(&approvals);
    crate::state::share_waiting(
        state,
        crate::state::Waiting::Operations,
        stop,
        move || {
            listed
                .list()
                .into_iter()
                .filter_map(|o| serde_json::to_string(&o).ok().map(|j| (o.id, j)))
                .collect()
        },
        move |d| match approvals.decide(d.id, d.approve, &d.by) {
            Ok(op) => tracing::info!(id = d.id, by = %d.by, approve = d.approve,
                table = %op.table, "maintenance operation decided on another replica"),
            Err(e) => tracing::debug!(error = %e, "decision on a gone operation"),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_runs_at_its_snapshot_and_is_replanned_after_a_commit() {
        let a = Approvals::default();
        let gate = |snapshot| {
            a.gate(
                "s.t",
                OperationKind::Compact,
                "day=1",
                "small files",
                snapshot,
            )
        };
        assert_eq!(gate(Some(1)), Gate::Wait);
        assert_eq!(
            gate(Some(1)),
            Gate::Wait,
            "the same operation is listed once"
        );
        assert_eq!(a.list().len(), 1);
        let id = a.list()[0].id;
        a.decide(id, true, "ops").expect("waiting");
        assert!(a.has_approved("s.t"));
        // The table moved on: planned again, approval needed again.
        assert_eq!(
            gate(Some(2)),
            Gate::Replanned {
                by: "ops".into(),
                was: Some(1)
            }
        );
        assert!(!a.has_approved("s.t"));
        assert_eq!(a.list()[0].snapshot_id, Some(2));
        a.decide(id, true, "ops").expect("waiting");
        assert_eq!(gate(Some(2)), Gate::Run("ops".into()));
        assert!(a.list().is_empty());
        // Rejected: off the list.
        assert_eq!(gate(Some(3)), Gate::Wait);
        let id = a.list()[0].id;
        a.decide(id, false, "ops").expect("waiting");
        assert!(a.list().is_empty());
        assert_eq!(a.decide(id, true, "ops"), Err(NotPending(id)));
        // A table planned again without the operation: it is no longer needed.
        assert_eq!(gate(Some(4)), Gate::Wait);
        let tables = std::collections::HashSet::from(["s.t".to_string()]);
        a.forget_unplanned(
            &tables,
            &[("s.t".into(), OperationKind::Compact, "day=1".into())],
        );
        assert_eq!(a.list().len(), 1, "still planned");
        a.forget_unplanned(&tables, &[]);
        assert!(a.list().is_empty(), "no longer planned");
    }
}

//! A maintenance cycle: plan it from the assessments, then run its operations one at a time —
//! through the approval gate, the `policies` mode's allowance and (with other gateways) the
//! table's lock — and the loop that runs a cycle every interval while this gateway leads.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::FutureExt;
use iceberg::TableIdent;
use lakegate_engines::lake::namespace_ident;
use lakegate_engines::units::human_bytes;
use tokio_util::sync::CancellationToken;

use super::{Assessment, Maintainer, Slo};
use crate::error::Result;
use crate::oplog::{OperationKind, OperationRecord, OperationResult};
use crate::plan::{self, Candidate, Planned};
use crate::telemetry::table_key;

impl Maintainer {
    /// Plans a cycle: over every allowed table (`only`: one `ns.table`) that is due (`force`:
    /// all of them). Returns the plan and the assessments it used.
    ///
    /// # Errors
    /// Catalog errors listing tables.
    pub async fn plan(
        &self,
        force: bool,
        only: Option<&str>,
    ) -> Result<(Vec<Planned>, Vec<Assessment>)> {
        self.plan_cycle(force, only, false).await
    }

    /// [`Maintainer::plan`]; `record`: log each table's policy change (a cycle that runs).
    async fn plan_cycle(
        &self,
        force: bool,
        only: Option<&str>,
        record: bool,
    ) -> Result<(Vec<Planned>, Vec<Assessment>)> {
        let mut assessed = Vec::new();
        let mut flags = Vec::new();
        let (mut looked, mut maintained) = (0usize, 0usize);
        for (ns, t) in self.tables().await? {
            let key = table_key(&ns, &t);
            if only.is_some_and(|o| o != key) {
                continue;
            }
            looked += 1;
            if !self.config.allows(&ns, &t) {
                continue;
            }
            // Cadence first (one catalog load): only due tables are assessed (manifests,
            // partition heat), so an estate of quiet tables costs a lookup each per cycle.
            let ident = TableIdent::new(namespace_ident(&ns), t.clone());
            let table = match self.committer.load(&ident).await {
                Ok(table) => table,
                Err(e) => {
                    tracing::warn!(table = %key, error = %e, "not loaded");
                    continue;
                }
            };
            // The table's own settings apply from this cycle on (a change is logged once).
            let policy = self.policy_of(&key, &table);
            if record {
                self.note_policy(&key, &policy);
            }
            // An approved operation is due at once (planned again against the table as it is).
            let approved = self.approvals.has_approved(&key);
            maintained += usize::from(policy.enabled);
            if !policy.enabled
                || !(force || approved || self.due(&key, &table, &policy.config, false).0)
            {
                continue;
            }
            let a = match self.assess_loaded(key.clone(), table).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(table = %key, error = %e, "not assessed");
                    continue;
                }
            };
            let (due, orphans) = self.due(&key, &a.table, &a.policy.config, force || approved);
            if due {
                flags.push(orphans);
                assessed.push(a);
            }
        }
        let candidates: Vec<Candidate<'_>> = assessed
            .iter()
            .zip(&flags)
            .map(|(a, orphans)| Candidate {
                health: &a.health,
                files: a
                    .inventory
                    .as_ref()
                    .map(|i| i.files.as_slice())
                    .unwrap_or(&[]),
                default_spec: a.table.metadata().default_partition_spec_id(),
                expirable: a.expirable,
                orphans_due: *orphans,
                config: &a.policy.config,
            })
            .collect();
        let planned = plan::plan(
            &candidates,
            &self.config,
            chrono::Utc::now().timestamp_millis(),
        );
        if record && only.is_none() {
            let mut coverage = self.coverage.lock().unwrap_or_else(|p| p.into_inner());
            coverage.0 = looked;
            coverage.1 = maintained;
        }
        Ok((planned, assessed))
    }

    /// Runs one cycle; `progress` hears about each operation as it starts and ends.
    ///
    /// # Errors
    /// Catalog errors listing tables (each operation's own failure is logged, not returned).
    pub async fn run_cycle(
        &self,
        force: bool,
        only: Option<&str>,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Vec<OperationRecord>> {
        let _one = self.cycle.lock().await;
        self.counters.cycles.fetch_add(1, Ordering::Relaxed);
        let (planned, assessed) = self.plan_cycle(force, only, true).await?;
        // Tables with something planned, and those with an operation left waiting.
        let wanted: std::collections::HashSet<String> =
            planned.iter().map(|p| p.table.clone()).collect();
        let mut held = std::collections::HashSet::new();
        // Held operations of the tables assessed now that this plan no longer has.
        let assessed_tables: std::collections::HashSet<String> =
            assessed.iter().map(|a| a.health.table.clone()).collect();
        let still: Vec<(String, OperationKind, String)> = planned
            .iter()
            .map(|p| {
                let partition = match &p.action {
                    plan::Action::Compact { partition, .. } => partition.clone(),
                    _ => String::new(),
                };
                (p.table.clone(), p.action.kind(), partition)
            })
            .collect();
        self.approvals.forget_unplanned(&assessed_tables, &still);
        let started = Instant::now();
        let mut done = Vec::new();
        let mut touched = std::collections::HashSet::new();
        for p in planned {
            if self.stopping.is_cancelled() {
                progress("shutting down: the rest of the plan waits for the next start");
                break;
            }
            if started.elapsed() > self.config.max_cycle_time {
                progress(&format!(
                    "cycle time budget spent; {} left for next cycle",
                    p.table
                ));
                break;
            }
            let Some(a) = assessed.iter().find(|a| a.health.table == p.table) else {
                continue;
            };
            let mut p = p;
            if a.policy.config.needs_approval(p.action.kind()) {
                match self.gate(&p, a) {
                    Some(by) => p.reason = format!("{} (approved by {by})", p.reason),
                    None => {
                        progress(&format!(
                            "{} {}: waiting for approval ({})",
                            p.action.kind(),
                            p.table,
                            p.reason
                        ));
                        held.insert(p.table.clone());
                        continue;
                    }
                }
            }
            if a.policy.config.mode == crate::approvals::Mode::Policies
                && let Some(why) = crate::autonomy::deferred(
                    &a.policy.config,
                    p.action.kind(),
                    chrono::Utc::now(),
                    self.ran_last_hour(&p.table),
                )
            {
                progress(&format!(
                    "{} {}: deferred by its policy: {why}",
                    p.action.kind(),
                    p.table
                ));
                held.insert(p.table.clone());
                continue;
            }
            // With other gateways (a CLI run among them), one works on a table at a time.
            let _lock = match self.shared.get() {
                None => None,
                Some(state) => {
                    let taken =
                        crate::state::Held::take(state, crate::state::table_lock(&p.table)).await;
                    let why = match taken {
                        Ok(Some(lock)) => Ok(lock),
                        Ok(None) => Err("another gateway is working on the table".to_string()),
                        Err(e) => Err(format!("table lock unavailable ({e}); not run")),
                    };
                    match why {
                        Ok(lock) => Some(lock),
                        Err(why) => {
                            progress(&format!("{} {}: {why}", p.action.kind(), p.table));
                            held.insert(p.table.clone());
                            continue;
                        }
                    }
                }
            };
            progress(&format!("{} {}: {} …", p.action.kind(), p.table, p.reason));
            let record = self.execute(&p, a).await;
            progress(&format!(
                "{} {}{}: {} in {:.2} s (files {} → {}, {} → {}){}",
                record.kind,
                record.table,
                if record.partition.is_empty() {
                    String::new()
                } else {
                    format!(" {}", record.partition)
                },
                record.result,
                record.millis / 1000.0,
                record.files_before,
                record.files_after,
                human_bytes(record.bytes_before),
                human_bytes(record.bytes_after),
                if record.detail.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", record.detail)
                },
            ));
            touched.insert(p.table.clone());
            done.push(record);
        }
        let now = chrono::Utc::now().timestamp_millis();
        {
            let mut coverage = self.coverage.lock().unwrap_or_else(|p| p.into_inner());
            let waiting = &mut coverage.2;
            for t in &wanted {
                if done
                    .iter()
                    .any(|r| &r.table == t && r.kind != OperationKind::PolicyChange)
                    && !held.contains(t)
                {
                    waiting.remove(t);
                } else {
                    waiting.entry(t.clone()).or_insert(now);
                }
            }
            waiting.retain(|t, _| wanted.contains(t));
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for a in &assessed {
            let s = state.entry(a.health.table.clone()).or_default();
            s.last_run_ms = now;
            if done
                .iter()
                .any(|r| r.table == a.health.table && r.kind == OperationKind::RemoveOrphans)
            {
                s.last_orphans_ms = now;
            }
        }
        Ok(done)
    }

    /// Operations run on `table` in the last hour (its `policies`-mode budget).
    fn ran_last_hour(&self, table: &str) -> usize {
        let since = chrono::Utc::now().timestamp_micros() - 3_600_000_000;
        self.log.count(|r| {
            r.table == table
                && r.started_us >= since
                && !matches!(
                    r.kind,
                    OperationKind::PolicyChange | OperationKind::LayoutExperiment
                )
        })
    }

    /// The approval gate of a planned operation that needs one: who approved it for the table as
    /// it is (run it), or `None` (held; an approval for an older snapshot is recorded as
    /// re-planned).
    fn gate(&self, p: &Planned, a: &Assessment) -> Option<String> {
        use crate::approvals::Gate;
        let partition = match &p.action {
            plan::Action::Compact { partition, .. } => partition.as_str(),
            _ => "",
        };
        let snapshot = a
            .table
            .metadata()
            .current_snapshot()
            .map(|s| s.snapshot_id());
        match self
            .approvals
            .gate(&p.table, p.action.kind(), partition, &p.reason, snapshot)
        {
            Gate::Run(by) => Some(by),
            Gate::Wait => None,
            Gate::Replanned { by, was } => {
                let show = |s: Option<i64>| s.map_or("none".to_string(), |s| s.to_string());
                let mut record = OperationRecord::decision(
                    &p.table,
                    p.action.kind(),
                    partition,
                    OperationResult::Noop,
                    p.reason.clone(),
                    format!(
                        "re-planned: approved by {by} for snapshot {}, the table is now at {}; \
                         waiting for a new approval",
                        show(was),
                        show(snapshot)
                    ),
                );
                record.snapshot_before = was;
                self.log.push(record);
                None
            }
        }
    }

    /// The loop's own service levels: coverage, failures, backlog and activity.
    pub fn slo(&self) -> Slo {
        let now_us = chrono::Utc::now().timestamp_micros();
        let ops: Vec<OperationRecord> = self
            .log
            .all()
            .into_iter()
            .filter(|o| o.kind != OperationKind::PolicyChange)
            .collect();
        let day: Vec<&OperationRecord> = ops
            .iter()
            .filter(|o| now_us - o.started_us <= 86_400_000_000)
            .collect();
        let failed = day
            .iter()
            .filter(|o| {
                matches!(
                    o.result,
                    OperationResult::Failed | OperationResult::Conflict
                )
            })
            .count();
        let coverage = self.coverage.lock().unwrap_or_else(|p| p.into_inner());
        let now_ms = now_us / 1000;
        Slo {
            tables: coverage.0,
            maintained: coverage.1,
            failure_ratio: if day.is_empty() {
                0.0
            } else {
                failed as f64 / day.len() as f64
            },
            backlog: coverage.2.len(),
            oldest_wait_s: coverage
                .2
                .values()
                .map(|since| (now_ms - since) as f64 / 1000.0)
                .fold(0.0, f64::max),
            operations_last_hour: day
                .iter()
                .filter(|o| now_us - o.started_us <= 3_600_000_000)
                .count(),
            commits_last_hour: self
                .last_health()
                .iter()
                .map(|h| h.commits_last_hour as u64)
                .sum(),
        }
    }

    /// Runs the loop every `interval` until `shutdown` fires.
    pub fn spawn(self: Arc<Self>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let stopping = self.stopping.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            stopping.cancel();
        });
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.config.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                // With other gateways, only the lease holder runs the loop; a lost lease
                // (a stall past it, a database outage) stops it until it is taken again.
                let leading = match self.shared.get() {
                    None => true,
                    Some(state) => match state.try_lease(crate::state::LEADER).await {
                        Ok(held) => held,
                        Err(e) => {
                            tracing::warn!(error = %e, "leader lease not renewed; not leading");
                            false
                        }
                    },
                };
                let was = self
                    .leader
                    .swap(leading, std::sync::atomic::Ordering::Relaxed);
                if leading != was {
                    tracing::info!(leading, "maintenance leadership changed");
                }
                if !leading {
                    continue;
                }
                // A panic in a cycle (outside an operation, which catches its own) is logged
                // and the loop goes on at the next tick.
                let cycle = self.run_cycle(false, None, &|line| {
                    tracing::info!(progress = line, "maintenance")
                });
                match std::panic::AssertUnwindSafe(cycle).catch_unwind().await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "maintenance cycle failed"),
                    Err(panic) => tracing::error!(
                        panic = %crate::operate::panic_message(panic.as_ref()),
                        "maintenance cycle panicked; the loop goes on"
                    ),
                }
            }
            // Hand over at once rather than after the lease time.
            if let Some(state) = self.shared.get()
                && self.is_leader()
            {
                let _ = state.release(crate::state::LEADER).await;
            }
        })
    }
}

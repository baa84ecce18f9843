//! The maintainer: assesses tables (health from metadata + heat from telemetry), plans a
//! cycle, runs its operations one table at a time and logs each. `lakegate serve` runs it on
//! a timer ([`Maintainer::spawn`]); `lakegate maintenance plan|run --once` calls it directly.
//! The cycle and the loop are in [`cycle`]; working with other gateways in [`shared`].

mod cycle;
mod shared;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::TryStreamExt;
use iceberg::TableIdent;
use iceberg::table::Table;
use lakegate_engines::Lake;
use lakegate_engines::lake::namespace_ident;
use tokio_util::sync::CancellationToken;

use crate::commit::Committer;
use crate::config::MaintenanceConfig;
use crate::error::{Error, Result};
use crate::health::{self, TableHealth};
use crate::inventory::{Inventory, ManifestCache};
use crate::oplog::{OperationKind, OperationLog, OperationRecord, OperationResult};
use crate::policy::Policy;
use crate::telemetry::{Event, Heat, TableHeatView, Telemetry, table_key};

/// Per-table scheduling state.
#[derive(Debug, Clone, Default)]
struct TableState {
    /// When the table was last maintained (ms), and its snapshot count since.
    last_run_ms: i64,
    last_orphans_ms: i64,
    /// The policy last recorded for it ([`Policy::summary`]; `None`: none seen yet).
    policy: Option<String>,
}

/// The loop's own service levels ([`Maintainer::slo`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Slo {
    /// Tables the last cycle looked at.
    pub tables: usize,
    /// Of which under maintenance (included, and not turned off by a policy).
    pub maintained: usize,
    /// Failed (or conflicting) operations among those of the last 24 hours.
    pub failure_ratio: f64,
    /// Tables with planned operations the loop has not run yet (budgets, cycle time, approval).
    pub backlog: usize,
    /// How long the longest-waiting of them has waited (seconds).
    pub oldest_wait_s: f64,
    /// Operations run in the last hour.
    pub operations_last_hour: usize,
    /// Commits to the tables in the last hour (as last assessed).
    pub commits_last_hour: u64,
}

/// Operation counters by (kind, result), for metrics.
#[derive(Debug, Default)]
pub struct OpCounters {
    /// (kind, result) → (count, total seconds).
    pub by_kind: Mutex<HashMap<(OperationKind, OperationResult), (u64, f64)>>,
    /// Cycles run.
    pub cycles: AtomicU64,
}

/// A table's assessment: health and what planning needs.
pub struct Assessment {
    /// The health.
    pub health: TableHealth,
    /// The table's effective policy (the settings its health and operations used).
    pub policy: Policy,
    pub(crate) table: Table,
    inventory: Option<Inventory>,
    expirable: usize,
}

impl Assessment {
    /// The table's live files at its current snapshot (`None`: no snapshot yet).
    pub(crate) fn inventory(&self) -> Option<&Inventory> {
        self.inventory.as_ref()
    }
}

/// The maintenance loop's state and operations.
pub struct Maintainer {
    lake: Arc<Lake>,
    committer: Committer,
    config: MaintenanceConfig,
    heat: Arc<Mutex<Heat>>,
    telemetry: Telemetry,
    log: Arc<OperationLog>,
    cache: ManifestCache,
    state: Mutex<HashMap<String, TableState>>,
    /// Snapshots queries are reading now (expiry keeps them).
    readers: Arc<crate::readers::Readers>,
    /// Operations held for an operator (manual mode, `approve` kinds).
    approvals: Arc<crate::approvals::Approvals>,
    /// (tables looked at, maintained) by the last cycle; tables waiting since (ms).
    coverage: Mutex<(usize, usize, HashMap<String, i64>)>,
    /// One cycle at a time (so never two operations on one table).
    cycle: tokio::sync::Mutex<()>,
    counters: OpCounters,
    last_health: Mutex<(Option<Instant>, Vec<TableHealth>)>,
    /// A background health refresh is running.
    refreshing: std::sync::atomic::AtomicBool,
    /// Set when the gateway shuts down: a cycle stops before its next operation.
    stopping: CancellationToken,
    /// The database shared with other gateways (`[state]`), if any.
    shared: std::sync::OnceLock<Arc<crate::state::SharedState>>,
    /// This gateway's loop holds the leader lease.
    leader: std::sync::atomic::AtomicBool,
    /// Where big compactions run (`executor = "spark"`).
    executor: std::sync::OnceLock<Arc<crate::executor::SparkExecutor>>,
    /// Score and data files per table over time (ms, score, files), for trends.
    trend: Mutex<HashMap<String, Trend>>,
}

/// One table's (ms since the epoch, score, data files) samples, oldest first.
type Trend = std::collections::VecDeque<(i64, f64, usize)>;

/// Trend samples kept per table.
const TREND_POINTS: usize = 240;

impl Maintainer {
    /// A maintainer for `lake` (telemetry starts flowing at once; the loop runs only when
    /// spawned).
    ///
    /// # Errors
    /// Bad settings, an unopenable log, an unreachable catalog store.
    pub async fn new(lake: Arc<Lake>, config: MaintenanceConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let committer = Committer::connect(lake.clone()).await?;
        let log = if config.log_path.is_empty() {
            OperationLog::new(config.log_capacity)
        } else {
            OperationLog::persistent(config.log_capacity, std::path::Path::new(&config.log_path))
                .map_err(|source| Error::Io {
                    path: config.log_path.clone(),
                    source,
                })?
        };
        let heat = Arc::new(Mutex::new(Heat::new(config.heat_half_life)));
        let (telemetry, rx) = Telemetry::channel(config.telemetry_capacity);
        tokio::spawn(crate::telemetry::drain(rx, heat.clone()));
        let state = tables_state(&log.all());
        Ok(Arc::new(Self {
            lake,
            committer,
            config,
            heat,
            telemetry,
            log: Arc::new(log),
            cache: ManifestCache::default(),
            state: Mutex::new(state),
            readers: Arc::default(),
            approvals: Arc::default(),
            coverage: Mutex::new((0, 0, HashMap::new())),
            cycle: tokio::sync::Mutex::new(()),
            counters: OpCounters::default(),
            last_health: Mutex::new((None, Vec::new())),
            trend: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            refreshing: std::sync::atomic::AtomicBool::new(false),
            shared: std::sync::OnceLock::new(),
            leader: std::sync::atomic::AtomicBool::new(false),
            executor: std::sync::OnceLock::new(),
        }))
    }

    /// The sender the query path uses.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Folds a past event in directly (history replay at start).
    pub fn replay(&self, event: &Event) {
        self.heat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(event);
    }

    /// The operations log.
    pub fn log(&self) -> &Arc<OperationLog> {
        &self.log
    }

    /// Operation counters.
    pub fn counters(&self) -> &OpCounters {
        &self.counters
    }

    /// The settings.
    pub fn config(&self) -> &MaintenanceConfig {
        &self.config
    }

    pub(crate) fn heat_view(&self, key: &str) -> TableHeatView {
        self.heat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .view(key)
    }

    /// Every table the catalog lists, as `(namespace, table)`.
    ///
    /// # Errors
    /// The catalog fails.
    pub async fn tables(&self) -> Result<Vec<(String, String)>> {
        let dir = self.lake.directory().await?;
        Ok(dir
            .schemas
            .into_iter()
            .flat_map(|(ns, tables)| tables.into_iter().map(move |t| (ns.clone(), t)))
            .collect())
    }

    /// Assesses one table now.
    ///
    /// # Errors
    /// Catalog and metadata errors.
    pub async fn assess(&self, namespace: &str, name: &str) -> Result<Assessment> {
        let ident = TableIdent::new(namespace_ident(namespace), name.to_string());
        let table = self.committer.load(&ident).await?;
        self.assess_loaded(table_key(namespace, name), table).await
    }

    /// Assesses `table` (already loaded) as `key`.
    async fn assess_loaded(&self, key: String, table: Table) -> Result<Assessment> {
        let policy = self.policy_of(&key, &table);
        let view = self.heat_view(&key);
        let inventory = match table.metadata().current_snapshot() {
            Some(s) => Some(Inventory::load(&table, s, &self.cache).await?),
            None => None,
        };
        let partition_heat = self.partition_heat(&table, inventory.as_ref(), &view).await;
        let sort = sort_columns(&table, &view);
        let expirable = crate::expire::expirable(
            &table,
            policy.config.keep_snapshots,
            policy.config.snapshot_min_age,
            &self.readers.of(&key),
            policy.config.max_consumer_lag,
        )
        .len();
        let health = health::assess(
            &key,
            &table,
            inventory.as_ref(),
            health::Signals {
                partition_heat: &partition_heat,
                table_heat: &view,
                sort_columns: sort,
                expirable,
            },
            &policy.config,
        );
        let mut health = health;
        for c in crate::expire::consumers(&table, policy.config.max_consumer_lag) {
            if c.holds && c.commits_behind > policy.config.keep_snapshots {
                health.reasons.push(format!(
                    "consumer {} is {:.0} s behind: {} snapshots kept for it",
                    c.name, c.lag_s, c.commits_behind
                ));
            } else if !c.holds {
                health.reasons.push(format!(
                    "consumer {} stalled {:.0} s behind (past max_consumer_lag): not waited for",
                    c.name, c.lag_s
                ));
            }
        }
        self.sample(&health);
        Ok(Assessment {
            health,
            policy,
            table,
            inventory,
            expirable,
        })
    }

    /// Every table's health (tables that fail to load are skipped and logged), eight
    /// tables at a time.
    pub async fn health(&self) -> Result<Vec<TableHealth>> {
        use futures::StreamExt;
        let tables = self.tables().await?;
        let assessed: Vec<_> = futures::stream::iter(tables)
            .map(|(ns, t)| async move {
                let r = self.assess(&ns, &t).await;
                (ns, t, r)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let mut out = Vec::new();
        for (ns, t, r) in assessed {
            match r {
                Ok(a) => out.push(a.health),
                Err(e) => tracing::warn!(table = %table_key(&ns, &t), error = %e, "not assessed"),
            }
        }
        out.sort_by(|a, b| a.score.total_cmp(&b.score).then(a.table.cmp(&b.table)));
        *self.last_health.lock().unwrap_or_else(|p| p.into_inner()) =
            (Some(Instant::now()), out.clone());
        Ok(out)
    }

    /// Every table's health for pollers (the console): the last assessment at once; when it
    /// is older than `max_age`, one refresh starts in the background (stale-while-revalidate),
    /// so thousands of tables never make a page wait. The first call assesses in place.
    ///
    /// # Errors
    /// Catalog errors listing tables (first call only).
    pub async fn health_within(
        self: &Arc<Self>,
        max_age: std::time::Duration,
    ) -> Result<Vec<TableHealth>> {
        let (at, cached) = {
            let last = self.last_health.lock().unwrap_or_else(|p| p.into_inner());
            (last.0, last.1.clone())
        };
        match at {
            None => self.health().await,
            Some(at) => {
                if at.elapsed() >= max_age && !self.refreshing.swap(true, Ordering::AcqRel) {
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Err(e) = me.health().await {
                            tracing::warn!(error = %e, "health refresh failed");
                        }
                        me.refreshing.store(false, Ordering::Release);
                    });
                }
                Ok(cached)
            }
        }
    }

    /// `ns.table`'s trend: (ms since the epoch, score, data files), oldest first.
    pub fn trend(&self, key: &str) -> Vec<(i64, f64, usize)> {
        self.trend
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default()
    }

    fn sample(&self, h: &TableHealth) {
        let now = chrono::Utc::now().timestamp_millis();
        let mut trend = self.trend.lock().unwrap_or_else(|p| p.into_inner());
        let t = trend.entry(h.table.clone()).or_default();
        if t.back().is_some_and(|(at, _, _)| now - at < 1000) {
            t.pop_back();
        }
        t.push_back((now, h.score, h.data_files));
        if t.len() > TREND_POINTS {
            t.pop_front();
        }
    }

    /// Heat per partition: each hot predicate's weight goes to the partitions its scan
    /// selects (Iceberg's own partition and metrics pruning at the current snapshot, mapped
    /// back to partitions through the inventory); reads without a predicate warm every
    /// partition.
    async fn partition_heat(
        &self,
        table: &Table,
        inventory: Option<&Inventory>,
        view: &TableHeatView,
    ) -> HashMap<(i32, String), f64> {
        let mut out: HashMap<(i32, String), f64> = HashMap::new();
        let (Some(snapshot), Some(inventory)) = (table.metadata().current_snapshot(), inventory)
        else {
            return out;
        };
        let by_path: HashMap<&str, (i32, &str)> = inventory
            .files
            .iter()
            .map(|f| (f.path(), (f.spec_id, f.partition.as_str())))
            .collect();
        for f in &inventory.files {
            out.entry((f.spec_id, f.partition.clone())).or_insert(0.0);
        }
        let mut spread = view.reads;
        for (predicate, weight) in view.predicates.iter().take(8) {
            let Ok(scan) = table
                .scan()
                .snapshot_id(snapshot.snapshot_id())
                .with_filter(predicate.clone())
                .build()
            else {
                continue;
            };
            let Ok(stream) = scan.plan_files().await else {
                continue;
            };
            let Ok(tasks) = stream.try_collect::<Vec<_>>().await else {
                continue;
            };
            let hit: std::collections::HashSet<(i32, &str)> = tasks
                .iter()
                .filter_map(|t| by_path.get(t.data_file_path.as_str()).copied())
                .collect();
            for (spec, label) in hit {
                *out.entry((spec, label.to_string())).or_default() += weight;
            }
            spread -= weight;
        }
        if spread > 0.0 {
            for v in out.values_mut() {
                *v += spread;
            }
        }
        out
    }

    fn due(
        &self,
        key: &str,
        table: &Table,
        config: &MaintenanceConfig,
        force: bool,
    ) -> (bool, bool) {
        if force {
            return (true, true);
        }
        let now = chrono::Utc::now().timestamp_millis();
        let (last_run_ms, last_orphans_ms) = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map_or((0, 0), |s| (s.last_run_ms, s.last_orphans_ms));
        let commits_since = table
            .metadata()
            .snapshots()
            .filter(|s| s.timestamp_ms() > last_run_ms)
            .count() as u64;
        let max_ms = config.max_interval.as_millis() as i64;
        let due = commits_since >= config.min_commits
            || (commits_since > 0 && now - last_run_ms >= max_ms);
        let orphans =
            now - last_orphans_ms >= max_ms.max(config.orphan_min_age.as_millis() as i64 / 4);
        (due, due && orphans)
    }

    /// `key`'s effective policy: `[maintenance]`, its rules, and the table's own properties.
    pub fn policy_of(&self, key: &str, table: &Table) -> Policy {
        let (ns, name) = key.rsplit_once('.').unwrap_or(("", key));
        crate::policy::resolve(&self.config, ns, name, table.metadata().properties())
    }

    /// `ns.table`'s effective policy, read now.
    ///
    /// # Errors
    /// Catalog errors loading the table.
    pub async fn policy(&self, namespace: &str, name: &str) -> Result<Policy> {
        let ident = TableIdent::new(namespace_ident(namespace), name.to_string());
        let table = self.committer.load(&ident).await?;
        Ok(self.policy_of(&table_key(namespace, name), &table))
    }

    /// Operations held for an operator.
    pub fn approvals(&self) -> &crate::approvals::Approvals {
        &self.approvals
    }

    /// The snapshots queries are reading now: the query path holds them, expiry keeps them.
    pub fn readers(&self) -> &Arc<crate::readers::Readers> {
        &self.readers
    }

    /// Every table's effective policy (tables that fail to load are skipped and logged).
    ///
    /// # Errors
    /// Catalog errors listing tables.
    pub async fn policies(&self) -> Result<Vec<(String, Policy)>> {
        let mut out = Vec::new();
        for (ns, t) in self.tables().await? {
            match self.policy(&ns, &t).await {
                Ok(p) => out.push((table_key(&ns, &t), p)),
                Err(e) => tracing::warn!(table = %table_key(&ns, &t), error = %e, "no policy"),
            }
        }
        Ok(out)
    }

    /// Every table's consumers (refs `consumer.<name>`) with their lag and whether they hold
    /// expiry back.
    ///
    /// # Errors
    /// Catalog errors listing tables.
    pub async fn consumers(&self) -> Result<Vec<(String, crate::expire::Consumer)>> {
        let mut out = Vec::new();
        for (ns, t) in self.tables().await? {
            let ident = TableIdent::new(namespace_ident(&ns), t.clone());
            let Ok(table) = self.committer.load(&ident).await else {
                continue;
            };
            let key = table_key(&ns, &t);
            let policy = self.policy_of(&key, &table);
            for c in crate::expire::consumers(&table, policy.config.max_consumer_lag) {
                out.push((key.clone(), c));
            }
        }
        Ok(out)
    }

    /// Records `key`'s policy in the operations log when it differs from the last one recorded
    /// (a table first seen at its defaults records nothing).
    fn note_policy(&self, key: &str, policy: &Policy) {
        let summary = policy.summary();
        let before = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let s = state.entry(key.to_string()).or_default();
            if s.policy.as_deref().unwrap_or("") == summary {
                s.policy.get_or_insert_with(String::new);
                return;
            }
            s.policy.replace(summary.clone()).unwrap_or_default()
        };
        let show = |s: &str| {
            if s.is_empty() {
                "defaults".to_string()
            } else {
                s.to_string()
            }
        };
        tracing::info!(table = key, policy = %show(&summary), "maintenance policy changed");
        self.log.push(OperationRecord::decision(
            key,
            OperationKind::PolicyChange,
            "",
            OperationResult::Ok,
            format!("was: {}", show(&before)),
            summary,
        ));
    }

    /// Counts a finished operation for metrics.
    pub(crate) fn count(&self, r: &OperationRecord) {
        let mut by = self
            .counters
            .by_kind
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let c = by.entry((r.kind, r.result)).or_default();
        c.0 += 1;
        c.1 += r.millis / 1000.0;
    }

    /// Commits to the catalog.
    pub(crate) fn committer(&self) -> &Committer {
        &self.committer
    }

    /// Parsed manifests, shared by operations.
    pub(crate) fn manifests(&self) -> &ManifestCache {
        &self.cache
    }

    /// The columns `namespace.table`'s queries filter on most (decayed heat): those at least
    /// `share` of the hottest, at most `max`, hottest first.
    pub fn hot_columns(&self, namespace: &str, table: &str, share: f64, max: usize) -> Vec<String> {
        let view = self.heat_view(&crate::telemetry::table_key(namespace, table));
        let top = view.columns.first().map_or(0.0, |c| c.1);
        view.columns
            .into_iter()
            .filter(|(_, w)| *w > 0.0 && *w >= top * share)
            .take(max)
            .map(|(c, _)| c)
            .collect()
    }

    /// The health computed last (by a cycle or [`Maintainer::health`]), for metrics.
    pub fn last_health(&self) -> Vec<TableHealth> {
        self.last_health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }
}

/// What the log says of each table: when it was last maintained, its orphans last removed, its
/// policy last recorded (so a restart, or a new leader, does not start from nothing).
fn tables_state(records: &[OperationRecord]) -> HashMap<String, TableState> {
    let mut state: HashMap<String, TableState> = HashMap::new();
    for r in records {
        let s = state.entry(r.table.clone()).or_default();
        if r.kind == OperationKind::PolicyChange {
            s.policy = Some(r.detail.clone());
            continue;
        }
        let ms = r.started_us / 1000;
        s.last_run_ms = s.last_run_ms.max(ms);
        if r.kind == OperationKind::RemoveOrphans {
            s.last_orphans_ms = s.last_orphans_ms.max(ms);
        }
    }
    state
}

/// The columns compaction sorts by: the table's most-filtered columns (at least half as hot
/// as the hottest, at most two) that exist in its schema; else its sort order's identity
/// columns.
pub fn sort_columns(table: &Table, view: &TableHeatView) -> Vec<String> {
    let schema = table.metadata().current_schema();
    let known = |c: &str| {
        schema
            .as_struct()
            .fields()
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(c))
            .map(|f| f.name.clone())
    };
    let top = view.columns.first().map(|c| c.1).unwrap_or(0.0);
    let hot: Vec<String> = view
        .columns
        .iter()
        .filter(|(_, w)| *w >= top * 0.5 && *w > 0.0)
        .filter_map(|(c, _)| known(c))
        .take(2)
        .collect();
    if !hot.is_empty() {
        return hot;
    }
    let order = table.metadata().default_sort_order();
    order
        .fields
        .iter()
        .filter(|f| f.transform == iceberg::spec::Transform::Identity)
        .filter_map(|f| schema.field_by_id(f.source_id).map(|n| n.name.clone()))
        .collect()
}

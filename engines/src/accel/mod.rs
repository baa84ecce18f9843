//! Exact acceleration of serving tables: the rows of each configured table at its current
//! snapshot, held in memory as Arrow with hash indexes on the columns it is looked up by.
//!
//! The `accelerated` engine (an embedded DataFusion whose tables are these copies, see
//! [`crate::datafusion_engine::DataFusionEngine::accelerated`]) answers a statement only when
//! every table it reads is held at exactly the snapshot the statement pinned; otherwise it
//! declines and the router moves on to an engine that reads the files. So an accelerated
//! answer is never stale: a commit makes the copy stale at once, the statements after it read
//! files until the refresher has read the commit's new files (a declined statement wakes it).
//!
//! - [`copy`] — one table's rows at one snapshot, built incrementally, and its indexes.
//! - [`scan`] — a copy as a statement's DataFusion table.
//!
//! Memory: every copy's batches and indexes count against `max_bytes`; a table that does not
//! fit is not held (its statements read files) and says so in [`Accelerator::tables`].

pub(crate) mod copy;
pub(crate) mod scan;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tracing::{Instrument, debug, info, warn};

use crate::engine::Pins;
use crate::lake::Lake;
use copy::{Built, TableCopy};

/// What to accelerate.
#[derive(Debug, Clone)]
pub struct Options {
    /// The tables held, as `(namespace, table)`; table `*`: every table of the namespace
    /// (listed again at every refresh).
    pub tables: Vec<(String, String)>,
    /// Memory all copies may hold (batches and indexes).
    pub max_bytes: u64,
    /// Columns to index beyond each table's identifier fields: `(namespace, table, column)`.
    pub index: Vec<(String, String, String)>,
    /// How often the tables' current snapshots are checked (a declined statement also wakes
    /// the refresher).
    pub refresh: Duration,
}

/// The table name that stands for every table of a namespace.
pub const ALL: &str = "*";

/// The columns the telemetry says a table is looked up by, hottest first.
pub type HotColumns = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

/// Where one accelerated table stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Not read yet.
    Loading,
    /// Held at `snapshot`.
    Held,
    /// The table has no snapshot (nothing to hold; its statements read nothing anyway).
    Empty,
    /// Its copy would need `needs` bytes, more than `max_bytes` leaves it.
    TooBig {
        /// Estimated bytes of the copy.
        needs: u64,
    },
    /// The last load failed.
    Failed(String),
}

/// One accelerated table, for metrics and `lakegate.acceleration`.
#[derive(Debug, Clone)]
pub struct TableState {
    /// `namespace.table`.
    pub table: String,
    /// Where it stands.
    pub status: Status,
    /// The snapshot held.
    pub snapshot_id: Option<i64>,
    /// Rows held.
    pub rows: u64,
    /// Bytes held (batches and indexes).
    pub bytes: u64,
    /// Data files held.
    pub files: u64,
    /// Indexed columns.
    pub indexed: Vec<String>,
    /// Copies built by reading every file.
    pub full_loads: u64,
    /// Copies built by reading only a commit's new files.
    pub incremental_loads: u64,
    /// How long the last copy took to build.
    pub last_load_ms: f64,
}

#[derive(Debug, Default)]
struct Slot {
    copy: Option<Arc<TableCopy>>,
    status: Option<Status>,
    /// The snapshot a `TooBig` or `Failed` status is about (not retried until it changes).
    tried: Option<i64>,
    full_loads: u64,
    incremental_loads: u64,
    last_load_ms: f64,
    /// Bytes per row of the last copy built (to skip reading a table that will not fit).
    bytes_per_row: Option<f64>,
}

/// Statements the accelerated engine passed on (the ones it took are counted by the router,
/// like every engine's).
#[derive(Debug, Default)]
pub struct Counters {
    /// Statements declined (a table not held, or not at the pinned snapshot).
    pub declined: AtomicU64,
}

/// The held copies and their refresher.
pub struct Accelerator {
    lake: Arc<Lake>,
    options: Options,
    hot: Option<HotColumns>,
    slots: Mutex<BTreeMap<(String, String), Slot>>,
    wake: Arc<tokio::sync::Notify>,
    counters: Counters,
}

impl std::fmt::Debug for Accelerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accelerator")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Accelerator {
    /// An accelerator of `options.tables` over `lake`; `hot` names the columns the telemetry
    /// says each table is looked up by (indexed beside the identifier fields). Nothing is
    /// read until [`Accelerator::spawn`].
    pub fn new(lake: Arc<Lake>, options: Options, hot: Option<HotColumns>) -> Arc<Self> {
        let slots = options
            .tables
            .iter()
            .filter(|(_, name)| name != ALL)
            .map(|t| (t.clone(), Slot::default()))
            .collect();
        Arc::new(Self {
            lake,
            options,
            hot,
            slots: Mutex::new(slots),
            wake: Arc::new(tokio::sync::Notify::new()),
            counters: Counters::default(),
        })
    }

    /// Starts the refresher: it loads every table now, then checks their snapshots every
    /// `refresh` (or when a declined statement wakes it), until the accelerator is dropped.
    pub fn spawn(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(this) = weak.upgrade() else { return };
                this.refresh().await;
                let wait = this.options.refresh;
                let wake = this.wake.clone();
                drop(this);
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = wake.notified() => {}
                }
            }
        });
    }

    /// Brings every table to its current snapshot (one at a time).
    pub async fn refresh(&self) {
        let tables = self.expand().await;
        for (schema, name) in &tables {
            let span = tracing::info_span!("accelerate", table = %format!("{schema}.{name}"));
            if let Err(e) = self
                .refresh_table(schema, name)
                .instrument(span.clone())
                .await
            {
                span.in_scope(|| {
                    warn!(error = %e, "acceleration: loading failed; statements read files");
                });
            }
        }
    }

    /// The configured tables, each `namespace.*` listed now; slots follow the listing (a
    /// dropped table's copy is let go).
    async fn expand(&self) -> Vec<(String, String)> {
        let mut tables: Vec<(String, String)> = self
            .options
            .tables
            .iter()
            .filter(|(_, name)| name != ALL)
            .cloned()
            .collect();
        let wildcards: Vec<&String> = self
            .options
            .tables
            .iter()
            .filter(|(_, name)| name == ALL)
            .map(|(ns, _)| ns)
            .collect();
        if wildcards.is_empty() {
            return tables;
        }
        let directory = match self.lake.directory().await {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "acceleration: listing the namespaces failed");
                let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
                return slots.keys().cloned().collect();
            }
        };
        for ns in wildcards {
            for name in directory.schemas.get(ns).into_iter().flatten() {
                tables.push((ns.clone(), name.clone()));
            }
        }
        tables.sort();
        tables.dedup();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|k, _| tables.contains(k));
        for t in &tables {
            slots.entry(t.clone()).or_default();
        }
        tables
    }

    async fn refresh_table(&self, schema: &str, name: &str) -> crate::error::Result<()> {
        let key = (schema.to_string(), name.to_string());
        let resolved = self.lake.resolve(schema, name).await;
        let resolved = match resolved {
            Ok(r) => r,
            Err(e) => {
                self.set(&key, |s| s.status = Some(Status::Failed(e.to_string())));
                return Err(e);
            }
        };
        let Some(snapshot_id) = resolved.snapshot_id else {
            self.set(&key, |s| {
                s.copy = None;
                s.status = Some(Status::Empty);
            });
            return Ok(());
        };
        let (previous, tried, per_row) =
            self.with(&key, |s| (s.copy.clone(), s.tried, s.bytes_per_row));
        if previous
            .as_ref()
            .is_some_and(|c| c.snapshot_id == snapshot_id)
            || tried == Some(snapshot_id)
        {
            return Ok(());
        }
        let budget = self.budget(&key);
        if let Some(needs) = estimate(per_row, &resolved.table, snapshot_id)
            && needs > budget
        {
            self.too_big(&key, snapshot_id, needs);
            return Ok(());
        }
        let indexed = self.indexed_columns(schema, name, &resolved.table);
        let started = Instant::now();
        let built = TableCopy::build(
            &self.lake,
            &resolved.table,
            snapshot_id,
            previous.as_deref(),
            &indexed,
        )
        .await;
        let (copy, how) = match built {
            Ok(b) => b,
            Err(e) => {
                self.set(&key, |s| {
                    s.copy = None;
                    s.tried = Some(snapshot_id);
                    s.status = Some(Status::Failed(e.to_string()));
                });
                return Err(e);
            }
        };
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        let per_row = (copy.rows > 0).then(|| copy.bytes as f64 / copy.rows as f64);
        self.set(&key, |s| s.bytes_per_row = per_row.or(s.bytes_per_row));
        if copy.bytes > budget {
            self.too_big(&key, snapshot_id, copy.bytes);
            return Ok(());
        }
        match how {
            Built::Full => info!(
                snapshot = snapshot_id,
                rows = copy.rows,
                bytes = copy.bytes,
                millis,
                "acceleration: table read"
            ),
            Built::Incremental { read, kept } => debug!(
                snapshot = snapshot_id,
                read, kept, millis, "acceleration: new files read"
            ),
        }
        let copy = Arc::new(copy);
        self.set(&key, |s| {
            s.copy = Some(copy);
            s.tried = None;
            s.status = Some(Status::Held);
            s.last_load_ms = millis;
            match how {
                Built::Full => s.full_loads += 1,
                Built::Incremental { .. } => s.incremental_loads += 1,
            }
        });
        Ok(())
    }

    fn too_big(&self, key: &(String, String), snapshot_id: i64, needs: u64) {
        warn!(
            needs,
            max_bytes = self.options.max_bytes,
            "acceleration: the table does not fit max_bytes; statements read files"
        );
        self.set(key, |s| {
            s.copy = None;
            s.tried = Some(snapshot_id);
            s.status = Some(Status::TooBig { needs });
        });
    }

    /// What `max_bytes` leaves for `key`'s copy beside the others.
    fn budget(&self, key: &(String, String)) -> u64 {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let others: u64 = slots
            .iter()
            .filter(|(k, _)| *k != key)
            .filter_map(|(_, s)| s.copy.as_ref().map(|c| c.bytes))
            .sum();
        self.options.max_bytes.saturating_sub(others)
    }

    /// The identifier fields, the configured columns and the hot ones, in that order.
    fn indexed_columns(
        &self,
        schema: &str,
        name: &str,
        table: &iceberg::table::Table,
    ) -> Vec<String> {
        let current = table.metadata().current_schema();
        let mut columns: Vec<String> = current
            .identifier_field_ids()
            .filter_map(|id| current.name_by_field_id(id).map(str::to_string))
            .collect();
        columns.extend(
            self.options
                .index
                .iter()
                .filter(|(s, t, _)| s == schema && t == name)
                .map(|(_, _, c)| c.clone()),
        );
        if let Some(hot) = &self.hot {
            columns.extend(hot(schema, name));
        }
        let mut seen = std::collections::HashSet::new();
        columns.retain(|c| seen.insert(c.clone()));
        columns
    }

    fn with<T>(&self, key: &(String, String), f: impl FnOnce(&Slot) -> T) -> T {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let empty = Slot::default();
        f(slots.get(key).unwrap_or(&empty))
    }

    fn set(&self, key: &(String, String), f: impl FnOnce(&mut Slot)) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get_mut(key) {
            f(slot);
        }
    }

    /// The copy of `schema.name` at `snapshot_id`, when held at exactly that snapshot.
    pub(crate) fn copy(
        &self,
        schema: &str,
        name: &str,
        snapshot_id: Option<i64>,
    ) -> Option<Arc<TableCopy>> {
        let key = (schema.to_string(), name.to_string());
        self.with(&key, |s| s.copy.clone())
            .filter(|c| Some(c.snapshot_id) == snapshot_id)
    }

    /// Why a statement reading `pins` (and, when `reads_system`, the catalog or lakegate's
    /// own tables) cannot be answered from the copies; `None`: it can. A statement pinned to
    /// a snapshot newer than the one held wakes the refresher.
    pub fn declines(&self, pins: &Pins, reads_system: bool) -> Option<String> {
        self.why_not(pins, reads_system)
    }

    /// Counts a declined statement (`lakegate_acceleration{stat="declined"}`).
    pub fn record_declined(&self) {
        self.counters.declined.fetch_add(1, Ordering::Relaxed);
    }

    fn why_not(&self, pins: &Pins, reads_system: bool) -> Option<String> {
        if reads_system {
            return Some("it reads the catalog or lakegate's tables".into());
        }
        if pins.is_empty() {
            return Some("it reads no lake table".into());
        }
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for ((schema, name), pinned) in pins.iter() {
            let Some(slot) = slots.get(&(schema.clone(), name.clone())) else {
                return Some(format!("{schema}.{name} is not accelerated"));
            };
            let held = slot.copy.as_ref().map(|c| c.snapshot_id);
            if held == pinned.snapshot_id && held.is_some() {
                continue;
            }
            if pinned.snapshot_id.is_some() && slot.tried != pinned.snapshot_id {
                self.wake.notify_one();
            }
            let status = match &slot.status {
                Some(Status::TooBig { needs }) => format!(
                    "it does not fit [acceleration] max_bytes ({} needed)",
                    crate::units::human_bytes(*needs)
                ),
                Some(Status::Failed(e)) => format!("loading it failed: {e}"),
                _ => "loading".to_string(),
            };
            return Some(match (held, pinned.snapshot_id) {
                (Some(h), Some(p)) => format!(
                    "{schema}.{name} is held at snapshot {h}, the statement reads {p} ({status})"
                ),
                (_, _) => format!("{schema}.{name} is not held ({status})"),
            });
        }
        None
    }

    /// Every accelerated table, as it stands.
    pub fn tables(&self) -> Vec<TableState> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .map(|((schema, name), s)| TableState {
                table: format!("{schema}.{name}"),
                status: s.status.clone().unwrap_or(Status::Loading),
                snapshot_id: s.copy.as_ref().map(|c| c.snapshot_id),
                rows: s.copy.as_ref().map_or(0, |c| c.rows),
                bytes: s.copy.as_ref().map_or(0, |c| c.bytes),
                files: s.copy.as_ref().map_or(0, |c| c.files.len() as u64),
                indexed: s
                    .copy
                    .as_ref()
                    .map(|c| c.indexed_columns())
                    .unwrap_or_default(),
                full_loads: s.full_loads,
                incremental_loads: s.incremental_loads,
                last_load_ms: s.last_load_ms,
            })
            .collect()
    }

    /// Statements declined.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The configured memory bound.
    pub fn max_bytes(&self) -> u64 {
        self.options.max_bytes
    }
}

/// The bytes a copy of `snapshot_id` would take, from the last copy's bytes per row and the
/// snapshot's row count (`None`: nothing to go by).
fn estimate(per_row: Option<f64>, table: &iceberg::table::Table, snapshot_id: i64) -> Option<u64> {
    let per_row = per_row?;
    let snapshot = table.metadata().snapshot_by_id(snapshot_id)?;
    let rows: u64 = snapshot
        .summary()
        .additional_properties
        .get("total-records")?
        .parse()
        .ok()?;
    Some((per_row * rows as f64) as u64)
}

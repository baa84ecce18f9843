//! The [`Engine`] trait: one query engine that reads the lake, and what each request carries.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::sql::sqlparser::ast::Statement;

use crate::error::Result;
use crate::lake::ResolvedTable;

/// The version of every lake table a statement reads, resolved once before it runs.
///
/// Every engine answers against exactly these versions, so an answer can be tagged (and cached)
/// with the snapshots it was computed from.
#[derive(Debug, Clone, Default)]
pub struct Pins {
    tables: BTreeMap<(String, String), ResolvedTable>,
}

impl Pins {
    /// Pins `table` under `schema.name`.
    pub fn insert(&mut self, schema: &str, name: &str, table: ResolvedTable) {
        self.tables
            .insert((schema.to_string(), name.to_string()), table);
    }

    /// The pinned version of `schema.name`, if any.
    pub fn get(&self, schema: &str, name: &str) -> Option<&ResolvedTable> {
        // A statement pins a few tables: found by comparing, not by allocating a key.
        self.tables
            .iter()
            .find(|((s, n), _)| s == schema && n == name)
            .map(|(_, table)| table)
    }

    /// Every pinned table with its `(schema, name)`.
    pub fn iter(&self) -> impl Iterator<Item = (&(String, String), &ResolvedTable)> {
        self.tables.iter()
    }

    /// Whether nothing is pinned.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

/// Whether `(namespace, table)` may be shown.
pub type TableFilter = std::sync::Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// Which lake tables a session may see in catalog listings (`pg_catalog`,
/// `information_schema`); `key` names the view (the user) so views can be cached.
#[derive(Clone)]
pub struct Visibility {
    /// A stable name for this view (e.g. the user).
    pub key: String,
    /// Whether `(namespace, table)` is visible.
    pub allows: TableFilter,
}

impl std::fmt::Debug for Visibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Visibility")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// Session settings an engine must honour (time zone, search path, who is asking).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The user the session authenticated as.
    pub user: String,
    /// The database the client connected to (`current_database()`, `pg_database`,
    /// `information_schema`'s catalog).
    pub database: String,
    /// Schemas searched for unqualified table names, first one is the default.
    pub search_path: Vec<String>,
    /// The session time zone (`TimeZone`), e.g. `UTC` or `Europe/Paris`.
    pub time_zone: String,
    /// Every setting by lower-case name, for `current_setting()`.
    pub values: Arc<BTreeMap<String, String>>,
    /// Tables catalog listings may show (`None`: all).
    pub visible: Option<Visibility>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            user: "lakegate".into(),
            database: "lakegate".into(),
            search_path: vec!["public".into()],
            time_zone: "UTC".into(),
            values: Arc::default(),
            visible: None,
        }
    }
}

impl Settings {
    /// The value of setting `name` (case-insensitive), if set.
    pub fn get(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "timezone" => Some(self.time_zone.clone()),
            "search_path" => Some(self.search_path.join(", ")),
            _ => self.values.get(&name).cloned(),
        }
    }

    /// The schema unqualified names resolve to.
    pub fn default_schema(&self) -> &str {
        self.search_path
            .first()
            .map(String::as_str)
            .unwrap_or("public")
    }
}

/// One statement for an engine to run.
#[derive(Debug, Clone, Copy)]
pub struct EngineRequest<'a> {
    /// The parsed statement (a query).
    pub statement: &'a Statement,
    /// Values for `$n` placeholders, when the client bound any.
    pub params: Option<&'a ParamValues>,
    /// The table versions to read.
    pub pins: &'a Pins,
    /// The session's settings.
    pub settings: &'a Settings,
    /// lakegate's own tables for this statement (`lakegate.<name>`: cache statistics, ...),
    /// materialised by the gateway; only the embedded engine serves them.
    pub system_tables: &'a [(String, arrow::record_batch::RecordBatch)],
    /// The result schema the planner (DataFusion) promised clients; every other engine casts
    /// its answer to it, so an answer is the same whichever engine computed it.
    pub promised: Option<&'a SchemaRef>,
    /// The statement reads `pg_catalog` or `information_schema` (the gateway's classifier
    /// said so): the embedded engine refreshes its listing of the lake's tables for it.
    pub lists_catalog: bool,
}

/// What a statement needs and returns, known before it runs.
#[derive(Debug, Clone)]
pub struct Described {
    /// The type of each `$n` placeholder, in order (`None` where it cannot be inferred).
    pub param_types: Vec<Option<DataType>>,
    /// The result's columns.
    pub schema: SchemaRef,
    /// The PostgreSQL behaviours it relies on that not every engine reproduces.
    pub features: crate::semantics::Features,
    /// What it is made of ([`crate::constructs`]): an engine answers only statements made of
    /// constructs verified on it. Shared: a description is cloned per statement.
    pub constructs: Arc<crate::constructs::Constructs>,
}

/// A statement started on an engine ([`Engine::start`]).
pub struct Started {
    /// Its result, batch by batch.
    pub stream: SendableRecordBatchStream,
    /// The part of the time to start it spent planning it with DataFusion in lakegate's process
    /// (SQL to an optimised plan; nearly nothing for a plan kept from an earlier run). The
    /// router leaves it out of what it learns of the engine: it is the same planner's work for
    /// every embedded candidate, and a statement planned once is not planned again, so counting
    /// it would rank an engine that happens to hold the statement's plan far ahead of one
    /// meeting it the first time. Zero for engines that plan elsewhere.
    pub planning: std::time::Duration,
}

/// A query engine that reads the lake.
///
/// Statements are described (parameter types, result schema) by the planner, DataFusion, and
/// every engine answers in exactly that schema.
///
/// Implementations must be cancel-safe: dropping the returned stream stops the query.
#[async_trait]
pub trait Engine: Debug + Send + Sync + 'static {
    /// The engine's name in config and routing rules (`datafusion`, `duckdb`, ...).
    fn name(&self) -> &str;

    /// Runs the statement and streams its result batch by batch.
    ///
    /// # Errors
    /// Planning and execution errors; errors met later arrive in the stream.
    async fn execute(&self, request: EngineRequest<'_>) -> Result<SendableRecordBatchStream>;

    /// [`Engine::execute`], saying how long planning took ([`Started::planning`]).
    ///
    /// # Errors
    /// As [`Engine::execute`].
    async fn start(&self, request: EngineRequest<'_>) -> Result<Started> {
        Ok(Started {
            stream: self.execute(request).await?,
            planning: std::time::Duration::ZERO,
        })
    }

    /// Whether the engine is set up: `false` while its first statement would also open it
    /// (DuckDB is opened lazily), so that statement's time says nothing about the engine's
    /// speed and the router does not learn from it.
    fn ready(&self) -> bool {
        true
    }

    /// The PostgreSQL behaviours this engine does not reproduce exactly: a statement relying
    /// on one is refused here (and answered by another engine) rather than answered
    /// differently.
    fn inexact(&self) -> &'static [crate::semantics::Feature] {
        &[]
    }

    /// The constructs ([`crate::constructs`]) the differential suite verified this engine
    /// answers as PostgreSQL does; a statement made of anything else is refused here. `None`:
    /// every construct (the planner, which answers what no other engine may).
    fn verified(&self) -> Option<&'static [&'static str]> {
        None
    }

    /// Whether a statement relying on `feature` is refused here for a session with
    /// `settings`: by default, when it is one of [`Engine::inexact`]'s.
    fn refuses(&self, feature: crate::semantics::Feature, settings: &Settings) -> bool {
        let _ = settings;
        self.inexact().contains(&feature)
    }

    /// Why this engine does not take a statement reading `pins` (and, when `reads_system`, the
    /// catalog or lakegate's own tables); `None`: it may. Checked before anything runs, so
    /// routing moves on at no cost.
    fn declines(&self, pins: &Pins, reads_system: bool) -> Option<String> {
        let _ = (pins, reads_system);
        None
    }

    /// Counts a statement this engine declined and routing passed on (not one only
    /// explained).
    fn record_declined(&self) {}

    /// Whether the engine can take queries now.
    ///
    /// # Errors
    /// When it cannot.
    async fn health(&self) -> Result<()> {
        Ok(())
    }
}

/// A shared engine.
pub type EngineRef = Arc<dyn Engine>;

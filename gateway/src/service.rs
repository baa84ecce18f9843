//! The protocol-neutral query service every frontend calls: parse → classify → resolve the
//! tables' current versions (pins) → execute on an engine → Arrow batches back.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{
    CloseCursor, Expr, FetchDirection, Reset, Set, Statement, Value,
};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::StreamExt;
use lakegate_engines::datafusion_engine::DataFusionEngine;
use lakegate_engines::engine::Described;
use lakegate_engines::lake::estimate;
use lakegate_engines::{Engine, EngineRef, EngineRequest, Lake, Pins, Settings};
use lakegate_maintenance::Maintainer;
use lakegate_maintenance::telemetry::Observation;
use sync_wrapper::SyncWrapper;
use tracing::{debug, instrument, warn};

use crate::cache::{CacheConfig, CachedResult, ResultCache, Uncached};
use crate::classify::{self, StatementKind};
use crate::error::{Error, Result};
use crate::history::{PendingQuery, QueryHistory};
use crate::output_names;
use crate::profile::{QueryProfile, Shape};
use crate::routing::admission::Slot;
use crate::routing::rules::Asker;
use crate::routing::{Decision, Router};
use crate::session::{Cursor, Session};

/// What a statement produced.
pub enum QueryOutput {
    /// Rows, streamed. `tag` is the command tag verb (`SELECT`, `FETCH`, `SHOW`).
    Rows {
        /// The result.
        stream: SendableRecordBatchStream,
        /// Command tag verb.
        tag: &'static str,
    },
    /// A command without rows.
    Command(Command),
}

/// A completed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The command tag (`SET`, `BEGIN`, `DECLARE CURSOR`, ...).
    pub tag: String,
    /// What it did to the transaction state.
    pub transaction: TransactionEffect,
    /// A setting that changed and should be reported to the client (name, value).
    pub changed_setting: Option<(String, String)>,
}

/// How a command moves the transaction state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionEffect {
    /// None.
    None,
    /// `BEGIN`.
    Begin,
    /// `COMMIT` / `ROLLBACK`.
    End,
}

impl Command {
    fn new(tag: impl Into<String>) -> Self {
        Self {
            tag: tag.into(),
            transaction: TransactionEffect::None,
            changed_setting: None,
        }
    }
}

/// The engines a gateway runs queries on.
pub struct Engines {
    /// DataFusion: describes every statement, answers the catalog and `lakegate.*` tables.
    pub planner: Arc<DataFusionEngine>,
    /// Every engine by name, the planner included, in configuration order.
    pub all: Vec<EngineRef>,
    /// The engine for queries nobody pinned (until the router chooses per query).
    pub default: String,
}

impl Engines {
    /// Only the embedded DataFusion engine.
    pub fn planner_only(planner: Arc<DataFusionEngine>) -> Self {
        Self {
            all: vec![planner.clone() as EngineRef],
            default: planner.name().to_string(),
            planner,
        }
    }

    /// The engine named `name`.
    ///
    /// # Errors
    /// [`Error::EngineNotConfigured`] naming the ones that are.
    pub fn get(&self, name: &str) -> Result<&EngineRef> {
        self.all
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| Error::EngineNotConfigured {
                name: name.to_string(),
                available: self.names().join(", "),
            })
    }

    /// The names of the configured engines.
    pub fn names(&self) -> Vec<&str> {
        self.all.iter().map(|e| e.name()).collect()
    }
}

/// A statement's table versions and the system tables it reads.
struct Resolved {
    pins: Pins,
    system_tables: Vec<(String, RecordBatch)>,
    /// It reads `pg_catalog` / `information_schema`.
    catalog: bool,
}

/// Who may connect and what they may read.
pub struct Security {
    /// Authentication.
    pub auth: Arc<crate::auth::Auth>,
    /// Access rules.
    pub access: crate::access::Access,
    /// Column masks.
    pub masks: crate::mask::Masks,
    /// `[limits] max_result_bytes` (0: none).
    pub max_result_bytes: u64,
    /// `[limits] max_call_nesting`.
    pub max_call_nesting: usize,
}

/// The gateway's query pipeline.
pub struct GatewayService {
    lake: Arc<Lake>,
    engines: Engines,
    parser: PostgresCompatibilityParser,
    cache: ResultCache,
    /// Descriptions by (statement, table versions, settings): a repeated Parse of an unchanged
    /// query (every pgbench/JDBC execution) skips planning.
    described: moka::future::Cache<u64, Described>,
    history: Arc<QueryHistory>,
    router: Arc<Router>,
    /// Pruned scan estimates by (metadata location, predicate): planning files is per table
    /// version and filter, not per execution.
    estimates: moka::future::Cache<String, u64>,
    /// The maintenance loop (health, heat, operations).
    maintainer: Arc<Maintainer>,
    /// Who may connect.
    auth: Arc<crate::auth::Auth>,
    /// Who may read what.
    access: crate::access::Access,
    masks: crate::mask::Masks,
    max_result_bytes: u64,
    max_call_nesting: usize,
}

/// A query's route: its versions, profile, the router's decision and the engines to try.
struct Routed {
    resolved: Resolved,
    profile: QueryProfile,
    decision: Decision,
    /// Engines in the order to try them.
    engines: Vec<EngineRef>,
    /// Why this list: `routed`, `pinned` (lakegate.engine) or `planner` (catalog/constants).
    how: &'static str,
    /// The statement with this user's masked columns hashed (`None`: nothing it reads is
    /// masked); what engines run and the cache keys.
    masked: Option<Statement>,
}

impl Routed {
    fn bytes(&self) -> u64 {
        self.profile.scan_bytes.unwrap_or(0)
    }
}

impl GatewayService {
    /// A service over `lake`, executing on `engines` as `router` decides, caching results per
    /// `cache`.
    pub fn new(
        lake: Arc<Lake>,
        engines: Engines,
        cache: CacheConfig,
        router: Arc<Router>,
        history: Arc<QueryHistory>,
        maintainer: Arc<Maintainer>,
        security: Security,
    ) -> Self {
        Self {
            lake,
            engines,
            parser: PostgresCompatibilityParser::new(),
            cache: ResultCache::new(cache),
            described: moka::future::Cache::new(10_000),
            history,
            router,
            estimates: moka::future::Cache::new(10_000),
            maintainer,
            auth: security.auth,
            access: security.access,
            masks: security.masks,
            max_result_bytes: security.max_result_bytes,
            max_call_nesting: security.max_call_nesting,
        }
    }

    /// Who may connect.
    pub fn auth(&self) -> &Arc<crate::auth::Auth> {
        &self.auth
    }

    /// The session's engine settings, with the catalog view its access rules allow.
    fn engine_settings(&self, session: &Session) -> Settings {
        let mut settings = session.engine_settings();
        if self.access.enabled() {
            let user = session.user().to_string();
            let roles = self.auth.roles(&user);
            let access = self.access.clone();
            let key = format!("{user}\u{0}{}", roles.join(","));
            settings.visible = Some(lakegate_engines::engine::Visibility {
                key,
                allows: Arc::new(move |ns, t| access.may_read(&user, &roles, ns, t)),
            });
        }
        settings
    }

    /// The maintenance loop.
    pub fn maintainer(&self) -> &Arc<Maintainer> {
        &self.maintainer
    }

    /// What a routed query reads, for the maintenance loop's heat: its tables and columns,
    /// and (one table) its WHERE as an Iceberg predicate on that table's schema.
    fn observation(
        &self,
        statement: &Statement,
        routed: &Routed,
        params: Option<&ParamValues>,
    ) -> Option<Observation> {
        let p = &routed.profile;
        if p.tables.is_empty() {
            return None;
        }
        let mut pins = routed.resolved.pins.iter();
        let predicate = match (pins.next(), pins.next()) {
            (Some((_, table)), None) => crate::profile::top_where(statement).and_then(|w| {
                let bound = crate::profile::bind_parameters(w, params);
                estimate::predicate(&bound, table.table.metadata().current_schema())
            }),
            _ => None,
        };
        Some(Observation {
            tables: p.tables.clone(),
            predicate,
            filter_columns: p.filter_columns.clone(),
            join_columns: p.join_columns.clone(),
            group_columns: p.group_columns.clone(),
        })
    }

    /// Rebuilds query heat from the kept history (tables and columns; predicates need the
    /// tables' schemas and start again with live traffic). Returns the queries replayed.
    pub fn replay_history(&self) -> usize {
        let mut n = 0;
        for record in self.history.all() {
            if record.error.is_some() || record.snapshots.is_empty() {
                continue;
            }
            let Ok(statements) = self.parse(&record.sql) else {
                continue;
            };
            for statement in statements {
                let Ok(refs) = classify::references(&statement, "public") else {
                    continue;
                };
                let profile = QueryProfile::of(&statement, &StatementKind::Query, &refs);
                if profile.tables.is_empty() {
                    continue;
                }
                self.maintainer
                    .replay(&lakegate_maintenance::telemetry::Event {
                        observation: Observation {
                            tables: profile.tables,
                            predicate: None,
                            filter_columns: profile.filter_columns,
                            join_columns: profile.join_columns,
                            group_columns: profile.group_columns,
                        },
                        millis: record.millis,
                        at: record.started_us as f64 / 1e6,
                    });
                n += 1;
            }
        }
        n
    }

    /// The router.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The query history.
    pub fn history(&self) -> &Arc<QueryHistory> {
        &self.history
    }

    /// The lake.
    pub fn lake(&self) -> &Arc<Lake> {
        &self.lake
    }

    /// Every engine's health, checked now (at most 5 s): (engine, error if unhealthy, ms).
    pub async fn engine_health(&self) -> Vec<(String, Option<String>, f64)> {
        let checks = self.engines.all.iter().map(|e| async move {
            let started = std::time::Instant::now();
            let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), e.health()).await;
            let error = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err.to_string()),
                Err(_) => Some("no answer within 5 s".to_string()),
            };
            (
                e.name().to_string(),
                error,
                started.elapsed().as_secs_f64() * 1000.0,
            )
        });
        futures::future::join_all(checks).await
    }

    /// The engines.
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    /// The result cache.
    pub fn cache(&self) -> &ResultCache {
        &self.cache
    }

    /// Materialises the `lakegate.<name>` tables a statement reads.
    async fn system_tables(
        &self,
        names: &[String],
        user: &str,
    ) -> Result<Vec<(String, RecordBatch)>> {
        // With access rules, `lakegate.queries` shows a user its own queries unless it has
        // the `admin` role.
        let own = (self.access.enabled() && !self.auth.roles(user).iter().any(|r| r == "admin"))
            .then_some(user);
        let mut out = Vec::new();
        for name in names.iter().cloned() {
            let batch = match name.as_str() {
                "cache_stats" => self.cache.stats_batch(self.lake.token_stats()).await,
                "queries" => self.history.batch_for(own),
                "engines" => self.engines_batch().await,
                "routing" => self.routing_batch(),
                "table_health" => {
                    crate::maintenance_tables::health_batch(&self.maintainer.health().await?)
                }
                "table_partitions" => {
                    crate::maintenance_tables::partitions_batch(&self.maintainer.health().await?)
                }
                "operations" => {
                    crate::maintenance_tables::operations_batch(&self.maintainer.log().all())
                }
                _ => return Err(Error::UnknownSystemTable { name }),
            };
            out.push((name, batch));
        }
        Ok(out)
    }

    /// `lakegate.routing`: what the router observed per (engine, shape, size bucket), with each
    /// engine's breaker.
    fn routing_batch(&self) -> RecordBatch {
        let observed = self.router.stats.snapshot();
        let schema = Arc::new(Schema::new(vec![
            Field::new("engine", DataType::Utf8, false),
            Field::new("shape", DataType::Utf8, false),
            Field::new("size_bucket", DataType::Utf8, false),
            Field::new("queries", DataType::Int64, false),
            Field::new("ewma_ms", DataType::Float64, false),
            Field::new("p50_ms", DataType::Float64, true),
            Field::new("p95_ms", DataType::Float64, true),
            Field::new("success_rate", DataType::Float64, false),
            Field::new("breaker", DataType::Utf8, false),
        ]));
        let breaker = |e: &str| match self.router.stats.breaker(e) {
            crate::routing::stats::Breaker::Closed => "closed",
            crate::routing::stats::Breaker::Open { .. } => "open",
            crate::routing::stats::Breaker::HalfOpen { .. } => "half-open",
        };
        let columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                observed.iter().map(|o| o.0.0.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                observed.iter().map(|o| o.0.1.name()),
            )),
            Arc::new(StringArray::from_iter_values(
                observed
                    .iter()
                    .map(|o| crate::routing::stats::bucket_name(o.0.2)),
            )),
            Arc::new(arrow::array::Int64Array::from_iter_values(
                observed.iter().map(|o| o.1.count as i64),
            )),
            Arc::new(arrow::array::Float64Array::from_iter_values(
                observed.iter().map(|o| o.1.ewma_ms),
            )),
            Arc::new(arrow::array::Float64Array::from_iter(
                observed.iter().map(|o| o.1.quantile(0.5)),
            )),
            Arc::new(arrow::array::Float64Array::from_iter(
                observed.iter().map(|o| o.1.quantile(0.95)),
            )),
            Arc::new(arrow::array::Float64Array::from_iter_values(
                observed.iter().map(|o| o.1.success),
            )),
            Arc::new(StringArray::from_iter_values(
                observed.iter().map(|o| breaker(&o.0.0)),
            )),
        ];
        RecordBatch::try_new(schema.clone(), columns)
            .unwrap_or_else(|_| RecordBatch::new_empty(schema))
    }

    /// `lakegate.engines`: each engine, whether it answers now (checked concurrently, 5 s at
    /// most), and which one is the default.
    async fn engines_batch(&self) -> RecordBatch {
        let results = self.engine_health().await;
        let schema = Arc::new(Schema::new(vec![
            Field::new("engine", DataType::Utf8, false),
            Field::new("healthy", DataType::Boolean, false),
            Field::new("is_default", DataType::Boolean, false),
            Field::new("check_ms", DataType::Float64, false),
            Field::new("error", DataType::Utf8, true),
        ]));
        let columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                results.iter().map(|r| r.0.as_str()),
            )),
            Arc::new(arrow::array::BooleanArray::from_iter(
                results.iter().map(|r| Some(r.1.is_none())),
            )),
            Arc::new(arrow::array::BooleanArray::from_iter(
                results.iter().map(|r| Some(r.0 == self.engines.default)),
            )),
            Arc::new(arrow::array::Float64Array::from_iter_values(
                results.iter().map(|r| r.2),
            )),
            Arc::new(StringArray::from_iter(results.iter().map(|r| r.1.clone()))),
        ];
        RecordBatch::try_new(schema.clone(), columns)
            .unwrap_or_else(|_| RecordBatch::new_empty(schema))
    }

    /// Parses SQL text (PostgreSQL dialect, with rewrites for what BI tools send).
    ///
    /// # Errors
    /// [`Error::Syntax`].
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        if let Some(depth) = lakegate_sql::nesting::call_depth(sql)
            && depth > self.max_call_nesting
        {
            return Err(Error::TooComplex {
                depth,
                limit: self.max_call_nesting,
            });
        }
        let sql = explain_route_syntax(sql);
        let mut statements = self.parser.parse(&sql).map_err(|e| Error::Syntax {
            message: syntax_message(&e.to_string()),
        })?;
        statements.iter_mut().for_each(rewrite_catalog_types);
        statements.iter_mut().for_each(rename_recursive_cte_columns);
        Ok(statements)
    }

    /// Every namespace and table in the lake, as of now (for metadata APIs).
    ///
    /// # Errors
    /// When the catalog fails.
    pub async fn directory(&self) -> Result<lakegate_engines::lake::Directory> {
        Ok(self.lake.directory().await?)
    }

    /// The namespaces and tables `user` may read (all of them without access rules).
    ///
    /// # Errors
    /// When the catalog fails.
    pub async fn directory_for(&self, user: &str) -> Result<lakegate_engines::lake::Directory> {
        let directory = self.lake.directory().await?;
        if !self.access.enabled() {
            return Ok(directory);
        }
        let roles = self.auth.roles(user);
        Ok(directory.filtered(|ns, t| self.access.may_read(user, &roles, ns, t)))
    }

    /// The current Arrow schema of `schema.table`.
    ///
    /// # Errors
    /// Unknown table, catalog failures.
    pub async fn table_schema(&self, schema: &str, table: &str) -> Result<SchemaRef> {
        Ok(self.lake.resolve(schema, table).await?.schema)
    }

    /// Resolves every lake table the statement reads to its current version, and materialises
    /// the system tables it reads.
    async fn resolve(&self, statement: &Statement, settings: &Settings) -> Result<Resolved> {
        let refs = classify::references(statement, settings.default_schema())?;
        self.resolve_refs(&refs, std::time::Duration::ZERO, &settings.user)
            .await
    }

    /// Resolves `refs`, reusing versions younger than `max_staleness` (zero: the lake's
    /// configured staleness).
    async fn resolve_refs(
        &self,
        refs: &classify::References,
        max_staleness: std::time::Duration,
        user: &str,
    ) -> Result<Resolved> {
        let mut pins = Pins::default();
        for (schema, table) in &refs.lake {
            let resolved = if max_staleness.is_zero() {
                self.lake.resolve(schema, table).await?
            } else {
                self.lake
                    .resolve_within(schema, table, max_staleness)
                    .await?
            };
            pins.insert(schema, table, resolved);
        }
        Ok(Resolved {
            pins,
            system_tables: self.system_tables(&refs.system, user).await?,
            catalog: refs.catalog,
        })
    }

    /// The planner's description of an (output-aliased) statement at these versions; cached,
    /// so a repeated Parse, or a query another engine answers, skips planning.
    async fn plan_description(
        &self,
        statement: &Statement,
        resolved: &Resolved,
        settings: &Settings,
    ) -> Result<Described> {
        let key = resolved
            .system_tables
            .is_empty()
            .then(|| ResultCache::key(statement, None, &resolved.pins, settings));
        if let Some(k) = key
            && let Some(hit) = self.described.get(&k).await
        {
            return Ok(hit);
        }
        let request = EngineRequest {
            statement,
            params: None,
            pins: &resolved.pins,
            settings,
            system_tables: &resolved.system_tables,
            promised: None,
            lists_catalog: resolved.catalog,
        };
        let described = self.engines.planner.describe(request).await?;
        if let Some(k) = key {
            self.described.insert(k, described.clone()).await;
        }
        Ok(described)
    }

    /// Profiles a query, lets the router pick its group, resolves its tables (within the
    /// group's staleness) and orders the engines to try: the planner alone for statements that
    /// read no lake table or read the catalog / `lakegate.*`; the session's pinned engine; else
    /// the group's candidates by expected latency.
    async fn route(
        &self,
        statement: &Statement,
        settings: &Settings,
        session: &Session,
    ) -> Result<Routed> {
        let refs = classify::references(statement, settings.default_schema())?;
        let mut profile = QueryProfile::of(statement, &StatementKind::Query, &refs);
        // Rules see the size of the versions last resolved (no catalog round trip yet).
        profile.scan_bytes = Some(
            refs.lake
                .iter()
                .filter_map(|(s, t)| self.lake.peek(s, t))
                .map(|t| estimate::total_bytes(&t))
                .sum(),
        );
        let asker = Asker {
            user: session.user(),
            application: session.application_name(),
            tag: session.tag(),
        };
        let (rule, reason, group) = self
            .router
            .group(&asker, &profile, session.pinned_group())?;
        // Before any catalog lookup, engine or cache: 42501 for what this user may not read.
        if !refs.lake.is_empty() {
            let user = session.user();
            self.access
                .check(user, &self.auth.roles(user), &refs.lake, Some(&group.name))?;
        }
        let resolved = self
            .resolve_refs(&refs, group.max_staleness, session.user())
            .await?;
        let masks = self.masks_of(session.user());
        let masked =
            self.masks
                .apply(statement, &masks, &resolved.pins, settings.default_schema())?;
        profile.scan_bytes = Some(
            self.scan_estimate(statement, &resolved.pins, group.max_scan_bytes, &masks)
                .await,
        );
        let estimate = profile.scan_bytes.unwrap_or(0);
        if group.max_scan_bytes > 0 && estimate > group.max_scan_bytes {
            return Err(Error::Guardrail {
                what: format!(
                    "estimated scan of {} exceeds routing group \"{}\"'s max_scan_bytes ({}): \
                     filter on partition or sorted columns to read less",
                    lakegate_maintenance::maintainer::human_bytes(estimate),
                    group.name,
                    lakegate_maintenance::maintainer::human_bytes(group.max_scan_bytes)
                ),
            });
        }
        // Candidates are ordered once, at the final scan estimate.
        let (candidates, explored) =
            self.router
                .order(&group, profile.shape, profile.scan_bytes.unwrap_or(0));
        let decision = Decision {
            rule,
            reason,
            group,
            candidates,
            explored,
        };
        let planner_only =
            resolved.pins.is_empty() || resolved.catalog || !resolved.system_tables.is_empty();
        let (engines, how) = if planner_only {
            (vec![self.engines.planner.clone() as EngineRef], "planner")
        } else if let Some(name) = session.pinned_engine() {
            (vec![self.engines.get(name)?.clone()], "pinned")
        } else {
            let engines = decision
                .candidates
                .iter()
                .filter_map(|c| self.engines.get(&c.engine).ok().cloned())
                .collect();
            (engines, "routed")
        };
        Ok(Routed {
            resolved,
            profile,
            decision,
            engines,
            how,
            masked,
        })
    }

    /// The columns `user` sees hashed.
    fn masks_of(&self, user: &str) -> crate::mask::Masked {
        self.masks.for_user(user, &self.auth.roles(user))
    }

    /// The bytes a query scans: the pinned snapshots' data files, pruned by the WHERE of a
    /// single-table query when that can matter for routing (tables past the smallest size
    /// bucket; cached per table version and filter; planning is capped at 50 ms, else the
    /// unpruned size stands).
    ///
    /// Masked columns are left out of the pruning: a clear value the user cannot see must not
    /// change what the estimate (and a guardrail's message) says.
    async fn scan_estimate(
        &self,
        statement: &Statement,
        pins: &Pins,
        cap: u64,
        masks: &crate::mask::Masked,
    ) -> u64 {
        let total: u64 = pins.iter().map(|(_, t)| estimate::total_bytes(t)).sum();
        let mut tables = pins.iter();
        let (Some(((ns, name), table)), None) = (tables.next(), tables.next()) else {
            return total;
        };
        // Small tables cannot change the size bucket; prune them only against a scan cap.
        if crate::routing::stats::size_bucket(total) == 0 && (cap == 0 || total <= cap) {
            return total;
        }
        let schema = table.table.metadata().current_schema();
        let visible = match crate::mask::hidden(masks, ns, name) {
            Some(hidden) => match crate::mask::without(schema, hidden) {
                Some(visible) => Some(visible),
                None => return total,
            },
            None => None,
        };
        let Some(filter) = crate::profile::top_where(statement)
            .and_then(|w| estimate::predicate(w, visible.as_ref().unwrap_or(schema)))
        else {
            return total;
        };
        let key = format!("{}\u{0}{filter}", table.metadata_location);
        if let Some(bytes) = self.estimates.get(&key).await {
            return bytes;
        }
        match tokio::time::timeout(
            std::time::Duration::from_millis(50),
            estimate::pruned_bytes(table, filter),
        )
        .await
        {
            Ok(Ok(bytes)) => {
                self.estimates.insert(key, bytes).await;
                bytes
            }
            _ => total,
        }
    }

    /// Runs a routed query: in the group's slots (lake queries), on the first engine that
    /// answers; an engine that fails for its own reasons (unreachable, internal) before the
    /// first batch is recorded and the next candidate tried. Returns the stream and the engine.
    async fn execute_routed(
        &self,
        routed: &Routed,
        statement: &Statement,
        params: Option<&ParamValues>,
        settings: &Settings,
        names: Option<&[String]>,
    ) -> Result<(SendableRecordBatchStream, String)> {
        let slot = if routed.how == "planner" {
            None
        } else {
            Some(
                self.router
                    .admission(&routed.decision.group)
                    .enter()
                    .await?,
            )
        };
        let shape = routed.profile.shape;
        let bytes = routed.bytes();
        let mut promised: Option<SchemaRef> = None;
        let mut last: Option<Error> = None;
        let count = routed.engines.len();
        for (i, engine) in routed.engines.iter().enumerate() {
            let name = engine.name().to_string();
            let is_planner = name == self.engines.planner.name();
            if routed.how == "routed" && i + 1 < count && !self.router.stats.admit(&name) {
                debug!(engine = %name, "breaker open: skipped");
                continue;
            }
            if !is_planner && promised.is_none() {
                promised = Some(
                    self.plan_description(statement, &routed.resolved, settings)
                        .await?
                        .schema,
                );
            }
            let request = EngineRequest {
                statement,
                params,
                pins: &routed.resolved.pins,
                settings,
                system_tables: &routed.resolved.system_tables,
                promised: if is_planner { None } else { promised.as_ref() },
                lists_catalog: routed.resolved.catalog,
            };
            let started = std::time::Instant::now();
            let outcome = match execute_on(engine, request, names).await {
                Ok(stream) => first_batch(stream).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(stream) => {
                    let tracked = track(
                        stream,
                        self.router.clone(),
                        name.clone(),
                        shape,
                        bytes,
                        started,
                        slot,
                    );
                    return Ok((tracked, name));
                }
                Err(e) if engine_fault(e.kind()) => {
                    self.router.record(&name, shape, bytes, None);
                    if routed.how == "routed" && i + 1 < count {
                        warn!(engine = %name, error = %e, "engine failed before answering: failing over");
                    }
                    last = Some(e);
                    if routed.how != "routed" {
                        break;
                    }
                }
                // The planner accepted this statement, so another engine refusing it is a gap
                // in that engine's SQL, not the client's mistake: let the next candidate try.
                Err(e) if routed.how == "routed" && !is_planner && i + 1 < count => {
                    debug!(engine = %name, error = %e, "engine refused a planned statement: next candidate");
                    last.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::Engine(lakegate_engines::Error::EngineUnavailable {
                engine: routed.decision.group.name.clone(),
                reason: "no engine of the group could take the query".into(),
            })
        }))
    }

    /// What a statement takes and returns, without running it (`None`: it returns no rows).
    ///
    /// # Errors
    /// Planning errors, refused statements.
    pub async fn describe(
        &self,
        statement: &Statement,
        session: &mut Session,
    ) -> Result<Option<Described>> {
        if explain_route_target(statement).is_some() {
            return Ok(Some(Described {
                param_types: vec![],
                schema: explain_route_schema(),
            }));
        }
        match classify::kind(statement) {
            StatementKind::Query => {
                let mut statement = statement.clone();
                let names = output_names::apply(&mut statement);
                let settings = self.engine_settings(session);
                let resolved = self.resolve(&statement, &settings).await?;
                let masked = self.masks.apply(
                    &statement,
                    &self.masks_of(session.user()),
                    &resolved.pins,
                    settings.default_schema(),
                )?;
                let mut described = self
                    .plan_description(masked.as_ref().unwrap_or(&statement), &resolved, &settings)
                    .await?;
                if let Some(names) = names {
                    described.schema = output_names::rename_schema(&described.schema, &names);
                }
                Ok(Some(described))
            }
            StatementKind::Session => match statement {
                Statement::ShowVariable { variable } => {
                    let name = show_name(variable);
                    Ok(Some(Described {
                        param_types: vec![],
                        schema: show_schema(&name),
                    }))
                }
                _ => Ok(None),
            },
            StatementKind::Cursor => match statement {
                Statement::Fetch { name, .. } => {
                    let schema = session.cursor(&name.value)?.schema.clone();
                    Ok(Some(Described {
                        param_types: vec![],
                        schema,
                    }))
                }
                _ => Ok(None),
            },
            StatementKind::Transaction => Ok(None),
            StatementKind::Write(verb) => Err(read_only(verb)),
            StatementKind::Other => Err(unsupported(statement)),
        }
    }

    /// Runs one statement for `session`.
    ///
    /// # Errors
    /// Any failure of parsing, resolution, planning or execution, as a gateway [`Error`].
    #[instrument(skip_all, fields(kind))]
    pub async fn execute(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &mut Session,
    ) -> Result<QueryOutput> {
        if let Some(target) = explain_route_target(statement) {
            return self.explain_route(target, session).await;
        }
        let kind = classify::kind(statement);
        tracing::Span::current().record("kind", tracing::field::debug(&kind));
        match kind {
            StatementKind::Query => {
                apply_set_config(statement, session)?;
                let stream = self.run_query(statement, params, session).await?;
                Ok(QueryOutput::Rows {
                    stream,
                    tag: "SELECT",
                })
            }
            StatementKind::Session => self.session_statement(statement, session),
            StatementKind::Transaction => {
                // Reads need no undo: savepoints are accepted and change nothing.
                let (tag, effect) = match statement {
                    Statement::StartTransaction { .. } => ("BEGIN", TransactionEffect::Begin),
                    Statement::Commit { .. } => ("COMMIT", TransactionEffect::End),
                    Statement::Savepoint { .. } => ("SAVEPOINT", TransactionEffect::None),
                    Statement::ReleaseSavepoint { .. } => ("RELEASE", TransactionEffect::None),
                    Statement::Rollback {
                        savepoint: Some(_), ..
                    } => ("ROLLBACK", TransactionEffect::None),
                    _ => ("ROLLBACK", TransactionEffect::End),
                };
                if effect == TransactionEffect::End {
                    session.end_transaction();
                }
                Ok(QueryOutput::Command(Command {
                    transaction: effect,
                    ..Command::new(tag)
                }))
            }
            StatementKind::Cursor => self.cursor_statement(statement, params, session).await,
            StatementKind::Write(verb) => Err(read_only(verb)),
            StatementKind::Other => Err(unsupported(statement)),
        }
    }

    async fn run_query(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &Session,
    ) -> Result<SendableRecordBatchStream> {
        let mut pending =
            self.history
                .start(session.user(), session.frontend(), &statement.to_string());
        match self
            .run_query_inner(statement, params, session, &mut pending)
            .await
        {
            Ok(stream) => Ok(pending.track(self.history.clone(), stream)),
            Err(e) => {
                pending.fail(&self.history, &e.to_string());
                Err(e)
            }
        }
    }

    async fn run_query_inner(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &Session,
        pending: &mut PendingQuery,
    ) -> Result<SendableRecordBatchStream> {
        let mut statement = statement.clone();
        let names = output_names::apply(&mut statement);
        let statement = &statement;
        let settings = self.engine_settings(session);
        let routed = self.route(statement, &settings, session).await?;
        let pins = &routed.resolved.pins;
        pending.record.snapshots = snapshot_list(pins, ",");
        pending.record.shape = routed.profile.shape.name();
        pending.record.scan_bytes = routed.bytes();
        pending.record.group = routed.decision.group.name.clone();
        pending.observation = self.observation(statement, &routed, params);
        let statement = routed.masked.as_ref().unwrap_or(statement);
        if self.cache.enabled()
            && routed.decision.group.cache
            && routed.resolved.system_tables.is_empty()
            && ResultCache::cacheable(statement, pins)
        {
            let key = ResultCache::key(statement, params, pins, &settings);
            let max = self.cache.max_entry_bytes();
            let ran_on = std::sync::Mutex::new(None::<String>);
            // When this caller computes a result too large to cache, what it already read and
            // the rest of the engine's stream: it answers from them instead of running again.
            let overflow = std::sync::Mutex::new(None::<SendableRecordBatchStream>);
            let computed = self
                .cache
                .get_or_compute(key, async {
                    let (stream, engine) = self
                        .execute_routed(&routed, statement, params, &settings, names.as_deref())
                        .await
                        .map_err(|e| Uncached::Failed(Arc::new(e)))?;
                    *ran_on.lock().unwrap_or_else(|p| p.into_inner()) = Some(engine);
                    collect_capped(stream, max, &overflow).await
                })
                .await;
            // A caller that waited on another's computation counts as a hit too.
            let ran_on = ran_on.into_inner().unwrap_or_else(|p| p.into_inner());
            let ran_here = ran_on.is_some();
            if let Some(engine) = ran_on {
                pending.record.engine = engine;
            }
            match computed {
                Ok(result) => {
                    pending.record.cache = if ran_here { "miss" } else { "hit" };
                    return Ok(guarded(
                        batches_stream(result.schema.clone(), result.batches.clone()),
                        &routed.decision.group,
                        self.max_result_bytes,
                    ));
                }
                Err(e) => match e.as_ref() {
                    Uncached::TooLarge => {
                        pending.record.cache = "too_large";
                        let rest = overflow.into_inner().unwrap_or_else(|p| p.into_inner());
                        if let Some(stream) = rest {
                            return Ok(guarded(
                                stream,
                                &routed.decision.group,
                                self.max_result_bytes,
                            ));
                        }
                        // Another caller computed it: run it here, streaming.
                    }
                    Uncached::Failed(err) => return Err(Error::Shared(err.clone())),
                },
            }
        } else {
            self.cache.bypass();
            pending.record.cache = if self.cache.enabled() {
                "bypass"
            } else {
                "off"
            };
        }
        let (stream, engine) = self
            .execute_routed(&routed, statement, params, &settings, names.as_deref())
            .await?;
        pending.record.engine = engine;
        Ok(guarded(
            stream,
            &routed.decision.group,
            self.max_result_bytes,
        ))
    }

    /// `EXPLAIN ROUTE <query>` (also `EXPLAIN (ROUTE) <query>`): the profile, the matched
    /// rule and group, the snapshots, each candidate's expected latency and the choice, as
    /// (item, value) rows. Nothing runs.
    async fn explain_route(&self, target: &Statement, session: &Session) -> Result<QueryOutput> {
        if classify::kind(target) != StatementKind::Query {
            return Err(Error::Unsupported {
                what: "EXPLAIN ROUTE of anything but a query".into(),
            });
        }
        let settings = self.engine_settings(session);
        let routed = self.route(target, &settings, session).await?;
        let p = &routed.profile;
        let d = &routed.decision;
        let g = &d.group;
        let tables = |v: &[(String, String)]| {
            v.iter()
                .map(|(s, t)| format!("{s}.{t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut rows: Vec<(String, String)> = vec![
            ("shape".into(), p.shape.name().into()),
            ("tables".into(), tables(&p.tables)),
            ("filter_columns".into(), p.filter_columns.join(", ")),
            ("join_columns".into(), p.join_columns.join(", ")),
            ("group_columns".into(), p.group_columns.join(", ")),
            (
                "limit".into(),
                p.limit.map(|l| l.to_string()).unwrap_or_default(),
            ),
            (
                "scan_bytes".into(),
                format!(
                    "{} ({})",
                    routed.bytes(),
                    crate::routing::stats::bucket_name(crate::routing::stats::size_bucket(
                        routed.bytes()
                    ))
                ),
            ),
            (
                "snapshots".into(),
                snapshot_list(&routed.resolved.pins, ", "),
            ),
            (
                "rule".into(),
                match &d.rule {
                    Some(r) => r.clone(),
                    None => format!("(none: {})", d.reason),
                },
            ),
            ("group".into(), g.name.clone()),
            (
                "group_limits".into(),
                format!(
                    "max_concurrent={} queue_length={} queue_timeout={:?} cache={} max_staleness={:?} explore={}",
                    g.max_concurrent,
                    g.queue_length,
                    g.queue_timeout,
                    g.cache,
                    g.max_staleness,
                    g.explore
                ),
            ),
        ];
        for (i, c) in d.candidates.iter().enumerate() {
            rows.push((
                format!("candidate {}", i + 1),
                format!(
                    "{} expected_ms={:.1} samples={} breaker={}",
                    c.engine, c.expected_ms, c.samples, c.breaker
                ),
            ));
        }
        let choice = match routed.how {
            "planner" => format!(
                "{} (reads no lake table, or the catalog / lakegate tables)",
                self.engines.planner.name()
            ),
            "pinned" => format!(
                "{} (pinned by lakegate.engine)",
                routed.engines.first().map_or("", |e| e.name())
            ),
            _ => format!(
                "{}{}",
                routed.engines.first().map_or("", |e| e.name()),
                if d.explored { " (exploring)" } else { "" }
            ),
        };
        rows.push(("choice".into(), choice));
        let batch = RecordBatch::try_new(
            explain_route_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.0.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.1.as_str()),
                )),
            ],
        )
        .map_err(|e| lakegate_engines::Error::from(datafusion::error::DataFusionError::from(e)))?;
        Ok(QueryOutput::Rows {
            stream: batches_stream(batch.schema(), vec![batch]),
            tag: "EXPLAIN",
        })
    }

    fn session_statement(
        &self,
        statement: &Statement,
        session: &mut Session,
    ) -> Result<QueryOutput> {
        match statement {
            Statement::Set(set) => {
                let changed = match set {
                    Set::SingleAssignment {
                        variable, values, ..
                    } => {
                        let name = variable.to_string().to_ascii_lowercase();
                        let value = values.iter().map(expr_value).collect::<Vec<_>>().join(", ");
                        if name == "lakegate.group" && value != "auto" {
                            self.router.group(
                                &Asker::default(),
                                &QueryProfile::utility(),
                                Some(&value),
                            )?;
                        }
                        apply_set(session, &name, &value)?
                    }
                    Set::SetTimeZone { value, .. } => {
                        apply_set(session, "timezone", &expr_value(value))?
                    }
                    Set::SetNames { charset_name, .. } => {
                        apply_set(session, "client_encoding", &charset_name.value)?
                    }
                    // Transaction characteristics and roles do not change a read-only gateway.
                    Set::SetTransaction { .. } | Set::SetRole { .. } => None,
                    Set::SetSessionAuthorization(_) => {
                        return Err(Error::Unsupported {
                            what: "SET SESSION AUTHORIZATION is not supported".into(),
                        });
                    }
                    other => {
                        return Err(Error::Unsupported {
                            what: format!("{other} is not supported"),
                        });
                    }
                };
                Ok(QueryOutput::Command(Command {
                    changed_setting: changed,
                    ..Command::new("SET")
                }))
            }
            Statement::ShowVariable { variable } => {
                let name = show_name(variable);
                let batch = if name == "all" {
                    let (names, values): (Vec<&str>, Vec<&str>) = session
                        .values()
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .unzip();
                    RecordBatch::try_new(
                        show_schema("all"),
                        vec![
                            Arc::new(StringArray::from(names)),
                            Arc::new(StringArray::from(values)),
                        ],
                    )
                } else {
                    let value = session.show(&name)?;
                    RecordBatch::try_new(
                        show_schema(&name),
                        vec![Arc::new(StringArray::from(vec![value]))],
                    )
                }
                .map_err(|e| {
                    lakegate_engines::Error::from(datafusion::error::DataFusionError::from(e))
                })?;
                Ok(QueryOutput::Rows {
                    stream: batches_stream(batch.schema(), vec![batch]),
                    tag: "SHOW",
                })
            }
            Statement::Reset(r) => {
                let changed = match &r.reset {
                    Reset::ALL => {
                        session.reset_all();
                        None
                    }
                    Reset::ConfigurationParameter(name) => {
                        let name = session.reset(&name.to_string())?;
                        let value = session.show(&name)?;
                        Some((name, value))
                    }
                };
                Ok(QueryOutput::Command(Command {
                    changed_setting: changed,
                    ..Command::new("RESET")
                }))
            }
            Statement::Discard { .. } => {
                session.reset_all();
                session.close(None)?;
                Ok(QueryOutput::Command(Command::new("DISCARD ALL")))
            }
            other => Err(unsupported(other)),
        }
    }

    async fn cursor_statement(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &mut Session,
    ) -> Result<QueryOutput> {
        match statement {
            Statement::Declare { stmts } => {
                for d in stmts {
                    let Some(query) = &d.for_query else {
                        return Err(Error::Unsupported {
                            what: "DECLARE without FOR <query>".into(),
                        });
                    };
                    if d.scroll == Some(true) {
                        return Err(Error::Unsupported {
                            what: "SCROLL cursors are not supported (cursors read forward only)"
                                .into(),
                        });
                    }
                    let Some(name) = d.names.first() else {
                        return Err(Error::Syntax {
                            message: "DECLARE needs a cursor name".into(),
                        });
                    };
                    let query = Statement::Query(query.clone());
                    let stream = self.run_query(&query, params, session).await?;
                    let cursor = Cursor {
                        schema: stream.schema(),
                        stream: SyncWrapper::new(stream),
                        pending: None,
                        hold: d.hold == Some(true),
                    };
                    session.declare(&name.value, cursor)?;
                }
                Ok(QueryOutput::Command(Command::new("DECLARE CURSOR")))
            }
            Statement::Fetch {
                name, direction, ..
            } => {
                let count = fetch_count(direction)?;
                let cursor = session.cursor(&name.value)?;
                let batches = take_rows(cursor, count).await?;
                let schema = cursor.schema.clone();
                Ok(QueryOutput::Rows {
                    stream: batches_stream(schema, batches),
                    tag: "FETCH",
                })
            }
            Statement::Close { cursor } => {
                match cursor {
                    CloseCursor::All => session.close(None)?,
                    CloseCursor::Specific { name } => session.close(Some(&name.value))?,
                }
                Ok(QueryOutput::Command(Command::new("CLOSE CURSOR")))
            }
            other => Err(unsupported(other)),
        }
    }
}

/// `WITH RECURSIVE t(a, b) AS (static UNION ALL recursive)`: DataFusion ignores the column list,
/// so the static term is wrapped as `SELECT * FROM (static) AS t(a, b)`, which names its columns
/// (asyncpg's type introspection relies on this).
fn rename_recursive_cte_columns(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{SetExpr, TableFactor};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let Statement::Query(query) = statement else {
        return;
    };
    let Some(with) = query.with.as_mut() else {
        return;
    };
    if !with.recursive {
        return;
    }
    for cte in &mut with.cte_tables {
        if cte.alias.columns.is_empty() {
            continue;
        }
        let SetExpr::SetOperation { left, .. } = cte.query.body.as_mut() else {
            continue;
        };
        // Built on the AST (a template whose derived table gets the static term and the CTE's
        // alias), never by printing the client's SQL and parsing it again: sqlparser does not
        // print every string back as written (see lakegate_engines::dialect).
        let Ok(mut parsed) =
            Parser::parse_sql(&PostgreSqlDialect {}, "SELECT * FROM (SELECT 1) AS t")
        else {
            continue;
        };
        let Some(Statement::Query(mut wrapper)) = parsed.pop() else {
            continue;
        };
        let SetExpr::Select(select) = wrapper.body.as_mut() else {
            continue;
        };
        let Some(TableFactor::Derived {
            subquery, alias, ..
        }) = select.from.first_mut().map(|f| &mut f.relation)
        else {
            continue;
        };
        subquery.body = left.clone();
        *alias = Some(cte.alias.clone());
        *left = wrapper.body;
    }
}

/// PostgreSQL's catalog types (`oid`, `regtype`, `name`, ...) in casts become the types the
/// `pg_catalog` emulation uses (int4, text), so `$1::oid[]` (asyncpg) plans.
fn rewrite_catalog_types(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        ArrayElemTypeDef, DataType as SqlType, visit_expressions_mut,
    };
    fn map(t: &mut SqlType) {
        match t {
            SqlType::Custom(name, _) => {
                let n = name.to_string().to_ascii_lowercase();
                let n = n.trim_start_matches("pg_catalog.").trim_matches('"');
                match n {
                    "oid" | "regtype" | "regproc" | "regprocedure" | "regnamespace" | "regrole"
                    | "regoper" | "xid" | "cid" | "int2vector" | "oidvector" => {
                        *t = SqlType::Int(None)
                    }
                    "name" => *t = SqlType::Text,
                    _ => {}
                }
            }
            SqlType::Array(ArrayElemTypeDef::SquareBracket(inner, _))
            | SqlType::Array(ArrayElemTypeDef::AngleBracket(inner))
            | SqlType::Array(ArrayElemTypeDef::Parenthesis(inner)) => map(inner),
            _ => {}
        }
    }
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Cast { data_type, .. } = expr {
            map(data_type);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `SELECT set_config('name', 'value', is_local)` with literal arguments changes the session
/// like `SET` (asyncpg turns `jit` off this way).
fn apply_set_config(statement: &Statement, session: &mut Session) -> Result<()> {
    use datafusion::sql::sqlparser::ast::{
        FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem, SetExpr,
    };
    let Statement::Query(query) = statement else {
        return Ok(());
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Ok(());
    };
    for item in &select.projection {
        let (SelectItem::UnnamedExpr(Expr::Function(f))
        | SelectItem::ExprWithAlias {
            expr: Expr::Function(f),
            ..
        }) = item
        else {
            continue;
        };
        if !f
            .name
            .to_string()
            .to_ascii_lowercase()
            .ends_with("set_config")
        {
            continue;
        }
        let FunctionArguments::List(list) = &f.args else {
            continue;
        };
        let literal = |i: usize| match list.args.get(i) {
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))) => match &v.value {
                Value::SingleQuotedString(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        };
        if let (Some(name), Some(value)) = (literal(0), literal(1)) {
            session.set(&name, &value)?;
        }
    }
    Ok(())
}

/// Drains a stream into memory, giving up once it exceeds `max` bytes.
/// `EXPLAIN ROUTE q` is spelled `EXPLAIN (ROUTE) q` for the parser (which knows PostgreSQL's
/// option list); either spelling works.
fn explain_route_syntax(sql: &str) -> std::borrow::Cow<'_, str> {
    let trimmed = sql.trim_start();
    let mut words = trimmed.splitn(3, char::is_whitespace);
    match (words.next(), words.next(), words.next()) {
        (Some(e), Some(r), Some(rest))
            if e.eq_ignore_ascii_case("explain") && r.eq_ignore_ascii_case("route") =>
        {
            std::borrow::Cow::Owned(format!("EXPLAIN (ROUTE) {rest}"))
        }
        _ => std::borrow::Cow::Borrowed(sql),
    }
}

/// The query of an `EXPLAIN (ROUTE) ...`.
fn explain_route_target(statement: &Statement) -> Option<&Statement> {
    match statement {
        Statement::Explain {
            options: Some(options),
            statement,
            ..
        } if options
            .iter()
            .any(|o| o.name.value.eq_ignore_ascii_case("route")) =>
        {
            Some(statement)
        }
        _ => None,
    }
}

fn explain_route_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("item", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, false),
    ]))
}

/// `schema.table@snapshot` of every pinned table (`@empty`: no snapshot yet).
fn snapshot_list(pins: &Pins, separator: &str) -> String {
    pins.iter()
        .map(|((schema, table), t)| match t.snapshot_id {
            Some(id) => format!("{schema}.{table}@{id}"),
            None => format!("{schema}.{table}@empty"),
        })
        .collect::<Vec<_>>()
        .join(separator)
}

/// Whether an error of this kind is the engine's fault (unreachable, broken) rather than the
/// statement's: only those count against an engine and fail over.
fn engine_fault(kind: lakegate_engines::ErrorKind) -> bool {
    matches!(
        kind,
        lakegate_engines::ErrorKind::Unavailable | lakegate_engines::ErrorKind::Internal
    )
}

/// Polls the first batch, so that an engine failing at the start fails here (and can be
/// failed over) rather than in the client's stream.
async fn first_batch(mut stream: SendableRecordBatchStream) -> Result<SendableRecordBatchStream> {
    let schema = stream.schema();
    match stream.next().await {
        Some(Err(e)) => Err(Error::Engine(e.into())),
        Some(Ok(batch)) => {
            let rest = futures::stream::once(async move { Ok(batch) }).chain(stream);
            Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rest)))
        }
        None => Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::empty(),
        ))),
    }
}

/// Reports the query's latency (to the last batch) or failure to the router, and holds the
/// group slot until the stream ends or is dropped.
/// Ends `stream` with an error (54000) once it passes the group's `max_rows` or the result
/// byte limit (`max_result_bytes` of the group or `[limits]`, the smaller): the client gets
/// the rows before the limit, then the error; the connection stays usable.
fn guarded(
    stream: SendableRecordBatchStream,
    group: &crate::routing::rules::GroupSpec,
    max_result_bytes: u64,
) -> SendableRecordBatchStream {
    let bytes_limit = match (group.max_result_bytes, max_result_bytes) {
        (0, global) => global,
        (mine, 0) => mine,
        (mine, global) => mine.min(global),
    };
    if group.max_rows == 0 && bytes_limit == 0 {
        return stream;
    }
    let (rows_limit, name) = (group.max_rows, group.name.clone());
    let schema = stream.schema();
    let exceeded = move |what: String| {
        lakegate_engines::Error::Engine {
            engine: "lakegate".into(),
            kind: lakegate_engines::ErrorKind::LimitExceeded,
            message: what,
        }
        .into_datafusion()
    };
    let limited = futures::stream::unfold(
        (stream, 0u64, 0u64, false),
        move |(mut s, rows, bytes, done)| {
            let name = name.clone();
            async move {
                if done {
                    return None;
                }
                match s.next().await {
                    Some(Ok(b)) => {
                        let rows = rows + b.num_rows() as u64;
                        let bytes = bytes + batch_bytes(&b);
                        if rows_limit > 0 && rows > rows_limit {
                            let e = exceeded(format!(
                                "the result passed routing group \"{name}\"'s max_rows \
                                 ({rows_limit}): add a LIMIT, a filter or an aggregate"
                            ));
                            Some((Err(e), (s, rows, bytes, true)))
                        } else if bytes_limit > 0 && bytes > bytes_limit {
                            let e = exceeded(format!(
                                "the result passed the max_result_bytes limit ({}) of routing \
                                 group \"{name}\": select fewer columns or rows, or aggregate",
                                lakegate_maintenance::maintainer::human_bytes(bytes_limit)
                            ));
                            Some((Err(e), (s, rows, bytes, true)))
                        } else {
                            Some((Ok(b), (s, rows, bytes, false)))
                        }
                    }
                    Some(Err(e)) => Some((Err(e), (s, rows, bytes, true))),
                    None => None,
                }
            }
        },
    );
    Box::pin(RecordBatchStreamAdapter::new(schema, limited))
}

/// The bytes of a batch's values (slices count only what they cover).
fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

fn track(
    stream: SendableRecordBatchStream,
    router: Arc<Router>,
    engine: String,
    shape: Shape,
    bytes: u64,
    started: std::time::Instant,
    slot: Option<Slot>,
) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let tracked = futures::stream::unfold(
        (stream, Some((router, engine, slot))),
        move |(mut stream, mut state)| async move {
            match stream.next().await {
                Some(Ok(b)) => Some((Ok(b), (stream, state))),
                Some(Err(e)) => {
                    if let Some((router, engine, _slot)) = state.take()
                        && engine_fault(lakegate_engines::error::datafusion_kind(&e))
                    {
                        router.record(&engine, shape, bytes, None);
                    }
                    Some((Err(e), (stream, state)))
                }
                None => {
                    if let Some((router, engine, _slot)) = state.take() {
                        let ms = started.elapsed().as_secs_f64() * 1000.0;
                        router.record(&engine, shape, bytes, Some(ms));
                    }
                    None
                }
            }
        },
    );
    Box::pin(RecordBatchStreamAdapter::new(schema, tracked))
}

/// Runs a request on `engine`, with PostgreSQL's output column names.
async fn execute_on(
    engine: &EngineRef,
    request: EngineRequest<'_>,
    names: Option<&[String]>,
) -> Result<SendableRecordBatchStream> {
    let stream = engine.execute(request).await?;
    Ok(match names {
        Some(names) => output_names::rename_stream(stream, names),
        None => stream,
    })
}

async fn collect_capped(
    mut stream: SendableRecordBatchStream,
    max: u64,
    overflow: &std::sync::Mutex<Option<SendableRecordBatchStream>>,
) -> Result<CachedResult, Uncached> {
    let schema = stream.schema();
    let (mut batches, mut bytes) = (Vec::new(), 0u64);
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| Uncached::Failed(Arc::new(Error::Engine(e.into()))))?;
        // Engines hand out batches that share (and keep alive) much larger buffers; a cached
        // result gets buffers of its own, so its size is what it really holds.
        let indices = arrow::array::UInt32Array::from_iter_values(0..batch.num_rows() as u32);
        let batch = arrow::compute::take_record_batch(&batch, &indices).map_err(|e| {
            Uncached::Failed(Arc::new(Error::Engine(
                datafusion::error::DataFusionError::from(e).into(),
            )))
        })?;
        bytes += batch.get_array_memory_size() as u64;
        batches.push(batch);
        if bytes > max {
            // Too large to cache: the batches read so far, then the rest, for this caller.
            let read = futures::stream::iter(batches.into_iter().map(Ok));
            let whole = RecordBatchStreamAdapter::new(schema, read.chain(stream));
            *overflow.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::pin(whole));
            return Err(Uncached::TooLarge);
        }
    }
    Ok(CachedResult {
        schema,
        batches,
        bytes,
    })
}

/// Applies a `SET` and returns the setting to report back, if clients track it.
fn apply_set(session: &mut Session, name: &str, value: &str) -> Result<Option<(String, String)>> {
    let name = if value.eq_ignore_ascii_case("default") {
        session.reset(name)?
    } else {
        session.set(name, value)?
    };
    let value = session.show(&name)?;
    Ok(Some((name, value)))
}

/// The text of a `SET` value: strings unquoted, identifiers and numbers as written.
fn expr_value(e: &Expr) -> String {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => {
                if *b {
                    "on".into()
                } else {
                    "off".into()
                }
            }
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        Expr::UnaryOp { op, expr } => format!("{op}{}", expr_value(expr)),
        other => other.to_string(),
    }
}

/// `SHOW transaction isolation level` → `transaction_isolation`.
fn show_name(variable: &[datafusion::sql::sqlparser::ast::Ident]) -> String {
    let words: Vec<String> = variable
        .iter()
        .map(|i| i.value.to_ascii_lowercase())
        .collect();
    match words.join(" ").as_str() {
        "transaction isolation level" => "transaction_isolation".into(),
        "time zone" => "timezone".into(),
        // sqlparser splits a dotted name (`SHOW lakegate.engine`) into its parts.
        _ => words.join("."),
    }
}

fn show_schema(name: &str) -> SchemaRef {
    if name == "all" {
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("setting", DataType::Utf8, false),
        ]))
    } else {
        Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]))
    }
}

fn batches_stream(schema: SchemaRef, batches: Vec<RecordBatch>) -> SendableRecordBatchStream {
    match MemoryStream::try_new(batches, schema.clone(), None) {
        Ok(s) => Box::pin(s),
        Err(_) => Box::pin(datafusion::physical_plan::EmptyRecordBatchStream::new(
            schema,
        )),
    }
}

/// How many rows a FETCH asks for (`None`: all).
fn fetch_count(direction: &FetchDirection) -> Result<Option<usize>> {
    let number = |v: &Value| -> Result<usize> {
        match v {
            Value::Number(n, _) => n.parse().map_err(|_| Error::Syntax {
                message: format!("FETCH count `{n}` is not a row count"),
            }),
            other => Err(Error::Syntax {
                message: format!("FETCH count `{other}` is not a number"),
            }),
        }
    };
    match direction {
        FetchDirection::Next => Ok(Some(1)),
        FetchDirection::Count { limit } => number(limit).map(Some),
        FetchDirection::Forward { limit: Some(l) } => number(l).map(Some),
        FetchDirection::Forward { limit: None } => Ok(Some(1)),
        FetchDirection::All | FetchDirection::ForwardAll => Ok(None),
        other => Err(Error::Unsupported {
            what: format!("FETCH {other}: cursors read forward only"),
        }),
    }
}

/// Reads up to `count` rows (all when `None`) from a cursor.
async fn take_rows(cursor: &mut Cursor, count: Option<usize>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut wanted = count.unwrap_or(usize::MAX);
    while wanted > 0 {
        let batch = match cursor.pending.take() {
            Some(b) => b,
            None => match cursor.stream.get_mut().next().await {
                Some(b) => b.map_err(lakegate_engines::Error::from)?,
                None => break,
            },
        };
        if batch.num_rows() <= wanted {
            wanted -= batch.num_rows();
            out.push(batch);
        } else {
            out.push(batch.slice(0, wanted));
            cursor.pending = Some(batch.slice(wanted, batch.num_rows() - wanted));
            wanted = 0;
        }
    }
    Ok(out)
}

fn read_only(verb: &str) -> Error {
    Error::Unsupported {
        what: format!(
            "{verb} is not supported: lakegate is a read-only gateway (write through your Iceberg writer)"
        ),
    }
}

fn unsupported(statement: &Statement) -> Error {
    let text = statement.to_string();
    let head: String = text
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    Error::Unsupported {
        what: format!("statement `{head}` is not supported by lakegate"),
    }
}

/// sqlparser says "sql parser error: Expected: …"; PostgreSQL says "syntax error at or near".
fn syntax_message(raw: &str) -> String {
    let msg = raw.trim_start_matches("sql parser error: ");
    format!("syntax error: {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    #[test]
    fn a_recursive_cte_column_list_names_the_static_term() {
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "WITH RECURSIVE t(n, s) AS (SELECT 1, 'a''b' UNION ALL SELECT n + 1, s FROM t \
             WHERE n < 3) SELECT * FROM t",
        )
        .expect("sql")
        .remove(0);
        rename_recursive_cte_columns(&mut s);
        assert_eq!(
            s.to_string(),
            "WITH RECURSIVE t (n, s) AS (SELECT * FROM (SELECT 1, 'a''b') t (n, s) \
             UNION ALL SELECT n + 1, s FROM t WHERE n < 3) SELECT * FROM t"
        );
    }
}

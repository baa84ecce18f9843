//! The protocol-neutral query service every frontend calls. It reads like the pipeline:
//!
//! ```text
//! frontend ─ parse ─▶ GatewayService::describe / execute (statement, params, session, ctx)
//!   query ──▶ plan     references → profile → group → access → resolve → masks
//!                      → scan estimate → guardrail → route               (plan.rs)
//!             describe the planner's schema for the plan                 (describe.rs)
//!             execute  history → cache or run → limits → cancel/deadline (query.rs, cache.rs)
//!                      run: candidates ordered → admission → first engine
//!                           that answers                                 (run.rs)
//!   a row of literals (`SELECT 1`): answered at once                     (constant.rs)
//!   SET/SHOW/RESET, BEGIN/COMMIT, DECLARE/FETCH/CLOSE, EXPLAIN ROUTE     (hooks/)
//!   lakegate.* tables                                                    (system/)
//! ```
//!
//! - [`context`] — the per-statement context (query id, user, deadline, cancel).
//! - [`parse`] — SQL text → statements, with the rewrites BI tools need; [`shapes`] — texts
//!   that differ from one seen before only in their lifted literals, not parsed again.
//! - [`lifting`] — literals of lookups sent as text run as parameters of a template.
//! - [`plan`] — the one plan every query goes through; [`rewrites`] — what it runs as, and
//!   what is made from that once; [`kept`] — what it decided, kept per statement for the next
//!   plan of it (a Parse of a kept plan answers its kept description).
//! - [`describe`], [`query`], [`run`], [`cache`]: describing and answering a plan.
//! - [`catalog`] — catalog statements the PostgreSQL mirror answers.
//! - [`heat`] — what queries read, for the maintenance loop.
//! - [`engines`] — the engine registry.
//! - [`output_names`] — PostgreSQL's names for result columns.
//! - [`origins`] — the table OID, attnum and typmod of result columns that are table columns.

pub mod batch;
pub mod cache;
pub mod catalog;
#[cfg(test)]
mod classify_tests;
pub mod constant;
pub mod context;
mod describe;
pub mod encodings;
pub mod engines;
mod heat;
pub mod hooks;
mod kept;
mod lifting;
pub mod numeric;
pub mod origins;
pub mod output_names;
pub mod parse;
pub mod plan;
#[cfg(test)]
mod plan_tests;
pub(crate) mod query;
mod resolve;
pub mod rewrites;
mod run;
mod shapes;
pub mod system;
mod weight;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::engine::Described;
use lakegate_engines::{Lake, Pins, Settings};
use lakegate_maintenance::Maintainer;
use lakegate_sql::lift::Lifted;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use batch::{Batch, BatchVersions};
pub use cache::{CacheConfig, CacheOutcome, ResultCache};
pub use context::{Frontend, StatementContext};
pub use engines::Engines;
pub use weight::Interned;

use crate::classify::{self, StatementKind};
use crate::error::Result;
use crate::mirror::CatalogMirror;
use crate::observe::history::QueryHistory;
use crate::routing::Router;
use crate::security::Security;
use crate::session::Session;
use cache::CacheKey;
use hooks::{explain, settings, transaction};
use lifting::{Input, lift, param_values, runs};
use parse::{Parser, explain_route_target};

/// What a statement produced.
pub enum QueryOutput {
    /// Rows, streamed. `tag` is the command tag verb (`SELECT`, `FETCH`, `SHOW`).
    Rows {
        /// The result.
        stream: SendableRecordBatchStream,
        /// Command tag verb.
        tag: &'static str,
        /// Where a frontend may keep these rows encoded: they are a cached result's
        /// ([`encodings`]).
        encodings: Option<Arc<encodings::Encodings>>,
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
    /// Prepared statements the frontend must drop (`DEALLOCATE`, `DISCARD ALL`).
    pub deallocate: Option<Deallocate>,
}

/// Which prepared statements a `DEALLOCATE` or `DISCARD ALL` drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deallocate {
    /// Every one of the session's.
    All,
    /// The one called so (it must exist: 26000 otherwise, as in PostgreSQL).
    Named(String),
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
            deallocate: None,
        }
    }
}

/// Bytes of statement descriptions kept (estimated: [`weight`]).
const DESCRIBED_BYTES: u64 = 32 << 20;

/// The gateway's query pipeline.
pub struct GatewayService {
    lake: Arc<Lake>,
    engines: Engines,
    parser: Parser,
    cache: ResultCache,
    /// Descriptions by full key (statement, table versions, session).
    described: moka::future::Cache<CacheKey, Described, foldhash::fast::RandomState>,
    history: Arc<QueryHistory>,
    router: Arc<Router>,
    /// Pruned scan estimates by (metadata location, predicate): planning files is per table
    /// version and filter, not per execution.
    estimates: moka::future::Cache<String, u64>,
    /// The maintenance loop (health, heat, operations).
    maintainer: Arc<Maintainer>,
    /// Who may read what.
    security: Security,
    /// The PostgreSQL catalog mirror, when there is one.
    mirror: Option<Arc<CatalogMirror>>,
    /// Agents' guardrails, budgets and held statements (the MCP frontend's).
    agents: Arc<crate::agents::Agents>,
    /// What plans decided, kept per statement for its next plan ([`kept`]).
    kept: kept::KeptPlans,
}

/// What a [`GatewayService`] is built from.
pub struct ServiceParts {
    /// The lake.
    pub lake: Arc<Lake>,
    /// The engines.
    pub engines: Engines,
    /// `[cache]`.
    pub cache: CacheConfig,
    /// The router.
    pub router: Arc<Router>,
    /// The query history.
    pub history: Arc<QueryHistory>,
    /// The maintenance loop.
    pub maintainer: Arc<Maintainer>,
    /// Authentication, access rules, masks, result limits.
    pub security: Security,
    /// `[limits] max_call_nesting`.
    pub max_call_nesting: usize,
    /// The PostgreSQL catalog mirror (`None`: the emulated catalog answers).
    pub mirror: Option<Arc<CatalogMirror>>,
    /// `[mcp]`: agents' guardrails.
    pub agents: Arc<crate::agents::Agents>,
}

impl GatewayService {
    /// A service over `parts`.
    pub fn new(parts: ServiceParts) -> Self {
        Self {
            lake: parts.lake,
            engines: parts.engines,
            parser: Parser::new(parts.max_call_nesting),
            cache: ResultCache::new(parts.cache),
            described: moka::future::Cache::builder()
                .max_capacity(DESCRIBED_BYTES)
                .weigher(|k: &CacheKey, d: &Described| {
                    u32::try_from(weight::ENTRY_BYTES + k.weight() + weight::described(d))
                        .unwrap_or(u32::MAX)
                })
                .build_with_hasher(foldhash::fast::RandomState::default()),
            history: parts.history,
            router: parts.router,
            estimates: moka::future::Cache::new(10_000),
            maintainer: parts.maintainer,
            security: parts.security,
            mirror: parts.mirror,
            agents: parts.agents,
            kept: kept::KeptPlans::default(),
        }
    }

    /// Agents' guardrails, budgets and held statements.
    pub fn agents(&self) -> &Arc<crate::agents::Agents> {
        &self.agents
    }

    /// Who may connect.
    pub fn auth(&self) -> &Arc<crate::security::auth::Auth> {
        &self.security.auth
    }

    /// Who may read what.
    pub fn security(&self) -> &Security {
        &self.security
    }

    /// The maintenance loop.
    pub fn maintainer(&self) -> &Arc<Maintainer> {
        &self.maintainer
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

    /// The engines.
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    /// The result cache.
    pub fn cache(&self) -> &ResultCache {
        &self.cache
    }

    /// The result cache's counters and sizes, then the kept plans' (`plans_kept`,
    /// `plans_reused`, `plans_made`).
    pub async fn cache_stats(&self) -> Vec<(&'static str, u64)> {
        let mut stats = self.cache.stats_values().await;
        stats.extend(self.kept.stats());
        stats.extend(self.parser.shape_stats());
        stats
    }

    /// Parses SQL text (PostgreSQL dialect, with rewrites for what BI tools send).
    ///
    /// # Errors
    /// 42601 syntax errors, 54001 statements nested too deep.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        self.parser.parse(sql)
    }

    /// [`Self::parse`] without copying the statements (shared with the parser's kept ones).
    ///
    /// # Errors
    /// As [`Self::parse`].
    pub fn parse_shared(&self, sql: &str) -> Result<Arc<Vec<Statement>>> {
        self.parser.parse_shared(sql)
    }

    /// `statement`, sent as `text`, interned for planning it again and again
    /// ([`StatementContext::with_interned`] with the [`Interned`] for each plan of
    /// [`Interned::statement`]): `None` for anything but a query that is planned as it is (a
    /// row of constants is not planned; a text whose literals may be lifted runs as their
    /// template).
    pub fn intern_query(&self, statement: &Statement, text: &str) -> Option<Interned> {
        (lifting::nothing_to_lift(text)
            && classify::kind(statement) == StatementKind::Query
            && constant::of(statement).is_none()
            && explain_route_target(statement).is_none())
        .then(|| self.cache.intern(statement))
    }

    /// The context of a statement `session` starts now: a fresh query id, the session's user,
    /// routing choices and `statement_timeout`; `cancel` stops it from outside.
    pub fn context(&self, session: &Session, cancel: CancellationToken) -> StatementContext {
        StatementContext::new(
            self.history.next_id(),
            session.user(),
            session.frontend(),
            cancel,
            session.statement_timeout(),
        )
        .with_routing(session.pinned_group(), session.pinned_engine())
    }

    /// The session's engine settings, with the catalog view its access rules allow.
    fn engine_settings(&self, session: &Session) -> Arc<Settings> {
        let settings = session.engine_settings();
        match self.security.visibility(session.user()) {
            None => settings,
            Some(visible) => Arc::new(Settings {
                visible: Some(visible),
                ..(*settings).clone()
            }),
        }
    }

    /// What a statement takes and returns, without running it (`None`: it returns no rows).
    /// Queries are planned exactly as Execute plans them, so a statement Execute would refuse
    /// (42501, 54000, ...) is refused here too, before anything of its tables is described.
    ///
    /// # Errors
    /// Planning errors, refused statements.
    #[tracing::instrument(name = "describe", level = "debug", skip_all, fields(query_id = ctx.query_id, frontend = ctx.frontend.name()))]
    pub async fn describe(
        &self,
        statement: &Statement,
        session: &mut Session,
        ctx: &StatementContext,
    ) -> Result<Option<Described>> {
        if let Some(target) = explain_route_target(statement) {
            self.explain_plan(target, session, ctx).await?;
            return Ok(Some(explain::described()));
        }
        match classify::kind(statement) {
            StatementKind::Query => {
                if let Some(c) = constant::of(statement) {
                    return Ok(Some(Described {
                        param_types: vec![],
                        schema: c.schema,
                        features: Default::default(),
                        constructs: Default::default(),
                    }));
                }
                // Described as Execute runs it: its literals lifted (the template's plan is
                // shared); the client still sees a statement without parameters.
                let lifted = lift(statement, None, ctx.text.as_deref())
                    .map(|(template, values)| (template, param_values(&values)));
                let (runs, params) = runs(&lifted, statement, None);
                self.describe_query(runs, params, lifted.is_some(), session, ctx)
                    .await
                    .map(Some)
            }
            StatementKind::Session => Ok(settings::describe(statement)),
            StatementKind::Cursor => match statement {
                Statement::Fetch { name, .. } => Ok(Some(Described {
                    param_types: vec![],
                    features: Default::default(),
                    constructs: Default::default(),
                    schema: session.cursor(&name.value)?.schema.clone(),
                })),
                // The declared queries are planned (and refused) as their DECLARE would.
                Statement::Declare { stmts } => {
                    for query in stmts.iter().filter_map(|d| d.for_query.as_ref()) {
                        let settings = self.engine_settings(session);
                        let query = Statement::Query(query.clone());
                        ctx.guard(self.plan(&query, None, settings, ctx)).await?;
                    }
                    Ok(None)
                }
                _ => Ok(None),
            },
            StatementKind::Transaction => Ok(None),
            StatementKind::Write(verb) => Err(hooks::read_only(verb)),
            StatementKind::Other => Err(hooks::unsupported(statement)),
        }
    }

    /// [`Self::describe`] of the text `ctx.text` given as the lifted template a text of its
    /// shape parsed to ([`Self::lifted_shape`]) and its values.
    ///
    /// # Errors
    /// As [`Self::describe`].
    #[tracing::instrument(name = "describe", level = "debug", skip_all, fields(query_id = ctx.query_id, frontend = ctx.frontend.name()))]
    pub async fn describe_lifted(
        &self,
        template: &Statement,
        values: &[Lifted],
        session: &Session,
        ctx: &StatementContext,
    ) -> Result<Described> {
        let values = param_values(values);
        self.describe_query(template, Some(&values), true, session, ctx)
            .await
    }

    /// A query's description as it runs (`runs` with `params`); a `lifted` one's parameters
    /// are its own literals, not the client's to bind.
    async fn describe_query(
        &self,
        runs: &Statement,
        params: Option<&ParamValues>,
        lifted: bool,
        session: &Session,
        ctx: &StatementContext,
    ) -> Result<Described> {
        let settings = self.engine_settings(session);
        let kept = ctx.guard(self.described_kept(runs, &settings, ctx)).await?;
        let mut described = match kept {
            Some(described) => described,
            None => {
                let plan = ctx.guard(self.plan(runs, params, settings, ctx)).await?;
                ctx.guard(self.description(&plan)).await?
            }
        };
        if lifted {
            described.param_types.clear();
        }
        Ok(described)
    }

    /// Runs one statement for `session`.
    ///
    /// # Errors
    /// Any failure of parsing, resolution, planning or execution, as a gateway
    /// [`crate::Error`]; 57014 when cancelled or past `statement_timeout`.
    pub async fn execute(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &mut Session,
        ctx: &StatementContext,
    ) -> Result<QueryOutput> {
        self.execute_input(Input::Written(statement, params), session, ctx)
            .await
    }

    /// Runs the text `ctx.text` given as the lifted template a text of its shape parsed to
    /// ([`Self::lifted_shape`]) and its values: what [`Self::execute`] of its statement does.
    ///
    /// # Errors
    /// As [`Self::execute`].
    pub async fn execute_lifted(
        &self,
        template: &Statement,
        values: &[Lifted],
        session: &mut Session,
        ctx: &StatementContext,
    ) -> Result<QueryOutput> {
        let values = param_values(values);
        self.execute_input(Input::Lifted(template, &values), session, ctx)
            .await
    }

    /// The lifted template and values of `sql`, when a text of its shape was seen: it is one
    /// `SELECT` reading the lake, not parsed again ([`shapes`]) — when the session takes it
    /// ([`Self::take_shape`]).
    pub fn lifted_shape(&self, sql: &str) -> Option<(Interned, Vec<Lifted>)> {
        self.parser.lifted(sql)
    }

    /// Whether a text of `session` is answered from the shape found for it (counted as a
    /// shape hit when it is): a shape is learned from a text whose tables are the lake's, and
    /// a session whose search path starts with a system schema reads unqualified names from
    /// the catalog (which the mirror may answer), so its texts are parsed.
    pub fn take_shape(&self, session: &Session) -> bool {
        let takes =
            !lakegate_sql::classify::SYSTEM_SCHEMAS.contains(&session.default_schema().as_str());
        if takes {
            self.parser.count_shape_hit();
        }
        takes
    }

    async fn execute_input(
        &self,
        input: Input<'_>,
        session: &mut Session,
        ctx: &StatementContext,
    ) -> Result<QueryOutput> {
        // At debug, as the describe span: an enabled span costs ~5 µs of a 60 µs cached answer
        // (the log's registry and formatted fields, made and dropped per statement). What the
        // statement did is one `debug` event (`service::query`) and its history record; a
        // warning inside it names its query_id itself.
        let span = tracing::debug_span!(
            "statement",
            query_id = ctx.query_id,
            frontend = ctx.frontend.name(),
        );
        // On the heap: the statement's future is large (planning, engines) and frontends nest it.
        Box::pin(self.execute_in_span(input, session, ctx).instrument(span)).await
    }

    async fn execute_in_span(
        &self,
        input: Input<'_>,
        session: &mut Session,
        ctx: &StatementContext,
    ) -> Result<QueryOutput> {
        let (statement, params) = match input {
            Input::Written(statement, params) => (statement, params),
            Input::Lifted(template, values) => (template, Some(values)),
        };
        if let Some(target) = explain_route_target(statement) {
            return self.explain_route(target, session, ctx).await;
        }
        let kind = classify::kind(statement);
        match kind {
            StatementKind::Query => {
                if let Some(c) = constant::of(statement) {
                    let mut pending = self.history.start(ctx, statement.to_string());
                    pending.record.shape = Some(crate::profile::Shape::Metadata);
                    pending.record.route = Some(plan::Route::Planner);
                    let rows = query::batches_stream(c.schema, vec![c.batch]);
                    return Ok(QueryOutput::Rows {
                        stream: pending.track(self.history.clone(), rows),
                        tag: "SELECT",
                        encodings: None,
                    });
                }
                // `set_config()` may change the routing the context was made with.
                let refreshed;
                let ctx = if settings::apply_set_config(statement, session)? {
                    refreshed = ctx
                        .clone()
                        .with_routing(session.pinned_group(), session.pinned_engine());
                    &refreshed
                } else {
                    ctx
                };
                // Literals a lookup varies by become parameters, so that lookups sent as
                // text share one plan (`lakegate_sql::lift`); the text's shape is learned, so
                // that the next text of it is not even parsed (`shapes`).
                // (A lifted template comes with its values: `lift` leaves it as it is.)
                let lifted =
                    lift(statement, params, ctx.text.as_deref()).map(|(template, values)| {
                        if let Some(text) = ctx.text.as_deref() {
                            self.parser
                                .learn_shape(text, &template, &values, &|t| self.cache.intern(t));
                        }
                        (template, param_values(&values))
                    });
                let (runs, params) = runs(&lifted, statement, params);
                // The history shows the client's text whenever a template runs.
                let written =
                    (lifted.is_some() || matches!(input, Input::Lifted(..))).then_some(statement);
                let query::Rows { stream, encodings } = self
                    .query(
                        runs,
                        params,
                        written,
                        session,
                        ctx,
                        query::Reading::Statement,
                    )
                    .await?;
                Ok(QueryOutput::Rows {
                    stream,
                    tag: "SELECT",
                    encodings,
                })
            }
            StatementKind::Session => self.session_statement(statement, session),
            StatementKind::Transaction => Ok(transaction::run(statement, session)),
            StatementKind::Cursor => self.cursor_statement(statement, params, session, ctx).await,
            StatementKind::Write(verb) => Err(hooks::read_only(verb)),
            StatementKind::Other => Err(hooks::unsupported(statement)),
        }
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
        Ok(match self.security.visibility(user) {
            Some(v) => directory.filtered(|ns, t| (v.allows)(ns, t)),
            None => directory,
        })
    }

    /// The current Arrow schema of `schema.table`.
    ///
    /// # Errors
    /// Unknown table, catalog failures.
    pub async fn table_schema(&self, schema: &str, table: &str) -> Result<SchemaRef> {
        Ok(self.lake.resolve(schema, table).await?.schema.clone())
    }
}

/// `schema.table@snapshot` of every pinned table (`@empty`: no snapshot yet).
pub(crate) fn snapshot_list(pins: &Pins, separator: &str) -> String {
    // Written into one string, without the formatting machinery: every statement's history
    // record carries it (it was 1.3% of a cached answer's CPU).
    let mut list = String::with_capacity(48);
    let mut digits = itoa::Buffer::new();
    for ((schema, table), t) in pins.iter() {
        if !list.is_empty() {
            list.push_str(separator);
        }
        list.push_str(schema);
        list.push('.');
        list.push_str(table);
        list.push('@');
        list.push_str(match t.snapshot_id {
            Some(id) => digits.format(id),
            None => "empty",
        });
    }
    list
}

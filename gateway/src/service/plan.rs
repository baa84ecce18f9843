//! One plan for every query. [`GatewayService::plan`] takes a statement through every decision
//! in one order — references → profile → group → **access** → resolve → masks → scan estimate
//! → guardrail → route → numeric outputs — and returns the [`Plan`] that Describe (pgwire Parse/Describe,
//! Flight SQL GetFlightInfo, CreatePreparedStatement, GetSchema), Execute, DECLARE and
//! EXPLAIN ROUTE all consume: none of them can skip a step another takes.
//!
//! The decisions are pure functions ([`intend`] before any I/O, [`decide`] after it), tested as
//! tables of cases; the I/O between them ([`super::resolve`]) is resolving the tables' current
//! versions and pruning the scan estimate. A routed plan's candidates are ordered by the
//! router's observations only when it runs ([`Plan::order`]): a cached answer asks no router.
//!
//! What a plan decides from its statement, session and table versions alone is kept
//! ([`super::kept`]): a later plan of the same statement for the same session settings at the
//! same versions resolves the versions, then only estimates and decides (steps 7–8) again.

use std::sync::Arc;

use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::lake::estimate;
use lakegate_engines::{Pins, Settings};
use serde::{Deserialize, Serialize};

use super::kept::{self, Kept};
use super::output_names;
pub use super::rewrites::Rewrites;
use super::{GatewayService, StatementContext};
use crate::classify::{self, References, StatementKind};
use crate::error::{Error, Result};
use crate::profile::QueryProfile;
use crate::routing::rules::{Asker, GroupSpec};
use crate::routing::{Candidate, Decision, GroupChoice, Pick, Router};
use crate::security::Security;

/// How a statement's engines were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// It reads no lake table, or reads the catalog or `lakegate.*`: the embedded planner.
    Planner,
    /// The session pinned an engine (`lakegate.engine`, `x-lakegate-engine`).
    Pinned,
    /// The group's candidates, by expected latency, with failover.
    Routed,
}

impl Route {
    /// `planner`, `pinned`, `routed`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Planner => "planner",
            Self::Pinned => "pinned",
            Self::Routed => "routed",
        }
    }
}

/// A statement's table versions and the system tables it reads.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Each lake table read, at its current version.
    pub pins: Pins,
    /// `lakegate.<name>` tables, materialised for this statement.
    pub system_tables: Vec<(String, arrow::array::RecordBatch)>,
    /// It reads `pg_catalog` / `information_schema`.
    pub catalog: bool,
}

/// What a statement asks for, decided from its syntax and the session alone (no I/O).
#[derive(Debug)]
pub struct Intent {
    /// The statement with PostgreSQL's output names as aliases.
    pub statement: Statement,
    /// The names the result carries (when aliases were added).
    pub names: Option<Vec<String>>,
    /// The tables it reads, and where it runs.
    pub chosen: Chosen,
}

/// The tables a statement reads and the group it runs in (steps 1–4 less the rewrite).
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The tables it reads.
    pub refs: References,
    /// Its shape and columns; `scan_bytes` from the versions last seen (shared by every
    /// plan of a kept statement).
    pub profile: Arc<QueryProfile>,
    /// The rule that chose the group, if one did.
    pub rule: Option<String>,
    /// Why this group.
    pub choice: GroupChoice,
    /// The group it runs in.
    pub group: Arc<GroupSpec>,
    /// Its tables and columns, for the maintenance heat (made once, sent per execution).
    pub read: Arc<lakegate_maintenance::telemetry::Read>,
}

/// The bytes a statement is expected to scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Bytes of the pinned data files, pruned by the WHERE where that matters.
    pub bytes: u64,
    /// `false` when the WHERE has parameters not bound yet (a Parse): the bytes are an upper
    /// bound then, and the scan guardrail waits for the values (Execute).
    pub bound: bool,
}

/// Which engines run a plan: the one its route fixes, or the group's candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunsOn {
    /// It reads no lake table, or reads the catalog or `lakegate.*`: this embedded planner.
    Planner(String),
    /// The session pinned this engine (`lakegate.engine`, `x-lakegate-engine`).
    Pinned(String),
    /// The group's candidates, ordered by the router when the plan runs ([`Plan::order`]).
    Routed,
}

impl RunsOn {
    /// How the engines are chosen.
    pub fn route(&self) -> Route {
        match self {
            Self::Planner(_) => Route::Planner,
            Self::Pinned(_) => Route::Pinned,
            Self::Routed => Route::Routed,
        }
    }

    /// The engine the route fixes; `None`: the group's candidates.
    pub fn fixed(&self) -> Option<&str> {
        match self {
            Self::Planner(engine) | Self::Pinned(engine) => Some(engine),
            Self::Routed => None,
        }
    }
}

/// Steps 7–8's answer: the final profile, the group and how its engines are chosen.
#[derive(Debug)]
pub struct Decided {
    /// Shape and columns (the statement's, shared).
    pub profile: Arc<QueryProfile>,
    /// The final scan estimate.
    pub scan_bytes: u64,
    /// Its tables and columns, for the maintenance heat.
    pub read: Arc<lakegate_maintenance::telemetry::Read>,
    /// The group and the rule.
    pub decision: Decision,
    /// Which engines run it.
    pub runs_on: RunsOn,
}

/// The engines a plan tries, in order, as the router ordered them.
#[derive(Debug)]
pub struct Order {
    /// The group's candidates, by expected latency (what EXPLAIN ROUTE shows).
    pub candidates: Vec<Candidate>,
    /// Why the first candidate is first.
    pub pick: Pick,
    /// Engines (by name) in the order to try them.
    pub engines: Vec<String>,
}

/// Everything decided about one query.
pub struct Plan {
    /// What runs (shared with the kept plan of the same statement).
    pub rewrites: Arc<Rewrites>,
    /// The session's settings, with the catalog view this user may see.
    pub settings: Arc<Settings>,
    /// Shape and columns (the statement's, shared).
    pub profile: Arc<QueryProfile>,
    /// The final scan estimate.
    pub scan_bytes: u64,
    /// Its tables and columns, for the maintenance heat.
    pub read: Arc<lakegate_maintenance::telemetry::Read>,
    /// The group and the rule.
    pub decision: Decision,
    /// Table versions and system tables.
    pub resolved: Resolved,
    /// Which engines run it.
    pub runs_on: RunsOn,
    /// The mirror database that numbers output columns' origins (PostgreSQL clients with a
    /// catalog mirror, when [`Rewrites::origins`] is set).
    pub mirror: Option<Arc<crate::mirror::database::MirrorDb>>,
}

impl Plan {
    /// A plan of `rewrites` as `decided`, at `resolved`, for `settings`.
    pub fn new(
        rewrites: Arc<Rewrites>,
        decided: Decided,
        resolved: Resolved,
        settings: Arc<Settings>,
    ) -> Self {
        let Decided {
            profile,
            scan_bytes,
            read,
            decision,
            runs_on,
        } = decided;
        Self {
            rewrites,
            settings,
            profile,
            scan_bytes,
            read,
            decision,
            resolved,
            runs_on,
            mirror: None,
        }
    }

    /// How its engines are chosen.
    pub fn route(&self) -> Route {
        self.runs_on.route()
    }

    /// The engines to try now, in order: the fixed engine, or the group's candidates as the
    /// router orders them at this moment (asked only when the plan runs: a cached answer
    /// consults no router). A group lists only configured engines (the routing table keeps
    /// no other). `claim` as in [`Router::order`].
    pub fn order(&self, router: &Router, claim: bool) -> Order {
        let (candidates, pick) = self.candidates(router, claim);
        let engines = match self.runs_on.fixed() {
            Some(engine) => vec![engine.to_string()],
            None => candidates.iter().map(|c| c.engine.clone()).collect(),
        };
        Order {
            candidates,
            pick,
            engines,
        }
    }

    /// The engines to try, in order, for running the plan (see [`Plan::order`]; the router
    /// is not asked when the route fixes the engine).
    pub fn engines(&self, router: &Router) -> Vec<String> {
        match self.runs_on.fixed() {
            Some(engine) => vec![engine.to_string()],
            // The candidates' names moved out, not copied (this runs for every statement).
            None => self
                .candidates(router, true)
                .0
                .into_iter()
                .map(|c| c.engine)
                .collect(),
        }
    }

    /// The router's order of the group's candidates for this plan now.
    fn candidates(&self, router: &Router, claim: bool) -> (Vec<Candidate>, Pick) {
        router.order(
            &self.decision.group,
            self.profile.shape,
            self.scan_bytes(),
            claim,
        )
    }

    /// The statement as written, with PostgreSQL's output names.
    pub fn statement(&self) -> &Statement {
        &self.rewrites.statement
    }

    /// What engines run and the cache keys on.
    pub fn runs(&self) -> &Statement {
        self.rewrites.runs()
    }

    /// The scan estimate.
    pub fn scan_bytes(&self) -> u64 {
        self.scan_bytes
    }

    /// `schema` (the client's result schema) with its columns' catalog places.
    pub fn with_origins(
        &self,
        schema: &arrow::datatypes::SchemaRef,
    ) -> arrow::datatypes::SchemaRef {
        match &self.mirror {
            Some(db) => self.rewrites.annotate(schema, db.attributes()),
            None => schema.clone(),
        }
    }
}

impl GatewayService {
    /// Plans a query for this session: see the module documentation for the steps.
    ///
    /// # Errors
    /// 42501 for a table or group the user may not read or use, 54000 for a scan over the
    /// group's cap, unknown groups, tables or engines, catalog failures.
    pub(crate) fn plan<'a>(
        &'a self,
        statement: &'a Statement,
        params: Option<&'a ParamValues>,
        settings: Arc<Settings>,
        ctx: &'a StatementContext,
    ) -> futures::future::BoxFuture<'a, Result<Plan>> {
        // Boxed and erased: every frontend nests it, and its state is large.
        Box::pin(self.plan_boxed(statement, params, settings, ctx))
    }

    async fn plan_boxed(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        settings: Arc<Settings>,
        ctx: &StatementContext,
    ) -> Result<Plan> {
        let routing = self.router.table();
        let interned = self.tree_of(statement, ctx);
        let tree = interned.tree();
        let mut resolved = None;
        if let Some((kept, r)) = self.kept_resolved(tree, &settings, ctx, &routing).await? {
            if kept.at(&r.pins) {
                self.kept.count_reused();
                let chosen = &kept.chosen;
                return self
                    .decided(kept.rewrites.clone(), chosen, r, params, settings, ctx)
                    .await;
            }
            // A commit since: planned again at the versions just resolved.
            resolved = Some((kept.chosen.refs.clone(), kept.chosen.group.max_staleness, r));
        }
        // Boxed: planning from the start holds far more state than reusing a kept plan, and
        // inline it would be part of (and copied with) every plan's future.
        Box::pin(self.plan_anew(
            statement, params, settings, ctx, routing, &interned, resolved,
        ))
        .await
    }

    /// Steps 1–8 from the start (nothing kept for the statement, or a commit since): `resolved`
    /// holds the versions a kept plan's tables were just resolved at, reused when the plan
    /// reads the same tables.
    #[allow(clippy::too_many_arguments)]
    async fn plan_anew(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        settings: Arc<Settings>,
        ctx: &StatementContext,
        routing: Arc<crate::routing::rules::RoutingTable>,
        interned: &super::weight::Interned,
        resolved: Option<(References, std::time::Duration, Resolved)>,
    ) -> Result<Plan> {
        let tree = interned.tree();
        self.kept.count_made();
        let intent = intend(
            statement,
            &settings,
            ctx,
            &self.router,
            &self.security,
            |s, t| self.lake.peek(s, t).map(|t| estimate::total_bytes(&t)),
        )?;
        let Intent {
            statement,
            names,
            chosen,
        } = intent;
        let resolved = match resolved {
            Some((refs, staleness, r))
                if refs == chosen.refs && staleness == chosen.group.max_staleness =>
            {
                r
            }
            _ => {
                self.resolve(&chosen.refs, chosen.group.max_staleness, ctx)
                    .await?
            }
        };
        let masked = self.security.masks.apply(
            &statement,
            &self.security.masks_of(&ctx.user),
            &resolved.pins,
            settings.default_schema(),
        )?;
        let mut rewrites = Rewrites::new(statement, masked, names);
        let decided = self
            .decide_at(&rewrites.statement, params, &resolved, &chosen, ctx)
            .await?;
        // Arrow has no unbounded numeric: Flight SQL clients get the planner's decimal type.
        if ctx.frontend != super::context::Frontend::Flight {
            self.numeric_outputs(&mut rewrites, &resolved, &settings)
                .await;
            if self.mirror.is_some() {
                rewrites.origins =
                    super::origins::of(&rewrites.statement, settings.default_schema());
            }
        }
        let rewrites = Arc::new(rewrites);
        // Rules may choose the group by size: kept only when the size the group was chosen
        // by (the versions last seen) is these versions' own.
        let sized_here = chosen.profile.scan_bytes
            == Some(
                resolved
                    .pins
                    .iter()
                    .map(|(_, t)| estimate::total_bytes(t))
                    .sum(),
            );
        if sized_here && kept::keepable(&resolved) {
            let kept = Kept::new(
                &settings,
                ctx,
                routing,
                &resolved.pins,
                chosen,
                rewrites.clone(),
            );
            self.kept.keep(tree.clone(), interned.bytes(), kept);
        }
        Ok(self
            .with_mirror(Plan::new(rewrites, decided, resolved, settings))
            .await)
    }

    /// `statement` interned: as the frontend interned it when it is that statement
    /// ([`StatementContext::interned`]), else hashed now.
    pub(super) fn tree_of(
        &self,
        statement: &Statement,
        ctx: &StatementContext,
    ) -> super::weight::Interned {
        match ctx.interned.as_ref().and_then(|i| i.of(statement)) {
            Some(interned) => interned.clone(),
            None => self.cache.intern(statement),
        }
    }

    /// The plan kept for the statement interned as `tree` under these settings and this
    /// routing table, with the versions of its tables resolved now (`None`: none is kept).
    pub(super) async fn kept_resolved(
        &self,
        tree: &super::weight::Tree,
        settings: &Settings,
        ctx: &StatementContext,
        routing: &Arc<crate::routing::rules::RoutingTable>,
    ) -> Result<Option<(Arc<Kept>, Resolved)>> {
        let found = ctx.batch.kept_plan(tree, settings, ctx, routing);
        let Some(kept) = found.or_else(|| self.kept.find(tree, settings, ctx, routing)) else {
            return Ok(None);
        };
        ctx.batch.keep_plan(tree, &kept);
        let resolved = self
            .resolve(&kept.chosen.refs, kept.chosen.group.max_staleness, ctx)
            .await?;
        Ok(Some((kept, resolved)))
    }

    /// Steps 7–8 for a kept plan's rewrites at `resolved`.
    async fn decided(
        &self,
        rewrites: Arc<Rewrites>,
        chosen: &Chosen,
        resolved: Resolved,
        params: Option<&ParamValues>,
        settings: Arc<Settings>,
        ctx: &StatementContext,
    ) -> Result<Plan> {
        let decided = self
            .decide_at(&rewrites.statement, params, &resolved, chosen, ctx)
            .await?;
        Ok(self
            .with_mirror(Plan::new(rewrites, decided, resolved, settings))
            .await)
    }

    /// Steps 7–8 at `resolved`: the scan estimate with these parameters, the guardrail, the
    /// candidates and engines.
    async fn decide_at(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        resolved: &Resolved,
        chosen: &Chosen,
        ctx: &StatementContext,
    ) -> Result<Decided> {
        let estimate = self
            .estimate_for(statement, params, &resolved.pins, chosen, ctx)
            .await;
        decide(chosen, resolved, estimate, ctx, &self.engines.names())
    }

    /// `plan` with the mirror database that numbers its output columns, when it names any.
    async fn with_mirror(&self, mut plan: Plan) -> Plan {
        if plan.rewrites.origins.is_some()
            && let Some(mirror) = &self.mirror
        {
            plan.mirror = Some(mirror.database(&plan.settings.database).await);
        }
        plan
    }

    /// Step 9 (PostgreSQL clients): output columns that are numeric divisions or averages get
    /// PostgreSQL's quotient, computed from their operands (selected too). Best effort: a statement whose
    /// operands cannot be selected alongside (the planner refuses it) keeps the engine's
    /// quotient.
    async fn numeric_outputs(
        &self,
        rewrites: &mut Rewrites,
        resolved: &Resolved,
        settings: &Settings,
    ) {
        let candidates = super::numeric::candidates(rewrites.runs());
        if candidates.is_empty() || super::numeric::has_wildcard(rewrites.runs()) {
            return;
        }
        let Ok(plain) = self
            .planned_statement(rewrites.runs(), resolved, settings)
            .await
        else {
            return;
        };
        let with = super::numeric::with_operands(rewrites.runs(), &candidates);
        let Ok(described) = self.planned_statement(&with, resolved, settings).await else {
            return;
        };
        let visible = plain.schema.fields().len();
        if let Some(outputs) =
            super::numeric::NumericOutputs::decide(&candidates, &described.schema, visible)
        {
            rewrites.operands = Some(super::numeric::without_quotients(&with, &outputs));
            rewrites.numeric = Some(outputs);
        }
    }
}

/// Steps 1–4, before any I/O: output names, the tables read, the profile (sized by the
/// versions last seen), the routing group, and whether this user may read those tables in
/// that group.
///
/// # Errors
/// A malformed table name, an unusable session group, 42501.
pub fn intend(
    statement: &Statement,
    settings: &Settings,
    ctx: &StatementContext,
    router: &Router,
    security: &Security,
    peek_bytes: impl Fn(&str, &str) -> Option<u64>,
) -> Result<Intent> {
    let mut statement = statement.clone();
    let names = output_names::apply(&mut statement);
    let refs = classify::references(&statement, settings.default_schema())?;
    let mut profile = QueryProfile::of(&statement, &StatementKind::Query, &refs);
    profile.scan_bytes = Some(refs.lake.iter().filter_map(|(s, t)| peek_bytes(s, t)).sum());
    let setting = |name: &str| settings.values.get(name).map_or("", String::as_str);
    let asker = Asker {
        user: &ctx.user,
        application: setting("application_name"),
        tag: setting("lakegate.tag"),
    };
    let (rule, choice, group) = router.group(&asker, &profile, ctx.group.as_deref())?;
    // Before any catalog lookup, engine or cache: 42501 for what this user may not read.
    if !refs.lake.is_empty() {
        security.check(&ctx.user, &refs.lake, Some(&group.name))?;
    }
    Ok(Intent {
        statement,
        names,
        chosen: Chosen {
            refs,
            read: Arc::new(lakegate_maintenance::telemetry::Read {
                tables: profile.tables.clone(),
                filter_columns: profile.filter_columns.clone(),
                join_columns: profile.join_columns.clone(),
                group_columns: profile.group_columns.clone(),
            }),
            profile: Arc::new(profile),
            rule,
            choice,
            group: Arc::new(group),
        },
    })
}

/// Steps 7–8, after the I/O: the scan guardrail at the final estimate and the route (the
/// candidates are ordered when the plan runs, [`Plan::order`]; `configured` names the engines
/// this gateway runs, the embedded planner first).
///
/// # Errors
/// 54000 for a (bound) scan over the group's `max_scan_bytes`; a pinned engine that is not
/// configured.
pub fn decide(
    chosen: &Chosen,
    resolved: &Resolved,
    estimate: Estimate,
    ctx: &StatementContext,
    configured: &[&str],
) -> Result<Decided> {
    let group = &chosen.group;
    if estimate.bound && group.max_scan_bytes > 0 && estimate.bytes > group.max_scan_bytes {
        return Err(Error::Guardrail {
            what: format!(
                "estimated scan of {} exceeds routing group \"{}\"'s max_scan_bytes ({}): \
                 filter on partition or sorted columns to read less",
                lakegate_engines::units::human_bytes(estimate.bytes),
                group.name,
                lakegate_engines::units::human_bytes(group.max_scan_bytes)
            ),
        });
    }
    let profile = chosen.profile.clone();
    let decision = Decision {
        rule: chosen.rule.clone(),
        reason: chosen.choice,
        group: group.clone(),
    };
    let planner_only =
        resolved.pins.is_empty() || resolved.catalog || !resolved.system_tables.is_empty();
    let runs_on = if planner_only {
        let planner = configured.first().copied().unwrap_or("datafusion");
        RunsOn::Planner(planner.to_string())
    } else if let Some(name) = ctx.engine.as_deref() {
        if !configured.contains(&name) {
            return Err(Error::EngineNotConfigured {
                name: name.to_string(),
                available: configured.join(", "),
            });
        }
        RunsOn::Pinned(name.to_string())
    } else {
        RunsOn::Routed
    };
    Ok(Decided {
        profile,
        scan_bytes: estimate.bytes,
        read: chosen.read.clone(),
        decision,
        runs_on,
    })
}

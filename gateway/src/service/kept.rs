//! Plans kept across executions of one statement. Planning a statement decides most of its
//! plan from things that rarely change: its syntax (output names, the tables it reads, its
//! profile), the session (user, settings, pinned group and engine), the routing table, and
//! the tables' versions (masked columns, PostgreSQL's numeric outputs, the planner's
//! description). Those parts are kept here, per statement, with exactly what they were decided
//! from; a later plan of the same statement reuses them only when every one of those is the
//! same — the tables' versions are resolved again for every statement, so a commit is seen as
//! before — and decides again what moves per execution: the scan estimate with the bound
//! parameters and the guardrail (the candidates are ordered by observed latency only when the
//! plan runs, [`super::plan::Plan::order`]).
//!
//! The statement is the key (interned: one hash of its tree per lookup); a few variants are
//! kept per statement (sessions with different settings or users running it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lakegate_engines::{Pins, Settings};

use super::StatementContext;
use super::context::Frontend;
use super::plan::{Chosen, Rewrites};
use super::weight::{self, Tree};
use crate::routing::rules::RoutingTable;

/// Bytes of kept plans (estimated: the statement's tree and the rewrites', per variant).
const KEPT_BYTES: u64 = 32 << 20;
/// Variants kept per statement; a new one replaces the oldest.
const VARIANTS: usize = 4;

/// What a kept plan was decided from, besides its statement.
struct MadeFor {
    user: String,
    frontend: Frontend,
    group: Option<String>,
    engine: Option<String>,
    prune_above: u64,
    settings_user: String,
    database: String,
    search_path: Vec<String>,
    time_zone: String,
    /// Every setting (`application_name` and `lakegate.tag` choose groups; the planner reads
    /// the rest): held, so a session's unchanged map is recognised by its address.
    values: Arc<BTreeMap<String, String>>,
    /// The routing table in force (held: a reload makes a new one).
    routing: Arc<RoutingTable>,
}

impl MadeFor {
    fn new(settings: &Settings, ctx: &StatementContext, routing: Arc<RoutingTable>) -> Self {
        Self {
            user: ctx.user.clone(),
            frontend: ctx.frontend,
            group: ctx.group.clone(),
            engine: ctx.engine.clone(),
            prune_above: ctx.prune_above,
            settings_user: settings.user.clone(),
            database: settings.database.clone(),
            search_path: settings.search_path.clone(),
            time_zone: settings.time_zone.clone(),
            values: settings.values.clone(),
            routing,
        }
    }

    fn view(&self) -> View<'_> {
        View {
            user: &self.user,
            frontend: self.frontend,
            group: self.group.as_deref(),
            engine: self.engine.as_deref(),
            prune_above: self.prune_above,
            settings_user: &self.settings_user,
            database: &self.database,
            search_path: &self.search_path,
            time_zone: &self.time_zone,
            values: &self.values,
            routing: &self.routing,
        }
    }
}

/// What a plan is decided from besides its statement, borrowed: a kept plan's, or a
/// statement's about to be planned. Equal views decide equal plans at equal versions.
struct View<'a> {
    user: &'a str,
    frontend: Frontend,
    group: Option<&'a str>,
    engine: Option<&'a str>,
    prune_above: u64,
    settings_user: &'a str,
    database: &'a str,
    search_path: &'a [String],
    time_zone: &'a str,
    values: &'a Arc<BTreeMap<String, String>>,
    routing: &'a Arc<RoutingTable>,
}

impl<'a> View<'a> {
    fn of(
        settings: &'a Settings,
        ctx: &'a StatementContext,
        routing: &'a Arc<RoutingTable>,
    ) -> Self {
        Self {
            user: &ctx.user,
            frontend: ctx.frontend,
            group: ctx.group.as_deref(),
            engine: ctx.engine.as_deref(),
            prune_above: ctx.prune_above,
            settings_user: &settings.user,
            database: &settings.database,
            search_path: &settings.search_path,
            time_zone: &settings.time_zone,
            values: &settings.values,
            routing,
        }
    }
}

impl PartialEq for View<'_> {
    fn eq(&self, other: &Self) -> bool {
        // The cheap and likely-different first; a session's settings map by address, else by
        // content (another session, or a Flight SQL call's fresh one).
        Arc::ptr_eq(self.routing, other.routing)
            && self.user == other.user
            && self.frontend == other.frontend
            && self.group == other.group
            && self.engine == other.engine
            && self.prune_above == other.prune_above
            && self.settings_user == other.settings_user
            && self.database == other.database
            && self.search_path == other.search_path
            && self.time_zone == other.time_zone
            && (Arc::ptr_eq(self.values, other.values) || self.values == other.values)
    }
}

/// One kept plan: what it was made for, at which versions, and what it decided.
pub(crate) struct Kept {
    made_for: MadeFor,
    /// `(schema, table, metadata location)` of every table read, in `chosen.refs` order.
    versions: Vec<(String, String, String)>,
    /// The tables, profile and group.
    pub(crate) chosen: Chosen,
    /// What runs.
    pub(crate) rewrites: Arc<Rewrites>,
}

impl Kept {
    /// A plan decided for `settings` and `ctx` under `routing`, at `pins`.
    pub(crate) fn new(
        settings: &Settings,
        ctx: &StatementContext,
        routing: Arc<RoutingTable>,
        pins: &Pins,
        chosen: Chosen,
        rewrites: Arc<Rewrites>,
    ) -> Self {
        Self {
            made_for: MadeFor::new(settings, ctx, routing),
            versions: versions(pins),
            chosen,
            rewrites,
        }
    }

    /// Whether it was made for exactly `settings` and `ctx` under `routing`.
    pub(crate) fn made_for(
        &self,
        settings: &Settings,
        ctx: &StatementContext,
        routing: &Arc<RoutingTable>,
    ) -> bool {
        self.made_for.view() == View::of(settings, ctx, routing)
    }

    /// Whether it was decided at exactly `pins`' versions.
    pub(crate) fn at(&self, pins: &Pins) -> bool {
        let mut n = 0;
        for ((schema, table), pinned) in pins.iter() {
            n += 1;
            let kept = self
                .versions
                .iter()
                .find(|(s, t, _)| s == schema && t == table);
            match kept {
                Some((_, _, location)) if *location == pinned.metadata_location => {}
                _ => return false,
            }
        }
        n == self.versions.len()
    }

    /// The heap it holds, estimated from `tree_bytes` (its statement's tree: the rewrites are
    /// that statement with a few nodes changed), without printing anything.
    fn weight(&self, tree_bytes: u64) -> u64 {
        let trees = 1
            + u64::from(self.rewrites.masked.is_some())
            + u64::from(self.rewrites.operands.is_some());
        weight::ENTRY_BYTES
            + trees * tree_bytes
            + self
                .versions
                .iter()
                .map(|(s, t, l)| weight::string(s) + weight::string(t) + weight::string(l))
                .sum::<u64>()
    }
}

/// The `(schema, table, metadata location)` of every pinned table.
fn versions(pins: &Pins) -> Vec<(String, String, String)> {
    pins.iter()
        .map(|((s, t), r)| (s.clone(), t.clone(), r.metadata_location.clone()))
        .collect()
}

/// A statement's kept variants, newest first, with their estimated heap.
#[derive(Clone)]
struct Variants {
    plans: Arc<[Arc<Kept>]>,
    bytes: u64,
}

/// The kept plans, by statement.
pub(crate) struct KeptPlans {
    plans: moka::sync::Cache<Tree, Variants, foldhash::fast::RandomState>,
    /// Plans that reused a kept one (steps 7–8 only).
    reused: AtomicU64,
    /// Plans made from the start (and kept, when [`keepable`]).
    made: AtomicU64,
}

impl Default for KeptPlans {
    fn default() -> Self {
        Self {
            plans: moka::sync::Cache::builder()
                .max_capacity(KEPT_BYTES)
                .weigher(|_: &Tree, v: &Variants| u32::try_from(v.bytes).unwrap_or(u32::MAX))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            reused: AtomicU64::new(0),
            made: AtomicU64::new(0),
        }
    }
}

impl KeptPlans {
    /// The plan kept for `statement` (interned as `tree`) made for exactly these settings,
    /// context and routing table (its versions are the caller's to check).
    pub(crate) fn find(
        &self,
        tree: &Tree,
        settings: &Settings,
        ctx: &StatementContext,
        routing: &Arc<RoutingTable>,
    ) -> Option<Arc<Kept>> {
        let variants = self.plans.get(tree)?;
        let asked = View::of(settings, ctx, routing);
        variants
            .plans
            .iter()
            .find(|k| k.made_for.view() == asked)
            .cloned()
    }

    /// Keeps `kept` for the statement interned as `tree` (`tree_bytes`: its estimated heap),
    /// replacing the variant made for the same settings, else the oldest past [`VARIANTS`].
    pub(crate) fn keep(&self, tree: Tree, tree_bytes: u64, kept: Kept) {
        let kept = Arc::new(kept);
        let mut plans = vec![kept.clone()];
        if let Some(old) = self.plans.get(&tree) {
            plans.extend(
                old.plans
                    .iter()
                    .filter(|k| k.made_for.view() != kept.made_for.view())
                    .take(VARIANTS - 1)
                    .cloned(),
            );
        }
        let bytes = tree_bytes + plans.iter().map(|k| k.weight(tree_bytes)).sum::<u64>();
        self.plans.insert(
            tree,
            Variants {
                plans: plans.into(),
                bytes,
            },
        );
    }

    /// Counts a plan that reused a kept one.
    pub(crate) fn count_reused(&self) {
        self.reused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a plan made from the start.
    pub(crate) fn count_made(&self) {
        self.made.fetch_add(1, Ordering::Relaxed);
    }

    /// `plans_kept` (statements with kept plans), `plans_reused` and `plans_made`, for
    /// `/metrics` beside the result cache's.
    pub(crate) fn stats(&self) -> [(&'static str, u64); 3] {
        self.plans.run_pending_tasks();
        [
            ("plans_kept", self.plans.entry_count()),
            ("plans_reused", self.reused.load(Ordering::Relaxed)),
            ("plans_made", self.made.load(Ordering::Relaxed)),
        ]
    }
}

/// Whether a plan at `resolved` may be kept: it reads lake tables only (system tables are
/// made again for every read; catalog reads are the planner's and cheap to plan).
pub(crate) fn keepable(resolved: &super::plan::Resolved) -> bool {
    !resolved.pins.is_empty() && resolved.system_tables.is_empty() && !resolved.catalog
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::plan::{Rewrites, intend};
    use crate::service::plan_tests::{ctx, parse, pins, router, security, settings, table};

    const SQL: &str = "SELECT * FROM orders WHERE id = $1";

    /// A plan of [`SQL`] kept for `settings` and `ctx` at `tables`.
    fn kept(
        settings: &Settings,
        ctx: &StatementContext,
        routing: &Arc<RoutingTable>,
        tables: &[lakegate_engines::ResolvedTable],
    ) -> Kept {
        // Decided as alice (who may read orders); kept as made for `ctx`.
        let intent = intend(
            &parse(SQL),
            settings,
            &super::super::plan_tests::ctx("alice"),
            &router(),
            &security(),
            |_, _| None,
        )
        .expect("intent");
        let rewrites = Rewrites::new(intent.statement, None, intent.names);
        Kept::new(
            settings,
            ctx,
            routing.clone(),
            &pins(tables),
            intent.chosen,
            Arc::new(rewrites),
        )
    }

    fn tree() -> Tree {
        Tree::new(Arc::new(parse(SQL)))
    }

    #[test]
    fn a_kept_plan_is_found_only_for_what_it_was_made_for() {
        let plans = KeptPlans::default();
        let routing = router().table();
        let (alice, psql) = (ctx("alice"), settings("psql"));
        let orders = table("public", "orders", &["id"]);
        plans.keep(tree(), 0, kept(&psql, &alice, &routing, &[orders]));
        let found = |s: &Settings, c: &StatementContext, r: &Arc<RoutingTable>| {
            plans.find(&tree(), s, c, r).is_some()
        };
        assert!(found(&psql, &alice, &routing));
        // Another session's map with the same settings (by content, not address).
        assert!(found(&settings("psql"), &alice, &routing));
        // Another user, application (rules read it), search path, time zone, pinned group
        // or engine, frontend, or a reloaded routing table: not this plan.
        assert!(!found(&psql, &ctx("bob"), &routing));
        assert!(!found(&settings("bot-7"), &alice, &routing));
        let elsewhere = Settings {
            search_path: vec!["sales".into()],
            ..settings("psql")
        };
        assert!(!found(&elsewhere, &alice, &routing));
        let paris = Settings {
            time_zone: "Europe/Paris".into(),
            ..settings("psql")
        };
        assert!(!found(&paris, &alice, &routing));
        let grouped = ctx("alice").with_routing(Some("agents"), None);
        assert!(!found(&psql, &grouped, &routing));
        let pinned = ctx("alice").with_routing(None, Some("duckdb"));
        assert!(!found(&psql, &pinned, &routing));
        let flight = StatementContext::new(
            1,
            "alice",
            Frontend::Flight,
            tokio_util::sync::CancellationToken::new(),
            None,
        );
        assert!(!found(&psql, &flight, &routing));
        assert!(!found(&psql, &alice, &router().table()));
        // Another statement.
        let other = Tree::new(Arc::new(parse("SELECT * FROM orders")));
        assert!(plans.find(&other, &psql, &alice, &routing).is_none());
    }

    #[test]
    fn a_kept_plan_is_at_exactly_its_tables_versions() {
        let routing = router().table();
        let orders = table("public", "orders", &["id"]);
        let k = kept(
            &settings("psql"),
            &ctx("alice"),
            &routing,
            std::slice::from_ref(&orders),
        );
        assert!(k.at(&pins(std::slice::from_ref(&orders))));
        let committed: lakegate_engines::ResolvedTable = lakegate_engines::TableVersion {
            metadata_location: "memory://public/orders/metadata/v2.metadata.json".into(),
            ..(*orders).clone()
        }
        .into();
        assert!(!k.at(&pins(&[committed])), "a commit since");
        let customers = table("public", "customers", &["id"]);
        assert!(!k.at(&pins(&[orders, customers])), "another table too");
        assert!(!k.at(&pins(&[])), "none of its tables");
    }

    #[test]
    fn variants_replace_their_own_session_and_the_oldest() {
        let plans = KeptPlans::default();
        let routing = router().table();
        let orders = table("public", "orders", &["id"]);
        let users = ["alice", "bob", "carol", "dave", "erin"];
        for user in users {
            let k = kept(
                &settings("psql"),
                &ctx(user),
                &routing,
                std::slice::from_ref(&orders),
            );
            plans.keep(tree(), 0, k);
        }
        let has = |user: &str| {
            plans
                .find(&tree(), &settings("psql"), &ctx(user), &routing)
                .is_some()
        };
        // Four variants: the oldest (alice) went.
        assert_eq!(users.map(has), [false, true, true, true, true]);
        // Kept again for the same session: replaced, not added (bob stays).
        let again = kept(&settings("psql"), &ctx("erin"), &routing, &[orders]);
        plans.keep(tree(), 0, again);
        assert_eq!(users.map(has), [false, true, true, true, true]);
        assert_eq!(plans.stats()[0], ("plans_kept", 1));
    }
}

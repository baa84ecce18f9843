//! Plans kept across executions: the embedded engine's logical plan of a statement (before its
//! parameters are bound), with the session state it was planned in, for the same statement,
//! session settings and pinned table versions.
//!
//! A point lookup an application sends a thousand times with different ids is planned once per
//! table version: each execution binds its parameters into the kept plan, then analyses,
//! optimises and runs it as before — so an answer is the one a fresh plan gives (the
//! PostgreSQL rewrites that read literal values run after binding, as they always did). Where
//! no rule can read a parameter as a value, the plan is also analysed and optimised once, with
//! its placeholders in place, and an execution binds into that and only plans it physically
//! ([`crate::optimized`]).
//!
//! Kept are only plans of statements executed before (one with its literals in its text is
//! seldom repeated, and keeping costs a copy of the session state), whose every table is one of
//! the statement's pins (a table resolved while planning could move on) and whose functions are
//! immutable (`now()` is folded at planning). Kept plans idle out quickly: they hold their
//! tables (an accelerated copy among them) alive.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use datafusion::execution::TaskContext;
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::Statement;

use crate::engine::{EngineRequest, Pins, Settings};
use crate::optimized::Optimized;

/// Plans kept, at most.
const CAPACITY: u64 = 512;
/// A plan unused this long is let go (with the table versions it holds).
const IDLE: Duration = Duration::from_secs(10);

/// One kept plan and what it was planned for.
pub(crate) struct Kept {
    statement: Statement,
    settings: Settings,
    versions: Vec<Version>,
    /// The statement's plan, parameters unbound.
    pub plan: LogicalPlan,
    /// The state it was planned in (functions, settings, the pinned tables).
    pub state: SessionState,
    /// The state's task context, built once.
    pub task: Arc<TaskContext>,
    /// The plan analysed and optimised before binding, when that is exact
    /// ([`crate::optimized`]).
    pub optimized: Option<Optimized>,
}

/// A pinned table's version: `(schema, name, metadata location, snapshot)`.
type Version = (String, String, String, Option<i64>);

/// Statement keys seen once, remembered (a plan is kept at its second execution).
const SEEN: u64 = 8192;

/// The kept plans of one engine.
pub(crate) struct PlanCache {
    plans: moka::sync::Cache<u64, Arc<Kept>>,
    /// Keys executed once: a statement whose literals are written into its text (each one
    /// different) is never kept, so keeping costs it nothing but this entry.
    seen: moka::sync::Cache<u64, ()>,
}

impl Default for PlanCache {
    fn default() -> Self {
        Self {
            plans: moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_idle(IDLE)
                .build(),
            seen: moka::sync::Cache::builder()
                .max_capacity(SEEN)
                .time_to_idle(IDLE)
                .build(),
        }
    }
}

impl PlanCache {
    /// The key `request` is kept under, when it may be kept at all.
    pub(crate) fn key(&self, request: &EngineRequest<'_>) -> Option<u64> {
        cacheable(request).then(|| key(request))
    }

    /// The plan kept under `key`, if it was planned for exactly `request`'s statement,
    /// settings and pins.
    pub(crate) fn get(&self, key: u64, request: &EngineRequest<'_>) -> Option<Arc<Kept>> {
        let kept = self.plans.get(&key)?;
        (kept.statement == *request.statement
            && same_settings(&kept.settings, request.settings)
            && same_versions(&kept.versions, request.pins))
        .then_some(kept)
    }

    /// Whether `plan` of `request` should be kept now: it scans only pinned tables, calls
    /// only immutable functions, and its key was executed before.
    pub(crate) fn admits(&self, key: u64, request: &EngineRequest<'_>, plan: &LogicalPlan) -> bool {
        if self.seen.get(&key).is_none() {
            self.seen.insert(key, ());
            return false;
        }
        scans_only_pins(plan, request.pins, request.settings) && immutable(plan)
    }

    /// Keeps `plan` (planned in `state`) for `request` under `key` (see [`PlanCache::admits`]).
    pub(crate) fn insert(
        &self,
        key: u64,
        request: &EngineRequest<'_>,
        plan: &LogicalPlan,
        state: SessionState,
    ) -> Arc<Kept> {
        let task = state.task_ctx();
        let optimized = Optimized::of(plan, &state);
        let kept = Arc::new(Kept {
            statement: request.statement.clone(),
            settings: request.settings.clone(),
            versions: versions(request.pins),
            plan: plan.clone(),
            state,
            task,
            optimized,
        });
        self.plans.insert(key, kept.clone());
        kept
    }
}

/// Statements reading lakegate's own tables or listing the catalog are planned every time
/// (their tables are materialised per statement).
fn cacheable(request: &EngineRequest<'_>) -> bool {
    request.system_tables.is_empty() && !request.lists_catalog && !request.pins.is_empty()
}

fn key(request: &EngineRequest<'_>) -> u64 {
    use std::hash::BuildHasher;
    // foldhash: a key hashes a whole syntax tree per execution, and SipHash costs more per node.
    // Seeded per process; a collision only costs a plan (a kept plan's statement is compared).
    static KEYS: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    request.statement.hash(&mut h);
    let s = request.settings;
    (
        &s.user,
        &s.database,
        &s.search_path,
        &s.time_zone,
        &*s.values,
    )
        .hash(&mut h);
    s.visible.as_ref().map(|v| &v.key).hash(&mut h);
    for ((schema, name), t) in request.pins.iter() {
        (schema, name, &t.metadata_location, t.snapshot_id).hash(&mut h);
    }
    h.finish()
}

fn same_settings(a: &Settings, b: &Settings) -> bool {
    a.user == b.user
        && a.database == b.database
        && a.search_path == b.search_path
        && a.time_zone == b.time_zone
        && a.values == b.values
        && a.visible.as_ref().map(|v| &v.key) == b.visible.as_ref().map(|v| &v.key)
}

/// Whether `kept` are exactly `pins`' versions (compared in place: this runs per execution).
fn same_versions(kept: &[Version], pins: &Pins) -> bool {
    let mut pinned = pins.iter();
    kept.iter().all(|(schema, name, location, snapshot)| {
        pinned.next().is_some_and(|((s, n), t)| {
            s == schema
                && n == name
                && &t.metadata_location == location
                && t.snapshot_id == *snapshot
        })
    }) && pinned.next().is_none()
}

fn versions(pins: &Pins) -> Vec<Version> {
    pins.iter()
        .map(|((schema, name), t)| {
            (
                schema.clone(),
                name.clone(),
                t.metadata_location.clone(),
                t.snapshot_id,
            )
        })
        .collect()
}

/// Whether every table `plan` scans (subqueries included) is one of `pins` (an unqualified
/// name is in the session's default schema).
fn scans_only_pins(plan: &LogicalPlan, pins: &Pins, settings: &Settings) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut only = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let schema = scan
                .table_name
                .schema()
                .unwrap_or_else(|| settings.default_schema());
            let pinned = pins.get(schema, scan.table_name.table()).is_some();
            if !pinned {
                only = false;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    only
}

/// Whether every function `plan` calls gives the same answer at any time: `now()`,
/// `current_date` and `random()` are evaluated when a statement is planned (DataFusion folds
/// them at its start time), so a plan calling them is never kept.
fn immutable(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Expr, Volatility};
    let mut immutable = true;
    let _ = plan.apply_with_subqueries(|node| {
        for expr in node.expressions() {
            let _ = expr.apply(|e| {
                let fixed = match e {
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    Expr::ScalarVariable(..) => false,
                    _ => true,
                };
                if fixed {
                    Ok(TreeNodeRecursion::Continue)
                } else {
                    immutable = false;
                    Ok(TreeNodeRecursion::Stop)
                }
            });
        }
        Ok(if immutable {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    immutable
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn plan(sql: &str) -> LogicalPlan {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (id BIGINT, name TEXT)")
            .await
            .expect("create");
        ctx.sql(sql).await.expect("plan").into_unoptimized_plan()
    }

    #[tokio::test]
    async fn plans_calling_the_clock_or_chance_are_never_kept() {
        assert!(immutable(
            &plan("SELECT id, upper(name) FROM t WHERE id = $1").await
        ));
        assert!(!immutable(&plan("SELECT now(), id FROM t").await));
        assert!(!immutable(
            &plan("SELECT id FROM t WHERE id > random()").await
        ));
        assert!(
            !immutable(
                &plan("SELECT id FROM t WHERE id IN (SELECT id FROM t WHERE name < now()::text)")
                    .await
            ),
            "a subquery's functions count"
        );
    }

    #[tokio::test]
    async fn a_plan_of_a_table_nobody_pinned_is_not_kept() {
        let scans_t = plan("SELECT id FROM t").await;
        let settings = Settings {
            search_path: vec!["public".into()],
            ..Settings::default()
        };
        assert!(!scans_only_pins(&scans_t, &Pins::default(), &settings));
    }
}

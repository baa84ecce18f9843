//! The router: picks a statement's routing group by the rules, then orders the group's
//! candidate engines by the latency observed for the statement's shape and size (exploring a
//! little, and retrying a candidate whose observations have gone stale), skipping engines
//! whose circuit breaker is open. The query service tries them in that order (failover)
//! inside the group's admission slots, ordering them only when a statement runs.
//!
//! - [`rules`] — groups and rules from `routing-rules/*.toml`, validated, reloaded on change.
//! - [`stats`] — observed latency per (engine, shape, size bucket), circuit breakers.
//! - [`admission`] — per-group concurrency and queue.

pub mod admission;
pub mod rules;
pub mod stats;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tracing::{error, info};

use crate::error::{Error, Result};
use crate::profile::{QueryProfile, Shape};
use admission::Admission;
use rules::{Asker, GroupSpec, RoutingTable};
pub use stats::Outcome;
use stats::{BreakerState, Expected, Stats, size_bucket};

/// A candidate with fewer observations than this may be explored whatever its estimate.
const MIN_SAMPLES: u64 = 3;
/// Otherwise only candidates expected within this factor of the best are explored.
const EXPLORE_WITHIN: f64 = 4.0;
/// Candidates expected within this factor of the fastest, or within [`TIE_MS`] of it, are as
/// fast as it: the group's order of preference decides between them. Differences that small
/// are noise, and moving between engines on noise costs each its warm caches.
const TIE_WITHIN: f64 = 1.2;
/// See [`TIE_WITHIN`] (sub-millisecond lookups differ by this much from run to run).
const TIE_MS: f64 = 0.2;

/// One candidate engine for a statement, with what the router expects of it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The engine.
    pub engine: String,
    /// Expected latency (ms): observed, or the cold-start guess.
    pub expected_ms: f64,
    /// Observations behind the estimate.
    pub samples: u64,
    /// Its breaker.
    pub breaker: BreakerState,
    /// Observed before, but not for a while: due a retry.
    pub stale: bool,
}

/// Why the first candidate is first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The lowest expected latency (or the breaker's probe).
    Best,
    /// Picked at random to explore (the group's `explore` share).
    Explored,
    /// Its observations had gone stale: retried once to refresh them.
    Retried,
}

/// Why a statement runs in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupChoice {
    /// A routing rule matched.
    Rule,
    /// No rule matched: the default group.
    Default,
    /// The session asked for it (`SET lakegate.group`, `x-lakegate-group`).
    Session,
}

impl GroupChoice {
    /// `rule`, `default`, `session`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rule => "rule",
            Self::Default => "default",
            Self::Session => "session",
        }
    }
}

/// The router's decision for one statement.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The rule that matched (`None`: the default group, or the session's choice).
    pub rule: Option<String>,
    /// Why this group.
    pub reason: GroupChoice,
    /// The group (its candidates are ordered when the statement runs: [`Router::order`]).
    pub group: std::sync::Arc<GroupSpec>,
}

/// The router, shared by every session.
#[derive(Debug)]
pub struct Router {
    table: RwLock<Arc<RoutingTable>>,
    admissions: Mutex<HashMap<String, Arc<Admission>>>,
    /// What has been observed.
    pub stats: Stats,
    rules_dir: Option<PathBuf>,
    configured: Vec<String>,
    rng: AtomicU64,
}

impl Router {
    /// A router over the rules in `rules_dir` (`None`: one default group with every engine).
    ///
    /// # Errors
    /// Invalid rules (see [`RoutingTable::load`]).
    pub fn new(
        rules_dir: Option<&Path>,
        configured: &[&str],
        default_engine: &str,
    ) -> Result<Self> {
        let table = match rules_dir {
            Some(dir) => RoutingTable::load(dir, configured)?,
            None => RoutingTable::single_group(configured, default_engine),
        };
        let mut router = Self::with_table(table, configured);
        router.rules_dir = rules_dir.map(Path::to_path_buf);
        Ok(router)
    }

    /// A router over `table` (rules already loaded), for `configured` engines; it does not
    /// watch a folder.
    pub fn with_table(table: RoutingTable, configured: &[&str]) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        Self {
            table: RwLock::new(Arc::new(table)),
            admissions: Mutex::new(HashMap::new()),
            stats: Stats::default(),
            rules_dir: None,
            configured: configured.iter().map(|s| s.to_string()).collect(),
            rng: AtomicU64::new(seed),
        }
    }

    /// The groups and rules in force.
    pub fn table(&self) -> Arc<RoutingTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The group a statement runs in: the session's choice, else the first matching rule's,
    /// else the default.
    ///
    /// # Errors
    /// A session group that does not exist or may not be chosen.
    pub fn group(
        &self,
        asker: &Asker<'_>,
        profile: &QueryProfile,
        session_group: Option<&str>,
    ) -> Result<(Option<String>, GroupChoice, GroupSpec)> {
        let table = self.table();
        if let Some(name) = session_group {
            return match table.groups.get(name) {
                Some(g) if g.selectable => Ok((None, GroupChoice::Session, g.clone())),
                Some(_) => Err(Error::GroupNotAllowed {
                    name: name.to_string(),
                    why: "the rules do not let sessions choose it".into(),
                }),
                None => Err(Error::GroupNotAllowed {
                    name: name.to_string(),
                    why: format!(
                        "no such group (groups: {})",
                        table.groups.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                }),
            };
        }
        match table.matching(asker, profile) {
            Some(rule) => {
                let group = table.groups.get(&rule.spec.group).cloned().ok_or_else(|| {
                    Error::Unsupported {
                        what: format!("rule {} names a missing group", rule.spec.name),
                    }
                })?;
                Ok((Some(rule.spec.name.clone()), GroupChoice::Rule, group))
            }
            None => {
                let group = table
                    .groups
                    .get(&table.default_group)
                    .cloned()
                    .ok_or_else(|| Error::Unsupported {
                        what: "the default group is missing".into(),
                    })?;
                Ok((None, GroupChoice::Default, group))
            }
        }
    }

    /// The group's candidates for `shape` at `bytes`, in the order to try them. `claim`: the
    /// statement will run on them, so it takes a stale candidate's retry (see
    /// [`Stats::claim_revisit`]); without it (EXPLAIN ROUTE) a retry that is due is shown, not
    /// taken.
    pub fn order(
        &self,
        group: &GroupSpec,
        shape: Shape,
        bytes: u64,
        claim: bool,
    ) -> (Vec<Candidate>, Pick) {
        let mut candidates: Vec<Candidate> = group
            .engines
            .iter()
            .map(|e| {
                let Expected { ms, samples, stale } = self.stats.expected(e, shape, bytes);
                Candidate {
                    engine: e.clone(),
                    expected_ms: ms,
                    samples,
                    breaker: self.stats.breaker(e).state(),
                    stale,
                }
            })
            .collect();
        // Stable: ties keep the group's order of preference. An engine whose breaker's
        // cool-down passed goes first, as the probe (if it fails, the next one answers).
        let probe =
            |c: &Candidate| c.breaker == BreakerState::Open && self.stats.probe_due(&c.engine);
        for c in candidates.iter_mut().filter(|c| probe(c)) {
            c.breaker = BreakerState::Probe;
        }
        let is = |c: &Candidate, s: BreakerState| c.breaker == s;
        candidates.sort_by(|a, b| {
            (!is(a, BreakerState::Probe))
                .cmp(&!is(b, BreakerState::Probe))
                .then(is(a, BreakerState::Open).cmp(&is(b, BreakerState::Open)))
                .then(a.expected_ms.total_cmp(&b.expected_ms))
        });
        let probing = candidates
            .first()
            .is_some_and(|c| c.breaker == BreakerState::Probe);
        if !probing {
            prefer_in_group_order(&mut candidates, &group.engines);
        }
        // Explore only what could plausibly win or is barely known: sending a 5 ms lookup to
        // a 200 ms engine "to learn" costs more than it teaches.
        let best = candidates.first().map_or(0.0, |c| c.expected_ms);
        let eligible: Vec<usize> = candidates
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, c)| {
                c.breaker != BreakerState::Open
                    && (c.samples < MIN_SAMPLES || c.expected_ms <= best * EXPLORE_WITHIN)
            })
            .map(|(i, _)| i)
            .collect();
        if probing {
            return (candidates, Pick::Best);
        }
        // A plausible candidate not observed for a while is retried by one statement, whatever
        // `explore` says: its estimate is old news (it may have been slow once, or recovered).
        let retry = eligible.iter().copied().find(|&i| {
            let c = &candidates[i];
            c.breaker == BreakerState::Closed
                && c.stale
                && (!claim || self.stats.claim_revisit(&c.engine, shape, bytes))
        });
        if let Some(i) = retry {
            let chosen = candidates.remove(i);
            candidates.insert(0, chosen);
            return (candidates, Pick::Retried);
        }
        if !eligible.is_empty() && group.explore > 0.0 && self.random() < group.explore {
            let pick = eligible[(self.random() * eligible.len() as f64) as usize % eligible.len()];
            let chosen = candidates.remove(pick);
            candidates.insert(0, chosen);
            return (candidates, Pick::Explored);
        }
        (candidates, Pick::Best)
    }

    /// The admission (slots and queue) of `group`, created on first use and replaced when a
    /// reload changes its limits (queries already admitted keep their slots).
    pub fn admission(&self, group: &GroupSpec) -> Arc<Admission> {
        let mut admissions = self.admissions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = admissions.get(&group.name)
            && a.same_limits(
                group.max_concurrent,
                group.queue_length,
                group.queue_timeout,
            )
        {
            return a.clone();
        }
        let a = Arc::new(Admission::new(
            &group.name,
            group.max_concurrent,
            group.queue_length,
            group.queue_timeout,
        ));
        admissions.insert(group.name.clone(), a.clone());
        a
    }

    /// Running and queued queries per group.
    pub fn load_by_group(&self) -> Vec<(String, usize, usize)> {
        let admissions = self.admissions.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = admissions
            .iter()
            .map(|(g, a)| (g.clone(), a.running(), a.queued()))
            .collect();
        v.sort();
        v
    }

    /// Learns from a kept history (after a restart): every successful query that ran on an
    /// engine counts as an observation, so routing does not start cold. Returns how many.
    pub fn learn_from(&self, history: &[crate::observe::history::QueryRecord]) -> usize {
        let mut n = 0;
        for r in history {
            let Some(shape) = r.shape else {
                continue;
            };
            if r.engine.is_empty() || r.error.is_some() || shape == Shape::Metadata {
                continue;
            }
            self.record(&r.engine, shape, r.scan_bytes, Outcome::Answered(r.millis));
            n += 1;
        }
        n
    }

    /// Records how a query went on `engine`.
    pub fn record(&self, engine: &str, shape: Shape, bytes: u64, outcome: Outcome) {
        self.stats
            .record(engine, shape, size_bucket(bytes), outcome);
    }

    /// Re-reads the rules folder when its files change; a bad edit is logged and the rules in
    /// force stay. Connections and running queries are untouched.
    pub fn spawn_reload(self: &Arc<Self>) {
        let Some(dir) = self.rules_dir.clone() else {
            return;
        };
        let router = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut seen = fingerprint(&dir);
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let Some(router) = router.upgrade() else {
                    return;
                };
                let now = fingerprint(&dir);
                if now == seen {
                    continue;
                }
                seen = now;
                let configured: Vec<&str> = router.configured.iter().map(String::as_str).collect();
                match RoutingTable::load(&dir, &configured) {
                    Ok(table) => {
                        info!(dir = %dir.display(), groups = table.groups.len(), rules = table.rules.len(), "routing rules reloaded");
                        *router.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
                    }
                    Err(e) => {
                        error!(%e, "routing rules not reloaded; the previous rules stay in force")
                    }
                }
            }
        });
    }

    /// A number in [0, 1) (xorshift; exploration needs no better).
    fn random(&self) -> f64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Moves to the front the candidate the group prefers among those as fast as the fastest
/// (see [`TIE_WITHIN`]); `candidates` are sorted by expected latency, open breakers last.
fn prefer_in_group_order(candidates: &mut Vec<Candidate>, preference: &[String]) {
    let Some(fastest) = candidates
        .first()
        .filter(|c| c.breaker != BreakerState::Open)
        .map(|c| c.expected_ms)
    else {
        return;
    };
    let rank = |c: &Candidate| preference.iter().position(|e| *e == c.engine);
    let preferred = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.breaker != BreakerState::Open
                && (c.expected_ms <= fastest * TIE_WITHIN || c.expected_ms <= fastest + TIE_MS)
        })
        .min_by_key(|(_, c)| rank(c))
        .map(|(i, _)| i);
    if let Some(i) = preferred.filter(|&i| i > 0) {
        let chosen = candidates.remove(i);
        candidates.insert(0, chosen);
    }
}

/// Names, sizes and modification times of the rules files.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let m = e.metadata().ok()?;
                    Some((e.path(), m.len(), m.modified().ok()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_slow_once_long_ago_is_retried_by_one_statement_then_ranked_anew() {
        let router =
            Router::new(None, &["datafusion", "accelerated"], "datafusion").expect("router");
        let group = router.table().groups["default"].clone();
        assert_eq!(group.explore, 0.0, "no random exploration in this group");
        // The accelerated engine had a bad streak; datafusion keeps answering.
        for _ in 0..5 {
            router.record("accelerated", Shape::PointLookup, 0, Outcome::Answered(3.0));
        }
        router.stats.age(
            "accelerated",
            Shape::PointLookup,
            0,
            stats::REVISIT_AFTER * 2,
        );
        for _ in 0..5 {
            router.record("datafusion", Shape::PointLookup, 0, Outcome::Answered(0.5));
        }
        let (order, pick) = router.order(&group, Shape::PointLookup, 0, false);
        assert_eq!(
            (order[0].engine.as_str(), pick),
            ("accelerated", Pick::Retried),
            "EXPLAIN shows the retry that is due without taking it"
        );
        let (order, pick) = router.order(&group, Shape::PointLookup, 0, true);
        assert_eq!(
            (order[0].engine.as_str(), pick),
            ("accelerated", Pick::Retried)
        );
        let (order, pick) = router.order(&group, Shape::PointLookup, 0, true);
        assert_eq!(
            (order[0].engine.as_str(), pick),
            ("datafusion", Pick::Best),
            "one retry"
        );
        // The retry found it fast: it wins on its merits from now on.
        for _ in 0..5 {
            router.record("accelerated", Shape::PointLookup, 0, Outcome::Answered(0.1));
        }
        let (order, pick) = router.order(&group, Shape::PointLookup, 0, true);
        assert_eq!(
            (order[0].engine.as_str(), pick),
            ("accelerated", Pick::Best)
        );
    }

    #[test]
    fn engines_about_as_fast_are_taken_in_the_groups_order_a_clearly_faster_one_first() {
        let router = Router::new(None, &["datafusion", "duckdb", "accelerated"], "datafusion")
            .expect("router");
        let group = router.table().groups["default"].clone();
        assert_eq!(group.engines, ["accelerated", "datafusion", "duckdb"]);
        let first = |router: &Router| {
            router.order(&group, Shape::PointLookup, 0, true).0[0]
                .engine
                .clone()
        };
        for _ in 0..9 {
            router.record("datafusion", Shape::PointLookup, 0, Outcome::Answered(1.0));
            router.record(
                "accelerated",
                Shape::PointLookup,
                0,
                Outcome::Answered(1.05),
            );
            router.record("duckdb", Shape::PointLookup, 0, Outcome::Answered(0.9));
        }
        // Within 20% of the fastest: the group's first choice, not the one 0.15 ms faster.
        assert_eq!(first(&router), "accelerated");
        for _ in 0..9 {
            router.record("accelerated", Shape::PointLookup, 0, Outcome::Answered(3.0));
        }
        // The memory copy slowed down for real: the fastest of the rest, by the group's order
        // among those as fast.
        assert_eq!(first(&router), "datafusion");
        for _ in 0..9 {
            router.record("duckdb", Shape::PointLookup, 0, Outcome::Answered(0.3));
        }
        assert_eq!(
            first(&router),
            "duckdb",
            "clearly faster wins whatever the order"
        );
    }

    #[test]
    fn an_engine_never_observed_for_a_shape_is_not_retried() {
        let router = Router::new(None, &["datafusion", "duckdb"], "datafusion").expect("router");
        let group = router.table().groups["default"].clone();
        for _ in 0..5 {
            router.record("datafusion", Shape::Scan, 0, Outcome::Answered(0.5));
        }
        for _ in 0..3 {
            let (order, pick) = router.order(&group, Shape::Scan, 0, true);
            assert_eq!((order[0].engine.as_str(), pick), ("datafusion", Pick::Best));
        }
    }
}

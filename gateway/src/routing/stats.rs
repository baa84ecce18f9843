//! What the router has observed: per (engine, shape, scan-size bucket) the latency
//! distribution and success rate, and per engine a circuit breaker that takes a failing engine
//! out and lets one probe through after a cool-down.
//!
//! The expected latency is the median of the last few successes, not their average: one slow
//! query (a page fault, a first touch, a neighbour's burst) does not turn the router away from
//! an engine that is fast nine times in ten. Observations fade toward the cold-start guess
//! when they grow old, and a candidate whose observations have faded is retried once
//! ([`Stats::claim_revisit`]), so an engine that was slow once is not passed over for good.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::profile::Shape;

/// Scan-size buckets: < 16 MiB, < 1 GiB, < 64 GiB, more.
pub fn size_bucket(bytes: u64) -> u8 {
    match bytes {
        b if b < 16 << 20 => 0,
        b if b < 1 << 30 => 1,
        b if b < 64 << 30 => 2,
        _ => 3,
    }
}

/// A human name for a bucket.
pub fn bucket_name(bucket: u8) -> &'static str {
    match bucket {
        0 => "<16MiB",
        1 => "<1GiB",
        2 => "<64GiB",
        _ => ">=64GiB",
    }
}

/// Whether an engine runs in-process (its cold-start cost model differs).
fn embedded(engine: &str) -> bool {
    matches!(engine, "datafusion" | "duckdb")
}

/// Whether `engine` answers from memory (the `accelerated` engine).
fn in_memory(engine: &str) -> bool {
    engine == lakegate_engines::datafusion_engine::ACCELERATED
}

/// The cold-start guess, in ms, before anything is observed: the accelerated engine reads
/// memory (first, so it is tried); embedded engines start fast and scan ~300 MB/s per query here; remote engines pay ~250 ms of protocol and scheduling and
/// scan ~2 GB/s across their workers.
pub fn prior_ms(engine: &str, bytes: u64) -> f64 {
    let mb = bytes as f64 / 1e6;
    if in_memory(engine) {
        // No file is opened; an index lookup reads a few rows whatever the scan estimate.
        1.0 + mb / 3.0
    } else if embedded(engine) {
        5.0 + mb / 0.3
    } else {
        250.0 + mb / 2.0
    }
}

/// Samples kept per key for percentiles.
const WINDOW: usize = 64;
/// The last successes whose median is the expected latency: an engine that became slower
/// moves it after five, a lone outlier never does.
const ESTIMATE_SAMPLES: usize = 9;
/// Weight of a new sample in the moving average.
const ALPHA: f64 = 0.3;
/// Observations lose half their weight (against the prior) after this long unrefreshed, so
/// an engine that was slow a while ago gets tried again.
const HALF_LIFE: Duration = Duration::from_secs(20);
/// Samples after which the observation outweighs the prior completely.
const CONFIDENT: f64 = 5.0;
/// Latency charged for a failure, in the expected-latency estimate.
const FAILURE_PENALTY_MS: f64 = 1_000.0;
/// A candidate neither observed nor retried for this long is stale: the next statement that
/// would have passed it over retries it once.
pub const REVISIT_AFTER: Duration = HALF_LIFE;

/// Observations for one (engine, shape, bucket).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Moving average latency (ms) of successes.
    pub ewma_ms: f64,
    /// Moving average of success (1) / failure (0).
    pub success: f64,
    /// Queries observed.
    pub count: u64,
    recent: VecDeque<f64>,
    last: Option<Instant>,
    /// When a statement was last sent to retry it (its sample may still be running).
    revisited: Option<Instant>,
}

impl Observed {
    fn record(&mut self, ms: Option<f64>) {
        let ok = if ms.is_some() { 1.0 } else { 0.0 };
        if self.count == 0 {
            self.success = ok;
            self.ewma_ms = ms.unwrap_or(0.0);
        } else {
            self.success = (1.0 - ALPHA) * self.success + ALPHA * ok;
            if let Some(ms) = ms {
                self.ewma_ms = if self.ewma_ms == 0.0 {
                    ms
                } else {
                    (1.0 - ALPHA) * self.ewma_ms + ALPHA * ms
                };
            }
        }
        self.count += 1;
        self.last = Some(Instant::now());
        if let Some(ms) = ms {
            if self.recent.len() == WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back(ms);
        }
    }

    /// The median of the last [`ESTIMATE_SAMPLES`] successful latencies.
    pub fn typical_ms(&self) -> Option<f64> {
        let mut last = [0.0; ESTIMATE_SAMPLES];
        let mut n = 0;
        for (slot, ms) in last.iter_mut().zip(self.recent.iter().rev()) {
            *slot = *ms;
            n += 1;
        }
        let last = &mut last[..n];
        last.sort_by(f64::total_cmp);
        last.get(n / 2).copied()
    }

    /// Whether nothing has been observed or retried for [`REVISIT_AFTER`].
    fn stale(&self) -> bool {
        let fresh = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() < REVISIT_AFTER);
        self.count > 0 && !fresh(self.last) && !fresh(self.revisited)
    }

    /// The `q` quantile (0..1) of recent successful latencies.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.recent.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = self.recent.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v.get(i).copied()
    }
}

/// A circuit breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    /// Taking queries.
    Closed,
    /// Out until the instant; then one probe is let through.
    Open {
        /// When a probe may go.
        until: Instant,
        /// The current cool-down (doubles on each failed probe, up to 30 s).
        cooldown: Duration,
    },
    /// A probe is running.
    HalfOpen {
        /// The cool-down to use if the probe fails.
        cooldown: Duration,
    },
}

impl Breaker {
    /// What an operator sees of it.
    pub fn state(&self) -> BreakerState {
        match self {
            Self::Closed => BreakerState::Closed,
            Self::Open { .. } => BreakerState::Open,
            Self::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

/// A breaker's state as `lakegate.routing`, EXPLAIN ROUTE and `/api/routing` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakerState {
    /// Taking queries.
    Closed,
    /// Skipped until its cool-down passes.
    Open,
    /// Open, cool-down over: the next query probes it (tried first).
    Probe,
    /// A probe is running.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open`, `probe`, `half-open`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::Probe => "probe",
            Self::HalfOpen => "half-open",
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug)]
struct EngineHealth {
    breaker: Breaker,
    consecutive_failures: u32,
}

/// Consecutive engine failures that open the breaker.
const TRIP_AFTER: u32 = 3;
/// First cool-down.
const COOLDOWN: Duration = Duration::from_secs(5);
/// Longest cool-down after repeated failed probes.
const MAX_COOLDOWN: Duration = Duration::from_secs(30);

/// How a statement went on an engine, as the router learns it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// It answered, in this many ms (to the last batch).
    Answered(f64),
    /// It failed for the engine's reasons: [`TRIP_AFTER`] in a row open its breaker.
    Failed,
    /// It could not be connected to (not running there): its breaker opens at once.
    Unreachable,
}

impl Outcome {
    fn ms(self) -> Option<f64> {
        match self {
            Self::Answered(ms) => Some(ms),
            Self::Failed | Self::Unreachable => None,
        }
    }
}

/// What the router expects of an engine for a statement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expected {
    /// Expected latency (ms): observed, or the cold-start guess.
    pub ms: f64,
    /// Observations behind it.
    pub samples: u64,
    /// Observed once, but not for [`REVISIT_AFTER`]: worth retrying.
    pub stale: bool,
}

/// One engine's observations by (shape, scan-size bucket).
type ByShape = HashMap<(Shape, u8), Observed>;

/// `engine`'s entry of `map`, made by `make` the first time: the engine's name is copied into
/// a key only then (a statement's outcome is recorded under a name the map already has).
fn by_engine<'m, V>(
    map: &'m mut HashMap<String, V>,
    engine: &str,
    make: impl FnOnce() -> V,
) -> &'m mut V {
    if !map.contains_key(engine) {
        map.insert(engine.to_string(), make());
    }
    map.get_mut(engine)
        .expect("the entry is there: inserted just above when missing")
}

/// Everything observed, shared by all sessions.
#[derive(Debug, Default)]
pub struct Stats {
    /// By engine, then (shape, scan-size bucket): looked up by the engine's name without
    /// making a key (the router asks for every candidate of every routed statement).
    observed: Mutex<HashMap<String, ByShape>>,
    health: Mutex<HashMap<String, EngineHealth>>,
}

impl Stats {
    /// Records one query's outcome on `engine`.
    pub fn record(&self, engine: &str, shape: Shape, bucket: u8, outcome: Outcome) {
        let ms = outcome.ms();
        {
            let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
            by_engine(&mut observed, engine, ByShape::default)
                .entry((shape, bucket))
                .or_default()
                .record(ms);
        }
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let h = by_engine(&mut health, engine, || EngineHealth {
            breaker: Breaker::Closed,
            consecutive_failures: 0,
        });
        if ms.is_some() {
            h.consecutive_failures = 0;
            h.breaker = Breaker::Closed;
        } else {
            h.consecutive_failures += 1;
            h.breaker = match h.breaker {
                Breaker::HalfOpen { cooldown } => {
                    let cooldown = (cooldown * 2).min(MAX_COOLDOWN);
                    Breaker::Open {
                        until: Instant::now() + cooldown,
                        cooldown,
                    }
                }
                Breaker::Closed
                    if h.consecutive_failures >= TRIP_AFTER || outcome == Outcome::Unreachable =>
                {
                    Breaker::Open {
                        until: Instant::now() + COOLDOWN,
                        cooldown: COOLDOWN,
                    }
                }
                other => other,
            };
        }
    }

    /// Whether `engine` may take a query now; an open breaker whose cool-down passed lets this
    /// one query through as the probe.
    pub fn admit(&self, engine: &str) -> bool {
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let Some(h) = health.get_mut(engine) else {
            return true;
        };
        match h.breaker {
            Breaker::Closed => true,
            Breaker::Open { until, cooldown } if Instant::now() >= until => {
                h.breaker = Breaker::HalfOpen { cooldown };
                true
            }
            Breaker::Open { .. } | Breaker::HalfOpen { .. } => false,
        }
    }

    /// Whether `engine`'s breaker is open and its cool-down has passed: the next query should
    /// probe it.
    pub fn probe_due(&self, engine: &str) -> bool {
        matches!(self.breaker(engine), Breaker::Open { until, .. } if Instant::now() >= until)
    }

    /// The breaker of `engine`, without changing it.
    pub fn breaker(&self, engine: &str) -> Breaker {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(engine)
            .map_or(Breaker::Closed, |h| h.breaker)
    }

    /// The expected latency (ms) of `shape` on `engine` for a scan of `bytes`: the prior,
    /// blended into the median of recent successes as samples arrive, plus a penalty for
    /// failures.
    pub fn expected(&self, engine: &str, shape: Shape, bytes: u64) -> Expected {
        let prior = prior_ms(engine, bytes);
        let observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        let Some(o) = observed
            .get(engine)
            .and_then(|m| m.get(&(shape, size_bucket(bytes))))
        else {
            return Expected {
                ms: prior,
                samples: 0,
                stale: false,
            };
        };
        let age = o.last.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let w = (o.count as f64 / CONFIDENT).min(1.0) * 0.5f64.powf(age / HALF_LIFE.as_secs_f64());
        let latency = match o.typical_ms() {
            Some(ms) if ms > 0.0 => w * ms + (1.0 - w) * prior,
            _ => prior,
        };
        // Old failures fade like old latencies.
        let penalty = (1.0 - o.success) * FAILURE_PENALTY_MS * w.max(0.05);
        Expected {
            ms: latency + penalty,
            samples: o.count,
            stale: o.stale(),
        }
    }

    /// Claims the retry of a stale candidate (see [`Expected::stale`]): true for the one
    /// statement that retries it; others see it fresh for [`REVISIT_AFTER`].
    pub fn claim_revisit(&self, engine: &str, shape: Shape, bytes: u64) -> bool {
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match observed
            .get_mut(engine)
            .and_then(|m| m.get_mut(&(shape, size_bucket(bytes))))
        {
            Some(o) if o.stale() => {
                o.revisited = Some(Instant::now());
                true
            }
            _ => false,
        }
    }

    /// Makes the observations of (`engine`, `shape`, `bucket`) look `by` older.
    #[cfg(test)]
    pub(crate) fn age(&self, engine: &str, shape: Shape, bucket: u8, by: Duration) {
        let mut observed = self.observed.lock().expect("lock");
        if let Some(o) = observed
            .get_mut(engine)
            .and_then(|m| m.get_mut(&(shape, bucket)))
        {
            o.last = o.last.and_then(|t| t.checked_sub(by));
        }
    }

    /// Every observation, for `lakegate.routing`.
    pub fn snapshot(&self) -> Vec<((String, Shape, u8), Observed)> {
        let mut v: Vec<_> = self
            .observed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(|(engine, by_shape)| {
                by_shape
                    .iter()
                    .map(|(&(shape, bucket), o)| ((engine.clone(), shape, bucket), o.clone()))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_replace_the_prior() {
        let s = Stats::default();
        let cold = s.expected("trino", Shape::PointLookup, 1000);
        assert_eq!(cold.samples, 0);
        assert!(cold.ms > 200.0);
        for _ in 0..10 {
            s.record("trino", Shape::PointLookup, 0, Outcome::Answered(20.0));
        }
        let warm = s.expected("trino", Shape::PointLookup, 1000);
        assert_eq!(warm.samples, 10);
        assert!((warm.ms - 20.0).abs() < 1.0, "{warm:?}");
    }

    #[test]
    fn an_engine_that_cannot_be_connected_to_is_taken_out_at_once() {
        let s = Stats::default();
        s.record("trino", Shape::Scan, 0, Outcome::Failed);
        assert_eq!(
            s.breaker("trino"),
            Breaker::Closed,
            "one failure is not a pattern"
        );
        s.record("spark", Shape::Scan, 0, Outcome::Unreachable);
        assert!(matches!(s.breaker("spark"), Breaker::Open { .. }));
        assert!(!s.admit("spark"));
        s.record("spark", Shape::Scan, 0, Outcome::Answered(50.0));
        assert_eq!(s.breaker("spark"), Breaker::Closed);
    }

    #[test]
    fn breaker_opens_after_failures_and_probes_back() {
        let s = Stats::default();
        for _ in 0..TRIP_AFTER {
            s.record("spark", Shape::Scan, 0, Outcome::Failed);
        }
        assert!(matches!(s.breaker("spark"), Breaker::Open { .. }));
        assert!(!s.admit("spark"));
        // Pretend the cool-down passed.
        if let Some(h) = s.health.lock().expect("lock").get_mut("spark") {
            h.breaker = Breaker::Open {
                until: Instant::now(),
                cooldown: COOLDOWN,
            };
        }
        assert!(s.admit("spark"), "the probe goes through");
        assert!(!s.admit("spark"), "only one probe at a time");
        s.record("spark", Shape::Scan, 0, Outcome::Answered(100.0));
        assert_eq!(s.breaker("spark"), Breaker::Closed);
        assert!(s.admit("spark"));
    }

    #[test]
    fn failures_raise_the_expected_latency() {
        let s = Stats::default();
        for i in 0..10 {
            s.record("duckdb", Shape::Scan, 0, Outcome::Answered(10.0));
            s.record(
                "trino",
                Shape::Scan,
                0,
                if i % 2 == 0 {
                    Outcome::Failed
                } else {
                    Outcome::Answered(5.0)
                },
            );
        }
        assert!(s.expected("trino", Shape::Scan, 0).ms > s.expected("duckdb", Shape::Scan, 0).ms);
    }

    #[test]
    fn a_lone_slow_query_does_not_move_the_estimate_a_slowdown_does() {
        let s = Stats::default();
        for _ in 0..12 {
            s.record("accelerated", Shape::PointLookup, 0, Outcome::Answered(0.2));
        }
        // A 40 ms hiccup among fast answers: an average would read ~12 ms for a while.
        s.record(
            "accelerated",
            Shape::PointLookup,
            0,
            Outcome::Answered(40.0),
        );
        s.record("accelerated", Shape::PointLookup, 0, Outcome::Answered(0.2));
        let after_hiccup = s.expected("accelerated", Shape::PointLookup, 0).ms;
        assert!((after_hiccup - 0.2).abs() < 0.01, "{after_hiccup}");
        // Five slow answers in a row are a slowdown: the estimate follows.
        for _ in 0..5 {
            s.record("accelerated", Shape::PointLookup, 0, Outcome::Answered(9.0));
        }
        let slowed = s.expected("accelerated", Shape::PointLookup, 0).ms;
        assert!((slowed - 9.0).abs() < 0.01, "{slowed}");
    }

    #[test]
    fn a_stale_observation_is_retried_by_one_statement() {
        let s = Stats::default();
        assert!(
            !s.expected("duckdb", Shape::Scan, 0).stale,
            "never observed: not stale"
        );
        assert!(!s.claim_revisit("duckdb", Shape::Scan, 0));
        s.record("duckdb", Shape::Scan, 0, Outcome::Answered(3.0));
        assert!(!s.expected("duckdb", Shape::Scan, 0).stale, "just observed");
        s.age(
            "duckdb",
            Shape::Scan,
            0,
            REVISIT_AFTER + Duration::from_secs(1),
        );
        assert!(s.expected("duckdb", Shape::Scan, 0).stale);
        assert!(
            s.claim_revisit("duckdb", Shape::Scan, 0),
            "the first statement retries it"
        );
        assert!(!s.claim_revisit("duckdb", Shape::Scan, 0), "only one");
        assert!(!s.expected("duckdb", Shape::Scan, 0).stale);
    }
}

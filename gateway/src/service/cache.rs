//! The result cache, keyed by the Iceberg snapshots a result was computed from.
//!
//! A key is (the statement's syntax tree, bound parameters, the session settings that change
//! results, who asks, and the metadata location of every table read), compared whole on every
//! lookup: two statements whose keys merely hash alike never share an answer. A cached answer is therefore exact
//! until one of its tables commits: the next statement resolves a new metadata location, misses,
//! and computes the new answer; the old entry simply ages out. Concurrent identical misses run
//! once (single flight) and share the answer, so a commit followed by a refresh storm costs one
//! execution. Only deterministic statements over lake tables are cached.

use std::hash::{BuildHasher, Hash};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::{Expr, Statement, visit_expressions};
use lakegate_engines::{Pins, Settings};
use serde::{Deserialize, Serialize};

use super::encodings::Encodings;
use super::weight;

/// `[cache]` configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Whether results are cached at all (default on).
    pub enabled: bool,
    /// Total bytes of cached results (default 256 MiB).
    pub max_bytes: u64,
    /// Results larger than this are not cached (default 16 MiB).
    pub max_entry_bytes: u64,
    /// How old a table's version token may be: `"0s"` (default) looks it up for every statement
    /// (zero staleness); e.g. `"5s"` skips the catalog round trip and never answers older than that.
    #[serde(with = "humantime_serde")]
    pub max_staleness: std::time::Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: 256 << 20,
            max_entry_bytes: 16 << 20,
            max_staleness: std::time::Duration::ZERO,
        }
    }
}

/// A cached result.
#[derive(Debug)]
pub struct CachedResult {
    /// Its columns.
    pub schema: SchemaRef,
    /// Its rows.
    pub batches: Vec<RecordBatch>,
    /// Arrow bytes held.
    pub bytes: u64,
    /// Its rows as a frontend encoded them for the next hit ([`super::encodings`]).
    pub encodings: Arc<Encodings>,
}

/// Counters, as `lakegate.cache_stats` shows them.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Answers served from the cache.
    pub hits: AtomicU64,
    /// Statements that computed their answer (and tried to cache it).
    pub misses: AtomicU64,
    /// Statements that waited for an identical statement already computing.
    pub joins: AtomicU64,
    /// Engine executions made on behalf of the cache.
    pub executions: AtomicU64,
    /// Results too large to cache.
    pub too_large: AtomicU64,
    /// Statements that are not cacheable (non-deterministic, system tables, no lake table).
    pub bypassed: AtomicU64,
    /// Entries evicted to stay within `max_bytes`.
    pub evictions: Arc<AtomicU64>,
}

/// How the cache took part in answering one statement (`lakegate.queries.cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Answered from the cache (or from an identical statement computing at the same time).
    Hit,
    /// Computed and stored.
    Miss,
    /// Not cacheable (non-deterministic, system tables, no lake table, or the group's
    /// `cache = false`).
    Bypass,
    /// Computed, larger than `max_entry_bytes`: streamed, not stored.
    TooLarge,
    /// The cache is off (`[cache] enabled = false`).
    #[default]
    Off,
}

impl CacheOutcome {
    /// The name in `lakegate.queries` and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Bypass => "bypass",
            Self::TooLarge => "too_large",
            Self::Off => "off",
        }
    }
}

/// Everything a cached answer depends on. Equality (not only the hash) decides a hit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The statement itself, not its text: sqlparser prints some distinct string literals alike
    /// (see lakegate_engines::dialect), and they must not share an answer.
    /// Shared by every key of the same statement ([`super::weight::Statements`]).
    statement: weight::Tree,
    /// The tree's estimated heap (a function of `statement`, computed once when interned).
    tree_bytes: u64,
    params: Vec<ScalarValue>,
    user: String,
    time_zone: String,
    search_path: Vec<String>,
    /// `(schema, table, metadata location)` of every table read.
    versions: Vec<(String, String, String)>,
}

impl CacheKey {
    /// The key of `statement` (with its estimated heap, as [`ResultCache::key`]'s interner
    /// gives them) and `params`, at these pins, for this session.
    pub(crate) fn new(
        interned: weight::Interned,
        params: Option<&ParamValues>,
        pins: &Pins,
        settings: &Settings,
    ) -> Self {
        let params = match params {
            Some(ParamValues::List(values)) => values.iter().map(|v| v.value.clone()).collect(),
            Some(ParamValues::Map(named)) => {
                let mut named: Vec<_> = named.iter().collect();
                named.sort_by(|a, b| a.0.cmp(b.0));
                named
                    .into_iter()
                    .flat_map(|(k, v)| [ScalarValue::Utf8(Some(k.clone())), v.value.clone()])
                    .collect()
            }
            None => Vec::new(),
        };
        Self {
            tree_bytes: interned.bytes(),
            statement: interned.tree().clone(),
            params,
            user: settings.user.clone(),
            time_zone: settings.time_zone.clone(),
            search_path: settings.search_path.clone(),
            versions: pins
                .iter()
                .map(|((s, t), r)| (s.clone(), t.clone(), r.metadata_location.clone()))
                .collect(),
        }
    }

    /// The heap this key holds, as the caches charge it (the statement's tree in full, even
    /// where other keys share it: the bound stays honest when they are gone).
    pub fn weight(&self) -> u64 {
        self.tree_bytes
            + self.params.iter().map(weight::scalar).sum::<u64>()
            + weight::string(&self.user)
            + weight::string(&self.time_zone)
            + self
                .search_path
                .iter()
                .map(|s| weight::string(s))
                .sum::<u64>()
            + self
                .versions
                .iter()
                .map(|(s, t, l)| weight::string(s) + weight::string(t) + weight::string(l))
                .sum::<u64>()
    }
}

impl CachedResult {
    /// `batches` of `schema`, holding `bytes` of Arrow arrays.
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>, bytes: u64) -> Self {
        Self {
            schema,
            batches,
            bytes,
            encodings: Arc::new(Encodings::for_result(bytes)),
        }
    }

    /// The heap this result holds: its Arrow bytes, its schema, its batches' headers and the
    /// room for an encoding of its rows.
    pub fn weight(&self) -> u64 {
        self.bytes
            + weight::schema(&self.schema)
            + (self.batches.len() * (size_of::<RecordBatch>() + 64)) as u64
            + self.encodings.room()
    }
}

/// Why a statement computed by the cache was not stored.
#[derive(Debug)]
pub enum Uncached {
    /// The result is larger than `max_entry_bytes`.
    TooLarge,
    /// The statement failed (shared with every caller that waited on it).
    Failed(Arc<crate::error::Error>),
}

/// The cache (`S` hashes keys: foldhash, randomly seeded, as for every cache on the
/// statement path; tests make it collide on purpose).
pub struct ResultCache<S = foldhash::fast::RandomState> {
    config: CacheConfig,
    store: moka::future::Cache<CacheKey, Arc<CachedResult>, S>,
    stats: CacheStats,
    statements: weight::Statements,
}

/// Functions whose answer changes without any table changing.
const VOLATILE: &[&str] = &[
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtime",
    "localtimestamp",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "random",
    "uuid",
    "gen_random_uuid",
    "pg_backend_pid",
    "set_config",
    "setseed",
    "version",
];

impl ResultCache {
    /// A cache with `config`'s bounds.
    pub fn new(config: CacheConfig) -> Self {
        Self::with_hasher(config, foldhash::fast::RandomState::default())
    }

    /// Whether what `rewrites` runs answers from the tables it reads at `pins` alone.
    pub(crate) fn cacheable(rewrites: &super::rewrites::Rewrites, pins: &Pins) -> bool {
        !pins.is_empty() && rewrites.deterministic()
    }

    /// Whether a statement calls no function whose answer changes by itself (`now()`, ...).
    pub fn is_deterministic(statement: &Statement) -> bool {
        let volatile = visit_expressions(statement, |e| match e {
            Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_lowercase();
                let name = name.rsplit('.').next().unwrap_or_default();
                if VOLATILE.contains(&name) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
            _ => ControlFlow::Continue(()),
        });
        volatile.is_continue()
    }
}

impl<S: BuildHasher + Clone + Send + Sync + 'static> ResultCache<S> {
    /// A cache with `config`'s bounds whose keys are hashed by `hasher`.
    pub fn with_hasher(config: CacheConfig, hasher: S) -> Self {
        let store = moka::future::Cache::builder()
            .max_capacity(config.max_bytes)
            .weigher(|k: &CacheKey, v: &Arc<CachedResult>| {
                u32::try_from(weight::ENTRY_BYTES + k.weight() + v.weight()).unwrap_or(u32::MAX)
            })
            .build_with_hasher(hasher);
        Self {
            config,
            store,
            stats: CacheStats::default(),
            statements: weight::Statements::default(),
        }
    }

    /// The key of `statement` with `params`, at these pins, for this session; its syntax tree
    /// shared with the other keys of the same statement.
    pub fn key(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        pins: &Pins,
        settings: &Settings,
    ) -> CacheKey {
        CacheKey::new(self.statements.intern(statement), params, pins, settings)
    }

    /// The key of a statement already interned ([`Self::intern`]).
    pub(crate) fn key_of(
        &self,
        interned: weight::Interned,
        params: Option<&ParamValues>,
        pins: &Pins,
        settings: &Settings,
    ) -> CacheKey {
        CacheKey::new(interned, params, pins, settings)
    }

    /// `statement`'s shared syntax tree (with its hash and estimated heap).
    pub(crate) fn intern(&self, statement: &Statement) -> weight::Interned {
        self.statements.intern(statement)
    }

    /// Whether caching is on.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The counters.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// The cached answer for `key`, computing it with `compute` on a miss. Concurrent callers with
    /// the same key wait for one computation.
    ///
    /// # Errors
    /// [`Uncached::TooLarge`] when the answer exceeds the per-entry cap (the caller runs the
    /// statement itself, streaming), or the statement's own error.
    pub async fn get_or_compute<F>(
        &self,
        key: CacheKey,
        compute: F,
    ) -> Result<Arc<CachedResult>, Arc<Uncached>>
    where
        F: std::future::Future<Output = Result<CachedResult, Uncached>>,
    {
        if let Some(hit) = self.store.get(&key).await {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let max = self.config.max_entry_bytes;
        let stats = &self.stats;
        let entry = self
            .store
            .entry(key)
            .or_try_insert_with(async move {
                stats.executions.fetch_add(1, Ordering::Relaxed);
                let result = match compute.await {
                    Err(Uncached::TooLarge) => Err(Uncached::TooLarge),
                    Ok(r) if r.bytes > max => Err(Uncached::TooLarge),
                    other => other,
                };
                if matches!(result, Err(Uncached::TooLarge)) {
                    stats.too_large.fetch_add(1, Ordering::Relaxed);
                }
                let result = result?;
                Ok(Arc::new(result))
            })
            .await?;
        if entry.is_fresh() {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.joins.fetch_add(1, Ordering::Relaxed);
        }
        Ok(entry.into_value())
    }

    /// Counts a statement that is not cacheable.
    pub fn bypass(&self) {
        self.stats.bypassed.fetch_add(1, Ordering::Relaxed);
    }

    /// The per-entry size cap.
    pub fn max_entry_bytes(&self) -> u64 {
        self.config.max_entry_bytes
    }

    /// The cache's counters and sizes by name (settled first: moka counts lazily).
    pub async fn stats_values(&self) -> Vec<(&'static str, u64)> {
        self.store.run_pending_tasks().await;
        let s = &self.stats;
        vec![
            ("hits", s.hits.load(Ordering::Relaxed)),
            ("misses", s.misses.load(Ordering::Relaxed)),
            ("single_flight_joins", s.joins.load(Ordering::Relaxed)),
            ("executions", s.executions.load(Ordering::Relaxed)),
            ("too_large", s.too_large.load(Ordering::Relaxed)),
            ("bypassed", s.bypassed.load(Ordering::Relaxed)),
            ("entries", self.store.entry_count()),
            ("bytes", self.store.weighted_size()),
            ("max_bytes", self.config.max_bytes),
            ("evictions", s.evictions.load(Ordering::Relaxed)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("valid")
            .remove(0)
    }

    #[test]
    fn only_deterministic_statements_over_lake_tables_are_cacheable() {
        // With no pinned table nothing is cacheable (catalog queries, SELECT 1).
        let rewrites = |sql| super::super::rewrites::Rewrites::new(parse(sql), None, None);
        assert!(!ResultCache::cacheable(
            &rewrites("SELECT 1"),
            &Pins::default()
        ));
        let pins =
            super::super::plan_tests::pins(&[super::super::plan_tests::table("shop", "t", &["a"])]);
        assert!(ResultCache::cacheable(
            &rewrites("SELECT count(*) FROM t"),
            &pins
        ));
        assert!(!ResultCache::cacheable(
            &rewrites("SELECT now(), count(*) FROM t"),
            &pins
        ));
        let volatile = [
            "SELECT now(), count(*) FROM t",
            "SELECT * FROM t WHERE ts > current_timestamp",
            "SELECT random() FROM t",
            "SELECT pg_catalog.now() FROM t",
        ];
        for sql in volatile {
            assert!(
                !ResultCache::is_deterministic(&parse(sql)),
                "{sql} should be volatile"
            );
        }
        assert!(ResultCache::is_deterministic(&parse(
            "SELECT status, count(*) FROM orders WHERE order_ts > DATE '2026-01-01' GROUP BY 1"
        )));
    }

    #[test]
    fn keys_change_with_parameters_and_settings() {
        let s = weight::Statements::default().intern(&parse("SELECT * FROM t WHERE id = $1"));
        let pins = Pins::default();
        let base = Settings::default();
        let p1 = ParamValues::List(vec![ScalarValue::Int64(Some(1)).into()]);
        let p2 = ParamValues::List(vec![ScalarValue::Int64(Some(2)).into()]);
        let k1 = CacheKey::new(s.clone(), Some(&p1), &pins, &base);
        assert_eq!(k1, CacheKey::new(s.clone(), Some(&p1), &pins, &base));
        assert_ne!(k1, CacheKey::new(s.clone(), Some(&p2), &pins, &base));
        let paris = Settings {
            time_zone: "Europe/Paris".into(),
            ..Settings::default()
        };
        assert_ne!(k1, CacheKey::new(s.clone(), Some(&p1), &pins, &paris));
        let other_user = Settings {
            user: "bob".into(),
            ..Settings::default()
        };
        assert_ne!(k1, CacheKey::new(s.clone(), Some(&p1), &pins, &other_user));
    }

    /// Every key hashes alike: only full-key equality can tell entries apart.
    #[derive(Clone, Default)]
    struct Colliding;

    impl BuildHasher for Colliding {
        type Hasher = Zero;
        fn build_hasher(&self) -> Zero {
            Zero
        }
    }

    struct Zero;

    impl std::hash::Hasher for Zero {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, _bytes: &[u8]) {}
    }

    fn answer(n: i64) -> CachedResult {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("n", arrow::datatypes::DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::Int64Array::from(vec![n]))],
        )
        .expect("batch");
        let bytes = batch.get_array_memory_size() as u64;
        CachedResult::new(schema, vec![batch], bytes)
    }

    #[tokio::test]
    async fn keys_that_hash_alike_never_share_an_answer() {
        let cache = ResultCache::with_hasher(CacheConfig::default(), Colliding);
        let settings = Settings::default();
        let key = |user: &str, sql: &str| {
            CacheKey::new(
                weight::Statements::default().intern(&parse(sql)),
                None,
                &Pins::default(),
                &Settings {
                    user: user.into(),
                    ..settings.clone()
                },
            )
        };
        let first = cache
            .get_or_compute(key("alice", "SELECT 1"), async { Ok(answer(1)) })
            .await
            .expect("computed");
        // Same hash, another user: computed again, not alice's rows.
        let other = cache
            .get_or_compute(key("bob", "SELECT 1"), async { Ok(answer(2)) })
            .await
            .expect("computed");
        let value = |r: &CachedResult| {
            r.batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .expect("int")
                .value(0)
        };
        assert_eq!((value(&first), value(&other)), (1, 2));
        // And a repeat of alice's is a hit on her entry.
        let again = cache
            .get_or_compute(key("alice", "SELECT 1"), async { Ok(answer(3)) })
            .await
            .expect("hit");
        assert_eq!(value(&again), 1);
        assert_eq!(cache.stats().hits.load(Ordering::Relaxed), 1);
    }
}

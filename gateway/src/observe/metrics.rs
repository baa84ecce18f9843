//! Prometheus metrics (`GET /metrics`): every finished query counted and timed by frontend,
//! routing group, engine, shape, cache outcome and outcome; at scrape time, each group's running
//! and queued queries, each engine's breaker, the result cache, catalog token lookups, and per
//! table the age of its current snapshot, its data and delete files.

use std::sync::Arc;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use lakegate_engines::Lake;
use lakegate_maintenance::Maintainer;

use super::history::QueryRecord;
use crate::routing::Router;

/// What a scrape reads besides the counters kept here.
pub struct Scrape<'a> {
    /// Group load and breakers.
    pub router: &'a Router,
    /// The configured engines.
    pub engines: Vec<&'a str>,
    /// The result cache's counters by name.
    pub cache: Vec<(&'static str, u64)>,
    /// Token lookups and the tables seen.
    pub lake: &'a Lake,
    /// Operations, telemetry and health.
    pub maintainer: &'a Maintainer,
    /// Failed logins so far.
    pub auth_failures: u64,
    /// The accelerated copies, when `[acceleration]` names tables.
    pub accelerator: Option<&'a lakegate_engines::accel::Accelerator>,
}

/// The registry and the metrics lakegate keeps.
pub struct Metrics {
    /// Tells this set's handles from another's ([`super::handles`]).
    id: u64,
    registry: Registry,
    queries: IntCounterVec,
    latency: HistogramVec,
    rows: IntCounterVec,
    group_load: IntGaugeVec,
    breaker_open: IntGaugeVec,
    cache: GaugeVec,
    tokens: GaugeVec,
    objects: GaugeVec,
    object_requests: GaugeVec,
    acceleration: GaugeVec,
    table: GaugeVec,
    maintenance: GaugeVec,
    maintenance_slo: GaugeVec,
    telemetry: GaugeVec,
    auth_failures: prometheus::IntGauge,
    health: GaugeVec,
    /// Agents' (MCP) queries by user: few, configured users, so the label stays bounded.
    agent_queries: IntCounterVec,
    agent_scan: IntCounterVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn register<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    // Names are fixed and distinct: registration cannot collide.
    let _ = r.register(Box::new(c.clone()));
    c
}

impl Metrics {
    /// A registry with lakegate's metrics.
    ///
    /// # Errors
    /// Never for the fixed metric definitions here; kept fallible for the prometheus API.
    pub fn new() -> prometheus::Result<Self> {
        let r = Registry::new();
        let queries = register(
            &r,
            IntCounterVec::new(
                Opts::new("lakegate_queries_total", "Queries finished"),
                &["frontend", "group", "engine", "shape", "cache", "outcome"],
            )?,
        );
        let latency = register(
            &r,
            HistogramVec::new(
                HistogramOpts::new(
                    "lakegate_query_duration_seconds",
                    "Query wall time until the last row",
                )
                .buckets(vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0,
                ]),
                &["group", "engine", "shape"],
            )?,
        );
        let rows = register(
            &r,
            IntCounterVec::new(
                Opts::new("lakegate_rows_returned_total", "Rows sent to clients"),
                &["frontend", "group"],
            )?,
        );
        let agent_queries = register(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "lakegate_agent_queries_total",
                    "Queries run by agents (MCP)",
                ),
                &["user", "group", "outcome"],
            )?,
        );
        let agent_scan = register(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "lakegate_agent_scan_bytes_total",
                    "Bytes agents' queries were estimated to scan",
                ),
                &["user", "group"],
            )?,
        );
        let group_load = register(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "lakegate_group_queries",
                    "Queries of a routing group by state",
                ),
                &["group", "state"],
            )?,
        );
        let breaker_open = register(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "lakegate_engine_breaker_open",
                    "1 while the engine's circuit breaker keeps it out",
                ),
                &["engine"],
            )?,
        );
        let cache = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_cache",
                    "Result cache counters and sizes; plans_kept, plans_reused and plans_made count the kept plans; shape_texts, shape_hits, shapes_learned and shapes_refused the texts answered without parsing",
                ),
                &["stat"],
            )?,
        );
        let tokens = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_catalog_tokens",
                    "Version-token lookups in the catalog",
                ),
                &["stat"],
            )?,
        );
        let objects = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_object_cache",
                    "The cache of immutable lake objects, by tier (object-store lakes: metadata: metadata JSON, manifests, Parquet footers; data: Parquet pages; every lake: decoded: small data files kept as Arrow, hits and misses counted in files): hits, misses, hit_bytes, miss_bytes, bytes, capacity_bytes",
                ),
                &["tier", "stat"],
            )?,
        );
        let acceleration = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_acceleration",
                    "Accelerated tables held in memory: held (1 while a copy is held), empty (1 for a table with no snapshot), snapshot_id, rows, bytes, files, indexes, full_loads, incremental_loads, last_load_seconds; table \"\" carries max_bytes and declined (statements the accelerated engine passed on)",
                ),
                &["table", "stat"],
            )?,
        );
        let object_requests = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_object_store_requests",
                    "Object-store requests made through the lake's FileIO since start (the DataFusion engine, estimates, maintenance), by kind: get, range_get, head, put, delete",
                ),
                &["request"],
            )?,
        );
        let table = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_table",
                    "Per table, at its current snapshot: snapshot_age_seconds, data_files, delete_files, records, bytes",
                ),
                &["table", "stat"],
            )?,
        );
        let maintenance = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_maintenance_operations",
                    "Maintenance operations run since start, by kind and result (stat=count|seconds)",
                ),
                &["kind", "result", "stat"],
            )?,
        );
        let maintenance_slo = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_maintenance_slo",
                    "The maintenance loop's service levels: tables, maintained, failure_ratio (24 h), backlog, oldest_wait_seconds, operations_last_hour, commits_last_hour",
                ),
                &["stat"],
            )?,
        );
        let telemetry = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_telemetry_events",
                    "Query telemetry events sent to the maintenance loop, and dropped (channel full)",
                ),
                &["outcome"],
            )?,
        );
        let health = register(
            &r,
            GaugeVec::new(
                Opts::new(
                    "lakegate_table_health",
                    "Per table, as last assessed: score (0-100), small_files, manifests, snapshots, heat",
                ),
                &["table", "stat"],
            )?,
        );
        let auth_failures = register(
            &r,
            prometheus::IntGauge::new(
                "lakegate_auth_failures_total",
                "Failed logins (pgwire SCRAM and Flight SQL handshakes) since start",
            )?,
        );
        Ok(Self {
            id: super::handles::next_id(),
            auth_failures,
            maintenance,
            maintenance_slo,
            telemetry,
            health,
            agent_queries,
            agent_scan,
            registry: r,
            queries,
            latency,
            rows,
            group_load,
            breaker_open,
            cache,
            tokens,
            objects,
            object_requests,
            acceleration,
            table,
        })
    }

    fn render_acceleration(&self, accelerator: &lakegate_engines::accel::Accelerator) {
        use lakegate_engines::accel::Status;
        for t in accelerator.tables() {
            for (stat, value) in [
                ("held", f64::from(u8::from(t.status == Status::Held))),
                ("empty", f64::from(u8::from(t.status == Status::Empty))),
                ("snapshot_id", t.snapshot_id.unwrap_or(0) as f64),
                ("rows", t.rows as f64),
                ("bytes", t.bytes as f64),
                ("files", t.files as f64),
                ("indexes", t.indexed.len() as f64),
                ("full_loads", t.full_loads as f64),
                ("incremental_loads", t.incremental_loads as f64),
                ("last_load_seconds", t.last_load_ms / 1000.0),
            ] {
                self.acceleration
                    .with_label_values(&[&t.table, stat])
                    .set(value);
            }
        }
        let declined = accelerator
            .counters()
            .declined
            .load(std::sync::atomic::Ordering::Relaxed);
        self.acceleration
            .with_label_values(&["", "declined"])
            .set(declined as f64);
        self.acceleration
            .with_label_values(&["", "max_bytes"])
            .set(accelerator.max_bytes() as f64);
    }

    /// Counts and times one finished query.
    pub fn observe(&self, r: &QueryRecord) {
        let outcome = match &r.error {
            None => "ok",
            Some(e) if e.starts_with("canceling statement") => "canceled",
            Some(_) => "error",
        };
        let engine = if r.engine.is_empty() {
            "none"
        } else {
            r.engine.as_str()
        };
        let labels = super::handles::Labels {
            frontend: r.frontend,
            group: &r.group,
            engine,
            shape: r.shape.map_or("unknown", |s| s.name()),
            cache: r.cache.name(),
            outcome,
        };
        let families = super::handles::Families {
            id: self.id,
            queries: &self.queries,
            latency: &self.latency,
            rows: &self.rows,
        };
        super::handles::with(&families, &labels, |h| {
            h.queries.inc();
            h.latency.observe(r.millis / 1000.0);
            h.rows.inc_by(r.rows);
        });
        if r.frontend == crate::service::Frontend::Mcp {
            self.agent_queries
                .with_label_values(&[&r.user, &r.group, outcome])
                .inc();
            self.agent_scan
                .with_label_values(&[&r.user, &r.group])
                .inc_by(r.scan_bytes);
        }
    }

    /// The text exposition, with the scrape-time gauges refreshed from `scrape`.
    pub fn render(&self, scrape: &Scrape<'_>) -> String {
        for (group, running, queued) in scrape.router.load_by_group() {
            self.group_load
                .with_label_values(&[&group, "running"])
                .set(running as i64);
            self.group_load
                .with_label_values(&[&group, "queued"])
                .set(queued as i64);
        }
        for engine in &scrape.engines {
            let open = !matches!(
                scrape.router.stats.breaker(engine),
                crate::routing::stats::Breaker::Closed
            );
            self.breaker_open
                .with_label_values(&[engine])
                .set(i64::from(open));
        }
        for (stat, value) in &scrape.cache {
            self.cache.with_label_values(&[stat]).set(*value as f64);
        }
        let t = scrape.lake.token_stats();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        self.tokens
            .with_label_values(&["lookups"])
            .set(load(&t.lookups) as f64);
        self.tokens
            .with_label_values(&["lookup_seconds"])
            .set(load(&t.lookup_micros) as f64 / 1e6);
        self.tokens
            .with_label_values(&["reused"])
            .set(load(&t.reused) as f64);
        if let Some(stats) = scrape.lake.object_cache_stats() {
            for t in &stats.tiers {
                for (stat, value) in [
                    ("hits", t.hits),
                    ("misses", t.misses),
                    ("hit_bytes", t.hit_bytes),
                    ("miss_bytes", t.miss_bytes),
                    ("bytes", t.bytes),
                    ("capacity_bytes", t.capacity),
                ] {
                    self.objects
                        .with_label_values(&[t.tier.name(), stat])
                        .set(value as f64);
                }
            }
            for (request, count) in &stats.requests {
                self.object_requests
                    .with_label_values(&[request.name()])
                    .set(*count as f64);
            }
        }
        if let Some(d) = scrape.lake.decoded_stats() {
            for (stat, value) in [("hits", d.hits), ("misses", d.misses), ("bytes", d.bytes)] {
                self.objects
                    .with_label_values(&["decoded", stat])
                    .set(value as f64);
            }
        }
        if let Some(accelerator) = scrape.accelerator {
            self.render_acceleration(accelerator);
        }
        for info in table_infos(scrape.lake) {
            for (stat, value) in [
                ("snapshot_age_seconds", info.snapshot_age_seconds),
                ("data_files", info.data_files as f64),
                ("delete_files", info.delete_files as f64),
                ("records", info.records as f64),
                ("bytes", info.bytes as f64),
            ] {
                self.table.with_label_values(&[&info.name, stat]).set(value);
            }
        }
        let m = scrape.maintainer;
        for ((kind, result), (count, secs)) in m
            .counters()
            .by_kind
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            self.maintenance
                .with_label_values(&[kind.name(), result.name(), "count"])
                .set(*count as f64);
            self.maintenance
                .with_label_values(&[kind.name(), result.name(), "seconds"])
                .set(*secs);
        }
        let slo = m.slo();
        for (stat, value) in [
            ("tables", slo.tables as f64),
            ("maintained", slo.maintained as f64),
            ("failure_ratio", slo.failure_ratio),
            ("backlog", slo.backlog as f64),
            ("oldest_wait_seconds", slo.oldest_wait_s),
            ("operations_last_hour", slo.operations_last_hour as f64),
            ("commits_last_hour", slo.commits_last_hour as f64),
        ] {
            self.maintenance_slo.with_label_values(&[stat]).set(value);
        }
        self.auth_failures.set(scrape.auth_failures as i64);
        let c = m.telemetry().counters();
        self.telemetry
            .with_label_values(&["sent"])
            .set(load(&c.sent) as f64);
        self.telemetry
            .with_label_values(&["dropped"])
            .set(load(&c.dropped) as f64);
        for h in m.last_health() {
            for (stat, value) in [
                ("score", h.score),
                ("small_files", h.small_files as f64),
                ("manifests", h.manifests as f64),
                ("snapshots", h.snapshots as f64),
                ("heat", h.heat),
            ] {
                self.health.with_label_values(&[&h.table, stat]).set(value);
            }
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// What lakegate knows of a table at its current snapshot (from the snapshot summary).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableInfo {
    /// `schema.table`.
    pub name: String,
    /// The current snapshot.
    pub snapshot_id: Option<i64>,
    /// Seconds since that snapshot was committed.
    pub snapshot_age_seconds: f64,
    /// Live data files.
    pub data_files: u64,
    /// Live delete files.
    pub delete_files: u64,
    /// Live records.
    pub records: u64,
    /// Bytes in data files.
    pub bytes: u64,
}

/// Every table lakegate has resolved, at the version last resolved.
pub fn table_infos(lake: &Lake) -> Vec<TableInfo> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    lake.known_tables()
        .into_iter()
        .map(|t| {
            let snapshot = t.table.metadata().current_snapshot();
            let prop = |k: &str| {
                snapshot
                    .and_then(|s| s.summary().additional_properties.get(k))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            TableInfo {
                name: format!("{}.{}", t.ident.namespace().join("."), t.ident.name()),
                snapshot_id: t.snapshot_id,
                snapshot_age_seconds: snapshot
                    .map_or(0.0, |s| (now_ms - s.timestamp_ms()).max(0) as f64 / 1000.0),
                data_files: prop("total-data-files"),
                delete_files: prop("total-delete-files"),
                records: prop("total-records"),
                bytes: prop("total-files-size"),
            }
        })
        .collect()
}

/// Shared metrics.
pub type MetricsRef = Arc<Metrics>;

//! The HTTP side of the gateway (`--http-listen`, default 127.0.0.1:8080): Prometheus
//! `GET /metrics` and a JSON admin API for operators, load balancers and `lakegate status` /
//! `lakegate queries`:
//!
//! | path | answer |
//! |---|---|
//! | `/api/health` | 200 while the process serves (liveness) |
//! | `/api/ready` | 200 when the catalog answers within 2 s, else 503 (readiness) |
//! | `/api/engines` | each engine's health, checked now |
//! | `/api/routing` | groups and rules in force, per-group load, observed latency, breakers |
//! | `/api/queries?limit=N&slowest=true` | recent (or slowest) queries from the history |
//! | `/api/cache` | result cache counters |
//! | `/api/tables` | tables seen, at their current snapshot: age, files, delete files |
//! | `/api/table_health` | every table's health score, reasons and trend |
//! | `/api/table/{ns.table}` | one table: freshness budget, partitions, operations |
//! | `/api/operations` | the maintenance operations log, newest first |
//! | `/` | the web console (reads the endpoints above) |
//!
//! With users configured (`[[auth.users]]`), everything but `/api/health` and `/api/ready`
//! needs HTTP basic auth (or a Flight SQL bearer token) of a user with role `admin` or
//! `monitor`: 401 with a `WWW-Authenticate` challenge (browsers prompt, Prometheus sends
//! `basic_auth`), 403 for other users.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::metrics::{Metrics, table_infos};
use crate::service::GatewayService;

#[derive(Clone)]
struct AppState {
    service: Arc<GatewayService>,
    metrics: Arc<Metrics>,
}

/// The bound HTTP listener.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    app: Router,
    header_timeout: std::time::Duration,
}

impl HttpServer {
    /// Binds `addr` and prepares the routes.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound.
    pub async fn bind(
        addr: SocketAddr,
        configured: &str,
        service: Arc<GatewayService>,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind {
                setting: "http.listen",
                addr: configured.to_string(),
                source,
            })?;
        let state = AppState { service, metrics };
        let protected = Router::new()
            .route("/metrics", get(metrics_text))
            .route("/api/engines", get(engines))
            .route("/api/routing", get(routing))
            .route("/api/queries", get(queries))
            .route("/api/cache", get(cache))
            .route("/api/tables", get(tables))
            .route("/", get(console_page))
            .route("/api/table/{name}", get(table_detail))
            .route("/api/table_health", get(table_health))
            .route("/api/operations", get(operations))
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                require_operator,
            ));
        let app = Router::new()
            .route(
                "/api/health",
                get(|| async { Json(json!({"status": "ok"})) }),
            )
            .route("/api/ready", get(ready))
            .merge(protected)
            .with_state(state);
        Ok(Self {
            listener,
            app,
            header_timeout: crate::config::HttpConfig::default().header_timeout,
        })
    }

    /// Closes connections that do not send a request's headers within `timeout`.
    pub fn with_header_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// The bound address.
    ///
    /// # Errors
    /// When the socket has no local address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` fires; connections then finish their request in flight.
    ///
    /// Each connection must send a request's headers within `header_timeout` (hyper's timer
    /// is set here; `axum::serve` leaves it unset, so a client that never finished its headers
    /// held its connection forever).
    pub async fn run(self, shutdown: CancellationToken) {
        use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
        use hyper_util::server::conn::auto::Builder;
        use hyper_util::service::TowerToHyperService;
        let service = TowerToHyperService::new(self.app);
        while let Some((socket, _)) =
            crate::frontend::accept(&self.listener, &shutdown, "http.listen").await
        {
            let (service, shutdown, timeout) =
                (service.clone(), shutdown.clone(), self.header_timeout);
            tokio::spawn(async move {
                let mut builder = Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(timeout);
                let conn = builder.serve_connection(TokioIo::new(socket), service);
                tokio::pin!(conn);
                let served = tokio::select! {
                    served = conn.as_mut() => served,
                    () = shutdown.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        conn.await
                    }
                };
                if let Err(e) = served {
                    tracing::debug!(error = %e, "http connection ended");
                }
            });
        }
        tracing::info!("http endpoint stopped");
    }
}

/// Roles that may read the HTTP side when users are configured.
const OPERATOR_ROLES: [&str; 2] = ["admin", "monitor"];

/// Lets a request through when no users are configured, or when it proves a user with an
/// operator role.
async fn require_operator(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let auth = state.service.auth();
    if !auth.required() {
        return next.run(request).await;
    }
    let user = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| auth.http_user(v));
    match user {
        None => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"lakegate\", charset=\"UTF-8\"",
            )],
            Json(json!({"error": "authentication required: HTTP basic auth of a user with role admin or monitor"})),
        )
            .into_response(),
        Some(user)
            if auth
                .roles(&user)
                .iter()
                .any(|r| OPERATOR_ROLES.contains(&r.as_str())) =>
        {
            next.run(request).await
        }
        Some(user) => (
            StatusCode::FORBIDDEN,
            Json(json!({"error": format!("user \"{user}\" needs role admin or monitor")})),
        )
            .into_response(),
    }
}

/// The web console.
async fn console_page() -> axum::response::Html<&'static str> {
    axum::response::Html(crate::console::PAGE)
}

/// One table's page data (see [`crate::console::table_detail`]).
async fn table_detail(
    State(s): State<AppState>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> axum::response::Response {
    match crate::console::table_detail(&s.service, &name).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => {
            let status = match e.kind() {
                lakegate_engines::ErrorKind::UndefinedTable => StatusCode::NOT_FOUND,
                lakegate_engines::ErrorKind::Unsupported => StatusCode::BAD_REQUEST,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            (status, Json(json!({ "error": e.to_string() }))).into_response()
        }
    }
}

/// Every table's health (assessed at most 2 s ago), least healthy first, with its trend.
async fn table_health(State(s): State<AppState>) -> axum::response::Response {
    let m = s.service.maintainer();
    match m.health_within(std::time::Duration::from_secs(2)).await {
        Ok(h) => {
            let tables: Vec<Value> = h
                .iter()
                .map(|t| {
                    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
                    let trend: Vec<Value> = m
                        .trend(&t.table)
                        .into_iter()
                        .rev()
                        .take(60)
                        .rev()
                        .map(|(at, score, files)| json!({"at_ms": at, "score": score, "files": files}))
                        .collect();
                    v["trend"] = json!(trend);
                    // The estate view lists tables; partitions are on each table's page.
                    v["partitions"] = json!(t.partitions.len());
                    v
                })
                .collect();
            Json(json!({ "tables": tables })).into_response()
        }
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// The maintenance operations log, newest first.
async fn operations(State(s): State<AppState>) -> Json<serde_json::Value> {
    let mut ops = s.service.maintainer().log().all();
    ops.reverse();
    Json(json!({ "operations": ops }))
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(&s.service).await,
    )
}

async fn ready(State(s): State<AppState>) -> impl IntoResponse {
    let check =
        tokio::time::timeout(std::time::Duration::from_secs(2), s.service.directory()).await;
    match check {
        Ok(Ok(d)) => (
            StatusCode::OK,
            Json(json!({"status": "ready", "schemas": d.schemas.len()})),
        ),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "catalog unavailable", "error": e.to_string()})),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "catalog did not answer within 2 s"})),
        ),
    }
}

async fn engines(State(s): State<AppState>) -> Json<Value> {
    let default = s.service.engines().default.clone();
    let list: Vec<Value> = s
        .service
        .engine_health()
        .await
        .into_iter()
        .map(|(engine, error, ms)| {
            json!({"engine": engine, "healthy": error.is_none(), "is_default": engine == default,
                   "check_ms": ms, "error": error})
        })
        .collect();
    Json(json!({ "engines": list }))
}

async fn routing(State(s): State<AppState>) -> Json<Value> {
    let router = s.service.router();
    let table = router.table();
    let groups: Vec<Value> = table
        .groups
        .values()
        .map(|g| {
            json!({"name": g.name, "engines": g.engines, "max_concurrent": g.max_concurrent,
                   "queue_length": g.queue_length, "queue_timeout_ms": g.queue_timeout.as_millis() as u64,
                   "cache": g.cache, "max_staleness_ms": g.max_staleness.as_millis() as u64,
                   "explore": g.explore, "selectable": g.selectable})
        })
        .collect();
    let rules: Vec<Value> = table
        .rules
        .iter()
        .map(|r| {
            json!({"name": r.spec.name, "priority": r.spec.priority, "group": r.spec.group,
                        "file": r.file.display().to_string()})
        })
        .collect();
    let load: Vec<Value> = router
        .load_by_group()
        .into_iter()
        .map(|(g, running, queued)| json!({"group": g, "running": running, "queued": queued}))
        .collect();
    let observed: Vec<Value> = router
        .stats
        .snapshot()
        .into_iter()
        .map(|((engine, shape, bucket), o)| {
            json!({"engine": engine, "shape": shape.name(),
                   "size_bucket": crate::routing::stats::bucket_name(bucket), "queries": o.count,
                   "ewma_ms": o.ewma_ms, "p50_ms": o.quantile(0.5), "p95_ms": o.quantile(0.95),
                   "success_rate": o.success})
        })
        .collect();
    let breakers: serde_json::Map<String, Value> = s
        .service
        .engines()
        .names()
        .into_iter()
        .map(|e| {
            let state = match router.stats.breaker(e) {
                crate::routing::stats::Breaker::Closed => "closed",
                crate::routing::stats::Breaker::Open { .. } => "open",
                _ => "half-open",
            };
            (e.to_string(), json!(state))
        })
        .collect();
    Json(
        json!({"default_group": table.default_group, "groups": groups, "rules": rules,
                "load": load, "observed": observed, "warnings": table.warnings,
                "breakers": breakers}),
    )
}

#[derive(Deserialize)]
struct QueriesParams {
    limit: Option<usize>,
    slowest: Option<bool>,
}

async fn queries(State(s): State<AppState>, Query(p): Query<QueriesParams>) -> Json<Value> {
    let records = s.service.history().recent(
        p.limit.unwrap_or(100).min(10_000),
        p.slowest.unwrap_or(false),
    );
    let list: Vec<Value> = records
        .iter()
        .filter_map(|r| serde_json::from_str(&crate::history::to_json(r)).ok())
        .collect();
    Json(json!({ "queries": list }))
}

async fn cache(State(s): State<AppState>) -> Json<Value> {
    let stats: serde_json::Map<String, Value> = s
        .service
        .cache()
        .stats_values()
        .await
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    Json(Value::Object(stats))
}

async fn tables(State(s): State<AppState>) -> Json<Value> {
    Json(json!({ "tables": table_infos(&s.service) }))
}

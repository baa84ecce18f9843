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
//! | `/api/maintenance` | the maintenance loop's service levels (coverage, failures, backlog) |
//! | `/api/pending` | agents' statements held for approval, and the last decisions |
//! | `POST /api/pending/{id}/approve`, `/reject` | decide one (role `admin`) |
//! | `/api/pending_operations` | maintenance operations held for approval (manual mode) |
//! | `POST /api/pending_operations/{id}/approve`, `/reject` | decide one (role `admin`) |
//! | `/mcp` | the MCP endpoint for agents ([`crate::frontend::mcp`]; its own authentication) |
//! | `/` | the web console (reads the endpoints above) |
//!
//! With users configured (`[[auth.users]]`), everything but `/api/health` and `/api/ready`
//! needs HTTP basic auth (or a Flight SQL bearer token) of a user with role `admin` or
//! `monitor`: 401 with a `WWW-Authenticate` challenge (browsers prompt, Prometheus sends
//! `basic_auth`), 403 for other users.

use std::net::SocketAddr;
use std::sync::Arc;

mod api;
mod approvals;

use std::time::Duration;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::observe::metrics::Metrics;
use crate::service::GatewayService;

/// What every route reads.
#[derive(Clone)]
struct AppState {
    service: Arc<GatewayService>,
    metrics: Arc<Metrics>,
}

/// The bound HTTP listener.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    app: Router,
    header_timeout: Duration,
    /// Ends `/mcp`'s open streams at shutdown (else connections would wait on them).
    mcp_shutdown: CancellationToken,
}

impl HttpServer {
    /// Binds `addr` and prepares the routes; `mcp`: serve `/mcp` with these tools.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound.
    pub async fn bind(
        addr: SocketAddr,
        service: Arc<GatewayService>,
        metrics: Arc<Metrics>,
        mcp: Option<Arc<crate::frontend::mcp::tools::Tools>>,
    ) -> Result<Self> {
        let (listener, addr) = crate::frontend::bind(addr, "http.listen").await?;
        let state = AppState { service, metrics };
        let protected = Router::new()
            .route("/metrics", get(api::metrics_text))
            .route("/api/engines", get(api::engines))
            .route("/api/routing", get(api::routing))
            .route("/api/queries", get(api::queries))
            .route("/api/cache", get(api::cache))
            .route("/api/tables", get(api::tables))
            .route("/", get(api::console_page))
            .route("/api/table/{name}", get(api::table_detail))
            .route("/api/table_health", get(api::table_health))
            .route("/api/operations", get(api::operations))
            .route("/api/maintenance", get(api::maintenance))
            .route("/api/state", get(api::state))
            .route("/api/pending", get(approvals::pending))
            .route("/api/pending/{id}/approve", post(approvals::approve))
            .route("/api/pending/{id}/reject", post(approvals::reject))
            .route(
                "/api/pending_operations",
                get(approvals::pending_operations),
            )
            .route(
                "/api/pending_operations/{id}/{verb}",
                post(approvals::decide_operation),
            )
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                require_operator,
            ));
        let mut app = Router::new()
            .route(
                "/api/health",
                get(|| async { Json(json!({"status": "ok"})) }),
            )
            .route("/api/ready", get(api::ready))
            .merge(protected)
            .with_state(state);
        let mcp_shutdown = CancellationToken::new();
        if let Some(tools) = mcp {
            app = app.merge(crate::frontend::mcp::http::router(
                tools,
                mcp_shutdown.clone(),
            ));
        }
        Ok(Self {
            listener,
            addr,
            app,
            header_timeout: crate::config::HttpConfig::default().header_timeout,
            mcp_shutdown,
        })
    }

    /// Closes connections that do not send a request's headers within `timeout`.
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }
}

#[async_trait]
impl crate::frontend::Server for HttpServer {
    fn name(&self) -> &'static str {
        "http"
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` fires; connections then finish their request in flight.
    ///
    /// Each connection must send a request's headers within `header_timeout` (hyper's timer
    /// is set here; `axum::serve` leaves it unset, so a client that never finished its headers
    /// held its connection forever).
    async fn run(self: Box<Self>, shutdown: CancellationToken) {
        use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
        use hyper_util::server::conn::auto::Builder;
        use hyper_util::service::TowerToHyperService;
        use tower::ServiceExt;
        let mcp_shutdown = self.mcp_shutdown.clone();
        let stop_mcp = shutdown.clone();
        tokio::spawn(async move {
            stop_mcp.cancelled().await;
            mcp_shutdown.cancel();
        });
        while let Some((socket, peer)) =
            crate::frontend::accept(&self.listener, &shutdown, "http.listen").await
        {
            // Each request knows its connection's peer (`/mcp` serves only loopback without users).
            let service = TowerToHyperService::new(self.app.clone().map_request(
                move |mut r: axum::http::Request<hyper::body::Incoming>| {
                    r.extensions_mut()
                        .insert(crate::frontend::mcp::http::Peer(peer));
                    r
                },
            ));
            let (shutdown, timeout) = (shutdown.clone(), self.header_timeout);
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

/// The configured user a request's `Authorization` header proves (basic auth or a Flight SQL
/// bearer token).
pub(crate) fn authorized_user(
    auth: &crate::security::auth::Auth,
    headers: &axum::http::HeaderMap,
) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| auth.http_user(v))
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
    match authorized_user(auth, request.headers()) {
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

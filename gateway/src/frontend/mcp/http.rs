//! MCP over streamable HTTP at `/mcp` on the HTTP listener, and over stdio for `lakegate mcp`.
//!
//! Authentication is the HTTP API's: with users configured, every request carries HTTP basic
//! auth or a Flight SQL bearer token of a configured user (401 otherwise), and acts as that
//! user — its access rules, masks and `[[mcp.agent]]` policy apply. Without users, only
//! loopback clients are served (403 otherwise), as the user [`super::ANONYMOUS`]. The `Host`
//! header is checked against `[mcp] allowed_hosts` (loopback names by default without users),
//! so a web page cannot reach a local gateway through DNS rebinding.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::tools::Tools;
use super::{ANONYMOUS, Agent, McpHandler};
use crate::error::{Error, Result};
use crate::security::auth::Auth;

/// The peer address of an HTTP connection (set per connection by the HTTP server).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// `/mcp`: the streamable HTTP service behind the authentication layer. `shutdown` ends its
/// open streams.
pub fn router(tools: Arc<Tools>, shutdown: CancellationToken) -> axum::Router {
    let auth = tools.service.auth().clone();
    let config = tools.service.agents().config();
    let hosts = match &config.allowed_hosts {
        Some(hosts) => hosts.clone(),
        None if auth.required() => Vec::new(),
        None => vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
    };
    let settings = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_cancellation_token(shutdown);
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::new(tools.clone(), None)),
        Arc::new(LocalSessionManager::default()),
        settings,
    );
    axum::Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(auth, authenticate))
}

/// Sets the request's [`Agent`], or answers 401 / 403.
async fn authenticate(
    State(auth): State<Arc<Auth>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let agent = if auth.required() {
        let Some(user) = crate::frontend::http::authorized_user(&auth, request.headers()) else {
            return (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    "Basic realm=\"lakegate\", charset=\"UTF-8\"",
                )],
                axum::Json(json!({"error": "authentication required: HTTP basic auth or a bearer token of a configured user"})),
            )
                .into_response();
        };
        user
    } else {
        let loopback = request
            .extensions()
            .get::<Peer>()
            .is_some_and(|p| p.0.ip().is_loopback());
        if !loopback {
            return (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"error": "no users are configured: /mcp serves loopback clients only; add [[auth.users]] to serve agents elsewhere"})),
            )
                .into_response();
        }
        ANONYMOUS.to_string()
    };
    request.extensions_mut().insert(Agent(agent));
    next.run(request).await
}

/// `lakegate mcp`: serves MCP on stdin/stdout as `user` until the client closes it.
///
/// # Errors
/// A user that is not configured (when users are); the transport failing.
pub async fn serve_stdio(tools: Arc<Tools>, user: &str) -> Result<()> {
    let auth = tools.service.auth();
    if auth.required() && !auth.knows(user) {
        return Err(Error::Config {
            setting: "--user".into(),
            reason: format!("`{user}` is not in [[auth.users]]: name a configured user"),
        });
    }
    let handler = McpHandler::new(tools, Some(user.to_string()));
    let running =
        handler
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Error::Unsupported {
                what: format!("MCP over stdio: {e}"),
            })?;
    let _ = running.waiting().await;
    Ok(())
}

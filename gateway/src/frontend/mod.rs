//! Frontends: thin translators between a wire protocol and the
//! [`crate::service::GatewayService`], each behind the same [`Server`] lifecycle — bound when
//! built (so its address is known before anything serves), then run until shutdown.
//!
//! - [`pg`] — the PostgreSQL wire protocol (pgwire).
//! - [`flight`] — Arrow Flight SQL (tonic).
//! - [`http`] — Prometheus metrics, the JSON admin API and the web console (axum).
//! - [`mcp`] — the Model Context Protocol for agents (at `/mcp` on the HTTP listener, or stdio).

pub mod flight;
pub mod http;
pub mod mcp;
pub mod pg;
mod threads;

use std::net::SocketAddr;

use async_trait::async_trait;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A bound endpoint: built (and bound) by its constructor, served by [`Server::run`].
#[async_trait]
pub trait Server: Send {
    /// The endpoint's name, as the `lakegate listening` line and logs show it (`pg`, ...).
    fn name(&self) -> &'static str;

    /// The address it is bound to (a port 0 in the config is resolved here).
    fn local_addr(&self) -> SocketAddr;

    /// Serves until `shutdown` fires, then returns once the endpoint has stopped accepting.
    async fn run(self: Box<Self>, shutdown: CancellationToken);
}

/// Binds `addr` for the endpoint configured by `setting`.
///
/// # Errors
/// [`crate::Error::Bind`] naming the setting.
pub(crate) async fn bind(
    addr: SocketAddr,
    setting: &'static str,
) -> crate::Result<(TcpListener, SocketAddr)> {
    let bind_error = |source| crate::Error::Bind {
        setting,
        addr: addr.to_string(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// The next connection on `listener` (Nagle off: small request/response messages), or `None`
/// once `shutdown` fires. A failed accept (descriptors exhausted, ...) is logged and retried
/// after 50 ms instead of spinning.
pub(crate) async fn accept(
    listener: &TcpListener,
    shutdown: &CancellationToken,
    endpoint: &str,
) -> Option<(TcpStream, std::net::SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return None,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((socket, peer)) => {
                let _ = socket.set_nodelay(true);
                return Some((socket, peer));
            }
            Err(e) => {
                tracing::warn!(%endpoint, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

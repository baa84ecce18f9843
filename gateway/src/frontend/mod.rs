//! Frontends: thin translators between a wire protocol and the [`crate::service::GatewayService`].

pub mod flight;
pub mod pg;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

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

//! The Arrow Flight SQL endpoint: the same [`crate::service::GatewayService`] as pgwire,
//! answering in Arrow.
//!
//! - [`frontend`] — sessions and statement contexts from call headers, running and describing.
//! - [`service`] — the Flight SQL commands (statements, prepared statements, metadata).
//! - [`metadata`] — SqlInfo, XDBC type info, keys, tables, parameter binding.
//! - [`endpoint`] — the gRPC service (adds GetSchema, which arrow-flight leaves unimplemented).
//! - [`auth`] — the handshake's basic auth → bearer tokens on every other call.
//!
//! Results stream batch by batch; a client that goes away drops the stream and with it the
//! query.

mod auth;
pub mod endpoint;
pub mod frontend;
pub mod metadata;
mod service;

use std::net::SocketAddr;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tracing::{debug, info, warn};

pub use auth::USER_HEADER;
pub use frontend::{
    ENGINE_HEADER, FlightSqlFrontend, GROUP_HEADER, STATEMENT_TIMEOUT_HEADER, TAG_HEADER, to_status,
};

use crate::error::Result;
use auth::AuthGate;

/// The Flight SQL endpoint, bound and ready to serve.
pub struct FlightServer {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    service: FlightSqlFrontend,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl FlightServer {
    /// Binds `addr` (port 0 picks a free port).
    ///
    /// # Errors
    /// [`Error::Bind`] naming `flight.listen`.
    pub async fn bind(addr: SocketAddr, service: FlightSqlFrontend) -> Result<Self> {
        let (listener, addr) = crate::frontend::bind(addr, "flight.listen").await?;
        Ok(Self {
            listener,
            addr,
            service,
            tls: None,
        })
    }

    /// Serves gRPC over TLS (ALPN h2) with `acceptor`, only that, when one is given.
    pub fn with_tls(mut self, acceptor: Option<tokio_rustls::TlsAcceptor>) -> Self {
        self.tls = acceptor;
        self
    }
}

#[async_trait::async_trait]
impl crate::frontend::Server for FlightServer {
    fn name(&self) -> &'static str {
        "flight"
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    async fn run(self: Box<Self>, shutdown: CancellationToken) {
        let this = *self;
        let auth = this.service.auth().clone();
        let router = tonic::transport::Server::builder()
            .layer(tower::layer::layer_fn(move |inner| {
                AuthGate::new(inner, auth.clone())
            }))
            .add_service(FlightServiceServer::new(endpoint::Endpoint::new(
                this.service,
            )));
        let served = match this.tls {
            None => {
                let incoming = TcpIncoming::from(this.listener).with_nodelay(Some(true));
                router
                    .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
                    .await
            }
            Some(acceptor) => {
                let incoming = tls_incoming(this.listener, acceptor, shutdown.clone());
                router
                    .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
                    .await
            }
        };
        match served {
            Ok(()) => info!("flight endpoint stopped"),
            Err(e) => warn!(error = %e, "flight endpoint failed"),
        }
    }
}

/// A TLS connection for tonic (which serves any stream that can tell its peer).
struct TlsConn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl tokio::io::AsyncRead for TlsConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Accepted connections after their TLS handshake (each handshake runs in its own task with
/// a 10 s limit, so a slow or silent client delays nobody else).
fn tls_incoming(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    shutdown: CancellationToken,
) -> impl futures::Stream<Item = std::io::Result<TlsConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<TlsConn>(64);
    tokio::spawn(async move {
        while let Some((socket, peer)) =
            crate::frontend::accept(&listener, &shutdown, "flight.listen").await
        {
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    acceptor.accept(socket),
                )
                .await;
                match handshake {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(TlsConn(tls)).await;
                    }
                    Ok(Err(e)) => debug!(%peer, error = %e, "flight TLS handshake failed"),
                    Err(_) => debug!(%peer, "flight TLS handshake timed out"),
                }
            });
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|conn| (Ok(conn), rx))
    })
}

//! The Postgres wire protocol endpoint (pgwire): accept loop, handlers, encoding, SQLSTATEs.
//! Each connection is served on one of the connection threads (`super::threads`).
//!
//! - [`handler`] — the handler set, simple query and statement running.
//! - [`startup`] — authentication and the session's start.
//! - [`extended`] — Parse/Describe/Bind/Execute; `parsed`: what a Parse makes of a text, and
//!   the connection's last one.
//! - `params`: bound parameters, date and time values read in the session's zone;
//! - `encode`: Arrow batches as data rows, `encoded`: a cached result's rows kept encoded;
//!   `cancel`: CancelRequest; [`idle`]: the
//!   idle-in-transaction watchdog; `sqlstate`: error kinds as SQLSTATEs.

mod buffered;
mod cancel;
mod encode;
mod encoded;
pub mod extended;
mod forward;
pub mod handler;
pub mod idle;
mod params;
mod parsed;
pub(crate) mod sqlstate;
pub mod startup;

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use handler::PgHandlers;

use super::threads::ConnectionThreads;

use crate::error::Result;

/// A bound Postgres endpoint.
pub struct PgServer {
    listener: TcpListener,
    addr: SocketAddr,
    handlers: Arc<PgHandlers>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl PgServer {
    /// Binds `addr` (port 0 picks a free port).
    ///
    /// # Errors
    /// [`Error::Bind`] naming `pg.listen`.
    pub async fn bind(addr: SocketAddr, handlers: PgHandlers) -> Result<Self> {
        let (listener, addr) = super::bind(addr, "pg.listen").await?;
        Ok(Self {
            listener,
            addr,
            handlers: Arc::new(handlers),
            tls: None,
        })
    }

    /// Serves TLS (SSLRequest and direct SSL) with `acceptor`.
    pub fn with_tls(mut self, acceptor: Option<tokio_rustls::TlsAcceptor>) -> Self {
        self.tls = acceptor;
        self
    }
}

#[async_trait]
impl super::Server for PgServer {
    fn name(&self) -> &'static str {
        "pg"
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    async fn run(self: Box<Self>, shutdown: CancellationToken) {
        let threads = match ConnectionThreads::start("lakegate-pg", 0, &shutdown) {
            Ok(threads) => Some(threads),
            Err(e) => {
                warn!(error = %e, "no connection threads: connections served on the shared runtime");
                None
            }
        };
        while let Some((socket, peer)) = super::accept(&self.listener, &shutdown, "pg.listen").await
        {
            let handlers = self.handlers.clone();
            let tls = self.tls.clone();
            let connection = move |socket: TcpStream| {
                let activity = Arc::new(idle::Activity::default());
                let handlers = handlers.for_connection(activity.clone());
                // A second descriptor of the socket, for the idle-in-transaction watchdog
                // (on the connection's thread). Aborted when the connection task ends, even
                // by a panic: the duplicate descriptor must not keep a dead connection's
                // socket open.
                let watchdog = std::os::fd::AsFd::as_fd(&socket)
                    .try_clone_to_owned()
                    .ok()
                    .map(|fd| AbortOnDrop(tokio::spawn(idle::watch(activity, fd.into()))));
                async move {
                    let _watchdog = watchdog;
                    if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                        warn!(%peer, error = %e, "pg connection ended with an error");
                    }
                }
            };
            match &threads {
                Some(threads) => threads.serve(socket, connection),
                None => {
                    tokio::spawn(connection(socket));
                }
            }
        }
        info!("pg endpoint stopped");
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

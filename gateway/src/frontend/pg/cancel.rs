//! Cancel requests: a client's CancelRequest (pid + secret key) stops its running statement,
//! including one that is already streaming rows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use pgwire::api::ConnectionManager;
use pgwire::api::cancel::CancelHandler;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio_util::sync::CancellationToken;

/// One connection's cancellation state: a token per running statement.
#[derive(Debug, Default)]
pub(crate) struct QueryCancel {
    current: Mutex<CancellationToken>,
}

impl QueryCancel {
    /// A fresh token for the statement that starts now.
    pub(crate) fn start(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = token.clone();
        token
    }

    fn cancel(&self) {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cancel();
    }
}

/// A connection's secret key (as bytes) and its cancellation state.
type Registered = (Vec<u8>, Weak<QueryCancel>);

/// Every live connection's cancellation state by backend pid.
#[derive(Default)]
pub(crate) struct Cancels {
    connections: Mutex<HashMap<i32, Registered>>,
}

impl Cancels {
    /// Registers a connection; the entry lives as long as the returned state.
    pub(crate) fn register(&self, pid: i32, secret: SecretKey) -> Arc<QueryCancel> {
        let state = Arc::new(QueryCancel::default());
        let mut map = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (_, w)| w.strong_count() > 0);
        // Compared as bytes: a 3.0 CancelRequest may decode the key differently than it was made.
        map.insert(pid, (secret.to_bytes().to_vec(), Arc::downgrade(&state)));
        state
    }

    fn find(&self, pid: i32, secret: &SecretKey) -> Option<Arc<QueryCancel>> {
        let map = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        let secret = secret.to_bytes();
        map.get(&pid)
            .filter(|(s, _)| s[..] == secret[..])
            .and_then(|(_, w)| w.upgrade())
    }
}

/// The CancelRequest handler.
pub(crate) struct PgCancel {
    /// Live connections.
    pub(crate) cancels: Arc<Cancels>,
    /// pgwire's own registry, which cancels a statement still being planned.
    pub(crate) manager: Arc<ConnectionManager>,
}

#[async_trait]
impl CancelHandler for PgCancel {
    async fn on_cancel_request(&self, request: CancelRequest) {
        // A wrong pid or secret is ignored silently, as PostgreSQL does.
        if let Some(state) = self.cancels.find(request.pid, &request.secret_key) {
            state.cancel();
        }
        self.manager.cancel(request.pid, &request.secret_key).await;
    }
}

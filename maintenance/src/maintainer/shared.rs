//! This maintainer among other gateways: the shared state it joins (`[state]`), whether it
//! leads, and the executor big compactions are handed to.

use std::sync::Arc;

use super::{Maintainer, tables_state};
use crate::error::Result;

impl Maintainer {
    /// Hands compactions of at least `executor_min_bytes` to `executor`.
    pub fn set_executor(&self, executor: Arc<crate::executor::SparkExecutor>) {
        let _ = self.executor.set(executor);
    }

    /// The executor of big compactions, if any.
    pub(crate) fn executor(&self) -> Option<&Arc<crate::executor::SparkExecutor>> {
        self.executor.get()
    }

    /// Works with other gateways through `state`: one leader runs the loop (the lease
    /// [`crate::state::LEADER`]), every operation holds its table's lock, and the operations
    /// log is the database's (every replica's records).
    ///
    /// # Errors
    /// The database cannot be read.
    pub async fn share(&self, state: Arc<crate::state::SharedState>) -> Result<()> {
        self.log
            .share(Arc::clone(&state), self.stopping.clone())
            .await?;
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = tables_state(&self.log.all());
        self.approvals.set_base(state.id_base());
        crate::approvals::share(
            Arc::clone(&self.approvals),
            Arc::clone(&state),
            self.stopping.clone(),
        );
        let _ = self.shared.set(state);
        Ok(())
    }

    /// The shared state, when several gateways work together.
    pub fn shared(&self) -> Option<&Arc<crate::state::SharedState>> {
        self.shared.get()
    }

    /// Whether this gateway's loop holds the leader lease (always, with no shared state and
    /// the loop running).
    pub fn is_leader(&self) -> bool {
        self.leader.load(std::sync::atomic::Ordering::Relaxed)
    }
}

//! Per-group admission: each routing group has its own concurrency slots and its own queue, so a
//! burst in one group never waits in front of another. A full queue or a wait past the group's
//! timeout is refused at once (SQLSTATE 53300), never left hanging.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// One group's slots and queue.
#[derive(Debug)]
pub struct Admission {
    group: String,
    slots: Arc<Semaphore>,
    max_concurrent: usize,
    waiting: AtomicUsize,
    queue_length: usize,
    queue_timeout: Duration,
}

/// A running query's slot; dropping it (when the result stream ends or is dropped) frees it.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    waited: Duration,
}

impl Slot {
    /// How long the query waited in its group's queue for this slot.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl Admission {
    /// Slots and a queue for `group`.
    pub fn new(
        group: &str,
        max_concurrent: usize,
        queue_length: usize,
        queue_timeout: Duration,
    ) -> Self {
        Self {
            group: group.to_string(),
            slots: Arc::new(Semaphore::new(max_concurrent.max(1))),
            max_concurrent: max_concurrent.max(1),
            waiting: AtomicUsize::new(0),
            queue_length,
            queue_timeout,
        }
    }

    /// Whether this admission already has these limits (a rules reload keeps it then).
    pub fn same_limits(
        &self,
        max_concurrent: usize,
        queue_length: usize,
        timeout: Duration,
    ) -> bool {
        self.max_concurrent == max_concurrent.max(1)
            && self.queue_length == queue_length
            && self.queue_timeout == timeout
    }

    /// Waits for a slot.
    ///
    /// # Errors
    /// [`Error::TooManyQueries`] when the queue is full or the wait exceeds the timeout.
    pub async fn enter(&self) -> Result<Slot> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(Slot {
                _permit: permit,
                waited: Duration::ZERO,
            });
        }
        let since = std::time::Instant::now();
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.waiting);
        if queued >= self.queue_length {
            return Err(self.refuse(format!("its queue is full ({} waiting)", self.queue_length)));
        }
        match tokio::time::timeout(self.queue_timeout, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Slot {
                _permit: permit,
                waited: since.elapsed(),
            }),
            Ok(Err(_)) => Err(self.refuse("it is shutting down".into())),
            Err(_) => Err(self.refuse(format!("no slot freed within {:?}", self.queue_timeout))),
        }
    }

    fn refuse(&self, why: String) -> Error {
        Error::TooManyQueries {
            group: self.group.clone(),
            max_concurrent: self.max_concurrent,
            why,
        }
    }

    /// Queries running now.
    pub fn running(&self) -> usize {
        self.max_concurrent - self.slots.available_permits()
    }

    /// Queries waiting now.
    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_queue_is_refused_at_once_and_slots_free_on_drop() {
        let a = Arc::new(Admission::new("g", 1, 1, Duration::from_secs(5)));
        let first = a.enter().await.expect("slot");
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.enter().await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(a.queued(), 1);
        let started = std::time::Instant::now();
        let refused = a.enter().await.expect_err("queue full");
        assert!(started.elapsed() < Duration::from_millis(50));
        assert!(refused.to_string().contains("queue is full"), "{refused}");
        drop(first);
        waiter
            .await
            .expect("join")
            .expect("the waiter gets the freed slot");
    }

    #[tokio::test]
    async fn waiting_past_the_timeout_is_refused() {
        let a = Admission::new("g", 1, 4, Duration::from_millis(50));
        let _held = a.enter().await.expect("slot");
        let err = a.enter().await.expect_err("timeout");
        assert!(err.to_string().contains("no slot freed"), "{err}");
        assert_eq!(a.queued(), 0);
    }
}

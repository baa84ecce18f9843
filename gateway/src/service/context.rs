//! The per-statement context every frontend fills the same way: who asks (user, the routing
//! group the session asked for), where from, the query id that names the statement in logs and
//! history, and how it stops early — a cancel token (a pgwire CancelRequest, a dropped Flight
//! call) and a deadline (`statement_timeout`, over pgwire and Flight SQL alike).
//!
//! The service applies both itself: planning and engine start-up run under [`StatementContext::guard`],
//! and the rows under [`StatementContext::bound`], so a frontend only has to fill the context.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// The wire a statement came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Frontend {
    /// The PostgreSQL wire protocol.
    Pg,
    /// Arrow Flight SQL.
    Flight,
    /// The Model Context Protocol (agents).
    Mcp,
    /// In-process (`lakegate exec`, `lakegate route`).
    #[default]
    Local,
}

impl Frontend {
    /// The name in metrics and `lakegate.queries`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pg => "pg",
            Self::Flight => "flight",
            Self::Mcp => "mcp",
            Self::Local => "local",
        }
    }
}

/// Why a statement stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// A cancel request (or the client went away).
    Canceled,
    /// `statement_timeout` passed.
    TimedOut,
}

impl Interrupt {
    /// The error a client receives (57014 either way, with PostgreSQL's wording).
    pub fn error(self) -> Error {
        match self {
            Self::Canceled => Error::Canceled,
            Self::TimedOut => Error::Engine(lakegate_engines::Error::TimedOut),
        }
    }

    fn engine_error(self) -> DataFusionError {
        match self {
            Self::Canceled => lakegate_engines::Error::Canceled,
            Self::TimedOut => lakegate_engines::Error::TimedOut,
        }
        .into_datafusion()
    }
}

/// One statement's context.
#[derive(Debug, Clone)]
pub struct StatementContext {
    /// The id naming this statement in traces, `lakegate.queries` and the history file.
    pub query_id: u64,
    /// The authenticated user.
    pub user: String,
    /// The frontend it came through.
    pub frontend: Frontend,
    /// The routing group the session asked for (`None`: the rules decide).
    pub group: Option<String>,
    /// The engine the session pinned (`None`: the router chooses).
    pub engine: Option<String>,
    /// `statement_timeout` (`None`: none).
    pub timeout: Option<Duration>,
    /// Table versions shared with the other messages of its extended-protocol batch.
    pub batch: super::batch::Batch,
    /// Scan estimates past this many bytes are pruned by the WHERE even when no group cap asks
    /// for it (an agent's own thresholds; 0: only the group's cap).
    pub prune_above: u64,
    /// The statement's text as the client sent it, when the frontend has it and the text holds
    /// this one statement (`lakegate.queries` shows it for a statement whose literals were
    /// lifted: printing the statement again would cost more than the rest of a cache hit).
    pub text: Option<std::sync::Arc<str>>,
    /// The statement as the frontend interned it ([`super::weight::Interned`]): planning it
    /// does not hash its tree again.
    pub interned: Option<super::weight::Interned>,
    deadline: Option<Instant>,
    cancel: CancellationToken,
}

impl StatementContext {
    /// A context for a statement starting now; `cancel` stops it from outside.
    pub fn new(
        query_id: u64,
        user: &str,
        frontend: Frontend,
        cancel: CancellationToken,
        timeout: Option<Duration>,
    ) -> Self {
        Self {
            query_id,
            user: user.to_string(),
            frontend,
            group: None,
            engine: None,
            timeout,
            batch: super::batch::Batch::None,
            prune_above: 0,
            text: None,
            interned: None,
            deadline: timeout.map(|t| Instant::now() + t),
            cancel,
        }
    }

    /// The same context asking for routing group `group` and engine `engine`.
    pub fn with_routing(mut self, group: Option<&str>, engine: Option<&str>) -> Self {
        self.group = group.map(str::to_string);
        self.engine = engine.map(str::to_string);
        self
    }

    /// The same context, pruning scan estimates past `bytes` (see [`Self::prune_above`]).
    pub fn with_prune_above(mut self, bytes: u64) -> Self {
        self.prune_above = bytes;
        self
    }

    /// The same context sharing table versions with its batch (see [`super::batch`]).
    pub fn with_batch(mut self, batch: super::batch::Batch) -> Self {
        self.batch = batch;
        self
    }

    /// The same context, with the statement's text as sent (see [`Self::text`]).
    pub fn with_text(mut self, text: Option<std::sync::Arc<str>>) -> Self {
        self.text = text;
        self
    }

    /// The same context, running the statement `interned` holds (see [`Self::interned`]).
    pub fn with_interned(mut self, interned: Option<super::weight::Interned>) -> Self {
        self.interned = interned;
        self
    }

    /// How the statement stops early, for one guarded future or stream.
    fn stop(&self) -> Stop {
        Stop {
            cancel: self.cancel.clone(),
            deadline: self.deadline,
            waiting: None,
        }
    }

    /// Runs `work`, giving up (and dropping it, which stops it) at a cancel or the deadline.
    ///
    /// # Errors
    /// `work`'s own, or 57014 when interrupted.
    pub fn guard<'a, T: 'a>(
        &'a self,
        work: impl Future<Output = Result<T>> + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        // On the heap, boxed at the call: planning and engine futures are large, a statement
        // nests several, and the caller's future then holds a pointer instead of `work`'s
        // whole state, which every boxing of an enclosing future would copy again.
        let mut work = Box::pin(work);
        let mut stop = self.stop();
        std::future::poll_fn(move |cx| {
            if let Poll::Ready(why) = stop.poll_now(cx) {
                return Poll::Ready(Err(why.error()));
            }
            match work.as_mut().poll(cx) {
                Poll::Ready(done) => Poll::Ready(done),
                Poll::Pending => stop.poll_wait(cx).map(|why| Err(why.error())),
            }
        })
    }

    /// `stream`, ending with 57014 at a cancel or the deadline; the engine's stream is dropped
    /// then, which stops the query.
    pub fn bound(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let schema = stream.schema();
        let mut stop = self.stop();
        let mut rows = Some(stream);
        let bounded = futures::stream::poll_fn(move |cx| {
            let Some(stream) = rows.as_mut() else {
                return Poll::Ready(None);
            };
            let polled = match stop.poll_now(cx) {
                Poll::Ready(why) => Poll::Ready(Some(Err(why.engine_error()))),
                Poll::Pending => match stream.poll_next_unpin(cx) {
                    Poll::Pending => stop.poll_wait(cx).map(|why| Some(Err(why.engine_error()))),
                    ready => ready,
                },
            };
            // Ended, or interrupted: the engine's stream is dropped now, and nothing follows.
            if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
                rows = None;
            }
            polled
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, bounded))
    }
}

/// A statement's cancel token and deadline, as one guarded future or stream waits on them.
/// Checked on every poll (an atomic load, and the clock when there is a deadline); waited on —
/// a waiter registered with the token, a timer — only once the work is pending, so a statement
/// answered at once (a cache hit) registers neither.
struct Stop {
    cancel: CancellationToken,
    deadline: Option<Instant>,
    /// Resolves at the cancel or the deadline, once the work was pending.
    waiting: Option<Pin<Box<dyn Future<Output = Interrupt> + Send + 'static>>>,
}

impl Stop {
    /// Ready when the statement is interrupted already.
    fn poll_now(&mut self, cx: &mut Context<'_>) -> Poll<Interrupt> {
        if self.cancel.is_cancelled() {
            return Poll::Ready(Interrupt::Canceled);
        }
        if self.deadline.is_some_and(|at| Instant::now() >= at) {
            return Poll::Ready(Interrupt::TimedOut);
        }
        match self.waiting.as_mut() {
            Some(waiting) => waiting.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    /// After the work was pending: wakes the task at the cancel or the deadline.
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Interrupt> {
        if self.waiting.is_some() {
            // Polled (and registered) by `poll_now` in this same poll.
            return Poll::Pending;
        }
        let (cancel, deadline) = (self.cancel.clone(), self.deadline);
        let waiting = self.waiting.insert(Box::pin(async move {
            tokio::select! {
                biased;
                () = cancel.cancelled() => Interrupt::Canceled,
                () = sleep_until(deadline) => Interrupt::TimedOut,
            }
        }));
        waiting.as_mut().poll(cx)
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    fn endless() -> SendableRecordBatchStream {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1]))])
            .expect("batch");
        let rows = futures::stream::repeat_with(move || Ok(batch.clone())).then(|b| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            b
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }

    #[tokio::test]
    async fn a_deadline_ends_planning_and_streaming_with_a_timeout() {
        let ctx = StatementContext::new(
            1,
            "u",
            Frontend::Flight,
            CancellationToken::new(),
            Some(Duration::from_millis(50)),
        );
        let slow = ctx
            .guard(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(())
            })
            .await;
        assert!(matches!(
            slow,
            Err(Error::Engine(lakegate_engines::Error::TimedOut))
        ));
        let mut rows = ctx.bound(endless());
        let mut seen = 0;
        let last = loop {
            match rows.next().await {
                Some(Ok(_)) => seen += 1,
                other => break other,
            }
        };
        assert!(
            matches!(last, Some(Err(ref e)) if e.to_string().contains("statement timeout")),
            "{last:?}"
        );
        assert!(
            rows.next().await.is_none(),
            "the stream ends after the error"
        );
        assert!(seen < 50, "{seen} batches before the deadline");
    }

    #[tokio::test]
    async fn a_cancel_wakes_pending_work_and_a_cancelled_statement_does_not_start() {
        let cancel = CancellationToken::new();
        let ctx = StatementContext::new(3, "u", Frontend::Pg, cancel.clone(), None);
        let later = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            later.cancel();
        });
        let pending = ctx.guard(std::future::pending::<Result<()>>()).await;
        assert!(matches!(pending, Err(Error::Canceled)), "{pending:?}");
        let started = std::sync::atomic::AtomicBool::new(false);
        let after = ctx
            .guard(async {
                started.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            })
            .await;
        assert!(matches!(after, Err(Error::Canceled)), "{after:?}");
        assert!(!started.load(std::sync::atomic::Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_cancel_stops_the_rows_and_no_deadline_never_fires() {
        let cancel = CancellationToken::new();
        let ctx = StatementContext::new(2, "u", Frontend::Pg, cancel.clone(), None);
        assert_eq!(ctx.guard(async { Ok(7) }).await.expect("runs"), 7);
        let mut rows = ctx.bound(endless());
        assert!(matches!(rows.next().await, Some(Ok(_))));
        cancel.cancel();
        let next = rows.next().await;
        assert!(
            matches!(next, Some(Err(ref e)) if e.to_string().contains("user request")),
            "{next:?}"
        );
        assert!(rows.next().await.is_none());
    }
}

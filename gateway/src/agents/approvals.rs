//! Statements held for an admin's approval. An agent's expensive statement (under
//! `expensive = "approve"`) is listed here while its call waits; an admin approves or rejects it
//! (`POST /api/pending/{id}/approve|reject`, `lakegate agents approve|reject`), recorded with
//! who and when. Approved statements are planned again from scratch when they run, so every
//! check applies to the tables as they are then. A wait that ends (timeout, the client went
//! away) takes its entry off the list.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

/// Decisions kept for `GET /api/pending` (newest last).
const DECIDED_KEPT: usize = 200;

/// A statement waiting for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Its number (for approve / reject).
    pub id: u64,
    /// The agent that asked.
    pub user: String,
    /// The SQL.
    pub sql: String,
    /// Why it is held.
    pub reason: String,
    /// Its estimated scan.
    pub scan_bytes: u64,
    /// When it was asked (ms since the epoch).
    pub requested_ms: i64,
}

/// An admin's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Run it.
    Approved,
    /// Do not.
    Rejected,
}

/// A decision, with who and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Approved or rejected.
    pub verdict: Verdict,
    /// Who decided.
    pub by: String,
    /// When (ms since the epoch).
    pub at_ms: i64,
}

/// A decided request, for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decided {
    /// What was asked.
    #[serde(flatten)]
    pub request: Request,
    /// The answer.
    pub decision: Decision,
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An admin decided.
    Decided(Decision),
    /// Nobody decided within the timeout.
    TimedOut,
}

struct Entry {
    request: Request,
    answer: watch::Sender<Option<Decision>>,
}

/// The statements waiting, and the last decisions.
#[derive(Default)]
pub struct Approvals {
    next: AtomicU64,
    pending: Mutex<BTreeMap<u64, Entry>>,
    decided: Mutex<VecDeque<Decided>>,
}

/// A place in the list; dropping it undecided takes the statement off the list.
pub struct Ticket<'a> {
    approvals: &'a Approvals,
    id: u64,
    answer: watch::Receiver<Option<Decision>>,
}

/// `decide` of a request that is not waiting (decided already, or never asked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no statement {0} is waiting for approval")]
pub struct NotWaiting(pub u64);

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Approvals {
    /// Numbers requests from `base` on (an id unique across replicas); before any is asked.
    pub fn set_base(&self, base: u64) {
        let _ = self
            .next
            .compare_exchange(0, base, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Lists a statement as waiting; the ticket waits for the answer.
    pub fn request(&self, user: &str, sql: &str, reason: &str, scan_bytes: u64) -> Ticket<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (answer, receiver) = watch::channel(None);
        let request = Request {
            id,
            user: user.to_string(),
            sql: sql.to_string(),
            reason: reason.to_string(),
            scan_bytes,
            requested_ms: now_ms(),
        };
        tracing::info!(id, user, %reason, "statement held for approval");
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Entry { request, answer });
        Ticket {
            approvals: self,
            id,
            answer: receiver,
        }
    }

    /// Records `by`'s `verdict` on request `id` and wakes its caller.
    ///
    /// # Errors
    /// [`NotWaiting`] when no such request is waiting.
    pub fn decide(&self, id: u64, verdict: Verdict, by: &str) -> Result<Decided, NotWaiting> {
        let entry = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .ok_or(NotWaiting(id))?;
        let decision = Decision {
            verdict,
            by: by.to_string(),
            at_ms: now_ms(),
        };
        tracing::info!(id, by, ?verdict, user = %entry.request.user, "approval decided");
        let _ = entry.answer.send(Some(decision.clone()));
        let decided = Decided {
            request: entry.request,
            decision,
        };
        let mut kept = self.decided.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= DECIDED_KEPT {
            kept.pop_front();
        }
        kept.push_back(decided.clone());
        Ok(decided)
    }

    /// The statements waiting, oldest first.
    pub fn pending(&self) -> Vec<Request> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|e| e.request.clone())
            .collect()
    }

    /// The last decisions, newest first.
    pub fn decided(&self) -> Vec<Decided> {
        let kept = self.decided.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().rev().cloned().collect()
    }
}

/// Keeps `agents`' waiting statements in the shared database until `stop`: listed there for
/// every replica, and decisions made on other replicas applied here (where the statement waits).
pub fn share(
    agents: std::sync::Arc<super::Agents>,
    state: std::sync::Arc<lakegate_maintenance::state::SharedState>,
    stop: tokio_util::sync::CancellationToken,
) {
    agents.approvals.set_base(state.id_base());
    let listed = std::sync::Arc::clone(&agents);
    lakegate_maintenance::state::share_waiting(
        state,
        lakegate_maintenance::state::Waiting::Statements,
        stop,
        move || {
            listed
                .approvals
                .pending()
                .into_iter()
                .filter_map(|r| serde_json::to_string(&r).ok().map(|j| (r.id, j)))
                .collect()
        },
        move |d| {
            let verdict = if d.approve {
                Verdict::Approved
            } else {
                Verdict::Rejected
            };
            if let Err(e) = agents.approvals.decide(d.id, verdict, &d.by) {
                tracing::debug!(error = %e, "decision on a gone statement");
            }
        },
    );
}

impl Ticket<'_> {
    /// The request's number.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Waits for the decision, at most `timeout`.
    pub async fn wait(mut self, timeout: Duration) -> Outcome {
        let answered = tokio::time::timeout(timeout, self.answer.wait_for(Option::is_some)).await;
        match answered {
            Ok(Ok(decision)) => match decision.clone() {
                Some(d) => Outcome::Decided(d),
                None => Outcome::TimedOut,
            },
            _ => Outcome::TimedOut,
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // Undecided (timed out, or the caller went away): off the list.
        let mut pending = self
            .approvals
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if pending.remove(&self.id).is_some() {
            tracing::info!(id = self.id, "held statement withdrawn undecided");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_with_the_admins_decision() {
        let approvals = std::sync::Arc::new(Approvals::default());
        let ticket = approvals.request("bot", "SELECT 1", "big", 10);
        let id = ticket.id();
        assert_eq!(approvals.pending().len(), 1);
        let admin = approvals.clone();
        let deciding = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            admin.decide(id, Verdict::Approved, "admin")
        });
        match ticket.wait(Duration::from_secs(5)).await {
            Outcome::Decided(d) => {
                assert_eq!((d.verdict, d.by.as_str()), (Verdict::Approved, "admin"))
            }
            other => panic!("{other:?}"),
        }
        assert!(deciding.await.expect("task").is_ok());
        assert!(approvals.pending().is_empty());
        assert_eq!(approvals.decided().len(), 1);
        assert_eq!(
            approvals.decide(id, Verdict::Rejected, "admin"),
            Err(NotWaiting(id)),
            "decided once"
        );
    }

    #[tokio::test]
    async fn an_unanswered_wait_times_out_and_leaves_the_list() {
        let approvals = Approvals::default();
        let ticket = approvals.request("bot", "SELECT 1", "big", 10);
        let id = ticket.id();
        assert_eq!(
            ticket.wait(Duration::from_millis(20)).await,
            Outcome::TimedOut
        );
        assert!(approvals.pending().is_empty(), "withdrawn");
        assert_eq!(
            approvals.decide(id, Verdict::Approved, "admin"),
            Err(NotWaiting(id))
        );
    }
}

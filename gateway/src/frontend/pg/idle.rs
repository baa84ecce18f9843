//! `idle_in_transaction_session_timeout`: a session that opened a transaction block and then
//! sent nothing for that long is closed with FATAL 25P03, as PostgreSQL does, so a forgotten
//! `BEGIN` (a BI tool's pooled connection, a crashed script) does not hold a connection slot
//! forever.
//!
//! pgwire owns the connection's read loop, so the timer runs beside it: each connection has an
//! [`Activity`] that the query handler updates (busy while a statement runs or streams; in a
//! transaction or not), and a watchdog task that, once the session has been idle in a
//! transaction for its timeout, writes the error (plain-text connections; a TLS stream cannot
//! be written from outside) and shuts the socket down, which ends pgwire's loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::info;

/// What the watchdog needs to know about one connection.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    /// Statements running or streaming now.
    busy: AtomicUsize,
    /// Inside a transaction block (also a failed one).
    in_transaction: AtomicBool,
    /// When the last statement ended, in ms since `started`.
    last_ms: AtomicU64,
    /// The session's timeout in ms (0: none).
    timeout_ms: AtomicU64,
    /// The connection is TLS: no error message can be written beside the stream.
    tls: AtomicBool,
    changed: Notify,
}

/// Held while a statement runs or its rows stream; ends the activity when dropped.
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_ms.store(a.elapsed_ms(), Ordering::SeqCst);
        a.busy.fetch_sub(1, Ordering::SeqCst);
        a.wake_if_armed();
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            busy: AtomicUsize::new(0),
            in_transaction: AtomicBool::new(false),
            last_ms: AtomicU64::new(0),
            timeout_ms: AtomicU64::new(0),
            tls: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }
}

impl Activity {
    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A statement starts; it is idle again when the guard drops.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// After a statement: whether it opened (`Some(true)`) or ended (`Some(false)`) a
    /// transaction block, and the session's timeout.
    pub fn set(&self, in_transaction: Option<bool>, timeout: Option<Duration>) {
        if let Some(t) = in_transaction {
            self.in_transaction.store(t, Ordering::SeqCst);
        }
        let ms = timeout.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        self.timeout_ms.store(ms, Ordering::SeqCst);
        self.wake_if_armed();
    }

    /// Wakes the watchdog when the timeout is armed now. Only then: it re-reads the state
    /// whenever it wakes (a deadline that moved later is slept on again, a disarmed one is
    /// not acted on), and waking it after every statement cost a task switch per statement
    /// (across cores, when it ran on another worker).
    fn wake_if_armed(&self) {
        if self.remaining().is_some() {
            self.changed.notify_one();
        }
    }

    /// Whether the connection is TLS.
    pub fn set_tls(&self, tls: bool) {
        self.tls.store(tls, Ordering::SeqCst);
    }

    /// How long until the timeout fires; `None` while it is not armed (busy, not in a
    /// transaction, or no timeout).
    fn remaining(&self) -> Option<Duration> {
        let timeout = self.timeout_ms.load(Ordering::SeqCst);
        if timeout == 0
            || self.busy.load(Ordering::SeqCst) > 0
            || !self.in_transaction.load(Ordering::SeqCst)
        {
            return None;
        }
        let idle = self
            .elapsed_ms()
            .saturating_sub(self.last_ms.load(Ordering::SeqCst));
        Some(Duration::from_millis(timeout.saturating_sub(idle)))
    }
}

/// PostgreSQL's message for the timeout, as an ErrorResponse frame.
fn fatal_frame() -> Vec<u8> {
    let mut body = Vec::new();
    for (code, text) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', "25P03"),
        (
            b'M',
            "terminating connection due to idle-in-transaction timeout",
        ),
    ] {
        body.push(code);
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut frame = vec![b'E'];
    let len = u32::try_from(body.len() + 4).unwrap_or(u32::MAX);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Watches one connection until it is idle in a transaction past its timeout, then closes
/// it through `socket` (a duplicate of the connection's descriptor). Aborted by the caller
/// when the connection ends first.
pub async fn watch(activity: Arc<Activity>, socket: std::net::TcpStream) {
    loop {
        match activity.remaining() {
            None => activity.changed.notified().await,
            Some(left) if left.is_zero() => break,
            Some(left) => {
                tokio::select! {
                    () = tokio::time::sleep(left) => {}
                    () = activity.changed.notified() => {}
                }
            }
        }
    }
    info!(
        peer = ?socket.peer_addr().ok(),
        "closing a session idle in a transaction past idle_in_transaction_session_timeout"
    );
    if !activity.tls.load(Ordering::SeqCst) {
        // The descriptor is non-blocking (shared with tokio's): one attempt, best effort.
        let _ = std::io::Write::write(&mut &socket, &fatal_frame());
    }
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armed_only_when_idle_inside_a_transaction_with_a_timeout() {
        let a = Arc::new(Activity::default());
        assert_eq!(a.remaining(), None, "no timeout");
        a.set(Some(false), Some(Duration::from_secs(5)));
        assert_eq!(a.remaining(), None, "not in a transaction");
        a.set(Some(true), Some(Duration::from_secs(5)));
        let left = a.remaining().expect("armed");
        assert!(left <= Duration::from_secs(5) && left > Duration::from_secs(4));
        let busy = a.begin();
        assert_eq!(a.remaining(), None, "a statement is running");
        drop(busy);
        assert!(a.remaining().is_some());
        a.set(None, None);
        assert_eq!(a.remaining(), None, "timeout turned off");
    }

    #[test]
    fn the_frame_is_a_well_formed_error_response() {
        let f = fatal_frame();
        assert_eq!(f[0], b'E');
        let len = u32::from_be_bytes([f[1], f[2], f[3], f[4]]) as usize;
        assert_eq!(len + 1, f.len());
        assert!(f.windows(5).any(|w| w == b"25P03"));
        assert_eq!(f.last(), Some(&0));
    }
}

//! Connection limits: at most `max_connections` pgwire sessions at once, and at most
//! `max_connections_per_user` per user. A connection over a limit is refused at startup with
//! SQLSTATE 53300 (as PostgreSQL does); the others keep working. A slot is held for as long as
//! its connection lives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

/// `[limits]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// pgwire connections at once (0: no limit).
    pub max_connections: usize,
    /// pgwire connections at once per user (0: no limit).
    pub max_connections_per_user: usize,
    /// On shutdown, how long running queries may take to finish before the process exits.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: std::time::Duration,
    /// Largest result (bytes of values) one statement may return; the stream then ends with
    /// SQLSTATE 54000 (0: no limit). A routing group's `max_result_bytes` can lower it.
    pub max_result_bytes: u64,
    /// A session idle inside a transaction block for this long is closed (SQLSTATE 25P03),
    /// as PostgreSQL's `idle_in_transaction_session_timeout` (0: never); a session may `SET`
    /// its own.
    #[serde(with = "humantime_serde")]
    pub idle_in_transaction_timeout: std::time::Duration,
    /// Each session's starting `statement_timeout`, over pgwire and Flight SQL alike: a
    /// statement still planning or streaming after this long is cancelled (57014). A pgwire
    /// session may `SET statement_timeout`; a Flight SQL call may send the
    /// `x-lakegate-statement-timeout` header (0: no limit).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: std::time::Duration,
    /// Statements whose calls or subqueries nest deeper are refused before parsing (54001):
    /// sqlparser's time doubles with each level (14 deep: ~0.2 s at worst; 20: seconds).
    pub max_call_nesting: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 1000,
            max_connections_per_user: 0,
            shutdown_grace: std::time::Duration::from_secs(30),
            max_result_bytes: 0,
            idle_in_transaction_timeout: std::time::Duration::ZERO,
            statement_timeout: std::time::Duration::ZERO,
            max_call_nesting: 14,
        }
    }
}

/// Open connections, total and per user.
#[derive(Debug, Default)]
pub struct ConnectionLimits {
    config: LimitsConfig,
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// One connection's place; released on drop.
#[derive(Debug)]
pub struct ConnectionSlot {
    limits: Arc<ConnectionLimits>,
    user: String,
}

/// Descriptors one pgwire connection holds: its socket and the idle-in-transaction
/// watchdog's duplicate of it.
const DESCRIPTORS_PER_CONNECTION: u64 = 2;

/// The soft limit on open files from `/proc/self/limits` (Linux), when it can be read.
fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// A warning when `max_connections` connections would need more descriptors than the process
/// may open (each takes two, plus ~256 for files, engines and the catalog pool).
pub fn descriptor_warning(max_connections: usize) -> Option<String> {
    let limit = open_files_limit()?;
    let needed = max_connections as u64 * DESCRIPTORS_PER_CONNECTION + 256;
    (max_connections > 0 && limit < needed).then(|| {
        format!(
            "limits.max_connections = {max_connections} needs about {needed} open files but \
             the limit is {limit}: raise it (ulimit -n, LimitNOFILE=) or lower max_connections"
        )
    })
}

impl ConnectionLimits {
    /// Limits per `config`.
    pub fn new(config: LimitsConfig) -> Self {
        if let Some(warning) = descriptor_warning(config.max_connections) {
            tracing::warn!(%warning, "open-files limit");
        }
        Self {
            config,
            open: Mutex::new((0, HashMap::new())),
        }
    }

    /// A slot for `user`, or why not (PostgreSQL's wording).
    ///
    /// # Errors
    /// The message to send with SQLSTATE 53300.
    pub fn acquire(self: &Arc<Self>, user: &str) -> Result<ConnectionSlot, String> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if self.config.max_connections > 0 && open.0 >= self.config.max_connections {
            return Err(format!(
                "sorry, too many clients already ({} connections; limits.max_connections)",
                self.config.max_connections
            ));
        }
        let mine = open.1.get(user).copied().unwrap_or(0);
        if self.config.max_connections_per_user > 0 && mine >= self.config.max_connections_per_user
        {
            return Err(format!(
                "too many connections for role \"{user}\" ({mine}; limits.max_connections_per_user)"
            ));
        }
        open.0 += 1;
        *open.1.entry(user.to_string()).or_default() += 1;
        Ok(ConnectionSlot {
            limits: self.clone(),
            user: user.to_string(),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(|p| p.into_inner());
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.1.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_released() {
        let l = Arc::new(ConnectionLimits::new(LimitsConfig {
            max_connections: 3,
            max_connections_per_user: 2,
            ..Default::default()
        }));
        let a1 = l.acquire("a").expect("a1");
        let _a2 = l.acquire("a").expect("a2");
        assert!(l.acquire("a").expect_err("per user").contains("role \"a\""));
        let _b = l.acquire("b").expect("b");
        assert!(
            l.acquire("c")
                .expect_err("total")
                .contains("too many clients")
        );
        drop(a1);
        assert_eq!(l.open(), 2);
        assert!(l.acquire("c").is_ok());
    }
}

//! Per-agent budgets: statements per minute and estimated bytes scanned per hour, over sliding
//! windows kept in memory (per gateway process). A statement that would pass either is refused
//! before it runs with SQLSTATE 53400 and the time until the window has room again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Limits;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// What one agent used recently: (when, estimated bytes) of each statement run, the last hour.
#[derive(Debug, Default)]
struct Usage {
    runs: VecDeque<(Instant, u64)>,
}

impl Usage {
    fn forget_before(&mut self, now: Instant) {
        while self
            .runs
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= HOUR)
        {
            self.runs.pop_front();
        }
    }

    fn in_last(&self, now: Instant, window: Duration) -> impl Iterator<Item = &(Instant, u64)> {
        self.runs
            .iter()
            .filter(move |(at, _)| now.duration_since(*at) < window)
    }
}

/// Why a statement is over budget, and when it would fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// What was exceeded, in words (with the numbers).
    pub what: String,
    /// How long until the window has room for it.
    pub retry_after: Duration,
}

/// What an agent has used and may still use.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Standing {
    /// Statements run in the last minute.
    pub queries_last_minute: u32,
    /// Bytes scanned (estimated) in the last hour.
    pub scan_bytes_last_hour: u64,
}

/// Every agent's usage.
#[derive(Debug, Default)]
pub struct Budgets {
    usage: Mutex<HashMap<String, Usage>>,
}

impl Budgets {
    /// Takes a statement estimated to scan `bytes` into `user`'s budget under `limits`, or says
    /// why it does not fit (nothing is taken then).
    ///
    /// # Errors
    /// [`OverBudget`] with the numbers and the time to wait.
    pub fn take(&self, user: &str, limits: &Limits, bytes: u64) -> Result<(), OverBudget> {
        self.take_at(user, limits, bytes, Instant::now())
    }

    /// Whether a statement estimated to scan `bytes` fits `user`'s budget now (nothing taken).
    ///
    /// # Errors
    /// [`OverBudget`] with the numbers and the time to wait.
    pub fn fits(&self, user: &str, limits: &Limits, bytes: u64) -> Result<(), OverBudget> {
        self.check(user, limits, bytes, Instant::now(), false)
    }

    fn take_at(
        &self,
        user: &str,
        limits: &Limits,
        bytes: u64,
        now: Instant,
    ) -> Result<(), OverBudget> {
        self.check(user, limits, bytes, now, true)
    }

    fn check(
        &self,
        user: &str,
        limits: &Limits,
        bytes: u64,
        now: Instant,
        take: bool,
    ) -> Result<(), OverBudget> {
        let mut all = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let usage = all.entry(user.to_string()).or_default();
        usage.forget_before(now);
        if limits.queries_per_minute > 0 {
            let recent: Vec<Instant> = usage.in_last(now, MINUTE).map(|(at, _)| *at).collect();
            if recent.len() >= limits.queries_per_minute as usize {
                // Room again when the oldest of the last `limit` statements leaves the minute.
                let oldest = recent[recent.len() - limits.queries_per_minute as usize];
                return Err(OverBudget {
                    what: format!(
                        "agent \"{user}\" ran {} statements in the last minute, its budget of \
                         queries_per_minute = {}",
                        recent.len(),
                        limits.queries_per_minute
                    ),
                    retry_after: MINUTE.saturating_sub(now.duration_since(oldest)),
                });
            }
        }
        if limits.scan_bytes_per_hour > 0 {
            let used: u64 = usage.in_last(now, HOUR).map(|(_, b)| *b).sum();
            if used.saturating_add(bytes) > limits.scan_bytes_per_hour {
                // Room again once enough of the oldest scans leave the hour.
                let mut freed = 0u64;
                let mut retry_after = HOUR;
                for (at, b) in usage.in_last(now, HOUR) {
                    freed += b;
                    if used - freed + bytes <= limits.scan_bytes_per_hour {
                        retry_after = HOUR.saturating_sub(now.duration_since(*at));
                        break;
                    }
                }
                let human = lakegate_engines::units::human_bytes;
                return Err(OverBudget {
                    what: format!(
                        "agent \"{user}\" scanned {} in the last hour; this statement would scan \
                         {} more, past its budget of scan_bytes_per_hour = {}",
                        human(used),
                        human(bytes),
                        human(limits.scan_bytes_per_hour)
                    ),
                    retry_after: if bytes > limits.scan_bytes_per_hour {
                        // It never fits: the wait would not help.
                        HOUR
                    } else {
                        retry_after
                    },
                });
            }
        }
        if take {
            usage.runs.push_back((now, bytes));
        }
        Ok(())
    }

    /// What `user` used in the last minute and hour.
    pub fn standing(&self, user: &str) -> Standing {
        let now = Instant::now();
        let all = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let Some(usage) = all.get(user) else {
            return Standing {
                queries_last_minute: 0,
                scan_bytes_last_hour: 0,
            };
        };
        Standing {
            queries_last_minute: usage.in_last(now, MINUTE).count() as u32,
            scan_bytes_last_hour: usage.in_last(now, HOUR).map(|(_, b)| *b).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_minute: u32, per_hour: u64) -> Limits {
        Limits {
            queries_per_minute: per_minute,
            scan_bytes_per_hour: per_hour,
            ..Limits::default()
        }
    }

    #[test]
    fn statements_per_minute_are_a_sliding_window() {
        let b = Budgets::default();
        let l = limits(2, 0);
        let t0 = Instant::now();
        b.take_at("a", &l, 0, t0).expect("first");
        b.take_at("a", &l, 0, t0 + Duration::from_secs(10))
            .expect("second");
        let over = b
            .take_at("a", &l, 0, t0 + Duration::from_secs(20))
            .expect_err("third within the minute");
        assert!(
            over.what.contains("queries_per_minute = 2"),
            "{}",
            over.what
        );
        assert_eq!(over.retry_after, Duration::from_secs(40));
        // Another agent has its own budget.
        b.take_at("b", &l, 0, t0 + Duration::from_secs(20))
            .expect("b");
        // The first statement left the minute: room for one.
        b.take_at("a", &l, 0, t0 + Duration::from_secs(61))
            .expect("later");
    }

    #[test]
    fn bytes_per_hour_count_estimates_and_refuse_what_would_pass() {
        let b = Budgets::default();
        let l = limits(0, 100);
        let t0 = Instant::now();
        b.take_at("a", &l, 60, t0).expect("60 of 100");
        let over = b
            .take_at("a", &l, 50, t0 + Duration::from_secs(60))
            .expect_err("110 > 100");
        assert_eq!(over.retry_after, Duration::from_secs(3540));
        assert_eq!(
            b.standing("a").scan_bytes_last_hour,
            60,
            "a refusal takes nothing"
        );
        b.take_at("a", &l, 40, t0 + Duration::from_secs(60))
            .expect("exactly 100");
        let never = b
            .take_at("a", &l, 500, t0 + Duration::from_secs(60))
            .expect_err("larger than the budget");
        assert_eq!(never.retry_after, HOUR);
    }
}

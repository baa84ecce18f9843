//! The `policies` autonomy mode: a table's planned operations run only when its policy allows
//! them — the kinds in `allow`, inside one of its `windows` of time (UTC), and within its budget
//! of `max_operations_per_hour`. Anything else is deferred to a later cycle (the table counts
//! in the loop's backlog meanwhile). `autopilot` ignores these keys; `manual` holds everything
//! for approval, and `approve` kinds wait for one in every mode.

use std::fmt;

use chrono::{DateTime, Timelike, Utc};
use serde::{Deserialize, Serialize};

use crate::config::MaintenanceConfig;
use crate::oplog::OperationKind;

/// A daily window of time, UTC, `HH:MM-HH:MM` (the end excluded; it may pass midnight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Window {
    start: u16,
    end: u16,
}

fn minute_of(text: &str) -> Result<u16, String> {
    let (h, m) = text
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not HH:MM"))?;
    let h: u16 = h.parse().map_err(|_| format!("`{text}` is not HH:MM"))?;
    let m: u16 = m.parse().map_err(|_| format!("`{text}` is not HH:MM"))?;
    if h > 24 || m > 59 || (h == 24 && m != 0) {
        return Err(format!("`{text}` is not a time of day"));
    }
    Ok(h * 60 + m)
}

impl Window {
    /// Whether `minute` (of the day, UTC) is inside.
    pub fn contains(&self, minute: u16) -> bool {
        if self.start <= self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

impl TryFrom<String> for Window {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let (a, b) = text
            .split_once('-')
            .ok_or_else(|| format!("`{text}` is not a window (write 01:00-05:00, UTC)"))?;
        let (start, end) = (minute_of(a)?, minute_of(b)?);
        if start == end {
            return Err(format!("`{text}` is an empty window"));
        }
        Ok(Self { start, end })
    }
}

impl From<Window> for String {
    fn from(w: Window) -> Self {
        w.to_string()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, "{}-{}", t(self.start), t(self.end))
    }
}

/// Windows from a JSON array (a config rule's list) or comma-separated (a table property).
pub fn parse_windows(text: &str) -> Result<Vec<Window>, String> {
    crate::policy::list(text)?
        .into_iter()
        .map(Window::try_from)
        .collect()
}

/// Windows as a table property would hold them.
pub fn show_windows(windows: &[Window]) -> String {
    windows
        .iter()
        .map(Window::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Why an operation of `kind` may not run now under `config`'s `policies` mode (`None`: it
/// may), with `ran_last_hour` operations already run on the table in the last hour.
pub fn deferred(
    config: &MaintenanceConfig,
    kind: OperationKind,
    now: DateTime<Utc>,
    ran_last_hour: usize,
) -> Option<String> {
    if !config.allow.is_empty() && !config.allow.contains(&kind) {
        let allowed: Vec<&str> = config.allow.iter().map(|k| k.name()).collect();
        return Some(format!(
            "{kind} is not allowed (allow: {})",
            allowed.join(", ")
        ));
    }
    let minute = (now.hour() * 60 + now.minute()) as u16;
    if !config.windows.is_empty() && !config.windows.iter().any(|w| w.contains(minute)) {
        return Some(format!(
            "outside its windows ({} UTC; now {:02}:{:02})",
            show_windows(&config.windows),
            now.hour(),
            now.minute()
        ));
    }
    match config.max_operations_per_hour {
        Some(max) if ran_last_hour >= max as usize => Some(format!(
            "its budget of {max} operations per hour is spent ({ran_last_hour} in the last hour)"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 5, h, m, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn windows_parse_wrap_midnight_and_refuse_nonsense() {
        let w = parse_windows("22:00-02:30, 12:00-13:00").expect("windows");
        assert_eq!(show_windows(&w), "22:00-02:30,12:00-13:00");
        assert!(w[0].contains(23 * 60) && w[0].contains(60) && !w[0].contains(3 * 60));
        assert!(w[1].contains(12 * 60) && !w[1].contains(13 * 60));
        assert_eq!(parse_windows(r#"["01:00-05:00"]"#).expect("json").len(), 1);
        for bad in ["1-2", "25:00-01:00", "01:00-01:00", "01:00"] {
            assert!(parse_windows(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_operation_runs_only_when_kind_window_and_budget_allow() {
        let config = MaintenanceConfig {
            allow: vec![OperationKind::Compact],
            windows: parse_windows("01:00-05:00").expect("window"),
            max_operations_per_hour: Some(2),
            ..MaintenanceConfig::default()
        };
        assert_eq!(deferred(&config, OperationKind::Compact, at(2, 0), 1), None);
        let why = deferred(&config, OperationKind::ExpireSnapshots, at(2, 0), 0);
        assert!(why.expect("kind").contains("not allowed"));
        let why = deferred(&config, OperationKind::Compact, at(6, 0), 0);
        assert!(
            why.expect("window")
                .contains("outside its windows (01:00-05:00 UTC")
        );
        let why = deferred(&config, OperationKind::Compact, at(2, 0), 2);
        assert!(why.expect("budget").contains("budget of 2"));
        let open = MaintenanceConfig::default();
        assert_eq!(
            deferred(&open, OperationKind::RemoveOrphans, at(6, 0), 99),
            None
        );
    }
}

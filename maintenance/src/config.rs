//! `[maintenance]`: whether the loop runs, which tables it may touch, its targets and budgets.

use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};

const MIB: u64 = 1024 * 1024;

/// Settings of the maintenance loop. Every field has a default; the loop itself is off unless
/// `enabled` (a read gateway does not start committing to someone's lake unasked).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MaintenanceConfig {
    /// Run the scheduler inside `lakegate serve`.
    pub enabled: bool,
    /// How often the scheduler looks for due tables.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Tables it may maintain: `ns.table`, `ns.*` or `*` (default: all).
    pub include: Vec<String>,
    /// Tables it must not touch (same patterns; wins over `include`).
    pub exclude: Vec<String>,
    /// Size compaction aims for per data file.
    pub target_file_size: u64,
    /// A file smaller than this fraction of the target is "small".
    pub small_file_ratio: f64,
    /// A partition is compacted once it has at least this many small files (or any delete
    /// files).
    pub min_input_files: usize,
    /// A partition with no new file for this long is settled (rewritten whole and sorted);
    /// the open partition only has its small files merged.
    #[serde(with = "humantime_serde")]
    pub settle_after: Duration,
    /// A table is due again after this many commits since its last maintenance...
    pub min_commits: u64,
    /// ... or after this long, whichever comes first (only if it has changed).
    #[serde(with = "humantime_serde")]
    pub max_interval: Duration,
    /// Per cycle: at most this many bytes read by compactions.
    pub max_bytes_per_cycle: u64,
    /// Per cycle: at most this many files rewritten.
    pub max_files_per_cycle: usize,
    /// Per cycle: no new operation starts after this long.
    #[serde(with = "humantime_serde")]
    pub max_cycle_time: Duration,
    /// Input bytes per compaction commit (a partition larger than this is committed in groups).
    pub max_group_bytes: u64,
    /// Snapshot expiry keeps at least this many snapshots...
    pub keep_snapshots: usize,
    /// ... and every snapshot younger than this.
    #[serde(with = "humantime_serde")]
    pub snapshot_min_age: Duration,
    /// A consumer (a ref `consumer.<name>`) further behind the current snapshot than this no
    /// longer keeps the snapshots after its position from expiry (zero: consumers always do).
    #[serde(with = "humantime_serde")]
    pub max_consumer_lag: Duration,
    /// Orphan removal only deletes unreferenced files older than this (a writer's file in
    /// flight must never be deleted: keep this far above the longest write-to-commit gap).
    #[serde(with = "humantime_serde")]
    pub orphan_min_age: Duration,
    /// Manifests are merged once a snapshot has more than this many data manifests.
    pub max_manifests: usize,
    /// Size a merged manifest aims for.
    pub target_manifest_size: u64,
    /// How fast query heat fades.
    #[serde(with = "humantime_serde")]
    pub heat_half_life: Duration,
    /// Queued telemetry events; beyond this, events are dropped (and counted), never waited on.
    pub telemetry_capacity: usize,
    /// Memory the compaction sort may use before spilling to disk.
    pub sort_memory: u64,
    /// The operations log file (JSON lines); empty: memory only.
    pub log_path: String,
    /// Operations kept in memory (and shown by `lakegate.operations`).
    pub log_capacity: usize,
    /// `autopilot` (operations run as tables need them), `policies` (only what `allow`,
    /// `windows` and `max_operations_per_hour` permit) or `manual` (each waits for approval).
    pub mode: crate::approvals::Mode,
    /// `policies` mode: the kinds of operation that may run (empty: every kind).
    pub allow: Vec<crate::oplog::OperationKind>,
    /// `policies` mode: daily windows, UTC, when operations may run (empty: any time).
    pub windows: Vec<crate::autonomy::Window>,
    /// `policies` mode: at most this many operations per table in any hour.
    pub max_operations_per_hour: Option<u32>,
    /// Kinds of operation that always wait for approval, whatever the mode (say
    /// `["expire_snapshots", "remove_orphans"]`: history is destroyed only when an operator says).
    pub approve: Vec<crate::oplog::OperationKind>,
    /// Where big compactions run: `embedded` (here) or `spark` (`[spark] url`, Iceberg's
    /// `rewrite_data_files`).
    pub executor: crate::executor::ExecutorKind,
    /// Compactions reading at least this many bytes go to the `executor`.
    pub executor_min_bytes: u64,
    /// `[[maintenance.policy]]`: per-table settings for the tables each rule matches (see
    /// [`crate::policy`]; table properties `lakegate.maintenance.*` override them).
    pub policy: Vec<crate::policy::PolicyRule>,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: Duration::from_secs(10),
            include: vec!["*".into()],
            exclude: vec![],
            target_file_size: 128 * MIB,
            small_file_ratio: 0.75,
            min_input_files: 5,
            settle_after: Duration::from_secs(300),
            min_commits: 10,
            max_interval: Duration::from_secs(3600),
            max_bytes_per_cycle: 8 * 1024 * MIB,
            max_files_per_cycle: 20_000,
            max_cycle_time: Duration::from_secs(600),
            max_group_bytes: 1024 * MIB,
            keep_snapshots: 10,
            snapshot_min_age: Duration::from_secs(600),
            max_consumer_lag: Duration::ZERO,
            orphan_min_age: Duration::from_secs(3 * 24 * 3600),
            max_manifests: 16,
            target_manifest_size: 8 * MIB,
            heat_half_life: Duration::from_secs(3600),
            telemetry_capacity: 10_000,
            sort_memory: 512 * MIB,
            log_path: String::new(),
            log_capacity: 10_000,
            policy: Vec::new(),
            mode: crate::approvals::Mode::Autopilot,
            allow: Vec::new(),
            executor: crate::executor::ExecutorKind::Embedded,
            executor_min_bytes: 1 << 30,
            windows: Vec::new(),
            max_operations_per_hour: None,
            approve: Vec::new(),
        }
    }
}

impl MaintenanceConfig {
    /// Checks the values that would make the loop unsafe or useless.
    ///
    /// # Errors
    /// [`Error::Config`] naming the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting, reason: &str| {
            Err(Error::Config {
                setting,
                reason: reason.into(),
            })
        };
        self.validate_table()?;
        if self.interval.is_zero() {
            return bad("interval", "must be positive");
        }
        if self.telemetry_capacity == 0 {
            return bad("telemetry_capacity", "must be positive");
        }
        for p in self.include.iter().chain(&self.exclude) {
            if p.is_empty() || (p.contains('*') && p != "*" && !p.ends_with(".*")) {
                return bad(
                    "include/exclude",
                    &format!("`{p}`: use `ns.table`, `ns.*` or `*`"),
                );
            }
        }
        crate::policy::check_rules(self).map_err(|reason| Error::Config {
            setting: "policy",
            reason,
        })
    }

    /// Checks the per-table values (those a policy may set) that would make the loop unsafe.
    ///
    /// # Errors
    /// [`Error::Config`] naming the setting.
    pub fn validate_table(&self) -> Result<()> {
        let bad = |setting, reason: &str| {
            Err(Error::Config {
                setting,
                reason: reason.into(),
            })
        };
        if self.target_file_size < MIB {
            return bad("target_file_size", "must be at least 1 MiB");
        }
        if !(0.0..=1.0).contains(&self.small_file_ratio) || self.small_file_ratio == 0.0 {
            return bad("small_file_ratio", "must be in (0, 1]");
        }
        if self.min_input_files < 2 {
            return bad("min_input_files", "must be at least 2");
        }
        if self.keep_snapshots < 1 {
            return bad(
                "keep_snapshots",
                "must be at least 1 (the current snapshot)",
            );
        }
        if self.max_manifests < 2 {
            return bad("max_manifests", "must be at least 2");
        }
        Ok(())
    }

    /// Whether the loop may touch `ns.table`.
    pub fn allows(&self, namespace: &str, table: &str) -> bool {
        let matches = |p: &String| {
            p == "*"
                || p.strip_suffix(".*").is_some_and(|ns| ns == namespace)
                || *p == format!("{namespace}.{table}")
        };
        self.include.iter().any(matches) && !self.exclude.iter().any(matches)
    }

    /// Whether an operation of `kind` waits for an operator's approval on this table.
    pub fn needs_approval(&self, kind: crate::oplog::OperationKind) -> bool {
        self.mode == crate::approvals::Mode::Manual || self.approve.contains(&kind)
    }

    /// Files below this many bytes are small.
    pub fn small_file_bytes(&self) -> u64 {
        (self.target_file_size as f64 * self.small_file_ratio) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_select_tables_and_exclude_wins() {
        let c = MaintenanceConfig {
            include: vec!["sales.*".into(), "ops.events".into()],
            exclude: vec!["sales.raw".into()],
            ..Default::default()
        };
        assert!(c.allows("sales", "orders"));
        assert!(!c.allows("sales", "raw"));
        assert!(c.allows("ops", "events"));
        assert!(!c.allows("ops", "other"));
        assert!(MaintenanceConfig::default().allows("any", "thing"));
    }

    #[test]
    fn unsafe_settings_are_refused() {
        let bad = MaintenanceConfig {
            keep_snapshots: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = MaintenanceConfig {
            include: vec!["sa*les".into()],
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        assert!(MaintenanceConfig::default().validate().is_ok());
    }
}

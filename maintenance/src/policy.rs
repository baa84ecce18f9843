//! Maintenance policies that cascade. Each table's settings come from, lowest to highest:
//!
//! 1. the built-in defaults;
//! 2. the catalog: `[maintenance]` (and its `include` / `exclude`), and `[[maintenance.policy]]`
//!    rules matching `*`;
//! 3. its namespace: rules matching `ns.*`;
//! 4. the table: rules matching `ns.table`;
//! 5. the table's own Iceberg properties, `lakegate.maintenance.<key>` (set by whoever owns the
//!    table, read at every cycle).
//!
//! Every per-table key ([`Key`]) can be set at every level; the effective policy says, per key,
//! the level it came from ([`Source`]). A value that does not parse, or that would make the loop
//! unsafe (`keep_snapshots = 0`), is ignored and reported, never applied.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::approvals::Mode;
use crate::config::MaintenanceConfig;
use crate::oplog::OperationKind;

/// Table properties that set a table's own policy: `lakegate.maintenance.<key>`.
pub const PROPERTY_PREFIX: &str = "lakegate.maintenance.";

/// `[[maintenance.policy]]`: settings for the tables `match` names (`*`, `ns.*` or `ns.table`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct PolicyRule {
    /// `*` (the catalog), `ns.*` (a namespace) or `ns.table`.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Any [`Key`] with its value (checked by [`MaintenanceConfig::validate`]).
    #[serde(flatten)]
    pub settings: BTreeMap<String, serde_json::Value>,
}

/// A per-table setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    /// Whether the loop maintains the table at all.
    Enabled,
    /// `target_file_size`.
    TargetFileSize,
    /// `small_file_ratio`.
    SmallFileRatio,
    /// `min_input_files`.
    MinInputFiles,
    /// `settle_after`.
    SettleAfter,
    /// `min_commits`.
    MinCommits,
    /// `max_interval`.
    MaxInterval,
    /// `max_group_bytes`.
    MaxGroupBytes,
    /// `keep_snapshots`.
    KeepSnapshots,
    /// `snapshot_min_age`.
    SnapshotMinAge,
    /// `max_consumer_lag`.
    MaxConsumerLag,
    /// `orphan_min_age`.
    OrphanMinAge,
    /// `max_manifests`.
    MaxManifests,
    /// `target_manifest_size`.
    TargetManifestSize,
    /// `mode`.
    Mode,
    /// `approve`.
    Approve,
    /// `allow` (`policies` mode).
    Allow,
    /// `windows` (`policies` mode).
    Windows,
    /// `max_operations_per_hour` (`policies` mode).
    MaxOperationsPerHour,
}

/// Every key, in the order they are shown.
pub const KEYS: [Key; 19] = [
    Key::Enabled,
    Key::Mode,
    Key::Approve,
    Key::Allow,
    Key::Windows,
    Key::MaxOperationsPerHour,
    Key::TargetFileSize,
    Key::SmallFileRatio,
    Key::MinInputFiles,
    Key::SettleAfter,
    Key::MinCommits,
    Key::MaxInterval,
    Key::MaxGroupBytes,
    Key::KeepSnapshots,
    Key::SnapshotMinAge,
    Key::MaxConsumerLag,
    Key::OrphanMinAge,
    Key::MaxManifests,
    Key::TargetManifestSize,
];

fn duration(text: &str) -> Result<Duration, String> {
    humantime_serde::re::humantime::parse_duration(text).map_err(|e| format!("{e} (write 10m, 3d)"))
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

fn show_kinds(kinds: &[OperationKind]) -> String {
    kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
}

/// A list value: a JSON array (a config rule's list) or comma-separated (a table property).
pub(crate) fn list(text: &str) -> Result<Vec<String>, String> {
    if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|e| format!("`{text}`: {e}"))
    } else {
        Ok(text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect())
    }
}

/// Kinds of operation, as a [`list`].
fn kinds(text: &str) -> Result<Vec<OperationKind>, String> {
    list(text)?
        .iter()
        .map(|n| {
            serde_json::from_value::<OperationKind>(serde_json::Value::String(n.clone())).map_err(
                |_| {
                    format!(
                        "`{n}` is not an operation (expire_snapshots, compact, remove_orphans, \
                         rewrite_manifests)"
                    )
                },
            )
        })
        .collect()
}

fn show(d: Duration) -> String {
    humantime_serde::re::humantime::format_duration(d).to_string()
}

impl Key {
    /// The key's name in config rules and after [`PROPERTY_PREFIX`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::TargetFileSize => "target_file_size",
            Self::SmallFileRatio => "small_file_ratio",
            Self::MinInputFiles => "min_input_files",
            Self::SettleAfter => "settle_after",
            Self::MinCommits => "min_commits",
            Self::MaxInterval => "max_interval",
            Self::MaxGroupBytes => "max_group_bytes",
            Self::KeepSnapshots => "keep_snapshots",
            Self::SnapshotMinAge => "snapshot_min_age",
            Self::MaxConsumerLag => "max_consumer_lag",
            Self::OrphanMinAge => "orphan_min_age",
            Self::MaxManifests => "max_manifests",
            Self::TargetManifestSize => "target_manifest_size",
            Self::Mode => "mode",
            Self::Approve => "approve",
            Self::Allow => "allow",
            Self::Windows => "windows",
            Self::MaxOperationsPerHour => "max_operations_per_hour",
        }
    }

    /// The key called `name`.
    pub fn parse(name: &str) -> Option<Self> {
        KEYS.into_iter().find(|k| k.name() == name)
    }

    /// Its value in `p`, as text.
    fn get(self, p: &Settings) -> String {
        let c = &p.config;
        match self {
            Self::Enabled => p.enabled.to_string(),
            Self::TargetFileSize => c.target_file_size.to_string(),
            Self::SmallFileRatio => c.small_file_ratio.to_string(),
            Self::MinInputFiles => c.min_input_files.to_string(),
            Self::SettleAfter => show(c.settle_after),
            Self::MinCommits => c.min_commits.to_string(),
            Self::MaxInterval => show(c.max_interval),
            Self::MaxGroupBytes => c.max_group_bytes.to_string(),
            Self::KeepSnapshots => c.keep_snapshots.to_string(),
            Self::SnapshotMinAge => show(c.snapshot_min_age),
            Self::MaxConsumerLag => show(c.max_consumer_lag),
            Self::OrphanMinAge => show(c.orphan_min_age),
            Self::MaxManifests => c.max_manifests.to_string(),
            Self::TargetManifestSize => c.target_manifest_size.to_string(),
            Self::Mode => match c.mode {
                Mode::Autopilot => "autopilot".into(),
                Mode::Policies => "policies".into(),
                Mode::Manual => "manual".into(),
            },
            Self::Approve => show_kinds(&c.approve),
            Self::Allow => show_kinds(&c.allow),
            Self::Windows => crate::autonomy::show_windows(&c.windows),
            Self::MaxOperationsPerHour => c
                .max_operations_per_hour
                .map_or_else(|| "unlimited".into(), |n| n.to_string()),
        }
    }

    /// Sets it in `p` from `text`.
    fn set(self, p: &mut Settings, text: &str) -> Result<(), String> {
        let c = &mut p.config;
        match self {
            Self::Enabled => {
                p.enabled = match text.trim().to_ascii_lowercase().as_str() {
                    "true" | "on" | "yes" => true,
                    "false" | "off" | "no" => false,
                    _ => return Err(format!("`{text}` is not true or false")),
                }
            }
            Self::TargetFileSize => c.target_file_size = number(text)?,
            Self::SmallFileRatio => c.small_file_ratio = number(text)?,
            Self::MinInputFiles => c.min_input_files = number(text)?,
            Self::SettleAfter => c.settle_after = duration(text)?,
            Self::MinCommits => c.min_commits = number(text)?,
            Self::MaxInterval => c.max_interval = duration(text)?,
            Self::MaxGroupBytes => c.max_group_bytes = number(text)?,
            Self::KeepSnapshots => c.keep_snapshots = number(text)?,
            Self::SnapshotMinAge => c.snapshot_min_age = duration(text)?,
            Self::MaxConsumerLag => c.max_consumer_lag = duration(text)?,
            Self::OrphanMinAge => c.orphan_min_age = duration(text)?,
            Self::MaxManifests => c.max_manifests = number(text)?,
            Self::TargetManifestSize => c.target_manifest_size = number(text)?,
            Self::Mode => {
                c.mode = match text.trim() {
                    "autopilot" => Mode::Autopilot,
                    "policies" => Mode::Policies,
                    "manual" => Mode::Manual,
                    other => {
                        return Err(format!("`{other}` is not autopilot, policies or manual"));
                    }
                }
            }
            Self::Approve => c.approve = kinds(text)?,
            Self::Allow => c.allow = kinds(text)?,
            Self::Windows => c.windows = crate::autonomy::parse_windows(text)?,
            Self::MaxOperationsPerHour => {
                c.max_operations_per_hour = match text.trim() {
                    "" | "unlimited" => None,
                    n => Some(number(n)?),
                }
            }
        }
        Ok(())
    }
}

/// Where a key's value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "level", content = "by")]
pub enum Source {
    /// The built-in default.
    Default,
    /// `[maintenance]`, or a rule matching `*`.
    Catalog(String),
    /// A rule matching `ns.*`.
    Namespace(String),
    /// A rule matching `ns.table`.
    Table(String),
    /// The table's property `lakegate.maintenance.<key>`.
    Property(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Catalog(by) => write!(f, "catalog: {by}"),
            Self::Namespace(by) => write!(f, "namespace: {by}"),
            Self::Table(by) => write!(f, "table: {by}"),
            Self::Property(by) => write!(f, "table property {by}"),
        }
    }
}

/// The values being resolved.
#[derive(Debug, Clone)]
struct Settings {
    config: MaintenanceConfig,
    enabled: bool,
}

/// One table's effective policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The settings the loop uses for this table (the global ones — interval, budgets per cycle
    /// — are the `[maintenance]` section's).
    pub config: MaintenanceConfig,
    /// Whether the loop maintains it.
    pub enabled: bool,
    /// Each key's value and where it came from, in [`KEYS`] order.
    pub entries: Vec<Entry>,
    /// Values set somewhere but ignored, and why.
    pub ignored: Vec<String>,
}

/// One key of an effective policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The key.
    pub key: Key,
    /// Its value, as text.
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

impl Policy {
    /// The keys set by a policy rule or a table property, `key=value (source)`, `; `-separated:
    /// what the operations log records when it changes (`[maintenance]` itself is the config
    /// file's, the same for every table).
    pub fn summary(&self) -> String {
        self.entries
            .iter()
            .filter(|e| match &e.source {
                Source::Default => false,
                Source::Catalog(by) => !by.starts_with("[maintenance]"),
                _ => true,
            })
            .map(|e| format!("{}={} ({})", e.key.name(), e.value, e.source))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// How specific a rule's pattern is for `ns.table` (`None`: it does not match).
fn level(pattern: &str, ns: &str, table: &str) -> Option<u8> {
    if pattern == "*" {
        Some(0)
    } else if pattern.strip_suffix(".*") == Some(ns) {
        Some(1)
    } else if pattern.rsplit_once('.') == Some((ns, table)) {
        Some(2)
    } else {
        None
    }
}

/// A rule's value as the text a property would hold.
fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Checks the rules of `config` (unknown keys, values that do not parse, bad patterns).
///
/// # Errors
/// The first problem, in words.
pub fn check_rules(config: &MaintenanceConfig) -> Result<(), String> {
    for rule in &config.policy {
        let p = &rule.pattern;
        let shaped = p == "*" || p.ends_with(".*") || (p.contains('.') && !p.contains('*'));
        if !shaped {
            return Err(format!("match = \"{p}\": use `*`, `ns.*` or `ns.table`"));
        }
        let mut probe = Settings {
            config: config.clone(),
            enabled: true,
        };
        for (name, value) in &rule.settings {
            let key = Key::parse(name).ok_or_else(|| {
                format!(
                    "`{name}` (rule `{p}`) is not a per-table key; keys: {}",
                    KEYS.map(Key::name).join(", ")
                )
            })?;
            key.set(&mut probe, &text(value))
                .map_err(|e| format!("`{name}` (rule `{p}`): {e}"))?;
        }
        probe
            .config
            .validate_table()
            .map_err(|e| format!("rule `{p}`: {e}"))?;
    }
    Ok(())
}

/// `ns.table`'s effective policy under `config`, with its Iceberg `properties`.
pub fn resolve<'a>(
    config: &MaintenanceConfig,
    ns: &str,
    table: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Policy {
    let defaults = Settings {
        config: MaintenanceConfig::default(),
        enabled: true,
    };
    let mut current = Settings {
        config: config.clone(),
        enabled: config.allows(ns, table),
    };
    let mut sources: BTreeMap<Key, Source> = BTreeMap::new();
    for key in KEYS {
        let source = if key == Key::Enabled {
            if current.enabled {
                Source::Default
            } else {
                Source::Catalog("[maintenance] include/exclude".into())
            }
        } else if key.get(&current) != key.get(&defaults) {
            Source::Catalog("[maintenance]".into())
        } else {
            Source::Default
        };
        sources.insert(key, source);
    }
    let mut ignored = Vec::new();
    let mut apply = |current: &mut Settings,
                     ignored: &mut Vec<String>,
                     key: Key,
                     value: &str,
                     source: Source| {
        let mut next = current.clone();
        match key
            .set(&mut next, value)
            .and_then(|()| next.config.validate_table().map_err(|e| e.to_string()))
        {
            Ok(()) => {
                *current = next;
                sources.insert(key, source);
            }
            Err(e) => ignored.push(format!("{} = {value} ({source}): {e}", key.name())),
        }
    };
    let mut rules: Vec<(u8, &PolicyRule)> = config
        .policy
        .iter()
        .filter_map(|r| level(&r.pattern, ns, table).map(|l| (l, r)))
        .collect();
    // Less specific first; among equals, the later rule wins.
    rules.sort_by_key(|(l, _)| *l);
    for (l, rule) in rules {
        for (name, value) in &rule.settings {
            let Some(key) = Key::parse(name) else {
                continue;
            };
            let by = format!("policy {}", rule.pattern);
            let source = match l {
                0 => Source::Catalog(by),
                1 => Source::Namespace(by),
                _ => Source::Table(by),
            };
            apply(&mut current, &mut ignored, key, &text(value), source);
        }
    }
    for (name, value) in properties {
        let Some(rest) = name.strip_prefix(PROPERTY_PREFIX) else {
            continue;
        };
        match Key::parse(rest) {
            Some(key) => apply(
                &mut current,
                &mut ignored,
                key,
                value,
                Source::Property(name.clone()),
            ),
            None => ignored.push(format!("{name}: not a per-table key")),
        }
    }
    let entries = KEYS
        .into_iter()
        .map(|key| Entry {
            key,
            value: key.get(&current),
            source: sources.remove(&key).unwrap_or(Source::Default),
        })
        .collect();
    Policy {
        config: current.config,
        enabled: current.enabled,
        entries,
        ignored,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn rule(pattern: &str, settings: &[(&str, serde_json::Value)]) -> PolicyRule {
        PolicyRule {
            pattern: pattern.into(),
            settings: settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    fn source_of(p: &Policy, key: Key) -> (&str, &Source) {
        let e = p.entries.iter().find(|e| e.key == key).expect("key");
        (e.value.as_str(), &e.source)
    }

    #[test]
    fn a_table_property_overrides_a_namespace_rule_and_each_key_names_its_level() {
        let config = MaintenanceConfig {
            min_commits: 20,
            policy: vec![
                rule(
                    "sales.*",
                    &[("keep_snapshots", 5.into()), ("min_input_files", 3.into())],
                ),
                rule("*", &[("keep_snapshots", 7.into())]),
                rule("sales.orders", &[("orphan_min_age", "5d".into())]),
            ],
            ..MaintenanceConfig::default()
        };
        check_rules(&config).expect("valid rules");
        let props = HashMap::from([
            (
                "lakegate.maintenance.keep_snapshots".to_string(),
                "2".to_string(),
            ),
            ("write.format.default".to_string(), "parquet".to_string()),
        ]);
        let p = resolve(&config, "sales", "orders", &props);
        assert_eq!(
            source_of(&p, Key::KeepSnapshots),
            (
                "2",
                &Source::Property("lakegate.maintenance.keep_snapshots".into())
            )
        );
        assert_eq!(p.config.keep_snapshots, 2);
        assert_eq!(
            source_of(&p, Key::MinInputFiles),
            ("3", &Source::Namespace("policy sales.*".into()))
        );
        assert_eq!(
            source_of(&p, Key::OrphanMinAge),
            ("5days", &Source::Table("policy sales.orders".into()))
        );
        assert_eq!(
            source_of(&p, Key::MinCommits),
            ("20", &Source::Catalog("[maintenance]".into()))
        );
        assert_eq!(source_of(&p, Key::MaxManifests).1, &Source::Default);
        // Another namespace: only the catalog-wide rule.
        let other = resolve(&config, "ops", "events", &HashMap::new());
        assert_eq!(
            source_of(&other, Key::KeepSnapshots),
            ("7", &Source::Catalog("policy *".into()))
        );
        assert!(
            p.summary().contains("keep_snapshots=2 (table property"),
            "{}",
            p.summary()
        );
    }

    #[test]
    fn unsafe_or_unreadable_values_are_ignored_and_reported() {
        let props = HashMap::from([
            (
                "lakegate.maintenance.keep_snapshots".to_string(),
                "0".to_string(),
            ),
            (
                "lakegate.maintenance.settle_after".to_string(),
                "soon".to_string(),
            ),
            ("lakegate.maintenance.bogus".to_string(), "1".to_string()),
            (
                "lakegate.maintenance.enabled".to_string(),
                "false".to_string(),
            ),
        ]);
        let p = resolve(&MaintenanceConfig::default(), "a", "b", &props);
        assert_eq!(
            p.config.keep_snapshots, 10,
            "0 would expire the current snapshot"
        );
        assert_eq!(p.ignored.len(), 3, "{:?}", p.ignored);
        assert!(!p.enabled, "a table may opt out");
        let bad = MaintenanceConfig {
            policy: vec![rule("sales.*", &[("keep_snapshot", 3.into())])],
            ..MaintenanceConfig::default()
        };
        assert!(
            check_rules(&bad)
                .expect_err("unknown key")
                .contains("keep_snapshot")
        );
        let excluded = MaintenanceConfig {
            exclude: vec!["a.*".into()],
            ..MaintenanceConfig::default()
        };
        let p = resolve(&excluded, "a", "b", &HashMap::new());
        assert!(!p.enabled);
        assert!(matches!(source_of(&p, Key::Enabled).1, Source::Catalog(_)));
    }
}

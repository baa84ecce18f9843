//! The planner: which operations to run this cycle, in which order, and why. Partitions are
//! ranked by heat × expected gain within the cycle's byte and file budget; settled partitions
//! (no new file for `settle_after`) are rewritten whole and sorted, the open one only has its
//! small files merged; per table the order is expire snapshots → compact → remove orphans →
//! rewrite manifests, and a table's operations run one after another, never at once.

use serde::Serialize;

use crate::config::MaintenanceConfig;
use crate::health::TableHealth;
use crate::inventory::LiveFile;
use crate::oplog::OperationKind;

/// What to do.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Expire this many snapshots.
    ExpireSnapshots {
        /// Snapshots past retention.
        snapshots: usize,
    },
    /// Rewrite a partition's files.
    Compact {
        /// The partition's spec.
        spec_id: i32,
        /// The partition.
        partition: String,
        /// Input data files.
        files: Vec<String>,
        /// Input bytes.
        bytes: u64,
        /// Whether the input is the whole partition (its delete files go too).
        whole_partition: bool,
        /// Sort columns.
        sort: Vec<String>,
        /// `settled` or `open`.
        state: String,
    },
    /// Delete unreferenced files older than the threshold.
    RemoveOrphans,
    /// Merge small manifests.
    RewriteManifests {
        /// Data manifests now.
        manifests: usize,
    },
}

impl Action {
    /// The operation it is.
    pub fn kind(&self) -> OperationKind {
        match self {
            Action::ExpireSnapshots { .. } => OperationKind::ExpireSnapshots,
            Action::Compact { .. } => OperationKind::Compact,
            Action::RemoveOrphans => OperationKind::RemoveOrphans,
            Action::RewriteManifests { .. } => OperationKind::RewriteManifests,
        }
    }

    fn order(&self) -> u8 {
        match self {
            Action::ExpireSnapshots { .. } => 0,
            Action::Compact { .. } => 1,
            Action::RemoveOrphans => 2,
            Action::RewriteManifests { .. } => 3,
        }
    }
}

/// One planned operation.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    /// `ns.table`.
    pub table: String,
    /// What.
    pub action: Action,
    /// heat × gain (compactions); ordering key across tables.
    pub priority: f64,
    /// Why, for people.
    pub reason: String,
}

/// A table the planner may act on.
pub struct Candidate<'a> {
    /// Its health.
    pub health: &'a TableHealth,
    /// Its live files.
    pub files: &'a [LiveFile],
    /// The table's default partition spec (only its partitions are compacted).
    pub default_spec: i32,
    /// Snapshots past retention.
    pub expirable: usize,
    /// Whether orphan removal is due.
    pub orphans_due: bool,
    /// The table's effective settings ([`crate::policy`]).
    pub config: &'a MaintenanceConfig,
}

/// Plans one cycle over `candidates` (tables already found due): each table under its own
/// settings, the cycle under `config`'s budgets.
pub fn plan(candidates: &[Candidate<'_>], config: &MaintenanceConfig, now_ms: i64) -> Vec<Planned> {
    let mut compactions: Vec<Planned> = Vec::new();
    let mut others: Vec<Planned> = Vec::new();
    for c in candidates {
        let h = c.health;
        let table = c.config;
        let small = table.small_file_bytes();
        if c.expirable > 0 {
            others.push(Planned {
                table: h.table.clone(),
                action: Action::ExpireSnapshots {
                    snapshots: c.expirable,
                },
                priority: 0.0,
                reason: format!(
                    "{} of {} snapshots are past retention",
                    c.expirable, h.snapshots
                ),
            });
        }
        let max_heat = h.partitions.iter().map(|p| p.heat).fold(0.0, f64::max);
        for p in &h.partitions {
            if p.spec_id != c.default_spec {
                continue;
            }
            let settled = now_ms - p.last_write_ms >= table.settle_after.as_millis() as i64;
            let in_partition = c
                .files
                .iter()
                .filter(|f| f.spec_id == p.spec_id && f.partition == p.partition);
            let data: Vec<&LiveFile> = in_partition.clone().filter(|f| f.is_data()).collect();
            let has_deletes = p.delete_files > 0;
            let worth = p.small_files >= table.min_input_files || (settled && has_deletes);
            if !worth {
                continue;
            }
            let (inputs, state): (Vec<&LiveFile>, &str) = if settled {
                (data.clone(), "settled")
            } else {
                (
                    data.iter().copied().filter(|f| f.bytes() < small).collect(),
                    "open",
                )
            };
            let whole = inputs.len() == data.len();
            let bytes: u64 = inputs.iter().map(|f| f.bytes()).sum();
            let gain = p.extra_files as f64
                + if whole {
                    3.0 * p.delete_files as f64
                } else {
                    0.0
                };
            let heat_w = if max_heat > 0.0 {
                0.25 + 0.75 * p.heat / max_heat
            } else {
                1.0
            };
            let priority = (1.0 + h.heat) * heat_w * gain * if settled { 2.0 } else { 1.0 };
            let label = if p.partition.is_empty() {
                "the table".to_string()
            } else {
                format!("partition {}", p.partition)
            };
            let sort = if settled || !h.sort_columns.is_empty() {
                h.sort_columns.clone()
            } else {
                vec![]
            };
            compactions.push(Planned {
                table: h.table.clone(),
                action: Action::Compact {
                    spec_id: p.spec_id,
                    partition: p.partition.clone(),
                    files: inputs.iter().map(|f| f.path().to_string()).collect(),
                    bytes,
                    whole_partition: whole,
                    sort: sort.clone(),
                    state: state.into(),
                },
                priority,
                reason: format!(
                    "{label} ({state}): {} of {} files small, {} delete files, heat {:.1}{}",
                    p.small_files,
                    p.data_files,
                    p.delete_files,
                    p.heat,
                    if sort.is_empty() {
                        String::new()
                    } else {
                        format!("; sorted by {}", sort.join(", "))
                    }
                ),
            });
        }
        if c.orphans_due {
            others.push(Planned {
                table: h.table.clone(),
                action: Action::RemoveOrphans,
                priority: 0.0,
                reason: format!(
                    "periodic: files unreferenced for over {} s",
                    table.orphan_min_age.as_secs()
                ),
            });
        }
        if h.manifests > table.max_manifests {
            others.push(Planned {
                table: h.table.clone(),
                action: Action::RewriteManifests {
                    manifests: h.manifests,
                },
                priority: 0.0,
                reason: format!(
                    "{} data manifests (more than {})",
                    h.manifests, table.max_manifests
                ),
            });
        }
    }
    // Budget: hottest gains first.
    compactions.sort_by(|a, b| b.priority.total_cmp(&a.priority));
    let (mut bytes, mut files) = (0u64, 0usize);
    compactions.retain(|p| {
        let Action::Compact {
            bytes: b, files: f, ..
        } = &p.action
        else {
            return false;
        };
        if bytes > 0
            && (bytes + b > config.max_bytes_per_cycle
                || files + f.len() > config.max_files_per_cycle)
        {
            return false;
        }
        bytes += b;
        files += f.len();
        true
    });
    // Tables by their best compaction; each table's operations in the fixed order.
    let mut tables: Vec<(String, f64)> = Vec::new();
    for p in compactions.iter().chain(&others) {
        match tables.iter_mut().find(|(t, _)| *t == p.table) {
            Some((_, best)) => *best = best.max(p.priority),
            None => tables.push((p.table.clone(), p.priority)),
        }
    }
    tables.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut all: Vec<Planned> = compactions.into_iter().chain(others).collect();
    all.sort_by(|a, b| {
        let ta = tables.iter().position(|(t, _)| *t == a.table);
        let tb = tables.iter().position(|(t, _)| *t == b.table);
        ta.cmp(&tb)
            .then(a.action.order().cmp(&b.action.order()))
            .then(b.priority.total_cmp(&a.priority))
    });
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::PartitionHealth;
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat};

    const MIB: u64 = 1 << 20;

    fn file(table: &str, partition: &str, i: usize, bytes: u64) -> LiveFile {
        LiveFile {
            data_file: DataFileBuilder::default()
                .content(DataContentType::Data)
                .file_path(format!("/w/{table}/{partition}/{i}.parquet"))
                .file_format(DataFileFormat::Parquet)
                .record_count(10)
                .file_size_in_bytes(bytes)
                .partition_spec_id(0)
                .build()
                .expect("data file"),
            spec_id: 0,
            partition: partition.into(),
            snapshot_id: 1,
            sequence_number: 1,
            file_sequence_number: Some(1),
        }
    }

    fn partition(name: &str, files: usize, heat: f64, last_write_ms: i64) -> PartitionHealth {
        PartitionHealth {
            spec_id: 0,
            partition: name.into(),
            data_files: files,
            small_files: files,
            bytes: files as u64 * MIB,
            records: 10 * files as u64,
            delete_files: 0,
            delete_records: 0,
            equality_delete_files: 0,
            equality_delete_records: 0,
            last_write_ms,
            heat,
            extra_files: files - 1,
            hot: false,
        }
    }

    fn health(table: &str, heat: f64, partitions: Vec<PartitionHealth>) -> TableHealth {
        TableHealth {
            table: table.into(),
            snapshot_id: Some(1),
            data_files: partitions.iter().map(|p| p.data_files).sum(),
            small_files: 0,
            bytes: 0,
            records: 0,
            delete_files: 0,
            delete_records: 0,
            equality_delete_files: 0,
            equality_delete_records: 0,
            manifests: 40,
            delete_manifests: 0,
            snapshots: 50,
            oldest_snapshot_age_s: 0.0,
            snapshot_lag_s: 0.0,
            commits_last_hour: 50,
            heat,
            read_latency_ms: None,
            sort_columns: vec!["customer_id".into()],
            score: 10.0,
            reasons: vec![],
            partitions,
        }
    }

    #[test]
    fn hot_settled_partitions_come_first_and_each_table_keeps_the_order() {
        let now = 10_000_000;
        let settled = now - 3_600_000;
        let config = MaintenanceConfig::default();
        let files_a: Vec<LiveFile> = (0..10)
            .map(|i| file("a", "day=1", i, MIB))
            .chain((0..10).map(|i| file("a", "day=2", i, MIB)))
            .chain((0..6).map(|i| file("a", "day=3", i, MIB)))
            .collect();
        let files_b: Vec<LiveFile> = (0..30).map(|i| file("b", "", i, MIB)).collect();
        let a = health(
            "s.a",
            50.0,
            vec![
                partition("day=1", 10, 0.0, settled),
                partition("day=2", 10, 40.0, settled),
                // The open partition: written a moment ago; only its small files are merged.
                partition("day=3", 6, 50.0, now - 1000),
            ],
        );
        let b = health("s.b", 0.0, vec![partition("", 30, 0.0, settled)]);
        let candidates = [
            Candidate {
                health: &b,
                files: &files_b,
                default_spec: 0,
                expirable: 3,
                orphans_due: true,
                config: &config,
            },
            Candidate {
                health: &a,
                files: &files_a,
                default_spec: 0,
                expirable: 40,
                orphans_due: false,
                config: &config,
            },
        ];
        let planned = plan(&candidates, &config, now);
        let summary: Vec<(String, &str, String)> = planned
            .iter()
            .map(|p| {
                let part = match &p.action {
                    Action::Compact {
                        partition, state, ..
                    } => format!("{partition}/{state}"),
                    _ => String::new(),
                };
                (p.table.clone(), p.action.kind().name(), part)
            })
            .collect();
        let s = |t: &str, k: &'static str, p: &str| (t.to_string(), k, p.to_string());
        assert_eq!(
            summary,
            vec![
                // The read table first; within it expiry, then compactions by heat × gain
                // (the hot settled day=2 before the hotter but open day=3), then manifests.
                s("s.a", "expire_snapshots", ""),
                s("s.a", "compact", "day=2/settled"),
                s("s.a", "compact", "day=3/open"),
                s("s.a", "compact", "day=1/settled"),
                s("s.a", "rewrite_manifests", ""),
                s("s.b", "expire_snapshots", ""),
                s("s.b", "compact", "/settled"),
                s("s.b", "remove_orphans", ""),
                s("s.b", "rewrite_manifests", ""),
            ]
        );
    }

    #[test]
    fn the_byte_budget_keeps_the_best_compactions() {
        let now = 10_000_000;
        let config = MaintenanceConfig {
            max_bytes_per_cycle: 12 * MIB,
            ..Default::default()
        };
        let files: Vec<LiveFile> = (0..10)
            .map(|i| file("a", "day=1", i, MIB))
            .chain((0..10).map(|i| file("a", "day=2", i, MIB)))
            .collect();
        let mut h = health(
            "s.a",
            10.0,
            vec![
                partition("day=1", 10, 1.0, 0),
                partition("day=2", 10, 9.0, 0),
            ],
        );
        h.manifests = 1;
        let planned = plan(
            &[Candidate {
                health: &h,
                files: &files,
                default_spec: 0,
                expirable: 0,
                orphans_due: false,
                config: &config,
            }],
            &config,
            now,
        );
        assert_eq!(planned.len(), 1, "{planned:?}");
        assert!(
            matches!(&planned[0].action, Action::Compact { partition, bytes, .. }
            if partition == "day=2" && *bytes == 10 * MIB)
        );
    }
}

//! Table health from Iceberg metadata, weighted by query heat: per partition, data files and
//! their size distribution, delete files and the rows they cover; per table, manifests,
//! snapshots and their age, time since the last commit and commits per hour. Folded into a
//! 0–100 score with the reasons — a fragmented partition nobody reads counts a quarter of a
//! fragmented one every dashboard reads.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::{DataContentType, ManifestContentType};
use iceberg::table::Table;
use serde::Serialize;

use crate::config::MaintenanceConfig;
use crate::inventory::{Inventory, LiveFile};

/// One partition's files.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionHealth {
    /// Its spec.
    pub spec_id: i32,
    /// Its label (`day=2026-11-29`; empty when unpartitioned).
    pub partition: String,
    /// Live data files.
    pub data_files: usize,
    /// Data files below the small-file size.
    pub small_files: usize,
    /// Bytes of data files.
    pub bytes: u64,
    /// Rows in data files (before deletes).
    pub records: u64,
    /// Live delete files.
    pub delete_files: usize,
    /// Rows those delete files delete (position deletes) or match on (equality deletes).
    pub delete_records: u64,
    /// Of those, equality-delete files (an upsert stream's: Flink's sink in upsert mode).
    pub equality_delete_files: usize,
    /// Rows (keys) the equality-delete files match on.
    pub equality_delete_records: u64,
    /// When a file was last added to it (ms since the epoch).
    pub last_write_ms: i64,
    /// Query heat (decayed reads selecting it).
    pub heat: f64,
    /// Files beyond the ideal count (small files that compaction would merge).
    pub extra_files: usize,
    /// At least half as hot as the table's hottest partition, and hotter than its coldest.
    pub hot: bool,
}

/// One table's health.
#[derive(Debug, Clone, Serialize)]
pub struct TableHealth {
    /// `ns.table`.
    pub table: String,
    /// The current snapshot.
    pub snapshot_id: Option<i64>,
    /// Live data files.
    pub data_files: usize,
    /// Small data files.
    pub small_files: usize,
    /// Data bytes.
    pub bytes: u64,
    /// Rows (before deletes).
    pub records: u64,
    /// Live delete files.
    pub delete_files: usize,
    /// Rows covered by delete files.
    pub delete_records: u64,
    /// Of those, equality-delete files.
    pub equality_delete_files: usize,
    /// Rows (keys) the equality-delete files match on.
    pub equality_delete_records: u64,
    /// Data manifests in the current snapshot.
    pub manifests: usize,
    /// Delete manifests in the current snapshot.
    pub delete_manifests: usize,
    /// Snapshots kept in metadata.
    pub snapshots: usize,
    /// Age of the oldest snapshot (s).
    pub oldest_snapshot_age_s: f64,
    /// Time since the last commit (s).
    pub snapshot_lag_s: f64,
    /// Commits in the last hour.
    pub commits_last_hour: usize,
    /// Decayed reads.
    pub heat: f64,
    /// Latency of queries reading it (EWMA, ms).
    pub read_latency_ms: Option<f64>,
    /// The columns compaction would sort by.
    pub sort_columns: Vec<String>,
    /// 0 (needs work) – 100 (nothing to do).
    pub score: f64,
    /// Why points were taken off.
    pub reasons: Vec<String>,
    /// Per partition, hottest first.
    pub partitions: Vec<PartitionHealth>,
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

/// What the assessment knows besides the table's files.
pub struct Signals<'a> {
    /// Heat per `(spec, partition label)`.
    pub partition_heat: &'a HashMap<(i32, String), f64>,
    /// The table's heat.
    pub table_heat: &'a crate::telemetry::TableHeatView,
    /// The columns compaction would sort by.
    pub sort_columns: Vec<String>,
    /// Snapshots past retention.
    pub expirable: usize,
}

/// Scores `table` at `inventory` with the heat and retention `signals`.
pub fn assess(
    key: &str,
    table: &Table,
    inventory: Option<&Inventory>,
    signals: Signals<'_>,
    config: &MaintenanceConfig,
) -> TableHealth {
    let Signals {
        partition_heat: heat,
        table_heat,
        sort_columns,
        expirable,
    } = signals;
    let metadata = table.metadata();
    let now = chrono::Utc::now().timestamp_millis();
    let small = config.small_file_bytes();
    let target = config.target_file_size;
    let snapshot_ts: HashMap<i64, i64> = metadata
        .snapshots()
        .map(|s| (s.snapshot_id(), s.timestamp_ms()))
        .collect();
    let mut partitions: BTreeMap<(i32, String), PartitionHealth> = BTreeMap::new();
    let empty = Vec::new();
    let files: &Vec<LiveFile> = inventory.map(|i| &i.files).unwrap_or(&empty);
    for f in files {
        let p = partitions
            .entry((f.spec_id, f.partition.clone()))
            .or_insert_with(|| PartitionHealth {
                spec_id: f.spec_id,
                partition: f.partition.clone(),
                data_files: 0,
                small_files: 0,
                bytes: 0,
                records: 0,
                delete_files: 0,
                delete_records: 0,
                equality_delete_files: 0,
                equality_delete_records: 0,
                last_write_ms: 0,
                heat: heat
                    .get(&(f.spec_id, f.partition.clone()))
                    .copied()
                    .unwrap_or(0.0),
                extra_files: 0,
                hot: false,
            });
        if f.data_file.content_type() == DataContentType::Data {
            p.data_files += 1;
            p.bytes += f.bytes();
            p.records += f.data_file.record_count();
            if f.bytes() < small {
                p.small_files += 1;
            }
        } else {
            p.delete_files += 1;
            p.delete_records += f.data_file.record_count();
            if f.data_file.content_type() == DataContentType::EqualityDeletes {
                p.equality_delete_files += 1;
                p.equality_delete_records += f.data_file.record_count();
            }
        }
        if let Some(ts) = snapshot_ts.get(&f.snapshot_id) {
            p.last_write_ms = p.last_write_ms.max(*ts);
        }
    }
    for p in partitions.values_mut() {
        let ideal = (p.bytes.div_ceil(target.max(1)) as usize).max(1);
        p.extra_files = p.data_files.saturating_sub(ideal).min(p.small_files);
    }
    let mut partitions: Vec<PartitionHealth> = partitions.into_values().collect();
    let hottest = partitions.iter().map(|p| p.heat).fold(0.0, f64::max);
    let coldest = partitions.iter().map(|p| p.heat).fold(f64::MAX, f64::min);
    let single = partitions.len() == 1;
    for p in &mut partitions {
        p.hot = hottest > 0.0 && p.heat >= hottest * 0.5 && (p.heat > coldest || single);
    }
    partitions.sort_by(|a, b| {
        b.heat
            .total_cmp(&a.heat)
            .then(b.extra_files.cmp(&a.extra_files))
    });

    let sum = |f: fn(&PartitionHealth) -> u64| partitions.iter().map(f).sum::<u64>();
    let data_files = sum(|p| p.data_files as u64) as usize;
    let small_files = sum(|p| p.small_files as u64) as usize;
    let delete_files = sum(|p| p.delete_files as u64) as usize;
    let delete_records = sum(|p| p.delete_records);
    let equality_delete_files = sum(|p| p.equality_delete_files as u64) as usize;
    let equality_delete_records = sum(|p| p.equality_delete_records);
    let records = sum(|p| p.records);
    let bytes = sum(|p| p.bytes);
    let (manifests, delete_manifests) = inventory
        .map(|i| {
            let data = i
                .manifests
                .iter()
                .filter(|m| m.content == ManifestContentType::Data)
                .count();
            (data, i.manifests.len() - data)
        })
        .unwrap_or((0, 0));
    let snapshots = metadata.snapshots().len();
    let oldest = metadata.snapshots().map(|s| s.timestamp_ms()).min();
    let newest = metadata.current_snapshot().map(|s| s.timestamp_ms());
    let commits_last_hour = metadata
        .snapshots()
        .filter(|s| now - s.timestamp_ms() < 3_600_000)
        .count();

    let mut score: f64 = 100.0;
    let mut reasons = Vec::new();
    // Fragmentation, weighted by heat.
    let max_heat = partitions.iter().map(|p| p.heat).fold(0.0, f64::max);
    let weight = |p: &PartitionHealth| {
        if max_heat > 0.0 {
            0.25 + 0.75 * p.heat / max_heat
        } else {
            1.0
        }
    };
    let (extra_w, files_w) = partitions.iter().fold((0.0, 0.0), |(e, f), p| {
        (
            e + weight(p) * p.extra_files as f64,
            f + weight(p) * p.data_files as f64,
        )
    });
    if files_w > 0.0 && extra_w > 0.0 {
        let penalty = 45.0 * extra_w / files_w;
        score -= penalty;
        let worst = partitions.iter().max_by(|a, b| {
            (weight(a) * a.extra_files as f64).total_cmp(&(weight(b) * b.extra_files as f64))
        });
        if let Some(w) = worst {
            let hot = if max_heat > 0.0 && w.heat >= max_heat * 0.5 {
                "hot "
            } else {
                ""
            };
            let name = if w.partition.is_empty() {
                "the table".to_string()
            } else {
                format!("{hot}partition {}", w.partition)
            };
            reasons.push(format!(
                "-{penalty:.0}: {small_files} of {data_files} data files are small (< {}); worst: {name} with {} of {} small",
                mib(small),
                w.small_files,
                w.data_files
            ));
        }
    }
    if delete_files > 0 {
        let ratio = delete_records as f64 / records.max(1) as f64;
        let penalty = 20.0 * (ratio * 5.0).min(1.0) + (delete_files as f64 * 0.5).min(5.0);
        score -= penalty;
        let equality = if equality_delete_files > 0 {
            format!(" ({equality_delete_files} of them equality deletes)")
        } else {
            String::new()
        };
        reasons.push(format!(
            "-{penalty:.0}: {delete_files} delete files{equality} cover {delete_records} of \
             {records} rows"
        ));
    }
    if manifests > config.max_manifests {
        let excess = (manifests - config.max_manifests) as f64 / config.max_manifests as f64;
        let penalty = 15.0 * excess.min(1.0);
        score -= penalty;
        reasons.push(format!(
            "-{penalty:.0}: {manifests} data manifests (merged past {})",
            config.max_manifests
        ));
    }
    if expirable > 0 {
        let penalty = 10.0 * (expirable as f64 / 100.0).min(1.0);
        score -= penalty;
        reasons.push(format!(
            "-{penalty:.0}: {expirable} of {snapshots} snapshots are past retention"
        ));
    }
    TableHealth {
        table: key.to_string(),
        snapshot_id: metadata.current_snapshot().map(|s| s.snapshot_id()),
        data_files,
        small_files,
        bytes,
        records,
        delete_files,
        delete_records,
        equality_delete_files,
        equality_delete_records,
        manifests,
        delete_manifests,
        snapshots,
        oldest_snapshot_age_s: oldest.map(|o| (now - o) as f64 / 1000.0).unwrap_or(0.0),
        snapshot_lag_s: newest
            .map(|n| (now - n).max(0) as f64 / 1000.0)
            .unwrap_or(0.0),
        commits_last_hour,
        heat: table_heat.reads,
        read_latency_ms: table_heat.latency_ms,
        sort_columns,
        score: score.clamp(0.0, 100.0),
        reasons,
        partitions,
    }
}

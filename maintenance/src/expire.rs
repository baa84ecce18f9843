//! Snapshot expiry: drop snapshots older than the minimum age beyond the newest `keep`
//! (never the current one or any a branch or tag points at), then delete the files only
//! expired snapshots used — manifest lists, manifests, data and delete files no retained
//! snapshot still has live.

use std::collections::HashSet;

use iceberg::spec::SnapshotRef;
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};

use crate::commit::Committer;
use crate::error::{Error, Result};
use crate::inventory::ManifestCache;

/// What expiry did.
#[derive(Debug, Clone, Default)]
pub struct Expired {
    /// Snapshots removed.
    pub snapshots: Vec<i64>,
    /// Snapshots left.
    pub remaining: usize,
    /// Files deleted.
    pub files_deleted: usize,
    /// Bytes deleted.
    pub bytes_deleted: u64,
}

/// Refs named `consumer.<name>` (tags or branches) are consumers' positions: a reader of the
/// table's changes moves its ref forward as it consumes them.
pub const CONSUMER_PREFIX: &str = "consumer.";

/// A consumer's position in a table's history.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Consumer {
    /// Its name (the ref without [`CONSUMER_PREFIX`]).
    pub name: String,
    /// The snapshot it has reached.
    pub snapshot_id: i64,
    /// How far behind the current snapshot it is (commit time of the current minus its).
    pub lag_s: f64,
    /// Snapshots committed after its position.
    pub commits_behind: usize,
    /// Whether it holds the snapshots after its position from expiry (within
    /// `max_consumer_lag`, or no limit set).
    pub holds: bool,
}

/// The consumers of `table`, each with its lag; `max_lag`: consumers further behind no longer
/// hold the snapshots after their position (zero: no limit).
pub fn consumers(table: &Table, max_lag: std::time::Duration) -> Vec<Consumer> {
    let metadata = table.metadata();
    let Some(current) = metadata.current_snapshot() else {
        return Vec::new();
    };
    let Ok(json) = serde_json::to_value(metadata) else {
        return Vec::new();
    };
    let Some(refs) = json["refs"].as_object() else {
        return Vec::new();
    };
    let mut out: Vec<Consumer> = refs
        .iter()
        .filter_map(|(name, r)| {
            let name = name.strip_prefix(CONSUMER_PREFIX)?;
            let id = r["snapshot-id"].as_i64()?;
            let at = metadata.snapshot_by_id(id)?.timestamp_ms();
            let lag_ms = (current.timestamp_ms() - at).max(0);
            Some(Consumer {
                name: name.to_string(),
                snapshot_id: id,
                lag_s: lag_ms as f64 / 1000.0,
                commits_behind: metadata
                    .snapshots()
                    .filter(|s| s.timestamp_ms() > at)
                    .count(),
                holds: max_lag.is_zero() || lag_ms <= max_lag.as_millis() as i64,
            })
        })
        .collect();
    out.sort_by(|a, b| b.lag_s.total_cmp(&a.lag_s));
    out
}

/// The snapshots of `table` that expiry would remove, oldest first. Never the newest `keep`,
/// those younger than `min_age`, one a branch or tag points at, one a query is still reading
/// (`reading`, see [`crate::readers`]), or one a consumer still has to read (every snapshot
/// from the slowest holding consumer's position on; `max_consumer_lag`, see [`consumers`]).
pub fn expirable(
    table: &Table,
    keep: usize,
    min_age: std::time::Duration,
    reading: &HashSet<i64>,
    max_consumer_lag: std::time::Duration,
) -> Vec<SnapshotRef> {
    let metadata = table.metadata();
    let props = metadata.properties();
    let keep = props
        .get("history.expire.min-snapshots-to-keep")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(keep)
        .max(1);
    let min_age_ms = props
        .get("history.expire.max-snapshot-age-ms")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(min_age.as_millis() as i64);
    let now = chrono::Utc::now().timestamp_millis();
    // iceberg-rust does not list refs publicly; the serialised metadata has them.
    let mut referenced: HashSet<i64> = metadata
        .current_snapshot()
        .map(|s| s.snapshot_id())
        .into_iter()
        .collect();
    if let Ok(json) = serde_json::to_value(metadata)
        && let Some(refs) = json["refs"].as_object()
    {
        referenced.extend(refs.values().filter_map(|r| r["snapshot-id"].as_i64()));
    }
    // The slowest consumer still holding: everything it has not read yet stays.
    let consumed_from = consumers(table, max_consumer_lag)
        .iter()
        .filter(|c| c.holds)
        .filter_map(|c| metadata.snapshot_by_id(c.snapshot_id))
        .map(|s| s.timestamp_ms())
        .min()
        .unwrap_or(i64::MAX);
    let mut all: Vec<&SnapshotRef> = metadata.snapshots().collect();
    all.sort_by_key(|s| std::cmp::Reverse(s.timestamp_ms()));
    all.iter()
        .enumerate()
        .filter(|(i, s)| {
            *i >= keep
                && now - s.timestamp_ms() > min_age_ms
                && !referenced.contains(&s.snapshot_id())
                && !reading.contains(&s.snapshot_id())
                && s.timestamp_ms() < consumed_from
        })
        .map(|(_, s)| (*s).clone())
        .rev()
        .collect()
}

/// Expires `ident`'s old snapshots and deletes what only they used.
///
/// # Errors
/// Catalog and storage errors; [`Error::Conflict`] if the table kept moving.
pub async fn run(
    committer: &Committer,
    cache: &ManifestCache,
    ident: &TableIdent,
    keep: usize,
    min_age: std::time::Duration,
    reading: &(dyn Fn() -> HashSet<i64> + Sync),
    max_consumer_lag: std::time::Duration,
) -> Result<Expired> {
    let mut attempt = 0;
    let (before, after, expired) = loop {
        attempt += 1;
        let table = committer.load(ident).await?;
        // The readers as of now: a statement that started since the cycle was planned counts.
        let expired = expirable(&table, keep, min_age, &reading(), max_consumer_lag);
        if expired.is_empty() {
            return Ok(Expired {
                remaining: table.metadata().snapshots().len(),
                ..Default::default()
            });
        }
        let current = table.metadata().current_snapshot().map(|s| s.snapshot_id());
        let updates = vec![TableUpdate::RemoveSnapshots {
            snapshot_ids: expired.iter().map(|s| s.snapshot_id()).collect(),
        }];
        let requirements = vec![
            TableRequirement::UuidMatch {
                uuid: table.metadata().uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: "main".into(),
                snapshot_id: current,
            },
        ];
        match committer.commit(&table, updates, requirements).await {
            Ok(after) => break (table, after, expired),
            Err(Error::Conflict(_)) if attempt < 25 => {
                tokio::time::sleep(crate::compact::jitter(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    };
    // Files live in retained snapshots (of the table as committed, newer commits included).
    let mut retained_lists = HashSet::new();
    let mut retained_manifests = HashSet::new();
    let mut retained_files = HashSet::new();
    for s in after.metadata().snapshots() {
        retained_lists.insert(s.manifest_list().to_string());
        let list = after.manifest_list_reader(s).load().await?;
        for m in list.entries() {
            if retained_manifests.insert(m.manifest_path.clone()) {
                let manifest = cache.load(&after, m).await?;
                for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                    retained_files.insert(e.file_path().to_string());
                }
            }
        }
    }
    let mut doomed: Vec<(String, u64)> = Vec::new();
    let mut seen = HashSet::new();
    for s in &expired {
        if !retained_lists.contains(s.manifest_list()) && seen.insert(s.manifest_list().to_string())
        {
            doomed.push((s.manifest_list().to_string(), 0));
        }
        let Ok(list) = before.manifest_list_reader(s).load().await else {
            continue; // already gone: a previous expiry was interrupted after deleting it
        };
        for m in list.entries() {
            if retained_manifests.contains(&m.manifest_path)
                || !seen.insert(m.manifest_path.clone())
            {
                continue;
            }
            doomed.push((m.manifest_path.clone(), m.manifest_length as u64));
            let Ok(manifest) = cache.load(&before, m).await else {
                continue;
            };
            for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                let path = e.file_path().to_string();
                if !retained_files.contains(&path) && seen.insert(path.clone()) {
                    doomed.push((path, e.file_size_in_bytes()));
                }
            }
        }
    }
    let mut out = Expired {
        snapshots: expired.iter().map(|s| s.snapshot_id()).collect(),
        remaining: after.metadata().snapshots().len(),
        ..Default::default()
    };
    for (path, bytes) in doomed {
        match after.file_io().delete(&path).await {
            Ok(()) => {
                out.files_deleted += 1;
                out.bytes_deleted += bytes;
            }
            Err(e) => tracing::warn!(%path, error = %e, "could not delete an expired file"),
        }
    }
    Ok(out)
}

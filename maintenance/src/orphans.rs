//! Orphan-file removal: files under a table's location that no metadata references (left by
//! failed or abandoned writes) and that are older than a threshold — so a file a writer has
//! written but not yet committed is never touched. Files are listed *before* the metadata is
//! read, so anything committed meanwhile counts as referenced. Local and S3 warehouses (listed
//! by [`lakegate_engines::lake::objects`]: FileIO cannot list; deletes go through the table's
//! FileIO).

use std::collections::{HashMap, HashSet};

use iceberg::TableIdent;
use lakegate_engines::lake::objects::{self, canonical};

use crate::commit::Committer;
use crate::error::{Error, Result};
use crate::inventory::ManifestCache;

/// What orphan removal did.
#[derive(Debug, Clone, Default)]
pub struct Orphans {
    /// Files found under the table's location.
    pub scanned: usize,
    /// Unreferenced files younger than the threshold (kept).
    pub young: usize,
    /// The age threshold used: the configured floor, or [`GAP_FACTOR`] times the longest
    /// write-to-commit gap seen in the table's files, whichever is longer.
    pub threshold: std::time::Duration,
    /// The longest write-to-commit gap seen (a file's modification time to the commit of the
    /// snapshot that added it); `None` when the store gives no times.
    pub observed_gap: Option<std::time::Duration>,
    /// Files deleted.
    pub deleted: usize,
    /// Bytes deleted.
    pub bytes: u64,
}

/// How many times the longest observed write-to-commit gap an unreferenced file must be old.
pub const GAP_FACTOR: u32 = 3;

/// Deletes `ident`'s orphan files older than `min_age` — or than [`GAP_FACTOR`] times the
/// longest write-to-commit gap its writers have shown, when that is longer: a writer that
/// holds written files for an hour before committing sets the threshold, not the floor.
///
/// # Errors
/// [`Error::Unsupported`] for stores other than local and S3; listing, catalog and metadata
/// errors.
pub async fn run(
    committer: &Committer,
    cache: &ManifestCache,
    ident: &TableIdent,
    min_age: std::time::Duration,
) -> Result<Orphans> {
    let table = committer.load(ident).await?;
    let location = table.metadata().location().to_string();
    let files = objects::list(&location, &committer.lake().config().storage)
        .await
        .map_err(|e| match e {
            lakegate_engines::Error::Unsupported { what } => Error::Unsupported(what),
            e => Error::Lake(e),
        })?;
    // Metadata read after listing: files committed meanwhile are referenced.
    let table = committer.load(ident).await?;
    let metadata = table.metadata();
    let mut referenced: HashSet<String> = HashSet::new();
    let mut add = |p: &str| {
        referenced.insert(canonical(p));
    };
    if let Some(m) = table.metadata_location() {
        add(m);
    }
    for log in metadata.metadata_log() {
        add(&log.metadata_file);
    }
    for s in metadata.statistics_iter() {
        add(&s.statistics_path);
    }
    for s in metadata.partition_statistics_iter() {
        add(&s.statistics_path);
    }
    let mut manifests_seen = HashSet::new();
    // When each content file was committed (ms), for the write-to-commit gap.
    let mut committed: HashMap<String, i64> = HashMap::new();
    for s in metadata.snapshots() {
        add(s.manifest_list());
        let list = table.manifest_list_reader(s).load().await?;
        for m in list.entries() {
            add(&m.manifest_path);
            if manifests_seen.insert(m.manifest_path.clone()) {
                let manifest = cache.load(&table, m).await?;
                for e in manifest.entries() {
                    add(e.file_path());
                    let at = e
                        .snapshot_id()
                        .and_then(|id| metadata.snapshot_by_id(id))
                        .map(|s| s.timestamp_ms());
                    if let Some(at) = at {
                        committed.insert(canonical(e.file_path()), at);
                    }
                }
            }
        }
    }
    let observed_gap = files
        .iter()
        .filter_map(|f| {
            let at = committed.get(&f.location)?;
            let written = f.modified?.duration_since(std::time::UNIX_EPOCH).ok()?;
            Some(std::time::Duration::from_millis(
                (*at - written.as_millis() as i64).max(0) as u64,
            ))
        })
        .max();
    let min_age = observed_gap.map_or(min_age, |g| min_age.max(g * GAP_FACTOR));
    let now = std::time::SystemTime::now();
    let mut out = Orphans {
        scanned: files.len(),
        threshold: min_age,
        observed_gap,
        ..Default::default()
    };
    for file in files {
        if referenced.contains(&file.location) || file.location.ends_with("/version-hint.text") {
            continue;
        }
        // A store that gives no time keeps the file: it may be a write in progress.
        let age = file.modified.map_or(std::time::Duration::ZERO, |m| {
            now.duration_since(m).unwrap_or_default()
        });
        if age < min_age {
            out.young += 1;
            continue;
        }
        let deleted = match lakegate_engines::lake::scheme_of(&file.location) {
            lakegate_engines::lake::Scheme::Local => tokio::fs::remove_file(&file.location)
                .await
                .map_err(|e| e.to_string()),
            _ => table
                .file_io()
                .delete(&file.location)
                .await
                .map_err(|e| e.to_string()),
        };
        match deleted {
            Ok(()) => {
                out.deleted += 1;
                out.bytes += file.size;
            }
            Err(e) => {
                tracing::warn!(path = %file.location, error = %e, "could not delete an orphan")
            }
        }
    }
    Ok(out)
}

//! Orphan-file removal: files under a table's location that no metadata references (left by
//! failed or abandoned writes) and that are older than a threshold — so a file a writer has
//! written but not yet committed is never touched. Files are listed *before* the metadata is
//! read, so anything committed meanwhile counts as referenced. Local warehouses only (the
//! iceberg crate's FileIO cannot list).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use iceberg::TableIdent;

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
    /// Files deleted.
    pub deleted: usize,
    /// Bytes deleted.
    pub bytes: u64,
}

fn local_path(location: &str) -> Option<PathBuf> {
    if let Some(rest) = location.strip_prefix("file://") {
        return Some(PathBuf::from(rest));
    }
    location.starts_with('/').then(|| PathBuf::from(location))
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, std::time::SystemTime, u64)>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                path: dir.display().to_string(),
                source,
            });
        }
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            walk(&entry.path(), out)?;
        } else if let Ok(modified) = meta.modified() {
            out.push((entry.path(), modified, meta.len()));
        }
    }
    Ok(())
}

/// Deletes `ident`'s orphan files older than `min_age`.
///
/// # Errors
/// [`Error::Unsupported`] for non-local storage; listing, catalog and metadata errors.
pub async fn run(
    committer: &Committer,
    cache: &ManifestCache,
    ident: &TableIdent,
    min_age: std::time::Duration,
) -> Result<Orphans> {
    let table = committer.load(ident).await?;
    let location = table.metadata().location().to_string();
    let root = local_path(&location).ok_or_else(|| {
        Error::Unsupported(format!(
            "orphan removal lists local warehouses only, not {location}"
        ))
    })?;
    let mut files = Vec::new();
    {
        let root = root.clone();
        let listed = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            walk(&root, &mut out).map(|()| out)
        })
        .await
        .map_err(|e| Error::Invariant(e.to_string()))??;
        files.extend(listed);
    }
    // Metadata read after listing: files committed meanwhile are referenced.
    let table = committer.load(ident).await?;
    let metadata = table.metadata();
    let mut referenced: HashSet<PathBuf> = HashSet::new();
    let mut add = |p: &str| {
        if let Some(p) = local_path(p) {
            referenced.insert(p);
        }
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
    for s in metadata.snapshots() {
        add(s.manifest_list());
        let list = table.manifest_list_reader(s).load().await?;
        for m in list.entries() {
            add(&m.manifest_path);
            if manifests_seen.insert(m.manifest_path.clone()) {
                let manifest = cache.load(&table, m).await?;
                for e in manifest.entries() {
                    add(e.file_path());
                }
            }
        }
    }
    let now = std::time::SystemTime::now();
    let mut out = Orphans {
        scanned: files.len(),
        ..Default::default()
    };
    for (path, modified, len) in files {
        if referenced.contains(&path) || path.file_name().is_some_and(|n| n == "version-hint.text")
        {
            continue;
        }
        let age = now.duration_since(modified).unwrap_or_default();
        if age < min_age {
            out.young += 1;
            continue;
        }
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {
                out.deleted += 1;
                out.bytes += len;
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not delete an orphan")
            }
        }
    }
    Ok(out)
}

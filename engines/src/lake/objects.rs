//! Listing the files under a location, local or on S3 — what iceberg-rust's FileIO cannot do
//! (orphan-file removal needs it). S3 is listed through opendal with the lake's `[storage]`
//! settings; every listed file comes back as a location in the form Iceberg metadata writes
//! (`s3://bucket/key`, or a local path), so it can be compared with what metadata references
//! ([`canonical`]).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::storage::{Scheme, StorageConfig, scheme_of};
use crate::error::{Error, Result};

/// One listed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its location, [`canonical`].
    pub location: String,
    /// When it was last written (`None`: the store did not say).
    pub modified: Option<SystemTime>,
    /// Its size in bytes.
    pub size: u64,
}

/// `location` in one spelling per file: `file:///x` and `/x` are `/x`; `s3a://` and `s3n://`
/// are `s3://`.
pub fn canonical(location: &str) -> String {
    if let Some(rest) = location.strip_prefix("file://") {
        return rest.to_string();
    }
    for alias in ["s3a://", "s3n://", "S3://", "S3A://", "S3N://"] {
        if let Some(rest) = location.strip_prefix(alias) {
            return format!("s3://{rest}");
        }
    }
    location.to_string()
}

/// Every file under `location` (recursively).
///
/// # Errors
/// [`Error::Unsupported`] for a store other than the local file system and S3; listing errors
/// as [`Error::Storage`].
pub async fn list(location: &str, storage: &StorageConfig) -> Result<Vec<Object>> {
    match scheme_of(location) {
        Scheme::Local => {
            let root = PathBuf::from(canonical(location));
            tokio::task::spawn_blocking(move || {
                let mut out = Vec::new();
                walk(&root, &mut out).map(|()| out)
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
        }
        Scheme::S3 => list_s3(location, &storage.with_environment()).await,
        Scheme::Other => Err(Error::Unsupported {
            what: format!("listing {location} (local and S3 locations are listed)"),
        }),
    }
}

fn walk(dir: &Path, out: &mut Vec<Object>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::Storage {
                location: dir.display().to_string(),
                reason: e.to_string(),
            });
        }
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            walk(&entry.path(), out)?;
        } else {
            out.push(Object {
                location: entry.path().display().to_string(),
                modified: meta.modified().ok(),
                size: meta.len(),
            });
        }
    }
    Ok(())
}

async fn list_s3(location: &str, storage: &StorageConfig) -> Result<Vec<Object>> {
    let failed = |reason: String| Error::Storage {
        location: location.to_string(),
        reason,
    };
    let canonical = canonical(location);
    let rest = canonical
        .strip_prefix("s3://")
        .ok_or_else(|| failed("not an s3:// location".into()))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let mut builder = opendal::services::S3::default()
        .bucket(bucket)
        .root("/")
        .region(storage.region());
    if let Some(endpoint) = &storage.endpoint {
        builder = builder.endpoint(endpoint);
    }
    if !storage.path_style() {
        builder = builder.enable_virtual_host_style();
    }
    if let (Some(key), Some(secret)) = (&storage.access_key_id, &storage.secret_access_key) {
        builder = builder.access_key_id(key).secret_access_key(secret);
        if let Some(token) = &storage.session_token {
            builder = builder.session_token(token);
        }
    }
    let op = opendal::Operator::new(builder)
        .map_err(|e| failed(e.to_string()))?
        .finish();
    let prefix = format!("{}/", prefix.trim_end_matches('/'));
    let entries = op
        .list_with(&prefix)
        .recursive(true)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(entries
        .into_iter()
        .filter(|e| e.metadata().mode().is_file())
        .map(|e| Object {
            location: format!("s3://{bucket}/{}", e.path().trim_start_matches('/')),
            modified: e.metadata().last_modified().map(SystemTime::from),
            size: e.metadata().content_length(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_per_file() {
        assert_eq!(
            canonical("file:///w/t/data/a.parquet"),
            "/w/t/data/a.parquet"
        );
        assert_eq!(canonical("/w/t/data/a.parquet"), "/w/t/data/a.parquet");
        assert_eq!(canonical("s3a://b/w/a.parquet"), "s3://b/w/a.parquet");
        assert_eq!(canonical("s3://b/w/a.parquet"), "s3://b/w/a.parquet");
    }

    #[tokio::test]
    async fn a_local_directory_is_listed_recursively() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("data/x=1")).expect("mkdir");
        std::fs::write(dir.path().join("data/x=1/a.parquet"), b"abc").expect("write");
        std::fs::write(dir.path().join("v1.metadata.json"), b"{}").expect("write");
        let location = format!("file://{}", dir.path().display());
        let mut listed = list(&location, &StorageConfig::default())
            .await
            .expect("listed");
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        assert_eq!(listed.len(), 2);
        assert!(listed[0].location.ends_with("data/x=1/a.parquet"));
        assert_eq!(listed[0].size, 3);
        assert!(listed[0].modified.is_some());
        assert!(
            list("gs://bucket/w", &StorageConfig::default())
                .await
                .is_err()
        );
    }
}

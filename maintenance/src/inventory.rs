//! A table's live files at one snapshot, read from its manifest list and manifests (manifests
//! are immutable, so each is read once per process and cached), with partitions labelled for
//! people (`day=2026-11-29`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iceberg::spec::{
    DataContentType, DataFile, Literal, Manifest, ManifestFile, PartitionSpec, PrimitiveLiteral,
    SnapshotRef, Struct, Transform,
};
use iceberg::table::Table;

use crate::error::Result;

/// Manifests cached before the cache is cleared.
const MANIFEST_CACHE_ENTRIES: usize = 20_000;

/// One live data or delete file.
#[derive(Debug, Clone)]
pub struct LiveFile {
    /// The file's entry (path, partition, metrics).
    pub data_file: DataFile,
    /// Its partition spec.
    pub spec_id: i32,
    /// Its partition, labelled.
    pub partition: String,
    /// The snapshot that added it.
    pub snapshot_id: i64,
    /// Its data sequence number.
    pub sequence_number: i64,
    /// Its file sequence number.
    pub file_sequence_number: Option<i64>,
}

impl LiveFile {
    /// Whether it holds rows (not deletes).
    pub fn is_data(&self) -> bool {
        self.data_file.content_type() == DataContentType::Data
    }

    /// Its path.
    pub fn path(&self) -> &str {
        self.data_file.file_path()
    }

    /// Its size.
    pub fn bytes(&self) -> u64 {
        self.data_file.file_size_in_bytes()
    }
}

/// The live files and manifests of one snapshot.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// The snapshot.
    pub snapshot: SnapshotRef,
    /// Its manifests.
    pub manifests: Vec<ManifestFile>,
    /// Its live files (data and deletes).
    pub files: Vec<LiveFile>,
}

/// Parsed manifests by path.
#[derive(Default)]
pub struct ManifestCache {
    manifests: Mutex<HashMap<String, Arc<Manifest>>>,
}

impl ManifestCache {
    /// The manifest `file` points at, read once.
    ///
    /// # Errors
    /// Storage and Avro errors.
    pub async fn load(&self, table: &Table, file: &ManifestFile) -> Result<Arc<Manifest>> {
        if let Some(m) = self.lock().get(&file.manifest_path) {
            return Ok(m.clone());
        }
        let manifest = Arc::new(file.load_manifest(table.file_io()).await?);
        let mut cache = self.lock();
        if cache.len() >= MANIFEST_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(file.manifest_path.clone(), manifest.clone());
        Ok(manifest)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Manifest>>> {
        self.manifests.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inventory {
    /// The live files of `snapshot`.
    ///
    /// # Errors
    /// Storage and Avro errors.
    pub async fn load(
        table: &Table,
        snapshot: &SnapshotRef,
        cache: &ManifestCache,
    ) -> Result<Self> {
        let list = table.manifest_list_reader(snapshot).load().await?;
        let manifests: Vec<ManifestFile> = list.entries().to_vec();
        let mut files = Vec::new();
        for m in &manifests {
            let manifest = cache.load(table, m).await?;
            let spec = table.metadata().partition_spec_by_id(m.partition_spec_id);
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let data_file = entry.data_file().clone();
                let partition = match &spec {
                    Some(spec) => partition_label(spec, data_file.partition()),
                    None => String::new(),
                };
                files.push(LiveFile {
                    spec_id: m.partition_spec_id,
                    partition,
                    snapshot_id: entry.snapshot_id().unwrap_or(m.added_snapshot_id),
                    sequence_number: entry.sequence_number().unwrap_or(m.sequence_number),
                    file_sequence_number: entry.file_sequence_number,
                    data_file,
                });
            }
        }
        Ok(Self {
            snapshot: snapshot.clone(),
            manifests,
            files,
        })
    }
}

/// `field=value/...` for a partition tuple (`""` for an unpartitioned table); time transforms
/// are shown as dates and hours.
pub fn partition_label(spec: &PartitionSpec, data: &Struct) -> String {
    spec.fields()
        .iter()
        .zip(data.iter())
        .map(|(field, value)| {
            let shown = match value {
                None => "null".to_string(),
                Some(v) => show_literal(field.transform, v),
            };
            format!("{}={shown}", field.name)
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn show_literal(transform: Transform, v: &Literal) -> String {
    let Literal::Primitive(p) = v else {
        return format!("{v:?}");
    };
    let epoch = chrono::DateTime::UNIX_EPOCH;
    match (transform, p) {
        (Transform::Day, PrimitiveLiteral::Int(d)) => (epoch + chrono::Duration::days(*d as i64))
            .format("%Y-%m-%d")
            .to_string(),
        (Transform::Hour, PrimitiveLiteral::Int(h)) => (epoch + chrono::Duration::hours(*h as i64))
            .format("%Y-%m-%d-%H")
            .to_string(),
        (Transform::Month, PrimitiveLiteral::Int(m)) => {
            format!("{:04}-{:02}", 1970 + m.div_euclid(12), m.rem_euclid(12) + 1)
        }
        (Transform::Year, PrimitiveLiteral::Int(y)) => format!("{}", 1970 + y),
        (_, PrimitiveLiteral::Boolean(b)) => b.to_string(),
        (_, PrimitiveLiteral::Int(i)) => i.to_string(),
        (_, PrimitiveLiteral::Long(i)) => i.to_string(),
        (_, PrimitiveLiteral::String(s)) => s.clone(),
        (_, other) => format!("{other:?}"),
    }
}

//! Producing a `replace` snapshot: the current files minus the ones an operation removes, plus
//! the ones it adds, with manifests rewritten only where they change (or merged, for a manifest
//! rewrite) — and validated against the table as it is at commit time, so a concurrent append
//! is kept and a concurrent delete of a rewritten file is a conflict, never a lost row.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestContentType, ManifestFile,
    ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot, SnapshotReference,
    SnapshotRetention, Summary,
};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};

use crate::error::{Error, Result};
use crate::inventory::{ManifestCache, partition_label};

/// What a replace commit changes.
#[derive(Debug, Default, Clone)]
pub struct Replace {
    /// Paths of live data or delete files to remove.
    pub remove: HashSet<String>,
    /// New data files (in the table's default partition spec).
    pub add: Vec<DataFile>,
    /// Data sequence number for the added files: the sequence number of the snapshot the
    /// rows were read at, so delete files committed after that still apply to them.
    pub add_sequence: Option<i64>,
    /// Merge data manifests smaller than this many bytes (a manifest rewrite).
    pub merge_manifests_below: Option<u64>,
    /// Fail if delete files that may delete rows of the removed files appeared in these
    /// `(spec id, partition)` since the read, other than `known_deletes` (see
    /// `may_delete_from`).
    pub guard_partitions: HashSet<(i32, String)>,
    /// The delete files of the guarded partitions at the read.
    pub known_deletes: HashSet<String>,
    /// The branch to commit to (`None`: main); a layout experiment's.
    pub branch: Option<String>,
}

/// The table's main branch.
pub const MAIN: &str = "main";

/// A produced snapshot, ready to commit.
pub struct Produced {
    /// The catalog updates.
    pub updates: Vec<TableUpdate>,
    /// What must still hold at commit.
    pub requirements: Vec<TableRequirement>,
    /// The new snapshot's id.
    pub snapshot_id: i64,
    /// Manifest and manifest-list files written (to delete if the commit fails).
    pub written: Vec<String>,
    /// Data manifests in the new snapshot.
    pub data_manifests: usize,
}

/// Whether a delete file that appeared since the read may delete rows of the files `replace`
/// removes. An equality delete committed later has a higher sequence number than the files
/// added at the read's (`add_sequence`), so it still applies to them: not a conflict — this is
/// what lets a partition an upsert stream keeps writing be compacted. A position delete is one
/// unless it names (or its path bounds exclude) every removed file.
fn may_delete_from(f: &DataFile, replace: &Replace) -> bool {
    /// The `file_path` column of a position-delete file.
    const FILE_PATH_FIELD: i32 = 2147483546;
    match f.content_type() {
        DataContentType::Data => false,
        DataContentType::EqualityDeletes => replace.add_sequence.is_none(),
        DataContentType::PositionDeletes => {
            if let Some(path) = f.referenced_data_file() {
                return replace.remove.contains(&path);
            }
            let bound = |b: &HashMap<i32, iceberg::spec::Datum>| match b
                .get(&FILE_PATH_FIELD)
                .map(|d| d.literal())
            {
                Some(iceberg::spec::PrimitiveLiteral::String(s)) => Some(s.clone()),
                _ => None,
            };
            match (bound(f.lower_bounds()), bound(f.upper_bounds())) {
                (Some(lo), Some(hi)) => replace
                    .remove
                    .iter()
                    .any(|p| lo.as_str() <= p.as_str() && p.as_str() <= hi.as_str()),
                _ => true,
            }
        }
    }
}

/// A fresh snapshot id unused in `table`.
pub fn new_snapshot_id(table: &Table) -> i64 {
    loop {
        let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((hi ^ lo) & (i64::MAX as u64)) as i64;
        if id != 0 && table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

struct Totals {
    data_files: u64,
    delete_files: u64,
    records: u64,
    bytes: u64,
    position_deletes: u64,
    equality_deletes: u64,
}

/// Builds the snapshot `replace` describes on top of `table`'s current snapshot.
///
/// # Errors
/// [`Error::Conflict`] when a file to remove is no longer live or a guarded partition gained
/// delete files; [`Error::Unsupported`] for format versions other than 2; storage errors.
pub async fn produce(table: &Table, replace: &Replace, cache: &ManifestCache) -> Result<Produced> {
    let metadata = table.metadata();
    if metadata.format_version() != FormatVersion::V2 {
        return Err(Error::Unsupported(format!(
            "table format version {} is not maintained (version 2 only)",
            metadata.format_version()
        )));
    }
    let branch = replace.branch.as_deref().unwrap_or(MAIN);
    let parent = metadata
        .snapshot_for_ref(branch)
        .ok_or_else(|| Error::Conflict(format!("the table has no snapshot on {branch}")))?
        .clone();
    let snapshot_id = new_snapshot_id(table);
    let sequence = metadata.last_sequence_number() + 1;
    let schema = metadata.current_schema().clone();
    let location = metadata.location().trim_end_matches('/').to_string();
    let file_io = table.file_io();
    let commit_uuid = uuid::Uuid::new_v4();
    let mut written = Vec::new();
    let mut n_manifest = 0;
    let mut next_manifest_path = || {
        n_manifest += 1;
        format!("{location}/metadata/{commit_uuid}-m{n_manifest}.avro")
    };

    let list = table.manifest_list_reader(&parent).load().await?;
    let mut out: Vec<ManifestFile> = Vec::new();
    let mut to_merge: BTreeMap<i32, Vec<ManifestFile>> = BTreeMap::new();
    let mut found = HashSet::new();
    let mut removed_data = (0u64, 0u64, 0u64); // files, records, bytes
    let mut removed_deletes = 0u64;
    let mut totals = Totals {
        data_files: 0,
        delete_files: 0,
        records: 0,
        bytes: 0,
        position_deletes: 0,
        equality_deletes: 0,
    };
    for m in list.entries() {
        let manifest = cache.load(table, m).await?;
        let spec = metadata.partition_spec_by_id(m.partition_spec_id);
        let live: Vec<_> = manifest.entries().iter().filter(|e| e.is_alive()).collect();
        let mut touches = false;
        for e in &live {
            let f = e.data_file();
            if replace.remove.contains(f.file_path()) {
                touches = true;
                continue;
            }
            count(&mut totals, f);
            if f.content_type() != DataContentType::Data
                && !replace.guard_partitions.is_empty()
                && !replace.known_deletes.contains(f.file_path())
                && may_delete_from(f, replace)
                && let Some(spec) = spec
            {
                let label = partition_label(spec, f.partition());
                if replace
                    .guard_partitions
                    .contains(&(m.partition_spec_id, label.clone()))
                {
                    return Err(Error::Conflict(format!(
                        "delete file {} was added to partition {label} since the rewrite started",
                        f.file_path()
                    )));
                }
            }
        }
        if touches {
            let spec = spec
                .ok_or_else(|| Error::Invariant(format!("unknown spec {}", m.partition_spec_id)))?;
            let path = next_manifest_path();
            let builder = ManifestWriterBuilder::new(
                file_io.new_output(&path)?,
                Some(snapshot_id),
                manifest.metadata().schema().clone(),
                spec.as_ref().clone(),
            );
            let mut writer = match m.content {
                ManifestContentType::Data => builder.build_v2_data(),
                ManifestContentType::Deletes => builder.build_v2_deletes(),
            };
            for e in live {
                let f = e.data_file().clone();
                let seq = e.sequence_number().unwrap_or(m.sequence_number);
                let file_seq = e.file_sequence_number.or(Some(m.sequence_number));
                if replace.remove.contains(f.file_path()) {
                    found.insert(f.file_path().to_string());
                    if f.content_type() == DataContentType::Data {
                        removed_data.0 += 1;
                        removed_data.1 += f.record_count();
                        removed_data.2 += f.file_size_in_bytes();
                    } else {
                        removed_deletes += 1;
                    }
                    writer.add_delete_file(f, seq, file_seq)?;
                } else {
                    let added_by = e.snapshot_id().unwrap_or(m.added_snapshot_id);
                    writer.add_existing_file(f, added_by, seq, file_seq)?;
                }
            }
            written.push(path);
            out.push(writer.write_manifest_file().await?);
        } else if replace.merge_manifests_below.is_some_and(|below| {
            m.content == ManifestContentType::Data && (m.manifest_length as u64) < below
        }) {
            to_merge
                .entry(m.partition_spec_id)
                .or_default()
                .push(m.clone());
        } else {
            out.push(m.clone());
        }
    }
    if found.len() != replace.remove.len() {
        return Err(Error::Conflict(format!(
            "{} of the files to replace are no longer live (another writer rewrote or deleted them)",
            replace.remove.len() - found.len()
        )));
    }
    // Manifest rewrite: small data manifests of one spec merged into ones near the target.
    for (spec_id, group) in to_merge {
        if group.len() < 2 {
            out.extend(group);
            continue;
        }
        let target = replace.merge_manifests_below.unwrap_or(u64::MAX);
        let spec = metadata
            .partition_spec_by_id(spec_id)
            .ok_or_else(|| Error::Invariant(format!("unknown spec {spec_id}")))?;
        let mut writer = None;
        let mut bytes = 0u64;
        for m in group {
            let manifest = cache.load(table, &m).await?;
            let entries: Vec<_> = manifest.entries().iter().filter(|e| e.is_alive()).collect();
            let per_entry = m.manifest_length as u64 / (entries.len() as u64).max(1);
            for e in entries {
                if writer.is_none() {
                    let path = next_manifest_path();
                    written.push(path.clone());
                    writer = Some(
                        ManifestWriterBuilder::new(
                            file_io.new_output(&path)?,
                            Some(snapshot_id),
                            schema.clone(),
                            spec.as_ref().clone(),
                        )
                        .build_v2_data(),
                    );
                    bytes = 0;
                }
                if let Some(w) = writer.as_mut() {
                    w.add_existing_file(
                        e.data_file().clone(),
                        e.snapshot_id().unwrap_or(m.added_snapshot_id),
                        e.sequence_number().unwrap_or(m.sequence_number),
                        e.file_sequence_number.or(Some(m.sequence_number)),
                    )?;
                }
                bytes += per_entry;
                if bytes >= target
                    && let Some(w) = writer.take()
                {
                    out.push(w.write_manifest_file().await?);
                }
            }
        }
        if let Some(w) = writer.take() {
            out.push(w.write_manifest_file().await?);
        }
    }
    let mut added = (0u64, 0u64, 0u64);
    if !replace.add.is_empty() {
        let path = next_manifest_path();
        written.push(path.clone());
        let mut writer = ManifestWriterBuilder::new(
            file_io.new_output(&path)?,
            Some(snapshot_id),
            schema.clone(),
            metadata.default_partition_spec().as_ref().clone(),
        )
        .build_v2_data();
        for f in &replace.add {
            added.0 += 1;
            added.1 += f.record_count();
            added.2 += f.file_size_in_bytes();
            count(&mut totals, f);
            writer.add_file(f.clone(), replace.add_sequence.unwrap_or(-1))?;
        }
        // Added files first: readers plan the newest manifests first.
        out.insert(0, writer.write_manifest_file().await?);
    }
    let data_manifests = out
        .iter()
        .filter(|m| m.content == ManifestContentType::Data)
        .count();

    let list_path = format!("{location}/metadata/snap-{snapshot_id}-1-{commit_uuid}.avro");
    written.push(list_path.clone());
    let mut list_writer = ManifestListWriter::v2(
        file_io.new_output(&list_path)?.writer().await?,
        snapshot_id,
        Some(parent.snapshot_id()),
        sequence,
    );
    list_writer.add_manifests(out.into_iter())?;
    list_writer.close().await?;

    let mut props: HashMap<String, String> = HashMap::new();
    let mut put = |k: &str, v: u64| {
        props.insert(k.to_string(), v.to_string());
    };
    put("added-data-files", added.0);
    put("added-records", added.1);
    put("added-files-size", added.2);
    put("deleted-data-files", removed_data.0);
    put("deleted-records", removed_data.1);
    put("removed-files-size", removed_data.2);
    put("removed-delete-files", removed_deletes);
    put("total-data-files", totals.data_files);
    put("total-delete-files", totals.delete_files);
    put("total-records", totals.records);
    put("total-files-size", totals.bytes);
    put("total-position-deletes", totals.position_deletes);
    put("total-equality-deletes", totals.equality_deletes);
    props.insert(
        "lakegate.operation".into(),
        if replace.add.is_empty() && replace.remove.is_empty() {
            "rewrite-manifests".into()
        } else {
            "rewrite-data-files".into()
        },
    );
    let now = chrono::Utc::now().timestamp_millis();
    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(parent.snapshot_id()))
        .with_sequence_number(sequence)
        .with_timestamp_ms(now.max(metadata.last_updated_ms() + 1))
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation: Operation::Replace,
            additional_properties: props,
        })
        .with_schema_id(metadata.current_schema_id())
        .build();
    Ok(Produced {
        updates: vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: branch.into(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ],
        requirements: vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: branch.into(),
                snapshot_id: Some(parent.snapshot_id()),
            },
        ],
        snapshot_id,
        written,
        data_manifests,
    })
}

fn count(t: &mut Totals, f: &DataFile) {
    t.bytes += f.file_size_in_bytes();
    match f.content_type() {
        DataContentType::Data => {
            t.data_files += 1;
            t.records += f.record_count();
        }
        DataContentType::PositionDeletes => {
            t.delete_files += 1;
            t.position_deletes += f.record_count();
        }
        DataContentType::EqualityDeletes => {
            t.delete_files += 1;
            t.equality_deletes += f.record_count();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataFileBuilder, DataFileFormat, Datum};

    fn delete_file(content: DataContentType) -> DataFileBuilder {
        let mut b = DataFileBuilder::default();
        b.content(content)
            .file_path("/w/t/region=r0/delete.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .record_count(1)
            .file_size_in_bytes(10)
            .partition_spec_id(0);
        b
    }

    fn replace(sequence: Option<i64>) -> Replace {
        Replace {
            remove: ["/w/t/region=r0/a.parquet".to_string()].into(),
            add_sequence: sequence,
            ..Replace::default()
        }
    }

    #[test]
    fn a_later_equality_delete_is_no_conflict_when_the_rewrite_keeps_the_read_sequence() {
        let mut b = delete_file(DataContentType::EqualityDeletes);
        let eq = b.equality_ids(Some(vec![1])).build().expect("file");
        assert!(!may_delete_from(&eq, &replace(Some(7))));
        assert!(may_delete_from(&eq, &replace(None)));
    }

    #[test]
    fn a_later_position_delete_conflicts_only_when_it_may_name_a_removed_file() {
        let unknown = delete_file(DataContentType::PositionDeletes)
            .build()
            .expect("file");
        assert!(may_delete_from(&unknown, &replace(Some(7))));
        let named = |path: &str| {
            delete_file(DataContentType::PositionDeletes)
                .referenced_data_file(Some(path.into()))
                .build()
                .expect("file")
        };
        assert!(may_delete_from(
            &named("/w/t/region=r0/a.parquet"),
            &replace(Some(7))
        ));
        assert!(!may_delete_from(
            &named("/w/t/region=r0/new.parquet"),
            &replace(Some(7))
        ));
        let bounded = |lo: &str, hi: &str| {
            delete_file(DataContentType::PositionDeletes)
                .lower_bounds([(2147483546, Datum::string(lo))].into())
                .upper_bounds([(2147483546, Datum::string(hi))].into())
                .build()
                .expect("file")
        };
        let new = "/w/t/region=r0/n.parquet";
        assert!(!may_delete_from(&bounded(new, new), &replace(Some(7))));
        assert!(may_delete_from(
            &bounded("/w/t/region=r0/0", "/w/t/region=r0/z"),
            &replace(Some(7))
        ));
    }
}

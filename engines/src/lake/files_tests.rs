use std::collections::HashMap;
use std::sync::Arc;

use iceberg::expr::{Bind, Predicate, Reference};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, ManifestEntry,
    ManifestEntryRef, ManifestStatus, NestedField, PrimitiveType, Schema, Struct, Type,
};

use super::{SnapshotFiles, might_match};

fn schema() -> Arc<Schema> {
    Arc::new(
        Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "status", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(3, "score", Type::Primitive(PrimitiveType::Double)).into(),
                NestedField::optional(4, "key", Type::Primitive(PrimitiveType::Uuid)).into(),
            ])
            .build()
            .expect("schema"),
    )
}

/// A file whose `id` spans `lo..=hi` (`None`: no bounds), with `nulls` of `rows` ids NULL.
fn file(bounds: Option<(i64, i64)>, nulls: u64, rows: u64) -> DataFile {
    file_at("file:///t/data.parquet", bounds, nulls, rows)
}

/// [`file`] at `path`.
fn file_at(path: &str, bounds: Option<(i64, i64)>, nulls: u64, rows: u64) -> DataFile {
    let (mut lower, mut upper) = (HashMap::new(), HashMap::new());
    if let Some((lo, hi)) = bounds {
        lower.insert(1, Datum::long(lo));
        upper.insert(1, Datum::long(hi));
        lower.insert(3, Datum::double(f64::from(lo as i32)));
        upper.insert(3, Datum::double(f64::from(hi as i32)));
        lower.insert(4, uuid("00000000-0000-0000-0000-000000000001"));
        upper.insert(4, uuid("00000000-0000-0000-0000-000000000002"));
    }
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(path.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .partition_spec_id(0)
        .record_count(rows)
        .file_size_in_bytes(100)
        .value_counts(HashMap::from([(1, rows)]))
        .null_value_counts(HashMap::from([(1, nulls)]))
        .lower_bounds(lower)
        .upper_bounds(upper)
        .build()
        .expect("data file")
}

/// Whether `f` may match, asked of the file itself and of a snapshot holding it (whose column
/// stats are kept from its first filter: asked twice); both must agree.
fn matches(predicate: Predicate, f: &DataFile) -> bool {
    let bound = predicate.bind(schema(), true).expect("binds");
    let fresh = might_match(&bound, f);
    let entry = ManifestEntry::builder()
        .status(ManifestStatus::Added)
        .snapshot_id(1)
        .data_file(f.clone())
        .build();
    let entries: Arc<[ManifestEntryRef]> = vec![Arc::new(entry)].into();
    let snapshot = SnapshotFiles {
        manifests: vec![entries].into(),
        columns: Arc::default(),
    };
    for _ in 0..2 {
        let tasks = snapshot.tasks(&schema(), &[1], Some(&bound));
        assert_eq!(tasks.len(), usize::from(fresh), "{bound}");
    }
    fresh
}

fn uuid(text: &str) -> Datum {
    Datum::uuid_from_str(text).expect("a UUID")
}

fn id() -> Reference {
    Reference::new("id")
}

#[test]
fn a_file_is_dropped_only_when_its_bounds_prove_no_row_matches() {
    let f = file(Some((100, 200)), 0, 10);
    // Equality, at and beyond both ends.
    assert!(matches(id().equal_to(Datum::long(100)), &f));
    assert!(matches(id().equal_to(Datum::long(200)), &f));
    assert!(matches(id().equal_to(Datum::long(150)), &f));
    assert!(!matches(id().equal_to(Datum::long(99)), &f));
    assert!(!matches(id().equal_to(Datum::long(201)), &f));
    // Ranges: strict and not, at the bounds.
    assert!(!matches(id().less_than(Datum::long(100)), &f));
    assert!(matches(id().less_than_or_equal_to(Datum::long(100)), &f));
    assert!(!matches(id().greater_than(Datum::long(200)), &f));
    assert!(matches(id().greater_than_or_equal_to(Datum::long(200)), &f));
    assert!(matches(id().greater_than(Datum::long(199)), &f));
    // IN matches when any value may.
    assert!(matches(id().is_in([Datum::long(1), Datum::long(150)]), &f));
    assert!(!matches(id().is_in([Datum::long(1), Datum::long(300)]), &f));
    // AND needs both, OR either.
    let outside = id().equal_to(Datum::long(5));
    let inside = id().equal_to(Datum::long(150));
    assert!(!matches(outside.clone().and(inside.clone()), &f));
    assert!(matches(outside.clone().or(inside), &f));
}

#[test]
fn what_bounds_cannot_decide_is_kept() {
    let f = file(Some((100, 200)), 0, 10);
    // No bounds at all.
    assert!(matches(id().equal_to(Datum::long(5)), &file(None, 0, 10)));
    // Negations and inequality.
    assert!(matches(id().equal_to(Datum::long(5)).negate(), &f));
    assert!(matches(id().not_equal_to(Datum::long(150)), &f));
    assert!(matches(id().is_not_in([Datum::long(150)]), &f));
    // Floats: NaN makes their bounds untrustworthy.
    assert!(matches(
        Reference::new("score").equal_to(Datum::double(1.0)),
        &f
    ));
    // UUIDs: writers have ordered them signed and unsigned.
    assert!(matches(
        Reference::new("key").equal_to(uuid("ffffffff-0000-0000-0000-000000000000")),
        &f
    ));
    // A column the file has no bounds for.
    assert!(matches(
        Reference::new("status").equal_to(Datum::string("paid")),
        &f
    ));
}

#[test]
fn nulls_decide_null_tests_and_comparisons() {
    let all_null = file(None, 10, 10);
    let no_null = file(Some((1, 2)), 0, 10);
    assert!(!matches(id().equal_to(Datum::long(1)), &all_null));
    assert!(!matches(id().is_not_null(), &all_null));
    assert!(matches(id().is_null(), &all_null));
    assert!(!matches(id().is_null(), &no_null));
    assert!(matches(id().is_not_null(), &no_null));
    assert!(matches(id().is_null(), &file(Some((1, 2)), 3, 10)));
}

#[test]
fn a_snapshot_of_many_manifests_keeps_each_files_stats_in_place() {
    let ranges = [
        (0, 9),
        (100, 199),
        (10, 99),
        (900, 999),
        (150, 160),
        (500, 600),
    ];
    let files: Vec<DataFile> = ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            file_at(
                &format!("file:///t/{i}.parquet"),
                Some(*r),
                u64::from(i == 5) * 10,
                10,
            )
        })
        .collect();
    let entry = |f: &DataFile| -> ManifestEntryRef {
        Arc::new(
            ManifestEntry::builder()
                .status(ManifestStatus::Added)
                .snapshot_id(1)
                .data_file(f.clone())
                .build(),
        )
    };
    // Three manifests of two files each.
    let manifests: Vec<Arc<[ManifestEntryRef]>> = files
        .chunks(2)
        .map(|c| c.iter().map(entry).collect())
        .collect();
    let snapshot = SnapshotFiles {
        manifests: manifests.into(),
        columns: Arc::default(),
    };
    for predicate in [
        id().is_in([Datum::long(5), Datum::long(155)]),
        id().greater_than(Datum::long(550))
            .or(id().equal_to(Datum::long(50))),
        id().less_than(Datum::long(120))
            .and(id().greater_than_or_equal_to(Datum::long(9))),
        id().equal_to(Datum::long(550)),
    ] {
        let bound = predicate.bind(schema(), true).expect("binds");
        let want: Vec<String> = files
            .iter()
            .filter(|f| might_match(&bound, f))
            .map(|f| f.file_path().to_string())
            .collect();
        for _ in 0..2 {
            let got: Vec<String> = snapshot
                .tasks(&schema(), &[1], Some(&bound))
                .into_iter()
                .map(|t| t.data_file_path)
                .collect();
            assert_eq!(got, want, "{bound}");
        }
        assert!(want.len() < files.len(), "{bound} prunes something");
    }
}

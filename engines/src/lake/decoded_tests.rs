use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use futures::TryStreamExt;
use iceberg::arrow::{ArrowReader, ArrowReaderBuilder};
use iceberg::expr::{Bind, Reference};
use iceberg::io::FileIO;
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFileFormat, Datum, NestedField, PrimitiveType, Schema, Type};
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use uuid::Uuid;

use super::{DecodedFiles, SMALL_FILE};

fn schema() -> Arc<Schema> {
    Arc::new(
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "label", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .expect("schema"),
    )
}

/// A Parquet file of `ids` (labels `l<id>`) as an Iceberg writer leaves it (field ids set).
fn write(dir: &std::path::Path, name: &str, ids: std::ops::Range<i64>) -> (String, u64) {
    let id = |n: &str| HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_string(), n.to_string())]);
    let arrow = Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false).with_metadata(id("1")),
        Field::new("label", DataType::Utf8, true).with_metadata(id("2")),
    ]));
    let labels: StringArray = ids.clone().map(|i| Some(format!("l{i}"))).collect();
    let batch = RecordBatch::try_new(
        arrow.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(labels),
        ],
    )
    .expect("batch");
    let path = dir.join(name);
    let file = std::fs::File::create(&path).expect("create");
    let mut writer = ArrowWriter::try_new(file, arrow, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    let size = std::fs::metadata(&path).expect("written").len();
    (path.to_string_lossy().into_owned(), size)
}

fn task((path, size): &(String, u64), fields: &[i32], id_is: Option<i64>) -> FileScanTask {
    let schema = schema();
    let predicate = id_is.map(|v| {
        Reference::new("id")
            .equal_to(Datum::long(v))
            .bind(schema.clone(), true)
            .expect("binds")
    });
    FileScanTask {
        file_size_in_bytes: *size,
        start: 0,
        length: *size,
        record_count: None,
        data_file_path: path.clone(),
        data_file_format: DataFileFormat::Parquet,
        schema,
        project_field_ids: fields.to_vec(),
        predicate,
        deletes: vec![],
        partition: None,
        partition_spec: None,
        name_mapping: None,
        case_sensitive: true,
    }
}

fn reader() -> ArrowReader {
    ArrowReaderBuilder::new(FileIO::new_with_fs(), iceberg::Runtime::current()).build()
}

/// The ids of every row read, sorted (batches come in no fixed order).
async fn ids(decoded: &Arc<DecodedFiles>, table: Uuid, tasks: &[FileScanTask]) -> Vec<i64> {
    let batches: Vec<RecordBatch> = decoded
        .read(&reader(), table, tasks)
        .expect("reads")
        .try_collect()
        .await
        .expect("rows");
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let column = b.column(0).as_any().downcast_ref::<Int64Array>();
            column.expect("id column").values().to_vec()
        })
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn a_small_file_is_decoded_once_and_then_answered_from_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write(dir.path(), "a.parquet", 0..10);
    let b = write(dir.path(), "b.parquet", 10..25);
    let decoded = DecodedFiles::new(1 << 20).expect("on");
    let table = Uuid::new_v4();
    // The statement's predicate does not narrow what is kept: every row of the file comes back
    // (DataFusion filters what the scan gives), now and from memory later.
    let tasks = [task(&a, &[1, 2], Some(3)), task(&b, &[1, 2], Some(3))];
    let all: Vec<i64> = (0..25).collect();
    assert_eq!(ids(&decoded, table, &tasks).await, all);
    let s = decoded.stats();
    assert_eq!((s.hits, s.misses), (0, 2));
    assert!(s.bytes > 0);
    assert_eq!(ids(&decoded, table, &tasks).await, all);
    assert_eq!((decoded.stats().hits, decoded.stats().misses), (2, 2));
    // What the kept rows hold is the reader's answer: the labels too.
    let batches: Vec<RecordBatch> = decoded
        .read(&reader(), table, &tasks[..1])
        .expect("reads")
        .try_collect()
        .await
        .expect("rows");
    let labels = batches[0].column(1).as_any().downcast_ref::<StringArray>();
    assert_eq!(labels.expect("labels").value(4), "l4");
}

#[tokio::test]
async fn another_projection_or_table_is_another_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write(dir.path(), "a.parquet", 0..10);
    let decoded = DecodedFiles::new(1 << 20).expect("on");
    let table = Uuid::new_v4();
    ids(&decoded, table, &[task(&a, &[1, 2], None)]).await;
    // Only `id`: its batches have one column, not the kept two.
    let batches: Vec<RecordBatch> = decoded
        .read(&reader(), table, &[task(&a, &[1], None)])
        .expect("reads")
        .try_collect()
        .await
        .expect("rows");
    assert_eq!(batches[0].num_columns(), 1);
    // The same path in another table (another UUID) is read for that table.
    ids(&decoded, Uuid::new_v4(), &[task(&a, &[1, 2], None)]).await;
    assert_eq!((decoded.stats().hits, decoded.stats().misses), (0, 3));
}

#[test]
fn large_files_and_files_with_deletes_are_not_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write(dir.path(), "a.parquet", 0..10);
    assert!(DecodedFiles::takes(&task(&a, &[1, 2], None)));
    let mut large = task(&a, &[1, 2], None);
    large.file_size_in_bytes = SMALL_FILE + 1;
    assert!(!DecodedFiles::takes(&large));
    let mut deleted = task(&a, &[1, 2], None);
    deleted.deletes = vec![iceberg::scan::FileScanTaskDeleteFile {
        file_path: dir
            .path()
            .join("deletes.parquet")
            .to_string_lossy()
            .into_owned(),
        file_size_in_bytes: 0,
        file_type: iceberg::spec::DataContentType::PositionDeletes,
        partition_spec_id: 0,
        equality_ids: None,
    }];
    assert!(!DecodedFiles::takes(&deleted));
    assert!(DecodedFiles::new(0).is_none(), "0 bytes: off");
}

//! `lakegate.acceleration`: each table the `accelerated` engine holds (or tries to), with the
//! snapshot held, its size, its indexes and how its copies were built.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use lakegate_engines::accel::{Accelerator, Status};

/// One row per accelerated table (none without `[acceleration]`).
pub fn batch(accelerator: Option<&Accelerator>) -> RecordBatch {
    let tables = accelerator.map(Accelerator::tables).unwrap_or_default();
    let schema = Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("snapshot_id", DataType::Int64, true),
        Field::new("rows", DataType::Int64, false),
        Field::new("bytes", DataType::Int64, false),
        Field::new("files", DataType::Int64, false),
        Field::new("indexed_columns", DataType::Utf8, false),
        Field::new("full_loads", DataType::Int64, false),
        Field::new("incremental_loads", DataType::Int64, false),
        Field::new("last_load_ms", DataType::Float64, false),
    ]));
    let t = || tables.iter();
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(t().map(|t| t.table.as_str()))),
        Arc::new(StringArray::from_iter_values(
            t().map(|t| status(&t.status)),
        )),
        Arc::new(Int64Array::from_iter(t().map(|t| t.snapshot_id))),
        Arc::new(Int64Array::from_iter_values(t().map(|t| int(t.rows)))),
        Arc::new(Int64Array::from_iter_values(t().map(|t| int(t.bytes)))),
        Arc::new(Int64Array::from_iter_values(t().map(|t| int(t.files)))),
        Arc::new(StringArray::from_iter_values(
            t().map(|t| t.indexed.join(", ")),
        )),
        Arc::new(Int64Array::from_iter_values(t().map(|t| int(t.full_loads)))),
        Arc::new(Int64Array::from_iter_values(
            t().map(|t| int(t.incremental_loads)),
        )),
        Arc::new(Float64Array::from_iter_values(t().map(|t| t.last_load_ms))),
    ];
    RecordBatch::try_new(schema.clone(), columns).unwrap_or_else(|_| RecordBatch::new_empty(schema))
}

/// The status in words.
fn status(s: &Status) -> String {
    match s {
        Status::Loading => "loading".into(),
        Status::Held => "held".into(),
        Status::Empty => "empty (no snapshot)".into(),
        Status::TooBig { needs } => format!(
            "not held: needs {}, beyond max_bytes",
            lakegate_engines::units::human_bytes(*needs)
        ),
        Status::Failed(e) => format!("not held: {e}"),
    }
}

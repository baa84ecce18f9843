//! `lakegate.queries`: the query history as a table, oldest first.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::observe::history::QueryRecord;

/// The table's columns.
fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("query_id", DataType::UInt64, false),
        Field::new(
            "started",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
        Field::new("user_name", DataType::Utf8, false),
        Field::new("query", DataType::Utf8, false),
        Field::new("snapshots", DataType::Utf8, false),
        Field::new("cache", DataType::Utf8, false),
        Field::new("engine", DataType::Utf8, false),
        Field::new("shape", DataType::Utf8, false),
        Field::new("routing_group", DataType::Utf8, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("duration_ms", DataType::Float64, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("route", DataType::Utf8, false),
        Field::new("frontend", DataType::Utf8, false),
        Field::new("queued_ms", DataType::Float64, false),
    ]))
}

/// `records` as `lakegate.queries`.
pub fn batch(records: &[QueryRecord]) -> RecordBatch {
    let r = || records.iter();
    let text = |v: Vec<&str>| -> ArrayRef { Arc::new(StringArray::from(v)) };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(r().map(|e| e.id))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(r().map(|e| e.started_us))
                .with_timezone("+00:00"),
        ),
        text(r().map(|e| e.user.as_str()).collect()),
        text(r().map(|e| e.sql.as_str()).collect()),
        text(r().map(|e| e.snapshots.as_str()).collect()),
        text(r().map(|e| e.cache.name()).collect()),
        text(r().map(|e| e.engine.as_str()).collect()),
        text(r().map(|e| e.shape.map_or("", |s| s.name())).collect()),
        text(r().map(|e| e.group.as_str()).collect()),
        Arc::new(Int64Array::from_iter_values(r().map(|e| e.rows as i64))),
        Arc::new(Float64Array::from_iter_values(r().map(|e| e.millis))),
        Arc::new(StringArray::from_iter(r().map(|e| e.error.as_deref()))),
        text(r().map(|e| e.route.map_or("", |x| x.name())).collect()),
        text(r().map(|e| e.frontend.name()).collect()),
        Arc::new(Float64Array::from_iter_values(r().map(|e| e.queued_ms))),
    ];
    let schema = schema();
    RecordBatch::try_new(schema.clone(), columns).unwrap_or_else(|_| RecordBatch::new_empty(schema))
}

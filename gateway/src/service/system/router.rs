//! `lakegate.routing` (what the router observed per engine, shape and size, with each engine's
//! breaker) and `lakegate.engines` (each engine's health, checked now).

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use crate::routing::Router;
use crate::routing::stats::bucket_name;
use crate::service::engines::EngineHealth;

/// One row per (engine, shape, size bucket) observed.
pub fn routing_batch(router: &Router) -> RecordBatch {
    let observed = router.stats.snapshot();
    let schema = Arc::new(Schema::new(vec![
        Field::new("engine", DataType::Utf8, false),
        Field::new("shape", DataType::Utf8, false),
        Field::new("size_bucket", DataType::Utf8, false),
        Field::new("queries", DataType::Int64, false),
        Field::new("ewma_ms", DataType::Float64, false),
        Field::new("p50_ms", DataType::Float64, true),
        Field::new("p95_ms", DataType::Float64, true),
        Field::new("success_rate", DataType::Float64, false),
        Field::new("breaker", DataType::Utf8, false),
    ]));
    let o = || observed.iter();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(o().map(|o| o.0.0.as_str()))),
        Arc::new(StringArray::from_iter_values(o().map(|o| o.0.1.name()))),
        Arc::new(StringArray::from_iter_values(
            o().map(|o| bucket_name(o.0.2)),
        )),
        Arc::new(Int64Array::from_iter_values(o().map(|o| o.1.count as i64))),
        Arc::new(Float64Array::from_iter_values(o().map(|o| o.1.ewma_ms))),
        Arc::new(Float64Array::from_iter(o().map(|o| o.1.quantile(0.5)))),
        Arc::new(Float64Array::from_iter(o().map(|o| o.1.quantile(0.95)))),
        Arc::new(Float64Array::from_iter_values(o().map(|o| o.1.success))),
        Arc::new(StringArray::from_iter_values(
            o().map(|o| router.stats.breaker(&o.0.0).state().name()),
        )),
    ];
    RecordBatch::try_new(schema.clone(), columns).unwrap_or_else(|_| RecordBatch::new_empty(schema))
}

/// One row per engine: whether it answered its health check, and which is the default.
pub fn engines_batch(health: &[EngineHealth], default: &str) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("engine", DataType::Utf8, false),
        Field::new("healthy", DataType::Boolean, false),
        Field::new("is_default", DataType::Boolean, false),
        Field::new("check_ms", DataType::Float64, false),
        Field::new("error", DataType::Utf8, true),
    ]));
    let h = || health.iter();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            h().map(|r| r.engine.as_str()),
        )),
        Arc::new(BooleanArray::from_iter(
            h().map(|r| Some(r.error.is_none())),
        )),
        Arc::new(BooleanArray::from_iter(
            h().map(|r| Some(r.engine == default)),
        )),
        Arc::new(Float64Array::from_iter_values(h().map(|r| r.check_ms))),
        Arc::new(StringArray::from_iter(h().map(|r| r.error.as_deref()))),
    ];
    RecordBatch::try_new(schema.clone(), columns).unwrap_or_else(|_| RecordBatch::new_empty(schema))
}

//! `lakegate.cache_stats`: the result cache's counters and sizes, and the catalog's version
//! token lookups, one row per counter.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use crate::service::cache::ResultCache;

/// One row per counter: (name, value).
pub async fn stats_batch(
    cache: &ResultCache,
    tokens: &lakegate_engines::lake::TokenStats,
) -> RecordBatch {
    let mut rows = cache.stats_values().await;
    rows.extend([
        ("token_lookups", tokens.lookups.load(Ordering::Relaxed)),
        (
            "token_lookup_micros_total",
            tokens.lookup_micros.load(Ordering::Relaxed),
        ),
        (
            "token_reused_within_staleness",
            tokens.reused.load(Ordering::Relaxed),
        ),
    ]);
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Int64, false),
    ]));
    let names: StringArray = rows.iter().map(|(n, _)| Some(*n)).collect();
    let values: Int64Array = rows
        .iter()
        .map(|(_, v)| Some(i64::try_from(*v).unwrap_or(i64::MAX)))
        .collect();
    RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(values)])
        .unwrap_or_else(|_| RecordBatch::new_empty(schema))
}

//! `lakegate.cache_stats`: the result cache's counters and sizes (with the kept plans' and the
//! text shapes'), the catalog's version token lookups, the object cache's and the decoded small
//! files', one row per counter.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

/// One row per counter: (name, value); `rows` are the service's own
/// ([`crate::service::GatewayService::cache_stats`]).
pub fn stats_batch(
    mut rows: Vec<(&'static str, u64)>,
    tokens: &lakegate_engines::lake::TokenStats,
    objects: Option<lakegate_engines::lake::ObjectCacheStats>,
    decoded: Option<lakegate_engines::lake::decoded::DecodedStats>,
) -> RecordBatch {
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
    if let Some(objects) = objects {
        rows.extend(object_rows(&objects));
    }
    if let Some(d) = decoded {
        rows.extend([
            ("decoded_file_hits", d.hits),
            ("decoded_file_misses", d.misses),
            ("decoded_bytes", d.bytes),
        ]);
    }
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

/// The object cache's numbers as `object_cache_<tier>_<stat>` and `object_store_<request>s`.
fn object_rows(s: &lakegate_engines::lake::ObjectCacheStats) -> Vec<(&'static str, u64)> {
    use lakegate_engines::lake::object_cache::{Request, Tier};
    let mut rows = Vec::new();
    for t in &s.tiers {
        let names = match t.tier {
            Tier::Metadata => [
                "object_cache_metadata_hits",
                "object_cache_metadata_misses",
                "object_cache_metadata_bytes",
            ],
            Tier::Data => [
                "object_cache_data_hits",
                "object_cache_data_misses",
                "object_cache_data_bytes",
            ],
        };
        rows.extend(names.into_iter().zip([t.hits, t.misses, t.bytes]));
    }
    for (r, n) in &s.requests {
        let name = match r {
            Request::Get => "object_store_gets",
            Request::RangeGet => "object_store_range_gets",
            Request::Head => "object_store_heads",
            Request::Put => "object_store_puts",
            Request::Delete => "object_store_deletes",
        };
        rows.push((name, *n));
    }
    rows
}

//! What the result cache charges for an entry, against the heap the entry really holds: a
//! counting allocator (this test binary only) measures the bytes a cache of point lookups and
//! dashboards keeps, and the charge must cover them — otherwise `[cache] max_bytes` does not
//! bound the gateway's memory (it once charged 1 KB of a 14 KB entry). The charge must not be
//! wildly above either, or the cache keeps far fewer answers than its bound allows. Each entry
//! here also keeps the largest encoding of its rows a frontend may put beside it.

use std::alloc::System;
use std::sync::Arc;

use arrow::array::{ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use cap::Cap;
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use lakegate_engines::{Pins, Settings};
use lakegate_gateway::service::cache::CachedResult;
use lakegate_gateway::service::parse::Parser as Statements;
use lakegate_gateway::service::{CacheConfig, ResultCache};

#[global_allocator]
static HEAP: Cap<System> = Cap::new(System, usize::MAX);

fn parse(sql: &str) -> Statement {
    Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .expect("valid SQL")
        .remove(0)
}

/// One order row, as an engine hands it out: Parquet field ids in each field's metadata.
fn order(id: i64) -> CachedResult {
    let field = |name: &str, t: DataType, id: usize| {
        Field::new(name, t, true).with_metadata(
            [("PARQUET:field_id".to_string(), id.to_string())]
                .into_iter()
                .collect(),
        )
    };
    let schema = Arc::new(Schema::new(vec![
        field("order_id", DataType::Int64, 1),
        field("customer_id", DataType::Int64, 2),
        field("amount", DataType::Decimal128(12, 2), 3),
        field("status", DataType::Utf8, 4),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![id])),
        Arc::new(Int64Array::from(vec![id % 2000])),
        Arc::new(
            Decimal128Array::from(vec![i128::from(id) * 25])
                .with_precision_and_scale(12, 2)
                .expect("decimal"),
        ),
        Arc::new(StringArray::from(vec!["shipped"])),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
    let bytes = batch.get_array_memory_size() as u64;
    CachedResult::new(schema, vec![batch], bytes)
}

const DASHBOARD: &str = "SELECT l.status, date_trunc('month', o.event_ts) AS month, \
    count(*) AS orders, sum(o.amount) AS revenue, avg(o.amount) AS average \
    FROM shop.orders o JOIN shop.customers c ON c.customer_id = o.customer_id \
    LEFT JOIN shop.lines l ON l.order_id = o.order_id \
    WHERE o.event_ts >= TIMESTAMP '2024-01-01' AND c.region IN ('north', 'south') \
    AND o.amount > ";

/// Fills a fresh cache with `n` entries made by `entry`; (charged bytes, heap bytes held).
async fn fill(
    n: i64,
    entry: impl Fn(i64) -> (Statement, Option<ParamValues>, CachedResult),
) -> (u64, u64) {
    let cache = ResultCache::new(CacheConfig::default());
    let settings = Settings::default();
    let pins = Pins::default();
    for (statement, params, result) in (0..n).map(&entry) {
        let key = cache.key(&statement, params.as_ref(), &pins, &settings);
        drop(statement);
        let cached = cache
            .get_or_compute(key, async move { Ok(result) })
            .await
            .expect("cached");
        // A frontend may keep the rows encoded beside it, as many bytes as its room.
        let room = cached.encodings.room();
        assert!(room > 0, "a small result has room for its encoding");
        let kept = cached
            .encodings
            .keep(Arc::new(vec![1u8; room as usize]), room);
        assert!(kept);
    }
    let stats = cache.stats_values().await;
    // What dropping the cache gives back is what it held.
    let full = HEAP.allocated();
    let charged = stats
        .iter()
        .find(|(name, _)| *name == "bytes")
        .map(|(_, v)| *v)
        .expect("bytes");
    let entries = stats
        .iter()
        .find(|(name, _)| *name == "entries")
        .map(|(_, v)| *v)
        .expect("entries");
    assert_eq!(entries, n as u64, "every entry stays (far below max_bytes)");
    drop(cache);
    let held = full.saturating_sub(HEAP.allocated()) as u64;
    (charged, held)
}

/// The tests count the one heap: they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_cache_charges_at_least_the_heap_its_entries_hold() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(result_cache());
}

async fn result_cache() {
    let n = 2000;
    // Distinct point lookups, as a client that writes ids into the text sends them.
    let (charged, held) = fill(n, |i| {
        (
            parse(&format!("SELECT * FROM shop.orders WHERE order_id = {i}")),
            None,
            order(i),
        )
    })
    .await;
    check("distinct point lookups", n, charged, held, Some(3));

    // Distinct dashboards (a long statement, one row each).
    let (charged, held) = fill(n / 4, |i| {
        (
            parse(&format!("{DASHBOARD}{i} GROUP BY 1, 2 ORDER BY 1, 2")),
            None,
            order(i),
        )
    })
    .await;
    check("distinct dashboards", n / 4, charged, held, Some(3));

    // One prepared statement with many parameters: the keys share its tree, so the heap held
    // is far below the charge (which stays an upper bound).
    let (charged, held) = fill(n, |i| {
        (
            parse("SELECT * FROM shop.orders WHERE order_id = $1"),
            Some(ParamValues::List(vec![ScalarValue::Int64(Some(i)).into()])),
            order(i),
        )
    })
    .await;
    check("one prepared lookup", n, charged, held, None);
}

/// The charge covers the heap held, and (when `at_most` is given) is not above that many
/// times it.
fn check(what: &str, n: i64, charged: u64, held: u64, at_most: Option<u64>) {
    let n = n as u64;
    println!(
        "{what}: charged {} B, held {} B per entry",
        charged / n,
        held / n
    );
    assert!(charged >= held, "{what}: charged {charged} < held {held}");
    if let Some(k) = at_most {
        assert!(
            charged <= k * held,
            "{what}: charged {charged} > {k} × held {held}"
        );
    }
}

/// The parser keeps the statements of the texts it saw; its charge covers their trees too.
#[test]
fn the_parser_charges_at_least_the_heap_of_the_statements_it_keeps() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let n = 2000;
    let parser = Statements::new(64);
    for i in 0..n {
        parser
            .parse(&format!("SELECT * FROM shop.orders WHERE order_id = {i}"))
            .expect("parsed");
    }
    let charged = parser.kept_bytes();
    let full = HEAP.allocated();
    drop(parser);
    let held = full.saturating_sub(HEAP.allocated()) as u64;
    check("parsed point lookups", n, charged, held, Some(3));
}

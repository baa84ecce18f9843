//! Every plan run directly gives what DataFusion's physical plan gives for it: the same
//! schema, the same rows (in the same order where the statement orders them totally), the same
//! errors; plans it does not run are left to the planner.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::execution::TaskContext;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;

use super::*;

/// `t`: ids 1..=n over `parts` partitions, with nulls, NaN, -0, text, dates and timestamps.
fn context(n: i32, parts: usize) -> SessionContext {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("k", DataType::Int64, true),
        Field::new("x", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("d", DataType::Date32, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ]));
    let batch = |ids: Vec<i32>| {
        let col = |f: &dyn Fn(i32) -> Option<i64>| ids.iter().map(|i| f(*i)).collect::<Vec<_>>();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(ids.clone())),
            Arc::new(Int64Array::from(col(&|i| {
                (i % 7 != 0).then_some(i64::from(i % 5))
            }))),
            Arc::new(Float64Array::from(
                ids.iter()
                    .map(|i| match i % 9 {
                        0 => None,
                        1 => Some(f64::NAN),
                        2 => Some(-0.0),
                        r => Some(f64::from(r) * 1.5),
                    })
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                ids.iter()
                    .map(|i| (i % 4 != 0).then(|| format!("s{}", i % 6)))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Date32Array::from(
                ids.iter()
                    .map(|i| Some(19_000 + i % 11))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(col(&|i| {
                    (i % 8 != 0)
                        .then_some(1_700_000_000_000_000 + i64::from(i % 13) * 3_600_000_000)
                }))
                .with_timezone("UTC"),
            ),
        ];
        RecordBatch::try_new(schema.clone(), columns).expect("batch")
    };
    let per = (n as usize).div_ceil(parts.max(1));
    let ids: Vec<i32> = (1..=n).collect();
    let mut partitions: Vec<Vec<RecordBatch>> = ids
        .chunks(per.max(1))
        .map(|c| c.chunks(3).map(|b| batch(b.to_vec())).collect())
        .collect();
    if partitions.is_empty() {
        partitions.push(Vec::new());
    }
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    let table = MemTable::try_new(schema, partitions).expect("table");
    ctx.register_table("t", Arc::new(table)).expect("register");
    ctx
}

/// The rows as text, one line each, and the schema's fields.
fn rendered(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for r in 0..b.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    rows
}

/// `sql` run directly and through the physical planner: (taken directly, direct's outcome,
/// the planner's outcome), each as its schema and rows or its error.
async fn both(ctx: &SessionContext, sql: &str) -> (bool, Outcome, Outcome) {
    let state = ctx.state();
    let plan = state
        .optimize(&ctx.sql(sql).await.expect("plans").into_unoptimized_plan())
        .expect("optimises");
    let task = Arc::new(TaskContext::from(&state));
    let planned = async {
        let physical = state.create_physical_plan(&plan).await?;
        datafusion::physical_plan::execute_stream(physical, Arc::clone(&task))
    };
    let planned = outcome(planned.await.map_err(crate::Error::from)).await;
    match stream(&plan, &state, &task).await {
        Some(direct) => (true, outcome(direct).await, planned),
        None => (false, planned.clone(), planned),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Rows(Vec<(String, DataType, bool)>, Vec<String>),
    Error(String),
}

async fn outcome(stream: Result<SendableRecordBatchStream>) -> Outcome {
    let stream = match stream {
        Ok(s) => s,
        Err(e) => return Outcome::Error(e.to_string()),
    };
    let fields = stream
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
        .collect();
    match stream.try_collect::<Vec<_>>().await {
        Ok(batches) => Outcome::Rows(fields, rendered(&batches)),
        Err(e) => Outcome::Error(e.to_string()),
    }
}

/// Statements whose order is total (compared row by row) and the rest (compared as sets).
const ORDERED: &[&str] = &[
    "SELECT * FROM t WHERE id = 7",
    "SELECT id, s FROM t WHERE k = 3 ORDER BY id DESC LIMIT 4",
    "SELECT id, x FROM t ORDER BY x NULLS FIRST, id LIMIT 9",
    "SELECT id, x FROM t ORDER BY x DESC, id LIMIT 9",
    "SELECT id, s FROM t ORDER BY s DESC NULLS LAST, id DESC LIMIT 12 OFFSET 3",
    "SELECT id, ts FROM t WHERE ts > TIMESTAMP '2023-11-15 00:00:00' ORDER BY ts, id LIMIT 5",
    "SELECT id * 2 AS twice, upper(s) FROM t WHERE s LIKE 's%' ORDER BY twice LIMIT 7",
    "SELECT id FROM t WHERE d BETWEEN DATE '2022-01-05' AND DATE '2022-01-07' ORDER BY id",
    "SELECT o.id, o.k + 1 AS k1 FROM t o WHERE o.id IN (3, 5, 40, 41) ORDER BY o.id",
    "SELECT id, x FROM t WHERE x = 0 ORDER BY id",
    "SELECT id, x FROM t WHERE x <> x OR x IS NULL ORDER BY id",
    "SELECT id FROM (SELECT id, k FROM t WHERE k IS NOT NULL) sub WHERE k > 2 ORDER BY id LIMIT 6",
    "SELECT id, CASE WHEN k > 2 THEN 'big' ELSE s END AS c FROM t ORDER BY id LIMIT 20",
    "SELECT id FROM t ORDER BY id DESC LIMIT 1",
    "SELECT id FROM t ORDER BY id OFFSET 55",
];
const UNORDERED: &[&str] = &[
    "SELECT * FROM t",
    "SELECT s, d FROM t WHERE NOT (k = 1) AND x > 1",
    "SELECT id FROM t WHERE s = 'nothing'",
    "SELECT id, 10 / (k - k) AS boom FROM t WHERE id < 3",
    "SELECT id FROM t LIMIT 5",
    "SELECT CAST(s AS INT) FROM t WHERE id = 5",
    "SELECT id, k FROM t WHERE k IS NULL OR k < 1",
];

#[tokio::test]
async fn direct_runs_give_what_the_physical_plan_gives() {
    for (n, parts) in [(60, 1), (60, 3), (0, 1)] {
        let ctx = context(n, parts);
        for sql in ORDERED.iter().chain(UNORDERED) {
            let (taken, mut direct, mut planned) = both(&ctx, sql).await;
            assert!(taken, "{sql}: runs directly");
            if UNORDERED.contains(sql) {
                for o in [&mut direct, &mut planned] {
                    if let Outcome::Rows(_, rows) = o {
                        rows.sort();
                    }
                }
            }
            assert_eq!(direct, planned, "{sql} over {n} rows in {parts} partitions");
        }
    }
}

#[tokio::test]
async fn errors_are_the_planners() {
    let ctx = context(60, 2);
    let (taken, direct, planned) = both(&ctx, "SELECT CAST(s AS INT) FROM t WHERE id = 5").await;
    assert!(taken);
    assert!(matches!(direct, Outcome::Error(_)), "{direct:?}");
    assert_eq!(direct, planned);
}

#[tokio::test]
async fn other_plans_are_left_to_the_planner() {
    let ctx = context(60, 2);
    for sql in [
        "SELECT k, count(*) FROM t GROUP BY k",
        "SELECT id, row_number() OVER (ORDER BY id) FROM t",
        "SELECT id FROM t WHERE k = (SELECT max(k) FROM t)",
        "SELECT a.id FROM t a JOIN t b ON a.id = b.k",
        "SELECT id FROM t UNION ALL SELECT id FROM t",
        "EXPLAIN SELECT id FROM t WHERE id = 1",
    ] {
        let (taken, _, _) = both(&ctx, sql).await;
        assert!(!taken, "{sql}: left to the planner");
    }
    // A sort without a fetch over more rows than it runs: left to SortExec, which can spill.
    let big = context(MAX_SORTED as i32 + 1, 2);
    let (taken, _, _) = both(&big, "SELECT id FROM t WHERE k = 1 ORDER BY x").await;
    assert!(!taken, "an unbounded sort is the planner's");
    let (taken, direct, planned) = both(
        &big,
        "SELECT id, x FROM t WHERE k = 1 ORDER BY x, id LIMIT 30",
    )
    .await;
    assert!(taken, "a top-k of a big scan runs directly");
    assert_eq!(direct, planned);
}

#[tokio::test]
async fn a_limit_stops_reading() {
    let ctx = context(60, 1);
    let (taken, direct, _) = both(&ctx, "SELECT id FROM t WHERE k = 2 LIMIT 2").await;
    assert!(taken);
    let Outcome::Rows(_, rows) = direct else {
        panic!("rows");
    };
    assert_eq!(rows.len(), 2);
    // Limits over the stream: skips across batches, ends mid-batch, and does not read on
    // (the batch after the rows it gives is an error it must not reach).
    let mut batches = (0..3)
        .map(|i| {
            let a: ArrayRef = Arc::new(Int32Array::from(vec![i * 3, i * 3 + 1, i * 3 + 2]));
            Ok(RecordBatch::try_from_iter([("v", a)]).expect("batch"))
        })
        .collect::<Vec<DFResult<RecordBatch>>>();
    batches.push(Err(DataFusionError::Execution(
        "read past the limit".into(),
    )));
    let limited: Vec<RecordBatch> = limit(stream::iter(batches).boxed(), 4, Some(5))
        .try_collect()
        .await
        .expect("limited");
    assert_eq!(rendered(&limited), ["4", "5", "6", "7", "8"]);
}

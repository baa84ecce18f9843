//! The Postgres endpoint end to end: the real `lakegate` binary on an ephemeral port over a
//! warehouse written by PyIceberg, queried with tokio-postgres (simple, extended, binary,
//! portals, cancel). Expected answers come from PyIceberg's own reading (`expected.json`).

use crate::common::{TestGateway, lake, start};
use futures::{StreamExt, pin_mut};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

async fn connect(gw: &TestGateway) -> Client {
    let (client, conn) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=tester dbname=lakegate",
            gw.port
        ),
        NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    client
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no sqlstate: {e}"))
}

#[tokio::test]
async fn simple_protocol_runs_several_statements() {
    let gw = start();
    let client = connect(&gw).await;
    let msgs = client
        .simple_query("SELECT 1 AS one; SELECT count(*) FROM orders")
        .await
        .expect("simple query");
    let rows: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or_default().to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        rows,
        vec!["1".to_string(), lake().expected["orders_count"].to_string()]
    );
}

#[tokio::test]
async fn extended_protocol_binds_parameters_and_returns_binary() {
    let gw = start();
    let client = connect(&gw).await;
    let want = &lake().expected["order_42"];
    let row = client
        .query_one(
            "SELECT order_id, customer_id, amount::text, status FROM orders WHERE order_id = $1",
            &[&42i64],
        )
        .await
        .expect("point lookup");
    assert_eq!(row.get::<_, i64>(0), 42);
    assert_eq!(
        row.get::<_, i64>(1).to_string(),
        want["customer_id"].as_str().unwrap_or_default()
    );
    assert_eq!(
        row.get::<_, String>(2),
        want["amount"].as_str().unwrap_or_default()
    );
    // a prepared statement is reused with new parameters
    let stmt = client
        .prepare("SELECT count(*) FROM orders WHERE order_id <= $1")
        .await
        .expect("prepare");
    for n in [1i64, 10, 100] {
        let count: i64 = client
            .query_one(&stmt, &[&n])
            .await
            .expect("execute")
            .get(0);
        assert_eq!(count, n);
    }
}

#[tokio::test]
async fn execute_with_row_limit_suspends_the_portal() {
    let gw = start();
    let mut client = connect(&gw).await;
    let tx = client.transaction().await.expect("begin");
    let stmt = tx
        .prepare("SELECT order_id FROM orders WHERE order_id <= $1 ORDER BY order_id")
        .await
        .expect("prepare");
    let portal = tx.bind(&stmt, &[&95i64]).await.expect("bind");
    let mut seen = Vec::new();
    loop {
        let page = tx.query_portal(&portal, 10).await.expect("page");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 10);
        seen.extend(page.iter().map(|r| r.get::<_, i64>(0)));
    }
    tx.commit().await.expect("commit");
    assert_eq!(seen, (1..=95).collect::<Vec<i64>>());
}

#[tokio::test]
async fn errors_carry_sqlstates_and_the_connection_goes_on() {
    let gw = start();
    let client = connect(&gw).await;
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT * FROM missing_table", "42P01"),
        ("SELECT missing_column FROM orders", "42703"),
        ("INSERT INTO orders VALUES (1)", "0A000"),
        ("CREATE TABLE x (a int)", "0A000"),
        ("FETCH 1 FROM no_cursor", "34000"),
    ];
    for (sql, want) in cases {
        let err = client.simple_query(sql).await.expect_err(sql);
        assert_eq!(code(&err), want, "{sql}: {err:?}");
        let err = client.query(sql, &[]).await.expect_err(sql);
        assert_eq!(code(&err), want, "extended {sql}: {err:?}");
        let ok = client
            .query_one("SELECT 41 + 1", &[])
            .await
            .expect("still usable");
        // PostgreSQL's answer: integer literals are int4.
        assert_eq!(ok.get::<_, i32>(0), 42);
    }
}

#[tokio::test]
async fn cancel_request_stops_a_streaming_query() {
    let gw = start();
    let client = connect(&gw).await;
    let cancel = client.cancel_token();
    let rows = client
        .query_raw(
            "SELECT value FROM generate_series(1, 2000000000)",
            std::iter::empty::<i64>(),
        )
        .await
        .expect("query starts");
    pin_mut!(rows);
    let mut n = 0u64;
    let mut cancelled = false;
    while let Some(row) = rows.next().await {
        match row {
            Ok(_) => {
                n += 1;
                if n == 1000 {
                    cancel.cancel_query(NoTls).await.expect("send cancel");
                }
            }
            Err(e) => {
                assert_eq!(code(&e), "57014", "{e:?}");
                cancelled = true;
                break;
            }
        }
    }
    assert!(
        cancelled,
        "query ran to the end ({n} rows) instead of being cancelled"
    );
    let ok = client
        .query_one("SELECT 1", &[])
        .await
        .expect("usable after cancel");
    assert_eq!(ok.get::<_, i32>(0), 1);
}

#[tokio::test]
async fn large_results_stream_without_materialising() {
    let gw = start();
    let client = connect(&gw).await;
    let rows = client
        .query_raw(
            "SELECT value, value * 2 AS twice FROM generate_series(1, 3000000)",
            std::iter::empty::<i64>(),
        )
        .await
        .expect("query");
    pin_mut!(rows);
    let mut n = 0u64;
    let mut sum = 0i64;
    while let Some(row) = rows.next().await {
        let row = row.expect("row");
        n += 1;
        sum += row.get::<_, i64>(0);
    }
    assert_eq!(n, 3_000_000);
    assert_eq!(sum, 3_000_000 * 3_000_001 / 2);
    // 3M rows x 2 int8 columns is ~150 MB as text rows; streaming keeps the peak far below.
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", gw.child.id())).expect("proc status");
    let peak_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    assert!(
        peak_kb < 400 * 1024,
        "gateway peak RSS {peak_kb} kB suggests the result was materialised"
    );
}

/// A column's value as its bytes on the wire, whatever its type.
#[derive(Debug, PartialEq)]
struct Wire(Option<Vec<u8>>);

impl<'a> postgres_types::FromSql<'a> for Wire {
    fn from_sql(
        _: &postgres_types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Self(Some(raw.to_vec())))
    }

    fn from_sql_null(
        _: &postgres_types::Type,
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Self(None))
    }

    fn accepts(_: &postgres_types::Type) -> bool {
        true
    }
}

/// The result cache's hits counted so far.
async fn cache_hits(client: &Client) -> i64 {
    let rows = client
        .query(
            "SELECT value FROM lakegate.cache_stats WHERE name = 'hits'",
            &[],
        )
        .await
        .expect("cache stats");
    rows[0].get(0)
}

/// A cached result keeps its rows encoded for the next hit (`frontend::pg::encoded`): hits
/// in text and in binary, alternating, each send what the first answer of their format sent
/// — a text hit after a binary one is text again — with the values PostgreSQL gives.
#[tokio::test]
async fn cached_answers_alternating_text_and_binary_stay_exact() {
    let gw = start();
    let client = connect(&gw).await;
    let sql = "SELECT id, b, f, d, n, s, dt, t, ts, bin, u FROM all_types ORDER BY id";
    let text = || async {
        client
            .simple_query(sql)
            .await
            .expect("text")
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect::<Vec<Vec<Option<String>>>>()
    };
    let binary = || async {
        client
            .query(sql, &[])
            .await
            .expect("binary")
            .iter()
            .map(|r| (0..r.len()).map(|i| r.get::<_, Wire>(i)).collect())
            .collect::<Vec<Vec<Wire>>>()
    };
    let hits = cache_hits(&client).await;
    let (text_1, binary_1) = (text().await, binary().await);
    let (text_2, text_3) = (text().await, text().await);
    let (binary_2, binary_3) = (binary().await, binary().await);
    let text_4 = text().await;
    assert!(
        cache_hits(&client).await - hits >= 6,
        "the answers after the first were hits"
    );
    for hit in [&text_2, &text_3, &text_4] {
        assert_eq!(hit, &text_1);
    }
    for hit in [&binary_2, &binary_3] {
        assert_eq!(hit, &binary_1);
    }
    let first = &text_1[0];
    let printed = |i: usize| first[i].as_deref();
    assert_eq!(printed(0), Some("1"));
    assert_eq!(printed(2), Some("1.5"));
    assert_eq!(printed(3), Some("-2.25"));
    assert_eq!(printed(8), Some("2024-02-29 13:45:30.123456"));
    assert_eq!(printed(9), Some("\\x0001feff"));
    assert!(
        text_1[2].iter().skip(1).all(Option::is_none),
        "row 3 is NULLs"
    );
    let sent = &binary_1[0];
    assert_eq!(sent[0], Wire(Some(1i32.to_be_bytes().to_vec())));
    assert_eq!(sent[3], Wire(Some((-2.25f64).to_be_bytes().to_vec())));
    assert_eq!(sent[9], Wire(Some(vec![0, 1, 0xfe, 0xff])));
}

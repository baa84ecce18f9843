//! The Flight SQL endpoint end to end with the Rust `FlightSqlServiceClient`: a statement, a
//! prepared statement with a bound parameter, metadata, and errors as gRPC statuses. Expected
//! answers come from PyIceberg (`expected.json`).

use std::sync::Arc;

use crate::common::{TestGateway, lake, start};
use arrow::array::{Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::FlightInfo;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables};
use futures::TryStreamExt;
use tonic::transport::Channel;

async fn client(gw: &TestGateway) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", gw.flight_port))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    FlightSqlServiceClient::new(channel)
}

async fn fetch(client: &mut FlightSqlServiceClient<Channel>, info: FlightInfo) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let stream = client.do_get(ticket).await.expect("do_get");
        out.extend(stream.try_collect::<Vec<_>>().await.expect("batches"));
    }
    out
}

fn column_i64(batches: &[RecordBatch], idx: usize) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let a = b
                .column(idx)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("int64")
                .clone();
            (0..a.len()).map(move |i| a.value(i)).collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn statement_and_prepared_statement() {
    let gw = start();
    let mut client = client(&gw).await;
    let info = client
        .execute("SELECT count(*) AS n FROM orders".into(), None)
        .await
        .expect("execute");
    let batches = fetch(&mut client, info).await;
    assert_eq!(
        column_i64(&batches, 0),
        vec![lake().expected["orders_count"].as_i64().unwrap_or(-1)]
    );

    let mut prepared = client
        .prepare(
            "SELECT customer_id FROM orders WHERE order_id = $1".into(),
            None,
        )
        .await
        .expect("prepare");
    assert_eq!(
        prepared.parameter_schema().expect("schema").fields().len(),
        1
    );
    let params = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![42]))],
    )
    .expect("batch");
    prepared.set_parameters(params).expect("bind");
    let info = prepared.execute().await.expect("execute prepared");
    let batches = fetch(&mut client, info).await;
    let want: i64 = lake().expected["order_42"]["customer_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    assert_eq!(column_i64(&batches, 0), vec![want]);
    prepared.close().await.expect("close");
}

#[tokio::test]
async fn metadata_lists_schemas_and_tables_with_their_schemas() {
    let gw = start();
    let mut client = client(&gw).await;
    let info = client
        .get_db_schemas(CommandGetDbSchemas {
            catalog: None,
            db_schema_filter_pattern: None,
        })
        .await
        .expect("schemas");
    let batches = fetch(&mut client, info).await;
    let names: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let a = b
                .column(1)
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("text")
                .clone();
            (0..a.len())
                .map(move |i| a.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        names.contains(&"public".to_string()) && names.contains(&"sales".to_string()),
        "{names:?}"
    );

    let info = client
        .get_tables(CommandGetTables {
            catalog: None,
            db_schema_filter_pattern: Some("public".into()),
            table_name_filter_pattern: Some("ord%".into()),
            table_types: vec![],
            include_schema: true,
        })
        .await
        .expect("tables");
    let batches = fetch(&mut client, info).await;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 1, "only `orders` matches ord%");
    let schema_bytes = batches[0]
        .column(4)
        .as_any()
        .downcast_ref::<arrow::array::BinaryArray>()
        .expect("ipc")
        .value(0)
        .to_vec();
    let schema =
        arrow::ipc::convert::try_schema_from_ipc_buffer(&schema_bytes).expect("ipc schema");
    assert_eq!(schema.field(0).name(), "order_id");
}

fn code(err: &arrow_flight::error::FlightError) -> Option<tonic::Code> {
    match err {
        arrow_flight::error::FlightError::Tonic(status) => Some(status.code()),
        _ => None,
    }
}

#[tokio::test]
async fn errors_are_grpc_statuses() {
    let gw = start();
    let mut client = client(&gw).await;
    let err = client
        .execute("SELEC 1".into(), None)
        .await
        .expect_err("syntax");
    assert_eq!(code(&err), Some(tonic::Code::InvalidArgument), "{err}");
    let err = client
        .execute("SELECT * FROM missing_table".into(), None)
        .await
        .expect_err("missing");
    assert_eq!(code(&err), Some(tonic::Code::NotFound), "{err}");
    assert!(err.to_string().contains("missing_table"), "{err}");
    let err = client
        .execute_update("DELETE FROM orders".into(), None)
        .await
        .expect_err("read-only");
    assert_eq!(code(&err), Some(tonic::Code::Unimplemented), "{err}");
    assert!(err.to_string().contains("read-only"), "{err}");
}

#[tokio::test]
async fn capability_metadata_answers() {
    use arrow_flight::sql::{CommandGetPrimaryKeys, SqlInfo};
    let gw = start();
    let mut client = client(&gw).await;
    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerReadOnly,
        ])
        .await
        .expect("sql info");
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
    let info = client.get_table_types().await.expect("table types");
    let batches = fetch(&mut client, info).await;
    let types = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("text")
        .value(0)
        .to_string();
    assert_eq!(types, "TABLE");
    let info = client
        .get_xdbc_type_info(arrow_flight::sql::CommandGetXdbcTypeInfo { data_type: None })
        .await
        .expect("xdbc");
    let batches = fetch(&mut client, info).await;
    assert!(batches.iter().map(RecordBatch::num_rows).sum::<usize>() >= 10);
    let info = client
        .get_primary_keys(CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "orders".into(),
        })
        .await
        .expect("primary keys");
    assert_eq!(
        fetch(&mut client, info)
            .await
            .iter()
            .map(RecordBatch::num_rows)
            .sum::<usize>(),
        0
    );
}

fn proc_field(pid: u32, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).expect("proc");
    if file == "stat" {
        // utime + stime (fields 14 and 15), in clock ticks
        let fields: Vec<&str> = text
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        return fields
            .get(11)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            + fields
                .get(12)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
    }
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn large_results_stream_and_a_disconnect_stops_the_query() {
    let gw = start();
    let pid = gw.child.id();
    let mut client = client(&gw).await;
    // 3M rows stream through without being held whole.
    let info = client
        .execute(
            "SELECT value, value * 2 AS twice FROM generate_series(1, 3000000)".into(),
            None,
        )
        .await
        .expect("execute");
    let batches = fetch(&mut client, info).await;
    assert_eq!(
        batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
        3_000_000
    );
    let peak_kb = proc_field(pid, "status", "VmHWM");
    assert!(
        peak_kb < 400 * 1024,
        "peak RSS {peak_kb} kB suggests the result was materialised"
    );

    // An endless query: read a little, then go away; the gateway must stop working on it.
    let info = client
        .execute(
            "SELECT value FROM generate_series(1, 4000000000)".into(),
            None,
        )
        .await
        .expect("execute");
    let ticket = info.endpoint[0].ticket.clone().expect("ticket");
    let mut stream = client.do_get(ticket).await.expect("do_get");
    for _ in 0..3 {
        let _ = futures::StreamExt::next(&mut stream).await;
    }
    drop(stream);
    drop(client);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let before = proc_field(pid, "stat", "");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let after = proc_field(pid, "stat", "");
    // 3 s of a running scan would burn ~300 ticks; an idle gateway a handful.
    assert!(
        after - before < 50,
        "gateway kept working after the client left: {} ticks in 3 s",
        after - before
    );
}

//! The Flight SQL endpoint end to end with the Rust `FlightSqlServiceClient`: a statement, a
//! prepared statement with a bound parameter, metadata, and errors as gRPC statuses. Expected
//! answers come from PyIceberg (`expected.json`).

mod common;

use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::FlightInfo;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables};
use common::{TestGateway, lake, start};
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

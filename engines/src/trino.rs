//! Trino over its HTTP client protocol: `POST /v1/statement`, then follow `nextUri` until the
//! query finishes; each page's JSON rows become one Arrow batch in the planner's schema.
//! Dropping the stream before the end cancels the query with `DELETE nextUri`. Tables are read
//! through Trino's Iceberg connector on the same catalog, `FOR VERSION AS OF` the pinned
//! snapshot.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use serde::Deserialize;
use serde_json::Value as Json;

use crate::conform::conform_batch;
use crate::dialect::{Dialect, prepare};
use crate::engine::{Engine, EngineRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::semantics::Feature;

/// Where a Trino coordinator is and how to talk to it.
#[derive(Debug, Clone)]
pub struct TrinoOptions {
    /// The coordinator's base URL, e.g. `http://127.0.0.1:8090`.
    pub url: String,
    /// The Trino catalog that maps the lake (Iceberg connector).
    pub catalog: String,
    /// The Trino user queries run as.
    pub user: String,
    /// How long to wait for a TCP connection before calling Trino unavailable.
    pub connect_timeout: Duration,
}

/// The Trino engine.
#[derive(Debug)]
pub struct TrinoEngine {
    options: TrinoOptions,
    http: reqwest::Client,
}

/// One page of Trino's statement protocol.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    next_uri: Option<String>,
    columns: Option<Vec<Json>>,
    data: Option<Vec<Vec<Json>>>,
    error: Option<TrinoError>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TrinoError {
    message: String,
    error_name: Option<String>,
    error_type: Option<String>,
}

impl TrinoEngine {
    /// A client for the coordinator at `options.url` (no connection is made yet).
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn try_new(options: TrinoOptions) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            // Trino answers every poll within about a second, even while a query runs: a
            // silent coordinator is a hung one.
            .timeout(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::Internal(format!("trino http client: {e}")))?;
        Ok(Self { options, http })
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> Error {
        Error::EngineUnavailable {
            engine: "trino".into(),
            reason: format!("{} ({e})", self.options.url),
        }
    }

    async fn page(&self, request: reqwest::RequestBuilder) -> Result<Page> {
        let response = request.send().await.map_err(|e| {
            if e.is_connect() || crate::error::connection_lost(&e) {
                Error::EngineUnreachable {
                    engine: "trino".into(),
                    reason: format!("{} ({e})", self.options.url),
                }
            } else {
                self.unavailable(e)
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                self.unavailable(format!("HTTP {status}: {body}"))
            } else {
                Error::Engine {
                    engine: "trino".into(),
                    kind: ErrorKind::Internal,
                    message: format!("HTTP {status}: {body}"),
                }
            });
        }
        let page: Page = response.json().await.map_err(|e| self.unavailable(e))?;
        if let Some(e) = &page.error {
            return Err(trino_error(e));
        }
        Ok(page)
    }

    async fn next(&self, uri: &str) -> Result<Page> {
        self.page(self.http.get(uri)).await
    }
}

#[async_trait]
impl Engine for TrinoEngine {
    fn name(&self) -> &str {
        "trino"
    }

    /// Measured against PostgreSQL (tests/conformance): Trino prints timestamps, intervals and
    /// floats its own way (`2024-01-01 03:51:00.000000`, `7.57E1`), keeps the dividend's scale
    /// in decimal division and average, and does not plan interval arithmetic on dates; its
    /// `AT TIME ZONE` keeps a timestamp with time zone.
    fn verified(&self) -> Option<&'static [&'static str]> {
        Some(crate::verified::TRINO)
    }

    fn inexact(&self) -> &'static [Feature] {
        &[
            Feature::TemporalText,
            Feature::IntervalText,
            Feature::FloatText,
            Feature::NumericDivision,
            Feature::NumericAverage,
            Feature::IntervalArithmetic,
            Feature::IntegerCast,
            Feature::Concat,
            Feature::FractionalDatePart,
            Feature::WeekdayDatePart,
            Feature::AtTimeZone,
            Feature::FloatToNumeric,
            Feature::EmbeddedFunction,
            Feature::SessionZone,
        ]
    }

    async fn execute(&self, request: EngineRequest<'_>) -> Result<SendableRecordBatchStream> {
        let (schema, sql) = prepare(
            &request,
            "trino",
            Dialect::Trino {
                catalog: &self.options.catalog,
            },
        )?;
        let post = self
            .http
            .post(format!(
                "{}/v1/statement",
                self.options.url.trim_end_matches('/')
            ))
            .header("X-Trino-User", &self.options.user)
            .header("X-Trino-Source", "lakegate")
            .header("X-Trino-Catalog", &self.options.catalog)
            .header("X-Trino-Schema", request.settings.default_schema())
            .header("X-Trino-Time-Zone", "UTC")
            // Without it Trino rounds timestamp(6) values to milliseconds.
            .header("X-Trino-Client-Capabilities", "PARAMETRIC_DATETIME")
            .body(sql);
        let mut page = self.page(post).await?;
        // Follow the protocol until the first rows (or the end), so that planning errors are
        // returned here rather than in the middle of a stream.
        while page.columns.is_none() && page.data.is_none() {
            let Some(next) = page.next_uri.clone() else {
                break;
            };
            page = self.next(&next).await?;
        }
        let decoder = RowDecoder::new(&schema);
        let state = Cursor {
            engine: TrinoEngine {
                options: self.options.clone(),
                http: self.http.clone(),
            },
            first: Some(page.data.take().unwrap_or_default()),
            next_uri: page.next_uri.take(),
        };
        let stream = futures::stream::unfold((state, decoder), |(mut state, decoder)| async move {
            loop {
                let rows = if let Some(rows) = state.first.take() {
                    rows
                } else {
                    let uri = state.next_uri.take()?;
                    match state.engine.next(&uri).await {
                        Ok(page) => {
                            state.next_uri = page.next_uri;
                            page.data.unwrap_or_default()
                        }
                        Err(e) => return Some((Err(e.into_datafusion()), (state, decoder))),
                    }
                };
                if rows.is_empty() {
                    continue;
                }
                let batch = decoder.decode(&rows).map_err(Error::into_datafusion);
                return Some((batch, (state, decoder)));
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            stream,
        )))
    }

    async fn health(&self) -> Result<()> {
        let info: Json = self
            .http
            .get(format!(
                "{}/v1/info",
                self.options.url.trim_end_matches('/')
            ))
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .map_err(|e| self.unavailable(e))?
            .json()
            .await
            .map_err(|e| self.unavailable(e))?;
        if info.get("starting").and_then(Json::as_bool) == Some(false) {
            Ok(())
        } else {
            Err(self.unavailable("still starting"))
        }
    }
}

/// A running query; dropping it before the end cancels the query on Trino.
struct Cursor {
    engine: TrinoEngine,
    first: Option<Vec<Vec<Json>>>,
    next_uri: Option<String>,
}

impl Drop for Cursor {
    fn drop(&mut self) {
        if let Some(uri) = self.next_uri.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let http = self.engine.http.clone();
            rt.spawn(async move {
                let _ = http.delete(uri).send().await;
            });
        }
    }
}

/// Turns Trino's JSON rows into Arrow batches of the promised types.
struct RowDecoder {
    /// The promised schema with positional names `c0, c1, ...` (Trino may repeat names).
    positional: SchemaRef,
    promised: SchemaRef,
}

impl RowDecoder {
    fn new(promised: &SchemaRef) -> Self {
        let positional = Arc::new(Schema::new(
            promised
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        Self {
            positional,
            promised: promised.clone(),
        }
    }

    fn decode(&self, rows: &[Vec<Json>]) -> Result<RecordBatch> {
        let fields = self.positional.fields();
        let objects: Vec<serde_json::Map<String, Json>> = rows
            .iter()
            .map(|row| {
                if row.len() != fields.len() {
                    return Err(Error::Internal(format!(
                        "trino returned {} columns, the plan promised {}",
                        row.len(),
                        fields.len()
                    )));
                }
                Ok(row
                    .iter()
                    .zip(fields.iter())
                    .map(|(v, f)| (f.name().clone(), adapt(v, f.data_type())))
                    .collect())
            })
            .collect::<Result<_>>()?;
        let mut decoder = arrow::json::ReaderBuilder::new(self.positional.clone())
            .with_batch_size(objects.len().max(1))
            .build_decoder()
            .map_err(|e| Error::Internal(format!("trino rows: {e}")))?;
        decoder
            .serialize(&objects)
            .map_err(|e| Error::Internal(format!("trino rows: {e}")))?;
        let batch = decoder
            .flush()
            .map_err(|e| Error::Internal(format!("trino rows: {e}")))?
            .unwrap_or_else(|| RecordBatch::new_empty(self.positional.clone()));
        conform_batch(&batch, &self.promised)
    }
}

/// Trino's JSON spelling of a value, rewritten where Arrow's JSON reader spells it differently.
fn adapt(value: &Json, target: &DataType) -> Json {
    match (value, target) {
        // `2024-01-01 10:00:00.000000 UTC` → RFC 3339 offset.
        (Json::String(s), DataType::Timestamp(_, Some(_))) => {
            Json::String(match s.rsplit_once(' ') {
                Some((at, "UTC" | "Z")) => format!("{at}+00:00"),
                Some((at, zone)) if zone.starts_with('+') || zone.starts_with('-') => {
                    format!("{at}{zone}")
                }
                _ => s.clone(),
            })
        }
        (Json::Array(items), DataType::List(f) | DataType::LargeList(f)) => {
            Json::Array(items.iter().map(|v| adapt(v, f.data_type())).collect())
        }
        // Arrow's reader wants booleans for booleans, numbers or strings for the rest.
        (Json::Number(n), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8) => {
            Json::String(n.to_string())
        }
        _ => value.clone(),
    }
}

fn trino_error(e: &TrinoError) -> Error {
    let kind = match e.error_name.as_deref().unwrap_or_default() {
        "SYNTAX_ERROR" => ErrorKind::Syntax,
        "COLUMN_NOT_FOUND" | "MISSING_COLUMN_NAME" => ErrorKind::UndefinedColumn,
        "TABLE_NOT_FOUND" | "SCHEMA_NOT_FOUND" | "CATALOG_NOT_FOUND" => ErrorKind::UndefinedTable,
        "FUNCTION_NOT_FOUND" => ErrorKind::UndefinedFunction,
        "TYPE_MISMATCH" | "FUNCTION_IMPLEMENTATION_MISSING" => ErrorKind::DatatypeMismatch,
        "DIVISION_BY_ZERO" => ErrorKind::DivisionByZero,
        "NUMERIC_VALUE_OUT_OF_RANGE" => ErrorKind::NumericOutOfRange,
        "INVALID_CAST_ARGUMENT" | "INVALID_FUNCTION_ARGUMENT" => ErrorKind::DataException,
        "NOT_SUPPORTED" => ErrorKind::Unsupported,
        "USER_CANCELED" | "ADMINISTRATIVELY_KILLED" => ErrorKind::Canceled,
        _ if e.error_type.as_deref() == Some("INSUFFICIENT_RESOURCES") => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    };
    Error::Engine {
        engine: "trino".into(),
        kind,
        message: e.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        Array, Decimal128Array, Int64Array, StringArray, TimestampMicrosecondArray,
    };
    use arrow::datatypes::TimeUnit;
    use serde_json::json;

    #[test]
    fn decodes_trino_json_rows_to_promised_types() {
        let promised = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("amount", DataType::Decimal128(10, 2), true),
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]));
        let rows = vec![
            vec![
                json!(1),
                json!("12.50"),
                json!("é"),
                json!("2024-01-02 03:04:05.000006 UTC"),
            ],
            vec![json!(2), Json::Null, Json::Null, Json::Null],
        ];
        let batch = RowDecoder::new(&promised).decode(&rows).expect("decodes");
        assert_eq!(batch.schema().field(0).name(), "id");
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("ids");
        assert_eq!(ids.values(), &[1, 2]);
        let amounts = batch
            .column(1)
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .expect("dec");
        assert_eq!(amounts.value(0), 1250);
        assert!(amounts.is_null(1));
        let names = batch
            .column(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("str");
        assert_eq!(names.value(0), "é");
        let ts = batch
            .column(3)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .expect("ts");
        assert_eq!(ts.value(0), 1_704_164_645_000_006);
    }

    #[test]
    fn maps_error_names_to_kinds() {
        let e = trino_error(&TrinoError {
            message: "line 1:8: Column 'x' cannot be resolved".into(),
            error_name: Some("COLUMN_NOT_FOUND".into()),
            error_type: Some("USER_ERROR".into()),
        });
        assert_eq!(e.kind(), ErrorKind::UndefinedColumn);
    }
}

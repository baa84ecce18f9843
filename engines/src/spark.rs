//! Spark over Spark Connect (gRPC): one `ExecutePlan` call per statement with a SQL relation;
//! answers arrive as Arrow IPC streams and are cast to the planner's schema. Dropping the
//! stream interrupts the operation. Tables are read through Iceberg's `SparkCatalog` on the same
//! catalog, `VERSION AS OF` the pinned snapshot.
//!
//! Only the handful of Spark Connect messages lakegate sends and reads are declared here (field
//! numbers from Spark's `spark/connect/base.proto` and `relations.proto`); unknown fields in
//! responses are skipped by prost.

use std::time::Duration;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use crate::conform::conform_batch;
use crate::dialect::{Dialect, prepare};
use crate::engine::{Engine, EngineRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::semantics::Feature;

/// Where a Spark Connect server is.
#[derive(Debug, Clone)]
pub struct SparkOptions {
    /// `http://host:port` of the Spark Connect gRPC endpoint (default port 15002).
    pub url: String,
    /// The Spark catalog (an Iceberg `SparkCatalog`) that maps the lake.
    pub catalog: String,
    /// The user Spark sessions belong to.
    pub user: String,
    /// How long to wait for a TCP connection before calling Spark unavailable.
    pub connect_timeout: Duration,
}

/// The Spark engine.
#[derive(Debug)]
pub struct SparkEngine {
    options: SparkOptions,
    channel: Channel,
    session_id: String,
    /// Session settings applied once per Spark session (double-quoted identifiers).
    /// Reset when the server is unreachable: a restarted server has a fresh session.
    configured: std::sync::atomic::AtomicBool,
}

/// Spark Connect messages (subset), see the module docs.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct UserContext {
        #[prost(string, tag = "1")]
        pub(super) user_id: String,
        #[prost(string, tag = "2")]
        pub(super) user_name: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Sql {
        #[prost(string, tag = "1")]
        pub(super) query: String,
    }

    /// `Relation` with only its `sql` member (tag 10 of the `rel_type` oneof).
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Relation {
        #[prost(message, optional, tag = "10")]
        pub(super) sql: Option<Sql>,
    }

    /// `Plan` with only its `root` member (tag 1 of the `op_type` oneof).
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Plan {
        #[prost(message, optional, tag = "1")]
        pub(super) root: Option<Relation>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ExecutePlanRequest {
        #[prost(string, tag = "1")]
        pub(super) session_id: String,
        #[prost(message, optional, tag = "2")]
        pub(super) user_context: Option<UserContext>,
        #[prost(message, optional, tag = "3")]
        pub(super) plan: Option<Plan>,
        #[prost(string, optional, tag = "4")]
        pub(super) client_type: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub(super) operation_id: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ArrowBatch {
        #[prost(int64, tag = "1")]
        pub(super) row_count: i64,
        #[prost(bytes = "vec", tag = "2")]
        pub(super) data: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ExecutePlanResponse {
        #[prost(string, tag = "1")]
        pub(super) session_id: String,
        #[prost(message, optional, tag = "2")]
        pub(super) arrow_batch: Option<ArrowBatch>,
        #[prost(string, tag = "12")]
        pub(super) operation_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct InterruptRequest {
        #[prost(string, tag = "1")]
        pub(super) session_id: String,
        #[prost(message, optional, tag = "2")]
        pub(super) user_context: Option<UserContext>,
        #[prost(string, optional, tag = "3")]
        pub(super) client_type: Option<String>,
        /// `INTERRUPT_TYPE_OPERATION_ID` = 3.
        #[prost(int32, tag = "4")]
        pub(super) interrupt_type: i32,
        #[prost(string, optional, tag = "6")]
        pub(super) operation_id: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct InterruptResponse {
        #[prost(string, tag = "1")]
        pub(super) session_id: String,
    }
}

const EXECUTE_PLAN: &str = "/spark.connect.SparkConnectService/ExecutePlan";
const INTERRUPT: &str = "/spark.connect.SparkConnectService/Interrupt";
const CLIENT_TYPE: &str = "lakegate";

impl SparkEngine {
    /// A client for the Spark Connect server at `options.url` (connects lazily).
    ///
    /// # Errors
    /// [`Error::EngineUnavailable`] for a malformed URL.
    pub fn try_new(options: SparkOptions) -> Result<Self> {
        let channel = Endpoint::from_shared(options.url.clone())
            .map_err(|e| Error::EngineUnavailable {
                engine: "spark".into(),
                reason: format!("bad url {}: {e}", options.url),
            })?
            .connect_timeout(options.connect_timeout)
            .tcp_keepalive(Some(Duration::from_secs(30)))
            // A dead server is noticed within ~15 s even while a long query is silent.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .connect_lazy();
        Ok(Self {
            options,
            channel,
            session_id: uuid::Uuid::new_v4().to_string(),
            configured: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn user(&self) -> proto::UserContext {
        proto::UserContext {
            user_id: self.options.user.clone(),
            user_name: self.options.user.clone(),
        }
    }

    /// Starts `sql` and returns its response stream and operation id.
    async fn start(
        &self,
        sql: String,
    ) -> Result<(tonic::Streaming<proto::ExecutePlanResponse>, String)> {
        let operation_id = uuid::Uuid::new_v4().to_string();
        let request = proto::ExecutePlanRequest {
            session_id: self.session_id.clone(),
            user_context: Some(self.user()),
            plan: Some(proto::Plan {
                root: Some(proto::Relation {
                    sql: Some(proto::Sql { query: sql }),
                }),
            }),
            client_type: Some(CLIENT_TYPE.into()),
            operation_id: Some(operation_id.clone()),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        // Not ready: the channel has no connection to the server and could not make one.
        grpc.ready().await.map_err(|e| {
            self.configured
                .store(false, std::sync::atomic::Ordering::Release);
            unreachable_at(&self.options.url, e)
        })?;
        let response = grpc
            .server_streaming(
                tonic::Request::new(request),
                PathAndQuery::from_static(EXECUTE_PLAN),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .map_err(|s| self.status_error(&s))?;
        Ok((response.into_inner(), operation_id))
    }

    /// Runs a statement (a maintenance procedure's `CALL`) in this engine's session, to its
    /// end, discarding what it returns.
    ///
    /// # Errors
    /// Spark's error, or its being unreachable.
    pub async fn run_statement(&self, sql: &str) -> Result<()> {
        self.configure().await?;
        self.run(sql).await
    }

    /// The Spark catalog that maps the lake.
    pub fn catalog(&self) -> &str {
        &self.options.catalog
    }

    /// Runs `sql` to the end and discards its answer.
    async fn run(&self, sql: &str) -> Result<()> {
        let (mut stream, _) = self.start(sql.to_string()).await?;
        while let Some(r) = stream.next().await {
            r.map_err(|s| self.status_error(&s))?;
        }
        Ok(())
    }

    async fn configure(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if !self.configured.load(Ordering::Acquire) {
            self.run("SET spark.sql.ansi.doubleQuotedIdentifiers=true")
                .await?;
            self.configured.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> Error {
        self.configured
            .store(false, std::sync::atomic::Ordering::Release);
        Error::EngineUnavailable {
            engine: "spark".into(),
            reason: format!("{} ({e})", self.options.url),
        }
    }

    fn status_error(&self, status: &tonic::Status) -> Error {
        let e = status_to_error(&self.options.url, status);
        if matches!(
            e,
            Error::EngineUnavailable { .. } | Error::EngineUnreachable { .. }
        ) {
            // A restarted server has a fresh session: configure it again.
            self.configured
                .store(false, std::sync::atomic::Ordering::Release);
        }
        e
    }
}

/// Spark Connect at `url` has no connection (refused, reset, broken: `e` says which).
fn unreachable_at(url: &str, e: impl std::fmt::Display) -> Error {
    Error::EngineUnreachable {
        engine: "spark".into(),
        reason: format!("{url} ({e})"),
    }
}

/// A gRPC status from Spark Connect as an error: transport trouble is "unavailable" (fail
/// over), the rest is classified by Spark's error class.
fn status_to_error(url: &str, status: &tonic::Status) -> Error {
    use tonic::Code;
    let message = status.message().to_string();
    if crate::error::connection_lost(status) {
        return unreachable_at(url, message);
    }
    let kind = match status.code() {
        Code::Unavailable => None,
        Code::DeadlineExceeded | Code::Unknown
            if message.contains("connect") || message.contains("transport") =>
        {
            None
        }
        Code::Cancelled => Some(ErrorKind::Canceled),
        _ => Some(spark_kind(&message)),
    };
    match kind {
        None => Error::EngineUnavailable {
            engine: "spark".into(),
            reason: format!("{url} ({message})"),
        },
        Some(kind) => Error::Engine {
            engine: "spark".into(),
            kind,
            message,
        },
    }
}

/// Classifies a Spark error by its error class (`[UNRESOLVED_COLUMN...]` prefixes).
fn spark_kind(message: &str) -> ErrorKind {
    let class = message
        .strip_prefix('[')
        .and_then(|m| m.split(']').next())
        .unwrap_or_default();
    let class = class.split('.').next().unwrap_or_default();
    match class {
        "PARSE_SYNTAX_ERROR" => ErrorKind::Syntax,
        "UNRESOLVED_COLUMN" => ErrorKind::UndefinedColumn,
        "TABLE_OR_VIEW_NOT_FOUND" | "SCHEMA_NOT_FOUND" => ErrorKind::UndefinedTable,
        "UNRESOLVED_ROUTINE" => ErrorKind::UndefinedFunction,
        "DATATYPE_MISMATCH" => ErrorKind::DatatypeMismatch,
        "DIVIDE_BY_ZERO" | "REMAINDER_BY_ZERO" => ErrorKind::DivisionByZero,
        "ARITHMETIC_OVERFLOW" | "CAST_OVERFLOW" | "NUMERIC_VALUE_OUT_OF_RANGE" => {
            ErrorKind::NumericOutOfRange
        }
        "CAST_INVALID_INPUT" => ErrorKind::DataException,
        "UNSUPPORTED_FEATURE" => ErrorKind::Unsupported,
        "OPERATION_CANCELED" => ErrorKind::Canceled,
        _ => ErrorKind::Internal,
    }
}

/// A running operation; dropping it before the end interrupts it on the server.
struct Operation {
    channel: Channel,
    session_id: String,
    user: proto::UserContext,
    operation_id: String,
    finished: bool,
}

impl Operation {
    /// The server finished the operation: nothing to interrupt.
    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let request = proto::InterruptRequest {
            session_id: self.session_id.clone(),
            user_context: Some(self.user.clone()),
            client_type: Some(CLIENT_TYPE.into()),
            interrupt_type: 3,
            operation_id: Some(self.operation_id.clone()),
        };
        let channel = self.channel.clone();
        rt.spawn(async move {
            let mut grpc = tonic::client::Grpc::new(channel);
            if grpc.ready().await.is_ok() {
                let _: std::result::Result<tonic::Response<proto::InterruptResponse>, _> = grpc
                    .unary(
                        tonic::Request::new(request),
                        PathAndQuery::from_static(INTERRUPT),
                        tonic_prost::ProstCodec::default(),
                    )
                    .await;
            }
        });
    }
}

/// Decodes one Arrow IPC stream (one `ArrowBatch` message) into batches.
fn decode_ipc(data: &[u8]) -> Result<Vec<RecordBatch>> {
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(data), None)
        .map_err(|e| Error::Internal(format!("spark arrow batch: {e}")))?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Internal(format!("spark arrow batch: {e}")))
}

#[async_trait]
impl Engine for SparkEngine {
    fn name(&self) -> &str {
        "spark"
    }

    /// Measured against PostgreSQL (tests/conformance): Spark prints timestamptz without its
    /// offset, floats and intervals its own way (a timestamp difference too), and has its own
    /// decimal division scale; it has no `AT TIME ZONE`.
    fn verified(&self) -> Option<&'static [&'static str]> {
        Some(crate::verified::SPARK)
    }

    fn inexact(&self) -> &'static [Feature] {
        &[
            Feature::TemporalText,
            Feature::IntervalText,
            Feature::FloatText,
            Feature::NumericDivision,
            Feature::NumericAverage,
            Feature::IntegerCast,
            Feature::Concat,
            Feature::Initcap,
            Feature::DateDifference,
            Feature::FractionalDatePart,
            Feature::WeekdayDatePart,
            Feature::AtTimeZone,
            Feature::FloatToNumeric,
            Feature::TimestampDifference,
            Feature::EmbeddedFunction,
            Feature::SessionZone,
        ]
    }

    async fn execute(&self, request: EngineRequest<'_>) -> Result<SendableRecordBatchStream> {
        let (schema, sql) = prepare(
            &request,
            "spark",
            Dialect::Spark {
                catalog: &self.options.catalog,
            },
        )?;
        self.configure().await?;
        let (mut responses, operation_id) = self.start(sql).await?;
        let operation = Operation {
            channel: self.channel.clone(),
            session_id: self.session_id.clone(),
            user: self.user(),
            operation_id,
            finished: false,
        };
        // Analysis errors arrive as the first message of the stream: surface them here.
        let first = match responses.next().await {
            Some(Ok(r)) => Some(r),
            Some(Err(s)) => return Err(self.status_error(&s)),
            None => None,
        };
        let unavailable_url = self.options.url.clone();
        let stream = futures::stream::unfold(
            (
                responses,
                operation,
                first,
                Vec::<RecordBatch>::new(),
                schema.clone(),
            ),
            move |(mut responses, mut operation, mut first, mut pending, schema)| {
                let url = unavailable_url.clone();
                async move {
                    loop {
                        if let Some(batch) = pending.pop() {
                            let out =
                                conform_batch(&batch, &schema).map_err(Error::into_datafusion);
                            return Some((out, (responses, operation, first, pending, schema)));
                        }
                        let response = match first.take() {
                            Some(r) => r,
                            None => match responses.next().await {
                                Some(Ok(r)) => r,
                                Some(Err(s)) => {
                                    operation.finish();
                                    let e = status_to_error(&url, &s);
                                    return Some((
                                        Err(e.into_datafusion()),
                                        (responses, operation, first, pending, schema),
                                    ));
                                }
                                None => {
                                    operation.finish();
                                    return None;
                                }
                            },
                        };
                        if let Some(batch) = response.arrow_batch
                            && batch.row_count > 0
                        {
                            match decode_ipc(&batch.data) {
                                Ok(mut batches) => {
                                    batches.reverse();
                                    pending = batches;
                                }
                                Err(e) => {
                                    return Some((
                                        Err(e.into_datafusion()),
                                        (responses, operation, first, pending, schema),
                                    ));
                                }
                            }
                        }
                    }
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            stream,
        )))
    }

    async fn health(&self) -> Result<()> {
        tokio::time::timeout(Duration::from_secs(5), self.run("SELECT 1"))
            .await
            .map_err(|_| self.unavailable("no answer to SELECT 1 within 5 s"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes_map_to_kinds() {
        assert_eq!(
            spark_kind("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column ... cannot be resolved"),
            ErrorKind::UndefinedColumn
        );
        assert_eq!(
            spark_kind("[PARSE_SYNTAX_ERROR] Syntax error at or near 'FROM'"),
            ErrorKind::Syntax
        );
        assert_eq!(spark_kind("something else"), ErrorKind::Internal);
    }
}

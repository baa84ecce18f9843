//! The Arrow Flight SQL endpoint: the same [`GatewayService`] as pgwire, answering in Arrow.
//!
//! Statements and prepared statements (create, bind by DoPut, execute, close), the metadata
//! commands clients call before querying (SqlInfo, catalogs, schemas, tables with their Arrow
//! schemas, table types, XDBC type info, keys), and errors as gRPC statuses with the meaning of
//! the pgwire SQLSTATEs. Results stream batch by batch; a client that goes away drops the stream
//! and with it the query.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo,
    CommandGetTableTypes, CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, Nullable,
    ProstMessageExt, Searchable, SqlInfo, TicketStatementQuery, XdbcDataType,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::Statement;
use futures::{Stream, TryStreamExt};
use lakegate_engines::ErrorKind;
use lakegate_engines::engine::Described;
use prost::Message;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use crate::error::{Error, Result};
use crate::service::{GatewayService, QueryOutput};
use crate::session::Session;

/// The Flight SQL endpoint, bound and ready to serve.
pub struct FlightServer {
    listener: tokio::net::TcpListener,
    service: FlightSqlFrontend,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl FlightServer {
    /// Binds `addr` (port 0 picks a free port).
    ///
    /// # Errors
    /// [`Error::Bind`] naming `flight.listen`.
    pub async fn bind(addr: SocketAddr, service: FlightSqlFrontend) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind {
                setting: "flight.listen",
                addr: addr.to_string(),
                source,
            })?;
        Ok(Self {
            listener,
            service,
            tls: None,
        })
    }

    /// Serves gRPC over TLS (ALPN h2) with `acceptor`, only that, when one is given.
    pub fn with_tls(mut self, acceptor: Option<tokio_rustls::TlsAcceptor>) -> Self {
        self.tls = acceptor;
        self
    }

    /// The address actually bound.
    ///
    /// # Errors
    /// When the OS cannot tell.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) {
        let auth = self.service.service.auth().clone();
        let router = tonic::transport::Server::builder()
            .layer(tower::layer::layer_fn(move |inner| AuthGate {
                inner,
                auth: auth.clone(),
            }))
            .add_service(FlightServiceServer::new(self.service));
        let served = match self.tls {
            None => {
                let incoming = TcpIncoming::from(self.listener).with_nodelay(Some(true));
                router
                    .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
                    .await
            }
            Some(acceptor) => {
                let incoming = tls_incoming(self.listener, acceptor, shutdown.clone());
                router
                    .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
                    .await
            }
        };
        match served {
            Ok(()) => info!("flight endpoint stopped"),
            Err(e) => warn!(error = %e, "flight endpoint failed"),
        }
    }
}

/// A TLS connection for tonic (which serves any stream that can tell its peer).
struct TlsConn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl tokio::io::AsyncRead for TlsConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Accepted connections after their TLS handshake (each handshake runs in its own task with
/// a 10 s limit, so a slow or silent client delays nobody else).
fn tls_incoming(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    shutdown: CancellationToken,
) -> impl futures::Stream<Item = std::io::Result<TlsConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<TlsConn>(64);
    tokio::spawn(async move {
        while let Some((socket, peer)) = super::accept(&listener, &shutdown, "flight.listen").await
        {
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    acceptor.accept(socket),
                )
                .await;
                match handshake {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(TlsConn(tls)).await;
                    }
                    Ok(Err(e)) => debug!(%peer, error = %e, "flight TLS handshake failed"),
                    Err(_) => debug!(%peer, "flight TLS handshake timed out"),
                }
            });
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|conn| (Ok(conn), rx))
    })
}

/// Set by [`AuthGate`] to the authenticated user (a client's own value is removed).
pub const USER_HEADER: &str = "x-lakegate-authenticated-user";

/// Checks every Flight call but the handshake for a live bearer token when users are
/// configured (the handshake itself checks basic auth), and passes the user on.
#[derive(Clone)]
struct AuthGate<S> {
    inner: S,
    auth: Arc<crate::auth::Auth>,
}

impl<S, B> tower::Service<http::Request<B>> for AuthGate<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        req.headers_mut().remove(USER_HEADER);
        if self.auth.required() && !req.uri().path().ends_with("/Handshake") {
            let user = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .and_then(|t| self.auth.check_token(t.trim()));
            match user.and_then(|u| http::HeaderValue::from_str(&u).ok()) {
                Some(u) => {
                    req.headers_mut().insert(USER_HEADER, u);
                }
                None => {
                    let denied = Status::unauthenticated(
                        "missing, unknown or expired bearer token: authenticate with a handshake \
                         (basic auth) first",
                    );
                    return Box::pin(async move { Ok(denied.into_http()) });
                }
            }
        }
        // The clone is the one that was made ready; keep the ready one for this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move { inner.call(req).await })
    }
}

/// A prepared statement: its parsed form, description and bound parameters.
/// Request header that pins an engine for the call (like `SET lakegate.engine`).
pub const ENGINE_HEADER: &str = "x-lakegate-engine";
/// Request header naming the routing group (like `SET lakegate.group`).
pub const GROUP_HEADER: &str = "x-lakegate-group";
/// Request header carrying the client tag routing rules match (`lakegate.tag`).
pub const TAG_HEADER: &str = "x-lakegate-tag";

struct PreparedStatement {
    statement: Statement,
    described: Option<Described>,
    params: Option<ParamValues>,
}

/// The Flight SQL service over the gateway.
pub struct FlightSqlFrontend {
    service: Arc<GatewayService>,
    database: String,
    default_schema: String,
    prepared: Mutex<HashMap<Vec<u8>, PreparedStatement>>,
    sql_info: SqlInfoData,
    xdbc: XdbcTypeInfoData,
}

/// Maps a gateway error to a gRPC status with the same meaning as its SQLSTATE.
pub(crate) fn to_status(e: &Error) -> Status {
    let message = e.to_string();
    match e.kind() {
        ErrorKind::Syntax
        | ErrorKind::InvalidParameter
        | ErrorKind::DatatypeMismatch
        | ErrorKind::DataException => Status::invalid_argument(message),
        ErrorKind::UndefinedTable
        | ErrorKind::UndefinedColumn
        | ErrorKind::UndefinedObject
        | ErrorKind::UndefinedFunction
        | ErrorKind::UndefinedCursor => Status::not_found(message),
        ErrorKind::Unsupported => Status::unimplemented(message),
        ErrorKind::Canceled => Status::cancelled(message),
        ErrorKind::Unavailable => Status::unavailable(message),
        ErrorKind::TooManyQueries => Status::resource_exhausted(message),
        ErrorKind::InsufficientPrivilege => Status::permission_denied(message),
        ErrorKind::LimitExceeded | ErrorKind::TooComplex => Status::resource_exhausted(message),
        ErrorKind::DuplicateCursor => Status::already_exists(message),
        ErrorKind::TransactionAborted | ErrorKind::CantChangeSetting => {
            Status::failed_precondition(message)
        }
        ErrorKind::Internal => Status::internal(message),
    }
}

fn status(e: Error) -> Status {
    to_status(&e)
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

fn batches_response(schema: SchemaRef, batches: Vec<RecordBatch>) -> Response<DoGetStream> {
    let stream = futures::stream::iter(batches.into_iter().map(Ok));
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(stream)
        .map_err(|e| Status::internal(e.to_string()));
    Response::new(Box::pin(encoded))
}

fn flight_info(
    schema: &Schema,
    ticket: Vec<u8>,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(internal)?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let options = arrow::ipc::writer::IpcWriteOptions::default();
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &options)
        .try_into()
        .map_err(internal)?;
    Ok(bytes)
}

fn parameter_schema(described: Option<&Described>) -> Schema {
    let fields: Vec<Field> = described
        .map(|d| {
            d.param_types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Field::new(
                        format!("${}", i + 1),
                        t.clone().unwrap_or(DataType::Null),
                        true,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Schema::new(fields)
}

impl FlightSqlFrontend {
    /// A Flight SQL frontend over `service`.
    ///
    /// # Errors
    /// When the static SqlInfo / XDBC tables cannot be built.
    pub fn try_new(
        service: Arc<GatewayService>,
        database: String,
        default_schema: String,
    ) -> Result<Self> {
        let mut info = SqlInfoDataBuilder::new();
        info.append(SqlInfo::FlightSqlServerName, "lakegate");
        info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        info.append(SqlInfo::FlightSqlServerArrowVersion, "58");
        info.append(SqlInfo::FlightSqlServerReadOnly, true);
        info.append(SqlInfo::FlightSqlServerSql, true);
        info.append(SqlInfo::FlightSqlServerSubstrait, false);
        info.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        info.append(SqlInfo::FlightSqlServerCancel, false);
        info.append(SqlInfo::SqlDdlCatalog, false);
        info.append(SqlInfo::SqlDdlSchema, false);
        info.append(SqlInfo::SqlDdlTable, false);
        info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        info.append(SqlInfo::SqlIdentifierCase, 1i32); // case-insensitive, as PostgreSQL folds
        info.append(SqlInfo::SqlQuotedIdentifierCase, 3i32); // case-sensitive
        info.append(SqlInfo::SqlSchemaTerm, "schema");
        info.append(SqlInfo::SqlCatalogTerm, "database");
        info.append(SqlInfo::SqlSupportsColumnAliasing, true);
        let sql_info = info.build().map_err(|e| Error::Unsupported {
            what: e.to_string(),
        })?;
        let mut xdbc = XdbcTypeInfoDataBuilder::new();
        for (name, t) in [
            ("boolean", XdbcDataType::XdbcBit),
            ("smallint", XdbcDataType::XdbcSmallint),
            ("integer", XdbcDataType::XdbcInteger),
            ("bigint", XdbcDataType::XdbcBigint),
            ("real", XdbcDataType::XdbcFloat),
            ("double precision", XdbcDataType::XdbcDouble),
            ("numeric", XdbcDataType::XdbcDecimal),
            ("text", XdbcDataType::XdbcVarchar),
            ("bytea", XdbcDataType::XdbcBinary),
            ("date", XdbcDataType::XdbcDate),
            ("time", XdbcDataType::XdbcTime),
            ("timestamp", XdbcDataType::XdbcTimestamp),
        ] {
            xdbc.append(XdbcTypeInfo {
                type_name: name.into(),
                data_type: t,
                nullable: Nullable::NullabilityNullable,
                case_sensitive: t == XdbcDataType::XdbcVarchar,
                searchable: Searchable::Full,
                local_type_name: Some(name.into()),
                sql_data_type: t,
                ..Default::default()
            });
        }
        let xdbc = xdbc.build().map_err(|e| Error::Unsupported {
            what: e.to_string(),
        })?;
        Ok(Self {
            service,
            database,
            default_schema,
            prepared: Mutex::new(HashMap::new()),
            sql_info,
            xdbc,
        })
    }

    /// A session for one call; the `x-lakegate-engine` header pins an engine, as
    /// `SET lakegate.engine` does over pgwire.
    fn session(&self, metadata: &tonic::metadata::MetadataMap) -> Result<Session, Status> {
        let user = metadata
            .get(USER_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("flight");
        let mut session = Session::new(user, &self.default_schema).with_frontend("flight");
        for (header, setting) in [
            (GROUP_HEADER, "lakegate.group"),
            (TAG_HEADER, "lakegate.tag"),
        ] {
            if let Some(value) = metadata.get(header) {
                let value = value
                    .to_str()
                    .map_err(|_| Status::invalid_argument(format!("{header} must be text")))?;
                session.set(setting, value).map_err(status)?;
            }
        }
        if let Some(engine) = metadata.get(ENGINE_HEADER) {
            let engine = engine
                .to_str()
                .map_err(|_| Status::invalid_argument(format!("{ENGINE_HEADER} must be text")))?;
            session.set("lakegate.engine", engine).map_err(status)?;
        }
        Ok(session)
    }

    fn parse_one(&self, sql: &str) -> Result<Statement, Status> {
        let sql = numbered_placeholders(sql);
        let mut statements = self.service.parse(&sql).map_err(status)?;
        match statements.len() {
            1 => Ok(statements.remove(0)),
            0 => Err(Status::invalid_argument("empty query")),
            _ => Err(Status::invalid_argument("one statement per request")),
        }
    }

    async fn run(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut session = self.session(metadata)?;
        let output = self
            .service
            .execute(statement, params, &mut session)
            .await
            .map_err(status)?;
        let QueryOutput::Rows { stream, .. } = output else {
            return Ok(batches_response(Arc::new(Schema::empty()), vec![]));
        };
        let schema = stream.schema();
        let batches = stream.map_err(|e| FlightError::ExternalError(Box::new(e)));
        let encoded = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(|e| match e {
                FlightError::ExternalError(inner) => {
                    match inner.downcast::<datafusion::error::DataFusionError>() {
                        Ok(df) => to_status(&Error::Engine((*df).into())),
                        Err(other) => Status::internal(other.to_string()),
                    }
                }
                other => Status::internal(other.to_string()),
            });
        Ok(Response::new(Box::pin(encoded)))
    }

    async fn describe(
        &self,
        statement: &Statement,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Option<Described>, Status> {
        let mut session = self.session(metadata)?;
        self.service
            .describe(statement, &mut session)
            .await
            .map_err(status)
    }

    async fn tables_batch(
        &self,
        query: CommandGetTables,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<RecordBatch, Status> {
        let include_schema = query.include_schema;
        let mut builder = query.into_builder();
        let directory = self
            .service
            .directory_for(self.session(metadata)?.user())
            .await
            .map_err(status)?;
        for (schema, tables) in &directory.schemas {
            for table in tables {
                let table_schema = if include_schema {
                    match self.service.table_schema(schema, table).await {
                        Ok(s) => s,
                        Err(_) => continue,
                    }
                } else {
                    Arc::new(Schema::empty())
                };
                builder
                    .append(&self.database, schema, table, "TABLE", &table_schema)
                    .map_err(internal)?;
            }
        }
        builder.build().map_err(internal)
    }
}

/// Flight SQL clients (ADBC, JDBC) write parameters as `?`; the PostgreSQL dialect numbers
/// them. Rewrites each `?` outside quotes and comments to `$1`, `$2`, ...
pub(crate) fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut n = 0;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // copy up to the closing quote; a doubled quote is an escaped one
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == c {
                        if chars.peek() == Some(&c) {
                            out.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                out.push(c);
                let mut prev = ' ';
                for d in chars.by_ref() {
                    out.push(d);
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
            }
            '?' => {
                n += 1;
                out.push_str(&format!("${n}"));
            }
            _ => out.push(c),
        }
    }
    out
}

fn keys_schema(imported_or_exported: bool) -> SchemaRef {
    let text = |n: &str, nullable| Field::new(n, DataType::Utf8, nullable);
    Arc::new(Schema::new(if imported_or_exported {
        vec![
            text("pk_catalog_name", true),
            text("pk_db_schema_name", true),
            text("pk_table_name", false),
            text("pk_column_name", false),
            text("fk_catalog_name", true),
            text("fk_db_schema_name", true),
            text("fk_table_name", false),
            text("fk_column_name", false),
            Field::new("key_sequence", DataType::Int32, false),
            text("fk_key_name", true),
            text("pk_key_name", true),
            Field::new("update_rule", DataType::UInt8, false),
            Field::new("delete_rule", DataType::UInt8, false),
        ]
    } else {
        vec![
            text("catalog_name", true),
            text("db_schema_name", true),
            text("table_name", false),
            text("column_name", false),
            Field::new("key_sequence", DataType::Int32, false),
            text("key_name", true),
        ]
    }))
}

/// Parameters bound by DoPut: the first row of the batch, cast to the planned types.
fn params_from_batch(
    batch: &RecordBatch,
    described: Option<&Described>,
) -> Result<ParamValues, Status> {
    if batch.num_rows() == 0 {
        return Ok(ParamValues::List(vec![]));
    }
    let mut values = Vec::with_capacity(batch.num_columns());
    for (i, column) in batch.columns().iter().enumerate() {
        let mut value = ScalarValue::try_from_array(column as &ArrayRef, 0).map_err(internal)?;
        if let Some(Some(t)) = described.and_then(|d| d.param_types.get(i))
            && value.data_type() != *t
        {
            value = value
                .cast_to(t)
                .map_err(|e| Status::invalid_argument(format!("parameter ${}: {e}", i + 1)))?;
        }
        values.push(value.into());
    }
    Ok(ParamValues::List(values))
}

#[tonic::async_trait]
impl FlightSqlService for FlightSqlFrontend {
    type FlightService = FlightSqlFrontend;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let auth = self.service.auth();
        let token = if auth.required() {
            // Basic auth in the handshake's headers; the same answer for an unknown user and
            // a wrong password.
            let denied = || Status::unauthenticated("invalid user name or password");
            let (user, password) = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(crate::auth::basic_credentials)
                .ok_or_else(denied)?;
            if !auth.verify(&user, &password) {
                return Err(denied());
            }
            auth.issue_token(&user)
        } else {
            // Trust (loopback): any handshake is accepted and gets a session token.
            format!("lakegate-{}", uuid::Uuid::new_v4())
        };
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let stream = futures::stream::iter(vec![Ok(response)]);
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(stream));
        if let Ok(value) = format!("Bearer {token}").parse() {
            response.metadata_mut().insert("authorization", value);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let statement = self.parse_one(&query.query)?;
        let schema = match self.describe(&statement, request.metadata()).await? {
            Some(d) => d.schema,
            None => Arc::new(Schema::empty()),
        };
        let ticket = TicketStatementQuery {
            statement_handle: query.query.into_bytes().into(),
        };
        flight_info(
            &schema,
            ticket.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let sql = String::from_utf8(ticket.statement_handle.to_vec())
            .map_err(|_| Status::invalid_argument("statement handle is not UTF-8 SQL"))?;
        let statement = self.parse_one(&sql)?;
        self.run(&statement, None, request.metadata()).await
    }

    async fn do_put_statement_update(
        &self,
        _ticket: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(Status::unimplemented(
            "lakegate is a read-only gateway: updates are not supported (write through your Iceberg writer)",
        ))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let statement = self.parse_one(&query.query)?;
        let described = self.describe(&statement, request.metadata()).await?;
        let dataset = described
            .as_ref()
            .map(|d| d.schema.clone())
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let result = ActionCreatePreparedStatementResult {
            prepared_statement_handle: uuid::Uuid::new_v4().as_bytes().to_vec().into(),
            dataset_schema: ipc_schema(&dataset)?,
            parameter_schema: ipc_schema(&parameter_schema(described.as_ref()))?,
        };
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        prepared.insert(
            result.prepared_statement_handle.to_vec(),
            PreparedStatement {
                statement,
                described,
                params: None,
            },
        );
        Ok(result)
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = query.prepared_statement_handle.to_vec();
        let described = {
            let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            let entry = prepared
                .get(&handle)
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            entry.described.clone()
        };
        let stream = request.into_inner().map_err(FlightError::from);
        let batches: Vec<RecordBatch> =
            arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(stream)
                .try_collect()
                .await
                .map_err(|e| Status::invalid_argument(format!("cannot decode parameters: {e}")))?;
        let params = match batches.first() {
            Some(batch) => Some(params_from_batch(batch, described.as_ref())?),
            None => None,
        };
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = prepared.get_mut(&handle) {
            entry.params = params;
        }
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle.into()),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = {
            let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            let entry = prepared
                .get(cmd.prepared_statement_handle.as_ref())
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            entry
                .described
                .as_ref()
                .map(|d| d.schema.clone())
                .unwrap_or_else(|| Arc::new(Schema::empty()))
        };
        flight_info(&schema, cmd.as_any().encode_to_vec(), request.into_inner())
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let (statement, params) = {
            let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            let entry = prepared
                .get(query.prepared_statement_handle.as_ref())
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            (entry.statement.clone(), entry.params.clone())
        };
        self.run(&statement, params.as_ref(), request.metadata())
            .await
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        prepared.remove(query.prepared_statement_handle.as_ref());
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &query.into_builder().schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(&self.database);
        let batch = builder.build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &query.clone().into_builder().schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        let user = self.session(request.metadata())?.user().to_string();
        let directory = self.service.directory_for(&user).await.map_err(status)?;
        for schema in directory.schemas.keys() {
            builder.append(&self.database, schema);
        }
        let batch = builder.build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &query.clone().into_builder().schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = self.tables_batch(query, request.metadata()).await?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &query.into_builder().schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        let batch = builder.build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &query.clone().into_builder(&self.sql_info).schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = query
            .into_builder(&self.sql_info)
            .build()
            .map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &query.into_builder(&self.xdbc).schema(),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = query.into_builder(&self.xdbc).build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &keys_schema(false),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        // Iceberg tables have no primary keys lakegate can vouch for.
        Ok(batches_response(keys_schema(false), vec![]))
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &keys_schema(true),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(batches_response(keys_schema(true), vec![]))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        flight_info(
            &keys_schema(true),
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(batches_response(keys_schema(true), vec![]))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_become_numbered_placeholders_outside_quotes() {
        assert_eq!(
            numbered_placeholders(
                "SELECT '?', \"a?\" FROM t WHERE x = ? AND y = ? -- ?\n AND z = ?"
            ),
            "SELECT '?', \"a?\" FROM t WHERE x = $1 AND y = $2 -- ?\n AND z = $3"
        );
        assert_eq!(
            numbered_placeholders("SELECT 'it''s ?' , ?"),
            "SELECT 'it''s ?' , $1"
        );
    }

    #[test]
    fn statuses_carry_the_meaning_of_sqlstates() {
        let syntax = to_status(&Error::Syntax {
            message: "x".into(),
        });
        assert_eq!(syntax.code(), tonic::Code::InvalidArgument);
        let missing = to_status(&Error::Engine(lakegate_engines::Error::TableNotFound {
            name: "t".into(),
        }));
        assert_eq!(missing.code(), tonic::Code::NotFound);
        assert_eq!(to_status(&Error::Canceled).code(), tonic::Code::Cancelled);
    }
}

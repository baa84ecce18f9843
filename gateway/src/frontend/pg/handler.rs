//! pgwire handlers: startup (session creation, ParameterStatus), simple and extended query.
//! They translate protocol messages to [`GatewayService`] calls and results back; nothing about
//! planning lives here.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::Statement;
use futures::{Sink, SinkExt, StreamExt};
use lakegate_engines::ErrorKind;
use lakegate_engines::engine::Described;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::{DefaultServerParameterProvider, StartupHandler};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::PortalExecutionState;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::send_execution_response;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler, send_describe_response};
use pgwire::api::results::{DescribePortalResponse, FieldInfo, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, ErrorHandler, PgWireServerHandlers, Type,
};
use pgwire::api::{DEFAULT_NAME, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::extendedquery::{Describe, Execute, TARGET_TYPE_BYTE_PORTAL};
use pgwire::messages::response::EmptyQueryResponse;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::ParameterStatus;
use tokio::sync::Mutex;
use tracing::debug;

use super::cancel::{Cancels, PgCancel, QueryCancel};
use super::encode::{fields, format_options, query_response};
use super::idle::{Activity, Busy};
use super::sqlstate::sqlstate;
use crate::error::Error;
use crate::service::{GatewayService, QueryOutput, TransactionEffect};
use crate::session::{SERVER_VERSION, Session, reported_name};

/// The connection's session, kept in pgwire's per-connection extensions.
type SessionCell = Mutex<Session>;

/// Maps a gateway error to a Postgres ErrorResponse with its SQLSTATE.
pub(crate) fn to_pg_error(e: &Error) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        sqlstate(e.kind()).to_string(),
        e.to_string(),
    )))
}

fn pg_error(e: Error) -> PgWireError {
    to_pg_error(&e)
}

fn aborted() -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        sqlstate(ErrorKind::TransactionAborted).into(),
        "current transaction is aborted, commands ignored until end of transaction block".into(),
    )))
}

/// Whether a statement may run in a failed transaction (only ending it may).
fn ends_transaction(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Rollback {
            savepoint: None,
            ..
        } | Statement::Commit { .. }
    )
}

/// The pgwire handler set for one gateway.
pub struct PgHandlers {
    query: Arc<PgQueryHandler>,
    startup: Arc<PgStartup>,
    cancel: Arc<PgCancel>,
    auth: Arc<crate::auth::Auth>,
    limits: Arc<crate::limits::ConnectionLimits>,
    require_tls: bool,
}

impl PgHandlers {
    /// Handlers over `service`; `default_schema` seeds each session's `search_path`.
    pub fn new(
        service: Arc<GatewayService>,
        default_schema: String,
        limits: crate::limits::LimitsConfig,
        require_tls: bool,
    ) -> Self {
        let connections = Arc::new(ConnectionManager::new());
        let cancels = Arc::new(Cancels::default());
        let auth = service.auth().clone();
        let idle_in_transaction = limits.idle_in_transaction_timeout;
        Self {
            auth,
            limits: Arc::new(crate::limits::ConnectionLimits::new(limits)),
            require_tls,
            query: Arc::new(PgQueryHandler {
                service: service.clone(),
                parser: Arc::new(PgParser { service }),
            }),
            startup: Arc::new(PgStartup {
                connections: connections.clone(),
                cancels: cancels.clone(),
                default_schema,
                idle_in_transaction,
            }),
            cancel: Arc::new(PgCancel {
                cancels,
                manager: connections,
            }),
        }
    }
}

/// One connection's handlers: the shared ones, with a startup that registers the
/// connection's [`Activity`] (watched for the idle-in-transaction timeout).
pub struct ConnHandlers {
    shared: Arc<PgHandlers>,
    activity: Arc<Activity>,
}

impl PgHandlers {
    /// The handlers for one connection whose activity `activity` tracks.
    pub fn for_connection(self: &Arc<Self>, activity: Arc<Activity>) -> ConnHandlers {
        ConnHandlers {
            shared: self.clone(),
            activity,
        }
    }
}

impl PgWireServerHandlers for ConnHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.shared.query.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.shared.query.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        // Per connection: the SCRAM exchange keeps state.
        let s = &self.shared;
        Arc::new(ConnStartup::new(
            s.startup.clone(),
            s.auth.clone(),
            s.limits.clone(),
            s.require_tls,
            self.activity.clone(),
        ))
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.shared.cancel.clone()
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(LogErrors)
    }
}

struct LogErrors;

impl ErrorHandler for LogErrors {
    fn on_error<C: ClientInfo>(&self, _client: &C, error: &mut PgWireError) {
        debug!(error = %error, "statement failed");
    }
}

/// One connection's startup: trust (the session opens at once) or SCRAM-SHA-256 against the
/// configured users (the session opens once the exchange succeeds); failures are counted.
pub struct ConnStartup {
    session: Arc<PgStartup>,
    auth: Arc<crate::auth::Auth>,
    limits: Arc<crate::limits::ConnectionLimits>,
    require_tls: bool,
    scram: Option<SASLAuthStartupHandler<DefaultServerParameterProvider>>,
    /// The connection's activity, watched for the idle-in-transaction timeout.
    activity: Arc<Activity>,
}

impl ConnStartup {
    fn new(
        session: Arc<PgStartup>,
        auth: Arc<crate::auth::Auth>,
        limits: Arc<crate::limits::ConnectionLimits>,
        require_tls: bool,
        activity: Arc<Activity>,
    ) -> Self {
        let scram = auth.required().then(|| {
            let mut scram = ScramAuth::new(auth.clone());
            scram.set_iterations(crate::auth::ITERATIONS);
            SASLAuthStartupHandler::new(Arc::new(DefaultServerParameterProvider::default()))
                .with_scram(scram)
                .with_connection_manager(session.connections.clone())
        });
        Self {
            session,
            auth,
            limits,
            require_tls,
            scram,
            activity,
        }
    }
}

#[async_trait]
impl StartupHandler for ConnStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let pgwire::messages::PgWireFrontendMessage::Startup(startup) = &message {
            if self.require_tls && !client.is_secure() {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".into(),
                    "28000".into(),
                    "this server requires TLS (tls.require): connect with sslmode=require or \
                     stronger"
                        .into(),
                ))));
            }
            // Held in the connection's extensions: released when the connection goes.
            let user = startup.parameters.get("user").cloned().unwrap_or_default();
            let slot = self.limits.acquire(&user).map_err(|why| {
                PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".into(),
                    sqlstate(ErrorKind::TooManyQueries).into(),
                    why,
                )))
            })?;
            client.session_extensions().insert(slot);
            self.activity.set_tls(client.is_secure());
            client.session_extensions().insert(self.activity.clone());
        }
        let Some(scram) = &self.scram else {
            return self.session.on_startup(client, message).await;
        };
        match scram.on_startup(client, message).await {
            Ok(()) => {
                if matches!(client.state(), PgWireConnectionState::ReadyForQuery)
                    && client.session_extensions().get::<SessionCell>().is_none()
                {
                    self.session.open_session(client).await?;
                    client.flush().await?;
                }
                Ok(())
            }
            Err(PgWireError::InvalidPassword(_)) => {
                // PostgreSQL's wording, 28P01, with the user named as the client gave it:
                // the same answer for an unknown user and a wrong password.
                self.auth.failed();
                let user = client.metadata().get("user").cloned().unwrap_or_default();
                tracing::info!(%user, "login failed");
                Err(PgWireError::InvalidPassword(user))
            }
            Err(e) => Err(e),
        }
    }
}

/// Startup: creates the session from the startup parameters and reports settings.
pub struct PgStartup {
    connections: Arc<ConnectionManager>,
    cancels: Arc<Cancels>,
    default_schema: String,
    /// `[limits] idle_in_transaction_timeout`: each session's starting value.
    idle_in_transaction: std::time::Duration,
}

/// Startup parameters that are connection facts, not settings.
const NOT_SETTINGS: [&str; 4] = ["user", "database", "options", "replication"];

/// `-c name=value` / `--name=value` pairs from the `options` startup parameter.
pub(crate) fn parse_options(options: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        let pair = if w == "-c" {
            words.next()
        } else if let Some(rest) = w.strip_prefix("-c") {
            Some(rest)
        } else {
            w.strip_prefix("--")
        };
        if let Some((k, v)) = pair.and_then(|p| p.split_once('=')) {
            out.push((k.replace('-', "_"), v.to_string()));
        }
    }
    out
}

#[async_trait]
impl NoopStartupHandler for PgStartup {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }

    async fn post_startup<C>(
        &self,
        client: &mut C,
        _message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.open_session(client).await
    }
}

impl PgStartup {
    /// Creates the session from the startup parameters (the user is the authenticated one)
    /// and reports the settings clients track.
    async fn open_session<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let metadata = client.metadata().clone();
        let user = metadata
            .get("user")
            .cloned()
            .unwrap_or_else(|| "lakegate".into());
        // The server's default first: the client's own parameters override it.
        let mut startup: Vec<(String, String)> = vec![(
            "idle_in_transaction_session_timeout".into(),
            self.idle_in_transaction.as_millis().to_string(),
        )];
        startup.extend(
            metadata
                .iter()
                .filter(|(k, _)| !NOT_SETTINGS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        if let Some(options) = metadata.get("options") {
            startup.extend(parse_options(options));
        }
        let mut session = Session::new(&user, &self.default_schema).with_frontend("pg");
        session.apply_startup(&startup).map_err(|e| {
            PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                sqlstate(e.kind()).into(),
                e.to_string(),
            )))
        })?;
        let mut report: Vec<(String, String)> = vec![
            (
                "server_version".into(),
                format!("{SERVER_VERSION} (lakegate {})", env!("CARGO_PKG_VERSION")),
            ),
            ("is_superuser".into(), "off".into()),
        ];
        for (name, value) in session.values() {
            if let Some(reported) = reported_name(name) {
                report.push((reported.to_string(), value.clone()));
            }
        }
        for (name, value) in report {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name, value,
                )))
                .await?;
        }
        client
            .session_extensions()
            .insert::<SessionCell>(Mutex::new(session));
        let (pid, secret) = client.pid_and_secret_key();
        let cancel = self.cancels.register(pid, secret);
        client
            .session_extensions()
            .insert::<Arc<QueryCancel>>(cancel);
        Ok(())
    }
}

fn session_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<SessionCell> {
    client
        .session_extensions()
        .get_or_insert_with(|| Mutex::new(Session::new("lakegate", "public").with_frontend("pg")))
}

/// Casts `$n` to the type the client declared for it in Parse, so the engine can plan calls
/// whose argument types it could not infer (SQLAlchemy's `pg_get_constraintdef(oid, $1)`).
fn type_placeholders(statement: &mut Statement, types: &[Option<Type>]) {
    use datafusion::sql::sqlparser::ast::{
        DataType as SqlType, Expr, Value, visit_expressions_mut,
    };
    if types.iter().all(Option::is_none) {
        return;
    }
    let sql_type = |t: &Type| -> Option<SqlType> {
        Some(match *t {
            Type::BOOL => SqlType::Boolean,
            Type::INT2 => SqlType::SmallInt(None),
            Type::INT4 => SqlType::Int(None),
            Type::INT8 => SqlType::BigInt(None),
            Type::FLOAT4 => SqlType::Real,
            Type::FLOAT8 => SqlType::DoublePrecision,
            Type::TEXT | Type::VARCHAR => SqlType::Text,
            Type::DATE => SqlType::Date,
            _ => return None,
        })
    };
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Value(v) = expr
            && let Value::Placeholder(p) = &v.value
            && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
            && let Some(Some(t)) = types.get(n.wrapping_sub(1))
            && let Some(data_type) = sql_type(t)
        {
            *expr = Expr::Cast {
                kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                array: false,
                expr: Box::new(expr.clone()),
                data_type,
                format: None,
            };
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// A statement prepared by Parse: its SQL, AST and description.
#[derive(Debug, Clone)]
pub struct PgStatement {
    statement: Option<Statement>,
    described: Option<Described>,
}

/// Parses and describes statements for the extended protocol.
pub struct PgParser {
    service: Arc<GatewayService>,
}

#[async_trait]
impl QueryParser for PgParser {
    type Statement = PgStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Self::Statement>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.service.parse(sql).map_err(pg_error)?;
        if statements.len() > 1 {
            return Err(to_pg_error(&Error::Syntax {
                message: "cannot insert multiple commands into a prepared statement".into(),
            }));
        }
        let Some(mut statement) = statements.pop() else {
            return Ok(PgStatement {
                statement: None,
                described: None,
            });
        };
        type_placeholders(&mut statement, types);
        let session = session_of(client);
        let described = if client.transaction_status() == TransactionStatus::Error {
            None
        } else {
            let mut session = session.lock().await;
            self.service
                .describe(&statement, &mut session)
                .await
                .map_err(pg_error)?
        };
        Ok(PgStatement {
            statement: Some(statement),
            described,
        })
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        let Some(described) = &stmt.described else {
            return Ok(vec![]);
        };
        described
            .param_types
            .iter()
            .map(|t| match t {
                Some(t) => arrow_pg::datatypes::into_pg_type(t),
                None => Ok(Type::UNKNOWN),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match &stmt.described {
            Some(d) => fields(
                &d.schema,
                column_format.unwrap_or(&Format::UnifiedText),
                Arc::new(pgwire::types::format::FormatOptions::default()),
            ),
            None => Ok(vec![]),
        }
    }
}

/// Simple and extended query handling.
pub struct PgQueryHandler {
    service: Arc<GatewayService>,
    parser: Arc<PgParser>,
}

impl PgQueryHandler {
    /// Runs one statement, keeping the connection's [`Activity`] current: busy while it runs
    /// and its rows stream, then whether a transaction block is open and the session's
    /// idle-in-transaction timeout.
    async fn run<C>(
        &self,
        client: &mut C,
        statement: &Statement,
        params: Option<&datafusion::common::ParamValues>,
        format: &Format,
    ) -> Result<Response, Error>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let activity = client.session_extensions().get::<Arc<Activity>>();
        let busy = activity.as_ref().map(|a| a.begin());
        let result = self
            .run_statement(client, statement, params, format, busy)
            .await;
        if let Some(activity) = activity {
            let opened = match &result {
                Ok(Response::TransactionStart(_)) => Some(true),
                Ok(Response::TransactionEnd(_)) => Some(false),
                _ => None,
            };
            let timeout = session_of(client)
                .lock()
                .await
                .idle_in_transaction_timeout();
            activity.set(opened, timeout);
        }
        result
    }

    /// Runs one statement and turns its output into a pgwire response (`busy` is held until
    /// its last row is sent).
    async fn run_statement<C>(
        &self,
        client: &mut C,
        statement: &Statement,
        params: Option<&datafusion::common::ParamValues>,
        format: &Format,
        busy: Option<Busy>,
    ) -> Result<Response, Error>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cell = session_of(client);
        let token = client
            .session_extensions()
            .get::<Arc<QueryCancel>>()
            .map(|c| c.start())
            .unwrap_or_default();
        let mut session = cell.lock().await;
        let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(limit) = session.statement_timeout() {
            // The timer cancels the statement's token, planning or streaming alike.
            let (token, flag) = (token.clone(), timed_out.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(limit) => {
                        flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        token.cancel();
                    }
                    _ = token.cancelled() => {}
                }
            });
        }
        let output = tokio::select! {
            output = self.service.execute(statement, params, &mut session) => output?,
            _ = token.cancelled() => {
                return Err(if timed_out.load(std::sync::atomic::Ordering::SeqCst) {
                    Error::Engine(lakegate_engines::Error::TimedOut)
                } else {
                    Error::Canceled
                });
            }
        };
        match output {
            QueryOutput::Rows { stream, tag } => {
                // The session is busy until the last row is sent.
                let schema = stream.schema();
                let stream = Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    stream.map(move |batch| {
                        let _held = &busy;
                        batch
                    }),
                ));
                let response = query_response(
                    stream,
                    tag,
                    format,
                    format_options(&session),
                    token,
                    timed_out,
                )
                .map_err(|e| Error::Unsupported {
                    what: e.to_string(),
                })?;
                Ok(Response::Query(response))
            }
            QueryOutput::Command(cmd) => {
                if let Some((name, value)) = &cmd.changed_setting
                    && let Some(reported) = reported_name(name)
                {
                    let status = ParameterStatus::new(reported.to_string(), value.clone());
                    // A failed send surfaces on the next write; the SET itself succeeded.
                    let _ = client
                        .feed(PgWireBackendMessage::ParameterStatus(status))
                        .await;
                }
                let tag = Tag::new(&cmd.tag);
                Ok(match cmd.transaction {
                    TransactionEffect::Begin => Response::TransactionStart(tag),
                    TransactionEffect::End => Response::TransactionEnd(tag),
                    TransactionEffect::None => Response::Execution(tag),
                })
            }
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for PgQueryHandler {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.service.parse(query).map_err(pg_error)?;
        let mut status = client.transaction_status();
        let mut responses = Vec::with_capacity(statements.len());
        for statement in &statements {
            if status == TransactionStatus::Error && !ends_transaction(statement) {
                responses.push(Response::Error(Box::new(error_info(aborted()))));
                break;
            }
            match self
                .run(client, statement, None, &Format::UnifiedText)
                .await
            {
                Ok(response) => {
                    match &response {
                        Response::TransactionStart(_) => status = TransactionStatus::Transaction,
                        Response::TransactionEnd(_) => status = TransactionStatus::Idle,
                        _ => {}
                    }
                    responses.push(response);
                }
                Err(e) => {
                    // PostgreSQL stops a multi-statement query at the first error.
                    responses.push(Response::Error(Box::new(error_info(to_pg_error(&e)))));
                    break;
                }
            }
        }
        if responses.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        Ok(responses)
    }
}

fn error_info(e: PgWireError) -> ErrorInfo {
    match e {
        PgWireError::UserError(info) => *info,
        other => ErrorInfo::new("ERROR".into(), "XX000".into(), other.to_string()),
    }
}

impl PgQueryHandler {
    async fn execute_streaming<C>(
        &self,
        client: &mut C,
        portal: &Portal<PgStatement>,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = PgStatement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let response = <Self as ExtendedQueryHandler>::do_query(self, client, portal, 0).await?;
        let mut status = client.transaction_status();
        match response {
            Response::Query(mut rows) => {
                let tag = rows.command_tag().to_string();
                let mut count = 0usize;
                while let Some(row) = rows.data_rows().next().await {
                    client.feed(PgWireBackendMessage::DataRow(row?)).await?;
                    count += 1;
                }
                let done = Tag::new(&tag).with_rows(count);
                client
                    .send(PgWireBackendMessage::CommandComplete(done.into()))
                    .await?;
            }
            Response::EmptyQuery => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
            }
            Response::Execution(tag) => send_execution_response(client, tag).await?,
            Response::TransactionStart(tag) => {
                send_execution_response(client, tag).await?;
                status = status.to_in_transaction_state();
            }
            Response::TransactionEnd(tag) => {
                send_execution_response(client, tag).await?;
                status = status.to_idle_state();
                client.portal_store().rm_portal(DEFAULT_NAME);
            }
            Response::Error(e) => {
                client
                    .send(PgWireBackendMessage::ErrorResponse((*e).into()))
                    .await?;
                status = status.to_error_state();
            }
            Response::CopyIn(_) | Response::CopyOut(_) | Response::CopyBoth(_) => {
                return Err(to_pg_error(&Error::Unsupported {
                    what: "COPY is not supported".into(),
                }));
            }
        }
        client.set_transaction_status(status);
        Ok(())
    }
}

#[async_trait]
impl ExtendedQueryHandler for PgQueryHandler {
    type Statement = PgStatement;
    type QueryParser = PgParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    /// Execute without a row limit streams rows straight to the socket as batches arrive
    /// (pgwire's default collects the whole result first). With a row limit, pgwire's portal
    /// suspension is used as is: it holds at most that many rows.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME).to_string();
        let Some(portal) = client.portal_store().get_portal(&name) else {
            return Err(PgWireError::PortalNotFound(name));
        };
        let fresh = matches!(*portal.state().lock().await, PortalExecutionState::Initial);
        if message.max_rows > 0 || !fresh {
            return self._on_execute(client, message).await;
        }
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let result = self.execute_streaming(client, &portal).await;
        *portal.state().lock().await = PortalExecutionState::Finished;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        result
    }

    /// Describe of a portal also finds SQL cursors opened by `DECLARE` (psycopg's named
    /// cursors describe them this way).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_PORTAL {
            let name = message.name.as_deref().unwrap_or("");
            if client.portal_store().get_portal(name).is_none() {
                let cell = session_of(client);
                let session = cell.lock().await;
                if let Some(schema) = session.cursor_schema(name) {
                    let fields = fields(&schema, &Format::UnifiedText, format_options(&session))?;
                    drop(session);
                    send_describe_response(client, &DescribePortalResponse::new(fields)).await?;
                    return Ok(());
                }
            }
        }
        self._on_describe(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stored: &StoredStatement<PgStatement> = &portal.statement;
        let Some(statement) = &stored.statement.statement else {
            return Ok(Response::EmptyQuery);
        };
        if client.transaction_status() == TransactionStatus::Error && !ends_transaction(statement) {
            return Err(aborted());
        }
        let types: Vec<Option<&arrow::datatypes::DataType>> = stored
            .statement
            .described
            .as_ref()
            .map(|d| d.param_types.iter().map(Option::as_ref).collect())
            .unwrap_or_default();
        let params = if portal.parameter_len() > 0 {
            Some(arrow_pg::datatypes::df::deserialize_parameters(
                portal, &types,
            )?)
        } else {
            None
        };
        self.run(
            client,
            statement,
            params.as_ref(),
            &portal.result_column_format,
        )
        .await
        .map_err(|e| to_pg_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_options_are_parsed_like_postgres() {
        let got =
            parse_options("-c lakegate.engine=duckdb -csearch_path=sales --statement-timeout=5s");
        assert_eq!(
            got,
            vec![
                ("lakegate.engine".to_string(), "duckdb".to_string()),
                ("search_path".to_string(), "sales".to_string()),
                ("statement_timeout".to_string(), "5s".to_string()),
            ]
        );
    }
}

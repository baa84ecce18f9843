//! The pgwire handler set of a connection, and running one statement: the session and its
//! statement context filled from the connection, the service called, its output turned into a
//! pgwire response. Simple query lives here; startup in [`super::startup`], the extended
//! protocol in [`super::extended`]. Nothing about planning lives here.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::Statement;
use futures::{Sink, SinkExt, StreamExt};
use lakegate_engines::ErrorKind;
use lakegate_sql::lift::Lifted;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::portal::Format;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{Response, Tag};
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, ErrorHandler, PgWireServerHandlers,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::ParameterStatus;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::cancel::{Cancels, PgCancel, QueryCancel};
use super::encode::{DescribedFields, LastFields, format_options, query_response};
use super::extended::PgParser;
use super::idle::{Activity, Busy};
use super::parsed::LastParsed;
use super::sqlstate::sqlstate;
use super::startup::{ConnStartup, PgStartup};
use crate::error::Error;
use crate::mirror::wire::Bound;
use crate::security::auth::Auth;
use crate::security::limits::{ConnectionLimits, LimitsConfig};
use crate::service::catalog::{Answered, Forward};
use crate::service::{
    Batch, BatchVersions, Deallocate, Frontend, GatewayService, QueryOutput, TransactionEffect,
};
use crate::session::{Session, reported_name};

/// The connection's session, kept in pgwire's per-connection extensions.
pub(super) type SessionCell = Mutex<Session>;

/// Maps a gateway error to a Postgres ErrorResponse with its SQLSTATE.
pub(crate) fn to_pg_error(e: &Error) -> PgWireError {
    if let Error::Postgres(pg) = e {
        let mut info = ErrorInfo::new(pg.severity.clone(), pg.code.clone(), pg.message.clone());
        info.detail = pg.detail.clone();
        info.hint = pg.hint.clone();
        info.position = pg.position.clone();
        return PgWireError::UserError(Box::new(info));
    }
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        sqlstate(e.kind()).to_string(),
        e.to_string(),
    )))
}

pub(super) fn pg_error(e: Error) -> PgWireError {
    to_pg_error(&e)
}

pub(super) fn aborted() -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        sqlstate(ErrorKind::TransactionAborted).into(),
        "current transaction is aborted, commands ignored until end of transaction block".into(),
    )))
}

/// Whether a statement may run in a failed transaction (only ending it may).
pub(super) fn ends_transaction(statement: &Statement) -> bool {
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
    auth: Arc<Auth>,
    limits: Arc<ConnectionLimits>,
    require_tls: bool,
}

impl PgHandlers {
    /// Handlers over `service`; `default_schema` seeds each session's `search_path`.
    pub fn new(
        service: Arc<GatewayService>,
        default_schema: String,
        limits: LimitsConfig,
        require_tls: bool,
    ) -> Self {
        let connections = Arc::new(ConnectionManager::new());
        let cancels = Arc::new(Cancels::default());
        let auth = service.auth().clone();
        let idle_in_transaction = limits.idle_in_transaction_timeout;
        let statement_timeout = limits.statement_timeout;
        Self {
            auth,
            limits: Arc::new(ConnectionLimits::new(limits)),
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
                statement_timeout,
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
        // PostgreSQL's wording for a name the client no longer has (after DEALLOCATE ALL, say).
        let missing = match error {
            PgWireError::StatementNotFound(name) => {
                Some(format!("prepared statement \"{name}\" does not exist"))
            }
            PgWireError::PortalNotFound(name) => Some(format!("portal \"{name}\" does not exist")),
            _ => None,
        };
        if let Some(message) = missing {
            *error = PgWireError::UserError(Box::new(ErrorInfo::new(
                "ERROR".into(),
                "26000".into(),
                message,
            )));
        }
    }
}

pub(super) fn session_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<SessionCell> {
    client.session_extensions().get_or_insert_with(|| {
        Mutex::new(Session::new("lakegate", "public").with_frontend(Frontend::Pg))
    })
}

/// The table versions this connection's current extended-protocol batch resolved
/// ([`crate::service::batch`]).
pub(super) fn batch_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<BatchVersions> {
    client
        .session_extensions()
        .get_or_insert_with(BatchVersions::default)
}

/// The text this connection parsed last and what its Parse made ([`LastParsed`]).
pub(super) fn last_parsed_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<LastParsed> {
    client
        .session_extensions()
        .get_or_insert_with(LastParsed::default)
}

/// The row descriptions this connection's last result was sent with ([`LastFields`]).
pub(super) fn last_fields_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<LastFields> {
    client
        .session_extensions()
        .get_or_insert_with(LastFields::default)
}

/// The row descriptions this connection last answered a portal's Describe with
/// ([`DescribedFields`]).
pub(super) fn described_fields_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<DescribedFields> {
    client
        .session_extensions()
        .get_or_insert_with(DescribedFields::default)
}

/// The statements this connection last found the gateway answers entirely
/// ([`Answered`]).
pub(super) fn answered_of<C: ClientInfo + ?Sized>(client: &C) -> Arc<Answered> {
    client
        .session_extensions()
        .get_or_insert_with(Answered::default)
}

/// The names of the statements this connection prepared (Parse with a name), so that
/// `DEALLOCATE ALL` and `DISCARD ALL` can drop them: pgwire's store cannot list them.
pub(super) type PreparedNames = std::sync::Mutex<std::collections::BTreeSet<String>>;

/// This connection's prepared statement names.
pub(super) fn prepared_names<C: ClientInfo + ?Sized>(client: &C) -> Arc<PreparedNames> {
    client
        .session_extensions()
        .get_or_insert_with(|| PreparedNames::new(Default::default()))
}

/// Drops the prepared statements a `DEALLOCATE` or `DISCARD ALL` names.
fn deallocate<C>(client: &mut C, which: &Deallocate) -> Result<(), Error>
where
    C: ClientInfo + ClientPortalStore,
    C::PortalStore: PortalStore,
{
    let names = prepared_names(client);
    let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
    match which {
        Deallocate::All => {
            for name in std::mem::take(&mut *names) {
                client.portal_store().rm_statement(&name);
            }
        }
        Deallocate::Named(name) => {
            if !names.remove(name) {
                return Err(Error::PreparedStatementNotFound { name: name.clone() });
            }
            client.portal_store().rm_statement(name);
        }
    }
    Ok(())
}

/// A fresh cancel token for the statement that starts now on this connection (a
/// CancelRequest with its pid and secret key fires it).
pub(super) fn cancel_token<C: ClientInfo + ?Sized>(client: &C) -> CancellationToken {
    client
        .session_extensions()
        .get::<Arc<QueryCancel>>()
        .map(|c| c.start())
        .unwrap_or_default()
}

/// A statement as the client sent it: parsed, and its text when the text holds only it.
pub(super) struct Sent<'a> {
    pub statement: &'a Statement,
    pub text: Option<Arc<str>>,
    /// The values of the lifted template `statement` is, when the text was not parsed
    /// ([`GatewayService::lifted_shape`]).
    pub lifted: Option<&'a [Lifted]>,
    /// `statement` as the frontend interned it ([`crate::service::Interned`]).
    pub interned: Option<crate::service::Interned>,
}

/// Simple and extended query handling.
pub struct PgQueryHandler {
    pub(super) service: Arc<GatewayService>,
    pub(super) parser: Arc<PgParser>,
}

impl PgQueryHandler {
    /// Runs one statement, keeping the connection's [`Activity`] current: busy while it runs
    /// and its rows stream, then whether a transaction block is open and the session's
    /// idle-in-transaction timeout.
    pub(super) async fn run<C>(
        &self,
        client: &mut C,
        statement: Sent<'_>,
        params: Option<&datafusion::common::ParamValues>,
        format: &Format,
    ) -> Result<Response, Error>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
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
    /// its last row is sent). The statement's context carries the connection's cancel token
    /// and the session's `statement_timeout`; the service applies both.
    async fn run_statement<C>(
        &self,
        client: &mut C,
        statement: Sent<'_>,
        params: Option<&datafusion::common::ParamValues>,
        format: &Format,
        busy: Option<Busy>,
    ) -> Result<Response, Error>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cell = session_of(client);
        let mut session = cell.lock().await;
        let ctx = self
            .service
            .context(&session, cancel_token(client))
            .with_batch(Batch::Use(batch_of(client)))
            .with_text(statement.text)
            .with_interned(statement.interned);
        let output = match statement.lifted {
            Some(values) => {
                self.service
                    .execute_lifted(statement.statement, values, &mut session, &ctx)
                    .await?
            }
            None => {
                self.service
                    .execute(statement.statement, params, &mut session, &ctx)
                    .await?
            }
        };
        match output {
            QueryOutput::Rows {
                stream,
                tag,
                encodings,
            } => {
                // The session is busy until the last row is sent.
                let schema = stream.schema();
                let stream = Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    stream.map(move |batch| {
                        let _held = &busy;
                        batch
                    }),
                ));
                let last = last_fields_of(client);
                let options = format_options(&session);
                let response = query_response(stream, tag, format, options, &last, encodings)
                    .map_err(|e| Error::Unsupported {
                        what: e.to_string(),
                    })?;
                Ok(Response::Query(response))
            }
            QueryOutput::Command(cmd) => {
                if let Some(which) = &cmd.deallocate {
                    deallocate(client, which)?;
                }
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

impl PgQueryHandler {
    /// A simple-protocol statement the catalog mirror answers (`None`: the gateway does;
    /// also when the mirror was lost, then the emulated catalog answers).
    async fn forwarded<C>(
        &self,
        client: &C,
        forward: Option<Forward>,
    ) -> Option<Result<Response, Error>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let forward = forward?;
        let cell = session_of(client);
        let session = cell.lock().await;
        let bound = Bound {
            types: &[],
            formats: &[],
            values: &[],
            result_formats: &[],
        };
        let busy = super::forward::busy(client);
        match super::forward::run(&forward, &bound, &session, &cancel_token(client), busy).await {
            Err(e @ Error::CatalogMirror { .. }) => {
                tracing::warn!(error = %e, "catalog mirror lost: the emulated catalog answers");
                None
            }
            result => Some(result),
        }
    }
}

impl PgQueryHandler {
    /// A simple query of a shape seen before, run as its lifted template: one `SELECT` that
    /// reads the lake (never one the catalog mirror answers), not parsed again.
    async fn run_lifted<C>(
        &self,
        client: &mut C,
        query: &str,
        template: &crate::service::Interned,
        values: &[Lifted],
    ) -> Response
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if client.transaction_status() == TransactionStatus::Error {
            return Response::Error(Box::new(error_info(aborted())));
        }
        let sent = Sent {
            statement: template.statement(),
            text: Some(Arc::from(query)),
            lifted: Some(values),
            interned: Some(template.clone()),
        };
        match self.run(client, sent, None, &Format::UnifiedText).await {
            Ok(response) => response,
            Err(e) => Response::Error(Box::new(error_info(to_pg_error(&e)))),
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
        batch_of(client).clear();
        if let Some((template, values)) = self.service.lifted_shape(query)
            && self.service.take_shape(&*session_of(client).lock().await)
        {
            return Ok(vec![
                self.run_lifted(client, query, &template, &values).await,
            ]);
        }
        let statements = self.service.parse_shared(query).map_err(pg_error)?;
        let mut status = client.transaction_status();
        let mut responses = Vec::with_capacity(statements.len());
        let forwards = {
            let cell = session_of(client);
            let session = cell.lock().await;
            let forwards = self
                .service
                .catalog_forwards(query, &statements, &session, &answered_of(client))
                .await;
            // Both parses split the text alike; if not, the gateway answers everything.
            if forwards.len() == statements.len() {
                forwards
            } else {
                vec![]
            }
        };
        for (i, statement) in statements.iter().enumerate() {
            if status == TransactionStatus::Error && !ends_transaction(statement) {
                responses.push(Response::Error(Box::new(error_info(aborted()))));
                break;
            }
            let forward = forwards.get(i).cloned().flatten();
            let result = match self.forwarded(client, forward).await {
                Some(result) => result,
                None => {
                    let sent = Sent {
                        statement,
                        text: (statements.len() == 1).then(|| Arc::from(query)),
                        lifted: None,
                        interned: None,
                    };
                    self.run(client, sent, None, &Format::UnifiedText).await
                }
            };
            match result {
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

pub(super) fn error_info(e: PgWireError) -> ErrorInfo {
    match e {
        PgWireError::UserError(info) => *info,
        other => ErrorInfo::new("ERROR".into(), "XX000".into(), other.to_string()),
    }
}

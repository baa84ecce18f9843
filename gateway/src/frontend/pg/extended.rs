//! The extended protocol: Parse (the statement planned and described — the same plan Execute
//! will make, so a refused statement is refused here), Describe (also of SQL cursors), Bind
//! and a streaming Execute.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::sql::sqlparser::ast::Statement;
use futures::{Sink, SinkExt, StreamExt};
use lakegate_engines::engine::Described;
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::{ExtendedQueryHandler, send_execution_response};
use pgwire::api::results::{DescribePortalResponse, FieldInfo, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, DEFAULT_NAME, PgWireConnectionState, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::extendedquery::{
    Bind, Close, CloseComplete, Describe, Execute, Flush, Parse, ParseComplete, Sync as PgSync,
    TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery, TransactionStatus};

use super::encode::{fields, format_options};
use super::forward::{self, Mirrored, pg_type};
use super::handler::{
    PgQueryHandler, Sent, aborted, answered_of, batch_of, cancel_token, described_fields_of,
    ends_transaction, last_parsed_of, pg_error, prepared_names, session_of, to_pg_error,
};
use super::parsed::{self, Parsed, type_placeholders};
use crate::error::Error;
use crate::mirror::wire::Bound;
use crate::service::{Batch, GatewayService};
use tracing::warn;

/// A statement prepared by Parse: its SQL, AST and description (or, for a catalog statement,
/// the catalog mirror's).
#[derive(Debug, Clone)]
pub struct PgStatement {
    statement: Parsed,
    /// What runs, interned for planning it ([`GatewayService::intern_query`]).
    interned: Option<crate::service::Interned>,
    /// The SQL text Parse received (it holds this one statement).
    text: Option<Arc<str>>,
    described: Option<Described>,
    mirrored: Option<Mirrored>,
}

impl PgStatement {
    /// What runs: the interned statement, else the parsed one (none for an empty query).
    fn runs(&self) -> Option<&Statement> {
        self.statement.runs(self.interned.as_ref())
    }
}

/// Parses and describes statements for the extended protocol.
pub struct PgParser {
    pub(super) service: Arc<GatewayService>,
}

impl PgParser {
    /// A text of a shape seen before (pgJDBC's `Statement`, values written in), described as
    /// its lifted template with its values, without being parsed; `None`: it is parsed.
    async fn lifted<C>(&self, client: &C, sql: &str) -> PgWireResult<Option<PgStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        if client.transaction_status() == TransactionStatus::Error {
            return Ok(None);
        }
        let Some((template, values)) = self.service.lifted_shape(sql) else {
            return Ok(None);
        };
        let session = session_of(client);
        let session = session.lock().await;
        if !self.service.take_shape(&session) {
            return Ok(None);
        }
        let text: Arc<str> = Arc::from(sql);
        let ctx = self
            .service
            .context(&session, cancel_token(client))
            .with_batch(Batch::Fill(batch_of(client)))
            .with_text(Some(text.clone()))
            .with_interned(Some(template.clone()));
        let described = self
            .service
            .describe_lifted(template.statement(), &values, &session, &ctx)
            .await
            .map_err(pg_error)?;
        Ok(Some(PgStatement {
            statement: Parsed::Lifted(values.into()),
            interned: Some(template),
            text: Some(text),
            described: Some(described),
            mirrored: None,
        }))
    }
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
        if let Some(lifted) = self.lifted(client, sql).await? {
            return Ok(lifted);
        }
        let last = last_parsed_of(client);
        let remembered = last.get(sql, types);
        let statements = match &remembered {
            Some(r) => r.statements.clone(),
            None => self.service.parse_shared(sql).map_err(pg_error)?,
        };
        if statements.len() > 1 {
            return Err(to_pg_error(&Error::Syntax {
                message: "cannot insert multiple commands into a prepared statement".into(),
            }));
        }
        if statements.is_empty() {
            return Ok(PgStatement {
                statement: Parsed::Shared(statements),
                interned: None,
                text: None,
                described: None,
                mirrored: None,
            });
        }
        let session = session_of(client);
        if client.transaction_status() != TransactionStatus::Error {
            let session = session.lock().await;
            let mut forwards = self
                .service
                .catalog_forwards(sql, &statements, &session, &answered_of(client))
                .await;
            if let (1, Some(Some(forward))) = (forwards.len(), forwards.pop()) {
                let oids: Vec<u32> = types
                    .iter()
                    .map(|t| t.as_ref().map_or(0, Type::oid))
                    .collect();
                let catalog = forward.reads_catalog;
                match forward
                    .db
                    .describe(&forward.sql, &oids, &session, catalog)
                    .await
                {
                    Ok(description) => {
                        return Ok(PgStatement {
                            statement: Parsed::Shared(statements),
                            interned: None,
                            text: None,
                            described: None,
                            mirrored: Some(Mirrored {
                                forward,
                                description,
                            }),
                        });
                    }
                    Err(e @ Error::CatalogMirror { .. }) => {
                        warn!(error = %e, "catalog mirror lost: the emulated catalog answers");
                    }
                    Err(e) => return Err(pg_error(e)),
                }
            }
        }
        let parsed = match remembered {
            Some(parsed) => parsed,
            None => {
                let statement = match statements.first().and_then(|s| type_placeholders(s, types)) {
                    Some(typed) => Parsed::Typed(Arc::new(typed)),
                    None => Parsed::Shared(statements.clone()),
                };
                let interned = statement
                    .get()
                    .and_then(|s| self.service.intern_query(s, sql));
                let parsed = parsed::Made {
                    statements,
                    statement,
                    interned,
                    text: Arc::from(sql),
                };
                last.put(types, parsed.clone());
                parsed
            }
        };
        let parsed::Made {
            statement,
            interned,
            text,
            ..
        } = parsed;
        let described = match statement.runs(interned.as_ref()) {
            Some(runs) if client.transaction_status() != TransactionStatus::Error => {
                let mut session = session.lock().await;
                let ctx = self
                    .service
                    .context(&session, cancel_token(client))
                    .with_batch(Batch::Fill(batch_of(client)))
                    .with_text(Some(text.clone()))
                    .with_interned(interned.clone());
                self.service
                    .describe(runs, &mut session, &ctx)
                    .await
                    .map_err(pg_error)?
            }
            _ => None,
        };
        Ok(PgStatement {
            statement,
            interned,
            text: Some(text),
            described,
            mirrored: None,
        })
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        if let Some(m) = &stmt.mirrored {
            return Ok(m
                .description
                .params
                .iter()
                .map(|oid| pg_type(*oid))
                .collect());
        }
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
        if let Some(m) = &stmt.mirrored {
            return Ok(forward::fields(
                &m.description.columns,
                column_format.unwrap_or(&Format::UnifiedText),
            ));
        }
        match &stmt.described {
            Some(d) => fields(
                &d.schema,
                column_format.unwrap_or(&Format::UnifiedText),
                super::encode::described_options(),
            ),
            None => Ok(vec![]),
        }
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
                    .feed(PgWireBackendMessage::CommandComplete(done.into()))
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
                    .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
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

    /// Parse, as pgwire does it, keeping the statement's name for `DEALLOCATE ALL`.
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement = StoredStatement::parse(client, &message, self.query_parser()).await?;
        let name = statement.id.clone();
        client.portal_store().put_statement(Arc::new(statement));
        if name != DEFAULT_NAME {
            prepared_names(client)
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name);
        }
        client
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    /// Close, as pgwire does it, forgetting a closed statement's name.
    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                client.portal_store().rm_statement(name);
                prepared_names(client)
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(name);
            }
            TARGET_TYPE_BYTE_PORTAL => client.portal_store().rm_portal(name),
            _ => {}
        }
        client
            .feed(PgWireBackendMessage::CloseComplete(CloseComplete::new()))
            .await?;
        Ok(())
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
        let result = if message.max_rows > 0 || !fresh {
            self._on_execute(client, message).await
        } else if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            Err(PgWireError::NotReadyForQuery)
        } else {
            client.set_state(PgWireConnectionState::QueryInProgress);
            let result = self.execute_streaming(client, &portal).await;
            *portal.state().lock().await = PortalExecutionState::Finished;
            client.set_state(PgWireConnectionState::ReadyForQuery);
            result
        };
        // Whatever this Execute answered may have reached the client: later statements of the
        // batch resolve their own versions.
        batch_of(client).clear();
        result
    }

    /// Flush, as pgwire does it; the batch's kept versions end here.
    async fn on_flush<C>(&self, client: &mut C, _message: Flush) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        batch_of(client).clear();
        client.flush().await?;
        Ok(())
    }

    /// Sync, as pgwire does it (the unnamed portal dropped, ReadyForQuery sent); the batch's
    /// kept versions end here.
    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        batch_of(client).clear();
        client.portal_store().rm_portal(DEFAULT_NAME);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                client.transaction_status(),
            )))
            .await?;
        client.flush().await?;
        Ok(())
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
                    let response = DescribePortalResponse::new(fields);
                    super::buffered::describe_response(client, &response).await?;
                    return Ok(());
                }
            }
        }
        // pgwire's Describe, its answer left in the buffer (see `buffered`).
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                let Some(stmt) = client.portal_store().get_statement(name) else {
                    return Err(PgWireError::StatementNotFound(name.to_owned()));
                };
                let response = self.do_describe_statement(client, &stmt).await?;
                super::buffered::describe_response(client, &response).await
            }
            TARGET_TYPE_BYTE_PORTAL => {
                let Some(portal) = client.portal_store().get_portal(name) else {
                    return Err(PgWireError::PortalNotFound(name.to_owned()));
                };
                let stmt = &portal.statement.statement;
                if let (None, Some(described)) = (&stmt.mirrored, &stmt.described) {
                    let fields = described_fields_of(client)
                        .fields(&described.schema, &portal.result_column_format)?;
                    return super::buffered::portal_described(client, &fields).await;
                }
                let response = self.do_describe_portal(client, &portal).await?;
                super::buffered::describe_response(client, &response).await
            }
            other => Err(PgWireError::InvalidTargetType(other)),
        }
    }

    /// Bind, its BindComplete left in the buffer until Sync or Flush (see `buffered`).
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        super::buffered::bind(client, message).await
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
        let Some(statement) = stored.statement.runs() else {
            return Ok(Response::EmptyQuery);
        };
        if client.transaction_status() == TransactionStatus::Error && !ends_transaction(statement) {
            return Err(aborted());
        }
        if let Some(m) = &stored.statement.mirrored {
            let types: Vec<u32> = stored
                .parameter_types
                .iter()
                .map(|t| t.as_ref().map_or(0, Type::oid))
                .collect();
            let formats = forward::codes(&portal.parameter_format);
            let result_formats = forward::codes(&portal.result_column_format);
            let bound = Bound {
                types: &types,
                formats: &formats,
                values: &portal.parameters,
                result_formats: &result_formats,
            };
            let cell = session_of(client);
            let session = cell.lock().await;
            let busy = forward::busy(client);
            return forward::run(&m.forward, &bound, &session, &cancel_token(client), busy)
                .await
                .map_err(|e| to_pg_error(&e));
        }
        let types: Vec<Option<&arrow::datatypes::DataType>> = stored
            .statement
            .described
            .as_ref()
            .map(|d| d.param_types.iter().map(Option::as_ref).collect())
            .unwrap_or_default();
        let params = if portal.parameter_len() > 0 {
            Some(super::params::decode(portal, &types)?)
        } else {
            None
        };
        let sent = Sent {
            statement,
            text: stored.statement.text.clone(),
            lifted: stored.statement.statement.lifted(),
            interned: stored.statement.interned.clone(),
        };
        self.run(client, sent, params.as_ref(), &portal.result_column_format)
            .await
            .map_err(|e| to_pg_error(&e))
    }
}

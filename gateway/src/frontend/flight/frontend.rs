//! The Flight SQL frontend's state and its two calls into the query service: a session and
//! statement context per call, filled from the call's headers (user, routing group, engine,
//! tag, `statement_timeout`) the way pgwire fills them from a connection, then `execute` or
//! `describe` — the same plan either way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::CommandGetTables;
use arrow_flight::sql::metadata::{SqlInfoData, XdbcTypeInfoData};
use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast::Statement;
use futures::TryStreamExt;
use lakegate_engines::ErrorKind;
use lakegate_engines::engine::Described;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Response, Status};

use super::USER_HEADER;
use super::metadata::{DoGetStream, batches_response, internal, numbered_placeholders};
use crate::error::{Error, Result};
use crate::service::{Frontend, GatewayService, QueryOutput};
use crate::session::Session;

/// Request header that pins an engine for the call (like `SET lakegate.engine`).
pub const ENGINE_HEADER: &str = "x-lakegate-engine";
/// Request header naming the routing group (like `SET lakegate.group`).
pub const GROUP_HEADER: &str = "x-lakegate-group";
/// Request header carrying the client tag routing rules match (`lakegate.tag`).
pub const TAG_HEADER: &str = "x-lakegate-tag";
/// Request header setting the call's `statement_timeout` (`500ms`, `5s`, `1min`; a bare
/// number is milliseconds, as in PostgreSQL).
pub const STATEMENT_TIMEOUT_HEADER: &str = "x-lakegate-statement-timeout";

/// The one statement of a request's text: the parser's kept statements of it, shared (a
/// prepared statement's every execution used to copy its tree).
#[derive(Clone)]
pub(super) struct OneStatement(Arc<Vec<Statement>>);

impl std::ops::Deref for OneStatement {
    type Target = Statement;

    fn deref(&self) -> &Statement {
        // Made only of texts of exactly one statement (`parse_one`).
        &self.0[0]
    }
}

/// A prepared statement: its parsed form, description and bound parameters.
pub(super) struct PreparedStatement {
    pub(super) statement: OneStatement,
    pub(super) described: Option<Described>,
    pub(super) params: Option<ParamValues>,
}

/// The Flight SQL service over the gateway.
pub struct FlightSqlFrontend {
    pub(super) service: Arc<GatewayService>,
    pub(super) database: String,
    default_schema: String,
    /// `[limits] statement_timeout`: each call's unless its header says otherwise.
    statement_timeout: Duration,
    pub(super) prepared: Mutex<HashMap<Vec<u8>, PreparedStatement>>,
    pub(super) sql_info: SqlInfoData,
    pub(super) xdbc: XdbcTypeInfoData,
}

/// Maps a gateway error to a gRPC status with the same meaning as its SQLSTATE.
pub fn to_status(e: &Error) -> Status {
    let message = e.to_string();
    if matches!(e, Error::Engine(lakegate_engines::Error::TimedOut)) {
        return Status::deadline_exceeded(message);
    }
    match e.kind() {
        ErrorKind::Syntax
        | ErrorKind::InvalidParameter
        | ErrorKind::DatatypeMismatch
        | ErrorKind::DataException
        | ErrorKind::NumericOutOfRange
        | ErrorKind::DivisionByZero => Status::invalid_argument(message),
        ErrorKind::UndefinedTable
        | ErrorKind::UndefinedColumn
        | ErrorKind::UndefinedObject
        | ErrorKind::UndefinedFunction
        | ErrorKind::UndefinedCursor
        | ErrorKind::UndefinedPreparedStatement => Status::not_found(message),
        ErrorKind::Unsupported => Status::unimplemented(message),
        ErrorKind::Canceled => Status::cancelled(message),
        ErrorKind::Unavailable => Status::unavailable(message),
        ErrorKind::UndefinedFile => Status::data_loss(message),
        ErrorKind::StorageDenied => Status::failed_precondition(message),
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

/// A gateway error as a status.
pub(super) fn status(e: Error) -> Status {
    to_status(&e)
}

impl FlightSqlFrontend {
    /// A Flight SQL frontend over `service`; calls without a timeout header get
    /// `statement_timeout` (zero: none).
    ///
    /// # Errors
    /// When the static SqlInfo / XDBC tables cannot be built.
    pub fn try_new(
        service: Arc<GatewayService>,
        database: String,
        default_schema: String,
        statement_timeout: Duration,
    ) -> Result<Self> {
        let (sql_info, xdbc) = super::metadata::static_tables()?;
        Ok(Self {
            service,
            database,
            default_schema,
            statement_timeout,
            prepared: Mutex::new(HashMap::new()),
            sql_info,
            xdbc,
        })
    }

    /// Who may connect.
    pub(super) fn auth(&self) -> &Arc<crate::security::auth::Auth> {
        self.service.auth()
    }

    /// A session for one call, its settings from the call's headers.
    pub(super) fn session(&self, metadata: &MetadataMap) -> Result<Session, Status> {
        let user = metadata
            .get(USER_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("flight");
        let mut session = Session::new(user, &self.default_schema)
            .with_frontend(Frontend::Flight)
            .with_database(&self.database);
        let default_timeout = self.statement_timeout.as_millis().to_string();
        session
            .apply_startup(&[("statement_timeout".into(), default_timeout)])
            .map_err(status)?;
        for (header, setting) in [
            (GROUP_HEADER, "lakegate.group"),
            (TAG_HEADER, "lakegate.tag"),
            (ENGINE_HEADER, "lakegate.engine"),
            (STATEMENT_TIMEOUT_HEADER, "statement_timeout"),
        ] {
            if let Some(value) = metadata.get(header) {
                let value = value
                    .to_str()
                    .map_err(|_| Status::invalid_argument(format!("{header} must be text")))?;
                session.set(setting, value).map_err(status)?;
            }
        }
        Ok(session)
    }

    /// The one statement of `sql` (`?` placeholders numbered).
    pub(super) fn parse_one(&self, sql: &str) -> Result<OneStatement, Status> {
        let sql = numbered_placeholders(sql);
        let statements = self.service.parse_shared(&sql).map_err(status)?;
        match statements.len() {
            1 => Ok(OneStatement(statements)),
            0 => Err(Status::invalid_argument("empty query")),
            _ => Err(Status::invalid_argument("one statement per request")),
        }
    }

    /// Runs `statement` for the caller, streaming its rows as Flight data.
    pub(super) async fn run(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        metadata: &MetadataMap,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut session = self.session(metadata)?;
        // A client that goes away drops the stream (and the query); the deadline is the
        // session's statement_timeout.
        let ctx = self.service.context(&session, CancellationToken::new());
        let output = self
            .service
            .execute(statement, params, &mut session, &ctx)
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

    /// Describes `statement` for the caller: planned exactly as it would run, so a statement
    /// the caller may not run is refused here (PERMISSION_DENIED for a denied table).
    pub(super) async fn describe(
        &self,
        statement: &Statement,
        metadata: &MetadataMap,
    ) -> Result<Option<Described>, Status> {
        let mut session = self.session(metadata)?;
        let ctx = self.service.context(&session, CancellationToken::new());
        self.service
            .describe(statement, &mut session, &ctx)
            .await
            .map_err(status)
    }

    /// The tables the caller may see, with their Arrow schemas when asked.
    pub(super) async fn tables_batch(
        &self,
        query: CommandGetTables,
        metadata: &MetadataMap,
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let late = to_status(&Error::Engine(lakegate_engines::Error::TimedOut));
        assert_eq!(late.code(), tonic::Code::DeadlineExceeded);
        let denied = to_status(&Error::PermissionDenied {
            what: "table a.b".into(),
        });
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    }
}

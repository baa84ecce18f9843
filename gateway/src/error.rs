//! The gateway's error type. Frontends map [`Error::kind`] to their own codes.

use lakegate_engines::ErrorKind;

/// Errors raised by the gateway.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration setting is missing or wrong.
    #[error("invalid setting `{setting}`: {reason}")]
    Config {
        /// The setting's name as written in the config file (`catalog.uri`, `pg.listen`).
        setting: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The config file cannot be read or parsed.
    #[error("cannot load config file `{path}`: {reason}")]
    ConfigFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr} (`{setting}`): {source}")]
    Bind {
        /// The setting that named the address.
        setting: &'static str,
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The SQL text does not parse.
    #[error("{message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// The statement is valid SQL that lakegate does not run.
    #[error("{what}")]
    Unsupported {
        /// What was refused and why.
        what: String,
    },
    /// `SET`/`SHOW`/`RESET` of a setting that does not exist.
    #[error("unrecognized configuration parameter \"{name}\"")]
    UnknownSetting {
        /// The setting's name.
        name: String,
    },
    /// `SET` of a read-only setting.
    #[error("parameter \"{name}\" cannot be changed")]
    ReadOnlySetting {
        /// The setting's name.
        name: String,
    },
    /// `SET` with a value the setting does not accept.
    #[error("invalid value for parameter \"{name}\": \"{value}\" ({reason})")]
    InvalidSetting {
        /// The setting's name.
        name: String,
        /// The rejected value.
        value: String,
        /// What values are accepted.
        reason: String,
    },
    /// `FETCH`/`CLOSE` of a cursor that does not exist.
    #[error("cursor \"{name}\" does not exist")]
    CursorNotFound {
        /// The cursor's name.
        name: String,
    },
    /// `DEALLOCATE` of a prepared statement that does not exist.
    #[error("prepared statement \"{name}\" does not exist")]
    PreparedStatementNotFound {
        /// The statement's name.
        name: String,
    },
    /// `DECLARE` of a cursor whose name is taken.
    #[error("cursor \"{name}\" already exists")]
    DuplicateCursor {
        /// The cursor's name.
        name: String,
    },
    /// The statement was cancelled.
    #[error("canceling statement due to user request")]
    Canceled,
    /// The lake or an engine failed.
    #[error(transparent)]
    Engine(#[from] lakegate_engines::Error),
    /// An error shared by every statement that waited on the same computation.
    #[error("{0}")]
    Shared(std::sync::Arc<Error>),
    /// A session pinned an engine this gateway does not run.
    #[error("engine \"{name}\" is not configured in this gateway (configured: {available})")]
    EngineNotConfigured {
        /// The engine asked for.
        name: String,
        /// The engines that are configured.
        available: String,
    },
    /// A routing group refused a query: its slots are taken and its queue is full, or the
    /// wait ran out.
    #[error("too many queries in routing group \"{group}\" ({max_concurrent} running): {why}")]
    TooManyQueries {
        /// The group.
        group: String,
        /// Its concurrency.
        max_concurrent: usize,
        /// Full queue or timeout.
        why: String,
    },
    /// `SET lakegate.group` (or the startup option / header) named a group that cannot be used.
    #[error("routing group \"{name}\" cannot be used: {why}")]
    GroupNotAllowed {
        /// The group asked for.
        name: String,
        /// Why not.
        why: String,
    },
    /// The user may not read a table or use a routing group.
    #[error("permission denied for {what}")]
    PermissionDenied {
        /// `table sales.secret`, `routing group "reprocess"`.
        what: String,
    },
    /// A routing group's guardrail refused the statement.
    #[error("{what}")]
    Guardrail {
        /// What was exceeded, by how much, and what to do.
        what: String,
    },
    /// The maintenance loop failed (catalog, storage).
    #[error("maintenance: {0}")]
    Maintenance(#[from] lakegate_maintenance::Error),
    /// The classifier refused the statement (a malformed table name).
    #[error("{0}")]
    Classify(#[from] lakegate_sql::Error),
    /// Calls nested deeper than `limits.max_call_nesting` (refused before parsing).
    #[error(
        "statement too complex: calls or subqueries nested {depth} deep, more than \
         limits.max_call_nesting ({limit}); the SQL parser's time doubles with each level"
    )]
    TooComplex {
        /// How deep the statement nests.
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// The engine a session pinned does not reproduce a PostgreSQL behaviour the statement
    /// relies on (routing would have let another engine answer).
    #[error(
        "engine {engine} does not give PostgreSQL's answer for {what}: let the router choose \
         (SET lakegate.engine = auto) or pin another engine"
    )]
    Inexact {
        /// The engine.
        engine: String,
        /// The behaviour, in words.
        what: String,
    },
    /// The engine a session pinned does not take this statement now (the `accelerated` engine:
    /// a table it does not hold at the statement's snapshot).
    #[error(
        "engine {engine} cannot answer this statement: {why}; let the router choose \
         (SET lakegate.engine = auto) or pin another engine"
    )]
    Declined {
        /// The engine.
        engine: String,
        /// Why, in words.
        why: String,
    },
    /// A `lakegate.<name>` table that does not exist.
    #[error("relation \"lakegate.{name}\" does not exist")]
    UnknownSystemTable {
        /// The table's name.
        name: String,
    },
    /// The PostgreSQL catalog mirror cannot be started or reached.
    #[error("catalog mirror: {reason}")]
    CatalogMirror {
        /// What failed.
        reason: String,
    },
    /// PostgreSQL (the catalog mirror) refused a forwarded statement: its error, verbatim.
    #[error("{}", .0.message)]
    Postgres(Box<PostgresError>),
}

/// An ErrorResponse from PostgreSQL, passed on to the client as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresError {
    /// `ERROR`, `FATAL`, ...
    pub severity: String,
    /// The SQLSTATE.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The detail line.
    pub detail: Option<String>,
    /// The hint line.
    pub hint: Option<String>,
    /// The error's position in the statement (1-based characters).
    pub position: Option<String>,
}

impl PostgresError {
    /// An `ERROR` with `code` and `message`.
    pub fn new(code: &str, message: &str) -> Self {
        Self {
            severity: "ERROR".into(),
            code: code.into(),
            message: message.into(),
            detail: None,
            hint: None,
            position: None,
        }
    }
}

/// Short form of `Result` with the gateway's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The neutral kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Config { .. } | Self::ConfigFile { .. } | Self::InvalidSetting { .. } => {
                ErrorKind::InvalidParameter
            }
            Self::Bind { .. } => ErrorKind::Unavailable,
            Self::Syntax { .. } | Self::Classify(lakegate_sql::Error::TableName { .. }) => {
                ErrorKind::Syntax
            }
            Self::Classify(lakegate_sql::Error::Mask { .. }) => ErrorKind::Unsupported,
            Self::Unsupported { .. } => ErrorKind::Unsupported,
            Self::UnknownSetting { .. } => ErrorKind::UndefinedObject,
            Self::ReadOnlySetting { .. } => ErrorKind::CantChangeSetting,
            Self::CursorNotFound { .. } => ErrorKind::UndefinedCursor,
            Self::PreparedStatementNotFound { .. } => ErrorKind::UndefinedPreparedStatement,
            Self::DuplicateCursor { .. } => ErrorKind::DuplicateCursor,
            Self::Canceled => ErrorKind::Canceled,
            Self::Engine(e) => e.kind(),
            Self::Maintenance(lakegate_maintenance::Error::Lake(e)) => e.kind(),
            Self::Maintenance(_) => ErrorKind::Internal,
            Self::Shared(e) => e.kind(),
            Self::UnknownSystemTable { .. } => ErrorKind::UndefinedTable,
            Self::EngineNotConfigured { .. } | Self::GroupNotAllowed { .. } => {
                ErrorKind::InvalidParameter
            }
            Self::TooManyQueries { .. } => ErrorKind::TooManyQueries,
            Self::PermissionDenied { .. } => ErrorKind::InsufficientPrivilege,
            Self::Guardrail { .. } => ErrorKind::LimitExceeded,
            Self::TooComplex { .. } => ErrorKind::TooComplex,
            Self::Inexact { .. } | Self::Declined { .. } => ErrorKind::Unsupported,
            Self::CatalogMirror { .. } => ErrorKind::Unavailable,
            // The frontend sends the server's own SQLSTATE; this is for everything else.
            Self::Postgres(_) => ErrorKind::Internal,
        }
    }
}

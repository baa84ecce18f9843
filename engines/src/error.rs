//! The crate's error type and [`ErrorKind`], the neutral classification that frontends map to
//! SQLSTATEs (pgwire) or gRPC codes (Flight SQL).

use datafusion::error::DataFusionError;

/// What kind of failure an error is, independent of any wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The SQL text does not parse.
    Syntax,
    /// A table (or schema) the statement names does not exist.
    UndefinedTable,
    /// A column the statement names does not exist.
    UndefinedColumn,
    /// A cursor, prepared statement or setting that does not exist.
    UndefinedObject,
    /// A function that does not exist.
    UndefinedFunction,
    /// The statement is valid SQL but lakegate does not do it (writes, DDL, ...).
    Unsupported,
    /// Bad parameter or setting value supplied by the client.
    InvalidParameter,
    /// Operands of the wrong type.
    DatatypeMismatch,
    /// Bad data met while computing (division by zero, overflow, bad cast).
    DataException,
    /// A value that does not fit its numeric type (SQLSTATE 22003).
    NumericOutOfRange,
    /// Division by zero (SQLSTATE 22012).
    DivisionByZero,
    /// The statement was cancelled by the client or a timeout.
    Canceled,
    /// A cursor named by FETCH / CLOSE / MOVE does not exist.
    UndefinedCursor,
    /// A prepared statement named by DEALLOCATE does not exist (SQLSTATE 26000).
    UndefinedPreparedStatement,
    /// DECLARE of a cursor whose name is taken.
    DuplicateCursor,
    /// A statement in a transaction that already failed (only ROLLBACK is accepted).
    TransactionAborted,
    /// A setting that cannot be changed.
    CantChangeSetting,
    /// A catalog, storage or engine that is needed cannot be reached.
    Unavailable,
    /// A file the table's metadata references is gone (SQLSTATE 58P01).
    UndefinedFile,
    /// The object store refused lakegate's credentials (SQLSTATE 58030).
    StorageDenied,
    /// A routing group's slots and queue are full (SQLSTATE 53300).
    TooManyQueries,
    /// The user may not read what the statement reads (SQLSTATE 42501).
    InsufficientPrivilege,
    /// A guardrail refused or ended the statement (scan cap, row limit; SQLSTATE 54000).
    LimitExceeded,
    /// The statement nests deeper than the parser may be given (SQLSTATE 54001).
    TooComplex,
    /// A failure inside lakegate or an engine that the client cannot fix.
    Internal,
}

/// Errors raised by the lake and the engines.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The catalog configuration is unusable.
    #[error("invalid catalog setting `{setting}`: {reason}")]
    InvalidCatalogConfig {
        /// The setting's name, e.g. `catalog.uri`.
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The catalog could not be reached or answered with an error.
    #[error("catalog `{catalog}` is unavailable: {source}")]
    CatalogUnavailable {
        /// The catalog's name.
        catalog: String,
        /// The underlying error.
        source: Box<iceberg::Error>,
    },
    /// The catalog's SQL database failed.
    #[error("catalog database query failed: {0}")]
    CatalogDatabase(#[from] sqlx::Error),
    /// A table named by a statement does not exist in the catalog.
    #[error("relation \"{name}\" does not exist")]
    TableNotFound {
        /// The table's name as the client wrote it.
        name: String,
    },
    /// A schema (Iceberg namespace) named by a statement does not exist.
    #[error("schema \"{name}\" does not exist")]
    SchemaNotFound {
        /// The schema's name.
        name: String,
    },
    /// Iceberg failed to read table metadata or data.
    #[error("iceberg: {0}")]
    Iceberg(Box<iceberg::Error>),
    /// DataFusion failed to plan or run the statement.
    #[error("{}", datafusion_message(.0))]
    DataFusion(Box<DataFusionError>),
    /// The statement was cancelled by a client cancel request.
    #[error("canceling statement due to user request")]
    Canceled,
    /// The statement ran longer than `statement_timeout`.
    #[error("canceling statement due to statement timeout")]
    TimedOut,
    /// The statement is not supported by this engine.
    #[error("{what} is not supported")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// An engine (DuckDB, Trino, Spark) refused or failed the statement.
    #[error("{engine}: {message}")]
    Engine {
        /// The engine's name.
        engine: String,
        /// What kind of failure the engine reported.
        kind: ErrorKind,
        /// The engine's message.
        message: String,
    },
    /// A value PostgreSQL refuses, with PostgreSQL's own message (`numeric field overflow`,
    /// `division by zero`), raised where lakegate computes PostgreSQL's semantics itself.
    #[error("{message}")]
    Value {
        /// The SQLSTATE class of the refusal.
        kind: ErrorKind,
        /// PostgreSQL's message.
        message: String,
    },
    /// An engine is not set up, overloaded, or failed in transit.
    #[error("engine {engine} is unavailable: {reason}")]
    EngineUnavailable {
        /// The engine's name.
        engine: String,
        /// Why.
        reason: String,
    },
    /// An engine refused a connection or dropped it under a request: it is not running
    /// there. The router takes it out at once (its breaker opens) rather than after repeated
    /// failures.
    #[error("engine {engine} is unavailable: no connection to {reason}")]
    EngineUnreachable {
        /// The engine's name.
        engine: String,
        /// Where, and the transport's error.
        reason: String,
    },
    /// The object store or file system holding the lake failed a request.
    #[error("storage at {location}: {reason}")]
    Storage {
        /// What was asked for.
        location: String,
        /// The store's answer.
        reason: String,
    },
    /// The object store refused lakegate's credentials (which key id, which object, what to
    /// fix; never the secret) or could not be reached.
    #[error("{message}")]
    ObjectStore {
        /// [`ErrorKind::StorageDenied`] or [`ErrorKind::Unavailable`].
        kind: ErrorKind,
        /// The whole explanation.
        message: String,
    },
    /// A broken invariant inside lakegate.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// This error inside a DataFusion error (for streams), keeping its kind.
    pub fn into_datafusion(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

impl From<iceberg::Error> for Error {
    fn from(e: iceberg::Error) -> Self {
        if let Some((kind, message)) = storage_explained(&e.to_string()) {
            return Self::ObjectStore { kind, message };
        }
        Self::Iceberg(Box::new(e))
    }
}

impl From<DataFusionError> for Error {
    /// One of this crate's errors carried through a stream comes back as itself.
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(ext) => match ext.downcast::<Error>() {
                Ok(own) => *own,
                Err(ext) => Self::DataFusion(Box::new(DataFusionError::External(ext))),
            },
            other => Self::DataFusion(Box::new(other)),
        }
    }
}

/// Short form of `Result` with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether `e` was caused by the connection itself: refused (nothing listens there), or
/// reset, aborted or broken under a request (the server went away) — an I/O error of that kind
/// somewhere in its chain of causes. Such an engine is taken out at once
/// ([`Error::EngineUnreachable`]).
pub(crate) fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind as Io;
    let mut cause = Some(e);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                Io::ConnectionRefused
                    | Io::ConnectionReset
                    | Io::ConnectionAborted
                    | Io::BrokenPipe
                    | Io::NotConnected
            )
        {
            return true;
        }
        cause = e.source();
    }
    false
}

impl Error {
    /// The neutral kind of this error, for frontends to map to their own codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidCatalogConfig { .. } => ErrorKind::InvalidParameter,
            Self::CatalogUnavailable { .. } | Self::CatalogDatabase(_) => ErrorKind::Unavailable,
            Self::TableNotFound { .. } | Self::SchemaNotFound { .. } => ErrorKind::UndefinedTable,
            Self::Iceberg(e) => iceberg_kind(e),
            Self::DataFusion(e) => datafusion_kind(e),
            Self::Unsupported { .. } => ErrorKind::Unsupported,
            Self::Canceled | Self::TimedOut => ErrorKind::Canceled,
            Self::Engine { kind, .. }
            | Self::Value { kind, .. }
            | Self::ObjectStore { kind, .. } => *kind,
            Self::EngineUnavailable { .. }
            | Self::EngineUnreachable { .. }
            | Self::Storage { .. } => ErrorKind::Unavailable,
            Self::Internal(_) => ErrorKind::Internal,
        }
    }
}

fn iceberg_kind(e: &iceberg::Error) -> ErrorKind {
    match e.kind() {
        iceberg::ErrorKind::TableNotFound | iceberg::ErrorKind::NamespaceNotFound => {
            ErrorKind::UndefinedTable
        }
        iceberg::ErrorKind::FeatureUnsupported => ErrorKind::Unsupported,
        _ => ErrorKind::Internal,
    }
}

/// Classifies a DataFusion error by its root cause.
pub fn datafusion_kind(e: &DataFusionError) -> ErrorKind {
    use datafusion::common::SchemaError;
    let text = e.to_string();
    if missing_file(&text).is_some() {
        return ErrorKind::UndefinedFile;
    }
    if let Some((kind, _)) = storage_explained(&text) {
        return kind;
    }
    match e.find_root() {
        DataFusionError::SQL(..) => ErrorKind::Syntax,
        DataFusionError::SchemaError(e, _) if matches!(**e, SchemaError::FieldNotFound { .. }) => {
            ErrorKind::UndefinedColumn
        }
        DataFusionError::SchemaError(..) => ErrorKind::Syntax,
        DataFusionError::NotImplemented(_) => ErrorKind::Unsupported,
        DataFusionError::Plan(msg) => plan_kind(msg),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::DivideByZero
            | arrow::error::ArrowError::CastError(_)
            | arrow::error::ArrowError::ParseError(_)
            | arrow::error::ArrowError::ArithmeticOverflow(_)
            | arrow::error::ArrowError::ComputeError(_) => ErrorKind::DataException,
            _ => ErrorKind::Internal,
        },
        DataFusionError::Execution(msg) if msg.contains("Cast error") => ErrorKind::DataException,
        DataFusionError::Execution(msg) if msg.contains("Divide by zero") => {
            ErrorKind::DataException
        }
        DataFusionError::External(ext) => {
            if let Some(err) = ext.downcast_ref::<Error>() {
                err.kind()
            } else if let Some(err) = ext.downcast_ref::<iceberg::Error>() {
                iceberg_kind(err)
            } else {
                ErrorKind::Internal
            }
        }
        _ => ErrorKind::Internal,
    }
}

fn plan_kind(msg: &str) -> ErrorKind {
    if msg.contains("Invalid function") || msg.contains("Unknown function") {
        ErrorKind::UndefinedFunction
    } else if msg.contains("not found") && msg.contains("table") {
        ErrorKind::UndefinedTable
    } else if msg.contains("No field named") {
        ErrorKind::UndefinedColumn
    } else if msg.contains("Cannot infer common argument type")
        || msg.contains("does not support")
        || msg.contains("coercion")
        || msg.contains("Failed to coerce")
    {
        ErrorKind::DatatypeMismatch
    } else if msg.contains("Unsupported") || msg.contains("not supported") {
        ErrorKind::Unsupported
    } else {
        ErrorKind::Syntax
    }
}

/// DataFusion's messages carry prefixes ("Error during planning: ") and backtrace-like context;
/// clients get the root message.
fn datafusion_message(e: &DataFusionError) -> String {
    if let Some(path) = missing_file(&e.to_string()) {
        return format!(
            "could not open file \"{path}\": it does not exist (removed outside the table's \
             writers? restore it, or roll the table back to a snapshot that does not read it)"
        );
    }
    if let Some((_, message)) = storage_explained(&e.to_string()) {
        return message;
    }
    let root = e.find_root();
    let msg = match root {
        DataFusionError::SQL(p, _) => p.to_string(),
        DataFusionError::Plan(m)
        | DataFusionError::Execution(m)
        | DataFusionError::NotImplemented(m)
        | DataFusionError::Internal(m) => m.clone(),
        DataFusionError::SchemaError(s, _) => s.to_string(),
        DataFusionError::External(ext) => ext.to_string(),
        other => other.to_string(),
    };
    msg.trim().to_string()
}

/// How the object cache's storage begins the message of a refused request (see
/// `lake::object_cache`); the message ends with [`STORAGE_REFUSED_END`].
pub(crate) const STORAGE_REFUSED: &str = "the object store refused lakegate's credentials";
/// The last words of that message.
pub(crate) const STORAGE_REFUSED_END: &str = "what the key may read.";
/// How it begins the message of a request the store did not answer (after opendal's retries).
pub(crate) const STORAGE_UNREACHABLE: &str = "the object store could not be reached";
/// The last words of that message.
pub(crate) const STORAGE_UNREACHABLE_END: &str = "then run the statement again.";

/// The explanation of a failed object-store request inside a longer error chain, if any, and
/// its kind.
fn storage_explained(message: &str) -> Option<(ErrorKind, String)> {
    [
        (
            STORAGE_REFUSED,
            STORAGE_REFUSED_END,
            ErrorKind::StorageDenied,
        ),
        (
            STORAGE_UNREACHABLE,
            STORAGE_UNREACHABLE_END,
            ErrorKind::Unavailable,
        ),
    ]
    .into_iter()
    .find_map(|(start, end, kind)| {
        let rest = &message[message.find(start)?..];
        let stop = rest.find(end)? + end.len();
        Some((kind, rest[..stop].to_string()))
    })
}

/// The file a storage error says does not exist (opendal's `NotFound` on a read, with the
/// object's `path:` in its context), if it is one.
fn missing_file(message: &str) -> Option<String> {
    // opendal's kind and status: `NotFound (persistent) at read`.
    if !message.contains("NotFound (persistent)") {
        return None;
    }
    let path = message.split("path: ").nth(1)?;
    let path = path
        .split([',', ' ', '}'])
        .next()
        .filter(|p| !p.is_empty())?;
    Some(path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_is_found_among_the_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("transport error")]
        struct Transport(#[source] std::io::Error);
        let reset = Transport(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(connection_lost(&reset));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(connection_lost(&refused));
        let timed_out = Transport(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(
            !connection_lost(&timed_out),
            "a slow server is not a missing one"
        );
    }

    #[test]
    fn a_missing_object_is_named() {
        let opendal = "Unexpected => Failed to load Parquet metadata, source: External: \
            Unexpected => Failure in doing io operation, source: NotFound (persistent) at read, \
            context: { uri: http://127.0.0.1:1/lake/w/t/data/a.parquet, response: Parts { \
            status: 404 }, service: s3, path: w/t/data/a.parquet, range: 0-3233 } => S3Error";
        assert_eq!(missing_file(opendal).as_deref(), Some("w/t/data/a.parquet"));
        assert_eq!(missing_file("Execution error: Divide by zero"), None);
    }

    #[test]
    fn a_refused_request_keeps_only_its_explanation() {
        let chain = format!(
            "Unexpected => Failed to load Parquet metadata, source: External: {STORAGE_REFUSED} \
             (access key id \"AKIA1\") reading s3://b/k.parquet: InvalidAccessKeyId. Check \
             it, and {STORAGE_REFUSED_END} => more context"
        );
        let (kind, got) = storage_explained(&chain).expect("found");
        assert_eq!(kind, ErrorKind::StorageDenied);
        assert!(got.starts_with(STORAGE_REFUSED) && got.ends_with(STORAGE_REFUSED_END));
        assert!(got.contains("AKIA1") && !got.contains("more context"));
        assert_eq!(storage_explained("Execution error: Divide by zero"), None);
    }

    #[test]
    fn plan_messages_map_to_kinds() {
        assert_eq!(
            plan_kind("Invalid function 'foo'"),
            ErrorKind::UndefinedFunction
        );
        assert_eq!(
            plan_kind("table 'a.b.c' not found"),
            ErrorKind::UndefinedTable
        );
        assert_eq!(
            plan_kind("Cannot infer common argument type for comparison"),
            ErrorKind::DatatypeMismatch
        );
    }
}

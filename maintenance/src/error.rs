//! The maintenance crate's error type.

/// Errors raised while assessing or maintaining a table.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Iceberg metadata or file IO failed.
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    /// The lake (catalog lookups) failed.
    #[error(transparent)]
    Lake(#[from] lakegate_engines::Error),
    /// Reading, sorting or writing rows failed.
    #[error("datafusion: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// The catalog refused the commit because the table moved in a way the operation cannot
    /// be re-applied over; nothing was lost, the operation is retried next cycle.
    #[error("commit conflict: {0}")]
    Conflict(String),
    /// The catalog's SQL store failed.
    #[error("catalog database: {0}")]
    Sql(#[from] sqlx::Error),
    /// The REST catalog answered with an error.
    #[error("REST catalog: {0}")]
    Rest(String),
    /// The shared state database (`[state]`) failed.
    #[error("state database: {0}")]
    State(String),
    /// A file on local storage could not be listed or read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The table cannot be maintained by this version (format version, storage).
    #[error("{0}")]
    Unsupported(String),
    /// A safety check failed; the operation was abandoned without committing.
    #[error("safety check failed: {0}")]
    Invariant(String),
    /// The operation panicked (a bug): it was abandoned without committing.
    #[error("the operation panicked: {0}")]
    Panicked(String),
    /// A bad setting.
    #[error("invalid maintenance setting `{setting}`: {reason}")]
    Config {
        /// The setting.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

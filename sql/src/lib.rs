//! lakegate-sql: what the gateway reads from a parsed statement, before anything runs — its
//! kind (query, session, transaction, cursor, write), the lake tables it reads (CTE scopes
//! respected), and the profile the router decides on (shape, filtered/joined/grouped columns,
//! LIMIT), the column-mask rewrite, the rewrites that keep PostgreSQL's meaning on every engine
//! (`semantics`), and a bound on call nesting checked before parsing. Pure functions over the sqlparser AST: no engine, no catalog, no I/O, so the
//! `classifier` fuzz target builds it alone.

mod any_all;
pub mod classify;
pub mod lift;
pub mod mask;
pub mod nesting;
pub mod profile;
pub mod semantics;

/// What the classifier can refuse.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A table name that is not `table`, `schema.table` or `catalog.schema.table`.
    #[error(
        "table name {name} has {parts} parts: write table, schema.table or catalog.schema.table"
    )]
    TableName {
        /// The name as written.
        name: String,
        /// How many parts it has.
        parts: usize,
    },
    /// A masked table the statement cannot be rewritten for.
    #[error("cannot mask {table}: {why}")]
    Mask {
        /// `ns.table`.
        table: String,
        /// Why, and what to do.
        why: String,
    },
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

//! The statements that do not read the lake, each a small hook on the session:
//!
//! - [`settings`] — `SET`, `SHOW`, `RESET`, `DISCARD`, `set_config()`.
//! - [`transaction`] — `BEGIN`, `COMMIT`, `ROLLBACK`, savepoints.
//! - [`cursor`] — `DECLARE`, `FETCH`, `CLOSE`.
//! - [`explain`] — `EXPLAIN ROUTE`.

pub mod cursor;
pub mod explain;
pub mod settings;
pub mod transaction;

use datafusion::sql::sqlparser::ast::Statement;

use crate::error::Error;

/// A write or DDL: refused (0A000), lakegate is read-only.
pub(crate) fn read_only(verb: &str) -> Error {
    Error::Unsupported {
        what: format!(
            "{verb} is not supported: lakegate is a read-only gateway (write through your Iceberg writer)"
        ),
    }
}

/// A statement lakegate does not run (0A000), named by its first words.
pub(crate) fn unsupported(statement: &Statement) -> Error {
    let text = statement.to_string();
    let head: String = text
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    Error::Unsupported {
        what: format!("statement `{head}` is not supported by lakegate"),
    }
}

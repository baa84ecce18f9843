//! `BEGIN`, `COMMIT`, `ROLLBACK`, savepoints: lakegate only reads, so a transaction block
//! changes nothing but the protocol's transaction state and which cursors survive its end.

use datafusion::sql::sqlparser::ast::Statement;

use crate::service::{Command, QueryOutput, TransactionEffect};
use crate::session::Session;

/// Runs a transaction statement on `session`.
pub(crate) fn run(statement: &Statement, session: &mut Session) -> QueryOutput {
    // Reads need no undo: savepoints are accepted and change nothing.
    let (tag, effect) = match statement {
        Statement::StartTransaction { .. } => ("BEGIN", TransactionEffect::Begin),
        Statement::Commit { .. } => ("COMMIT", TransactionEffect::End),
        Statement::Savepoint { .. } => ("SAVEPOINT", TransactionEffect::None),
        Statement::ReleaseSavepoint { .. } => ("RELEASE", TransactionEffect::None),
        Statement::Rollback {
            savepoint: Some(_), ..
        } => ("ROLLBACK", TransactionEffect::None),
        _ => ("ROLLBACK", TransactionEffect::End),
    };
    if effect == TransactionEffect::End {
        session.end_transaction();
    }
    QueryOutput::Command(Command {
        transaction: effect,
        ..Command::new(tag)
    })
}

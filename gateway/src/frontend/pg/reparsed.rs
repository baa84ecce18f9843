//! The connection's last parsed text. Drivers send the same unnamed statement's Parse before
//! every execution (pgbench, psycopg, pgJDBC below its prepare threshold): a Parse of the text
//! the connection parsed last, with the same declared types, takes what that Parse made — the
//! statements, what runs, and the interned statement planning starts from — instead of
//! looking the text up and hashing its tree again. Parsing is a function of the text and the
//! types alone, so this is exact; everything else (catalog forwarding, the table versions, the
//! description) is decided again.

use std::sync::{Arc, Mutex};

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::Type;

use crate::service::Interned;

/// What a Parse of one text made.
#[derive(Clone)]
pub(super) struct Parsed {
    /// The text's statements, as the parser keeps them.
    pub(super) statements: Arc<Vec<Statement>>,
    /// What runs (the statement, or a copy with its placeholders typed).
    pub(super) statement: super::extended::Parsed,
    /// What runs, interned (a query that is planned).
    pub(super) interned: Option<Interned>,
    /// The text.
    pub(super) text: Arc<str>,
}

/// The connection's last Parse (one: a connection's driver repeats its last text).
#[derive(Default)]
pub(super) struct LastParsed(Mutex<Option<(Vec<Option<Type>>, Parsed)>>);

impl LastParsed {
    /// What the last Parse made, when it was of `sql` with `types`.
    pub(super) fn get(&self, sql: &str, types: &[Option<Type>]) -> Option<Parsed> {
        let last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match last.as_ref() {
            Some((declared, parsed)) if &*parsed.text == sql && declared == types => {
                Some(parsed.clone())
            }
            _ => None,
        }
    }

    /// Keeps what a Parse with `types` made.
    pub(super) fn put(&self, types: &[Option<Type>], parsed: Parsed) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((types.to_vec(), parsed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> Parsed {
        Parsed {
            statements: Arc::new(vec![]),
            statement: super::super::extended::Parsed::Shared(Arc::new(vec![])),
            interned: None,
            text: Arc::from(sql),
        }
    }

    #[test]
    fn only_the_same_text_with_the_same_declared_types_is_remembered() {
        let last = LastParsed::default();
        let sql = "SELECT * FROM t WHERE id = $1";
        assert!(last.get(sql, &[]).is_none());
        last.put(&[Some(Type::INT8)], parsed(sql));
        assert!(last.get(sql, &[Some(Type::INT8)]).is_some());
        // Typed differently, its placeholders are cast differently: parsed again.
        assert!(last.get(sql, &[Some(Type::INT4)]).is_none());
        assert!(last.get(sql, &[]).is_none());
        assert!(
            last.get("SELECT * FROM t WHERE id = $2", &[Some(Type::INT8)])
                .is_none()
        );
        // One text is remembered: the last.
        last.put(&[], parsed("SELECT 2"));
        assert!(last.get(sql, &[Some(Type::INT8)]).is_none());
        assert!(last.get("SELECT 2", &[]).is_some());
    }
}

//! What a Parse makes of a text: the statement (the parser's, shared; a copy with its
//! placeholders typed as declared; or a lifted text's values) and the statement interned for
//! planning it — and the connection's last one. Drivers send the same unnamed statement's
//! Parse before every execution (pgbench, psycopg, pgJDBC below its prepare threshold): a
//! Parse of the text the connection parsed last, with the same declared types, takes what that
//! Parse made instead of looking the text up and hashing its tree again. Parsing is a function
//! of the text and the types alone, so this is exact; everything else (catalog forwarding, the
//! table versions, the description) is decided again.

use std::sync::{Arc, Mutex};

use datafusion::sql::sqlparser::ast::Statement;
use lakegate_sql::lift::Lifted;
use pgwire::api::Type;

use crate::service::Interned;

/// Casts `$n` to the type the client declared for it in Parse, so the engine can plan calls
/// whose argument types it could not infer (SQLAlchemy's `pg_get_constraintdef(oid, $1)`).
/// `None` when the client declared no type (the statement runs as parsed).
pub(super) fn type_placeholders(
    statement: &Statement,
    types: &[Option<Type>],
) -> Option<Statement> {
    use datafusion::sql::sqlparser::ast::{
        DataType as SqlType, Expr, Value, visit_expressions_mut,
    };
    if types.iter().all(Option::is_none) {
        return None;
    }
    let mut statement = statement.clone();
    let sql_type = |t: &Type| -> Option<SqlType> {
        Some(match *t {
            Type::BOOL => SqlType::Boolean,
            Type::INT2 => SqlType::SmallInt(None),
            Type::INT4 => SqlType::Int(None),
            Type::INT8 => SqlType::BigInt(None),
            Type::FLOAT4 => SqlType::Real,
            Type::FLOAT8 => SqlType::DoublePrecision,
            Type::TEXT | Type::VARCHAR => SqlType::Text,
            Type::DATE => SqlType::Date,
            _ => return None,
        })
    };
    let _ = visit_expressions_mut(&mut statement, |expr| {
        if let Expr::Value(v) = expr
            && let Value::Placeholder(p) = &v.value
            && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
            && let Some(Some(t)) = types.get(n.wrapping_sub(1))
            && let Some(data_type) = sql_type(t)
        {
            *expr = Expr::Cast {
                kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                array: false,
                expr: Box::new(expr.clone()),
                data_type,
                format: None,
            };
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    Some(statement)
}

/// The statement Parse received: the parser's kept statements of the text, shared (not
/// copied on every Parse), or a copy with its placeholders typed as the client declared them.
#[derive(Debug, Clone)]
pub(super) enum Parsed {
    /// The text's statements (none, for an empty query; else one).
    Shared(Arc<Vec<Statement>>),
    /// With typed placeholders.
    Typed(Arc<Statement>),
    /// Not parsed: this text's values for the lifted template of a text of its shape (the
    /// statement's interned one; [`crate::service::GatewayService::lifted_shape`]).
    Lifted(Arc<[Lifted]>),
}

impl Parsed {
    /// What was parsed (`None` for an empty text, and for a lifted one: its template is the
    /// statement's interned one, [`super::extended::PgStatement`]).
    pub(super) fn get(&self) -> Option<&Statement> {
        match self {
            Self::Shared(statements) => statements.first(),
            Self::Typed(statement) => Some(statement),
            Self::Lifted(_) => None,
        }
    }

    /// What runs: `interned` (what was parsed, interned), else what was parsed.
    pub(super) fn runs<'a>(&'a self, interned: Option<&'a Interned>) -> Option<&'a Statement> {
        interned.map(Interned::statement).or_else(|| self.get())
    }

    /// A lifted text's values.
    pub(super) fn lifted(&self) -> Option<&[Lifted]> {
        match self {
            Self::Lifted(values) => Some(values),
            _ => None,
        }
    }
}

/// What a Parse of one text made.
#[derive(Clone)]
pub(super) struct Made {
    /// The text's statements, as the parser keeps them.
    pub(super) statements: Arc<Vec<Statement>>,
    /// What runs (the statement, or a copy with its placeholders typed).
    pub(super) statement: Parsed,
    /// What runs, interned (a query that is planned).
    pub(super) interned: Option<Interned>,
    /// The text.
    pub(super) text: Arc<str>,
}

/// The connection's last Parse (one: a connection's driver repeats its last text).
#[derive(Default)]
pub(super) struct LastParsed(Mutex<Option<(Vec<Option<Type>>, Made)>>);

impl LastParsed {
    /// What the last Parse made, when it was of `sql` with `types`.
    pub(super) fn get(&self, sql: &str, types: &[Option<Type>]) -> Option<Made> {
        let last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match last.as_ref() {
            Some((declared, parsed)) if &*parsed.text == sql && declared == types => {
                Some(parsed.clone())
            }
            _ => None,
        }
    }

    /// Keeps what a Parse with `types` made.
    pub(super) fn put(&self, types: &[Option<Type>], parsed: Made) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((types.to_vec(), parsed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> Made {
        Made {
            statements: Arc::new(vec![]),
            statement: Parsed::Shared(Arc::new(vec![])),
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

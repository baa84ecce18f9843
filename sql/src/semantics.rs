//! Rewrites that keep PostgreSQL's meaning on every engine, applied to each statement as it is
//! parsed (before the classifier, the planner or any engine sees it):
//!
//! - `agg(x) FILTER (WHERE c)` becomes `agg(x) FILTER (WHERE coalesce((c), false))`:
//!   PostgreSQL counts a row only when the filter is true; DataFusion 53 counts a NULL filter
//!   as true in `count(*)` over groups (measured: a grouped `count(*) FILTER (WHERE qty > 10)`
//!   counted the rows with a NULL `qty`). Not `(c) IS TRUE`: two aggregates with that filter
//!   (`sum(x) FILTER (…), avg(x) FILTER (…)`) made DataFusion's common-subexpression pass
//!   fail with an internal error (its nullability).
//! - `a ^ b` becomes `power(a, b)` (PostgreSQL's exponentiation operator; engines spell it as a
//!   function); `a ^@ b` becomes `starts_with(a, b)`, `mod(a, b)` becomes `a % b` and
//!   `every(x)` becomes `bool_and(x)` (the same functions under the names engines know).
//! - Time literals PostgreSQL accepts and engines may not are written out whole:
//!   `TIMESTAMP '2024-03-01 10:00'` (no seconds) becomes `TIMESTAMP '2024-03-01 10:00:00'`.
//! - `x op ANY/ALL (literal array)` is written out as `OR`/`AND` of comparisons
//!   ([`crate::any_all`]).

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Statement, Value,
    ValueWithSpan, visit_expressions_mut,
};

/// Applies every rewrite of this module to `statement`.
pub fn rewrite(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |expr| {
        rename(expr);
        match expr {
            Expr::Function(f) => {
                if let Some(filter) = f.filter.take() {
                    f.filter = Some(if passes_only_true(&filter) {
                        filter
                    } else {
                        Box::new(function_call(
                            "coalesce",
                            vec![Expr::Nested(filter), Expr::value(Value::Boolean(false))],
                        ))
                    });
                }
            }
            Expr::BinaryOp {
                op: BinaryOperator::PGExp,
                ..
            } => {
                let taken = std::mem::replace(expr, Expr::value(Value::Null));
                if let Expr::BinaryOp { left, right, .. } = taken {
                    *expr = function_call("power", vec![*left, *right]);
                }
            }
            Expr::TypedString(ts) if is_timestamp(&ts.data_type) => {
                if let Some(text) = string_of(&ts.value)
                    && let Some(whole) = whole_timestamp(text)
                {
                    ts.value.value = Value::SingleQuotedString(whole);
                }
            }
            Expr::Cast {
                kind: CastKind::DoubleColon | CastKind::Cast,
                expr: inner,
                data_type,
                ..
            } if is_timestamp(data_type) => {
                if let Expr::Value(v) = inner.as_mut()
                    && let Some(text) = string_of(v)
                    && let Some(whole) = whole_timestamp(text)
                {
                    v.value = Value::SingleQuotedString(whole);
                }
            }
            Expr::AnyOp { .. } | Expr::AllOp { .. } => crate::any_all::expand(expr),
            Expr::Like { .. } | Expr::ILike { .. } => crate::any_all::expand_like(expr),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Whether a FILTER condition is already `coalesce(c, false)` (the rewrite is idempotent).
fn passes_only_true(filter: &Expr) -> bool {
    let Expr::Function(g) = filter else {
        return false;
    };
    let FunctionArguments::List(list) = &g.args else {
        return false;
    };
    g.name.to_string() == "coalesce"
        && matches!(
            list.args.last(),
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v))))
                if v.value == Value::Boolean(false)
        )
}

/// PostgreSQL's spellings of functions every engine has under another name (module docs).
fn rename(expr: &mut Expr) {
    match expr {
        Expr::BinaryOp {
            op: BinaryOperator::PGStartsWith,
            ..
        } => {
            let taken = std::mem::replace(expr, Expr::value(Value::Null));
            if let Expr::BinaryOp { left, right, .. } = taken {
                *expr = function_call("starts_with", vec![*left, *right]);
            }
        }
        Expr::Function(f) if f.over.is_none() && f.within_group.is_empty() => {
            let name = f.name.to_string().to_ascii_lowercase();
            let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
            let FunctionArguments::List(list) = &f.args else {
                return;
            };
            let plain = |a: &FunctionArg| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                _ => None,
            };
            match name {
                "mod" if list.args.len() == 2 && list.duplicate_treatment.is_none() => {
                    if let (Some(a), Some(b)) = (plain(&list.args[0]), plain(&list.args[1])) {
                        *expr = Expr::Nested(Box::new(Expr::BinaryOp {
                            left: Box::new(Expr::Nested(Box::new(a))),
                            op: BinaryOperator::Modulo,
                            right: Box::new(Expr::Nested(Box::new(b))),
                        }));
                    }
                }
                "every" => {
                    f.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new("bool_and"))]);
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// `name(args…)` as a statement's function call (for rewrites here and in the engines).
pub fn function_call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn is_timestamp(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(..) | DataType::TimestampNtz(_))
}

fn string_of(v: &ValueWithSpan) -> Option<&str> {
    match &v.value {
        Value::SingleQuotedString(s) => Some(s),
        _ => None,
    }
}

/// `YYYY-MM-DD HH:MM` (and the same with a zone after it) with `:00` seconds added; `None`
/// when the text needs nothing (or is not of that shape).
fn whole_timestamp(text: &str) -> Option<String> {
    let trimmed = text.trim();
    let (date, rest) = trimmed.split_once([' ', 'T'])?;
    if date.len() != 10 || date.as_bytes().get(4) != Some(&b'-') {
        return None;
    }
    let rest = rest.trim_start();
    let clock_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':'))
        .unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(clock_end);
    let parts: Vec<&str> = clock.split(':').collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    Some(format!("{date} {clock}:00{zone}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    /// `sql` after [`super::rewrite`], printed (also the other rewrite modules' tests).
    pub(crate) fn rewritten(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("sql")
            .remove(0);
        super::rewrite(&mut s);
        s.to_string()
    }

    #[test]
    fn postgresql_spellings_become_the_engines() {
        assert_eq!(
            rewritten("SELECT mod(qty, 7), every(qty > 0), s ^@ 'a' FROM t"),
            "SELECT ((qty) % (7)), bool_and(qty > 0), starts_with(s, 'a') FROM t"
        );
    }

    #[test]
    fn filters_pass_only_true_rows() {
        assert_eq!(
            rewritten("SELECT count(*) FILTER (WHERE qty > 10) FROM t"),
            "SELECT count(*) FILTER (WHERE coalesce((qty > 10), false)) FROM t"
        );
        // Idempotent: the rewritten statement stays as it is.
        let once = rewritten("SELECT sum(x) FILTER (WHERE a OR b) FROM t");
        assert_eq!(rewritten(&once), once);
    }

    #[test]
    fn exponentiation_is_a_call_and_short_times_get_seconds() {
        assert_eq!(rewritten("SELECT 2 ^ 10"), "SELECT power(2, 10)");
        assert_eq!(
            rewritten("SELECT TIMESTAMP '2024-03-01 10:00', '2024-03-01 10:05+02'::timestamptz"),
            "SELECT TIMESTAMP '2024-03-01 10:00:00', '2024-03-01 10:05:00+02'::TIMESTAMPTZ"
        );
        assert_eq!(
            rewritten("SELECT TIMESTAMP '2024-03-01 10:00:01.5'"),
            "SELECT TIMESTAMP '2024-03-01 10:00:01.5'"
        );
    }
}

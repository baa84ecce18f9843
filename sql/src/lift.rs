//! Integer literals lifted out of a query's filters, so that statements differing only in the
//! values they look up share one plan.
//!
//! An application that does not prepare its statements (psycopg2, PHP's PDO, any driver over
//! the simple protocol) sends `… WHERE order_id = 42`, then `… = 43`: each is new text, so
//! everything planned for the first is planned again for the second. Lifting turns both into
//! `… WHERE order_id = CAST($1 AS INT)` with the value as a parameter, which is what a driver
//! that prepares the statement and declares the parameter `int4` sends; the plans kept for
//! prepared statements then serve these too.
//!
//! It is exact because PostgreSQL gives such a literal exactly that meaning: an integer literal
//! is an `integer` when it fits in 32 bits and a `bigint` otherwise, and a constant cast to its
//! own type is the constant. Only these are lifted:
//!
//! - an integer literal (digits only, or digits directly negated: `-5`; it fits in 64 bits),
//!   compared (`=`, `<>`, `<`, `<=`, `>`, `>=`) with a column, in an `IN` list after a column,
//!   or a bound of a column's `BETWEEN`;
//! - in a `WHERE`, through `AND`, `OR`, `NOT` and parentheses only (not under functions,
//!   `CASE` or arithmetic, where a literal's type can decide a result's);
//! - of a `SELECT` that has no parameters of its own and reads no `pg_catalog`,
//!   `information_schema` or `lakegate` table (catalog answers are not kept plans).
//!
//! `LIMIT`, `OFFSET`, select lists, `GROUP BY` and `ORDER BY` (where `1` is a column's
//! position) keep their literals.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, ObjectName, Query, SetExpr, Statement, UnaryOperator,
    Value, VisitMut, VisitorMut,
};

/// Lifted values per statement, at most (a longer `IN` list is left as written).
const MAX_LIFTED: usize = 256;

/// A lifted literal's value, typed as PostgreSQL types the literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifted {
    /// It fits in 32 bits: an `integer`.
    Int4(i32),
    /// A `bigint`.
    Int8(i64),
}

/// `statement` with its liftable literals replaced by `CAST($n AS INT)` / `CAST($n AS BIGINT)`,
/// and the values of `$1, $2, …` in order; `None` when it has none (see the module docs).
pub fn lift(statement: &Statement) -> Option<(Statement, Vec<Lifted>)> {
    if !matches!(statement, Statement::Query(_)) {
        return None;
    }
    let mut template = statement.clone();
    let mut lifter = Lifter::default();
    if VisitMut::visit(&mut template, &mut lifter).is_break() {
        return None;
    }
    let lifted = lifter.values.len();
    (lifted > 0 && lifted <= MAX_LIFTED).then_some((template, lifter.values))
}

/// The value of `expr` when it is a literal this module lifts: an integer literal, or one
/// negated directly (`-5`: PostgreSQL's grammar folds the sign into the constant, typed by the
/// negative value, so `-2147483648` is an `integer`).
fn liftable(expr: &Expr) -> Option<Lifted> {
    let (negative, expr) = match expr {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => (true, expr.as_ref()),
        other => (false, other),
    };
    let Expr::Value(v) = expr else {
        return None;
    };
    let Value::Number(digits, false) = &v.value else {
        return None;
    };
    integer(digits, negative)
}

/// How PostgreSQL types the integer literal of `digits` (negated when `negative`): `None` when
/// they are not all digits, or past 64 bits (a `numeric`).
pub fn integer(digits: &str, negative: bool) -> Option<Lifted> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i128>().ok()?;
    let value = if negative { -magnitude } else { magnitude };
    match i32::try_from(value) {
        Ok(v) => Some(Lifted::Int4(v)),
        Err(_) => i64::try_from(value).ok().map(Lifted::Int8),
    }
}

/// A column reference (`c`, `t.c`).
fn is_column(expr: &Expr) -> bool {
    matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

/// The literal operands of `expr` (a WHERE, or a part of one) that may be lifted, in the order
/// they are lifted: `each` is called with every one.
fn each_operand(expr: &mut Expr, each: &mut dyn FnMut(&mut Expr)) {
    match expr {
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::And | BinaryOperator::Or => {
                each_operand(left, each);
                each_operand(right, each);
            }
            op if crate::any_all::is_comparison(op) => {
                if is_column(left) {
                    each(right);
                } else if is_column(right) {
                    each(left);
                }
            }
            _ => {}
        },
        Expr::Nested(inner)
        | Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: inner,
        } => each_operand(inner, each),
        Expr::InList { expr, list, .. } if is_column(expr) => list.iter_mut().for_each(each),
        Expr::Between {
            expr, low, high, ..
        } if is_column(expr) => {
            each(low);
            each(high);
        }
        _ => {}
    }
}

/// The WHEREs of a query's body (each `SELECT` of a set operation); nested queries are
/// visited on their own.
fn each_where(body: &mut SetExpr, each: &mut dyn FnMut(&mut Expr)) {
    match body {
        SetExpr::Select(select) => {
            if let Some(selection) = &mut select.selection {
                each(selection);
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            each_where(left, each);
            each_where(right, each);
        }
        _ => {}
    }
}

/// Whether a table name reads the catalog or `lakegate.*` (as [`crate::classify::references`]
/// classifies names; a name it cannot read counts as one).
fn names_catalog(name: &ObjectName) -> bool {
    use crate::classify::{SYSTEM_SCHEMAS, name_parts};
    match name_parts(name).unwrap_or_default().as_slice() {
        [table] => table.starts_with("pg_"),
        [.., schema, _] => SYSTEM_SCHEMAS.contains(&schema.as_str()),
        [] => true,
    }
}

/// Replaces liftable literals by cast placeholders in one walk: a query's WHERE is lifted
/// after its own expressions were visited (so the placeholders made here are never taken for
/// the statement's own), inner queries before the query around them. Breaks on a placeholder
/// of the statement's own or a catalog table: nothing is lifted then.
#[derive(Default)]
struct Lifter {
    values: Vec<Lifted>,
}

impl VisitorMut for Lifter {
    type Break = ();

    fn pre_visit_relation(&mut self, relation: &mut ObjectName) -> ControlFlow<()> {
        if names_catalog(relation) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::Value(v) if matches!(v.value, Value::Placeholder(_)) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let values = &mut self.values;
        each_where(&mut query.body, &mut |w| {
            each_operand(w, &mut |e| {
                let Some(value) = liftable(e) else {
                    return;
                };
                values.push(value);
                let data_type = match value {
                    Lifted::Int4(_) => DataType::Int(None),
                    Lifted::Int8(_) => DataType::BigInt(None),
                };
                *e = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(Expr::value(Value::Placeholder(format!(
                        "${}",
                        values.len()
                    )))),
                    data_type,
                    array: false,
                    format: None,
                };
            });
        });
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("test SQL parses")
            .pop()
            .expect("one statement")
    }

    fn lifted(sql: &str) -> Option<(String, Vec<Lifted>)> {
        lift(&parse(sql)).map(|(s, v)| (s.to_string(), v))
    }

    #[test]
    fn lookups_share_one_template() {
        let (a, va) = lifted("SELECT * FROM shop.orders WHERE order_id = 42").expect("lifted");
        let (b, vb) = lifted("SELECT * FROM shop.orders WHERE order_id = 43").expect("lifted");
        assert_eq!(a, b);
        assert_eq!(
            a,
            "SELECT * FROM shop.orders WHERE order_id = CAST($1 AS INT)"
        );
        assert_eq!(va, vec![Lifted::Int4(42)]);
        assert_eq!(vb, vec![Lifted::Int4(43)]);
    }

    #[test]
    fn literals_are_typed_as_postgresql_types_them() {
        let (sql, values) =
            lifted("SELECT 1 FROM t WHERE a = 2147483647 AND b = 2147483648").expect("lifted");
        assert_eq!(
            sql,
            "SELECT 1 FROM t WHERE a = CAST($1 AS INT) AND b = CAST($2 AS BIGINT)"
        );
        assert_eq!(
            values,
            vec![Lifted::Int4(2_147_483_647), Lifted::Int8(2_147_483_648)]
        );
        // Past 64 bits a literal is a numeric: left as written.
        assert!(lifted("SELECT 1 FROM t WHERE a = 99999999999999999999").is_none());
        // Not integers: left as written.
        for sql in [
            "SELECT 1 FROM t WHERE a = 1.5",
            "SELECT 1 FROM t WHERE a = -1.5",
            "SELECT 1 FROM t WHERE a = 1e3",
            "SELECT 1 FROM t WHERE a = 'x'",
            "SELECT 1 FROM t WHERE a = -(1)",
            "SELECT 1 FROM t WHERE a = - -1",
            "SELECT 1 FROM t WHERE a = -1 + 2",
        ] {
            assert!(lifted(sql).is_none(), "{sql}");
        }
    }

    #[test]
    fn negative_literals_are_typed_by_their_value() {
        let (sql, values) = lifted(
            "SELECT 1 FROM t WHERE a = -1 AND b > -2147483648 AND c < -2147483649 \
             AND d IN (-3, 4) AND e BETWEEN -9223372036854775808 AND -5",
        )
        .expect("lifted");
        assert_eq!(
            sql,
            "SELECT 1 FROM t WHERE a = CAST($1 AS INT) AND b > CAST($2 AS INT) \
             AND c < CAST($3 AS BIGINT) AND d IN (CAST($4 AS INT), CAST($5 AS INT)) \
             AND e BETWEEN CAST($6 AS BIGINT) AND CAST($7 AS INT)"
        );
        assert_eq!(
            values,
            vec![
                Lifted::Int4(-1),
                Lifted::Int4(i32::MIN),
                Lifted::Int8(-2_147_483_649),
                Lifted::Int4(-3),
                Lifted::Int4(4),
                Lifted::Int8(i64::MIN),
                Lifted::Int4(-5),
            ]
        );
        // Past 64 bits: a numeric, left as written.
        assert!(lifted("SELECT 1 FROM t WHERE a = -9223372036854775809").is_none());
    }

    #[test]
    fn only_comparisons_with_columns_in_wheres_are_lifted() {
        let (sql, values) = lifted(
            "SELECT a, 7 FROM t WHERE (c = 1 OR NOT d <> 2) AND 3 < e AND f IN (4, 5) \
             AND g BETWEEN 6 AND 8 AND h + 1 = 9 AND lower(i) = 10 AND 11 = 12 \
             GROUP BY 1 ORDER BY 2 LIMIT 13 OFFSET 14",
        )
        .expect("lifted");
        assert_eq!(
            sql,
            "SELECT a, 7 FROM t WHERE (c = CAST($1 AS INT) OR NOT d <> CAST($2 AS INT)) \
             AND CAST($3 AS INT) < e AND f IN (CAST($4 AS INT), CAST($5 AS INT)) \
             AND g BETWEEN CAST($6 AS INT) AND CAST($7 AS INT) AND h + 1 = 9 \
             AND lower(i) = 10 AND 11 = 12 GROUP BY 1 ORDER BY 2 LIMIT 13 OFFSET 14"
        );
        assert_eq!(values.len(), 7);
        // A CASE, a select list, a HAVING: as written.
        assert!(lifted("SELECT CASE WHEN a = 1 THEN 2 END FROM t").is_none());
        assert!(lifted("SELECT a FROM t GROUP BY a HAVING count(*) > 1").is_none());
    }

    #[test]
    fn subqueries_and_unions_are_lifted_in_order() {
        let (sql, values) = lifted(
            "SELECT a FROM t WHERE a = 1 AND b IN (SELECT b FROM u WHERE c = 2) \
             UNION ALL SELECT a FROM v WHERE d = 3",
        )
        .expect("lifted");
        assert_eq!(values.len(), 3);
        assert!(sql.contains("c = CAST($1 AS INT)"), "{sql}");
        assert!(sql.contains("a = CAST($2 AS INT)"), "{sql}");
        assert!(sql.contains("d = CAST($3 AS INT)"), "{sql}");
        let again = lifted(
            "SELECT a FROM t WHERE a = 5 AND b IN (SELECT b FROM u WHERE c = 6) \
             UNION ALL SELECT a FROM v WHERE d = 7",
        )
        .expect("lifted");
        assert_eq!(again.0, sql);
        assert_eq!(
            again.1,
            vec![Lifted::Int4(6), Lifted::Int4(5), Lifted::Int4(7)]
        );
    }

    #[test]
    fn placeholders_catalogs_and_other_statements_are_left_alone() {
        for sql in [
            "SELECT * FROM t WHERE a = $1 AND b = 2",
            "SELECT * FROM pg_class WHERE oid = 1259",
            "SELECT * FROM pg_catalog.pg_type WHERE oid = 23",
            "SELECT * FROM information_schema.columns WHERE ordinal_position = 1",
            "SELECT * FROM lakegate.query_history WHERE id = 3",
            "SELECT * FROM t WHERE a IN (SELECT oid FROM pg_class WHERE relnatts = 2)",
            "SET statement_timeout = 5",
            "SELECT 1",
        ] {
            assert!(lifted(sql).is_none(), "{sql}");
        }
    }

    #[test]
    fn long_in_lists_are_left_as_written() {
        let list: Vec<String> = (0..=MAX_LIFTED).map(|i| i.to_string()).collect();
        let sql = format!("SELECT * FROM t WHERE a IN ({})", list.join(", "));
        assert!(lifted(&sql).is_none());
    }
}

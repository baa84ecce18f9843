//! PostgreSQL's quoted literals compared with numbers.
//!
//! In PostgreSQL `'4'` is of type `unknown` until its context types it: compared with an
//! `integer`, it is read as an `integer` (`customer_id BETWEEN '5' AND '10'` is a numeric range,
//! and `customer_id = 'x'` fails with 22P02). DataFusion types it as text and compares the
//! number as text instead: `customer_id BETWEEN '0' AND '4'` counted customer 10 to 39 too
//! (`'10' <= '4'`), and `customer_id BETWEEN '5' AND '10'` nothing. (Measured 2026-12-05 on the
//! accelerated engine; the files engine hid it where Iceberg's own pruning, which types the
//! literal by the column, dropped the rows first.)
//!
//! [`PgUnknownLiterals`] runs before DataFusion's type coercion, so an explicit cast still
//! compares text (`customer_id::text = '5'`): a text literal that is itself an operand of a
//! comparison, `BETWEEN` or `IN` list whose other side is a number is cast to that number's
//! type, as PostgreSQL reads it. Dates and timestamps need nothing here: DataFusion already
//! reads the literal as the column's type ([`crate::pg_datetime_input`] reads it as
//! PostgreSQL does).

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{Between, BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

use crate::pg_float_keys::compares;

/// The analyzer rule (see the module docs); it must run before type coercion.
#[derive(Debug, Default)]
pub struct PgUnknownLiterals;

impl AnalyzerRule for PgUnknownLiterals {
    fn name(&self) -> &str {
        "lakegate_pg_unknown_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        crate::semantics::rewrite_plan(plan, |_| true, |e, schema| Ok(typed(e, schema)))
    }
}

/// `e` with the text literals it compares with a number cast to that number's type.
fn typed(mut e: Expr, schema: &DFSchema) -> Transformed<Expr> {
    let mut changed = false;
    match &mut e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if compares(*op) => {
            match (numeric(left, schema), numeric(right, schema)) {
                (Some(t), None) => changed = as_number(right, &t),
                (None, Some(t)) => changed = as_number(left, &t),
                _ => {}
            }
        }
        Expr::Between(Between {
            expr, low, high, ..
        }) => {
            if let Some(t) = numeric(expr, schema) {
                changed = as_number(low, &t) | as_number(high, &t);
            }
        }
        Expr::InList(InList { expr, list, .. }) => {
            if let Some(t) = numeric(expr, schema) {
                for item in list.iter_mut() {
                    changed |= as_number(item, &t);
                }
            }
        }
        _ => {}
    }
    Transformed::new_transformed(e, changed)
}

/// Whether `e` compares a quoted literal with a number (what [`PgUnknownLiterals`] reads as that
/// number): a construct of its own, since engines read it differently
/// ([`crate::constructs`]).
pub(crate) fn reads_text_as_number(e: &Expr, schema: &DFSchema) -> bool {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if compares(*op) => {
            (numeric(left, schema).is_some() && is_text_literal(right))
                || (numeric(right, schema).is_some() && is_text_literal(left))
        }
        Expr::Between(Between {
            expr, low, high, ..
        }) => numeric(expr, schema).is_some() && (is_text_literal(low) || is_text_literal(high)),
        Expr::InList(InList { expr, list, .. }) => {
            numeric(expr, schema).is_some() && list.iter().any(is_text_literal)
        }
        _ => false,
    }
}

/// Casts `e` to `t` when it is a text literal; whether it was.
fn as_number(e: &mut Expr, t: &DataType) -> bool {
    if !is_text_literal(e) {
        return false;
    }
    let literal = std::mem::replace(e, Expr::Literal(ScalarValue::Null, None));
    *e = cast(literal, t.clone());
    true
}

/// `e`'s type, when it is a number.
fn numeric(e: &Expr, schema: &DFSchema) -> Option<DataType> {
    if is_text_literal(e) {
        return None;
    }
    e.get_type(schema).ok().filter(DataType::is_numeric)
}

/// A quoted literal as written (PostgreSQL's `unknown`): text, or a text NULL.
fn is_text_literal(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Literal(
            ScalarValue::Utf8(_) | ScalarValue::Utf8View(_) | ScalarValue::LargeUtf8(_),
            _
        )
    )
}

fn cast(literal: Expr, to: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(literal), to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    async fn context() -> SessionContext {
        let ctx = SessionContext::new();
        let state = ctx.state();
        let mut rules = state.analyzer().rules.clone();
        rules.insert(0, Arc::new(PgUnknownLiterals));
        let state = datafusion::execution::SessionStateBuilder::new_from_existing(state)
            .with_analyzer_rules(rules)
            .build();
        let ctx = SessionContext::new_with_state(state);
        ctx.sql(
            "CREATE TABLE t (id INT, big BIGINT, price DECIMAL(10,2), f DOUBLE) AS VALUES \
             (1, 1, 1.50, 1.5), (4, 4, 4.00, 4.0), (5, 5, 5.25, 5.0), (10, 10, 10.00, 10.0), \
             (39, 39, 39.90, 39.0)",
        )
        .await
        .expect("create")
        .collect()
        .await
        .expect("create");
        ctx
    }

    async fn ids(ctx: &SessionContext, filter: &str) -> Result<String, String> {
        let sql = format!("SELECT id FROM t WHERE {filter} ORDER BY id");
        let batches = ctx
            .sql(&sql)
            .await
            .map_err(|e| e.to_string())?
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let text = pretty_format_batches(&batches)
            .map_err(|e| e.to_string())?
            .to_string();
        Ok(text
            .lines()
            .filter_map(|l| l.trim_matches(|c| c == '|' || c == ' ').parse::<i32>().ok())
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(","))
    }

    #[tokio::test]
    async fn quoted_literals_compare_with_numbers_as_numbers() {
        let ctx = context().await;
        for (filter, want) in [
            ("id BETWEEN '0' AND '4'", "1,4"),
            ("id BETWEEN '5' AND '10'", "5,10"),
            ("big NOT BETWEEN '5' AND '10'", "1,4,39"),
            ("'4' < id", "5,10,39"),
            ("big >= '10'", "10,39"),
            ("id IN ('1', '010', 39)", "1,10,39"),
            ("price > '5.1'", "5,10,39"),
            ("f = '1.5'", "1"),
            ("id IS DISTINCT FROM '4'", "1,5,10,39"),
            // An explicit cast compares text, as PostgreSQL does.
            ("CAST(id AS TEXT) < '4'", "1,10,39"),
        ] {
            assert_eq!(ids(&ctx, filter).await.as_deref(), Ok(want), "{filter}");
        }
    }

    #[tokio::test]
    async fn a_quoted_literal_that_is_no_number_fails() {
        let ctx = context().await;
        assert!(ids(&ctx, "id = 'x'").await.is_err());
        assert!(ids(&ctx, "big < '1.5'").await.is_err());
    }
}

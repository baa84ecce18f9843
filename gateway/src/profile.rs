//! The query profile the router decides on: [`lakegate_sql::profile`] (shape, tables, columns,
//! LIMIT), plus binding a client's parameter values into a WHERE clause.

pub use lakegate_sql::profile::*;

use datafusion::common::{ParamValues, ScalarValue};
use datafusion::sql::sqlparser::ast::Expr;

/// `expr` with bound parameters (`$1`, …) replaced by their values as string literals, so a
/// parameterised WHERE translates to an Iceberg predicate like a literal one would (a NULL
/// stays a placeholder).
pub fn bind_parameters(expr: &Expr, params: Option<&ParamValues>) -> Expr {
    let Some(ParamValues::List(values)) = params else {
        return expr.clone();
    };
    lakegate_sql::profile::bind_parameters(expr, |n| {
        let v = values.get(n.checked_sub(1)?)?;
        if v.value.is_null() {
            return None;
        }
        Some(match &v.value {
            ScalarValue::TimestampMicrosecond(Some(us), Some(_)) => {
                chrono::DateTime::from_timestamp_micros(*us)
                    .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string())
                    .unwrap_or_else(|| v.value.to_string())
            }
            other => other.to_string(),
        })
    })
}

#[cfg(test)]
mod bind_tests {
    use datafusion::common::{ParamValues, ScalarValue};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    #[test]
    fn parameters_become_literals_for_predicates() {
        let expr = Parser::new(&PostgreSqlDialect {})
            .try_with_sql("order_ts >= $1::timestamptz AND customer_id = $2 AND x = $3")
            .and_then(|mut p| p.parse_expr())
            .expect("expr");
        let params = ParamValues::List(vec![
            ScalarValue::TimestampMicrosecond(Some(1_795_000_000_000_000), Some("UTC".into()))
                .into(),
            ScalarValue::Int64(Some(42)).into(),
            ScalarValue::Int64(None).into(),
        ]);
        let bound = super::bind_parameters(&expr, Some(&params)).to_string();
        assert!(
            bound.contains("order_ts >= '2026-11-18T11:06:40"),
            "{bound}"
        );
        assert!(bound.contains("customer_id = '42'"), "{bound}");
        assert!(
            bound.contains("x = $3"),
            "a NULL stays a placeholder: {bound}"
        );
    }
}

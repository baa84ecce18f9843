//! Statements that are one row of literals — `SELECT 1`, `SELECT 1 AS ok, true` — the
//! validation query of every connection pool. They read nothing, so they are answered here,
//! with PostgreSQL's types and column names, without planning, an engine or the catalog
//! mirror (a round trip to it costs more than the rest of the statement).
//!
//! Only what has one PostgreSQL answer independent of any setting is taken: integer literals
//! (`int4`, `int8` past its range; larger ones are `numeric` and go the usual way) and
//! booleans, each optionally aliased, in a bare `SELECT` with no other clause. PostgreSQL names
//! an unaliased literal `?column?` (a boolean too since PostgreSQL 15; 14 said `bool`).

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    Expr, GroupByExpr, Query, Select, SelectFlavor, SelectItem, SetExpr, Statement, Value,
};

/// A statement's one row, and its columns.
#[derive(Debug, Clone)]
pub struct Constant {
    /// The columns, with PostgreSQL's names and types.
    pub schema: SchemaRef,
    /// The row.
    pub batch: RecordBatch,
}

/// The answer of `statement` when it is a row of literals this module takes.
pub fn of(statement: &Statement) -> Option<Constant> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let items = bare_select(query)?;
    let mut fields = Vec::with_capacity(items.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(items.len());
    for item in items {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(expr) => (expr, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
            _ => return None,
        };
        let Expr::Value(value) = expr else {
            return None;
        };
        let (column, data_type): (ArrayRef, DataType) = match &value.value {
            Value::Number(digits, false) if digits.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(n) = digits.parse::<i32>() {
                    (Arc::new(Int32Array::from(vec![n])), DataType::Int32)
                } else {
                    let n = digits.parse::<i64>().ok()?;
                    (Arc::new(Int64Array::from(vec![n])), DataType::Int64)
                }
            }
            Value::Boolean(b) => (Arc::new(BooleanArray::from(vec![*b])), DataType::Boolean),
            _ => return None,
        };
        let name = match alias {
            // PostgreSQL folds unquoted names to lower case.
            Some(a) if a.quote_style.is_none() => a.value.to_lowercase(),
            Some(a) => a.value.clone(),
            None => "?column?".to_string(),
        };
        fields.push(Field::new(name, data_type, false));
        columns.push(column);
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).ok()?;
    Some(Constant { schema, batch })
}

/// The select list of a `SELECT` with no clause but its list (every field is named, so a
/// clause sqlparser adds is refused until it is looked at here).
fn bare_select(query: &Query) -> Option<&[SelectItem]> {
    let Query {
        with: None,
        body,
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks,
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators,
    } = query
    else {
        return None;
    };
    if !locks.is_empty() || !pipe_operators.is_empty() {
        return None;
    }
    let SetExpr::Select(select) = body.as_ref() else {
        return None;
    };
    let Select {
        select_token: _,
        optimizer_hint: None,
        distinct: None,
        select_modifiers: None,
        top: None,
        top_before_distinct: _,
        projection,
        exclude: None,
        into: None,
        from,
        lateral_views,
        prewhere: None,
        selection: None,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having: None,
        named_window,
        qualify: None,
        window_before_qualify: _,
        value_table_mode: None,
        flavor: SelectFlavor::Standard,
    } = select.as_ref()
    else {
        return None;
    };
    let no_grouping =
        matches!(group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    let empty = from.is_empty()
        && lateral_views.is_empty()
        && connect_by.is_empty()
        && cluster_by.is_empty()
        && distribute_by.is_empty()
        && sort_by.is_empty()
        && named_window.is_empty();
    (no_grouping && empty && !projection.is_empty()).then_some(projection.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::parse::Parser;

    fn constant(sql: &str) -> Option<Constant> {
        let statements = Parser::new(64).parse(sql).expect("parses");
        of(&statements[0])
    }

    fn columns(sql: &str) -> Vec<(String, DataType)> {
        constant(sql)
            .expect("a constant")
            .schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect()
    }

    #[test]
    fn literals_get_postgresqls_types_and_names() {
        assert_eq!(columns("SELECT 1"), [("?column?".into(), DataType::Int32)]);
        assert_eq!(
            columns("select 2147483648 AS Big, true, false AS \"Ok\""),
            [
                ("big".into(), DataType::Int64),
                ("?column?".into(), DataType::Boolean),
                ("Ok".into(), DataType::Boolean)
            ]
        );
        let c = constant("SELECT 7").expect("a constant");
        let values = c.batch.column(0).as_any().downcast_ref::<Int32Array>();
        assert_eq!(values.map(|v| v.value(0)), Some(7));
    }

    #[test]
    fn anything_else_goes_the_usual_way() {
        for sql in [
            "SELECT 1 WHERE false",
            "SELECT 1 LIMIT 0",
            "SELECT 1 OFFSET 1",
            "SELECT DISTINCT 1",
            "SELECT 1 ORDER BY 1",
            "SELECT 1 GROUP BY 1",
            "SELECT 1 HAVING false",
            "SELECT 1 FROM shop.orders",
            "SELECT 1 UNION SELECT 2",
            "WITH a AS (SELECT 2) SELECT 1",
            "SELECT -1",
            "SELECT 1.5",
            "SELECT 99999999999999999999",
            "SELECT 'a'",
            "SELECT NULL",
            "SELECT 1 + 1",
            "SELECT *",
            "VALUES (1)",
        ] {
            assert!(constant(sql).is_none(), "{sql} is not taken");
        }
    }
}

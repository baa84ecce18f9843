//! PostgreSQL's names for result columns. PostgreSQL names an unaliased `count(*)` "count",
//! `x::text` "x" and a bare expression "?column?"; DataFusion would say "count(*)" and
//! "CAST(x AS Utf8)". BI tools show and key on these names, so lakegate answers with
//! PostgreSQL's: unaliased select items get an alias before planning, and the result schema is
//! renamed after (PostgreSQL allows duplicate names, DataFusion does not).

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectNamePart, SelectItem, SetExpr, Statement, Value,
};
use futures::StreamExt;

/// Aliases the unaliased items of a top-level `SELECT` with PostgreSQL's names and returns the
/// names the result must carry (`None`: leave the engine's names, e.g. for `SELECT *`).
pub fn apply(statement: &mut Statement) -> Option<Vec<String>> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    if select.projection.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _)
        )
    }) {
        return None;
    }
    let mut names = Vec::with_capacity(select.projection.len());
    let mut used: Vec<String> = Vec::new();
    for item in select.projection.iter_mut() {
        match item {
            SelectItem::ExprWithAlias { alias, .. } => names.push(normalize(alias)),
            SelectItem::UnnamedExpr(expr) => match expr {
                // A column named once keeps its own name; named again (`SELECT id, id`), it
                // gets an internal alias like any expression.
                Expr::Identifier(_) | Expr::CompoundIdentifier(_)
                    if !names.contains(&pg_name(expr)) =>
                {
                    let name = pg_name(expr);
                    used.push(name.clone());
                    names.push(name);
                }
                _ => {
                    let name = pg_name(expr);
                    // DataFusion needs unique names; the result is renamed back afterwards.
                    let mut internal = name.clone();
                    let mut n = 1;
                    while used.contains(&internal) {
                        internal = format!("{name}_{n}");
                        n += 1;
                    }
                    used.push(internal.clone());
                    let alias = Ident::with_quote('"', internal);
                    *item = SelectItem::ExprWithAlias {
                        expr: expr.clone(),
                        alias,
                    };
                    names.push(name);
                }
            },
            _ => return None,
        }
    }
    Some(names)
}

fn normalize(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

/// The name PostgreSQL gives an unaliased expression.
fn pg_name(expr: &Expr) -> String {
    match expr {
        Expr::Identifier(i) => normalize(i),
        Expr::CompoundIdentifier(parts) => parts.last().map(normalize).unwrap_or_default(),
        Expr::Function(f) => match f.name.0.last() {
            Some(ObjectNamePart::Identifier(i)) => normalize(i),
            _ => "?column?".into(),
        },
        Expr::Cast {
            expr, data_type, ..
        } => match expr.as_ref() {
            Expr::Value(_) => data_type.to_string().to_ascii_lowercase(),
            inner => pg_name(inner),
        },
        Expr::Nested(inner) => pg_name(inner),
        Expr::Case { .. } => "case".into(),
        Expr::Extract { .. } => "extract".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Value(v) if matches!(v.value, Value::Boolean(_)) => "bool".into(),
        _ => "?column?".into(),
    }
}

/// `schema` with its first fields renamed to `names` (columns after them — the hidden
/// operands of [`super::numeric`] — keep theirs); unchanged when there are fewer fields.
pub fn rename_schema(schema: &SchemaRef, names: &[String]) -> SchemaRef {
    if schema.fields().len() < names.len() {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match names.get(i) {
            Some(n) => f.as_ref().clone().with_name(n.clone()),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The stream with its result columns renamed.
pub fn rename_stream(
    stream: SendableRecordBatchStream,
    names: &[String],
) -> SendableRecordBatchStream {
    let schema = rename_schema(&stream.schema(), names);
    with_schema(stream, schema)
}

/// The stream with its batches relabelled as `schema` (the same columns: other names or
/// field metadata).
pub fn with_schema(
    stream: SendableRecordBatchStream,
    schema: SchemaRef,
) -> SendableRecordBatchStream {
    if Arc::ptr_eq(&schema, &stream.schema()) {
        return stream;
    }
    let out = schema.clone();
    let renamed = stream.map(move |batch| {
        let batch = batch?;
        Ok(arrow::record_batch::RecordBatch::try_new(
            out.clone(),
            batch.columns().to_vec(),
        )?)
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, renamed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn names(sql: &str) -> Option<Vec<String>> {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("valid")
            .remove(0);
        apply(&mut s)
    }

    #[test]
    fn names_follow_postgres() {
        assert_eq!(
            names(
                "SELECT count(*), sum(o.amount), o.status, x::text, 1 + 1, now() AS t, \"Mixed\" FROM o"
            ),
            Some(vec![
                "count".to_string(),
                "sum".into(),
                "status".into(),
                "x".into(),
                "?column?".into(),
                "t".into(),
                "Mixed".into()
            ])
        );
        assert_eq!(names("SELECT * FROM o"), None);
    }

    #[test]
    fn duplicate_names_get_unique_internal_aliases() {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT count(a), count(b) FROM t")
            .expect("valid")
            .remove(0);
        let got = apply(&mut s);
        assert_eq!(got, Some(vec!["count".to_string(), "count".into()]));
        let sql = s.to_string();
        assert!(
            sql.contains("AS \"count\"") && sql.contains("AS \"count_1\""),
            "{sql}"
        );
        // A column selected twice: the second gets the internal alias, both are named `id`.
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT id, t.id, id + 1 FROM t")
            .expect("valid")
            .remove(0);
        let got = apply(&mut s);
        assert_eq!(
            got,
            Some(vec!["id".to_string(), "id".into(), "?column?".into()])
        );
        assert_eq!(
            s.to_string(),
            "SELECT id, t.id AS \"id_1\", id + 1 AS \"?column?\" FROM t"
        );
    }
}

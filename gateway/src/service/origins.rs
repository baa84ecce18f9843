//! Where a result column comes from, as PostgreSQL reports it in RowDescription: the table's
//! OID, the column's attribute number and its typmod, for output columns that are plain
//! references to a lake table's column (`SELECT price FROM conf.sales`, `s.price AS p`,
//! `SELECT *` of one table). pgJDBC's `ResultSetMetaData` (precision, scale, table name,
//! nullability) and Npgsql's schema lookups read them. The numbers are the catalog mirror's,
//! so they agree with `pg_attribute`; they ride on the Arrow fields' metadata to the wire.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, Statement, TableFactor};
use lakegate_sql::classify::{name_parts, normalise};

/// The Arrow field metadata key carrying `table_oid,attnum,typmod`.
pub const ORIGIN_KEY: &str = "lakegate.pg_origin";

/// A lake column: (schema, table, column).
pub type ColumnRef = (String, String, String);

/// Where each output column of a statement comes from, before the catalog is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    /// One entry per select item.
    Items(Vec<Option<ColumnRef>>),
    /// `SELECT *` of one table: every output column is that table's column of the same name.
    AllOf(String, String),
}

/// The origins of `statement`'s output columns (`None`: none can be named: set operations,
/// subqueries in FROM, table functions, several tables under `*`).
pub fn of(statement: &Statement, default_schema: &str) -> Option<Origins> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let ctes: Vec<String> = query
        .with
        .as_ref()
        .map(|w| {
            w.cte_tables
                .iter()
                .map(|c| normalise(&c.alias.name))
                .collect()
        })
        .unwrap_or_default();
    // The relations in FROM, by the name a column may be qualified with.
    let mut relations: Vec<(String, (String, String))> = Vec::new();
    for from in &select.from {
        for factor in std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation))
        {
            let TableFactor::Table { name, alias, .. } = factor else {
                return None;
            };
            let parts = name_parts(name)?;
            let (schema, table) = match parts.as_slice() {
                [t] if ctes.contains(t) => return None,
                [t] => (default_schema.to_string(), t.clone()),
                [s, t] | [_, s, t] => (s.clone(), t.clone()),
                _ => return None,
            };
            let key = alias
                .as_ref()
                .map_or_else(|| table.clone(), |a| normalise(&a.name));
            relations.push((key, (schema, table)));
        }
    }
    if let [SelectItem::Wildcard(_)] = select.projection.as_slice() {
        return match relations.as_slice() {
            [(_, (s, t))] => Some(Origins::AllOf(s.clone(), t.clone())),
            _ => None,
        };
    }
    let column = |expr: &Expr| -> Option<ColumnRef> {
        match expr {
            Expr::Identifier(c) => match relations.as_slice() {
                [(_, (s, t))] => Some((s.clone(), t.clone(), normalise(c))),
                _ => None,
            },
            Expr::CompoundIdentifier(parts) => {
                let names: Vec<String> = parts.iter().map(normalise).collect();
                match names.as_slice() {
                    [q, c] => relations
                        .iter()
                        .find(|(k, _)| k == q)
                        .map(|(_, (s, t))| (s.clone(), t.clone(), c.clone())),
                    [s, t, c] => Some((s.clone(), t.clone(), c.clone())),
                    _ => None,
                }
            }
            _ => None,
        }
    };
    let mut items = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        items.push(match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => column(e),
            _ => return None,
        });
    }
    items
        .iter()
        .any(Option::is_some)
        .then_some(Origins::Items(items))
}

/// A column's place in the catalog: (table OID, attribute number, typmod).
pub type Attribute = (u32, i16, i32);

/// `schema` with each output column's catalog place in its metadata, as `lookup` gives it.
pub fn annotate(
    schema: &SchemaRef,
    origins: &Origins,
    lookup: impl Fn(&str, &str, &str) -> Option<Attribute>,
) -> SchemaRef {
    let origin_of = |i: usize, f: &Field| -> Option<Attribute> {
        match origins {
            Origins::Items(items) => {
                let (s, t, c) = items.get(i)?.as_ref()?;
                lookup(s, t, c)
            }
            Origins::AllOf(s, t) => lookup(s, t, f.name()),
        }
    };
    let mut changed = false;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match origin_of(i, f) {
            Some((oid, attnum, typmod)) => {
                changed = true;
                let mut metadata: HashMap<String, String> = f.metadata().clone();
                metadata.insert(ORIGIN_KEY.into(), format!("{oid},{attnum},{typmod}"));
                f.as_ref().clone().with_metadata(metadata)
            }
            None => f.as_ref().clone(),
        })
        .collect();
    if !changed {
        return schema.clone();
    }
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The catalog place a field carries.
pub fn attribute(field: &Field) -> Option<Attribute> {
    let mut parts = field.metadata().get(ORIGIN_KEY)?.split(',');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn origins(sql: &str) -> Option<Origins> {
        let s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .pop()
            .expect("one");
        of(&s, "public")
    }

    fn col(s: &str, t: &str, c: &str) -> Option<ColumnRef> {
        Some((s.into(), t.into(), c.into()))
    }

    #[test]
    fn plain_column_references_have_an_origin() {
        assert_eq!(
            origins("SELECT price, qty * 2, s.region AS r FROM conf.sales s WHERE qty > 1"),
            Some(Origins::Items(vec![
                col("conf", "sales", "price"),
                None,
                col("conf", "sales", "region")
            ]))
        );
        assert_eq!(
            origins("SELECT * FROM orders"),
            Some(Origins::AllOf("public".into(), "orders".into()))
        );
        assert_eq!(
            origins("SELECT o.id, c.name FROM shop.orders o JOIN shop.customers c ON true"),
            Some(Origins::Items(vec![
                col("shop", "orders", "id"),
                col("shop", "customers", "name")
            ]))
        );
    }

    #[test]
    fn what_postgresql_cannot_trace_here_has_none() {
        assert_eq!(origins("SELECT id FROM a JOIN b ON true"), None);
        assert_eq!(origins("SELECT * FROM a, b"), None);
        assert_eq!(origins("SELECT x FROM (SELECT 1 AS x) t"), None);
        assert_eq!(origins("WITH t AS (SELECT 1 AS x) SELECT x FROM t"), None);
        assert_eq!(origins("SELECT id FROM a UNION SELECT id FROM b"), None);
        assert_eq!(origins("SELECT count(*) FROM a"), None);
    }

    #[test]
    fn the_origin_rides_on_the_field() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("price", arrow::datatypes::DataType::Decimal128(10, 2), true),
            Field::new("n", arrow::datatypes::DataType::Int64, true),
        ]));
        let origins = Origins::Items(vec![col("conf", "sales", "price"), None]);
        let out = annotate(&schema, &origins, |_, _, c| {
            (c == "price").then_some((16384, 5, 655366))
        });
        assert_eq!(attribute(out.field(0)), Some((16384, 5, 655366)));
        assert_eq!(attribute(out.field(1)), None);
        let none = annotate(&schema, &origins, |_, _, _| None);
        assert!(Arc::ptr_eq(&none, &schema));
    }
}

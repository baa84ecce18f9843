//! The lake's schema as PostgreSQL DDL, and keeping the mirror database equal to it: one
//! schema per namespace, one empty table per Iceberg table with the PostgreSQL type each
//! column is sent as (the same mapping the wire encoder uses, so `pg_attribute` and a lake
//! query's RowDescription agree), NOT NULL for required fields, a primary key from the
//! identifier fields, and the Iceberg docs as comments.

use std::collections::BTreeMap;

use arrow::datatypes::{DataType, Field};
use lakegate_engines::Lake;
use lakegate_engines::lake::ResolvedTable;
use postgres_types::Kind;

use crate::error::Result;

/// A lake table's name in the mirror: (schema, table).
pub(super) type TableKey = (String, String);

/// A PostgreSQL identifier, always quoted (lake names keep their case).
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A PostgreSQL string literal.
pub(super) fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// The column type a lake column is declared with: what its values are sent as.
fn column_type(field: &Field) -> String {
    let Ok(t) = arrow_pg::datatypes::into_pg_type(field.data_type()) else {
        return "text".into();
    };
    match (t.kind(), field.data_type()) {
        (_, DataType::Decimal128(p, s) | DataType::Decimal256(p, s)) if *p >= 1 && *s >= 0 => {
            format!("numeric({p},{s})")
        }
        (Kind::Array(inner), _) if matches!(inner.kind(), Kind::Simple) => {
            format!("{}[]", ident(inner.name()))
        }
        (Kind::Simple, _) => ident(t.name()),
        // Records have no column type: their values are sent as text.
        _ => "text".into(),
    }
}

/// The DDL that creates `table` in schema `schema` (run after the schema exists).
pub(super) fn table_ddl(schema: &str, name: &str, table: &ResolvedTable) -> String {
    let iceberg = table.table.metadata().current_schema();
    let qualified = format!("{}.{}", ident(schema), ident(name));
    let mut columns = Vec::new();
    let mut comments = Vec::new();
    for field in table.schema.fields() {
        let nested = iceberg.field_by_name(field.name());
        let required = nested.is_some_and(|f| f.required) || !field.is_nullable();
        columns.push(format!(
            "{} {}{}",
            ident(field.name()),
            column_type(field),
            if required { " NOT NULL" } else { "" }
        ));
        if let Some(doc) = nested.and_then(|f| f.doc.as_deref()) {
            comments.push(format!(
                "COMMENT ON COLUMN {qualified}.{} IS {};",
                ident(field.name()),
                literal(doc)
            ));
        }
    }
    let keys: Vec<String> = iceberg
        .identifier_field_ids()
        .filter_map(|id| iceberg.name_by_field_id(id))
        .filter(|n| table.schema.field_with_name(n).is_ok())
        .map(ident)
        .collect();
    if !keys.is_empty() {
        columns.push(format!("PRIMARY KEY ({})", keys.join(", ")));
    }
    if let Some(doc) = table.table.metadata().properties().get("comment") {
        comments.push(format!("COMMENT ON TABLE {qualified} IS {};", literal(doc)));
    }
    format!(
        "CREATE TABLE {qualified} ({});{}",
        columns.join(", "),
        comments.concat()
    )
}

/// What the mirror holds: the namespaces, and each table's DDL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Mirrored {
    /// The namespaces made as schemas.
    pub schemas: Vec<String>,
    /// Each table's DDL.
    pub tables: BTreeMap<TableKey, String>,
}

/// The mirror the lake asks for now.
pub(super) async fn desired(lake: &Lake) -> Result<Mirrored> {
    let directory = lake.directory().await?;
    let mut out = Mirrored::default();
    for (schema, tables) in &directory.schemas {
        out.schemas.push(schema.clone());
        for t in tables {
            match lake.resolve(schema, t).await {
                Ok(resolved) => {
                    out.tables
                        .insert((schema.clone(), t.clone()), table_ddl(schema, t, &resolved));
                }
                // Dropped between listing and loading.
                Err(lakegate_engines::Error::TableNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(out)
}

/// The script that turns `from` into `to` (empty when they are equal). A changed table is
/// dropped and made again: it is empty, and its new OID is what PostgreSQL would show after
/// such a change too.
pub(super) fn changes(from: &Mirrored, to: &Mirrored) -> String {
    let mut script = String::new();
    for schema in &to.schemas {
        if !from.schemas.contains(schema) {
            script.push_str(&format!("CREATE SCHEMA IF NOT EXISTS {};", ident(schema)));
        }
    }
    for (key, ddl) in &from.tables {
        if to.tables.get(key) != Some(ddl) {
            script.push_str(&format!(
                "DROP TABLE IF EXISTS {}.{};",
                ident(&key.0),
                ident(&key.1)
            ));
        }
    }
    for (key, ddl) in &to.tables {
        if from.tables.get(key) != Some(ddl) {
            script.push_str(ddl);
        }
    }
    for schema in &from.schemas {
        if !to.schemas.contains(schema) && schema != "public" {
            script.push_str(&format!("DROP SCHEMA IF EXISTS {} CASCADE;", ident(schema)));
        }
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirrored(schemas: &[&str], tables: &[(&str, &str, &str)]) -> Mirrored {
        Mirrored {
            schemas: schemas.iter().map(|s| s.to_string()).collect(),
            tables: tables
                .iter()
                .map(|(s, t, d)| ((s.to_string(), t.to_string()), d.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_changed_table_is_made_again_and_a_gone_namespace_dropped() {
        let from = mirrored(
            &["shop", "old"],
            &[
                ("shop", "orders", "A;"),
                ("old", "t", "T;"),
                ("shop", "same", "S;"),
            ],
        );
        let to = mirrored(
            &["shop", "new"],
            &[("shop", "orders", "B;"), ("shop", "same", "S;")],
        );
        let script = changes(&from, &to);
        assert_eq!(
            script,
            "CREATE SCHEMA IF NOT EXISTS \"new\";DROP TABLE IF EXISTS \"old\".\"t\";\
             DROP TABLE IF EXISTS \"shop\".\"orders\";B;DROP SCHEMA IF EXISTS \"old\" CASCADE;"
        );
        assert_eq!(changes(&to, &to), "");
    }

    #[test]
    fn public_is_never_dropped() {
        let from = mirrored(&["public"], &[("public", "t", "T;")]);
        let script = changes(&from, &Mirrored::default());
        assert_eq!(script, "DROP TABLE IF EXISTS \"public\".\"t\";");
    }

    #[test]
    fn column_types_are_the_types_values_are_sent_as() {
        let f = |t: DataType| column_type(&Field::new("c", t, true));
        assert_eq!(f(DataType::Int64), "\"int8\"");
        assert_eq!(f(DataType::Decimal128(12, 2)), "numeric(12,2)");
        assert_eq!(f(DataType::Utf8), "\"text\"");
        assert_eq!(
            f(DataType::Timestamp(
                arrow::datatypes::TimeUnit::Microsecond,
                Some("UTC".into())
            )),
            "\"timestamptz\""
        );
        assert_eq!(
            f(DataType::List(std::sync::Arc::new(Field::new(
                "item",
                DataType::Int32,
                true
            )))),
            "\"int4\"[]"
        );
        assert_eq!(ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(literal("it's"), "'it''s'");
    }
}

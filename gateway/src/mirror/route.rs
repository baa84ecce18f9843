//! Which statements the catalog mirror answers: reads of `pg_catalog` and
//! `information_schema` only, and table-less statements that use catalog functions or `reg*`
//! casts — nothing that reads a lake table or a `lakegate.*` table (the mirror's tables are
//! empty), and nothing that changes the session (`set_config`).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, Expr, ObjectName, ObjectNamePart, Statement, Value, visit_expressions,
    visit_expressions_mut,
};
use lakegate_sql::classify::References;

/// The types whose casts read the catalog (`'shop.orders'::regclass`).
const REG_TYPES: [&str; 11] = [
    "regclass",
    "regtype",
    "regproc",
    "regprocedure",
    "regoper",
    "regoperator",
    "regnamespace",
    "regrole",
    "regconfig",
    "regdictionary",
    "regcollation",
];

fn last_part(name: &ObjectName) -> Option<String> {
    match name.0.last()? {
        ObjectNamePart::Identifier(i) => Some(i.value.to_ascii_lowercase()),
        _ => None,
    }
}

fn catalog_function(name: &str) -> bool {
    name.starts_with("pg_")
        || name.starts_with("to_reg")
        || (name.starts_with("has_") && name.ends_with("_privilege"))
        || matches!(
            name,
            "format_type"
                | "col_description"
                | "obj_description"
                | "shobj_description"
                | "current_schemas"
                | "_pg_expandarray"
        )
}

fn calls(statement: &Statement, mut hit: impl FnMut(&Expr) -> bool) -> bool {
    visit_expressions(statement, |e| {
        if hit(e) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .is_break()
}

fn function_named(e: &Expr, test: impl Fn(&str) -> bool) -> bool {
    matches!(e, Expr::Function(f) if last_part(&f.name).is_some_and(|n| test(&n)))
}

/// Whether SQL text can read the catalog at all (a byte scan, so that other statements pay
/// nothing for the mirror): it names `pg_…`, `information_schema`, a `reg…` type or one of
/// the catalog functions.
pub fn may_read_catalog(text: &str) -> bool {
    const NEEDLES: [&[u8]; 8] = [
        b"pg_",
        b"information_schema",
        b"reg",
        b"format_type",
        b"_description",
        b"current_schemas",
        b"_privilege",
        b"to_reg",
    ];
    let lower = text.as_bytes().to_ascii_lowercase();
    NEEDLES
        .iter()
        .any(|n| lower.windows(n.len()).any(|w| w == *n))
}

/// Whether `statement` (whose tables are `refs`) is answered by the mirror.
pub(crate) fn forwardable(statement: &Statement, refs: &References) -> bool {
    if !matches!(statement, Statement::Query(_)) || !refs.lake.is_empty() || !refs.system.is_empty()
    {
        return false;
    }
    if calls(statement, |e| function_named(e, |n| n == "set_config")) {
        return false;
    }
    refs.catalog
        || calls(statement, |e| match e {
            Expr::Cast {
                data_type: DataType::Regclass,
                ..
            } => true,
            Expr::Cast {
                data_type: DataType::Custom(name, _),
                ..
            } => last_part(name).is_some_and(|n| REG_TYPES.contains(&n.as_str())),
            e => function_named(e, catalog_function),
        })
}

/// The SQL sent to the mirror: the client's own text, unless the statement asks for the
/// database's name and the client connected under another name than the mirror's database
/// (then `current_database()` / `current_catalog` become that name).
pub(crate) fn mirror_sql(
    statement: &Statement,
    text: Option<&str>,
    client_database: &str,
    mirror_database: &str,
) -> String {
    let names_database =
        |e: &Expr| function_named(e, |n| n == "current_database" || n == "current_catalog");
    let rewrite = client_database != mirror_database && calls(statement, names_database);
    match text {
        Some(text) if !rewrite => text.trim().trim_end_matches(';').to_string(),
        _ => {
            let mut statement = statement.clone();
            if rewrite {
                let _ = visit_expressions_mut(&mut statement, |e| {
                    if names_database(e) {
                        *e = Expr::Cast {
                            kind: CastKind::DoubleColon,
                            expr: Box::new(Expr::value(Value::SingleQuotedString(
                                client_database.to_string(),
                            ))),
                            data_type: DataType::Custom(
                                ObjectName::from(vec!["name".into()]),
                                vec![],
                            ),
                            format: None,
                            array: false,
                        };
                    }
                    ControlFlow::<()>::Continue(())
                });
            }
            statement.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .pop()
            .expect("one statement")
    }

    fn forwards(sql: &str) -> bool {
        let s = parse(sql);
        let refs = lakegate_sql::classify::references(&s, "public").expect("references");
        forwardable(&s, &refs)
    }

    #[test]
    fn catalog_reads_go_to_the_mirror_and_lake_reads_do_not() {
        assert!(forwards("SELECT relname FROM pg_catalog.pg_class"));
        assert!(forwards(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON true"
        ));
        assert!(forwards("SELECT * FROM information_schema.columns"));
        assert!(forwards("SELECT 'shop.orders'::regclass::oid"));
        assert!(forwards("SELECT 'shop.orders'::regclass"));
        assert!(forwards("SELECT CAST('int8' AS regtype)"));
        assert!(forwards("SELECT pg_catalog.format_type(23, -1)"));
        assert!(forwards("SELECT current_schemas(true)"));
        assert!(!forwards("SELECT * FROM shop.orders"));
        assert!(!forwards("SELECT * FROM pg_class, shop.orders"));
        assert!(!forwards("SELECT * FROM lakegate.queries"));
        assert!(!forwards("SELECT 1"));
        assert!(!forwards("SELECT version()"));
        assert!(!forwards(
            "SELECT set_config('search_path', 'x', false) FROM pg_class"
        ));
        assert!(!forwards("SHOW search_path"));
    }

    #[test]
    fn only_text_that_names_the_catalog_is_parsed_again() {
        assert!(may_read_catalog("select * from PG_CLASS"));
        assert!(may_read_catalog("SELECT 'x'::REGCLASS"));
        assert!(may_read_catalog("select * from information_schema.tables"));
        assert!(!may_read_catalog(
            "SELECT order_id FROM shop.orders WHERE amount > 10"
        ));
    }

    #[test]
    fn the_database_name_follows_the_client() {
        let s = parse("SELECT current_database(), datname FROM pg_database");
        let text = "SELECT current_database(), datname FROM pg_database;";
        assert_eq!(
            mirror_sql(&s, Some(text), "lakegate", "lakegate"),
            "SELECT current_database(), datname FROM pg_database"
        );
        assert_eq!(
            mirror_sql(&s, Some(text), "analytics", "lakegate"),
            "SELECT 'analytics'::name, datname FROM pg_database"
        );
    }
}

//! Which statements the catalog mirror answers: reads of `pg_catalog` and
//! `information_schema` only, and statements without any FROM item or set-returning function
//! (`SELECT 1`, `SELECT format('%s', 1)`, `'x'::regclass`) — PostgreSQL's own answer, exact by
//! construction, and a row or a few (the mirror's answers are collected before they are sent;
//! `generate_series` and other row sources stay with the engines, which stream). Never what
//! reads a lake table or a `lakegate.*` table (the mirror's tables are empty), what changes the
//! session (`set_config`), or what asks about the session the mirror cannot know
//! (`current_user`, `version()`, `pg_backend_pid()`, `pg_sleep`, which the gateway answers and
//! cancels itself).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, Expr, ObjectName, ObjectNamePart, Statement, TableFactor, Value, Visit,
    Visitor, visit_expressions, visit_expressions_mut,
};
use lakegate_sql::classify::References;

fn last_part(name: &ObjectName) -> Option<String> {
    match name.0.last()? {
        ObjectNamePart::Identifier(i) => Some(i.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// Functions whose answer is the gateway session's, not the mirror connection's.
const SESSION_FUNCTIONS: [&str; 17] = [
    "set_config",
    "current_setting",
    "current_user",
    "session_user",
    "current_role",
    "user",
    "version",
    "pg_backend_pid",
    "pg_sleep",
    "pg_cancel_backend",
    "pg_terminate_backend",
    "inet_server_addr",
    "inet_server_port",
    "inet_client_addr",
    "inet_client_port",
    "pg_postmaster_start_time",
    "current_query",
];

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

/// Whether `statement` (whose tables are `refs`) is answered by the mirror.
pub(crate) fn forwardable(statement: &Statement, refs: &References) -> bool {
    if !matches!(statement, Statement::Query(_)) || !refs.lake.is_empty() || !refs.system.is_empty()
    {
        return false;
    }
    let session = |e: &Expr| match e {
        Expr::Identifier(i) if i.quote_style.is_none() => {
            SESSION_FUNCTIONS.contains(&i.value.to_ascii_lowercase().as_str())
        }
        e => function_named(e, |n| SESSION_FUNCTIONS.contains(&n)),
    };
    if calls(statement, session) {
        return false;
    }
    refs.catalog
        || (!has_from_items(statement) && !calls(statement, |e| function_named(e, set_returning)))
}

/// Functions that return rows (their output is not a row or a few).
fn set_returning(name: &str) -> bool {
    name.starts_with("generate_")
        || name.starts_with("unnest")
        || name.starts_with("regexp_split_to_table")
        || name.starts_with("regexp_matches")
        || name.starts_with("json_each")
        || name.starts_with("jsonb_each")
        || name.ends_with("_array_elements")
        || name.ends_with("_array_elements_text")
        || name == "range"
}

/// Whether `statement` has a FROM item anywhere (a table, a function, a subquery, a CTE).
fn has_from_items(statement: &Statement) -> bool {
    struct FromItems;
    impl Visitor for FromItems {
        type Break = ();
        fn pre_visit_table_factor(&mut self, _: &TableFactor) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }
    statement.visit(&mut FromItems).is_break()
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
        assert!(!forwards("SELECT version()"));
        assert!(!forwards(
            "SELECT set_config('search_path', 'x', false) FROM pg_class"
        ));
        assert!(!forwards("SHOW search_path"));
    }

    #[test]
    fn statements_without_tables_get_postgresqls_answer_unless_they_ask_about_the_session() {
        assert!(forwards("SELECT 1"));
        assert!(forwards("SELECT format('%s-%s', 'a', 'b'), 2 ^ 10"));
        // Row sources stream from the engines.
        assert!(!forwards(
            "SELECT count(*) FROM generate_series(1, 10) AS g"
        ));
        assert!(!forwards("SELECT generate_series(1, 10)"));
        assert!(!forwards(
            "WITH RECURSIVE f(a) AS (SELECT 1 UNION ALL SELECT a + 1 FROM f WHERE a < 3) \
             SELECT a FROM f"
        ));
        assert!(!forwards("SELECT current_user"));
        assert!(!forwards("SELECT session_user, 1"));
        assert!(!forwards("SELECT current_setting('TimeZone')"));
        assert!(!forwards("SELECT pg_backend_pid()"));
        assert!(!forwards("SELECT pg_sleep(1)"));
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

//! The classifier's table resolution (lakegate-sql, our own CTE scoping) agrees with
//! DataFusion's resolver, the one the planner itself uses, on hand-picked statements and on
//! the fuzz seed corpora: a table the planner would read is never missed by the access check.

use std::collections::BTreeSet;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use lakegate_sql::classify::{self, SYSTEM_SCHEMAS};

/// The lake tables DataFusion's resolver finds (table functions and system schemas removed as
/// the classifier does), or `None` when it refuses the statement.
fn datafusion_tables(statement: &Statement) -> Option<BTreeSet<(String, String)>> {
    let (refs, _) = datafusion::sql::resolve::resolve_table_references(
        &DfStatement::Statement(Box::new(statement.clone())),
        true,
    )
    .ok()?;
    let functions = table_functions(statement);
    Some(
        refs.iter()
            .filter(|r| !(r.schema().is_none() && functions.contains(r.table())))
            .map(|r| {
                (
                    r.schema().unwrap_or("public").to_string(),
                    r.table().to_string(),
                )
            })
            .filter(|(s, t)| !SYSTEM_SCHEMAS.contains(&s.as_str()) && !t.starts_with("pg_"))
            .collect(),
    )
}

fn table_functions(statement: &Statement) -> BTreeSet<String> {
    use datafusion::sql::sqlparser::ast::{TableFactor, Visit, Visitor};
    struct Calls(BTreeSet<String>);
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> std::ops::ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(_),
                ..
            } = factor
            {
                self.0.insert(name.to_string().to_lowercase());
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut calls = Calls(BTreeSet::new());
    let _ = statement.visit(&mut calls);
    calls.0
}

const CASES: &[&str] = &[
    "SELECT * FROM orders",
    "SELECT * FROM \"Mixed\".\"Case\" m JOIN Sales.Customers c ON m.id = c.id",
    "WITH t AS (SELECT * FROM t) SELECT * FROM t",
    "WITH a AS (SELECT * FROM x), b AS (SELECT * FROM a) SELECT * FROM b, a",
    "SELECT * FROM orders WHERE id IN (WITH orders AS (SELECT 1 AS id) SELECT id FROM orders)",
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "SELECT (SELECT max(x) FROM s.t) FROM u WHERE EXISTS (SELECT 1 FROM v WHERE v.a = u.a)",
    "SELECT * FROM generate_series(1, 10) g JOIN orders o ON o.id = g.value",
    "SELECT * FROM a UNION ALL SELECT * FROM b EXCEPT SELECT * FROM c",
    "SELECT * FROM lake.public.orders, pg_catalog.pg_class, information_schema.tables",
    "WITH x AS (WITH y AS (SELECT * FROM z) SELECT * FROM y) SELECT * FROM x, y",
    "SELECT * FROM (SELECT * FROM inner_t) sub LEFT JOIN LATERAL (SELECT * FROM lat) l ON true",
];

#[test]
fn table_resolution_agrees_with_datafusion() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut texts: Vec<String> = CASES.iter().map(|s| s.to_string()).collect();
    for dir in ["sql_text", "classifier"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            for e in entries.flatten() {
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    texts.push(text);
                }
            }
        }
    }
    let mut compared = 0;
    for text in &texts {
        let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, text) else {
            continue;
        };
        for statement in &statements {
            let Some(want) = datafusion_tables(statement) else {
                continue;
            };
            let got: BTreeSet<(String, String)> = classify::references(statement, "public")
                .expect("resolves what DataFusion resolves")
                .lake
                .into_iter()
                .collect();
            assert_eq!(got, want, "{statement}");
            compared += 1;
        }
    }
    assert!(compared >= CASES.len(), "compared {compared} statements");
}

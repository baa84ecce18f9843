//! Statement classification from the sqlparser AST (never string matching): what kind of
//! statement it is and which lake tables it reads.

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::system_catalog::{LAKEGATE_SCHEMA, SYSTEM_SCHEMAS};

use crate::error::Result;

/// What a statement asks the gateway to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementKind {
    /// A read: SELECT, WITH, VALUES, TABLE, EXPLAIN of a read.
    Query,
    /// `SET`, `SHOW`, `RESET`, `DISCARD`: session settings.
    Session,
    /// `BEGIN`, `COMMIT`, `ROLLBACK`.
    Transaction,
    /// `DECLARE … CURSOR`, `FETCH`, `CLOSE`.
    Cursor,
    /// A statement that writes or changes the lake (refused: lakegate is read-only).
    Write(&'static str),
    /// Anything else lakegate does not run.
    Other,
}

/// Classifies a statement.
pub fn kind(statement: &Statement) -> StatementKind {
    use Statement as S;
    match statement {
        S::Query(_) => StatementKind::Query,
        S::Explain { statement, .. } => match kind(statement) {
            StatementKind::Query => StatementKind::Query,
            _ => StatementKind::Other,
        },
        S::Set(_) | S::ShowVariable { .. } | S::Reset(_) | S::Discard { .. } => {
            StatementKind::Session
        }
        S::StartTransaction { .. }
        | S::Commit { .. }
        | S::Rollback { .. }
        | S::Savepoint { .. }
        | S::ReleaseSavepoint { .. } => StatementKind::Transaction,
        S::Declare { .. } | S::Fetch { .. } | S::Close { .. } => StatementKind::Cursor,
        S::Insert(_) => StatementKind::Write("INSERT"),
        S::Update(_) => StatementKind::Write("UPDATE"),
        S::Delete(_) => StatementKind::Write("DELETE"),
        S::Merge { .. } => StatementKind::Write("MERGE"),
        S::Copy { .. } => StatementKind::Write("COPY"),
        S::Truncate { .. } => StatementKind::Write("TRUNCATE"),
        S::CreateTable(_) | S::CreateView { .. } | S::CreateSchema { .. } | S::CreateIndex(_) => {
            StatementKind::Write("CREATE")
        }
        S::Drop { .. } => StatementKind::Write("DROP"),
        S::AlterTable { .. } => StatementKind::Write("ALTER"),
        S::Grant { .. } | S::Revoke { .. } => StatementKind::Write("GRANT/REVOKE"),
        _ => StatementKind::Other,
    }
}

/// A lake table a statement reads: `(schema, table)`, lower-cased unless quoted.
pub type TableName = (String, String);

/// The tables a statement reads, split by where they live.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct References {
    /// Lake tables (CTE names, table functions and system schemas excluded), with unqualified
    /// names put in the default schema.
    pub lake: Vec<TableName>,
    /// `lakegate.<name>` system tables.
    pub system: Vec<String>,
    /// Whether it reads `pg_catalog` or `information_schema` (answered by the planner only).
    pub catalog: bool,
}

/// Resolves the tables `statement` reads, once per statement.
///
/// # Errors
/// When DataFusion's reference resolver rejects the statement.
pub fn references(statement: &Statement, default_schema: &str) -> Result<References> {
    let (refs, _ctes) = datafusion::sql::resolve::resolve_table_references(
        &DfStatement::Statement(Box::new(statement.clone())),
        true,
    )
    .map_err(lakegate_engines::Error::from)?;
    let functions = table_functions(statement);
    let mut out = References::default();
    for r in refs {
        if r.schema() == Some(LAKEGATE_SCHEMA) {
            out.system.push(r.table().to_string());
            continue;
        }
        if r.schema().is_none() && functions.iter().any(|f| f == r.table()) {
            continue;
        }
        let schema = r.schema().unwrap_or(default_schema).to_string();
        let table = r.table().to_string();
        if SYSTEM_SCHEMAS.contains(&schema.as_str())
            || (r.schema().is_none() && table.starts_with("pg_"))
        {
            out.catalog = true;
            continue;
        }
        if !out.lake.contains(&(schema.clone(), table.clone())) {
            out.lake.push((schema, table));
        }
    }
    Ok(out)
}

/// Names called as table functions in FROM (`generate_series(1, 10)`), which are not tables.
fn table_functions(statement: &Statement) -> Vec<String> {
    use datafusion::sql::sqlparser::ast::{TableFactor, Visit, Visitor};
    use std::ops::ControlFlow;
    struct Calls(Vec<String>);
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(_),
                ..
            } = factor
            {
                self.0.push(name.to_string().to_ascii_lowercase());
            }
            ControlFlow::Continue(())
        }
    }
    let mut calls = Calls(Vec::new());
    let _ = statement.visit(&mut calls);
    calls.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("valid SQL")
            .remove(0)
    }

    #[test]
    fn kinds_of_statements() {
        let cases = [
            ("SELECT 1", StatementKind::Query),
            ("WITH a AS (SELECT 1) SELECT * FROM a", StatementKind::Query),
            ("EXPLAIN SELECT 1", StatementKind::Query),
            ("SET TimeZone = 'UTC'", StatementKind::Session),
            ("SHOW search_path", StatementKind::Session),
            ("BEGIN", StatementKind::Transaction),
            ("FETCH 10 FROM c", StatementKind::Cursor),
            ("INSERT INTO t VALUES (1)", StatementKind::Write("INSERT")),
            ("CREATE TABLE t (a int)", StatementKind::Write("CREATE")),
            ("DELETE FROM t", StatementKind::Write("DELETE")),
        ];
        for (sql, want) in cases {
            assert_eq!(kind(&parse(sql)), want, "{sql}");
        }
    }

    #[test]
    fn tables_exclude_ctes_and_system_schemas() {
        let s = parse(
            "WITH recent AS (SELECT * FROM orders WHERE ts > now()) \
             SELECT * FROM recent JOIN sales.customers c ON true, pg_catalog.pg_class",
        );
        let t = references(&s, "public").expect("resolves").lake;
        assert_eq!(
            t,
            vec![
                ("public".to_string(), "orders".to_string()),
                ("sales".to_string(), "customers".to_string())
            ]
        );
    }

    #[test]
    fn table_functions_are_not_tables() {
        let s = parse("SELECT * FROM generate_series(1, 10) g JOIN orders o ON o.id = g.value");
        let t = references(&s, "public").expect("resolves").lake;
        assert_eq!(t, vec![("public".to_string(), "orders".to_string())]);
    }

    #[test]
    fn quoted_names_keep_their_case() {
        let s = parse("SELECT * FROM \"Mixed\".\"Case\", plain");
        let t = references(&s, "public").expect("resolves").lake;
        assert!(
            t.contains(&("Mixed".to_string(), "Case".to_string())),
            "{t:?}"
        );
        assert!(
            t.contains(&("public".to_string(), "plain".to_string())),
            "{t:?}"
        );
    }
}

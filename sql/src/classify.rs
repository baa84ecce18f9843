//! Statement classification from the sqlparser AST (never string matching): what kind of
//! statement it is and which lake tables it reads.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    Ident, ObjectName, ObjectNamePart, Query, Statement, TableFactor, Visit, Visitor,
};

use crate::{Error, Result};

/// Schemas the gateway answers itself: PostgreSQL's catalogs and lakegate's own tables.
pub const SYSTEM_SCHEMAS: [&str; 3] = ["pg_catalog", "information_schema", LAKEGATE_SCHEMA];

/// The schema of lakegate's own tables (`lakegate.cache_stats`, ...).
pub const LAKEGATE_SCHEMA: &str = "lakegate";

/// What a statement asks the gateway to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementKind {
    /// A read: SELECT, WITH, VALUES, TABLE, EXPLAIN of a read.
    Query,
    /// `SET`, `SHOW`, `RESET`, `DISCARD`, `DEALLOCATE`: session state.
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

impl StatementKind {
    /// `query`, `session`, `transaction`, `cursor`, `write`, `other` (for traces).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Session => "session",
            Self::Transaction => "transaction",
            Self::Cursor => "cursor",
            Self::Write(_) => "write",
            Self::Other => "other",
        }
    }
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
        S::Set(_)
        | S::ShowVariable { .. }
        | S::Reset(_)
        | S::Discard { .. }
        | S::Deallocate { .. } => StatementKind::Session,
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
/// A name is a CTE only where that CTE is in scope: its own query and the queries nested in
/// it, after its definition (a non-recursive CTE's body reads the table of the same name, as
/// in PostgreSQL). Table functions in FROM (`generate_series(1, 10)`) are not tables.
///
/// # Errors
/// A table name of more than three parts.
pub fn references(statement: &Statement, default_schema: &str) -> Result<References> {
    let mut walk = Relations::default();
    if let ControlFlow::Break(e) = statement.visit(&mut walk) {
        return Err(e);
    }
    let mut out = References::default();
    for (schema, table) in walk.found {
        match schema {
            Some(s) if s == LAKEGATE_SCHEMA => out.system.push(table),
            Some(s) if SYSTEM_SCHEMAS.contains(&s.as_str()) => out.catalog = true,
            None if table.starts_with("pg_") => out.catalog = true,
            s => {
                let schema = s.unwrap_or_else(|| default_schema.to_string());
                if SYSTEM_SCHEMAS.contains(&schema.as_str()) {
                    out.catalog = true;
                } else if !out.lake.contains(&(schema.clone(), table.clone())) {
                    out.lake.push((schema, table));
                }
            }
        }
    }
    Ok(out)
}

/// An identifier as the catalog names it: unquoted folds to lower case.
pub fn normalise(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// The parts of a table name, each normalised (`None` when a part is not an identifier).
pub fn name_parts(name: &ObjectName) -> Option<Vec<String>> {
    name.0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Some(normalise(i)),
            ObjectNamePart::Function(_) => None,
        })
        .collect()
}

/// Every CTE name in the statement, whatever its scope (normalised).
pub fn cte_names(statement: &Statement) -> BTreeSet<String> {
    struct Ctes(BTreeSet<String>);
    impl Visitor for Ctes {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            if let Some(with) = &query.with {
                for cte in &with.cte_tables {
                    self.0.insert(normalise(&cte.alias.name));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut ctes = Ctes(BTreeSet::new());
    let _ = statement.visit(&mut ctes);
    ctes.0
}

/// The tables a statement names, `(schema if written, table)`, sorted and unique.
#[derive(Default)]
struct Relations {
    found: BTreeSet<(Option<String>, String)>,
    /// CTE names in scope, innermost last.
    ctes: Vec<String>,
}

impl Relations {
    fn relation(&mut self, name: &ObjectName) -> ControlFlow<Error> {
        let parts = name_parts(name);
        let bad = || Error::TableName {
            name: name.to_string(),
            parts: name.0.len(),
        };
        let Some(parts) = parts else {
            return ControlFlow::Break(bad());
        };
        let entry = match parts.as_slice() {
            [table] if self.ctes.contains(table) => return ControlFlow::Continue(()),
            [table] => (None, table.clone()),
            [schema, table] | [_, schema, table] => (Some(schema.clone()), table.clone()),
            _ => return ControlFlow::Break(bad()),
        };
        self.found.insert(entry);
        ControlFlow::Continue(())
    }
}

impl Visitor for Relations {
    type Break = Error;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Error> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                if !with.recursive {
                    // Its body sees the CTEs defined before it, not itself. (The traversal
                    // visits it again with every CTE of this WITH in scope; finding a name
                    // twice is harmless.)
                    cte.query.visit(self)?;
                }
                self.ctes.push(normalise(&cte.alias.name));
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &Query) -> ControlFlow<Error> {
        if let Some(with) = &query.with {
            let keep = self.ctes.len().saturating_sub(with.cte_tables.len());
            self.ctes.truncate(keep);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<Error> {
        match factor {
            TableFactor::Table {
                name, args: None, ..
            } => self.relation(name),
            _ => ControlFlow::Continue(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

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

    #[test]
    fn cte_scopes_follow_postgres() {
        let refs = |sql: &str| references(&parse(sql), "public").expect("resolves").lake;
        let t = |n: &str| ("public".to_string(), n.to_string());
        // A non-recursive CTE's body reads the real table of the same name.
        assert_eq!(
            refs("WITH t AS (SELECT * FROM t) SELECT * FROM t"),
            vec![t("t")]
        );
        // A CTE defined in a subquery does not hide the table outside it.
        assert_eq!(
            refs(
                "SELECT * FROM orders WHERE id IN (WITH orders AS (SELECT 1 AS id) SELECT id FROM orders)"
            ),
            vec![t("orders")]
        );
        // Later CTEs see earlier ones; a recursive CTE sees itself.
        assert_eq!(
            refs("WITH a AS (SELECT * FROM x), b AS (SELECT * FROM a) SELECT * FROM b"),
            vec![t("x")]
        );
        assert_eq!(
            refs(
                "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r"
            ),
            vec![]
        );
        // Too many parts is an error, not a guess.
        assert!(references(&parse("SELECT * FROM a.b.c.d"), "public").is_err());
    }
}

//! Parsing: SQL text → statements, PostgreSQL dialect, with the rewrites the tools' SQL needs
//! before anything else sees it (`EXPLAIN ROUTE`, catalog type casts, recursive CTE column
//! lists, and [`lakegate_sql::semantics`]: PostgreSQL's meaning kept on every engine).
//! Statements nested past `limits.max_call_nesting` are refused before the parser runs (its
//! time doubles with each level).
//!
//! SQL that names the catalog (`pg_…`, `information_schema`) goes through
//! `datafusion-pg-catalog`'s compatibility parser, whose rewrites let the emulated catalog
//! plan what tools send (known tool queries replaced whole, `::regclass` as a subquery, a
//! scalar subquery in a select list reduced to `LIMIT 1` or, when correlated, to NULL). Those
//! last two change a query's answer, so every other statement is parsed as written and given
//! only the rewrites that keep its meaning ([`lake_rules`]).

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{Expr, Statement};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_pg_catalog::sql::rules::{self, SqlStatementRewriteRule};
use lakegate_sql::lift::Lifted;

use crate::error::{Error, Result};

/// The compatibility parser's rewrites that keep a statement's meaning (qualified wildcards
/// beside their own columns, `pg_catalog.` qualifiers on functions and types, array literals,
/// `current_user` as a function, `version()`'s column name), applied to lake statements;
/// not `RemoveSubqueryFromProjection` (a correlated scalar subquery became NULL) nor
/// `RewriteArrayAnyAllOperation` (`x <> ALL(array)` became `NOT array_contains`, true where
/// PostgreSQL answers NULL for an array holding a NULL; `lakegate_sql::semantics` writes
/// literal arrays out exactly instead).
fn lake_rules() -> Vec<Arc<dyn SqlStatementRewriteRule>> {
    vec![
        Arc::new(rules::AliasDuplicatedProjectionRewrite),
        Arc::new(rules::ResolveUnqualifiedIdentifer),
        Arc::new(rules::RemoveQualifier),
        Arc::new(rules::FixArrayLiteral),
        Arc::new(rules::CurrentUserVariableToSessionUserFunctionCall),
        Arc::new(rules::FixCollate),
        Arc::new(rules::FixVersionColumnName),
    ]
}

/// Whether `sql` names the PostgreSQL catalog (its tables, schemas or `pg_` functions).
fn names_catalog(sql: &str) -> bool {
    // Per statement: compared in place, no lower-cased copy of the text.
    let has = |needle: &[u8]| {
        sql.as_bytes()
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
    };
    has(b"pg_") || has(b"information_schema")
}

/// How much parsed SQL [`Parser`] keeps, as the heap of the statements' trees and text
/// ([`super::weight::parsed`]: weighed as the text alone, 16 MiB held about 4 GB of
/// point-lookup trees).
const PARSED_BYTES: u64 = 32 << 20;

/// Statements longer than this are parsed every time (a generated query is rarely repeated).
const PARSED_MAX_SQL: usize = 64 << 10;

/// The gateway's parser. Parsing is a pure function of the text, so the statements of texts
/// seen before are kept: an application or dashboard sends the same few texts over and over,
/// and each costs a parse and every rewrite otherwise.
pub struct Parser {
    inner: PostgresCompatibilityParser,
    /// See [`lake_rules`].
    lake: Vec<Arc<dyn SqlStatementRewriteRule>>,
    max_call_nesting: usize,
    parsed: moka::sync::Cache<Arc<str>, Arc<Vec<Statement>>, foldhash::fast::RandomState>,
    /// Lifted templates of texts by their shape ([`super::shapes`]).
    shapes: super::shapes::Shapes,
}

impl Parser {
    /// A parser refusing calls nested deeper than `max_call_nesting`.
    pub fn new(max_call_nesting: usize) -> Self {
        Self {
            inner: PostgresCompatibilityParser::new(),
            lake: lake_rules(),
            max_call_nesting,
            parsed: moka::sync::Cache::builder()
                .max_capacity(PARSED_BYTES)
                .weigher(|sql: &Arc<str>, statements: &Arc<Vec<Statement>>| {
                    u32::try_from(super::weight::parsed(sql, statements.len())).unwrap_or(u32::MAX)
                })
                .build_with_hasher(foldhash::fast::RandomState::default()),
            shapes: super::shapes::Shapes::default(),
        }
    }

    /// The lifted template and values of `sql` when a text of its shape was learned: what
    /// parsing it and [`lakegate_sql::lift::lift`] would give, without doing either.
    pub(crate) fn lifted(&self, sql: &str) -> Option<(super::Interned, Vec<Lifted>)> {
        self.shapes.find(sql)
    }

    /// Learns the shape of `sql`, which parsed to one statement that lifted to `template`
    /// with `values`, when a probe proves it (texts that read no lake table are refused).
    pub(crate) fn learn_shape(
        &self,
        sql: &str,
        template: &Statement,
        values: &[Lifted],
        intern: super::shapes::Intern<'_>,
    ) {
        let parse = |text: &str| {
            let mut statements = self.parse_text(text).ok()?;
            let statement = statements.pop().filter(|_| statements.is_empty())?;
            let refs = lakegate_sql::classify::references(&statement, "public").ok()?;
            if refs.lake.is_empty() || !refs.system.is_empty() || refs.catalog {
                return None;
            }
            lakegate_sql::lift::lift(&statement)
        };
        self.shapes.learn(sql, template, values, &parse, intern);
    }

    /// Counts a text answered from its shape.
    pub(crate) fn count_shape_hit(&self) {
        self.shapes.count_hit();
    }

    /// The shape memo's counters.
    pub(crate) fn shape_stats(&self) -> [(&'static str, u64); 4] {
        self.shapes.stats()
    }

    /// `sql` as statements: as written (with [`lake_rules`]) unless it names the catalog or
    /// only the compatibility parser reads it (`ABORT`).
    fn statements(
        &self,
        sql: &str,
    ) -> std::result::Result<Vec<Statement>, datafusion::sql::sqlparser::parser::ParserError> {
        use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
        if !names_catalog(sql)
            && let Ok(statements) =
                datafusion::sql::sqlparser::parser::Parser::parse_sql(&PostgreSqlDialect {}, sql)
        {
            return Ok(statements
                .into_iter()
                .map(|s| self.lake.iter().fold(s, |s, rule| rule.rewrite(s)))
                .collect());
        }
        self.inner.parse(sql)
    }

    /// Parses SQL text (PostgreSQL dialect, with rewrites for what BI tools send).
    ///
    /// # Errors
    /// [`Error::Syntax`], [`Error::TooComplex`].
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        Ok(self.parse_shared(sql)?.as_ref().clone())
    }

    /// [`Parser::parse`], shared with the kept statements (no copy of their trees: for callers
    /// that only read them).
    ///
    /// # Errors
    /// [`Error::Syntax`], [`Error::TooComplex`].
    pub fn parse_shared(&self, sql: &str) -> Result<Arc<Vec<Statement>>> {
        if let Some(hit) = self.parsed.get(sql) {
            return Ok(hit);
        }
        let statements = self.parse_text(sql)?;
        if sql.len() > PARSED_MAX_SQL {
            return Ok(Arc::new(statements));
        }
        // Kept as a copy: a clone's vectors and strings hold exactly their length, where the
        // parser's grew by doubling (the weigher's per-character charge assumes the former).
        let kept = Arc::new(statements.clone());
        self.parsed.insert(Arc::from(sql), Arc::clone(&kept));
        Ok(kept)
    }

    /// The bytes the kept statements are charged (their estimated heap).
    pub fn kept_bytes(&self) -> u64 {
        self.parsed.run_pending_tasks();
        self.parsed.weighted_size()
    }

    /// [`Parser::parse`] without the kept statements.
    fn parse_text(&self, sql: &str) -> Result<Vec<Statement>> {
        if let Some(depth) = lakegate_sql::nesting::call_depth(sql)
            && depth > self.max_call_nesting
        {
            return Err(Error::TooComplex {
                depth,
                limit: self.max_call_nesting,
            });
        }
        let sql = explain_route_syntax(sql);
        let mut statements = self.statements(&sql).map_err(|e| Error::Syntax {
            message: syntax_message(&e.to_string()),
        })?;
        statements.iter_mut().for_each(rewrite_catalog_types);
        statements
            .iter_mut()
            .for_each(lakegate_sql::semantics::rewrite);
        statements.iter_mut().for_each(rename_recursive_cte_columns);
        statements.iter_mut().for_each(name_scalar_function_columns);
        Ok(statements)
    }
}

/// The query of an `EXPLAIN (ROUTE) ...`.
pub fn explain_route_target(statement: &Statement) -> Option<&Statement> {
    match statement {
        Statement::Explain {
            options: Some(options),
            statement,
            ..
        } if options
            .iter()
            .any(|o| o.name.value.eq_ignore_ascii_case("route")) =>
        {
            Some(statement)
        }
        _ => None,
    }
}

/// `WITH RECURSIVE t(a, b) AS (static UNION ALL recursive)`: DataFusion ignores the column list,
/// so the static term is wrapped as `SELECT * FROM (static) AS __lakegate_static(a, b)`, which
/// names its columns (asyncpg's type introspection relies on this). Every recursive CTE's static
/// term is wrapped so: DataFusion 53 pushes an outer query's projection into a recursive query
/// whose terms hold no other subquery alias, dropping a column the recursive term reads
/// (`WITH RECURSIVE f AS (SELECT 0 AS a, 1 AS b UNION ALL SELECT b, a + b FROM f …) SELECT a
/// FROM f` failed with "project index 1 out of bounds"); the alias keeps it from doing so.
fn rename_recursive_cte_columns(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{SetExpr, TableFactor};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let Statement::Query(query) = statement else {
        return;
    };
    let Some(with) = query.with.as_mut() else {
        return;
    };
    if !with.recursive {
        return;
    }
    for cte in &mut with.cte_tables {
        let SetExpr::SetOperation { left, .. } = cte.query.body.as_mut() else {
            continue;
        };
        // Built on the AST (a template whose derived table gets the static term and the CTE's
        // alias), never by printing the client's SQL and parsing it again: sqlparser does not
        // print every string back as written (see lakegate_engines::dialect).
        let Ok(mut parsed) =
            Parser::parse_sql(&PostgreSqlDialect {}, "SELECT * FROM (SELECT 1) AS t")
        else {
            continue;
        };
        let Some(Statement::Query(mut wrapper)) = parsed.pop() else {
            continue;
        };
        let SetExpr::Select(select) = wrapper.body.as_mut() else {
            continue;
        };
        let Some(TableFactor::Derived {
            subquery, alias, ..
        }) = select.from.first_mut().map(|f| &mut f.relation)
        else {
            continue;
        };
        // `SELECT 1, 1` has two columns of one name for DataFusion: the CTE's names go on the
        // static term's unnamed items too.
        if let SetExpr::Select(inner) = left.as_mut()
            && inner.projection.len() == cte.alias.columns.len()
        {
            use datafusion::sql::sqlparser::ast::SelectItem;
            for (item, column) in inner.projection.iter_mut().zip(&cte.alias.columns) {
                if let SelectItem::UnnamedExpr(e) = item {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: column.name.clone(),
                    };
                }
            }
        }
        subquery.body = left.clone();
        let mut static_alias = cte.alias.clone();
        static_alias.name = datafusion::sql::sqlparser::ast::Ident::new("__lakegate_static");
        *alias = Some(static_alias);
        *left = wrapper.body;
    }
}

/// `FROM generate_series(1, 10) AS g` (and `unnest(…) AS u`): a function returning a scalar
/// names its one column after the table alias in PostgreSQL (`sum(g)`); DataFusion names it
/// `value`, so the alias gets that column name written out (`AS g(g)`).
fn name_scalar_function_columns(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    struct Namer;
    impl VisitorMut for Namer {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(args),
                alias: Some(alias),
                ..
            } = factor
                && alias.columns.is_empty()
                && name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| {
                    i.value.eq_ignore_ascii_case("generate_series")
                        || (i.value.eq_ignore_ascii_case("unnest") && args.args.len() == 1)
                })
            {
                alias.columns = vec![TableAliasColumnDef::from_name(alias.name.value.clone())];
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Namer);
}

/// PostgreSQL's catalog types (`oid`, `regtype`, `name`, ...) in casts become the types the
/// `pg_catalog` emulation uses (int4, text), so `$1::oid[]` (asyncpg) plans.
fn rewrite_catalog_types(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{
        ArrayElemTypeDef, DataType as SqlType, visit_expressions_mut,
    };
    fn map(t: &mut SqlType) {
        match t {
            SqlType::Custom(name, _) => {
                let n = name.to_string().to_ascii_lowercase();
                let n = n.trim_start_matches("pg_catalog.").trim_matches('"');
                match n {
                    "oid" | "regtype" | "regproc" | "regprocedure" | "regnamespace" | "regrole"
                    | "regoper" | "xid" | "cid" | "int2vector" | "oidvector" => {
                        *t = SqlType::Int(None)
                    }
                    "name" => *t = SqlType::Text,
                    _ => {}
                }
            }
            SqlType::Array(ArrayElemTypeDef::SquareBracket(inner, _))
            | SqlType::Array(ArrayElemTypeDef::AngleBracket(inner))
            | SqlType::Array(ArrayElemTypeDef::Parenthesis(inner)) => map(inner),
            _ => {}
        }
    }
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Cast { data_type, .. } = expr {
            map(data_type);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `EXPLAIN ROUTE q` is spelled `EXPLAIN (ROUTE) q` for the parser (which knows PostgreSQL's
/// option list); either spelling works.
fn explain_route_syntax(sql: &str) -> std::borrow::Cow<'_, str> {
    let trimmed = sql.trim_start();
    let mut words = trimmed.splitn(3, char::is_whitespace);
    match (words.next(), words.next(), words.next()) {
        (Some(e), Some(r), Some(rest))
            if e.eq_ignore_ascii_case("explain") && r.eq_ignore_ascii_case("route") =>
        {
            std::borrow::Cow::Owned(format!("EXPLAIN (ROUTE) {rest}"))
        }
        _ => std::borrow::Cow::Borrowed(sql),
    }
}

/// sqlparser says "sql parser error: Expected: …"; PostgreSQL says "syntax error at or near".
fn syntax_message(raw: &str) -> String {
    let msg = raw.trim_start_matches("sql parser error: ");
    format!("syntax error: {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    #[test]
    fn a_lake_querys_scalar_subqueries_are_kept() {
        let parser = super::Parser::new(64);
        let sql = "SELECT c.id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id), \
                   (SELECT max(amount) FROM orders) FROM customers c";
        let parsed = parser.parse(sql).expect("parses").remove(0).to_string();
        assert_eq!(
            parsed,
            "SELECT c.id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id), \
             (SELECT max(amount) FROM orders) FROM customers c"
        );
        // Catalog SQL still gets the compatibility rewrites the emulated catalog needs.
        let catalog = parser
            .parse("SELECT relname FROM pg_class")
            .expect("parses")
            .remove(0)
            .to_string();
        assert_eq!(catalog, "SELECT relname FROM pg_catalog.pg_class");
    }

    #[test]
    fn a_recursive_cte_column_list_names_the_static_term() {
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "WITH RECURSIVE t(n, s) AS (SELECT 1, 'a''b' UNION ALL SELECT n + 1, s FROM t \
             WHERE n < 3) SELECT * FROM t",
        )
        .expect("sql")
        .remove(0);
        rename_recursive_cte_columns(&mut s);
        assert_eq!(
            s.to_string(),
            "WITH RECURSIVE t (n, s) AS (SELECT * FROM (SELECT 1 AS n, 'a''b' AS s) __lakegate_static (n, s) \
             UNION ALL SELECT n + 1, s FROM t WHERE n < 3) SELECT * FROM t"
        );
    }

    #[test]
    fn a_text_parsed_again_gives_the_same_statements_and_errors_stay_errors() {
        let parser = super::Parser::new(64);
        let sql = "SELECT relname FROM pg_class; SELECT 1.5 AS x";
        let first = parser.parse(sql).expect("parses");
        parser.parsed.run_pending_tasks();
        assert_eq!(parser.parsed.entry_count(), 1, "the text is kept");
        let again = parser.parse(sql).expect("parses again");
        assert_eq!(first, again);
        assert_eq!(
            again[0].to_string(),
            "SELECT relname FROM pg_catalog.pg_class"
        );
        // A caller's changes to its copy do not reach the kept statements.
        let mut changed = parser.parse(sql).expect("parses");
        changed.clear();
        assert_eq!(parser.parse(sql).expect("kept").len(), 2);
        // A syntax error is not kept: it fails every time.
        for _ in 0..2 {
            assert!(matches!(parser.parse("SELEC 1"), Err(Error::Syntax { .. })));
        }
        // A text past the size limit is parsed, not kept.
        let long = format!("SELECT 1 AS a{}", " ".repeat(PARSED_MAX_SQL));
        assert_eq!(parser.parse(&long).expect("parses").len(), 1);
        parser.parsed.run_pending_tasks();
        assert_eq!(parser.parsed.entry_count(), 1);
    }
}

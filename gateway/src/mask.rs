//! Column masks: `[[mask]]` rules name columns (`ns.table.column`) that users with given
//! names or roles see only as a hash. A masked table is read through a derived table that
//! replaces each masked column by `md5(<salt> || CAST(column AS VARCHAR))`, so the hash is all
//! the query can see: in the result, and in its WHERE, JOIN and GROUP BY too (a filter on a
//! clear value matches nothing). Hashes are stable, so masked columns still join and count.
//!
//! The rewrite happens in the gateway on the parsed statement, before the planner describes it
//! and before any engine runs it: every engine runs the same masked statement (the dialect
//! layer spells `md5` for Trino).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Ident, ObjectNamePart, Query, Statement, TableAlias, TableFactor, Visit, VisitMut, Visitor,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use lakegate_engines::engine::Pins;
use serde::Deserialize;

use crate::error::{Error, Result};

/// One `[[mask]]` rule.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MaskRule {
    /// User names it applies to.
    pub users: Vec<String>,
    /// Roles it applies to (`[[auth.users]] roles`); `*` applies to everyone.
    pub roles: Vec<String>,
    /// Columns to hash, `ns.table.column`.
    pub columns: Vec<String>,
}

/// The masked columns of each table, for one user: `(ns, table)` → column names.
pub type Masked = BTreeMap<(String, String), BTreeSet<String>>;

/// The mask rules in force.
#[derive(Debug, Clone, Default)]
pub struct Masks {
    rules: Vec<MaskRule>,
    salt: String,
}

impl Masks {
    /// Rules from the config; `salt` is prefixed to every value before hashing.
    ///
    /// # Errors
    /// A rule naming nobody, or a column not written `ns.table.column`.
    pub fn new(rules: Vec<MaskRule>, salt: String) -> Result<Self> {
        for (i, r) in rules.iter().enumerate() {
            let bad = |reason: String| Error::Config {
                setting: format!("mask[{i}]"),
                reason,
            };
            if r.users.is_empty() && r.roles.is_empty() {
                return Err(bad(
                    "names no users or roles (`*` masks for everyone)".into()
                ));
            }
            if r.columns.is_empty() {
                return Err(bad("names no columns".into()));
            }
            for c in &r.columns {
                if c.split('.').count() != 3 || c.split('.').any(str::is_empty) {
                    return Err(bad(format!("column `{c}`: write it as ns.table.column")));
                }
            }
        }
        Ok(Self { rules, salt })
    }

    /// The columns `user` (with `roles`) sees hashed.
    pub fn for_user(&self, user: &str, roles: &[String]) -> Masked {
        let mut masked = Masked::new();
        let mine = self.rules.iter().filter(|r| {
            r.users.iter().any(|u| u == user)
                || r.roles.iter().any(|x| x == "*" || roles.contains(x))
        });
        for rule in mine {
            for c in &rule.columns {
                let mut parts = c.splitn(3, '.');
                if let (Some(ns), Some(t), Some(col)) = (parts.next(), parts.next(), parts.next()) {
                    masked
                        .entry((ns.to_ascii_lowercase(), t.to_ascii_lowercase()))
                        .or_default()
                        .insert(col.to_ascii_lowercase());
                }
            }
        }
        masked
    }

    /// `statement` with every masked table it reads replaced by a hashing derived table, or
    /// `None` when nothing it reads is masked for this user.
    ///
    /// # Errors
    /// A masked table whose pinned schema cannot be read back as SQL (a gateway bug).
    pub fn apply(
        &self,
        statement: &Statement,
        masked: &Masked,
        pins: &Pins,
        default_schema: &str,
    ) -> Result<Option<Statement>> {
        let columns = |ns: &str, table: &str| {
            pins.get(ns, table)
                .map(|p| p.schema.fields().iter().map(|f| f.name().clone()).collect())
        };
        self.apply_with(statement, masked, &columns, default_schema)
    }

    /// [`Masks::apply`] with the table columns from `columns`.
    fn apply_with(
        &self,
        statement: &Statement,
        masked: &Masked,
        columns: &dyn Fn(&str, &str) -> Option<Vec<String>>,
        default_schema: &str,
    ) -> Result<Option<Statement>> {
        if masked.is_empty() {
            return Ok(None);
        }
        let mut ctes = Ctes::default();
        let _ = statement.visit(&mut ctes);
        let mut rewriter = Rewriter {
            masks: self,
            masked,
            columns,
            default_schema,
            ctes: ctes.0,
            changed: false,
            error: None,
        };
        let mut statement = statement.clone();
        let _ = VisitMut::visit(&mut statement, &mut rewriter);
        if let Some(e) = rewriter.error {
            return Err(e);
        }
        Ok(rewriter.changed.then_some(statement))
    }

    /// The masked columns of `(ns, table)` among `masked` (for scan estimates, which must not
    /// prune on a clear value the user cannot see).
    pub fn hidden<'a>(masked: &'a Masked, ns: &str, table: &str) -> Option<&'a BTreeSet<String>> {
        masked.get(&(ns.to_ascii_lowercase(), table.to_ascii_lowercase()))
    }

    /// The SELECT that reads `ns.table` with `hashed` columns hashed, every column in order.
    fn derived(
        &self,
        ns: &str,
        table: &str,
        columns: &[String],
        hashed: &BTreeSet<String>,
    ) -> Result<Query> {
        let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let salt = if self.salt.is_empty() {
            String::new()
        } else {
            format!("'{}' || ", self.salt.replace('\'', "''"))
        };
        let select: Vec<String> = columns
            .iter()
            .map(|c| {
                if hashed.contains(&c.to_ascii_lowercase()) {
                    format!("md5({salt}CAST({} AS VARCHAR)) AS {}", q(c), q(c))
                } else {
                    q(c)
                }
            })
            .collect();
        let sql = format!("SELECT {} FROM {}.{}", select.join(", "), q(ns), q(table));
        let mut parsed = Parser::parse_sql(&PostgreSqlDialect {}, &sql).map_err(|e| {
            Error::Engine(lakegate_engines::Error::Internal(format!(
                "masked source for {ns}.{table}: {e}"
            )))
        })?;
        match parsed.pop() {
            Some(Statement::Query(query)) => Ok(*query),
            _ => Err(Error::Engine(lakegate_engines::Error::Internal(format!(
                "masked source for {ns}.{table}"
            )))),
        }
    }
}

/// `schema` without the `hidden` columns (`None` when that cannot be built: prune on nothing).
pub fn without(
    schema: &iceberg::spec::Schema,
    hidden: &BTreeSet<String>,
) -> Option<iceberg::spec::Schema> {
    let fields = schema
        .as_struct()
        .fields()
        .iter()
        .filter(|f| !hidden.contains(&f.name.to_ascii_lowercase()))
        .cloned();
    iceberg::spec::Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_fields(fields)
        .build()
        .ok()
}

/// CTE names: an unqualified reference to one is not a lake table.
#[derive(Default)]
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

/// An identifier as the catalog names it: unquoted folds to lower case.
fn normalise(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

struct Rewriter<'a> {
    masks: &'a Masks,
    masked: &'a Masked,
    columns: &'a dyn Fn(&str, &str) -> Option<Vec<String>>,
    default_schema: &'a str,
    ctes: BTreeSet<String>,
    changed: bool,
    error: Option<Error>,
}

impl Rewriter<'_> {
    /// The derived table replacing a reference to `ns.table`, when it has masked columns.
    fn replacement(&self, ns: &str, table: &str, alias: TableAlias) -> Result<Option<TableFactor>> {
        let Some(hashed) = Masks::hidden(self.masked, ns, table) else {
            return Ok(None);
        };
        let Some(columns) = (self.columns)(ns, table) else {
            return Ok(None);
        };
        if !columns
            .iter()
            .any(|c| hashed.contains(&c.to_ascii_lowercase()))
        {
            return Ok(None);
        }
        let query = self.masks.derived(ns, table, &columns, hashed)?;
        Ok(Some(TableFactor::Derived {
            lateral: false,
            subquery: Box::new(query),
            alias: Some(alias),
            sample: None,
        }))
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    // After the children: the derived table put in place is not visited again.
    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            version: None,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let parts: Option<Vec<&Ident>> = name
            .0
            .iter()
            .map(|p| match p {
                ObjectNamePart::Identifier(i) => Some(i),
                ObjectNamePart::Function(_) => None,
            })
            .collect();
        let (ns, table, last) = match parts.as_deref() {
            Some([t]) if !self.ctes.contains(&normalise(t)) => {
                (self.default_schema.to_string(), normalise(t), (*t).clone())
            }
            Some([ns, t] | [_, ns, t]) => (normalise(ns), normalise(t), (*t).clone()),
            _ => return ControlFlow::Continue(()),
        };
        let alias = alias.clone().unwrap_or(TableAlias {
            explicit: true,
            name: last,
            columns: vec![],
        });
        match self.replacement(&ns, &table, alias) {
            Ok(Some(derived)) => {
                *factor = derived;
                self.changed = true;
            }
            Ok(None) => {}
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("sql")
            .pop()
            .expect("one")
    }

    fn masks(salt: &str) -> Masks {
        Masks::new(
            vec![MaskRule {
                roles: vec!["agent".into()],
                columns: vec!["sales.customers.email".into()],
                ..Default::default()
            }],
            salt.into(),
        )
        .expect("rules")
    }

    fn columns(ns: &str, t: &str) -> Option<Vec<String>> {
        (ns == "sales" && t == "customers").then(|| vec!["id".into(), "email".into()])
    }

    #[test]
    fn masked_tables_are_read_through_a_hashing_derived_table() {
        let m = masks("");
        let masked = m.for_user("bot", &["agent".to_string()]);
        let rewrite = |sql: &str| {
            m.apply_with(&parse(sql), &masked, &columns, "sales")
                .expect("apply")
                .map(|s| s.to_string())
        };
        assert_eq!(
            rewrite("SELECT email FROM customers WHERE email = 'a@b'").as_deref(),
            Some(
                "SELECT email FROM (SELECT \"id\", md5(CAST(\"email\" AS VARCHAR)) AS \"email\" \
                 FROM \"sales\".\"customers\") AS customers WHERE email = 'a@b'"
            )
        );
        // An alias is kept; joins and subqueries are masked too.
        let joined = rewrite(
            "SELECT c.email FROM sales.customers c JOIN x.y ON c.id = y.id \
             WHERE c.id IN (SELECT id FROM customers)",
        )
        .expect("masked");
        assert_eq!(joined.matches("md5(").count(), 2, "{joined}");
        assert!(joined.contains(") c JOIN x.y"), "{joined}");
        // A CTE of the same name is not the table; other tables are untouched.
        assert_eq!(
            rewrite("WITH customers AS (SELECT 1 AS email) SELECT email FROM customers"),
            None
        );
        assert_eq!(rewrite("SELECT * FROM x.y"), None);
        // Users without the role see clear values.
        assert!(m.for_user("alice", &["analyst".to_string()]).is_empty());
    }

    #[test]
    fn salt_is_prefixed_and_quoted() {
        let m = masks("it's");
        let masked = m.for_user("bot", &["agent".to_string()]);
        let sql = m
            .apply_with(
                &parse("SELECT * FROM sales.customers"),
                &masked,
                &columns,
                "public",
            )
            .expect("apply")
            .expect("masked")
            .to_string();
        assert!(
            sql.contains("md5('it''s' || CAST(\"email\" AS VARCHAR))"),
            "{sql}"
        );
    }

    #[test]
    fn bad_rules_are_refused() {
        let rule = |columns: &[&str], roles: &[&str]| MaskRule {
            roles: roles.iter().map(|s| s.to_string()).collect(),
            columns: columns.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert!(Masks::new(vec![rule(&["a.b.c"], &[])], String::new()).is_err());
        assert!(Masks::new(vec![rule(&["a.b"], &["r"])], String::new()).is_err());
        assert!(Masks::new(vec![rule(&[], &["r"])], String::new()).is_err());
        assert!(Masks::new(vec![rule(&["a.b.c"], &["*"])], String::new()).is_ok());
    }
}

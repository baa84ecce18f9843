//! The column-mask rewrite: every reference to a table with masked columns becomes a derived
//! table that selects the table's columns in order, each masked one replaced by
//! `md5(<salt> || CAST(column AS VARCHAR))` under its own name. The query then sees only the
//! hash — in its result and in its WHERE, JOIN and GROUP BY alike — and every engine runs the
//! same rewritten statement. Who is masked is the gateway's policy (`[[mask]]`); this is the
//! syntax.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use sqlparser::ast::{
    ObjectNamePart, Query, Statement, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::classify::{cte_names, name_parts};
use crate::{Error, Result};

/// The masked columns of each table, for one user: `(ns, table)` → column names, all lower
/// case.
pub type Masked = BTreeMap<(String, String), BTreeSet<String>>;

/// The masked columns of `ns.table` in `masked`.
pub fn hidden<'a>(masked: &'a Masked, ns: &str, table: &str) -> Option<&'a BTreeSet<String>> {
    masked.get(&(ns.to_lowercase(), table.to_lowercase()))
}

/// `statement` with every table in `masked` read through a hashing derived table, or `None`
/// when it reads none of them. `columns(ns, table)` lists a table's columns in order (`None`:
/// not a table the statement reads); `salt` is prefixed to each value before hashing.
///
/// # Errors
/// A CTE named like a masked table (which of the two a reference means is left to no one: the
/// statement is refused), or a column list that does not print as SQL.
pub fn rewrite(
    statement: &Statement,
    masked: &Masked,
    columns: &dyn Fn(&str, &str) -> Option<Vec<String>>,
    default_schema: &str,
    salt: &str,
) -> Result<Option<Statement>> {
    if masked.is_empty() {
        return Ok(None);
    }
    let mut rewriter = Rewriter {
        masked,
        columns,
        default_schema,
        salt,
        ctes: cte_names(statement),
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

/// The SELECT that reads `ns.table` with `hashed` columns hashed, every column in order.
fn derived(
    ns: &str,
    table: &str,
    columns: &[String],
    hashed: &BTreeSet<String>,
    salt: &str,
) -> Result<Query> {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let prefix = if salt.is_empty() {
        String::new()
    } else {
        format!("'{}' || ", salt.replace('\'', "''"))
    };
    let select: Vec<String> = columns
        .iter()
        .map(|c| {
            if hashed.contains(&c.to_lowercase()) {
                format!("md5({prefix}CAST({} AS VARCHAR)) AS {}", quote(c), quote(c))
            } else {
                quote(c)
            }
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {}.{}",
        select.join(", "),
        quote(ns),
        quote(table)
    );
    let unprintable = |why: String| Error::Mask {
        table: format!("{ns}.{table}"),
        why,
    };
    let mut parsed =
        Parser::parse_sql(&PostgreSqlDialect {}, &sql).map_err(|e| unprintable(e.to_string()))?;
    match parsed.pop() {
        Some(Statement::Query(query)) if parsed.is_empty() => Ok(*query),
        _ => Err(unprintable("not one query".into())),
    }
}

struct Rewriter<'a> {
    masked: &'a Masked,
    columns: &'a dyn Fn(&str, &str) -> Option<Vec<String>>,
    default_schema: &'a str,
    salt: &'a str,
    ctes: BTreeSet<String>,
    changed: bool,
    error: Option<Error>,
}

impl Rewriter<'_> {
    /// The derived table replacing a reference to `ns.table`, when it has masked columns.
    fn replacement(&self, ns: &str, table: &str, alias: TableAlias) -> Result<Option<TableFactor>> {
        let Some(hashed) = hidden(self.masked, ns, table) else {
            return Ok(None);
        };
        let Some(columns) = (self.columns)(ns, table) else {
            return Ok(None);
        };
        if !columns.iter().any(|c| hashed.contains(&c.to_lowercase())) {
            return Ok(None);
        }
        let query = derived(ns, table, &columns, hashed, self.salt)?;
        Ok(Some(TableFactor::Derived {
            lateral: false,
            subquery: Box::new(query),
            alias: Some(alias),
            sample: None,
        }))
    }

    /// Replaces `factor` when it reads a masked table.
    fn visit(&mut self, factor: &mut TableFactor) -> Result<()> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = factor
        else {
            return Ok(());
        };
        let (Some(parts), Some(ObjectNamePart::Identifier(last))) =
            (name_parts(name), name.0.last())
        else {
            return Ok(());
        };
        let (ns, table) = match parts.as_slice() {
            [t] => (self.default_schema.to_string(), t.clone()),
            [ns, t] | [_, ns, t] => (ns.clone(), t.clone()),
            _ => return Ok(()),
        };
        if hidden(self.masked, &ns, &table).is_none() {
            return Ok(());
        }
        if parts.len() == 1 && self.ctes.contains(&table) {
            return Err(Error::Mask {
                table: format!("{ns}.{table}"),
                why: format!("a CTE is named \"{table}\" too: rename the CTE or qualify the table"),
            });
        }
        let alias = alias.clone().unwrap_or(TableAlias {
            explicit: true,
            name: last.clone(),
            columns: vec![],
        });
        if let Some(derived) = self.replacement(&ns, &table, alias)? {
            *factor = derived;
            self.changed = true;
        }
        Ok(())
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    // After the children: the derived table put in place is not visited again.
    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let Err(e) = self.visit(factor) {
            self.error.get_or_insert(e);
            return ControlFlow::Break(());
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

    fn masked() -> Masked {
        Masked::from([(
            ("sales".to_string(), "customers".to_string()),
            BTreeSet::from(["email".to_string()]),
        )])
    }

    fn columns(ns: &str, t: &str) -> Option<Vec<String>> {
        (ns == "sales" && t == "customers").then(|| vec!["id".into(), "email".into()])
    }

    fn rewritten(sql: &str, salt: &str) -> Result<Option<String>> {
        Ok(rewrite(&parse(sql), &masked(), &columns, "sales", salt)?.map(|s| s.to_string()))
    }

    #[test]
    fn masked_tables_are_read_through_a_hashing_derived_table() {
        assert_eq!(
            rewritten("SELECT email FROM customers WHERE email = 'a@b'", "")
                .expect("rewrites")
                .as_deref(),
            Some(
                "SELECT email FROM (SELECT \"id\", md5(CAST(\"email\" AS VARCHAR)) AS \"email\" \
                 FROM \"sales\".\"customers\") AS customers WHERE email = 'a@b'"
            )
        );
        // An alias is kept; joins and subqueries are masked too.
        let joined = rewritten(
            "SELECT c.email FROM sales.customers c JOIN x.y ON c.id = y.id \
             WHERE c.id IN (SELECT id FROM customers)",
            "",
        )
        .expect("rewrites")
        .expect("masked");
        assert_eq!(joined.matches("md5(").count(), 2, "{joined}");
        assert!(joined.contains(") c JOIN x.y"), "{joined}");
        assert_eq!(rewritten("SELECT * FROM x.y", "").expect("rewrites"), None);
    }

    #[test]
    fn a_cte_named_like_a_masked_table_is_refused() {
        // Either reading could leak or change the answer: refuse, whatever the scope.
        for sql in [
            "WITH customers AS (SELECT * FROM customers) SELECT email FROM customers",
            "SELECT * FROM customers WHERE id IN \
             (WITH customers AS (SELECT 1 AS id) SELECT id FROM customers)",
        ] {
            let e = rewritten(sql, "").expect_err(sql);
            assert!(e.to_string().contains("rename the CTE"), "{e}");
        }
        // A qualified reference is the table, whatever the CTEs are called.
        let q = rewritten(
            "WITH customers AS (SELECT 1) SELECT email FROM sales.customers",
            "",
        )
        .expect("rewrites");
        assert!(q.is_some_and(|s| s.contains("md5(")));
    }

    #[test]
    fn salt_is_prefixed_and_quoted() {
        let sql = rewritten("SELECT * FROM sales.customers", "it's")
            .expect("rewrites")
            .expect("masked");
        assert!(
            sql.contains("md5('it''s' || CAST(\"email\" AS VARCHAR))"),
            "{sql}"
        );
    }

    #[test]
    fn odd_column_names_are_quoted() {
        let odd = |_: &str, _: &str| Some(vec!["we\"ird".to_string(), "email".to_string()]);
        let sql = rewrite(
            &parse("SELECT * FROM customers"),
            &masked(),
            &odd,
            "sales",
            "",
        )
        .expect("rewrites")
        .expect("masked")
        .to_string();
        assert!(
            Parser::parse_sql(&PostgreSqlDialect {}, &sql).is_ok(),
            "{sql}"
        );
        assert!(sql.contains("\"we\"\"ird\""), "{sql}");
    }
}

//! lakegate's own classifier on client SQL: statement kind, the tables it reads (CTE scopes),
//! the routing profile, parameter binding, lifted literals and the column-mask rewrite. No
//! panic, no hang; a masked or lifted statement reads exactly the tables the original does (the
//! access check trusts that list), and prints back faithfully whenever the original does (text
//! engines run the print).
#![no_main]

use std::collections::BTreeSet;

use lakegate_sql::classify;
use lakegate_sql::mask::{self, Masked};
use lakegate_sql::profile::{self, QueryProfile};
use libfuzzer_sys::fuzz_target;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// The gateway's default `limits.max_call_nesting`.
const MAX_CALL_NESTING: usize = 14;

fn parse(sql: &str) -> Option<Vec<sqlparser::ast::Statement>> {
    Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some(sql) = std::str::from_utf8(data).ok() else {
        return;
    };
    // What the gateway refuses before parsing (see lakegate_sql::nesting).
    if lakegate_sql::nesting::call_depth(sql).is_some_and(|d| d > MAX_CALL_NESTING) {
        return;
    }
    let Some(statements) = parse(sql) else {
        return;
    };
    for statement in statements {
        let kind = classify::kind(&statement);
        let Ok(refs) = classify::references(&statement, "public") else {
            continue;
        };
        let profile = QueryProfile::of(&statement, &kind, &refs);
        assert_eq!(profile.tables, refs.lake);
        if let Some(filter) = profile::top_where(&statement) {
            let _ = profile::bind_parameters(filter, |n| Some(n.to_string()));
        }
        // Lifted literals: the template reads the same tables, has exactly as many
        // parameters as values, and prints back faithfully whenever the original does.
        if let Some((template, values)) = lakegate_sql::lift::lift(&statement) {
            let again = classify::references(&template, "public").map(|r| r.lake).ok();
            assert_eq!(again.as_ref(), Some(&refs.lake), "{template}");
            let mut placeholders = 0;
            let _ = sqlparser::ast::visit_expressions(&template, |e| {
                if let sqlparser::ast::Expr::Value(v) = e
                    && matches!(v.value, sqlparser::ast::Value::Placeholder(_))
                {
                    placeholders += 1;
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
            assert_eq!(placeholders, values.len(), "{template}");
            if faithful(&statement) {
                assert!(faithful(&template), "lifted SQL does not print back: {template}");
            }
        }
        // Mask column `a` of every table it reads: the rewritten statement reads exactly the
        // same tables, and prints back faithfully whenever the original does (engines other
        // than DataFusion receive the text).
        if refs.lake.is_empty() {
            continue;
        }
        let masked: Masked = refs
            .lake
            .iter()
            .map(|t| (t.clone(), BTreeSet::from(["a".to_string()])))
            .collect();
        let columns = |_: &str, _: &str| Some(vec!["a".to_string(), "b".to_string()]);
        let Ok(Some(rewritten)) = mask::rewrite(&statement, &masked, &columns, "public", "s'")
        else {
            continue;
        };
        let tables = |s: &sqlparser::ast::Statement| -> BTreeSet<(String, String)> {
            classify::references(s, "public")
                .map(|r| r.lake.into_iter().collect())
                .unwrap_or_default()
        };
        assert_eq!(tables(&rewritten), tables(&statement), "{rewritten}");
        if faithful(&statement) {
            assert!(faithful(&rewritten), "masked SQL does not print back: {rewritten}");
        }
    }
});

/// Whether the statement's text parses back to the same statement.
fn faithful(statement: &sqlparser::ast::Statement) -> bool {
    matches!(parse(&statement.to_string()).as_deref(), Some([again]) if again == statement)
}

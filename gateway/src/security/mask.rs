//! Column masks, the policy: `[[mask]]` rules name columns (`ns.table.column`) that users with
//! given names or roles see only as a hash (`md5` of the salted text), everywhere in the query.
//! The rewrite itself is [`lakegate_sql::mask`]; it runs on the parsed statement before the
//! planner describes it and before any engine runs it, so every engine runs the same masked
//! statement (the dialect layer spells `md5` for Trino).

use std::collections::BTreeSet;

use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::engine::Pins;
pub use lakegate_sql::mask::{Masked, hidden};
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
                        .entry((ns.to_lowercase(), t.to_lowercase()))
                        .or_default()
                        .insert(col.to_lowercase());
                }
            }
        }
        masked
    }

    /// `statement` with every masked table it reads replaced by a hashing derived table, or
    /// `None` when nothing it reads is masked for this user.
    ///
    /// # Errors
    /// See [`lakegate_sql::mask::rewrite`].
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
        Ok(lakegate_sql::mask::rewrite(
            statement,
            masked,
            &columns,
            default_schema,
            &self.salt,
        )?)
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
        .filter(|f| !hidden.contains(&f.name.to_lowercase()))
        .cloned();
    iceberg::spec::Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_fields(fields)
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pick_users_and_roles() {
        let m = Masks::new(
            vec![
                MaskRule {
                    roles: vec!["agent".into()],
                    columns: vec!["Sales.Customers.Email".into()],
                    ..Default::default()
                },
                MaskRule {
                    users: vec!["carol".into()],
                    columns: vec!["sales.customers.phone".into()],
                    ..Default::default()
                },
            ],
            String::new(),
        )
        .expect("rules");
        let key = ("sales".to_string(), "customers".to_string());
        let bot = m.for_user("bot", &["agent".to_string()]);
        assert_eq!(bot[&key], BTreeSet::from(["email".to_string()]));
        let carol = m.for_user("carol", &["agent".to_string()]);
        assert_eq!(carol[&key].len(), 2);
        assert!(m.for_user("alice", &["analyst".to_string()]).is_empty());
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

//! Who may read what: `[[access]]` rules grant users (by name or role) routing groups and
//! tables (`ns.table`, `ns.*`, `*`). With no rules everyone may read everything; with rules, a
//! user may read only what some rule matching them grants. A denied statement fails with
//! SQLSTATE 42501 before any engine runs (and before the result cache, whose keys are per user).

use serde::Deserialize;

use crate::error::{Error, Result};

/// One `[[access]]` rule.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccessRule {
    /// User names it applies to.
    pub users: Vec<String>,
    /// Roles it applies to (`[[auth.users]] roles`).
    pub roles: Vec<String>,
    /// Routing groups they may use (`*`: all).
    pub groups: Vec<String>,
    /// Tables they may read: `ns.table`, `ns.*` or `*`.
    pub tables: Vec<String>,
}

fn table_matches(pattern: &str, ns: &str, table: &str) -> bool {
    pattern == "*"
        || pattern
            .strip_suffix(".*")
            .is_some_and(|p| p.eq_ignore_ascii_case(ns))
        || pattern.eq_ignore_ascii_case(&format!("{ns}.{table}"))
}

/// The rules in force.
#[derive(Debug, Clone, Default)]
pub struct Access {
    rules: Vec<AccessRule>,
}

impl Access {
    /// Rules from the config.
    ///
    /// # Errors
    /// A rule that names nobody or a malformed table pattern.
    pub fn new(rules: Vec<AccessRule>) -> Result<Self> {
        for (i, r) in rules.iter().enumerate() {
            let bad = |reason: String| Error::Config {
                setting: format!("access[{i}]"),
                reason,
            };
            if r.users.is_empty() && r.roles.is_empty() {
                return Err(bad("names no users or roles".into()));
            }
            for t in &r.tables {
                let shape_ok = t == "*"
                    || (t.matches('.').count() >= 1 && (!t.contains('*') || t.ends_with(".*")));
                if !shape_ok {
                    return Err(bad(format!("table pattern `{t}`: use ns.table, ns.* or *")));
                }
            }
        }
        Ok(Self { rules })
    }

    /// Whether any rule is configured.
    pub fn enabled(&self) -> bool {
        !self.rules.is_empty()
    }

    fn mine<'a>(
        &'a self,
        user: &'a str,
        roles: &'a [String],
    ) -> impl Iterator<Item = &'a AccessRule> {
        self.rules.iter().filter(move |r| {
            r.users.iter().any(|u| u == user) || r.roles.iter().any(|x| roles.contains(x))
        })
    }

    /// Whether `user` (with `roles`) may read `ns.table`.
    pub fn may_read(&self, user: &str, roles: &[String], ns: &str, table: &str) -> bool {
        !self.enabled()
            || self
                .mine(user, roles)
                .any(|r| r.tables.iter().any(|p| table_matches(p, ns, table)))
    }

    /// Checks a statement's tables and its routing group.
    ///
    /// # Errors
    /// [`Error::PermissionDenied`] naming the first table or the group refused.
    pub fn check(
        &self,
        user: &str,
        roles: &[String],
        tables: &[(String, String)],
        group: Option<&str>,
    ) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        for (ns, t) in tables {
            if !self.may_read(user, roles, ns, t) {
                return Err(Error::PermissionDenied {
                    what: format!("table {ns}.{t}"),
                });
            }
        }
        if let Some(g) = group
            && !self
                .mine(user, roles)
                .any(|r| r.groups.iter().any(|x| x == "*" || x == g))
        {
            return Err(Error::PermissionDenied {
                what: format!("routing group \"{g}\""),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_grant_by_user_or_role_and_deny_the_rest() {
        let a = Access::new(vec![
            AccessRule {
                roles: vec!["analyst".into()],
                groups: vec!["*".into()],
                tables: vec!["public.*".into()],
                ..Default::default()
            },
            AccessRule {
                users: vec!["bot".into()],
                groups: vec!["agents".into()],
                tables: vec!["sales.regions".into()],
                ..Default::default()
            },
        ])
        .expect("rules");
        let analyst = vec!["analyst".to_string()];
        let t = |ns: &str, n: &str| vec![(ns.to_string(), n.to_string())];
        assert!(
            a.check(
                "alice",
                &analyst,
                &t("public", "orders"),
                Some("dashboards")
            )
            .is_ok()
        );
        assert!(
            a.check("alice", &analyst, &t("sales", "regions"), None)
                .is_err()
        );
        assert!(
            a.check("bot", &[], &t("sales", "regions"), Some("agents"))
                .is_ok()
        );
        let e = a.check("bot", &[], &t("sales", "regions"), Some("reprocess"));
        assert!(
            e.expect_err("group")
                .to_string()
                .contains("routing group \"reprocess\"")
        );
        assert!(
            a.check("nobody", &[], &t("public", "orders"), None)
                .is_err()
        );
        assert!(
            Access::default()
                .check("x", &[], &t("a", "b"), Some("g"))
                .is_ok()
        );
        assert!(Access::new(vec![AccessRule::default()]).is_err());
    }
}

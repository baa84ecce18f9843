//! What makes the gateway safe to hand to a model: the guardrails an operator composes per
//! agent (`[mcp]` and `[[mcp.agent]]`), checked by the MCP frontend ([`crate::frontend::mcp`])
//! around the same query path every client takes.
//!
//! - [`Policy`] — one agent's effective guardrails: the `[mcp]` defaults overlaid by the first
//!   `[[mcp.agent]]` rule matching the user or one of its roles.
//! - [`budget`] — queries per minute and bytes scanned per hour, per agent (53400 past them).
//! - [`expensive`] — which statements are expensive (a big estimated scan, a big scan with no
//!   filter, a cross join) and what the policy does with them: run, refuse, or wait for approval.
//! - [`approvals`] — statements waiting for an admin (`/api/pending`, `lakegate agents`).
//!
//! Everything else an agent is held to is the gateway's own and applies unchanged: read-only
//! statements, access rules, column masks, the routing group's scan cap, row and byte caps,
//! `statement_timeout`.

pub mod approvals;
pub mod budget;
pub mod expensive;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use approvals::Approvals;
pub use budget::Budgets;
pub use expensive::Expensive;

/// `[mcp]`: the MCP endpoint and every agent's default guardrails.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Serve MCP at `/mcp` on the HTTP listener (streamable HTTP). `lakegate mcp` serves stdio
    /// whatever this says.
    pub enabled: bool,
    /// Host headers `/mcp` accepts (DNS-rebinding protection). Unset: loopback names when no
    /// users are configured, any host when they are (each request is authenticated then).
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a statement waits for an admin's approval before the call gives up (57014).
    #[serde(with = "humantime_serde")]
    pub approval_timeout: Duration,
    /// Per-agent rules: the first matching the user (`"*"`: every user) or one of its roles
    /// applies; keys it leaves out, and agents no rule matches, get [`Limits::default`].
    pub agent: Vec<AgentRule>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allowed_hosts: None,
            approval_timeout: Duration::from_secs(600),
            agent: Vec::new(),
        }
    }
}

/// The guardrails one agent is held to.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Limits {
    /// The routing group its statements run in. The default, `agents`, is used when the
    /// routing rules define it (else the rules decide, with the tag `agent`); a group named
    /// explicitly must exist.
    pub group: String,
    /// Rows of an answer handed to the model; the answer says when it was cut (default 100).
    pub max_rows: u64,
    /// Bytes of an answer's values handed to the model (JSON text; default 256 KiB).
    pub max_result_bytes: u64,
    /// Refuse, before running, a statement whose estimated scan is larger (0: the routing
    /// group's cap only).
    pub max_scan_bytes: u64,
    /// Each statement's `statement_timeout` (0: none).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// Statements run per minute (0: no limit; 53400 past it).
    pub queries_per_minute: u32,
    /// Bytes scanned (estimated) per hour (0: no limit; 53400 past it).
    pub scan_bytes_per_hour: u64,
    /// What happens to an expensive statement: `refuse`, `approve` (wait for an admin) or
    /// `allow`.
    pub expensive: Expensive,
    /// A statement estimated to scan more than this is expensive (default 1 GiB).
    pub expensive_scan_bytes: u64,
    /// A statement with no WHERE estimated to scan more than this is expensive (default
    /// 64 MiB).
    pub unfiltered_scan_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            group: DEFAULT_GROUP.into(),
            max_rows: 100,
            max_result_bytes: 256 << 10,
            max_scan_bytes: 0,
            statement_timeout: Duration::from_secs(60),
            queries_per_minute: 0,
            scan_bytes_per_hour: 0,
            expensive: Expensive::Refuse,
            expensive_scan_bytes: 1 << 30,
            unfiltered_scan_bytes: 64 << 20,
        }
    }
}

/// The group agent sessions use when the routing rules define it.
pub const DEFAULT_GROUP: &str = "agents";

/// The tag agent sessions carry (`lakegate.tag`), for routing rules.
pub const AGENT_TAG: &str = "agent";

/// `[[mcp.agent]]`: guardrails for the agents matching `users` or `roles`; keys left out keep
/// the defaults ([`Limits::default`]).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentRule {
    /// User names this rule applies to.
    pub users: Vec<String>,
    /// Roles this rule applies to (any one).
    pub roles: Vec<String>,
    /// See [`Limits::group`].
    pub group: Option<String>,
    /// See [`Limits::max_rows`].
    pub max_rows: Option<u64>,
    /// See [`Limits::max_result_bytes`].
    pub max_result_bytes: Option<u64>,
    /// See [`Limits::max_scan_bytes`].
    pub max_scan_bytes: Option<u64>,
    /// See [`Limits::statement_timeout`].
    #[serde(default, with = "humantime_serde::option")]
    pub statement_timeout: Option<Duration>,
    /// See [`Limits::queries_per_minute`].
    pub queries_per_minute: Option<u32>,
    /// See [`Limits::scan_bytes_per_hour`].
    pub scan_bytes_per_hour: Option<u64>,
    /// See [`Limits::expensive`].
    pub expensive: Option<Expensive>,
    /// See [`Limits::expensive_scan_bytes`].
    pub expensive_scan_bytes: Option<u64>,
    /// See [`Limits::unfiltered_scan_bytes`].
    pub unfiltered_scan_bytes: Option<u64>,
}

impl AgentRule {
    fn matches(&self, user: &str, roles: &[String]) -> bool {
        self.users.iter().any(|u| u == user || u == "*")
            || self.roles.iter().any(|r| roles.contains(r))
    }

    fn over(&self, base: &Limits) -> Limits {
        Limits {
            group: self.group.clone().unwrap_or_else(|| base.group.clone()),
            max_rows: self.max_rows.unwrap_or(base.max_rows),
            max_result_bytes: self.max_result_bytes.unwrap_or(base.max_result_bytes),
            max_scan_bytes: self.max_scan_bytes.unwrap_or(base.max_scan_bytes),
            statement_timeout: self.statement_timeout.unwrap_or(base.statement_timeout),
            queries_per_minute: self.queries_per_minute.unwrap_or(base.queries_per_minute),
            scan_bytes_per_hour: self.scan_bytes_per_hour.unwrap_or(base.scan_bytes_per_hour),
            expensive: self.expensive.unwrap_or(base.expensive),
            expensive_scan_bytes: self
                .expensive_scan_bytes
                .unwrap_or(base.expensive_scan_bytes),
            unfiltered_scan_bytes: self
                .unfiltered_scan_bytes
                .unwrap_or(base.unfiltered_scan_bytes),
        }
    }
}

/// One agent's effective guardrails, and which rule they came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    /// The agent (user name).
    pub user: String,
    /// `[[mcp.agent]]` rule number (from 1) that applied, `None`: the defaults.
    pub rule: Option<usize>,
    /// The limits.
    #[serde(flatten)]
    pub limits: Limits,
}

/// The agents' guardrails, their budgets and the statements waiting for approval.
pub struct Agents {
    config: McpConfig,
    /// Per-agent usage windows.
    pub budgets: Budgets,
    /// Statements waiting for an admin.
    pub approvals: Approvals,
}

impl Agents {
    /// The agents of `config`.
    pub fn new(config: McpConfig) -> Self {
        Self {
            config,
            budgets: Budgets::default(),
            approvals: Approvals::default(),
        }
    }

    /// `[mcp]`.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// `user`'s effective guardrails (`roles`: the user's roles).
    pub fn policy(&self, user: &str, roles: &[String]) -> Policy {
        let matched = self
            .config
            .agent
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(user, roles));
        Policy {
            user: user.to_string(),
            rule: matched.map(|(i, _)| i + 1),
            limits: match matched {
                Some((_, rule)) => rule.over(&Limits::default()),
                None => Limits::default(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> McpConfig {
        toml::from_str(toml_text).expect("parses")
    }

    #[test]
    fn a_rule_overlays_the_defaults_for_its_users_and_roles() {
        let agents = Agents::new(config(
            r#"
            [[agent]]
            users = ["claude"]
            queries_per_minute = 5
            expensive = "approve"
            [[agent]]
            roles = ["bots"]
            max_rows = 10
            [[agent]]
            users = ["*"]
            queries_per_minute = 100
            "#,
        ));
        let claude = agents.policy("claude", &[]);
        assert_eq!(claude.rule, Some(1));
        assert_eq!(claude.limits.queries_per_minute, 5);
        assert_eq!(
            claude.limits.max_rows, 100,
            "not set by the rule: the default"
        );
        assert_eq!(claude.limits.expensive, Expensive::Approve);
        let bot = agents.policy("r2", &["bots".to_string()]);
        assert_eq!((bot.rule, bot.limits.max_rows), (Some(2), 10));
        assert_eq!(
            bot.limits.queries_per_minute, 0,
            "the first match alone applies"
        );
        let other = agents.policy("someone", &[]);
        assert_eq!(
            (other.rule, other.limits.queries_per_minute),
            (Some(3), 100)
        );
        assert_eq!(other.limits.expensive, Expensive::Refuse);
        assert_eq!(other.limits.group, DEFAULT_GROUP);
    }

    #[test]
    fn unknown_keys_in_an_agent_rule_are_errors() {
        let parsed: Result<McpConfig, _> = toml::from_str("[[agent]]\nusers=[\"a\"]\nmax_rowz=1");
        assert!(parsed.is_err());
    }
}

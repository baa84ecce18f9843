//! Tool errors as a model reads them: the SQLSTATE a PostgreSQL client would get, the message,
//! and one line saying what to do instead. They are MCP tool errors (`isError: true`), so the
//! model sees them, not JSON-RPC errors a client hides.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::agents::budget::OverBudget;

/// A tool call that did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// The SQLSTATE.
    pub sqlstate: String,
    /// What happened.
    pub message: String,
    /// What to do instead.
    pub fix: Option<String>,
}

impl ToolError {
    /// An error with its code and fix.
    pub fn new(sqlstate: &str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            sqlstate: sqlstate.to_string(),
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    /// A call the tool does not take (0A000), and what it takes.
    pub fn usage(message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::new("0A000", message, fix)
    }

    /// A scan refused before running (54000); the fix is added by the caller.
    pub fn scan(message: impl Into<String>) -> Self {
        Self {
            sqlstate: "54000".into(),
            message: message.into(),
            fix: None,
        }
    }

    /// The same error with `fix` as its advice.
    pub fn with_fix(mut self, fix: String) -> Self {
        self.fix = Some(fix);
        self
    }

    /// `{"sqlstate", "message", "fix"}`.
    pub fn to_json(&self) -> Value {
        json!({"sqlstate": self.sqlstate, "message": self.message, "fix": self.fix})
    }

    /// The MCP tool error.
    pub fn into_result(self) -> CallToolResult {
        let mut text = format!("ERROR {}: {}", self.sqlstate, self.message);
        if let Some(fix) = &self.fix {
            text.push_str("\nfix: ");
            text.push_str(fix);
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({"error": self.to_json()}));
        result
    }
}

/// The advice for an error of this SQLSTATE, when there is a general one.
fn advice(sqlstate: &str) -> Option<&'static str> {
    Some(match sqlstate {
        "42601" => "fix the SQL (PostgreSQL dialect), one statement per call",
        "42P01" => "call list_tables for the tables this agent may read",
        "42703" => "call describe_table for the table's columns",
        "42883" => "use a PostgreSQL function, or cast the arguments to the types it takes",
        "42501" => "read only what list_tables shows; this agent may not read that",
        "54000" => "filter, aggregate or LIMIT the query to read and return less",
        "57014" => "make the query cheaper (filter, aggregate) to finish within statement_timeout",
        "53300" => "too many queries at once: retry in a few seconds",
        "0A000" => "rewrite it as one read-only SELECT",
        "58000" | "58030" | "58P01" => "the lake is not reachable right now: retry later",
        _ => return None,
    })
}

impl From<crate::Error> for ToolError {
    fn from(e: crate::Error) -> Self {
        let sqlstate = match &e {
            crate::Error::Postgres(pg) => pg.code.clone(),
            other => crate::frontend::pg::sqlstate::sqlstate(other.kind()).to_string(),
        };
        let fix = advice(&sqlstate).map(str::to_string);
        Self {
            sqlstate,
            message: e.to_string(),
            fix,
        }
    }
}

impl From<lakegate_engines::Error> for ToolError {
    fn from(e: lakegate_engines::Error) -> Self {
        crate::Error::from(e).into()
    }
}

impl From<lakegate_maintenance::Error> for ToolError {
    fn from(e: lakegate_maintenance::Error) -> Self {
        crate::Error::from(e).into()
    }
}

impl From<OverBudget> for ToolError {
    fn from(e: OverBudget) -> Self {
        Self::new(
            "53400",
            e.what,
            format!(
                "wait {} s before the next statement, or ask for less",
                e.retry_after.as_secs().max(1)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_sqlstate_and_a_fix() {
        let denied = ToolError::from(crate::Error::PermissionDenied {
            what: "table s.t".into(),
        });
        assert_eq!(denied.sqlstate, "42501");
        assert!(denied.fix.is_some());
        let budget = ToolError::from(OverBudget {
            what: "too many".into(),
            retry_after: std::time::Duration::from_secs(12),
        });
        assert_eq!(budget.sqlstate, "53400");
        assert_eq!(
            budget.fix.as_deref(),
            Some("wait 12 s before the next statement, or ask for less")
        );
        let result = budget.into_result();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content.expect("structured")["error"]["sqlstate"],
            "53400"
        );
    }
}

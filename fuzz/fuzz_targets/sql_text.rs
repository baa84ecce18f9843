//! SQL text from clients, parsed the way lakegate's classifier first parses it (sqlparser's
//! PostgreSQL dialect, with its recursion limit): no panic, no stack overflow, no hang. Text
//! the gateway refuses before parsing (calls nested deeper than the default
//! `limits.max_call_nesting`, see lakegate_sql::nesting) is skipped: its parse time is
//! exponential by sqlparser's design, which is why the gateway refuses it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// The gateway's default `limits.max_call_nesting`.
const MAX_CALL_NESTING: usize = 14;

fuzz_target!(|data: &[u8]| {
    if let Ok(sql) = std::str::from_utf8(data)
        && lakegate_sql::nesting::call_depth(sql).is_none_or(|d| d <= MAX_CALL_NESTING)
    {
        if let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, sql) {
            for s in statements {
                // Round-trip through the printer the engines' dialect rendering relies on.
                let _ = Parser::parse_sql(&PostgreSqlDialect {}, &s.to_string());
            }
        }
    }
});

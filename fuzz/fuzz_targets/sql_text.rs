//! SQL text from clients, parsed the way lakegate's classifier first parses it (sqlparser's
//! PostgreSQL dialect, with its recursion limit): no panic, no stack overflow, no hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

fuzz_target!(|data: &[u8]| {
    if let Ok(sql) = std::str::from_utf8(data) {
        if let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, sql) {
            for s in statements {
                // Round-trip through the printer the engines' dialect rendering relies on.
                let _ = Parser::parse_sql(&PostgreSqlDialect {}, &s.to_string());
            }
        }
    }
});

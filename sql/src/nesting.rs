//! A bound on what the SQL parser is given. sqlparser 0.61's PostgreSQL dialect parses each
//! function argument twice (first as a possible `name => value` with an expression for a name,
//! then as a value), so its time doubles with every level of nested calls: `abs(abs(…(1)…))`
//! 20 deep takes seconds, 30 deep half an hour, and the parse cannot be interrupted. Before
//! parsing, the text is tokenized (linear) and statements whose calls nest deeper than a limit
//! are refused.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

/// The deepest nesting of parenthesised calls in `sql`: a `(` right after a word (a function
/// name, or a keyword such as `IN` or `OVER`) opens a call. `None` when the text does not
/// tokenize (the parser then reports the error).
pub fn call_depth(sql: &str) -> Option<usize> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut open: Vec<bool> = Vec::new();
    let (mut calls, mut deepest) = (0usize, 0usize);
    let mut previous_word = false;
    for token in tokens {
        match token {
            Token::Whitespace(_) => continue,
            Token::LParen => {
                open.push(previous_word);
                if previous_word {
                    calls += 1;
                    deepest = deepest.max(calls);
                }
            }
            Token::RParen if open.pop() == Some(true) => calls = calls.saturating_sub(1),
            _ => {}
        }
        previous_word = matches!(token, Token::Word(_));
    }
    Some(deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_nested_calls_not_parentheses() {
        assert_eq!(call_depth("SELECT 1"), Some(0));
        assert_eq!(call_depth("SELECT abs(abs(abs(1)))"), Some(3));
        assert_eq!(call_depth("SELECT 1 + ((((1))))"), Some(0));
        // A parenthesis after a keyword counts: `(SELECT` nesting is exponential too.
        assert_eq!(call_depth("SELECT (SELECT (SELECT 1))"), Some(2));
        assert_eq!(call_depth("SELECT f(1), g(h(2)), k(3)"), Some(2));
        assert_eq!(call_depth("SELECT f((g(1)))"), Some(2));
        // Unclosed calls count too (the parser explores them before failing).
        assert_eq!(call_depth("SELECT abs(abs(abs(1"), Some(3));
        // Parentheses inside strings and comments are not calls.
        assert_eq!(call_depth("SELECT 'f(g(h(' -- k(l(\n"), Some(0));
        assert_eq!(call_depth("SELECT 'unterminated"), None);
    }
}

//! PostgreSQL's `SIMILAR TO` and `varchar(n)`/`char(n)` casts on DataFusion, rewritten in the
//! statement DataFusion plans ([`rewrite`]):
//!
//! - `x SIMILAR TO 'pattern'` is a regular expression match of the whole string in which `%`
//!   is any text, `_` any character, `.` a dot and the escape character (a backslash unless
//!   `ESCAPE` says otherwise) quotes the next one ([`similar_to_regex`]); DataFusion read
//!   `%` as a literal character. A pattern that is not a literal is refused.
//! - `CAST(x AS varchar(n))` keeps the first `n` characters, as PostgreSQL's explicit cast
//!   does; DataFusion dropped the length. `char(n)` (blank-padded, its trailing blanks
//!   insignificant) has no equivalent and is refused.
//!
//! Other engines run the statement as written: [`rewrite`] returns the constructs it replaced,
//! so that an engine answers them only if it was verified for them
//! ([`crate::constructs`]).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CharacterLength, DataType as SqlType, Expr, Statement, Value,
    visit_expressions_mut,
};

use crate::constructs::Constructs;
use crate::error::{Error, Result};

/// Rewrites `statement` for DataFusion (see the module docs); returns the constructs it
/// replaced.
///
/// # Errors
/// [`Error::Unsupported`] for `SIMILAR TO` with a pattern that is not a literal, and for casts
/// to `char(n)`.
pub fn rewrite(statement: &mut Statement) -> Result<Constructs> {
    let mut replaced = Constructs::new();
    let mut refused: Option<&'static str> = None;
    let _ = visit_expressions_mut(statement, |expr| {
        match expr {
            Expr::SimilarTo {
                negated,
                expr: of,
                pattern,
                escape_char,
            } => {
                let escape = match escape_char.as_ref() {
                    None => Some('\\'),
                    Some(Value::SingleQuotedString(s)) => {
                        let mut chars = s.chars();
                        match (chars.next(), chars.next()) {
                            (first, None) => first,
                            _ => {
                                refused =
                                    Some("SIMILAR TO with an escape of more than one character");
                                return ControlFlow::Break(());
                            }
                        }
                    }
                    Some(_) => {
                        refused = Some("SIMILAR TO with an escape that is not a literal");
                        return ControlFlow::Break(());
                    }
                };
                let Expr::Value(v) = pattern.as_ref() else {
                    refused = Some("SIMILAR TO with a pattern that is not a literal");
                    return ControlFlow::Break(());
                };
                let Value::SingleQuotedString(p) = &v.value else {
                    refused = Some("SIMILAR TO with a pattern that is not a literal");
                    return ControlFlow::Break(());
                };
                let regex = similar_to_regex(p, escape);
                let of = std::mem::replace(of.as_mut(), Expr::value(Value::Null));
                *expr = Expr::BinaryOp {
                    left: Box::new(of),
                    op: if *negated {
                        BinaryOperator::PGRegexNotMatch
                    } else {
                        BinaryOperator::PGRegexMatch
                    },
                    right: Box::new(Expr::value(Value::SingleQuotedString(regex))),
                };
                replaced.insert("similar_to".into());
            }
            Expr::Cast {
                expr: of,
                data_type,
                ..
            } => match character_type(data_type) {
                Some(Characters::Varying(n)) => {
                    let of = std::mem::replace(of.as_mut(), Expr::value(Value::Null));
                    let cast = Expr::Cast {
                        kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
                        expr: Box::new(of),
                        data_type: SqlType::Text,
                        array: false,
                        format: None,
                    };
                    *expr = lakegate_sql::semantics::function_call(
                        "left",
                        vec![cast, Expr::value(Value::Number(n.to_string(), false))],
                    );
                    replaced.insert("cast:varchar(n)".into());
                }
                Some(Characters::Blank) => {
                    refused = Some("a cast to char(n) (blank-padded text)");
                    return ControlFlow::Break(());
                }
                None => {}
            },
            _ => {}
        }
        ControlFlow::Continue(())
    });
    match refused {
        Some(what) => Err(Error::Unsupported {
            what: format!("{what} (no engine gives PostgreSQL's answer yet)"),
        }),
        None => Ok(replaced),
    }
}

enum Characters {
    /// `varchar(n)`: at most `n` characters.
    Varying(u64),
    /// `char(n)`.
    Blank,
}

fn character_type(t: &SqlType) -> Option<Characters> {
    let length = |l: &Option<CharacterLength>| match l {
        Some(CharacterLength::IntegerLength { length, .. }) => Some(*length),
        _ => None,
    };
    match t {
        SqlType::Varchar(l) | SqlType::CharacterVarying(l) | SqlType::CharVarying(l) => {
            length(l).map(Characters::Varying)
        }
        SqlType::Char(_) | SqlType::Character(_) => Some(Characters::Blank),
        _ => None,
    }
}

/// The regular expression (whole string) PostgreSQL matches `SIMILAR TO pattern` with.
pub fn similar_to_regex(pattern: &str, escape: Option<char>) -> String {
    let mut out = String::from("^(?:");
    let mut chars = pattern.chars();
    let mut in_bracket = false;
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next) => push_literal(&mut out, next),
                None => push_literal(&mut out, c),
            }
            continue;
        }
        if in_bracket {
            if c == ']' {
                in_bracket = false;
            }
            out.push(c);
            continue;
        }
        match c {
            '%' => out.push_str(".*"),
            '_' => out.push('.'),
            '[' => {
                in_bracket = true;
                out.push(c);
            }
            '.' | '^' | '$' | '\\' => push_literal(&mut out, c),
            c => out.push(c),
        }
    }
    out.push_str(")$");
    out
}

fn push_literal(out: &mut String, c: char) {
    if c.is_ascii_punctuation() {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_become_whole_string_regular_expressions() {
        assert_eq!(
            similar_to_regex("%(get|gad)%", Some('\\')),
            "^(?:.*(get|gad).*)$"
        );
        assert_eq!(similar_to_regex("a_c.d", Some('\\')), "^(?:a.c\\.d)$");
        assert_eq!(similar_to_regex("100\\%", Some('\\')), "^(?:100\\%)$");
        assert_eq!(similar_to_regex("[a-c]%", Some('\\')), "^(?:[a-c].*)$");
        assert_eq!(similar_to_regex("x#_y", Some('#')), "^(?:x\\_y)$");
    }

    fn rewritten(sql: &str) -> Result<(String, Constructs)> {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        let replaced = rewrite(&mut statement)?;
        Ok((statement.to_string(), replaced))
    }

    #[test]
    fn casts_to_varchar_n_keep_n_characters_and_char_n_is_refused() {
        let (sql, replaced) =
            rewritten("SELECT CAST(s AS varchar(4)), s::varchar FROM t").expect("ok");
        assert!(sql.contains("left(CAST(s AS TEXT), 4)"), "{sql}");
        assert!(sql.contains("s::VARCHAR"), "{sql}");
        assert!(replaced.contains("cast:varchar(n)"));
        assert!(rewritten("SELECT s::char(3) FROM t").is_err());
    }

    #[test]
    fn a_pattern_that_is_not_a_literal_is_refused() {
        let (sql, replaced) = rewritten("SELECT s SIMILAR TO 'a%' FROM t").expect("ok");
        assert!(sql.contains("s ~ '^(?:a.*)$'"), "{sql}");
        assert!(replaced.contains("similar_to"));
        assert!(rewritten("SELECT s NOT SIMILAR TO p FROM t").is_err());
    }
}

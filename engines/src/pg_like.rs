//! `LIKE … ESCAPE 'c'` with any escape character on DataFusion, which takes only a backslash
//! (SQLAlchemy's reflection sends `nspname NOT LIKE 'pg/_%' ESCAPE '/'`).
//!
//! [`rewrite`] turns `x LIKE p ESCAPE 'c'` (and `NOT LIKE`, `ILIKE`) in the statement DataFusion
//! plans into `x LIKE lakegate_like_escape(p, 'c')`: the function rewrites the pattern, whatever
//! it is (a literal, a parameter, an expression), to the same pattern with backslash escapes.
//! Other engines take `ESCAPE` themselves and run the statement as written.

use std::any::Any;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use datafusion::common::{Result as DfResult, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{Expr, Statement, Value, visit_expressions_mut};

/// The pattern-rewriting function's name.
pub const NAME: &str = "lakegate_like_escape";

/// Rewrites every `LIKE`/`ILIKE` with an escape character other than a backslash.
pub fn rewrite(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Like {
            pattern,
            escape_char,
            ..
        }
        | Expr::ILike {
            pattern,
            escape_char,
            ..
        } = expr
            && let Some(Value::SingleQuotedString(escape)) = escape_char.as_ref()
            && escape != "\\"
        {
            let escape = escape.clone();
            let of = std::mem::replace(pattern.as_mut(), Expr::value(Value::Null));
            **pattern = lakegate_sql::semantics::function_call(
                NAME,
                vec![of, Expr::value(Value::SingleQuotedString(escape))],
            );
            *escape_char = None;
        }
        ControlFlow::<()>::Continue(())
    });
}

/// `pattern` with `escape` (none when empty) as a backslash-escaped pattern.
pub fn with_backslash(pattern: &str, escape: Option<char>) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                // PostgreSQL: "LIKE pattern must not end with escape character".
                None => out.push_str("\\\\"),
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

/// The function, for a DataFusion context.
pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(LikeEscape {
        signature: Signature::any(2, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LikeEscape {
    signature: Signature,
}

impl ScalarUDFImpl for LikeEscape {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let escape = match args.args.get(1) {
            Some(ColumnarValue::Scalar(v)) => v.try_as_str().flatten().map(str::to_string),
            _ => None,
        };
        let Some(escape) = escape else {
            return exec_err!("ESCAPE must be a constant string");
        };
        let mut it = escape.chars();
        let escape = match (it.next(), it.next()) {
            (None, _) => None,
            (Some(c), None) => Some(c),
            _ => return exec_err!("invalid escape string: it must be empty or one character"),
        };
        let (array, scalar) = crate::semantics::argument_array(&args, 0)?;
        let array = cast(array.as_ref(), &DataType::Utf8)?;
        let Some(strings) = array.as_any().downcast_ref::<StringArray>() else {
            return exec_err!("{NAME}: the pattern is not text");
        };
        let out: StringArray = strings
            .iter()
            .map(|p| p.map(|p| with_backslash(p, escape)))
            .collect();
        let out: ArrayRef = Arc::new(out);
        crate::semantics::columnar(out, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_become_backslashes_and_backslashes_literals() {
        assert_eq!(with_backslash("pg/_%", Some('/')), "pg\\_%");
        assert_eq!(with_backslash("a//b", Some('/')), "a\\/b");
        assert_eq!(with_backslash("c:\\x%", Some('/')), "c:\\\\x%");
        assert_eq!(with_backslash("50#%", Some('#')), "50\\%");
        // No escape at all: every character is itself.
        assert_eq!(with_backslash("a\\_", None), "a\\\\_");
    }

    #[tokio::test]
    async fn like_with_a_slash_escape_matches_as_postgresql() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_udf(udf());
        let sql = "SELECT 'pg_toast' LIKE 'pg/_%' ESCAPE '/', 'pgXtoast' LIKE 'pg/_%' ESCAPE '/', \
                   'pg_toast' NOT LIKE 'pg/_' || '%' ESCAPE '/'";
        let batches = crate::pg_extract::run_rewritten(&ctx, sql, rewrite).await;
        let row: Vec<String> = (0..3)
            .map(|c| {
                arrow::util::display::array_value_to_string(batches[0].column(c), 0)
                    .expect("prints")
            })
            .collect();
        assert_eq!(row, ["true", "false", "false"]);
    }
}

//! `SET`, `SHOW`, `RESET`, `DISCARD`, `DEALLOCATE` and `SELECT set_config(...)`: the session's
//! settings, as PostgreSQL keeps them (see [`crate::session`] for which settings exist), and
//! which prepared statements the frontend drops.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, Reset, Set, Statement, Value};
use lakegate_engines::engine::Described;

use crate::error::{Error, Result};
use crate::profile::QueryProfile;
use crate::routing::rules::Asker;
use crate::service::query::batches_stream;
use crate::service::{Command, Deallocate, GatewayService, QueryOutput};
use crate::session::Session;

impl GatewayService {
    /// Runs a `SET`, `SHOW`, `RESET` or `DISCARD` on `session`.
    ///
    /// # Errors
    /// Unknown or read-only settings, values a setting refuses, unsupported forms.
    pub(crate) fn session_statement(
        &self,
        statement: &Statement,
        session: &mut Session,
    ) -> Result<QueryOutput> {
        match statement {
            Statement::Set(set) => {
                let changed = match set {
                    Set::SingleAssignment {
                        variable, values, ..
                    } => {
                        let name = variable.to_string().to_ascii_lowercase();
                        let value = values.iter().map(expr_value).collect::<Vec<_>>().join(", ");
                        if name == "lakegate.group" && value != "auto" {
                            self.router.group(
                                &Asker::default(),
                                &QueryProfile::utility(),
                                Some(&value),
                            )?;
                        }
                        apply_set(session, &name, &value)?
                    }
                    Set::SetTimeZone { value, .. } => {
                        apply_set(session, "timezone", &expr_value(value))?
                    }
                    Set::SetNames { charset_name, .. } => {
                        apply_set(session, "client_encoding", &charset_name.value)?
                    }
                    // Transaction characteristics and roles do not change a read-only gateway.
                    Set::SetTransaction { .. } | Set::SetRole { .. } => None,
                    Set::SetSessionAuthorization(_) => {
                        return Err(Error::Unsupported {
                            what: "SET SESSION AUTHORIZATION is not supported".into(),
                        });
                    }
                    other => {
                        return Err(Error::Unsupported {
                            what: format!("{other} is not supported"),
                        });
                    }
                };
                Ok(QueryOutput::Command(Command {
                    changed_setting: changed,
                    ..Command::new("SET")
                }))
            }
            Statement::ShowVariable { variable } => {
                let name = show_name(variable);
                let batch = if name == "all" {
                    let (names, values): (Vec<&str>, Vec<&str>) = session
                        .values()
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .unzip();
                    RecordBatch::try_new(
                        show_schema("all"),
                        vec![
                            Arc::new(StringArray::from(names)),
                            Arc::new(StringArray::from(values)),
                        ],
                    )
                } else {
                    let value = session.show(&name)?;
                    RecordBatch::try_new(
                        show_schema(&name),
                        vec![Arc::new(StringArray::from(vec![value]))],
                    )
                }
                .map_err(|e| {
                    lakegate_engines::Error::from(datafusion::error::DataFusionError::from(e))
                })?;
                Ok(QueryOutput::Rows {
                    stream: batches_stream(batch.schema(), vec![batch]),
                    tag: "SHOW",
                    encodings: None,
                })
            }
            Statement::Reset(r) => {
                let changed = match &r.reset {
                    Reset::ALL => {
                        session.reset_all();
                        None
                    }
                    Reset::ConfigurationParameter(name) => {
                        let name = session.reset(&name.to_string())?;
                        let value = session.show(&name)?;
                        Some((name, value))
                    }
                };
                Ok(QueryOutput::Command(Command {
                    changed_setting: changed,
                    ..Command::new("RESET")
                }))
            }
            Statement::Discard { .. } => {
                session.reset_all();
                session.close(None)?;
                Ok(QueryOutput::Command(Command {
                    deallocate: Some(Deallocate::All),
                    ..Command::new("DISCARD ALL")
                }))
            }
            Statement::Deallocate { name, .. } => {
                let (tag, which) =
                    if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
                        ("DEALLOCATE ALL", Deallocate::All)
                    } else {
                        ("DEALLOCATE", Deallocate::Named(name.value.clone()))
                    };
                Ok(QueryOutput::Command(Command {
                    deallocate: Some(which),
                    ..Command::new(tag)
                }))
            }
            other => Err(super::unsupported(other)),
        }
    }
}

/// What a session statement returns: `SHOW` a column of text, the others no rows.
pub(crate) fn describe(statement: &Statement) -> Option<Described> {
    match statement {
        Statement::ShowVariable { variable } => Some(Described {
            param_types: vec![],
            features: Default::default(),
            constructs: Default::default(),
            schema: show_schema(&show_name(variable)),
        }),
        _ => None,
    }
}

/// `SELECT set_config('name', 'value', is_local)` with literal arguments changes the session
/// like `SET` (asyncpg turns `jit` off this way).
pub(crate) fn apply_set_config(statement: &Statement, session: &mut Session) -> Result<bool> {
    use datafusion::sql::sqlparser::ast::{
        FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem, SetExpr,
    };
    let Statement::Query(query) = statement else {
        return Ok(false);
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Ok(false);
    };
    let mut changed = false;
    for item in &select.projection {
        let (SelectItem::UnnamedExpr(Expr::Function(f))
        | SelectItem::ExprWithAlias {
            expr: Expr::Function(f),
            ..
        }) = item
        else {
            continue;
        };
        if !f
            .name
            .to_string()
            .to_ascii_lowercase()
            .ends_with("set_config")
        {
            continue;
        }
        let FunctionArguments::List(list) = &f.args else {
            continue;
        };
        let literal = |i: usize| match list.args.get(i) {
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))) => match &v.value {
                Value::SingleQuotedString(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        };
        if let (Some(name), Some(value)) = (literal(0), literal(1)) {
            session.set(&name, &value)?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Applies a `SET` and returns the setting to report back, if clients track it.
fn apply_set(session: &mut Session, name: &str, value: &str) -> Result<Option<(String, String)>> {
    let name = if value.eq_ignore_ascii_case("default") {
        session.reset(name)?
    } else {
        session.set(name, value)?
    };
    let value = session.show(&name)?;
    Ok(Some((name, value)))
}

/// The text of a `SET` value: strings unquoted, identifiers and numbers as written.
fn expr_value(e: &Expr) -> String {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => {
                if *b {
                    "on".into()
                } else {
                    "off".into()
                }
            }
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        Expr::UnaryOp { op, expr } => format!("{op}{}", expr_value(expr)),
        other => other.to_string(),
    }
}

/// `SHOW transaction isolation level` → `transaction_isolation`.
pub(crate) fn show_name(variable: &[datafusion::sql::sqlparser::ast::Ident]) -> String {
    let words: Vec<String> = variable
        .iter()
        .map(|i| i.value.to_ascii_lowercase())
        .collect();
    match words.join(" ").as_str() {
        "transaction isolation level" => "transaction_isolation".into(),
        "time zone" => "timezone".into(),
        // sqlparser splits a dotted name (`SHOW lakegate.engine`) into its parts.
        _ => words.join("."),
    }
}

/// The columns `SHOW name` returns.
pub(crate) fn show_schema(name: &str) -> SchemaRef {
    if name == "all" {
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("setting", DataType::Utf8, false),
        ]))
    } else {
        Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]))
    }
}

//! Lookups whose values are written into their text, run as the lifted template of their
//! literals ([`lakegate_sql::lift`]) with the values as parameters: how
//! [`super::GatewayService`] lifts a statement, types the values and picks what runs.

use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_sql::lift::Lifted;

/// A statement sent without parameters as the template of its lifted literals and their
/// values ([`lakegate_sql::lift`]); `None` when it has parameters of its own or nothing to
/// lift. `text` is its text as sent, when known.
pub(super) fn lift(
    statement: &Statement,
    params: Option<&ParamValues>,
    text: Option<&str>,
) -> Option<(Statement, Vec<Lifted>)> {
    if params.is_some() || text.is_some_and(nothing_to_lift) {
        return None;
    }
    lakegate_sql::lift::lift(statement)
}

/// Whether a statement sent as `text` is run as it is, not lifted: a text without a digit has
/// no literal to lift, and one with a `$` most likely has placeholders of its own (a Parse of
/// `… = $1`): not even a copy of its tree is made.
pub(super) fn nothing_to_lift(text: &str) -> bool {
    text.contains('$') || !text.bytes().any(|b| b.is_ascii_digit())
}

/// Lifted values as parameters, typed as PostgreSQL types the literals.
pub(super) fn param_values(values: &[Lifted]) -> ParamValues {
    use datafusion::common::ScalarValue;
    ParamValues::List(
        values
            .iter()
            .map(|v| match *v {
                Lifted::Int4(v) => ScalarValue::Int32(Some(v)).into(),
                Lifted::Int8(v) => ScalarValue::Int64(Some(v)).into(),
            })
            .collect(),
    )
}

/// What [`GatewayService::execute_input`] runs.
#[derive(Clone, Copy)]
pub(super) enum Input<'a> {
    /// A statement as parsed from the client's text, with the client's parameters.
    Written(&'a Statement, Option<&'a ParamValues>),
    /// The lifted template of the client's text (`ctx.text`) and its values.
    Lifted(&'a Statement, &'a ParamValues),
}

/// What runs: the lifted template with its values, or `statement` with `params`.
pub(super) fn runs<'a>(
    lifted: &'a Option<(Statement, ParamValues)>,
    statement: &'a Statement,
    params: Option<&'a ParamValues>,
) -> (&'a Statement, Option<&'a ParamValues>) {
    match lifted {
        Some((template, values)) => (template, Some(values)),
        None => (statement, params),
    }
}

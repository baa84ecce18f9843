//! Renders one parsed statement as SQL text for another engine (DuckDB, Trino, Spark): every
//! lake table becomes that engine's way of reading the *pinned* snapshot, bound `$n`
//! parameters become literals, and the few syntax differences that change answers or fail to
//! parse are smoothed over (casts and type names, `NULLS` ordering defaults, `OFFSET`/`LIMIT`
//! order, string escapes).
//!
//! Rewrites work on the sqlparser AST; the only text step splices each engine's table source
//! and literal text into marker identifiers the AST rendering left behind.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    self as ast, CastKind, Expr, Fetch, Ident, LimitClause, ObjectName, ObjectNamePart,
    OrderByExpr, OrderByKind, Query, TableAlias, TableFactor, Value, VisitMut, VisitorMut,
    WindowType,
};

use crate::engine::Pins;
use crate::error::{Error, Result};

/// The SQL dialect of a target engine, with what it needs to name the lake's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect<'a> {
    /// Embedded DuckDB with its Iceberg extension: tables read with `iceberg_scan`.
    DuckDb,
    /// Trino's Iceberg connector under catalog `catalog`: `FOR VERSION AS OF`.
    Trino {
        /// The Trino catalog that holds the lake.
        catalog: &'a str,
    },
    /// Spark with an Iceberg `SparkCatalog` named `catalog`: `VERSION AS OF`.
    Spark {
        /// The Spark catalog that holds the lake.
        catalog: &'a str,
    },
}

impl Dialect<'_> {
    /// The engine's name, as in config and routing rules.
    pub fn engine(&self) -> &'static str {
        match self {
            Dialect::DuckDb => "duckdb",
            Dialect::Trino { .. } => "trino",
            Dialect::Spark { .. } => "spark",
        }
    }
}

/// Renders `statement` for `dialect`, reading every pinned table at its pinned snapshot.
///
/// `default_schema` resolves unqualified table names, as the gateway did when it pinned them.
///
/// # Errors
/// A parameter whose type has no literal form in the dialect, or a statement whose text
/// already contains lakegate's marker prefix.
pub fn render(
    statement: &ast::Statement,
    params: Option<&ParamValues>,
    pins: &Pins,
    default_schema: &str,
    dialect: Dialect<'_>,
) -> Result<String> {
    let original = statement.to_string();
    if original.contains(MARKER) {
        return Err(Error::Unsupported {
            what: format!("statements containing the identifier prefix {MARKER}"),
        });
    }
    if !prints_faithfully(statement, &original) {
        return Err(Error::Unsupported {
            what: format!(
                "sending this statement to {} as SQL text (a quoted string or name in it, \
                 with two quotes in a row or a backslash before a quote, does not print back \
                 as written; datafusion can run it)",
                dialect.engine()
            ),
        });
    }
    let mut statement = statement.clone();
    let ctes = lakegate_sql::classify::cte_names(&statement);
    let mut rewriter = Rewriter {
        dialect,
        pins,
        default_schema,
        ctes,
        splices: Vec::new(),
        error: None,
        params,
    };
    let _ = statement.visit(&mut rewriter);
    if let Some(e) = rewriter.error {
        return Err(e);
    }
    let mut sql = statement.to_string();
    for (marker, text) in &rewriter.splices {
        if sql.matches(marker.as_str()).count() != 1 {
            return Err(Error::Internal(format!(
                "rendering for {dialect:?} lost or duplicated {marker}"
            )));
        }
        sql = sql.replacen(marker.as_str(), text, 1);
    }
    Ok(sql)
}

/// Whether `text` (the statement as sqlparser prints it) parses back to the same statement.
///
/// Engines other than DataFusion receive the statement as text, so printing must be lossless:
/// sqlparser 0.61 prints a string or quoted name whose value holds two quotes in a row, or a
/// backslash before a quote, without escaping them, so the text can mean something else — a
/// string that swallows the SQL after it and ends inside a later one, i.e. a different query
/// than the one the access check saw. Such statements are refused here; the same statement
/// then runs on DataFusion, which takes the parsed statement itself.
fn prints_faithfully(statement: &ast::Statement, text: &str) -> bool {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    matches!(
        Parser::parse_sql(&PostgreSqlDialect {}, text).as_deref(),
        Ok([again]) if again == statement
    )
}

/// What every non-planner engine starts from: the schema the planner promised and the
/// statement rendered for `dialect` at the request's pins.
///
/// # Errors
/// No promised schema (a gateway bug), or [`render`]'s errors.
pub fn prepare(
    request: &crate::engine::EngineRequest<'_>,
    engine: &str,
    dialect: Dialect<'_>,
) -> Result<(arrow::datatypes::SchemaRef, String)> {
    let schema = request
        .promised
        .cloned()
        .ok_or_else(|| Error::Internal(format!("{engine} needs the planner's schema to answer")))?;
    let sql = render(
        request.statement,
        request.params,
        request.pins,
        request.settings.default_schema(),
        dialect,
    )?;
    tracing::debug!(%engine, %sql, "rendered");
    Ok((schema, sql))
}

/// The prefix of marker identifiers; a statement that already contains it is refused.
const MARKER: &str = "__lakegate_splice_";

struct Rewriter<'a> {
    dialect: Dialect<'a>,
    pins: &'a Pins,
    default_schema: &'a str,
    ctes: BTreeSet<String>,
    /// `(marker, text)` pairs to splice into the rendered SQL.
    splices: Vec<(String, String)>,
    error: Option<Error>,
    params: Option<&'a ParamValues>,
}

impl Rewriter<'_> {
    fn marker(&mut self, text: String) -> Ident {
        let marker = format!("{MARKER}{}", self.splices.len());
        self.splices.push((marker.clone(), text));
        Ident::new(marker)
    }

    /// The engine's source text for a pinned lake table.
    fn table_source(&self, schema: &str, table: &str) -> Option<String> {
        let pinned = self.pins.get(schema, table)?;
        Some(match (self.dialect, pinned.snapshot_id) {
            (_, None) => empty_relation(&pinned.schema, self.dialect),
            (Dialect::DuckDb, Some(id)) => format!(
                "iceberg_scan({}, snapshot_from_id => {id})",
                quote_string(&pinned.metadata_location, self.dialect)
            ),
            (Dialect::Trino { catalog }, Some(id)) => format!(
                "{}.{}.{} FOR VERSION AS OF {id}",
                quote_ident(catalog, self.dialect),
                quote_ident(schema, self.dialect),
                quote_ident(table, self.dialect)
            ),
            (Dialect::Spark { catalog }, Some(id)) => format!(
                "{}.{}.{} VERSION AS OF {id}",
                quote_ident(catalog, self.dialect),
                quote_ident(schema, self.dialect),
                quote_ident(table, self.dialect)
            ),
        })
    }

    /// The `(schema, table)` a table reference names, normalised as the gateway resolved it.
    fn resolve(&self, name: &ObjectName) -> Option<(String, String)> {
        let parts = lakegate_sql::classify::name_parts(name)?;
        match parts.as_slice() {
            [table] if !self.ctes.contains(table) => {
                Some((self.default_schema.to_string(), table.clone()))
            }
            [schema, table] | [_, schema, table] => Some((schema.clone(), table.clone())),
            _ => None,
        }
    }

    fn param(&mut self, placeholder: &str) -> Option<Expr> {
        let index: usize = placeholder.strip_prefix('$')?.parse().ok()?;
        let value = match self.params? {
            ParamValues::List(values) => values.get(index.checked_sub(1)?)?.value.clone(),
            ParamValues::Map(_) => return None,
        };
        match literal(&value, self.dialect) {
            Ok(text) => Some(Expr::Identifier(self.marker(text))),
            Err(e) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table {
            name,
            alias,
            args: None,
            version: None,
            ..
        } = factor
            && let Some((schema, table)) = self.resolve(name)
            && let Some(source) = self.table_source(&schema, &table)
        {
            if alias.is_none() {
                // Keep `table.column` references working once the name is replaced.
                *alias = Some(TableAlias {
                    explicit: true,
                    name: Ident::with_quote('"', table.clone()),
                    columns: vec![],
                });
            }
            let marker = self.marker(source);
            *name = ObjectName(vec![ObjectNamePart::Identifier(marker)]);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::Value(v) => {
                if let Value::Placeholder(p) = &v.value {
                    let p = p.clone();
                    if let Some(lit) = self.param(&p) {
                        *expr = lit;
                    }
                } else if let Value::SingleQuotedString(s) = &mut v.value
                    && matches!(self.dialect, Dialect::Spark { .. })
                {
                    // Spark reads backslashes in string literals as escapes.
                    *s = s.replace('\\', "\\\\");
                }
            }
            Expr::Cast {
                kind, data_type, ..
            } => {
                if matches!(self.dialect, Dialect::Trino { .. }) && *kind == CastKind::DoubleColon {
                    *kind = CastKind::Cast;
                }
                if let Some(name) = type_name(data_type, self.dialect) {
                    *data_type = ast::DataType::Custom(
                        ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
                        vec![],
                    );
                }
            }
            Expr::Function(f) => {
                if let Some(WindowType::WindowSpec(spec)) = &mut f.over {
                    explicit_nulls(&mut spec.order_by);
                }
                if matches!(self.dialect, Dialect::Trino { .. })
                    && let Some(arg) = md5_argument(f)
                {
                    // PostgreSQL's md5(text) is lower-case hex text; Trino's hashes varbinary.
                    *expr = call("lower", call("to_hex", call("md5", call("to_utf8", arg))));
                }
            }
            // DuckDB answers NULL or infinity for a zero divisor (see `duckdb_engine`).
            Expr::BinaryOp {
                op: ast::BinaryOperator::Divide | ast::BinaryOperator::Modulo,
                right,
                ..
            } if self.dialect == Dialect::DuckDb => {
                let divisor = std::mem::replace(right.as_mut(), Expr::value(Value::Null));
                **right = call("lakegate_divisor", divisor);
            }
            // Trino has no `IS TRUE`: `coalesce(x, false)` is true exactly when x is.
            Expr::IsTrue(inner) if matches!(self.dialect, Dialect::Trino { .. }) => {
                let inner = std::mem::replace(inner.as_mut(), Expr::value(Value::Null));
                *expr = Expr::Function(ast::Function {
                    name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new("coalesce"))]),
                    uses_odbc_syntax: false,
                    parameters: ast::FunctionArguments::None,
                    args: ast::FunctionArguments::List(ast::FunctionArgumentList {
                        duplicate_treatment: None,
                        args: vec![
                            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::Nested(
                                Box::new(inner),
                            ))),
                            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::value(
                                Value::Boolean(false),
                            ))),
                        ],
                        clauses: vec![],
                    }),
                    filter: None,
                    null_treatment: None,
                    over: None,
                    within_group: vec![],
                });
            }
            // PostgreSQL's LIKE escapes with `\` unless told otherwise; DuckDB and Trino have
            // no default escape character.
            Expr::Like { escape_char, .. } | Expr::ILike { escape_char, .. }
                if escape_char.is_none()
                    && matches!(self.dialect, Dialect::Trino { .. } | Dialect::DuckDb) =>
            {
                *escape_char = Some(Value::SingleQuotedString("\\".into()));
                if let Expr::ILike { .. } = expr {
                    return self.post_visit_expr(expr);
                }
            }
            Expr::ILike {
                negated,
                expr: left,
                pattern,
                escape_char,
                any: false,
            } if matches!(self.dialect, Dialect::Trino { .. }) => {
                // Trino has no ILIKE.
                let lower = |e: &Expr| call("lower", e.clone());
                *expr = Expr::Like {
                    negated: *negated,
                    any: false,
                    expr: Box::new(lower(left)),
                    pattern: Box::new(lower(pattern)),
                    escape_char: escape_char.clone(),
                };
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(order_by) = &mut query.order_by
            && let OrderByKind::Expressions(exprs) = &mut order_by.kind
        {
            explicit_nulls(exprs);
        }
        if matches!(self.dialect, Dialect::Trino { .. })
            && let Some(LimitClause::LimitOffset {
                limit: limit @ Some(_),
                offset: Some(_),
                ..
            }) = &mut query.limit_clause
        {
            // Trino wants OFFSET before the row limit: `OFFSET n FETCH FIRST m ROWS ONLY`.
            query.fetch = Some(Fetch {
                with_ties: false,
                percent: false,
                quantity: limit.take(),
            });
        }
        ControlFlow::Continue(())
    }
}

/// `name(arg)`.
fn call(name: &str, arg: Expr) -> Expr {
    Expr::Function(ast::Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: ast::FunctionArguments::None,
        args: ast::FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arg))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// The argument of a plain one-argument `md5(...)` call.
fn md5_argument(f: &ast::Function) -> Option<Expr> {
    let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice() else {
        return None;
    };
    if !name.value.eq_ignore_ascii_case("md5") || f.over.is_some() {
        return None;
    }
    match &f.args {
        ast::FunctionArguments::List(list) => match list.args.as_slice() {
            [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))] => Some(e.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Spells out PostgreSQL's default null ordering (`ASC NULLS LAST`, `DESC NULLS FIRST`):
/// Spark's default differs.
fn explicit_nulls(exprs: &mut [OrderByExpr]) {
    for e in exprs {
        if e.options.nulls_first.is_none() {
            e.options.nulls_first = Some(e.options.asc == Some(false));
        }
    }
}

fn quote_ident(name: &str, dialect: Dialect<'_>) -> String {
    match dialect {
        Dialect::Spark { .. } => format!("`{}`", name.replace('`', "``")),
        _ => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

fn quote_string(s: &str, dialect: Dialect<'_>) -> String {
    let s = match dialect {
        Dialect::Spark { .. } => s.replace('\\', "\\\\"),
        _ => s.to_string(),
    };
    format!("'{}'", s.replace('\'', "''"))
}

/// The dialect's name for a PostgreSQL type written in a cast, when it differs.
fn type_name(t: &ast::DataType, dialect: Dialect<'_>) -> Option<String> {
    use ast::DataType as T;
    let trino = matches!(dialect, Dialect::Trino { .. });
    let spark = matches!(dialect, Dialect::Spark { .. });
    let name = match t {
        T::Text | T::String(None) | T::Varchar(None) | T::CharacterVarying(None) if trino => {
            "VARCHAR"
        }
        T::Text | T::Varchar(_) | T::CharacterVarying(_) if spark => "STRING",
        T::DoublePrecision | T::Float8 | T::Float64 => "DOUBLE",
        T::Real | T::Float4 => "REAL",
        T::Int8(_) => "BIGINT",
        T::Int4(_) => "INTEGER",
        T::Int2(_) => "SMALLINT",
        T::Bytea if trino => "VARBINARY",
        T::Bytea if spark => "BINARY",
        T::Timestamp(_, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone) if trino => {
            "TIMESTAMP(6) WITH TIME ZONE"
        }
        T::Timestamp(_, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone) if spark => {
            "TIMESTAMP"
        }
        T::Timestamp(_, _) if spark => "TIMESTAMP_NTZ",
        T::Timestamp(_, _) if trino => "TIMESTAMP(6)",
        T::Numeric(info) | T::Decimal(info) => {
            return Some(match info {
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => format!("DECIMAL({p},{s})"),
                ast::ExactNumberInfo::Precision(p) => format!("DECIMAL({p},0)"),
                ast::ExactNumberInfo::None => "DECIMAL(38,10)".to_string(),
            });
        }
        _ => return None,
    };
    Some(name.to_string())
}

/// The dialect's type name for an Arrow type (empty relations, typed NULLs).
pub fn sql_type(t: &DataType, dialect: Dialect<'_>) -> Option<String> {
    let (duck, trino, spark) = match t {
        DataType::Boolean => ("BOOLEAN", "BOOLEAN", "BOOLEAN"),
        DataType::Int8 | DataType::Int16 => ("SMALLINT", "SMALLINT", "SMALLINT"),
        DataType::Int32 => ("INTEGER", "INTEGER", "INT"),
        DataType::Int64 => ("BIGINT", "BIGINT", "BIGINT"),
        DataType::Float32 => ("REAL", "REAL", "FLOAT"),
        DataType::Float64 => ("DOUBLE", "DOUBLE", "DOUBLE"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            ("VARCHAR", "VARCHAR", "STRING")
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            ("BLOB", "VARBINARY", "BINARY")
        }
        DataType::Date32 => ("DATE", "DATE", "DATE"),
        DataType::Timestamp(_, None) => ("TIMESTAMP", "TIMESTAMP(6)", "TIMESTAMP_NTZ"),
        DataType::Timestamp(_, Some(_)) => {
            ("TIMESTAMPTZ", "TIMESTAMP(6) WITH TIME ZONE", "TIMESTAMP")
        }
        DataType::Decimal128(p, s) => {
            return Some(format!("DECIMAL({p},{s})"));
        }
        _ => return None,
    };
    Some(
        match dialect {
            Dialect::DuckDb => duck,
            Dialect::Trino { .. } => trino,
            Dialect::Spark { .. } => spark,
        }
        .to_string(),
    )
}

/// A relation with `schema`'s columns and no rows: a table that has no snapshot yet.
fn empty_relation(schema: &arrow::datatypes::Schema, dialect: Dialect<'_>) -> String {
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| {
            let t = sql_type(f.data_type(), dialect).unwrap_or_else(|| "VARCHAR".into());
            format!("CAST(NULL AS {t}) AS {}", quote_ident(f.name(), dialect))
        })
        .collect();
    format!("(SELECT {} WHERE 1 = 0)", columns.join(", "))
}

/// A scalar as a literal of `dialect` with the same type.
///
/// # Errors
/// [`Error::Unsupported`] for types without a literal form here (nested types, intervals).
pub fn literal(value: &ScalarValue, dialect: Dialect<'_>) -> Result<String> {
    let typed = |text: String, t: &DataType| -> Result<String> {
        let name = sql_type(t, dialect).ok_or_else(|| unsupported_param(t))?;
        Ok(format!("CAST({text} AS {name})"))
    };
    if value.is_null() {
        return typed("NULL".into(), &value.data_type());
    }
    Ok(match value {
        ScalarValue::Boolean(Some(b)) => if *b { "TRUE" } else { "FALSE" }.into(),
        ScalarValue::Int8(Some(_))
        | ScalarValue::Int16(Some(_))
        | ScalarValue::Int32(Some(_))
        | ScalarValue::UInt8(Some(_))
        | ScalarValue::UInt16(Some(_)) => typed(value.to_string(), &DataType::Int32)?,
        ScalarValue::Int64(Some(_)) | ScalarValue::UInt32(Some(_)) => {
            typed(value.to_string(), &DataType::Int64)?
        }
        ScalarValue::Float32(Some(v)) => {
            typed(quote_string(&v.to_string(), dialect), &value.data_type())?
        }
        ScalarValue::Float64(Some(v)) => {
            typed(quote_string(&v.to_string(), dialect), &value.data_type())?
        }
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => quote_string(s, dialect),
        ScalarValue::Decimal128(Some(v), _, scale) => typed(
            quote_string(&decimal_text(*v, *scale), dialect),
            &value.data_type(),
        )?,
        ScalarValue::Date32(Some(_)) => {
            format!("DATE {}", quote_string(&value.to_string(), dialect))
        }
        ScalarValue::TimestampSecond(Some(_), tz)
        | ScalarValue::TimestampMillisecond(Some(_), tz)
        | ScalarValue::TimestampMicrosecond(Some(_), tz)
        | ScalarValue::TimestampNanosecond(Some(_), tz) => {
            let micros = value
                .cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None))
                .ok()
                .and_then(|v| match v {
                    ScalarValue::TimestampMicrosecond(Some(m), _) => Some(m),
                    _ => None,
                })
                .ok_or_else(|| unsupported_param(&value.data_type()))?;
            let at = chrono::DateTime::from_timestamp_micros(micros)
                .ok_or_else(|| unsupported_param(&value.data_type()))?
                .naive_utc()
                .format("%Y-%m-%d %H:%M:%S%.6f")
                .to_string();
            match (tz.is_some(), dialect) {
                (false, Dialect::Spark { .. }) => format!("TIMESTAMP_NTZ '{at}'"),
                (false, _) => format!("TIMESTAMP '{at}'"),
                (true, Dialect::DuckDb) => format!("TIMESTAMPTZ '{at}+00'"),
                (true, Dialect::Trino { .. }) => format!("TIMESTAMP '{at} UTC'"),
                (true, Dialect::Spark { .. }) => format!("TIMESTAMP '{at}+00:00'"),
            }
        }
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b)) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            match dialect {
                Dialect::DuckDb => format!("from_hex('{hex}')"),
                _ => format!("X'{hex}'"),
            }
        }
        other => return Err(unsupported_param(&other.data_type())),
    })
}

/// `12345` at scale 2 → `123.45`.
fn decimal_text(value: i128, scale: i8) -> String {
    let digits = value.unsigned_abs().to_string();
    let sign = if value < 0 { "-" } else { "" };
    if scale <= 0 {
        return format!(
            "{sign}{digits}{}",
            "0".repeat(scale.unsigned_abs() as usize)
        );
    }
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

fn unsupported_param(t: &DataType) -> Error {
    Error::Unsupported {
        what: format!("a parameter of type {t} on this engine"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parse(sql: &str) -> ast::Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("valid SQL")
            .remove(0)
    }

    fn render_plain(sql: &str, dialect: Dialect<'_>) -> String {
        render(&parse(sql), None, &Pins::default(), "public", dialect).expect("renders")
    }

    #[test]
    fn null_ordering_is_spelled_out() {
        let sql = render_plain(
            "SELECT a, row_number() OVER (ORDER BY b DESC) FROM x ORDER BY a",
            Dialect::Spark { catalog: "lake" },
        );
        assert!(sql.contains("ORDER BY b DESC NULLS FIRST"), "{sql}");
        assert!(sql.ends_with("ORDER BY a NULLS LAST"), "{sql}");
    }

    #[test]
    fn duckdb_divisors_are_checked_for_zero() {
        let sql = render_plain("SELECT a / (b - 1), a % 2 FROM x", Dialect::DuckDb);
        assert!(sql.contains("a / lakegate_divisor((b - 1))"), "{sql}");
        assert!(sql.contains("a % lakegate_divisor(2)"), "{sql}");
        let trino = render_plain("SELECT a / b FROM x", Dialect::Trino { catalog: "lake" });
        assert!(trino.contains("a / b"), "{trino}");
    }

    #[test]
    fn trino_gets_cast_and_offset_fetch() {
        let sql = render_plain(
            "SELECT a::text FROM x WHERE b ILIKE 'x%' LIMIT 5 OFFSET 10",
            Dialect::Trino { catalog: "lake" },
        );
        assert!(sql.contains("CAST(a AS VARCHAR)"), "{sql}");
        assert!(sql.contains("lower(b) LIKE lower('x%')"), "{sql}");
        assert!(sql.contains("OFFSET 10"), "{sql}");
        assert!(sql.ends_with("FETCH FIRST 5 ROWS ONLY"), "{sql}");
    }

    #[test]
    fn trino_md5_hashes_text_to_hex_like_postgres() {
        let sql = render_plain(
            "SELECT md5(CAST(e AS VARCHAR)) AS e FROM x",
            Dialect::Trino { catalog: "lake" },
        );
        assert_eq!(
            sql,
            "SELECT lower(to_hex(md5(to_utf8(CAST(e AS VARCHAR))))) AS e FROM x"
        );
        let duck = render_plain("SELECT md5(e) FROM x", Dialect::DuckDb);
        assert_eq!(duck, "SELECT md5(e) FROM x");
    }

    #[test]
    fn a_literal_that_does_not_print_back_is_refused_not_injected() {
        // `'x\'''` is the three characters x, backslash, quote; sqlparser prints it as
        // `'x\''`, a string that runs on into the next literal: the engine would read
        // `forbidden`, a table the statement the gateway checked never names.
        let sneaky = parse(
            r"SELECT 'x\''' AS a, ' UNION SELECT * FROM forbidden UNION SELECT ''' AS b FROM allowed",
        );
        let printed = sneaky.to_string();
        assert!(printed.contains(r"'x\''"), "{printed}");
        for dialect in [
            Dialect::DuckDb,
            Dialect::Trino { catalog: "lake" },
            Dialect::Spark { catalog: "lake" },
        ] {
            let e =
                render(&sneaky, None, &Pins::default(), "public", dialect).expect_err("refused");
            assert!(e.to_string().contains("does not print back"), "{e}");
            assert!(e.to_string().contains(dialect.engine()), "{e}");
        }
        // Ordinary quotes inside strings and names still pass.
        let sql = render_plain(
            r#"SELECT 'O''Brien' AS "say ""hi""" FROM t"#,
            Dialect::Trino { catalog: "lake" },
        );
        assert!(sql.contains("'O''Brien'"), "{sql}");
    }

    #[test]
    fn spark_escapes_backslashes() {
        let sql = render_plain(r"SELECT 'a\b'", Dialect::Spark { catalog: "lake" });
        assert_eq!(sql, r"SELECT 'a\\b'");
    }

    #[test]
    fn parameters_become_typed_literals() {
        let params = ParamValues::List(vec![
            ScalarValue::Int64(Some(7)).into(),
            ScalarValue::Utf8(Some("it's".into())).into(),
            ScalarValue::Decimal128(Some(12345), 10, 2).into(),
            ScalarValue::TimestampMicrosecond(Some(0), Some("UTC".into())).into(),
            ScalarValue::Utf8(None).into(),
        ]);
        let statement = parse("SELECT $1, $2, $3, $4, $5");
        let trino = render(
            &statement,
            Some(&params),
            &Pins::default(),
            "public",
            Dialect::Trino { catalog: "lake" },
        )
        .expect("renders");
        assert_eq!(
            trino,
            "SELECT CAST(7 AS BIGINT), 'it''s', CAST('123.45' AS DECIMAL(10,2)), \
             TIMESTAMP '1970-01-01 00:00:00.000000 UTC', CAST(NULL AS VARCHAR)"
        );
        let duck = render(
            &statement,
            Some(&params),
            &Pins::default(),
            "public",
            Dialect::DuckDb,
        )
        .expect("renders");
        assert!(
            duck.contains("TIMESTAMPTZ '1970-01-01 00:00:00.000000+00'"),
            "{duck}"
        );
    }

    #[test]
    fn decimals_print_exactly() {
        assert_eq!(decimal_text(12345, 2), "123.45");
        assert_eq!(decimal_text(-5, 2), "-0.05");
        assert_eq!(decimal_text(7, 0), "7");
        assert_eq!(decimal_text(7, -2), "700");
    }

    #[test]
    fn marker_prefix_in_input_is_refused() {
        let statement = parse("SELECT __lakegate_splice_0 FROM x");
        assert!(
            render(
                &statement,
                None,
                &Pins::default(),
                "public",
                Dialect::DuckDb
            )
            .is_err()
        );
    }
}

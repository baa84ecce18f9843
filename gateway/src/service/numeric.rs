//! PostgreSQL's numeric division and `avg` in a query's output columns.
//!
//! PostgreSQL gives `a / b` (numeric) and `avg(x)` (numeric or integer `x`) a scale chosen per
//! value ([`lakegate_engines::pg_numeric`]); an Arrow decimal column has one scale, so no
//! engine's own division prints PostgreSQL's digits. For an output column that is such a
//! division (or average) at the top of the select list, the plan also selects its operands
//! (`a` and `b`; `sum(x)` and `count(x)`) as hidden columns, and the answer's column is
//! computed from them exactly, whichever engine ran the statement. The engine's own quotient
//! still orders and groups. The column then carries PostgreSQL's text, marked numeric
//! ([`PG_NUMERIC`]) so pgwire describes it as `numeric`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType as SqlType, ExactNumberInfo, Expr, FunctionArg,
    FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, ObjectName, ObjectNamePart,
    OrderByKind, SelectItem, SetExpr, Statement, Value,
};
use futures::StreamExt;
use lakegate_engines::pg_numeric::{self, Numeric};
use num_bigint::BigInt;

/// Field metadata key marking a column of PostgreSQL numeric text.
pub const PG_NUMERIC: &str = "lakegate.pg_numeric";

/// One output column computed from hidden operands.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    index: usize,
    numerator: usize,
    denominator: usize,
}

/// The output columns of a plan computed as PostgreSQL's division.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumericOutputs {
    columns: Vec<Column>,
    /// Columns the client sees (the hidden operands follow them).
    visible: usize,
}

/// What a top-level output column might be.
#[derive(Debug, Clone)]
pub(crate) enum Candidate {
    /// `a / b`.
    Divide(Expr, Expr),
    /// `avg(x)` (its `sum` and `count` calls, same modifiers and window).
    Average(Expr, Expr),
}

/// The select list of a plain `SELECT` (not a set operation, not `DISTINCT`).
fn select_items(statement: &Statement) -> Option<&Vec<SelectItem>> {
    let Statement::Query(query) = statement else {
        return None;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    select.distinct.is_none().then_some(&select.projection)
}

/// Whether the select list has `*` or `t.*` (output positions are then not item positions).
pub(crate) fn has_wildcard(statement: &Statement) -> bool {
    select_items(statement).is_some_and(|items| {
        items.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _)
            )
        })
    })
}

fn unnested(mut e: &Expr) -> &Expr {
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

/// `avg(x)` as its `sum(x)` and `count(x)` (distinct, filter and window kept).
fn average_parts(e: &Expr) -> Option<(Expr, Expr)> {
    let Expr::Function(f) = e else {
        return None;
    };
    let name = f.name.to_string().to_ascii_lowercase();
    if name != "avg" && name != "pg_catalog.avg" || !f.within_group.is_empty() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if !matches!(
        list.args.as_slice(),
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(_))]
    ) {
        return None;
    }
    let renamed = |to: &str| {
        let mut g = f.clone();
        g.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new(to))]);
        Expr::Function(g)
    };
    Some((renamed("sum"), renamed("count")))
}

/// The output columns that may be numeric divisions, by position.
pub(crate) fn candidates(statement: &Statement) -> Vec<(usize, Candidate)> {
    let Some(items) = select_items(statement) else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let e = match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                _ => return None,
            };
            match unnested(e) {
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Divide,
                    right,
                } => Some((i, Candidate::Divide(*left.clone(), *right.clone()))),
                other => average_parts(other).map(|(s, c)| (i, Candidate::Average(s, c))),
            }
        })
        .collect()
}

/// `statement` with each candidate's operands appended as hidden columns
/// (`__lakegate_n{i}`, `__lakegate_d{i}`).
pub(crate) fn with_operands(statement: &Statement, candidates: &[(usize, Candidate)]) -> Statement {
    let mut out = statement.clone();
    if let Statement::Query(query) = &mut out
        && let SetExpr::Select(select) = query.body.as_mut()
    {
        for (i, c) in candidates {
            let (n, d) = match c {
                Candidate::Divide(n, d) | Candidate::Average(n, d) => (n.clone(), d.clone()),
            };
            select.projection.push(SelectItem::ExprWithAlias {
                expr: n,
                alias: Ident::with_quote('"', format!("__lakegate_n{i}")),
            });
            select.projection.push(SelectItem::ExprWithAlias {
                expr: d,
                alias: Ident::with_quote('"', format!("__lakegate_d{i}")),
            });
        }
    }
    out
}

/// `statement` (with its operands) where each computed column's own expression is a typed NULL:
/// the gateway replaces the value, so the engine need not compute a quotient it would get wrong
/// (an engine that cannot divide as PostgreSQL does can then run it). A column the query orders
/// or groups by (by name or position) keeps its expression.
pub(crate) fn without_quotients(statement: &Statement, outputs: &NumericOutputs) -> Statement {
    let mut out = statement.clone();
    let Statement::Query(query) = &mut out else {
        return out;
    };
    let mut referenced: Vec<Expr> = Vec::new();
    if let Some(order) = &query.order_by
        && let OrderByKind::Expressions(items) = &order.kind
    {
        referenced.extend(items.iter().map(|o| o.expr.clone()));
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return out;
    };
    if let GroupByExpr::Expressions(items, _) = &select.group_by {
        referenced.extend(items.iter().cloned());
    }
    for column in &outputs.columns {
        let i = column.index;
        let refers = |e: &Expr| {
            match e {
            Expr::Value(v) => matches!(&v.value, Value::Number(n, _) if n.parse::<usize>() == Ok(i + 1)),
            Expr::Identifier(id) => select.projection.get(i).is_some_and(|item| {
                matches!(item, SelectItem::ExprWithAlias { alias, .. } if alias.value == id.value)
            }),
            _ => false,
        }
        };
        if referenced.iter().any(refers) {
            continue;
        }
        let null = Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(Expr::value(Value::Null)),
            data_type: SqlType::Numeric(ExactNumberInfo::PrecisionAndScale(38, 10)),
            array: false,
            format: None,
        };
        if let Some(item) = select.projection.get_mut(i) {
            *item = match item {
                SelectItem::ExprWithAlias { alias, .. } => SelectItem::ExprWithAlias {
                    expr: null,
                    alias: alias.clone(),
                },
                _ => SelectItem::UnnamedExpr(null),
            };
        }
    }
    out
}

fn decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

fn exact(t: &DataType) -> bool {
    decimal(t) || t.is_integer()
}

impl NumericOutputs {
    /// Which candidates are numeric divisions, from the planner's schema of the statement
    /// with operands (`visible` columns, then two per candidate); `None` when none is.
    pub(crate) fn decide(
        candidates: &[(usize, Candidate)],
        schema: &Schema,
        visible: usize,
    ) -> Option<Self> {
        let field = |i: usize| schema.fields().get(i).map(|f| f.data_type().clone());
        let columns: Vec<Column> = candidates
            .iter()
            .enumerate()
            .filter_map(|(k, (index, c))| {
                let (numerator, denominator) = (visible + 2 * k, visible + 2 * k + 1);
                let (n, d) = (field(numerator)?, field(denominator)?);
                let numeric = match c {
                    // A decimal quotient of exact operands (not float division).
                    Candidate::Divide(..) => decimal(&field(*index)?) && exact(&n) && exact(&d),
                    // avg of a numeric or an integer (a float's average stays a float).
                    Candidate::Average(..) => exact(&n),
                };
                numeric.then_some(Column {
                    index: *index,
                    numerator,
                    denominator,
                })
            })
            .collect();
        (!columns.is_empty()).then_some(Self { columns, visible })
    }

    /// The client's schema: the hidden columns dropped, the computed ones numeric text.
    pub(crate) fn describe(&self, schema: &SchemaRef) -> SchemaRef {
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .take(self.visible)
            .enumerate()
            .map(|(i, f)| {
                if self.columns.iter().any(|c| c.index == i) {
                    numeric_field(f)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect();
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }

    /// `stream` with the computed columns replaced and the hidden ones dropped.
    pub(crate) fn apply(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let schema = self.describe(&stream.schema());
        let (this, out) = (self.clone(), schema.clone());
        let rows = stream.map(move |batch| this.batch(&batch?, &out));
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }

    fn batch(
        &self,
        batch: &RecordBatch,
        schema: &SchemaRef,
    ) -> datafusion::error::Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> =
            batch.columns().iter().take(self.visible).cloned().collect();
        for c in &self.columns {
            let n = numerics(batch.column(c.numerator))?;
            let d = numerics(batch.column(c.denominator))?;
            let text: StringArray = n
                .into_iter()
                .zip(d)
                .map(|pair| match pair {
                    (Some(a), Some(b)) => match pg_numeric::divide(&a, &b) {
                        Ok(q) => Ok(Some(q.to_text())),
                        Err(e) => Err(lakegate_engines::Error::Engine {
                            engine: "lakegate".into(),
                            kind: lakegate_engines::ErrorKind::DataException,
                            message: e.to_string(),
                        }
                        .into_datafusion()),
                    },
                    _ => Ok(None),
                })
                .collect::<datafusion::error::Result<_>>()?;
            columns[c.index] = Arc::new(text);
        }
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// `f` as PostgreSQL numeric text.
fn numeric_field(f: &Field) -> Field {
    let mut metadata: HashMap<String, String> = f.metadata().clone();
    metadata.insert(PG_NUMERIC.into(), "true".into());
    Field::new(f.name(), DataType::Utf8, f.is_nullable()).with_metadata(metadata)
}

/// Whether `f` carries PostgreSQL numeric text.
pub fn is_pg_numeric(f: &Field) -> bool {
    f.metadata().contains_key(PG_NUMERIC)
}

/// The values of a decimal or integer column as numerics (`None` for NULL).
fn numerics(array: &ArrayRef) -> datafusion::error::Result<Vec<Option<Numeric>>> {
    use arrow::datatypes::*;
    let n = array.len();
    let value = |i: usize| -> Option<Numeric> {
        if array.is_null(i) {
            return None;
        }
        Some(match array.data_type() {
            DataType::Decimal128(_, s) => Numeric::new(
                array.as_primitive::<Decimal128Type>().value(i),
                (*s).max(0) as u32,
            ),
            DataType::Decimal256(_, s) => Numeric::new(
                array
                    .as_primitive::<Decimal256Type>()
                    .value(i)
                    .to_string()
                    .parse::<BigInt>()
                    .unwrap_or_default(),
                (*s).max(0) as u32,
            ),
            DataType::Int8 => Numeric::new(array.as_primitive::<Int8Type>().value(i), 0),
            DataType::Int16 => Numeric::new(array.as_primitive::<Int16Type>().value(i), 0),
            DataType::Int32 => Numeric::new(array.as_primitive::<Int32Type>().value(i), 0),
            DataType::Int64 => Numeric::new(array.as_primitive::<Int64Type>().value(i), 0),
            DataType::UInt8 => Numeric::new(array.as_primitive::<UInt8Type>().value(i), 0),
            DataType::UInt16 => Numeric::new(array.as_primitive::<UInt16Type>().value(i), 0),
            DataType::UInt32 => Numeric::new(array.as_primitive::<UInt32Type>().value(i), 0),
            DataType::UInt64 => Numeric::new(array.as_primitive::<UInt64Type>().value(i), 0),
            _ => return None,
        })
    };
    if !exact(array.data_type()) {
        return Err(DataFusionError::Internal(format!(
            "numeric operand of type {}",
            array.data_type()
        )));
    }
    Ok((0..n).map(value).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int64Array};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("sql")
            .remove(0)
    }

    #[test]
    fn divisions_and_averages_get_their_operands_as_hidden_columns() {
        let s = parse(
            "SELECT region, sum(price) / count(*) AS r, avg(qty) FILTER (WHERE qty > 0), avg(DISTINCT x) OVER (PARTITION BY region) FROM t GROUP BY region",
        );
        let c = candidates(&s);
        assert_eq!(c.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 2, 3]);
        let rewritten = with_operands(&s, &c).to_string();
        assert!(
            rewritten.contains(r#"sum(price) AS "__lakegate_n1", count(*) AS "__lakegate_d1""#),
            "{rewritten}"
        );
        assert!(
            rewritten.contains(r#"sum(qty) FILTER (WHERE qty > 0) AS "__lakegate_n2""#),
            "{rewritten}"
        );
        assert!(
            rewritten
                .contains(r#"count(DISTINCT x) OVER (PARTITION BY region) AS "__lakegate_d3""#),
            "{rewritten}"
        );
        // Not candidates: DISTINCT selects, set operations, nested divisions.
        assert!(candidates(&parse("SELECT DISTINCT a / b FROM t")).is_empty());
        assert!(candidates(&parse("SELECT a / b FROM t UNION SELECT 1")).is_empty());
        assert!(candidates(&parse("SELECT round(a / b, 2) FROM t")).is_empty());
    }

    #[test]
    fn engines_are_not_asked_for_a_quotient_the_gateway_computes_unless_it_orders() {
        let s = parse(
            "SELECT a, sum(x) / sum(y) AS share, avg(z) AS mean FROM t GROUP BY a ORDER BY mean",
        );
        let c = candidates(&s);
        let outputs = NumericOutputs {
            columns: c
                .iter()
                .enumerate()
                .map(|(k, (index, _))| Column {
                    index: *index,
                    numerator: 3 + 2 * k,
                    denominator: 4 + 2 * k,
                })
                .collect(),
            visible: 3,
        };
        let runs = without_quotients(&with_operands(&s, &c), &outputs).to_string();
        assert!(
            runs.starts_with("SELECT a, CAST(NULL AS NUMERIC(38,10)) AS share, avg(z) AS mean"),
            "{runs}"
        );
        assert!(runs.contains(r#"sum(x) AS "__lakegate_n1""#), "{runs}");
    }

    #[test]
    fn the_column_is_postgresqls_quotient_and_the_operands_go() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("r", DataType::Decimal128(38, 6), true),
            Field::new("__lakegate_n0", DataType::Decimal128(22, 2), true),
            Field::new("__lakegate_d0", DataType::Int64, true),
        ]));
        let c = candidates(&parse("SELECT sum(price) / count(*) FROM t"));
        let outputs = NumericOutputs::decide(&c, &schema, 1).expect("numeric");
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(
                    Decimal128Array::from(vec![Some(474_158_940), None])
                        .with_precision_and_scale(38, 6)
                        .expect("dec"),
                ),
                Arc::new(
                    Decimal128Array::from(vec![Some(71_123_841), None])
                        .with_precision_and_scale(22, 2)
                        .expect("dec"),
                ),
                Arc::new(Int64Array::from(vec![Some(1500), Some(3)])),
            ],
        )
        .expect("batch");
        let out = outputs
            .batch(&batch, &outputs.describe(&schema))
            .expect("applied");
        assert_eq!(out.num_columns(), 1);
        let text = out.column(0).as_string::<i32>();
        assert_eq!(text.value(0), "474.1589400000000000");
        assert!(text.is_null(1));
        assert!(is_pg_numeric(out.schema().field(0)));
        // A float division is not a numeric one.
        let floats = Schema::new(vec![
            Field::new("r", DataType::Float64, true),
            Field::new("n", DataType::Float64, true),
            Field::new("d", DataType::Int64, true),
        ]);
        assert!(NumericOutputs::decide(&c, &floats, 1).is_none());
    }
}

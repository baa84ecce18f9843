//! PostgreSQL's numeric scales in a query's output columns.
//!
//! PostgreSQL gives `a / b` (numeric) and `avg(x)` (numeric or integer `x`) a scale chosen per
//! value ([`lakegate_engines::pg_numeric`]), and a `CASE` or `coalesce` the scale of the arm
//! each row takes (`coalesce(price, 0)` is `0`, not `0.00`); an Arrow decimal column has one
//! scale, so no engine prints PostgreSQL's digits. For an output column with such arithmetic
//! ([`terms`]: `qty - avg(qty) OVER ()`, `round(100.0 * a / b, 1)`, `coalesce(price, 0)`),
//! the plan also selects its leaves (`qty`, `sum(qty) OVER ()`, `count(qty) OVER ()`) as
//! hidden columns, and the answer's column is computed from them exactly, whichever engine
//! ran the statement. The engine's own value still orders and groups. The column then carries
//! PostgreSQL's text, marked numeric ([`PG_NUMERIC`]) so pgwire describes it as `numeric`.
//! A `sum` (or `avg`) of such a `CASE` has the largest scale among the values summed
//! (`sum(coalesce(price, 0))` is `0` for a group without prices); other arithmetic inside an
//! aggregate is the engine's.

mod terms;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{
    CastKind, DataType as SqlType, ExactNumberInfo, Expr, FunctionArg, FunctionArgExpr,
    FunctionArguments, GroupByExpr, Ident, ObjectName, ObjectNamePart, OrderByKind, SelectItem,
    SetExpr, Statement, Value,
};
use futures::StreamExt;
use lakegate_engines::pg_numeric::Numeric;
use num_bigint::BigInt;

use terms::{Kind, Program, Term, Types};

/// Field metadata key marking a column of PostgreSQL numeric text.
pub const PG_NUMERIC: &str = "lakegate.pg_numeric";

/// One output column computed by a program over hidden leaf columns.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    index: usize,
    term: Term,
    /// The leaves' positions in the executed statement's columns.
    leaves: Vec<usize>,
    leaf_types: Vec<(Kind, u32)>,
    arm_types: Vec<(Kind, u32)>,
    /// Leaves whose executed SQL depends on the types (by position): an integer variance's
    /// squares are summed as numerics.
    replaced: Vec<(usize, Expr)>,
}

/// The output columns of a plan the gateway computes with PostgreSQL's numeric rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumericOutputs {
    columns: Vec<Column>,
    /// Columns the client sees (the hidden leaves follow them).
    visible: usize,
    /// Columns the executed statement selects (the arms' typing columns are not executed).
    executed: usize,
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

/// The output columns whose arithmetic the gateway may compute, by position.
pub(crate) fn candidates(statement: &Statement) -> Vec<(usize, Program)> {
    let Some(items) = select_items(statement) else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                terms::program(e).map(|p| (i, p))
            }
            _ => None,
        })
        .collect()
}

/// `statement` with each candidate's leaves appended as hidden columns (`__lakegate_l{i}_{k}`),
/// then every candidate's arms (`__lakegate_t{i}_{j}`, only described).
pub(crate) fn with_operands(statement: &Statement, candidates: &[(usize, Program)]) -> Statement {
    let mut out = statement.clone();
    if let Statement::Query(query) = &mut out
        && let SetExpr::Select(select) = query.body.as_mut()
    {
        let hidden = |expr: &Expr, name: String| SelectItem::ExprWithAlias {
            expr: expr.clone(),
            alias: Ident::with_quote('"', name),
        };
        for (i, p) in candidates {
            for (k, e) in p.leaves.iter().enumerate() {
                select
                    .projection
                    .push(hidden(e, format!("__lakegate_l{i}_{k}")));
            }
        }
        for (i, p) in candidates {
            for (j, e) in p.arms.iter().enumerate() {
                select
                    .projection
                    .push(hidden(e, format!("__lakegate_t{i}_{j}")));
            }
        }
    }
    out
}

/// `statement` (with its operands) as it runs: the arms' typing columns dropped, and each
/// computed column's own expression a typed NULL — the gateway replaces the value, so the
/// engine need not compute a quotient it would get wrong (an engine that cannot divide as
/// PostgreSQL does can then run it). A column the query orders or groups by (by name or
/// position) keeps its expression.
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
    select.projection.truncate(outputs.executed);
    for (at, expr) in outputs.columns.iter().flat_map(|c| &c.replaced) {
        if let Some(SelectItem::ExprWithAlias { expr: e, .. }) = select.projection.get_mut(*at) {
            *e = expr.clone();
        }
    }
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
    /// Which candidates the gateway computes, from the planner's schema of the statement with
    /// operands (`visible` columns, then the leaves, then the arms); `None` when none.
    pub(crate) fn decide(
        candidates: &[(usize, Program)],
        schema: &Schema,
        visible: usize,
    ) -> Option<Self> {
        let kind = |i: usize| {
            schema
                .fields()
                .get(i)
                .and_then(|f| terms::kind_of(f.data_type()))
        };
        let executed = visible
            + candidates
                .iter()
                .map(|(_, p)| p.leaves.len())
                .sum::<usize>();
        let (mut leaf_at, mut arm_at) = (visible, executed);
        let mut columns = Vec::new();
        for (index, p) in candidates {
            let leaves: Vec<usize> = (leaf_at..leaf_at + p.leaves.len()).collect();
            let arms: Vec<usize> = (arm_at..arm_at + p.arms.len()).collect();
            leaf_at += p.leaves.len();
            arm_at += p.arms.len();
            let (Some(leaf_types), Some(arm_types)) = (
                leaves.iter().map(|i| kind(*i)).collect::<Option<Vec<_>>>(),
                arms.iter().map(|i| kind(*i)).collect::<Option<Vec<_>>>(),
            ) else {
                continue;
            };
            let types = Types {
                leaves: &leaf_types,
                arms: &arm_types,
            };
            if p.term.kind(&types) != Kind::Numeric || !p.term.matters(&types) {
                continue;
            }
            let mut replaced = Vec::new();
            if let Term::Variance { squares, input, .. } = &p.term
                && let (Some(x), Some((Kind::Integer, _))) = (
                    p.arms.get(*input).and_then(terms::argument),
                    arm_types.get(*input),
                )
                && let Some(at) = leaves.get(*squares)
            {
                replaced.push((*at, terms::squares_of(&x, true)));
            }
            columns.push(Column {
                index: *index,
                term: p.term.clone(),
                leaves,
                leaf_types,
                arm_types,
                replaced,
            });
        }
        (!columns.is_empty()).then_some(Self {
            columns,
            visible,
            executed,
        })
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
            let mut leaves = c
                .leaves
                .iter()
                .map(|i| numerics(batch.column(*i)))
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            let types = Types {
                leaves: &c.leaf_types,
                arms: &c.arm_types,
            };
            let mut row: Vec<Option<Numeric>> = Vec::with_capacity(leaves.len());
            let text: StringArray = (0..batch.num_rows())
                .map(|r| {
                    row.clear();
                    // Each value is read once: moved out, not copied.
                    row.extend(leaves.iter_mut().map(|l| l[r].take()));
                    match c.term.eval(&row, &types) {
                        Ok(v) => Ok(v.map(|n| n.to_text())),
                        Err(e) => Err(lakegate_engines::Error::Value {
                            kind: lakegate_engines::ErrorKind::DivisionByZero,
                            message: e.to_string(),
                        }
                        .into_datafusion()),
                    }
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

    fn decimals(values: Vec<Option<i128>>, p: u8, s: i8) -> ArrayRef {
        Arc::new(
            Decimal128Array::from(values)
                .with_precision_and_scale(p, s)
                .expect("decimal"),
        )
    }

    fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
        Arc::new(Schema::new(
            fields
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn divisions_and_averages_get_their_leaves_as_hidden_columns() {
        let s = parse(
            "SELECT region, sum(price) / count(*) AS r, avg(qty) FILTER (WHERE qty > 0), avg(DISTINCT x) OVER (PARTITION BY region) FROM t GROUP BY region",
        );
        let c = candidates(&s);
        assert_eq!(c.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 2, 3]);
        let rewritten = with_operands(&s, &c).to_string();
        for part in [
            r#"sum(price) AS "__lakegate_l1_0", count(*) AS "__lakegate_l1_1""#,
            r#"sum(qty) FILTER (WHERE qty > 0) AS "__lakegate_l2_0""#,
            r#"count(DISTINCT x) OVER (PARTITION BY region) AS "__lakegate_l3_1""#,
        ] {
            assert!(rewritten.contains(part), "{rewritten}");
        }
        // Not candidates: DISTINCT selects, set operations, arithmetic without a division.
        assert!(candidates(&parse("SELECT DISTINCT a / b FROM t")).is_empty());
        assert!(candidates(&parse("SELECT a / b FROM t UNION SELECT 1")).is_empty());
        assert!(candidates(&parse("SELECT a * 2 + b FROM t")).is_empty());
        // A division under round is one now.
        assert_eq!(candidates(&parse("SELECT round(a / b, 2) FROM t")).len(), 1);
    }

    #[test]
    fn engines_are_not_asked_for_a_quotient_the_gateway_computes_unless_it_orders() {
        let s = parse(
            "SELECT a, sum(x) / sum(y) AS share, avg(z) AS mean FROM t GROUP BY a ORDER BY mean",
        );
        let c = candidates(&s);
        let with = with_operands(&s, &c);
        let described = schema(&[
            ("a", DataType::Int64),
            ("share", DataType::Decimal128(38, 10)),
            ("mean", DataType::Float64),
            ("l1_0", DataType::Decimal128(22, 2)),
            ("l1_1", DataType::Decimal128(22, 2)),
            ("l2_0", DataType::Int64),
            ("l2_1", DataType::Int64),
        ]);
        let outputs = NumericOutputs::decide(&c, &described, 3).expect("both computed");
        let runs = without_quotients(&with, &outputs).to_string();
        assert!(
            runs.starts_with("SELECT a, CAST(NULL AS NUMERIC(38,10)) AS share, avg(z) AS mean"),
            "{runs}"
        );
        assert!(runs.contains(r#"sum(x) AS "__lakegate_l1_0""#), "{runs}");
    }

    #[test]
    fn the_column_is_postgresqls_quotient_and_the_leaves_go() {
        let described = schema(&[
            ("r", DataType::Decimal128(38, 6)),
            ("l0_0", DataType::Decimal128(22, 2)),
            ("l0_1", DataType::Int64),
        ]);
        let c = candidates(&parse("SELECT sum(price) / count(*) FROM t"));
        let outputs = NumericOutputs::decide(&c, &described, 1).expect("numeric");
        let batch = RecordBatch::try_new(
            described.clone(),
            vec![
                decimals(vec![Some(474_158_940), None], 38, 6),
                decimals(vec![Some(71_123_841), None], 22, 2),
                Arc::new(Int64Array::from(vec![Some(1500), Some(3)])),
            ],
        )
        .expect("batch");
        let out = outputs
            .batch(&batch, &outputs.describe(&described))
            .expect("applied");
        assert_eq!(out.num_columns(), 1);
        let text = out.column(0).as_string::<i32>();
        assert_eq!(text.value(0), "474.1589400000000000");
        assert!(text.is_null(1));
        assert!(is_pg_numeric(out.schema().field(0)));
        // A float division is not a numeric one.
        let floats = schema(&[
            ("r", DataType::Float64),
            ("n", DataType::Float64),
            ("d", DataType::Int64),
        ]);
        assert!(NumericOutputs::decide(&c, &floats, 1).is_none());
    }

    #[test]
    fn each_row_shows_the_scale_of_the_arm_it_took() {
        let s = parse("SELECT id, coalesce(price, 0) FROM t");
        let c = candidates(&s);
        let described = schema(&[
            ("id", DataType::Int64),
            ("coalesce", DataType::Decimal128(22, 2)),
            ("l1_0", DataType::Decimal128(22, 2)),
            ("l1_1", DataType::Int64),
            ("t1_0", DataType::Decimal128(10, 2)),
            ("t1_1", DataType::Int64),
        ]);
        let outputs = NumericOutputs::decide(&c, &described, 2).expect("mixed scales");
        let runs = without_quotients(&with_operands(&s, &c), &outputs).to_string();
        assert!(
            !runs.contains("__lakegate_t"),
            "arms are never executed: {runs}"
        );
        let executed = schema(&[
            ("id", DataType::Int64),
            ("coalesce", DataType::Decimal128(22, 2)),
            ("l1_0", DataType::Decimal128(22, 2)),
            ("l1_1", DataType::Int64),
        ]);
        let batch = RecordBatch::try_new(
            executed.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                decimals(vec![None, None, None], 22, 2),
                decimals(vec![Some(9965), Some(0), None], 22, 2),
                Arc::new(Int64Array::from(vec![Some(0), Some(1), Some(1)])),
            ],
        )
        .expect("batch");
        let out = outputs
            .batch(&batch, &outputs.describe(&executed))
            .expect("applied");
        let text = out.column(1).as_string::<i32>();
        assert_eq!(
            (text.value(0), text.value(1), text.is_null(2)),
            ("99.65", "0", true)
        );
        // Arms of one scale need nothing: the engine's decimal is PostgreSQL's.
        let same = schema(&[
            ("id", DataType::Int64),
            ("coalesce", DataType::Decimal128(22, 2)),
            ("l1_0", DataType::Decimal128(22, 2)),
            ("l1_1", DataType::Int64),
            ("t1_0", DataType::Decimal128(10, 2)),
            ("t1_1", DataType::Decimal128(3, 2)),
        ]);
        assert!(NumericOutputs::decide(&c, &same, 2).is_none());
    }
    #[test]
    fn a_sum_of_arms_has_the_largest_scale_summed() {
        let s = parse("SELECT region, sum(coalesce(price, 0)) FROM t GROUP BY region");
        let c = candidates(&s);
        let rewritten = with_operands(&s, &c).to_string();
        assert!(
            rewritten.contains(
                r#"count(CASE WHEN (CASE WHEN price IS NOT NULL THEN 0 ELSE 1 END) = 0 THEN coalesce(price, 0) END) AS "__lakegate_l1_1""#
            ),
            "{rewritten}"
        );
        assert!(
            rewritten.contains(r#"min(price) AS "__lakegate_t1_0""#),
            "{rewritten}"
        );
        let described = schema(&[
            ("region", DataType::Utf8),
            ("sum", DataType::Decimal128(22, 2)),
            ("l1_0", DataType::Decimal128(22, 2)),
            ("l1_1", DataType::Int64),
            ("l1_2", DataType::Int64),
            ("t1_0", DataType::Decimal128(10, 2)),
            ("t1_1", DataType::Int64),
        ]);
        let outputs = NumericOutputs::decide(&c, &described, 2).expect("mixed scales");
        let executed = schema(&[
            ("region", DataType::Utf8),
            ("sum", DataType::Decimal128(22, 2)),
            ("l1_0", DataType::Decimal128(22, 2)),
            ("l1_1", DataType::Int64),
            ("l1_2", DataType::Int64),
        ]);
        let batch = RecordBatch::try_new(
            executed.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                decimals(vec![None, None, None], 22, 2),
                decimals(vec![Some(1250), Some(0), None], 22, 2),
                // Prices counted; zeros the `0` arm gave.
                Arc::new(Int64Array::from(vec![2, 0, 0])),
                Arc::new(Int64Array::from(vec![1, 3, 0])),
            ],
        )
        .expect("batch");
        let out = outputs
            .batch(&batch, &outputs.describe(&executed))
            .expect("applied");
        let text = out.column(1).as_string::<i32>();
        assert_eq!(
            (text.value(0), text.value(1), text.is_null(2)),
            ("12.50", "0", true)
        );
    }

    #[test]
    fn a_max_of_arms_has_the_scale_of_the_arm_that_gave_it() {
        let s = parse("SELECT region, max(coalesce(price, 0)) FROM t GROUP BY region");
        let c = candidates(&s);
        let rewritten = with_operands(&s, &c).to_string();
        assert!(
            rewritten.contains(
                r#"max(CASE WHEN (CASE WHEN price IS NOT NULL THEN 0 ELSE 1 END) = 1 THEN coalesce(price, 0) END) AS "__lakegate_l1_2""#
            ),
            "{rewritten}"
        );
        let described = schema(&[
            ("region", DataType::Utf8),
            ("max", DataType::Decimal128(12, 2)),
            ("l1_0", DataType::Decimal128(12, 2)),
            ("l1_1", DataType::Decimal128(12, 2)),
            ("l1_2", DataType::Decimal128(12, 2)),
            ("t1_0", DataType::Decimal128(10, 2)),
            ("t1_1", DataType::Int64),
        ]);
        let outputs = NumericOutputs::decide(&c, &described, 2).expect("mixed scales");
        let executed = schema(&[
            ("region", DataType::Utf8),
            ("max", DataType::Decimal128(12, 2)),
            ("l1_0", DataType::Decimal128(12, 2)),
            ("l1_1", DataType::Decimal128(12, 2)),
            ("l1_2", DataType::Decimal128(12, 2)),
        ]);
        let batch = RecordBatch::try_new(
            executed.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c", "d"])),
                decimals(vec![None, None, None, None], 12, 2),
                // The group's max: a price, the `0` arm's zero, a price of 0.00, nothing.
                decimals(vec![Some(1250), Some(0), Some(0), None], 12, 2),
                // The largest price of the group; the largest value the `0` arm gave.
                decimals(vec![Some(1250), None, Some(0), None], 12, 2),
                decimals(vec![Some(0), Some(0), None, None], 12, 2),
            ],
        )
        .expect("batch");
        let out = outputs
            .batch(&batch, &outputs.describe(&executed))
            .expect("applied");
        let text = out.column(1).as_string::<i32>();
        assert_eq!(
            (text.value(0), text.value(1), text.value(2), text.is_null(3)),
            ("12.50", "0", "0.00", true)
        );
    }
}

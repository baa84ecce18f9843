//! PostgreSQL's float equality on DataFusion: `-0` equals `0` (and NaN equals NaN, above every
//! number). Arrow compares, sorts and hashes floats by IEEE 754's total order, which puts `-0`
//! below `0`: `value = 0` missed the rows holding `-0`, `value < 0` counted them, and grouping,
//! `count(DISTINCT …)`, joins and sorting kept them apart. The analyzer rule [`PgFloatKeys`]
//! (after type coercion) reads floats through [`NAME`] wherever they are compared or used as a
//! key — comparisons, `IN`, sort, group, join, window and `DISTINCT` aggregate keys — which
//! maps `-0` to `0` and leaves every other value (NaN included) as it is. Values a query
//! returns keep their sign, as PostgreSQL prints `-0`.
//!
//! A grouped `min` or `max` of floats lost track of NaN (DataFusion's grouped accumulators
//! answered NaN for a minimum and a number for a maximum, depending on the order rows came
//! in); PostgreSQL orders NaN above every number. `min` and `max` of a float are
//! [`float_extreme`]'s, and `SELECT DISTINCT` over floats is planned here as a grouping on
//! their keys.

use std::any::Any;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float32Type, Float64Type};
use datafusion::common::ScalarValue;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, exec_err};
use datafusion::logical_expr::expr::{AggregateFunction, InList, Sort, WindowFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, Aggregate, AggregateUDF, AggregateUDFImpl, Between, BinaryExpr, ColumnarValue,
    Distinct, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The function a float key is read through.
pub const NAME: &str = "lakegate_float_key";

/// Whether `e` is a float (`real` or `double precision`) in `schema`.
pub(crate) fn is_float(e: &Expr, schema: &DFSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| t.is_floating())
}

/// Whether `op` compares its operands (where PostgreSQL's float order differs from IEEE 754's).
pub(crate) fn compares(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// The analyzer rule (see the module docs).
#[derive(Debug, Default)]
pub struct PgFloatKeys;

impl AnalyzerRule for PgFloatKeys {
    fn name(&self) -> &str {
        "lakegate_pg_float_keys"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let key = Arc::new(ScalarUDF::from(FloatKey::default()));
        let min = Arc::new(float_extreme(Extreme::Min));
        let max = Arc::new(float_extreme(Extreme::Max));
        plan.transform_up_with_subqueries(|node| {
            let schema = crate::semantics::input_schema(&node);
            let wrap = |e: Expr| -> Expr {
                if is_float(&e, &schema) {
                    key.call(vec![e])
                } else {
                    e
                }
            };
            let node = match node {
                LogicalPlan::Sort(mut s) => {
                    for k in &mut s.expr {
                        k.expr = wrap(k.expr.clone());
                    }
                    Transformed::yes(LogicalPlan::Sort(s))
                }
                LogicalPlan::Join(mut j) => {
                    j.on = j.on.into_iter().map(|(l, r)| (wrap(l), wrap(r))).collect();
                    Transformed::yes(LogicalPlan::Join(j))
                }
                LogicalPlan::Aggregate(a) => {
                    let names = NamePreserver::new_for_projection();
                    let group = a
                        .group_expr
                        .iter()
                        .map(|g| match g {
                            Expr::GroupingSet(_) => g.clone(),
                            g => names.save(g).restore(wrap(g.clone())),
                        })
                        .collect();
                    let aggregates = a
                        .aggr_expr
                        .iter()
                        .map(|e| {
                            let rewritten =
                                extremes(distinct_keys(e.clone(), &wrap), &schema, [&min, &max]);
                            names.save(e).restore(rewritten)
                        })
                        .collect();
                    Transformed::yes(LogicalPlan::Aggregate(Aggregate::try_new(
                        a.input, group, aggregates,
                    )?))
                }
                LogicalPlan::Distinct(Distinct::All(input))
                    if input
                        .schema()
                        .fields()
                        .iter()
                        .any(|f| f.data_type().is_floating()) =>
                {
                    // Grouped by every column, floats through their keys.
                    let names = NamePreserver::new_for_projection();
                    let input_schema = input.schema().clone();
                    let group = input_schema
                        .columns()
                        .into_iter()
                        .map(|c| {
                            let column = Expr::Column(c);
                            names.save(&column).restore(wrap(column.clone()))
                        })
                        .collect();
                    Transformed::yes(LogicalPlan::Aggregate(Aggregate::try_new(
                        input,
                        group,
                        vec![],
                    )?))
                }
                node => Transformed::no(node),
            };
            // Comparisons anywhere (filters, join conditions, projections, window keys).
            let node = node.transform_data(|node| {
                let names = NamePreserver::new(&node);
                node.map_expressions(|expr| {
                    let saved = names.save(&expr);
                    let out = expr.transform_up(|e| Ok(compared(e, &schema, &key)))?;
                    Ok(out.update_data(|e| saved.restore(e)))
                })
            })?;
            node.transform_data(|n| n.recompute_schema().map(Transformed::yes))
        })
        .map(|t| t.data)
    }
}

/// `e` with `min` and `max` of a float as [`float_extreme`]'s.
fn extremes(e: Expr, schema: &DFSchema, ours: [&Arc<AggregateUDF>; 2]) -> Expr {
    let mut e = e;
    if let Expr::Alias(a) = &mut e {
        *a.expr = extremes(a.expr.as_ref().clone(), schema, ours);
        return e;
    }
    if let Expr::AggregateFunction(AggregateFunction { func, params }) = &mut e
        && params.args.len() == 1
        && is_float(&params.args[0], schema)
    {
        match func.name() {
            "min" => *func = ours[0].clone(),
            "max" => *func = ours[1].clone(),
            _ => {}
        }
    }
    e
}

/// `e` with the arguments of a `DISTINCT` aggregate read as keys.
fn distinct_keys(e: Expr, wrap: &dyn Fn(Expr) -> Expr) -> Expr {
    let mut e = e;
    if let Expr::Alias(a) = &mut e {
        *a.expr = distinct_keys(a.expr.as_ref().clone(), wrap);
        return e;
    }
    if let Expr::AggregateFunction(AggregateFunction { params, .. }) = &mut e
        && params.distinct
    {
        params.args = params.args.drain(..).map(wrap).collect();
    }
    e
}

/// `e` with float operands of a comparison, `IN`, `BETWEEN` or window key read as keys.
fn compared(e: Expr, schema: &DFSchema, key: &Arc<ScalarUDF>) -> Transformed<Expr> {
    let float = |x: &Expr| is_float(x, schema);
    let already = |x: &Expr| matches!(x, Expr::ScalarFunction(f) if f.name() == NAME);
    let wrap = |x: Expr| {
        if float(&x) && !already(&x) {
            key.call(vec![x])
        } else {
            x
        }
    };
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if compares(op)
                && (float(&left) || float(&right))
                && !(already(&left) || already(&right)) =>
        {
            Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(wrap(*left)),
                op,
                Box::new(wrap(*right)),
            )))
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) if float(&expr) && !already(&expr) => Transformed::yes(Expr::InList(InList {
            expr: Box::new(wrap(*expr)),
            list: list.into_iter().map(wrap).collect(),
            negated,
        })),
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) if float(&expr) && !already(&expr) => Transformed::yes(Expr::Between(Between {
            expr: Box::new(wrap(*expr)),
            negated,
            low: Box::new(wrap(*low)),
            high: Box::new(wrap(*high)),
        })),
        Expr::WindowFunction(mut w) => {
            let WindowFunction { params, .. } = w.as_mut();
            let before = (params.partition_by.clone(), params.order_by.clone());
            params.partition_by = params.partition_by.drain(..).map(wrap).collect();
            params.order_by = params
                .order_by
                .drain(..)
                .map(|s| Sort {
                    expr: wrap(s.expr),
                    ..s
                })
                .collect();
            let changed = (params.partition_by.clone(), params.order_by.clone()) != before;
            if changed {
                Transformed::yes(Expr::WindowFunction(w))
            } else {
                Transformed::no(Expr::WindowFunction(w))
            }
        }
        e => Transformed::no(e),
    }
}

/// `lakegate_float_key(x)`: `x` with `-0` as `0`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatKey {
    signature: Signature,
}

impl Default for FloatKey {
    fn default() -> Self {
        Self {
            signature: Signature::uniform(
                1,
                vec![DataType::Float64, DataType::Float32],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for FloatKey {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Float64))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let (array, scalar) = crate::semantics::argument_array(&args, 0)?;
        // -0.0 == 0.0 in IEEE 754: the one value that compares equal to zero becomes zero.
        let out: ArrayRef = match array.data_type() {
            DataType::Float64 => Arc::new(
                array
                    .as_primitive::<Float64Type>()
                    .unary::<_, Float64Type>(|v| if v == 0.0 { 0.0 } else { v }),
            ),
            DataType::Float32 => Arc::new(
                array
                    .as_primitive::<Float32Type>()
                    .unary::<_, Float32Type>(|v| if v == 0.0 { 0.0 } else { v }),
            ),
            other => return exec_err!("{NAME} takes a float, not {other}"),
        };
        crate::semantics::columnar(out, scalar)
    }
}

/// Which end of PostgreSQL's float order an aggregate takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extreme {
    /// `min`: the least number; NaN only when every value is NaN.
    Min,
    /// `max`: NaN when there is one, else the greatest number.
    Max,
}

/// PostgreSQL's `min` or `max` of floats (NaN above every number).
pub fn float_extreme(extreme: Extreme) -> AggregateUDF {
    AggregateUDF::from(FloatExtreme {
        extreme,
        signature: Signature::uniform(
            1,
            vec![DataType::Float64, DataType::Float32],
            Volatility::Immutable,
        ),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatExtreme {
    extreme: Extreme,
    signature: Signature,
}

impl AggregateUDFImpl for FloatExtreme {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        match self.extreme {
            Extreme::Min => "lakegate_float_min",
            Extreme::Max => "lakegate_float_max",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Float64))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[extreme]", args.name),
            args.return_field.data_type().clone(),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(ExtremeAccumulator {
            extreme: self.extreme,
            data_type: args.return_field.data_type().clone(),
            kept: None,
        }))
    }
}

#[derive(Debug)]
struct ExtremeAccumulator {
    extreme: Extreme,
    data_type: DataType,
    kept: Option<f64>,
}

/// Whether `a` comes before `b` in PostgreSQL's float order (NaN after every number, equal
/// to itself; -0 equal to 0).
fn before(a: f64, b: f64) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, _) => false,
        (false, true) => true,
        (false, false) => a < b,
    }
}

impl Accumulator for ExtremeAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let Some(values) = values.first() else {
            return Ok(());
        };
        let values = arrow::compute::cast(values, &DataType::Float64)?;
        for v in values.as_primitive::<Float64Type>().iter().flatten() {
            let replaces = match (self.kept, self.extreme) {
                (None, _) => true,
                (Some(k), Extreme::Min) => before(v, k),
                (Some(k), Extreme::Max) => before(k, v),
            };
            if replaces {
                self.kept = Some(v);
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        ScalarValue::Float64(self.kept).cast_to(&self.data_type)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, RecordBatch, StringArray};
    use arrow::datatypes::Schema;
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;

    async fn run(sql: &str) -> Vec<String> {
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(Arc::new(PgFloatKeys));
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("v", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "a", "b", "b", "b"])),
                Arc::new(Float64Array::from(vec![
                    Some(0.0),
                    Some(-0.0),
                    Some(f64::NAN),
                    Some(2.0),
                    None,
                ])),
            ],
        )
        .expect("batch");
        let table = MemTable::try_new(schema, vec![vec![batch]]).expect("table");
        ctx.register_table("t", Arc::new(table))
            .expect("registered");
        let batches = ctx
            .sql(sql)
            .await
            .expect("planned")
            .collect()
            .await
            .expect("ran");
        arrow::util::pretty::pretty_format_batches(&batches)
            .expect("printed")
            .to_string()
            .lines()
            .filter(|l| l.starts_with('|'))
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[tokio::test]
    async fn negative_zero_equals_zero_where_values_are_compared_or_keyed() {
        assert_eq!(run("SELECT count(*) FROM t WHERE v = 0").await, ["| 2 |"]);
        assert_eq!(run("SELECT count(*) FROM t WHERE v < 0").await, ["| 0 |"]);
        assert_eq!(run("SELECT count(DISTINCT v) FROM t").await, ["| 3 |"]);
        assert_eq!(
            run("SELECT count(*) FROM (SELECT DISTINCT v FROM t)").await,
            ["| 4 |"]
        );
        assert_eq!(
            run("SELECT count(*) FROM t a JOIN t b ON a.v = b.v").await,
            // 0 and -0 match each other (4 pairs), NaN matches NaN, 2 matches 2.
            ["| 6 |"]
        );
    }

    #[tokio::test]
    async fn grouped_min_and_max_of_floats_put_nan_above_every_number() {
        assert_eq!(
            run("SELECT s, min(v), max(v) FROM t GROUP BY s ORDER BY s").await,
            ["| a | 0.0 | 0.0 |", "| b | 2.0 | NaN |"]
        );
    }
}

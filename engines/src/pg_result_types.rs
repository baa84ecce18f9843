//! PostgreSQL's result types where DataFusion's differ: [`rewrite`] changes the planned
//! statement before it is analyzed, so the schema clients are described is the one execution
//! returns.
//!
//! - `ceil`, `floor` and `trunc` of a numeric are numerics without decimals (`ceil(73.05)` is
//!   `74`); DataFusion keeps the argument's scale for `ceil` and `floor` (`74.00`) and
//!   computes `trunc` in floating point.
//! - `sum` of a `bigint` is a `numeric` (it cannot overflow); DataFusion's is a `bigint`.
//! - `greatest`/`least` of floats and numerics is a float.
//! - A cast to `numeric` without a precision keeps the value's own scale (`qty::numeric` is
//!   `8`, `'1.25'::numeric` is `1.25`); DataFusion casts to `numeric(38, 10)` (`8.0000000000`).
//! - Integer literals are `integer`s when they fit ([`pg_integer::literals`](crate::pg_integer::literals)).

use std::collections::HashSet;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::{
    AggregateFunction, ScalarFunction, WindowFunction, WindowFunctionDefinition,
};
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, when};
use datafusion::logical_expr::{LogicalPlan, TableType};

/// `plan` with PostgreSQL's result types (see the module docs), through
/// [`rewrite_plan`](crate::semantics::rewrite_plan).
///
/// # Errors
/// A node whose schema cannot be recomputed.
pub fn rewrite(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    let plan = crate::pg_integer::literals(plan)?;
    let bigints = table_bigints(&plan);
    crate::semantics::rewrite_plan(
        plan,
        |_| true,
        |e, schema| {
            Ok(
                match integral(&e, schema)
                    .or_else(|| bigint_sum(&e, schema, &bigints))
                    .or_else(|| float_extremes(&e, schema))
                    .or_else(|| unconstrained_numeric(&e, schema))
                {
                    Some(rewritten) => Transformed::yes(rewritten),
                    None => Transformed::no(e),
                },
            )
        },
    )
}

/// PostgreSQL's `numeric` for a sum of `bigint`s (as wide as an Arrow decimal goes).
const BIGINT_SUM: DataType = DataType::Decimal128(38, 0);

/// The `bigint` columns of the tables `plan` scans (by table name and by a table's alias):
/// DataFusion's other 64-bit integers may be PostgreSQL `integer`s (its integer literals and
/// arithmetic are 64-bit).
fn table_bigints(plan: &LogicalPlan) -> HashSet<(String, String)> {
    let mut found = HashSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        let scanned = match node {
            // A recursive CTE's work table is a temporary scan of the CTE's own columns.
            LogicalPlan::TableScan(scan) if scan.source.table_type() == TableType::Base => {
                Some(scan.table_name.to_string())
            }
            LogicalPlan::SubqueryAlias(alias)
                if matches!(alias.input.as_ref(), LogicalPlan::TableScan(scan) if scan.source.table_type() == TableType::Base) =>
            {
                Some(alias.alias.to_string())
            }
            _ => None,
        };
        if let Some(table) = scanned {
            for field in node.schema().fields() {
                if matches!(field.data_type(), DataType::Int64) {
                    found.insert((table.clone(), field.name().clone()));
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Whether `e` is a `bigint` in PostgreSQL: a table's `bigint` column, a cast to `bigint`, or
/// a `count` (an aggregate's output column, under a window).
fn is_bigint(e: &Expr, schema: &DFSchema, bigints: &HashSet<(String, String)>) -> bool {
    if !matches!(e.get_type(schema), Ok(DataType::Int64)) {
        return false;
    }
    // A window over an aggregate reads its output as `count(…) AS count(*)`.
    let e = match e {
        Expr::Alias(alias) => alias.expr.as_ref(),
        other => other,
    };
    match e {
        Expr::Cast(_) => true,
        Expr::Column(c) => {
            c.name.starts_with("count(")
                || c.relation
                    .as_ref()
                    .is_some_and(|r| bigints.contains(&(r.to_string(), c.name.clone())))
        }
        _ => false,
    }
}

/// The rewrite of `e` if it is `sum` (aggregate or window) of a `bigint`: the sum of the
/// values as numerics.
fn bigint_sum(e: &Expr, schema: &DFSchema, bigints: &HashSet<(String, String)>) -> Option<Expr> {
    let of_bigint = |name: &str, args: &[Expr]| {
        name == "sum" && args.len() == 1 && is_bigint(&args[0], schema, bigints)
    };
    let widened =
        |args: &[Expr]| vec![Expr::Cast(Cast::new(Box::new(args[0].clone()), BIGINT_SUM))];
    match e {
        Expr::AggregateFunction(AggregateFunction { func, params })
            if of_bigint(func.name(), &params.args) =>
        {
            let mut params = params.clone();
            params.args = widened(&params.args);
            Some(Expr::AggregateFunction(AggregateFunction {
                func: func.clone(),
                params,
            }))
        }
        Expr::WindowFunction(w) if matches!(&w.fun, WindowFunctionDefinition::AggregateUDF(f) if of_bigint(f.name(), &w.params.args)) =>
        {
            let mut params = w.params.clone();
            params.args = widened(&params.args);
            Some(Expr::WindowFunction(Box::new(WindowFunction {
                fun: w.fun.clone(),
                params,
            })))
        }
        _ => None,
    }
}

/// `greatest`/`least` of floats and numerics compare and return floats, as PostgreSQL
/// resolves them (`double precision` is the preferred numeric type); DataFusion chose the
/// decimal.
fn float_extremes(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = e else {
        return None;
    };
    if !matches!(func.name(), "greatest" | "least") {
        return None;
    }
    let types: Vec<DataType> = args
        .iter()
        .map(|a| a.get_type(schema).ok())
        .collect::<Option<_>>()?;
    let decimal = |t: &DataType| matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..));
    if !types.iter().any(DataType::is_floating) || !types.iter().any(decimal) {
        return None;
    }
    let args = args
        .iter()
        .zip(&types)
        .map(|(a, t)| {
            if t.is_floating() {
                a.clone()
            } else {
                Expr::Cast(Cast::new(Box::new(a.clone()), DataType::Float64))
            }
        })
        .collect();
    Some(Expr::ScalarFunction(ScalarFunction::new_udf(
        func.clone(),
        args,
    )))
}

/// DataFusion's type for `numeric` without a precision.
const UNCONSTRAINED: DataType = DataType::Decimal128(38, 10);

/// `x::numeric` with PostgreSQL's scale: an integer's is 0, a numeric keeps its own, a text
/// literal's is its written decimals. Other values (a float, a text column) keep DataFusion's
/// cast: a float is PostgreSQL's through [`crate::pg_float_numeric`]'s rule, a text column's
/// scale would be per value.
fn unconstrained_numeric(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let Expr::Cast(Cast { expr, data_type }) = e else {
        return None;
    };
    if *data_type != UNCONSTRAINED {
        return None;
    }
    let to = |t: DataType| Some(Expr::Cast(Cast::new(expr.clone(), t)));
    match expr.get_type(schema).ok()? {
        DataType::Int8 | DataType::Int16 | DataType::Int32 => to(DataType::Decimal128(10, 0)),
        DataType::Int64 => to(DataType::Decimal128(20, 0)),
        DataType::Decimal128(..) => Some(expr.as_ref().clone()),
        _ => match expr.as_ref() {
            Expr::Literal(v, _) => {
                let text = v.try_as_str().flatten()?.trim();
                let digits = text.trim_start_matches(['-', '+']);
                let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
                if whole.is_empty() && fraction.is_empty()
                    || !whole
                        .bytes()
                        .chain(fraction.bytes())
                        .all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                let scale = u8::try_from(fraction.len()).ok()?;
                let precision = u8::try_from(whole.len() + fraction.len()).ok()?.max(1);
                (precision <= 38)
                    .then_some(DataType::Decimal128(precision, scale as i8))
                    .and_then(to)
            }
            _ => None,
        },
    }
}

/// The rewrite of `e` if it is `ceil`, `floor` or `trunc` (one argument) of a decimal.
fn integral(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = e else {
        return None;
    };
    let name = func.name();
    if !matches!(name, "ceil" | "floor" | "trunc") || args.len() != 1 {
        return None;
    }
    // Type coercion cast the decimal to a float for `trunc`: the decimal is under the cast.
    let arg = match &args[0] {
        Expr::Cast(Cast { expr, .. }) if name == "trunc" => expr.as_ref(),
        other => other,
    };
    let DataType::Decimal128(precision, scale) = arg.get_type(schema).ok()? else {
        return None;
    };
    if scale < 0 {
        return None;
    }
    // The integer digits, and one more for a carry (`ceil(99.5)` is 100).
    let digits = (i16::from(precision) - i16::from(scale) + 1).clamp(1, 38) as u8;
    let ceil = || datafusion::functions::math::expr_fn::ceil(arg.clone());
    let floor = || datafusion::functions::math::expr_fn::floor(arg.clone());
    let value = match name {
        "ceil" => ceil(),
        "floor" => floor(),
        _ => {
            let zero = Expr::Literal(ScalarValue::Decimal128(Some(0), precision, scale), None);
            when(arg.clone().lt(zero), ceil()).otherwise(floor()).ok()?
        }
    };
    Some(Expr::Cast(Cast::new(
        Box::new(value),
        DataType::Decimal128(digits, 0),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::record_batch::RecordBatch;

    /// Plans `sql`, rewrites it, and runs it: the schema must be what execution returns.
    async fn run(sql: &str) -> Vec<RecordBatch> {
        let ctx = datafusion::prelude::SessionContext::new();
        let plan = ctx.state().create_logical_plan(sql).await.expect("plans");
        let plan = rewrite(plan).expect("rewrites");
        let described = plan.schema().as_arrow().clone();
        let batches = ctx
            .execute_logical_plan(plan)
            .await
            .expect("executes")
            .collect()
            .await
            .expect("runs");
        let types = |s: &arrow::datatypes::Schema| -> Vec<DataType> {
            s.fields().iter().map(|f| f.data_type().clone()).collect()
        };
        assert_eq!(
            types(&batches[0].schema()),
            types(&described),
            "described = returned"
        );
        batches
    }

    #[tokio::test]
    async fn ceil_floor_and_trunc_of_a_numeric_have_no_decimals() {
        let batches = run(
            "SELECT ceil(x) AS c, floor(x) AS f, trunc(x) AS t, trunc(y) AS u FROM \
                 (VALUES (CAST(73.05 AS DECIMAL(12,2)), CAST(-7.5 AS DECIMAL(4,1)))) AS v(x, y)",
        )
        .await;
        let shown = arrow::util::pretty::pretty_format_batches(&batches)
            .expect("prints")
            .to_string();
        let schema = batches[0].schema();
        let types: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().to_string())
            .collect();
        assert_eq!(
            types,
            [
                "Decimal128(11, 0)",
                "Decimal128(11, 0)",
                "Decimal128(11, 0)",
                "Decimal128(4, 0)"
            ]
        );
        assert!(shown.contains("| 74 | 73 | 73 | -7 |"), "{shown}");
    }

    #[tokio::test]
    async fn a_sum_of_bigints_is_a_numeric_in_aggregates_and_windows() {
        let batches = run("SELECT sum(CAST(n AS BIGINT)) AS s FROM \
             (VALUES (9223372036854775807), (1)) AS v(n)")
        .await;
        assert_eq!(
            batches[0].schema().field(0).data_type(),
            &DataType::Decimal128(38, 0)
        );
        let shown = arrow::util::pretty::pretty_format_batches(&batches)
            .expect("prints")
            .to_string();
        assert!(
            shown.contains("9223372036854775808"),
            "no overflow: {shown}"
        );
        // A running total of counts: count is a bigint, its sum a numeric.
        let batches = run(
            "SELECT k, count(*) AS c, sum(count(*)) OVER (ORDER BY k) AS running FROM \
             (VALUES (1), (1), (2)) AS v(k) GROUP BY k ORDER BY k",
        )
        .await;
        assert_eq!(
            batches[0].schema().field(2).data_type(),
            &DataType::Decimal128(38, 0)
        );
        // Integer literals are PostgreSQL integers: their sum is a bigint.
        let batches =
            run("SELECT sum(CASE WHEN k > 1 THEN 1 ELSE 0 END) FROM (VALUES (1), (2)) AS v(k)")
                .await;
        assert_eq!(batches[0].schema().field(0).data_type(), &DataType::Int64);
    }
}

//! A kept plan analysed and optimised once, before its parameters are bound.
//!
//! A kept plan ([`crate::plan_cache`]) binds each execution's parameters into its logical plan
//! and then analyses, optimises and physically plans the result: for an accelerated point
//! lookup that was over half of the statement's CPU (release build, 2026-12-05: analyser 13%,
//! optimiser 20%, physical planning 19%). Here the analyser and optimiser run once, on the plan
//! with its placeholders in place, and an execution binds its values into the optimised plan and
//! only plans it physically. The physical planner still sees the bound values, so a scan's
//! filters, index lookups and pruning get the literals as before.
//!
//! That gives the answer binding first gives only where the analyser and optimiser treat a
//! placeholder as they treat a value of its type, so this is done only when:
//!
//! - every placeholder is `$n` with a known type (not an extension type), and every execution's
//!   values have exactly those types (else the execution binds first, as before): the analyser
//!   then coerces a value as it coerced its placeholder. A placeholder under an explicit cast
//!   (`CAST($1 AS INT)`: how the gateway passes a type a driver declared in Parse, psycopg's
//!   `int`, pgJDBC's `setInt`) takes that cast's type; a value of it casts to itself;
//! - no column is cast to a placeholder's type in a comparison (a `bigint` declared for an
//!   `integer` column): binding first, the optimiser moves such a cast onto the value, and the
//!   scan looks the column up by it;
//! - every placeholder is an operand of a binary operator, an `IN` list or a `BETWEEN`, or such
//!   an operand's cast of a placeholder that is not text (checked after analysis): the rules
//!   that read a value (PostgreSQL's date/time input reads a text literal under a cast; a
//!   function's return type may read a literal argument) act on text under casts and on
//!   function arguments, never there;
//! - the plan is kept at all: only immutable functions (the optimiser folds `now()`), only pinned
//!   tables.
//!
//! The optimiser's own rules are exact for any value of an operand; with a placeholder they only
//! fold less (`x = NULL` is evaluated, not folded away). The one fold a lookup needs, a value's
//! cast to its column's type, is done at binding ([`fold_casts`]), with the same cast kernel.

use std::collections::BTreeMap;

use std::sync::Arc;

use arrow::datatypes::{DataType, Field};
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::expr::{Cast, Placeholder, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};

use crate::Result;

/// A plan optimised with its placeholders in place, and their types.
#[derive(Debug)]
pub(crate) struct Optimized {
    plan: LogicalPlan,
    /// `$1, $2, …`'s types, in order.
    types: Vec<DataType>,
    /// Whether a placeholder is under a cast (its bound value's cast is folded per execution).
    casts_values: bool,
    /// Whether every placeholder is in a filter (a `Filter`'s predicate or a scan's filters):
    /// binding then changes no node's schema or output names, and only those nodes are bound.
    in_filters_only: bool,
}

impl Optimized {
    /// `plan` (parameters unbound) analysed and optimised in `state`, when that is exact for
    /// every execution whose values have its placeholders' types (see the module docs);
    /// `None` when it is not, or when analysing or optimising it fails.
    pub(crate) fn of(plan: &LogicalPlan, state: &SessionState) -> Option<Self> {
        // EXPLAIN prints the plans its optimisation went through, which only
        // `SessionState::optimize` records.
        if matches!(plan, LogicalPlan::Explain(_) | LogicalPlan::Analyze(_)) {
            return None;
        }
        let analyzed = state
            .analyzer()
            .execute_and_check(typed_by_casts(plan), state.config_options(), |_, _| {})
            .inspect_err(|e| tracing::debug!(error = %e, "not optimised before binding"))
            .ok()?;
        let Some(types) = opaque_placeholders(&analyzed) else {
            tracing::debug!(
                plan = %analyzed.display_indent(),
                "not optimised before binding: a rule could read a parameter"
            );
            return None;
        };
        let plan = state
            .optimizer()
            .optimize(analyzed, state, |_, _| {})
            .inspect_err(|e| tracing::debug!(error = %e, "not optimised before binding"))
            .ok()?;
        tracing::debug!(types = ?types, "optimised before binding");
        let mut casts_values = false;
        let _ = plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                casts_values |= e.exists(|e| {
                    Ok(matches!(e, Expr::Cast(Cast { expr, .. })
                        if matches!(expr.as_ref(), Expr::Placeholder(_))))
                })?;
                Ok(stop_unless(!casts_values))
            })?;
            Ok(stop_unless(!casts_values))
        });
        let in_filters_only = !plan
            .exists(|node| {
                Ok(
                    !matches!(node, LogicalPlan::Filter(_) | LogicalPlan::TableScan(_))
                        && node.expressions().iter().any(has_placeholder),
                )
            })
            .unwrap_or(true)
            && !plan
                .exists(|node| Ok(node.expressions().iter().any(has_subquery)))
                .unwrap_or(true);
        Some(Self {
            plan,
            types,
            casts_values,
            in_filters_only,
        })
    }

    /// The optimised plan with `params` bound; `None` when they are not exactly of the types
    /// it was optimised for (the caller binds before optimising instead).
    pub(crate) fn bind(&self, params: Option<&ParamValues>) -> Option<Result<LogicalPlan>> {
        let fits = match params {
            None => self.types.is_empty(),
            Some(ParamValues::List(values)) => {
                values.len() == self.types.len()
                    && values.iter().zip(&self.types).all(|(v, t)| {
                        v.metadata.as_ref().is_none_or(|m| m.is_empty())
                            && v.value.data_type() == *t
                    })
            }
            Some(ParamValues::Map(_)) => false,
        };
        if !fits {
            tracing::debug!(
                params = ?params,
                types = ?self.types,
                "parameters bound before optimising: not of the planned types"
            );
            return None;
        }
        let Some(params) = params else {
            return Some(Ok(self.plan.clone()));
        };
        let bound = if self.in_filters_only {
            // The values' casts are in the filters too: folded in the same pass.
            bind_filters(self.plan.clone(), params, self.casts_values)
        } else {
            self.plan
                .clone()
                .replace_params_with_values(params)
                .and_then(|bound| {
                    if self.casts_values {
                        fold_casts(bound)
                    } else {
                        Ok(bound)
                    }
                })
        };
        Some(bound.map_err(Into::into))
    }
}

/// `plan` with `params` bound into its filters, the only nodes holding placeholders: what
/// `replace_params_with_values` gives when each value has its placeholder's type, without its
/// per-node work (inferring types, preserving names, recomputing every schema), which a filter
/// does not need (its schema is its input's; a scan's is its table's). With `fold`, each cast
/// of a value is folded in the same pass ([`fold_cast`]): only the bound values are casts of
/// values after optimising (the optimiser folded the rest, or left a cast that fails), and
/// they are all in these nodes.
fn bind_filters(
    plan: LogicalPlan,
    params: &ParamValues,
    fold: bool,
) -> datafusion::common::Result<LogicalPlan> {
    plan.transform_up(|node| {
        if !matches!(node, LogicalPlan::Filter(_) | LogicalPlan::TableScan(_)) {
            return Ok(Transformed::no(node));
        }
        node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::Placeholder(Placeholder { id, .. }) => {
                    let (value, metadata) = params.get_placeholders_with_values(&id)?.into_inner();
                    Ok(Transformed::yes(Expr::Literal(value, metadata)))
                }
                Expr::Cast(cast) if fold => Ok(fold_cast(cast)),
                e => Ok(Transformed::no(e)),
            })
        })
    })
    .map(|t| t.data)
}

/// `plan` with each placeholder under an explicit cast (`CAST($1 AS INT)`: how the gateway
/// passes a type the client declared in Parse) in a filter replaced by a placeholder of that
/// type: equal for every value of that type, which is all [`Optimized::bind`] binds into it.
/// Only in filters: elsewhere the expression's text names an output column.
fn typed_by_casts(plan: &LogicalPlan) -> LogicalPlan {
    let typed = plan.clone().transform_up_with_subqueries(|node| {
        if !matches!(node, LogicalPlan::Filter(_)) {
            return Ok(Transformed::no(node));
        }
        node.map_expressions(|e| {
            e.transform_up(|e| {
                let Expr::Cast(Cast { expr, data_type }) = e else {
                    return Ok(Transformed::no(e));
                };
                match *expr {
                    Expr::Placeholder(p)
                        if p.field.as_ref().is_none_or(|f| f.data_type() == &data_type) =>
                    {
                        let field = Arc::new(Field::new("", data_type, true));
                        Ok(Transformed::yes(Expr::Placeholder(
                            Placeholder::new_with_field(p.id, Some(field)),
                        )))
                    }
                    expr => Ok(Transformed::no(Expr::Cast(Cast::new(
                        Box::new(expr),
                        data_type,
                    )))),
                }
            })
        })
    });
    match typed {
        Ok(t) => t.data,
        Err(_) => plan.clone(),
    }
}

/// `plan` (its values bound) with each cast of a value folded into the value, as the optimiser
/// folds it when values are bound first (a placeholder's cast to the column's type is then a
/// literal the scan can prune and look up by). A cast that fails stays, to fail at execution
/// as it would have.
fn fold_casts(plan: LogicalPlan) -> datafusion::common::Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::Cast(cast) => Ok(fold_cast(cast)),
                e => Ok(Transformed::no(e)),
            })
        })
    })
    .map(|t| t.data)
}

/// `cast` of a value folded into the value; any other cast, or one that fails, as it is.
fn fold_cast(Cast { expr, data_type }: Cast) -> Transformed<Expr> {
    match *expr {
        Expr::Literal(value, metadata) => match value.cast_to(&data_type) {
            Ok(folded) => Transformed::yes(Expr::Literal(folded, None)),
            Err(_) => Transformed::no(Expr::Cast(Cast::new(
                Box::new(Expr::Literal(value, metadata)),
                data_type,
            ))),
        },
        expr => Transformed::no(Expr::Cast(Cast::new(Box::new(expr), data_type))),
    }
}

/// The types of `analyzed`'s placeholders in `$n` order, when each is `$n`, typed, without
/// not an extension type and an operand (see the module docs).
fn opaque_placeholders(analyzed: &LogicalPlan) -> Option<Vec<DataType>> {
    let mut types = BTreeMap::<usize, DataType>::new();
    let mut opaque = true;
    let _ = analyzed.apply_with_subqueries(|node| {
        let _ = node.apply_expressions(|top| {
            opaque = opaque && operand_check(top, false, &mut types);
            Ok(stop_unless(opaque))
        });
        Ok(stop_unless(opaque))
    });
    if !opaque {
        return None;
    }
    // `$1 … $n`, each present: a gap would leave a value the plan never binds.
    let dense = types.keys().copied().eq(1..=types.len());
    dense.then(|| types.into_values().collect())
}

/// Whether every placeholder in `e` (an operand of a binary operator, `IN` list or `BETWEEN`
/// when `operand`) is one the analyser and optimiser cannot read as a value: an operand itself,
/// or an operand's cast of a placeholder that is not text (PostgreSQL's date/time input reads
/// text under a cast). Records each placeholder's type in `types`.
fn operand_check(e: &Expr, operand: bool, types: &mut BTreeMap<usize, DataType>) -> bool {
    let placeholder = match e {
        Expr::Placeholder(p) => Some(p),
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => {
            match expr.as_ref() {
                Expr::Placeholder(p) => {
                    return operand
                        && typed(p).is_some_and(|(n, t)| !is_text(&t) && record(types, n, t));
                }
                _ => None,
            }
        }
        _ => None,
    };
    if let Some(p) = placeholder {
        return operand && typed(p).is_some_and(|(n, t)| record(types, n, t));
    }
    // A column the analyser cast to a placeholder's type (`CAST(int_col AS BIGINT) = $1`, a
    // `bigint` declared for an `integer` column): bound first, the optimiser moves the cast to
    // the value and the scan looks the column up by it; optimised before binding, it could not.
    if let Expr::BinaryExpr(b) = e
        && (cast_column(&b.left) && has_placeholder(&b.right)
            || cast_column(&b.right) && has_placeholder(&b.left))
    {
        return false;
    }
    let children_are_operands =
        matches!(e, Expr::BinaryExpr(_) | Expr::InList(_) | Expr::Between(_));
    let mut ok = true;
    let _ = e.apply_children(|child| {
        ok = ok && operand_check(child, children_are_operands, types);
        Ok(stop_unless(ok))
    });
    ok
}

/// A cast of something other than a value (a column, an expression of columns).
fn cast_column(e: &Expr) -> bool {
    match e {
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => {
            !matches!(expr.as_ref(), Expr::Literal(..) | Expr::Placeholder(_))
        }
        _ => false,
    }
}

fn has_subquery(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(matches!(
            e,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::SetComparison(_)
        ))
    })
    .unwrap_or(true)
}

fn has_placeholder(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .unwrap_or(true)
}

/// Records `$n`'s type; false when `$n` was seen with another.
fn record(types: &mut BTreeMap<usize, DataType>, n: usize, t: DataType) -> bool {
    match types.get(&n) {
        Some(was) => *was == t,
        None => {
            types.insert(n, t);
            true
        }
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn stop_unless(go_on: bool) -> TreeNodeRecursion {
    if go_on {
        TreeNodeRecursion::Continue
    } else {
        TreeNodeRecursion::Stop
    }
}

/// `$n` and its type, when it has one and is not an extension type. (DataFusion types a
/// placeholder by the column it is compared with, that column's metadata included: an Iceberg
/// column's Parquet field id is no reason to bind first.)
fn typed(p: &Placeholder) -> Option<(usize, DataType)> {
    let n = p.id.strip_prefix('$')?.parse::<usize>().ok()?;
    let field = p.field.as_ref()?;
    let extension = field
        .metadata()
        .keys()
        .any(|k| k.starts_with("ARROW:extension"));
    (!extension).then(|| (n, field.data_type().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::common::ScalarValue;
    use datafusion::prelude::SessionContext;

    async fn context() -> SessionContext {
        let ctx = SessionContext::new();
        ctx.sql(
            "CREATE TABLE t AS VALUES \
             (1, 'a', DATE '2024-01-01'), (2, 'b', DATE '2024-02-01'), \
             (2147483648, NULL, NULL), (-5, 'c', DATE '2023-12-31')",
        )
        .await
        .expect("create")
        .collect()
        .await
        .expect("create");
        ctx.sql("CREATE TABLE u (c32 INT) AS VALUES (5), (7), (NULL)")
            .await
            .expect("create")
            .collect()
            .await
            .expect("create");
        ctx
    }

    async fn unbound(ctx: &SessionContext, sql: &str) -> LogicalPlan {
        ctx.sql(sql).await.expect("plan").into_unoptimized_plan()
    }

    async fn answer(ctx: &SessionContext, plan: LogicalPlan) -> String {
        let physical = ctx
            .state()
            .query_planner()
            .create_physical_plan(&plan, &ctx.state())
            .await
            .expect("physical");
        let batches = datafusion::physical_plan::collect(physical, ctx.task_ctx())
            .await
            .expect("run");
        pretty_format_batches(&batches).expect("format").to_string()
    }

    async fn bound_first(ctx: &SessionContext, plan: &LogicalPlan, p: &ParamValues) -> String {
        let bound = plan.clone().replace_params_with_values(p).expect("bind");
        let optimized = ctx.state().optimize(&bound).expect("optimize");
        answer(ctx, optimized).await
    }

    fn params(values: Vec<ScalarValue>) -> ParamValues {
        ParamValues::List(values.into_iter().map(Into::into).collect())
    }

    #[tokio::test]
    async fn an_optimised_plan_bound_later_answers_as_binding_first() {
        let ctx = context().await;
        let cases: Vec<(&str, Vec<Vec<ScalarValue>>)> = vec![
            (
                "SELECT column2 FROM t WHERE column1 = $1",
                vec![
                    vec![ScalarValue::Int64(Some(2))],
                    vec![ScalarValue::Int64(Some(2147483648))],
                    vec![ScalarValue::Int64(None)],
                ],
            ),
            (
                "SELECT column1 FROM t WHERE column1 BETWEEN $1 AND $2 ORDER BY column1",
                vec![
                    vec![ScalarValue::Int64(Some(-10)), ScalarValue::Int64(Some(2))],
                    vec![ScalarValue::Int64(Some(3)), ScalarValue::Int64(None)],
                ],
            ),
            (
                "SELECT column1 FROM t WHERE column2 IN ($1, 'c') OR column3 > $2 ORDER BY 1",
                vec![vec![
                    ScalarValue::Utf8(Some("a".into())),
                    ScalarValue::Date32(Some(19_754)),
                ]],
            ),
            (
                // Coerced to the list's type: the analyser casts the (integer) placeholder.
                "SELECT c32 FROM u WHERE c32 IN ($1, CAST(9 AS BIGINT)) ORDER BY 1",
                vec![
                    vec![ScalarValue::Int32(Some(7))],
                    vec![ScalarValue::Int32(None)],
                ],
            ),
            (
                // A lifted literal (`lakegate_sql::lift`): an `integer` compared with a bigint.
                "SELECT * FROM t WHERE column1 = CAST($1 AS INT)",
                vec![
                    vec![ScalarValue::Int32(Some(2))],
                    vec![ScalarValue::Int32(Some(-5))],
                ],
            ),
            (
                // A placeholder outside a filter: the whole plan is bound (names, schemas).
                "SELECT column1 = $1 AS same, column2 FROM t WHERE column1 > $2 ORDER BY 2",
                vec![vec![
                    ScalarValue::Int64(Some(2)),
                    ScalarValue::Int64(Some(0)),
                ]],
            ),
        ];
        for (sql, executions) in cases {
            let plan = unbound(&ctx, sql).await;
            let optimized = Optimized::of(&plan, &ctx.state())
                .unwrap_or_else(|| panic!("{sql} is optimised before binding"));
            assert_eq!(optimized.in_filters_only, !sql.contains("AS same"), "{sql}");
            for values in executions {
                let p = params(values);
                let later = optimized
                    .bind(Some(&p))
                    .expect("the values fit")
                    .expect("bind");
                assert_eq!(
                    answer(&ctx, later).await,
                    bound_first(&ctx, &plan, &p).await,
                    "{sql} with {p:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_placeholder_typed_by_an_iceberg_column_is_optimised_before_binding() {
        use arrow::array::{Int64Array, RecordBatch, StringArray};
        use arrow::datatypes::{Field, Schema};
        use std::collections::HashMap;
        use std::sync::Arc;
        let id = Field::new("id", DataType::Int64, false).with_metadata(HashMap::from([(
            "PARQUET:field_id".to_string(),
            "1".to_string(),
        )]));
        let schema = Arc::new(Schema::new(vec![id, Field::new("s", DataType::Utf8, true)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("x"), None, Some("z")])),
            ],
        )
        .expect("batch");
        let ctx = SessionContext::new();
        let table =
            datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]]).expect("table");
        ctx.register_table("m", Arc::new(table)).expect("register");
        let plan = unbound(&ctx, "SELECT s FROM m WHERE id = $1").await;
        let optimized = Optimized::of(&plan, &ctx.state()).expect("optimised before binding");
        for id in [Some(1), Some(2), Some(9), None] {
            let p = params(vec![ScalarValue::Int64(id)]);
            let later = optimized.bind(Some(&p)).expect("fits").expect("bind");
            assert_eq!(
                answer(&ctx, later).await,
                bound_first(&ctx, &plan, &p).await
            );
        }
    }

    #[tokio::test]
    async fn a_declared_type_types_the_placeholder() {
        let ctx = context().await;
        let cases: Vec<(&str, Vec<ScalarValue>)> = vec![
            (
                "SELECT column2 FROM t WHERE column1 = CAST($1 AS INT)",
                vec![ScalarValue::Int32(Some(2)), ScalarValue::Int32(None)],
            ),
            (
                "SELECT column1 FROM t WHERE column3 > CAST($1 AS DATE) ORDER BY 1",
                vec![ScalarValue::Date32(Some(19_754))],
            ),
            (
                "SELECT c32 FROM u WHERE c32 <> CAST($1 AS INT) ORDER BY 1",
                vec![ScalarValue::Int32(Some(5))],
            ),
        ];
        for (sql, values) in cases {
            let plan = unbound(&ctx, sql).await;
            let optimized = Optimized::of(&plan, &ctx.state())
                .unwrap_or_else(|| panic!("{sql} is optimised before binding"));
            for value in values {
                let p = params(vec![value]);
                let later = optimized.bind(Some(&p)).expect("fits").expect("bind");
                // The value is cast where the optimiser would have cast it: a literal the scan
                // prunes by, not a cast evaluated per row.
                let shown = later.display_indent().to_string();
                assert!(!shown.contains("CAST("), "{sql}: {shown}");
                assert_eq!(
                    answer(&ctx, later).await,
                    bound_first(&ctx, &plan, &p).await,
                    "{sql} with {p:?}"
                );
            }
            // A value of another type (text, undeclared) binds first, into the explicit cast.
            let text = params(vec![ScalarValue::Utf8(Some("2".into()))]);
            assert!(optimized.bind(Some(&text)).is_none(), "{sql}");
        }
    }

    #[tokio::test]
    async fn values_of_other_types_bind_first() {
        let ctx = context().await;
        let plan = unbound(&ctx, "SELECT column2 FROM t WHERE column1 = $1").await;
        let optimized = Optimized::of(&plan, &ctx.state()).expect("optimised");
        let text = params(vec![ScalarValue::Utf8(Some("2".into()))]);
        assert!(optimized.bind(Some(&text)).is_none());
        assert!(optimized.bind(None).is_none(), "a value is missing");
        let two = params(vec![
            ScalarValue::Int64(Some(2)),
            ScalarValue::Int64(Some(3)),
        ]);
        assert!(optimized.bind(Some(&two)).is_none(), "one value too many");
    }

    #[tokio::test]
    async fn placeholders_a_rule_could_read_as_values_are_bound_first() {
        let ctx = context().await;
        for sql in [
            // A function's argument (its return type or simplification may read a value).
            "SELECT column1 FROM t WHERE upper(column2) = upper($1)",
            // A cast of a text value (PostgreSQL's date/time input reads a text literal there).
            "SELECT column1 FROM t WHERE column3 > CAST(CAST($1 AS TEXT) AS DATE)",
            // A column cast to a declared type: bound first, the optimiser unwraps it.
            "SELECT c32 FROM u WHERE c32 = CAST($1 AS BIGINT)",
            // A declared type outside a filter (the expression names the column).
            "SELECT c32 = CAST($1 AS INT) FROM u",
            // The whole expression.
            "SELECT $1 = column1 AS same, $2 FROM t",
            // EXPLAIN's output lists the optimiser's plans, made per execution.
            "EXPLAIN SELECT column2 FROM t WHERE column1 = $1",
        ] {
            let plan = unbound(&ctx, sql).await;
            assert!(
                Optimized::of(&plan, &ctx.state()).is_none(),
                "{sql} must bind before optimising"
            );
        }
        let plan = unbound(&ctx, "SELECT column1 FROM t ORDER BY 1").await;
        let optimized = Optimized::of(&plan, &ctx.state()).expect("no placeholders");
        assert!(optimized.bind(None).is_some());
    }
}

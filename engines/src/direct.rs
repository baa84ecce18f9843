//! Simple plans run without DataFusion's physical planner: a table scan under filters,
//! projections, a sort and a limit (a point lookup, a customer's last 20 orders).
//!
//! DataFusion plans every execution physically — the physical planner, then about twenty
//! physical optimiser rules — even when its logical plan is kept and its values bound
//! ([`crate::optimized`]). For a point lookup that was the largest cost left (release build,
//! 2026-12-06: 32% of the statement's CPU over files, a third of it `FilterExec` working out
//! statistics and equivalences, twice, for a plan of three nodes).
//!
//! Here such a plan runs as the steps the physical plan would run, built from the same
//! DataFusion parts: the provider's scan as the physical planner asks for it (`scan_with_args`
//! with the scan's projection, unqualified filters and fetch), each expression made physical
//! against its node's input schema as the planner makes it (`create_physical_expr`), rows
//! filtered by [`batch_filter`] (what `FilterExec` runs), projected by a [`Projector`] (what
//! `ProjectionExec` runs, with the planner's output names), sorted by [`sort_batch`] (what
//! `SortExec` runs; a fetch keeps only the first rows, as its top-k does) and limited by the
//! limit's skip and fetch. So the rows are the ones the physical plan gives, in an order the
//! plan allows.
//!
//! Taken only when every expression is evaluated row by row (no subquery, aggregate, window,
//! placeholder or asynchronous function) and a sort is bounded: it has a fetch of at most
//! [`MAX_SORTED`] rows, or its scan gives at most [`MAX_SORTED`] rows before filtering (a sort
//! the physical plan could spill is left to it). Partitions of the scan are read one after the
//! other, each cooperative with the runtime as the physical plan's are.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::ScanArgs;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::physical_name;
use datafusion::logical_expr::expr_rewriter::unnormalize_cols;
use datafusion::logical_expr::{
    Expr, FetchType, Filter, Limit, LogicalPlan, Projection, SkipType, Sort, TableScan,
};
use datafusion::physical_expr::projection::{ProjectionExpr, ProjectionExprs, Projector};
use datafusion::physical_expr::{
    LexOrdering, PhysicalExpr, create_physical_expr, create_physical_sort_exprs,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::filter::batch_filter;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::sort_batch;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};

use crate::Result;

/// The most rows a sort is run over here (its fetch, or its scan's rows).
pub(crate) const MAX_SORTED: usize = 10_000;

/// One step over the scan's batches, in the order they run.
enum Step {
    Filter(Arc<dyn PhysicalExpr>),
    Project(Projector),
    Sort {
        ordering: LexOrdering,
        fetch: Option<usize>,
    },
    Limit {
        skip: usize,
        fetch: Option<usize>,
    },
}

/// The nodes of a plan this module runs: its scan, and the nodes above it, lowest first.
fn shape(plan: &LogicalPlan) -> Option<(&TableScan, Vec<&LogicalPlan>)> {
    let mut above = Vec::new();
    let mut node = plan;
    loop {
        match node {
            LogicalPlan::TableScan(scan) => {
                if !scan.filters.iter().all(row_by_row) {
                    return None;
                }
                above.reverse();
                return Some((scan, above));
            }
            LogicalPlan::Filter(Filter {
                predicate, input, ..
            }) if row_by_row(predicate) => {
                above.push(node);
                node = input;
            }
            LogicalPlan::Projection(Projection { expr, input, .. })
                if expr.iter().all(row_by_row) =>
            {
                above.push(node);
                node = input;
            }
            LogicalPlan::Sort(Sort { expr, input, .. })
                if expr.iter().all(|s| row_by_row(&s.expr)) =>
            {
                above.push(node);
                node = input;
            }
            LogicalPlan::Limit(Limit { input, .. }) => {
                above.push(node);
                node = input;
            }
            // A new qualifier for the same rows.
            LogicalPlan::SubqueryAlias(alias) => node = &alias.input,
            _ => return None,
        }
    }
}

/// Whether `expr` is evaluated row by row over its input's batch.
fn row_by_row(expr: &Expr) -> bool {
    !expr
        .exists(|e| {
            Ok(match e {
                Expr::ScalarFunction(f) => f.func.as_async().is_some(),
                Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::SetComparison(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::Placeholder(_)
                | Expr::AggregateFunction(_)
                | Expr::WindowFunction(_)
                | Expr::GroupingSet(_)
                | Expr::Unnest(_) => true,
                #[expect(deprecated)]
                Expr::Wildcard { .. } => true,
                _ => false,
            })
        })
        .unwrap_or(true)
}

/// `plan` (optimised, its values bound) run directly, when it has the shape this module runs;
/// `None` when it has not (the caller plans it physically).
pub(crate) async fn stream(
    plan: &LogicalPlan,
    state: &SessionState,
    task: &Arc<TaskContext>,
) -> Option<Result<SendableRecordBatchStream>> {
    let (scan, above) = shape(plan)?;
    let provider = source_as_provider(&scan.source).ok()?;
    let run = async {
        let filters = unnormalize_cols(scan.filters.iter().cloned());
        let args = ScanArgs::default()
            .with_projection(scan.projection.as_deref())
            .with_filters(Some(&filters))
            .with_limit(scan.fetch);
        let exec = Arc::clone(provider.scan_with_args(state, args).await?.plan());
        let Some((steps, schema)) = steps(&above, &exec, state)? else {
            return Ok::<_, DataFusionError>(None);
        };
        let partitions = (0..exec.properties().output_partitioning().partition_count())
            .map(|i| exec.execute(i, Arc::clone(task)).map(make_cooperative))
            .collect::<DFResult<Vec<_>>>()?;
        let mut batches: BoxStream<'static, DFResult<RecordBatch>> =
            stream::iter(partitions).flatten().boxed();
        for step in steps {
            batches = apply(step, batches);
        }
        let out: SendableRecordBatchStream =
            Box::pin(RecordBatchStreamAdapter::new(schema, batches));
        Ok::<_, DataFusionError>(Some(out))
    };
    match run.await {
        Ok(Some(out)) => Some(Ok(out)),
        Ok(None) => None,
        Err(e) => Some(Err(e.into())),
    }
}

/// The steps of the nodes `above` the scan `exec`, and the schema of what they give; `None`
/// when a sort is not bounded.
fn steps(
    above: &[&LogicalPlan],
    exec: &Arc<dyn ExecutionPlan>,
    state: &SessionState,
) -> DFResult<Option<(Vec<Step>, SchemaRef)>> {
    let mut schema = exec.schema();
    let props = state.execution_props();
    let mut steps = Vec::with_capacity(above.len());
    for node in above {
        let step = match node {
            LogicalPlan::Filter(f) => {
                Step::Filter(create_physical_expr(&f.predicate, f.input.schema(), props)?)
            }
            LogicalPlan::Projection(p) => {
                let projector = projector(p, &schema, props)?;
                schema = Arc::clone(projector.output_schema());
                Step::Project(projector)
            }
            LogicalPlan::Sort(s) => {
                let bounded = match s.fetch {
                    Some(fetch) => fetch <= MAX_SORTED,
                    None => rows_at_most(exec).is_some_and(|r| r <= MAX_SORTED),
                };
                let exprs = create_physical_sort_exprs(&s.expr, s.input.schema(), props)?;
                let Some(ordering) = LexOrdering::new(exprs).filter(|_| bounded) else {
                    return Ok(None);
                };
                Step::Sort {
                    ordering,
                    fetch: s.fetch,
                }
            }
            LogicalPlan::Limit(l) => {
                let (SkipType::Literal(skip), FetchType::Literal(fetch)) =
                    (l.get_skip_type()?, l.get_fetch_type()?)
                else {
                    return Ok(None);
                };
                Step::Limit { skip, fetch }
            }
            _ => return Ok(None),
        };
        steps.push(step);
    }
    Ok(Some((steps, schema)))
}

/// A projection's expressions with the names the physical planner gives them: a column keeps
/// its input field's name, anything else its physical name.
fn projector(
    p: &Projection,
    input: &SchemaRef,
    props: &datafusion::execution::context::ExecutionProps,
) -> DFResult<Projector> {
    let logical: &DFSchema = p.input.schema();
    let exprs = p
        .expr
        .iter()
        .map(|e| {
            let name = match e {
                Expr::Column(c) => match logical.index_of_column(c) {
                    Ok(i) => input.field(i).name().clone(),
                    Err(_) => physical_name(e)?,
                },
                _ => physical_name(e)?,
            };
            Ok(ProjectionExpr::new(
                create_physical_expr(e, logical, props)?,
                name,
            ))
        })
        .collect::<DFResult<Vec<_>>>()?;
    ProjectionExprs::new(exprs).make_projector(input)
}

/// `batches` through `step`.
fn apply(
    step: Step,
    batches: BoxStream<'static, DFResult<RecordBatch>>,
) -> BoxStream<'static, DFResult<RecordBatch>> {
    match step {
        Step::Filter(predicate) => batches
            .map(move |b| b.and_then(|b| batch_filter(&b, &predicate)))
            .try_filter(|b| std::future::ready(b.num_rows() > 0))
            .boxed(),
        Step::Project(projector) => batches
            .map(move |b| b.and_then(|b| projector.project_batch(&b)))
            .boxed(),
        Step::Sort { ordering, fetch } => stream::once(async move {
            let mut batches = std::pin::pin!(batches);
            let (mut held, mut rows) = (Vec::new(), 0);
            while let Some(batch) = batches.try_next().await? {
                rows += batch.num_rows();
                held.push(batch);
                // With a fetch, only the first rows so far are kept (top-k).
                if let Some(k) = fetch.filter(|k| rows > 2 * k + 1024) {
                    let top = sort_batch(&concat(&held)?, &ordering, Some(k))?;
                    rows = top.num_rows();
                    held = vec![top];
                }
            }
            match held.is_empty() {
                true => Ok(None),
                false => sort_batch(&concat(&held)?, &ordering, fetch).map(Some),
            }
        })
        .try_filter_map(|b| std::future::ready(Ok(b.filter(|b| b.num_rows() > 0))))
        .boxed(),
        Step::Limit { skip, fetch } => limit(batches, skip, fetch),
    }
}

/// `batches` (at least one) as one batch.
fn concat(batches: &[RecordBatch]) -> DFResult<RecordBatch> {
    match batches {
        [one] => Ok(one.clone()),
        _ => Ok(concat_batches(&batches[0].schema(), batches)?),
    }
}

/// The rows of `batches` after the first `skip`, at most `fetch` of them; stops reading its
/// input once they are given.
fn limit(
    batches: BoxStream<'static, DFResult<RecordBatch>>,
    skip: usize,
    fetch: Option<usize>,
) -> BoxStream<'static, DFResult<RecordBatch>> {
    stream::unfold(
        (batches, skip, fetch),
        |(mut batches, mut skip, left)| async move {
            loop {
                if left == Some(0) {
                    return None;
                }
                let batch = match batches.next().await? {
                    Ok(b) => b,
                    Err(e) => return Some((Err(e), (batches, 0, Some(0)))),
                };
                let rows = batch.num_rows();
                if skip >= rows {
                    skip -= rows;
                    continue;
                }
                let take = left.map_or(rows - skip, |l| l.min(rows - skip));
                let out = batch.slice(skip, take);
                return Some((Ok(out), (batches, 0, left.map(|l| l - take))));
            }
        },
    )
    .boxed()
}

/// The rows `scan` gives at most, when it can tell: a lake scan's files' row counts, an
/// in-memory scan's rows, through projections of either.
fn rows_at_most(scan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let any = scan.as_any();
    if let Some(p) = any.downcast_ref::<ProjectionExec>() {
        return rows_at_most(p.input());
    }
    if let Some(rows) = crate::lake_scan::rows_at_most(any) {
        return Some(rows);
    }
    let source = any.downcast_ref::<DataSourceExec>()?;
    let memory = source
        .data_source()
        .as_any()
        .downcast_ref::<MemorySourceConfig>()?;
    Some(
        memory
            .partitions()
            .iter()
            .flatten()
            .map(RecordBatch::num_rows)
            .sum(),
    )
}

#[cfg(test)]
#[path = "direct_tests.rs"]
mod tests;

//! `EXPLAIN ROUTE <query>` (also `EXPLAIN (ROUTE) <query>`): the query's [`Plan`] as
//! (item, value) rows — its profile, the matched rule and group, the snapshots, each
//! candidate's expected latency and the choice. Nothing runs; it is planned exactly as it would
//! run, so a query the user may not read is refused here as well (42501).

use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::Engine;
use lakegate_engines::engine::Described;

use crate::classify::{self, StatementKind};
use crate::error::{Error, Result};
use crate::routing::Pick;
use crate::routing::stats::{bucket_name, size_bucket};
use crate::service::plan::{Order, Plan, Route};
use crate::service::query::batches_stream;
use crate::service::{GatewayService, QueryOutput, StatementContext, snapshot_list};
use crate::session::Session;

impl GatewayService {
    /// The plan of `target`, for EXPLAIN ROUTE (described or executed alike).
    ///
    /// # Errors
    /// Anything planning `target` fails with; a target that is not a query.
    pub(crate) async fn explain_plan(
        &self,
        target: &Statement,
        session: &Session,
        ctx: &StatementContext,
    ) -> Result<Plan> {
        if classify::kind(target) != StatementKind::Query {
            return Err(Error::Unsupported {
                what: "EXPLAIN ROUTE of anything but a query".into(),
            });
        }
        let settings = self.engine_settings(session);
        ctx.guard(self.plan(target, None, settings, ctx)).await
    }

    /// Runs `EXPLAIN ROUTE target`.
    ///
    /// # Errors
    /// See [`GatewayService::explain_plan`].
    pub(crate) async fn explain_route(
        &self,
        target: &Statement,
        session: &Session,
        ctx: &StatementContext,
    ) -> Result<QueryOutput> {
        let plan = self.explain_plan(target, session, ctx).await?;
        // The order as a run would take it now, without taking a retry that is due.
        let order = plan.order(&self.router, false);
        let mut rows = self.explain_rows(&plan, &order);
        if plan.route() != Route::Planner {
            let described = ctx.guard(self.planned(&plan)).await?;
            rows.extend(self.exactness_rows(&plan, &order, &described));
        }
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.0.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.1.as_str()),
                )),
            ],
        )
        .map_err(|e| lakegate_engines::Error::from(datafusion::error::DataFusionError::from(e)))?;
        Ok(QueryOutput::Rows {
            stream: batches_stream(batch.schema(), vec![batch]),
            tag: "EXPLAIN",
            encodings: None,
        })
    }

    /// What the statement relies on and is made of, and which candidates refuse it and why.
    fn exactness_rows(
        &self,
        plan: &Plan,
        order: &Order,
        described: &Described,
    ) -> Vec<(String, String)> {
        let join = |v: Vec<String>| v.join(", ");
        let mut rows = vec![
            (
                "features".to_string(),
                join(
                    described
                        .features
                        .iter()
                        .map(|f| format!("{f:?}"))
                        .collect(),
                ),
            ),
            (
                "constructs".to_string(),
                join(described.constructs.iter().cloned().collect()),
            ),
        ];
        let reads_system = plan.resolved.catalog || !plan.resolved.system_tables.is_empty();
        for name in &order.engines {
            if let Ok(engine) = self.engines.get(name)
                && let Some(why) = engine.declines(&plan.resolved.pins, reads_system)
            {
                rows.push((format!("declined by {name}"), why));
                continue;
            }
            if let Ok(engine) = self.engines.get(name)
                && !self.engines.is_planner(name)
                && let Some(why) =
                    crate::service::run::refusal(engine.as_ref(), described, &plan.settings)
            {
                rows.push((format!("refused by {name}"), why));
            }
        }
        rows
    }

    fn explain_rows(&self, plan: &Plan, order: &Order) -> Vec<(String, String)> {
        let p = &plan.profile;
        let d = &plan.decision;
        let g = &d.group;
        let tables = |v: &[(String, String)]| {
            v.iter()
                .map(|(s, t)| format!("{s}.{t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let bytes = plan.scan_bytes();
        let mut rows: Vec<(String, String)> = vec![
            ("shape".into(), p.shape.name().into()),
            ("tables".into(), tables(&p.tables)),
            ("filter_columns".into(), p.filter_columns.join(", ")),
            ("join_columns".into(), p.join_columns.join(", ")),
            ("group_columns".into(), p.group_columns.join(", ")),
            (
                "limit".into(),
                p.limit.map(|l| l.to_string()).unwrap_or_default(),
            ),
            (
                "scan_bytes".into(),
                format!("{bytes} ({})", bucket_name(size_bucket(bytes))),
            ),
            ("snapshots".into(), snapshot_list(&plan.resolved.pins, ", ")),
            (
                "rule".into(),
                match &d.rule {
                    Some(r) => r.clone(),
                    None => format!("(none: {})", d.reason.name()),
                },
            ),
            ("group".into(), g.name.clone()),
            (
                "group_limits".into(),
                format!(
                    "max_concurrent={} queue_length={} queue_timeout={:?} cache={} max_staleness={:?} explore={}",
                    g.max_concurrent,
                    g.queue_length,
                    g.queue_timeout,
                    g.cache,
                    g.max_staleness,
                    g.explore
                ),
            ),
        ];
        for (i, c) in order.candidates.iter().enumerate() {
            rows.push((
                format!("candidate {}", i + 1),
                format!(
                    "{} expected_ms={:.1} samples={} breaker={}",
                    c.engine, c.expected_ms, c.samples, c.breaker
                ),
            ));
        }
        // The first candidate that takes the statement (one that declines passes it on).
        let reads_system = plan.resolved.catalog || !plan.resolved.system_tables.is_empty();
        let takes = |name: &String| {
            self.engines.get(name).map_or(true, |e| {
                e.declines(&plan.resolved.pins, reads_system).is_none()
            })
        };
        let first = match plan.route() {
            Route::Routed => order.engines.iter().find(|n| takes(n)),
            _ => order.engines.first(),
        }
        .map_or("", String::as_str);
        let choice = match plan.route() {
            Route::Planner => format!(
                "{} (reads no lake table, or the catalog / lakegate tables)",
                self.engines.planner.name()
            ),
            Route::Pinned => format!("{first} (pinned by lakegate.engine)"),
            Route::Routed => format!(
                "{first}{}",
                match order.pick {
                    Pick::Best => "",
                    Pick::Explored => " (exploring)",
                    Pick::Retried => " (retrying: its observations are stale)",
                }
            ),
        };
        rows.push(("choice".into(), choice));
        rows
    }
}

/// What EXPLAIN ROUTE returns: (item, value) text rows.
pub(crate) fn described() -> Described {
    Described {
        param_types: vec![],
        features: Default::default(),
        constructs: Default::default(),
        schema: schema(),
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("item", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, false),
    ]))
}

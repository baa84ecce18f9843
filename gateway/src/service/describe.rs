//! What a planned query takes and returns, without running it: the embedded planner describes
//! the statement the engines will run (masks applied), at the plan's table versions. Every
//! other engine's answer is cast to this schema, so a client sees one type per column whichever
//! engine answered. Descriptions are cached by their full key (statement, versions, session):
//! a repeated Parse of an unchanged query (every pgbench or JDBC execution) skips planning.

use lakegate_engines::EngineRequest;
use lakegate_engines::engine::Described;

use super::GatewayService;
use super::output_names;
use super::plan::Plan;
use crate::error::Result;

impl GatewayService {
    /// The client's view of `plan`: parameter types and the result's columns, with
    /// PostgreSQL's output names.
    ///
    /// # Errors
    /// Planning errors of the statement.
    pub(crate) async fn description(&self, plan: &Plan) -> Result<Described> {
        let mut described = self.planned(plan).await?;
        if let Some(numeric) = &plan.rewrites.numeric {
            described.schema = numeric.describe(&described.schema);
        }
        if let Some(names) = &plan.rewrites.names {
            described.schema = output_names::rename_schema(&described.schema, names);
        }
        described.schema = plan.with_origins(&described.schema);
        Ok(described)
    }

    /// The planner's description of `plan`'s statement as the engines run it (before renaming
    /// to the output names): the schema every engine's answer is cast to, and the features
    /// an engine must reproduce to answer it.
    ///
    /// # Errors
    /// Planning errors of the statement.
    pub(crate) async fn planned(&self, plan: &Plan) -> Result<Described> {
        if let Some(kept) = plan.rewrites.planned() {
            return Ok(kept.clone());
        }
        let described = self
            .planned_statement(plan.runs(), &plan.resolved, &plan.settings)
            .await?;
        // Its rewrites are shared only at these versions and settings (system tables are
        // materialised per statement: not kept).
        if plan.resolved.system_tables.is_empty() {
            plan.rewrites.keep_planned(&described);
        }
        Ok(described)
    }

    /// The planner's description of `statement` at `resolved` for `settings` (cached).
    ///
    /// # Errors
    /// Planning errors of the statement.
    pub(crate) async fn planned_statement(
        &self,
        statement: &datafusion::sql::sqlparser::ast::Statement,
        resolved: &super::plan::Resolved,
        settings: &lakegate_engines::Settings,
    ) -> Result<Described> {
        // System tables change on every read: their descriptions are not kept.
        let key = resolved
            .system_tables
            .is_empty()
            .then(|| self.cache.key(statement, None, &resolved.pins, settings));
        if let Some(k) = &key
            && let Some(hit) = self.described.get(k).await
        {
            return Ok(hit);
        }
        let request = EngineRequest {
            statement,
            params: None,
            pins: &resolved.pins,
            settings,
            system_tables: &resolved.system_tables,
            promised: None,
            lists_catalog: resolved.catalog,
        };
        let described = self.engines.planner.describe(request).await?;
        if let Some(k) = key {
            self.described.insert(k, described.clone()).await;
        }
        Ok(described)
    }
}

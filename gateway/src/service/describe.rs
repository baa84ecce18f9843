//! What a planned query takes and returns, without running it: the embedded planner describes
//! the statement the engines will run (masks applied), at the plan's table versions. Every
//! other engine's answer is cast to this schema, so a client sees one type per column whichever
//! engine answered. Descriptions are cached by their full key (statement, versions, session):
//! a repeated Parse of an unchanged query (every pgbench or JDBC execution) skips planning.
//!
//! A Parse of a statement whose plan is kept for the session's settings, at versions that are
//! still current, answers the client's description the kept plan was last described with
//! ([`GatewayService::described_kept`]): no estimate, no decision, no renaming. The estimate
//! and the decision only refuse (or route) an execution; a Parse's estimate has no values to
//! bound it by, except a lifted text's, so a group with a scan cap always decides again.

use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::engine::Described;
use lakegate_engines::{EngineRequest, Settings};

use super::output_names;
use super::plan::Plan;
use super::rewrites::ClientDescribed;
use super::{GatewayService, StatementContext};
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
        if plan.resolved.system_tables.is_empty() {
            plan.rewrites.keep_described(ClientDescribed {
                attributes: plan.mirror.as_ref().map(|db| db.attributes()),
                described: described.clone(),
            });
        }
        Ok(described)
    }

    /// The client's description of `runs` from its kept plan (see the module documentation),
    /// when one is kept for `settings` at the versions current now, was described before with
    /// the mirror's current attributes, and its group caps no scan; `None`: plan it.
    ///
    /// # Errors
    /// Resolving the tables' versions.
    pub(crate) async fn described_kept(
        &self,
        runs: &Statement,
        settings: &Settings,
        ctx: &StatementContext,
    ) -> Result<Option<Described>> {
        let routing = self.router.table();
        let interned = self.tree_of(runs, ctx);
        let Some((kept, r)) = self
            .kept_resolved(interned.tree(), settings, ctx, &routing)
            .await?
        else {
            return Ok(None);
        };
        let Some(memo) = kept.rewrites.described() else {
            return Ok(None);
        };
        if kept.chosen.group.max_scan_bytes > 0 || !kept.at(&r.pins) {
            return Ok(None);
        }
        // Origins are read from the mirror database the plan would number them in.
        let attributes = match (&kept.rewrites.origins, &self.mirror) {
            (Some(_), Some(mirror)) => Some(mirror.database(&settings.database).await.attributes()),
            _ => None,
        };
        let same = match (&attributes, &memo.attributes) {
            (None, None) => true,
            (Some(now), Some(then)) => std::sync::Arc::ptr_eq(now, then),
            _ => false,
        };
        if !same {
            return Ok(None);
        }
        self.kept.count_reused();
        Ok(Some(memo.described))
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

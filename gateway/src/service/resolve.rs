//! The I/O between a plan's decisions ([`super::plan`]): resolving the tables a statement
//! reads to their current versions (the batch's, within an extended-protocol batch) and
//! estimating the bytes it scans, pruned by its WHERE where that can matter.

use std::ops::ControlFlow;

use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast::{Expr, Statement, Value, visit_expressions};
use lakegate_engines::Pins;
use lakegate_engines::lake::estimate;

use super::plan::{Chosen, Estimate, Resolved};
use super::{GatewayService, StatementContext};
use crate::classify::References;
use crate::error::Result;
use crate::security::mask::Masked;

impl GatewayService {
    /// The scan estimate of `statement` against the smaller of the group's cap and the
    /// caller's own threshold (0: none), with this user's masked columns left out.
    pub(super) async fn estimate_for(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        pins: &Pins,
        chosen: &Chosen,
        ctx: &StatementContext,
    ) -> Estimate {
        let cap = match (chosen.group.max_scan_bytes, ctx.prune_above) {
            (0, own) => own,
            (group, 0) => group,
            (group, own) => group.min(own),
        };
        let masks = self.security.masks_of(&ctx.user);
        self.scan_estimate(statement, params, pins, cap, &masks)
            .await
    }

    /// Resolves every lake table in `refs` to its current version (reusing versions younger
    /// than `max_staleness`; zero: the lake's configured staleness) and materialises the
    /// system tables they read. A statement of an extended-protocol batch uses the versions its
    /// Parse resolved ([`super::batch`]).
    pub(super) async fn resolve(
        &self,
        refs: &References,
        max_staleness: std::time::Duration,
        ctx: &StatementContext,
    ) -> Result<Resolved> {
        let mut pins = Pins::default();
        for (schema, table) in &refs.lake {
            if let Some(kept) = ctx.batch.kept(schema, table) {
                pins.insert(schema, table, kept);
                continue;
            }
            let resolved = if max_staleness.is_zero() {
                self.lake.resolve(schema, table).await?
            } else {
                self.lake
                    .resolve_within(schema, table, max_staleness)
                    .await?
            };
            ctx.batch.keep(schema, table, &resolved);
            pins.insert(schema, table, resolved);
        }
        Ok(Resolved {
            pins,
            system_tables: self.system_tables(&refs.system, &ctx.user).await?,
            catalog: refs.catalog,
        })
    }

    /// The bytes a query scans: the pinned snapshots' data files, pruned by the WHERE of a
    /// single-table query (parameters bound) when that can matter — past the smallest size
    /// bucket, or against a scan cap. Cached per table version and filter; planning is capped
    /// at 50 ms, else the unpruned size stands.
    ///
    /// Masked columns are left out of the pruning: a clear value the user cannot see must not
    /// change what the estimate (and a guardrail's message) says.
    async fn scan_estimate(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        pins: &Pins,
        cap: u64,
        masks: &Masked,
    ) -> Estimate {
        let where_ = crate::profile::top_where(statement);
        let bound = params.is_some() || !where_.is_some_and(has_placeholders);
        let total: u64 = pins.iter().map(|(_, t)| estimate::total_bytes(t)).sum();
        let unpruned = Estimate {
            bytes: total,
            bound,
        };
        let mut tables = pins.iter();
        let (Some(((ns, name), table)), None) = (tables.next(), tables.next()) else {
            return unpruned;
        };
        // Small tables cannot change the size bucket; prune them only against a scan cap.
        if crate::routing::stats::size_bucket(total) == 0 && (cap == 0 || total <= cap) {
            return unpruned;
        }
        let schema = table.table.metadata().current_schema();
        let visible = match crate::security::mask::hidden(masks, ns, name) {
            Some(hidden) => match crate::security::mask::without(schema, hidden) {
                Some(visible) => Some(visible),
                None => return unpruned,
            },
            None => None,
        };
        let Some(filter) = where_.and_then(|w| {
            let w = crate::profile::bind_parameters(w, params);
            estimate::predicate(&w, visible.as_ref().unwrap_or(schema))
        }) else {
            return unpruned;
        };
        // Boxed: reading manifests holds far more state than the early answers above, and
        // inline it would be part of (and copied with) every plan's future.
        Box::pin(self.pruned_estimate(table, filter, unpruned)).await
    }

    /// `table`'s bytes the pruning `filter` leaves (kept per version and filter), else
    /// `unpruned` when they cannot be read within 50 ms.
    async fn pruned_estimate(
        &self,
        table: &lakegate_engines::ResolvedTable,
        filter: iceberg::expr::Predicate,
        unpruned: Estimate,
    ) -> Estimate {
        let bound = unpruned.bound;
        let key = format!("{}\u{0}{filter}", table.metadata_location);
        if let Some(bytes) = self.estimates.get(&key).await {
            return Estimate { bytes, bound };
        }
        match tokio::time::timeout(
            std::time::Duration::from_millis(50),
            estimate::pruned_bytes(table, filter),
        )
        .await
        {
            Ok(Ok(bytes)) => {
                self.estimates.insert(key, bytes).await;
                Estimate { bytes, bound }
            }
            _ => unpruned,
        }
    }
}

/// Whether `expr` has a `$n` placeholder.
fn has_placeholders(expr: &Expr) -> bool {
    visit_expressions(expr, |e| match e {
        Expr::Value(v) if matches!(v.value, Value::Placeholder(_)) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

//! Table versions shared by the Parse and the Execute of one batch of extended-protocol
//! messages, so that a statement sent as Parse/Bind/Describe/Execute/Sync (pgbench, every
//! driver's unnamed statements) asks the catalog for its tables' versions once, not twice.
//!
//! Exactness: a Parse answers only ParseComplete, so between a Parse and the Execute that
//! follows it in the same batch the client has received nothing it could have acted on. A
//! commit landing in between was not known to the client when it sent the Execute; reading
//! the version current at the Parse is an answer PostgreSQL could have given too. So the
//! versions are kept only in that window: a Parse fills them, the next Execute reads them, and
//! they are dropped at the end of every Execute (its rows may have reached the client), at
//! Sync and Flush, and at a simple query.
//!
//! The plan the Parse found kept for its statement is held in the same window: the Execute of
//! that statement takes it from here when it is asked for the same settings, context and
//! routing table, instead of looking it up again (its versions are checked as ever).

use std::sync::{Arc, Mutex};

use lakegate_engines::{ResolvedTable, Settings};

use super::StatementContext;
use super::kept::Kept;
use super::weight::Tree;
use crate::routing::rules::RoutingTable;

/// The versions a Parse resolved, as `(schema, table, version)` (a batch reads a few tables:
/// found by a scan, with no key built per lookup), and the plan it found kept.
#[derive(Default)]
pub struct BatchVersions(Mutex<Held>);

#[derive(Default)]
struct Held {
    versions: Vec<(String, String, ResolvedTable)>,
    plan: Option<(Tree, Arc<Kept>)>,
}

impl std::fmt::Debug for BatchVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchVersions").finish_non_exhaustive()
    }
}

impl BatchVersions {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The version kept for `schema.table`, if the batch's Parse resolved it.
    pub fn get(&self, schema: &str, table: &str) -> Option<ResolvedTable> {
        self.held()
            .versions
            .iter()
            .find(|(s, t, _)| s == schema && t == table)
            .map(|(_, _, v)| v.clone())
    }

    /// Keeps `version` of `schema.table` for the rest of the batch.
    pub fn put(&self, schema: &str, table: &str, version: ResolvedTable) {
        let kept = &mut self.held().versions;
        match kept.iter_mut().find(|(s, t, _)| s == schema && t == table) {
            Some(slot) => slot.2 = version,
            None => kept.push((schema.to_string(), table.to_string(), version)),
        }
    }

    /// Drops every kept version: the client may have seen an answer since.
    pub fn clear(&self) {
        let mut held = self.held();
        held.versions.clear();
        held.plan = None;
    }
}

/// How a statement uses its connection's batch versions.
#[derive(Debug, Clone)]
pub enum Batch {
    /// It resolves every table from the catalog (Flight SQL, in-process, simple queries).
    None,
    /// A Parse: it resolves from the catalog and keeps what it resolved.
    Fill(Arc<BatchVersions>),
    /// An Execute: it uses what the batch's Parse kept, resolving the rest.
    Use(Arc<BatchVersions>),
}

impl Batch {
    /// The kept version of `schema.table` (never for [`Batch::None`]).
    pub fn kept(&self, schema: &str, table: &str) -> Option<ResolvedTable> {
        match self {
            Self::None => None,
            Self::Fill(v) | Self::Use(v) => v.get(schema, table),
        }
    }

    /// Keeps `version` when this statement is a Parse.
    pub fn keep(&self, schema: &str, table: &str, version: &ResolvedTable) {
        if let Self::Fill(v) = self {
            v.put(schema, table, version.clone());
        }
    }

    /// The plan the batch's Parse found kept for the statement interned as `tree`, when it
    /// was made for exactly these settings, context and routing table (an Execute only).
    pub(super) fn kept_plan(
        &self,
        tree: &Tree,
        settings: &Settings,
        ctx: &StatementContext,
        routing: &Arc<RoutingTable>,
    ) -> Option<Arc<Kept>> {
        let Self::Use(v) = self else {
            return None;
        };
        let held = v.held();
        let (parsed, kept) = held.plan.as_ref()?;
        (parsed == tree && kept.made_for(settings, ctx, routing)).then(|| kept.clone())
    }

    /// Holds `kept`, found for the statement interned as `tree`, when this statement is a
    /// Parse.
    pub(super) fn keep_plan(&self, tree: &Tree, kept: &Arc<Kept>) {
        if let Self::Fill(v) = self {
            v.held().plan = Some((tree.clone(), kept.clone()));
        }
    }
}

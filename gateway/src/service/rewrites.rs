//! What a statement runs as ([`Rewrites`]): the statement with PostgreSQL's output names, its
//! masked and numeric rewrites and where its output columns come from, fixed for its text,
//! session settings and table versions, with what is made from them once and kept while they
//! hold: the interned tree, the planner's and the client's descriptions, the printed text and
//! the last annotated schema. A kept plan ([`super::kept`]) shares one with every plan of it.

use std::sync::{Arc, OnceLock};

use arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::Statement;
use lakegate_engines::engine::Described;

use super::weight::Interned;
use crate::mirror::database::Attributes;

/// What a statement runs as, fixed for its text, session settings and table versions: kept
/// and shared by every plan of it while those stay the same ([`super::kept`]).
#[derive(Debug)]
pub struct Rewrites {
    /// The statement with PostgreSQL's output names (what the profile and heat read).
    pub statement: Statement,
    /// The same with this user's masked columns hashed (`None`: nothing it reads is masked).
    pub masked: Option<Statement>,
    /// The names the result carries (when aliases were added).
    pub names: Option<Vec<String>>,
    /// The output columns computed as PostgreSQL's numeric division, from hidden operand
    /// columns (see [`super::numeric`]).
    pub numeric: Option<super::numeric::NumericOutputs>,
    /// The statement with those operands selected too (what runs when `numeric` is set).
    pub operands: Option<Statement>,
    /// Where output columns come from (PostgreSQL clients with a catalog mirror).
    pub origins: Option<super::origins::Origins>,
    /// What runs, interned for cache keys (made at the first key).
    tree: OnceLock<Interned>,
    /// The planner's description of what runs (made at the first Describe).
    planned: OnceLock<Described>,
    /// The client's description (output names, numeric outputs and origins applied) and the
    /// mirror's attributes its origins were read from: what a Parse of the kept plan answers
    /// ([`super::GatewayService::described_kept`]).
    described: std::sync::Mutex<Option<ClientDescribed>>,
    /// The statement as the client wrote it, printed (for the history; at its first use).
    text: OnceLock<String>,
    /// Whether what runs calls no volatile function (its answer may be cached; at the first
    /// cache lookup).
    deterministic: OnceLock<bool>,
    /// The last schema [`super::plan::Plan::with_origins`] annotated: the mirror's attributes it read, the
    /// schema and the annotated schema (a kept plan's executions annotate the same schema).
    annotated: std::sync::Mutex<Option<Annotated>>,
}

/// A client's description of a kept plan, and the mirror's attributes it was annotated from
/// (`None`: no origins were read).
#[derive(Debug, Clone)]
pub(crate) struct ClientDescribed {
    pub(crate) attributes: Option<Arc<Attributes>>,
    pub(crate) described: Described,
}

/// A result schema with its columns' catalog places, and what they were read from.
#[derive(Debug)]
struct Annotated {
    attributes: Arc<Attributes>,
    schema: SchemaRef,
    annotated: SchemaRef,
}

impl Rewrites {
    /// `statement` as written (output names applied), with its masked rewrite.
    pub fn new(
        statement: Statement,
        masked: Option<Statement>,
        names: Option<Vec<String>>,
    ) -> Self {
        Self {
            statement,
            masked,
            names,
            numeric: None,
            operands: None,
            origins: None,
            tree: OnceLock::new(),
            planned: OnceLock::new(),
            described: std::sync::Mutex::new(None),
            text: OnceLock::new(),
            deterministic: OnceLock::new(),
            annotated: std::sync::Mutex::new(None),
        }
    }

    /// `written` printed: the statement these rewrites were made from (a kept plan serves
    /// only statements equal to it, so it is printed once per plan, not per execution).
    pub fn text(&self, written: &Statement) -> &str {
        self.text.get_or_init(|| written.to_string())
    }

    /// What engines run and the cache keys on.
    pub fn runs(&self) -> &Statement {
        self.operands
            .as_ref()
            .or(self.masked.as_ref())
            .unwrap_or(&self.statement)
    }

    /// Whether what runs calls no function whose answer changes by itself (see
    /// [`super::cache::ResultCache::is_deterministic`]), decided once per kept plan.
    pub(crate) fn deterministic(&self) -> bool {
        *self
            .deterministic
            .get_or_init(|| super::cache::ResultCache::is_deterministic(self.runs()))
    }

    /// What runs, interned by `intern` the first time it is asked for.
    pub(crate) fn tree(&self, intern: impl FnOnce(&Statement) -> Interned) -> Interned {
        self.tree.get_or_init(|| intern(self.runs())).clone()
    }

    /// The planner's description of what runs, kept once made.
    pub(crate) fn planned(&self) -> Option<&Described> {
        self.planned.get()
    }

    /// Keeps the planner's description of what runs.
    pub(crate) fn keep_planned(&self, described: &Described) {
        let _ = self.planned.set(described.clone());
    }

    /// The client's description kept by [`Self::keep_described`].
    pub(crate) fn described(&self) -> Option<ClientDescribed> {
        self.described
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Keeps the client's description (the last one made: the mirror's attributes move on).
    pub(crate) fn keep_described(&self, described: ClientDescribed) {
        *self.described.lock().unwrap_or_else(|p| p.into_inner()) = Some(described);
    }

    /// `schema` with its columns' catalog places read from `attributes` (the mirror
    /// database's), when these rewrites know where output columns come from; the last schema
    /// annotated is kept (a kept plan's executions annotate the same schema).
    pub(crate) fn annotate(&self, schema: &SchemaRef, attributes: Arc<Attributes>) -> SchemaRef {
        let Some(origins) = &self.origins else {
            return schema.clone();
        };
        let mut last = self.annotated.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = last.as_ref()
            && Arc::ptr_eq(&a.attributes, &attributes)
            && (Arc::ptr_eq(&a.schema, schema) || a.schema == *schema)
        {
            return a.annotated.clone();
        }
        let annotated = super::origins::annotate(schema, origins, |s, t, c| {
            attributes.get(s)?.get(t)?.get(c).copied()
        });
        *last = Some(Annotated {
            attributes,
            schema: schema.clone(),
            annotated: annotated.clone(),
        });
        annotated
    }
}

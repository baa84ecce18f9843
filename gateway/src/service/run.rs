//! Running a plan: inside its group's admission slots (lake queries), on the first engine that
//! answers — an engine that fails for its own reasons (unreachable, broken) before its first
//! batch is recorded against it and the next candidate is tried — then the group's result
//! limits on the stream, and the router told how long it took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use lakegate_engines::{EngineRef, EngineRequest, ErrorKind, Started};
use tracing::{debug, warn};

use super::GatewayService;
use super::output_names;
use super::plan::{Plan, Route};
use crate::error::{Error, Result};
use crate::profile::Shape;
use crate::routing::admission::Slot;
use crate::routing::rules::GroupSpec;
use crate::routing::{Outcome, Router};

/// A plan's answer as its engine started to give it.
pub(crate) struct Ran {
    /// The rows, under PostgreSQL's output names.
    pub stream: SendableRecordBatchStream,
    /// The engine that answers.
    pub engine: String,
    /// How long the plan waited in its group's queue for a slot.
    pub queued: Duration,
}

impl GatewayService {
    /// Runs `plan` with `params`: the stream (PostgreSQL's output names), the engine that
    /// answers and the time the plan waited for a slot.
    ///
    /// # Errors
    /// A full group (53300), the last engine's error when none could answer.
    pub(crate) fn run<'a>(
        &'a self,
        plan: &'a Plan,
        params: Option<&'a ParamValues>,
        query_id: u64,
    ) -> futures::future::BoxFuture<'a, Result<Ran>> {
        // Boxed and erased: the engine's future is large, and inline it would be part of every
        // cache lookup's state (hits included), copied whole into the statement's guard.
        Box::pin(self.run_boxed(plan, params, query_id))
    }

    async fn run_boxed(
        &self,
        plan: &Plan,
        params: Option<&ParamValues>,
        query_id: u64,
    ) -> Result<Ran> {
        let mut slot = match plan.route() {
            Route::Planner => None,
            Route::Pinned | Route::Routed => {
                Some(self.router.admission(&plan.decision.group).enter().await?)
            }
        };
        let queued = slot.as_ref().map_or(Duration::ZERO, Slot::waited);
        // Its snapshots stay unexpired until its last row (see lakegate_maintenance::readers).
        let mut reading = Some(
            self.maintainer.readers().hold(
                plan.resolved
                    .pins
                    .iter()
                    .filter_map(|((schema, table), t)| {
                        t.snapshot_id.map(|id| (format!("{schema}.{table}"), id))
                    })
                    .collect(),
            ),
        );
        let (shape, bytes) = (plan.profile.shape, plan.scan_bytes());
        let routed = plan.route() == Route::Routed;
        // Ordered only now: a cached answer never gets here, so it consults no router.
        let engines = plan.engines(&self.router);
        let count = engines.len();
        let mut planned = None;
        let mut last: Option<Error> = None;
        let mut declined: Option<Error> = None;
        let reads_system = plan.resolved.catalog || !plan.resolved.system_tables.is_empty();
        for (i, name) in engines.iter().enumerate() {
            let engine = self.engines.get(name)?;
            let name = name.clone();
            let is_planner = self.engines.is_planner(&name);
            let more = i + 1 < count;
            if routed && more && !self.router.stats.admit(&name) {
                debug!(engine = %name, "breaker open: skipped");
                continue;
            }
            if let Some(why) = engine.declines(&plan.resolved.pins, reads_system) {
                debug!(engine = %name, why = %why, "engine declines: next candidate");
                engine.record_declined();
                let error = Error::Declined {
                    engine: name.clone(),
                    why,
                };
                if !routed {
                    return Err(error);
                }
                declined.get_or_insert(error);
                continue;
            }
            if !is_planner && planned.is_none() {
                planned = Some(self.planned(plan).await?);
            }
            if !is_planner
                && let Some(what) = planned
                    .as_ref()
                    .and_then(|d| refusal(engine.as_ref(), d, &plan.settings))
            {
                debug!(engine = %name, what = %what, "engine refuses: not PostgreSQL's answer");
                let refused = Error::Inexact {
                    engine: name.clone(),
                    what,
                };
                if !routed {
                    return Err(refused);
                }
                last.get_or_insert(refused);
                continue;
            }
            let request = EngineRequest {
                statement: plan.runs(),
                params,
                pins: &plan.resolved.pins,
                settings: &plan.settings,
                system_tables: &plan.resolved.system_tables,
                promised: if is_planner {
                    None
                } else {
                    planned.as_ref().map(|d| &d.schema)
                },
                lists_catalog: plan.resolved.catalog,
            };
            let mut started = Instant::now();
            // A statement that also sets the engine up (DuckDB's opening) teaches the router
            // nothing about the engine's speed.
            let learn = engine.ready();
            let outcome = match execute_on(engine, request, plan.rewrites.names.as_deref()).await {
                Ok((stream, planning)) => {
                    // The router learns the engine's work, not DataFusion's planning (see
                    // `Started::planning`).
                    started += planning;
                    first_batch(stream).await
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(stream) => {
                    let held = Held {
                        router: self.router.clone(),
                        engine: name.clone(),
                        shape,
                        bytes,
                        started,
                        learn,
                        _slot: slot.take(),
                        _reading: reading.take(),
                    };
                    return Ok(Ran {
                        stream: tracked(stream, held),
                        engine: name,
                        queued,
                    });
                }
                Err(e) if engine_fault(e.kind()) => {
                    let outcome = match &e {
                        Error::Engine(lakegate_engines::Error::EngineUnreachable { .. }) => {
                            Outcome::Unreachable
                        }
                        _ => Outcome::Failed,
                    };
                    self.router.record(&name, shape, bytes, outcome);
                    if routed && more {
                        warn!(
                            query_id,
                            engine = %name,
                            error = %e,
                            "engine failed before answering: failing over"
                        );
                    }
                    last = Some(e);
                    if !routed {
                        break;
                    }
                }
                // The planner accepted this statement, so another engine refusing it is a gap
                // in that engine's SQL, not the client's mistake: let the next candidate try.
                // So is the planner failing to plan its own execution of a statement it
                // described (DataFusion's decorrelation of two scalar subqueries).
                Err(e)
                    if routed
                        && more
                        && (!is_planner
                            || matches!(e.kind(), ErrorKind::Syntax | ErrorKind::Unsupported)) =>
                {
                    debug!(engine = %name, error = %e, "engine refused a planned statement: next candidate");
                    last.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.or(declined).unwrap_or_else(|| {
            Error::Engine(lakegate_engines::Error::EngineUnavailable {
                engine: plan.decision.group.name.clone(),
                reason: "no engine of the group could take the query".into(),
            })
        }))
    }

    /// `stream` ending with an error (54000) once it passes the group's `max_rows` or the
    /// result byte limit (the group's `max_result_bytes` or `[limits]`, the smaller): the
    /// client gets the rows before the limit, then the error; the connection stays usable.
    pub(crate) fn limited(
        &self,
        stream: SendableRecordBatchStream,
        group: &GroupSpec,
    ) -> SendableRecordBatchStream {
        let global = self.security.max_result_bytes;
        let bytes_limit = match (group.max_result_bytes, global) {
            (0, global) => global,
            (mine, 0) => mine,
            (mine, global) => mine.min(global),
        };
        let rows_limit = group.max_rows;
        if rows_limit == 0 && bytes_limit == 0 {
            return stream;
        }
        let name = group.name.clone();
        let schema = stream.schema();
        let exceeded = move |what: String| {
            lakegate_engines::Error::Engine {
                engine: "lakegate".into(),
                kind: ErrorKind::LimitExceeded,
                message: what,
            }
            .into_datafusion()
        };
        let state = (Some(stream), 0u64, 0u64);
        let limited = futures::stream::unfold(state, move |(s, rows, bytes)| {
            let name = name.clone();
            async move {
                let mut s = s?;
                let b = match s.next().await? {
                    Ok(b) => b,
                    Err(e) => return Some((Err(e), (None, rows, bytes))),
                };
                let rows = rows + b.num_rows() as u64;
                let bytes = bytes + batch_bytes(&b);
                let over = if rows_limit > 0 && rows > rows_limit {
                    Some(format!(
                        "the result passed routing group \"{name}\"'s max_rows ({rows_limit}): \
                         add a LIMIT, a filter or an aggregate"
                    ))
                } else if bytes_limit > 0 && bytes > bytes_limit {
                    Some(format!(
                        "the result passed the max_result_bytes limit ({}) of routing group \
                         \"{name}\": select fewer columns or rows, or aggregate",
                        lakegate_engines::units::human_bytes(bytes_limit)
                    ))
                } else {
                    None
                };
                Some(match over {
                    Some(why) => (Err(exceeded(why)), (None, rows, bytes)),
                    None => (Ok(b), (Some(s), rows, bytes)),
                })
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, limited.fuse()))
    }
}

/// The bytes of a batch's values (slices count only what they cover).
fn batch_bytes(batch: &arrow::array::RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

/// The first of `features` an engine reproducing all but `inexact` cannot answer exactly.
/// Whether engines answer statements with constructs they were not verified for: only to
/// verify them (`tests/conformance/verified.py`), with `LAKEGATE_UNVERIFIED_CONSTRUCTS=1` in
/// the gateway's environment.
fn answer_unverified() -> bool {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| std::env::var("LAKEGATE_UNVERIFIED_CONSTRUCTS").is_ok_and(|v| v == "1"))
}

/// Why `engine` refuses a statement `described` so, for a session with `settings` (`None`: it
/// may answer): a PostgreSQL behaviour it does not reproduce, or a construct it has not been
/// verified for ([`lakegate_engines::constructs`]).
pub(crate) fn refusal(
    engine: &dyn lakegate_engines::Engine,
    described: &lakegate_engines::engine::Described,
    settings: &lakegate_engines::Settings,
) -> Option<String> {
    if let Some(feature) = described
        .features
        .iter()
        .find(|f| engine.refuses(**f, settings))
    {
        return Some(feature.describe().to_string());
    }
    let verified = engine.verified().filter(|_| !answer_unverified())?;
    described
        .constructs
        .iter()
        .find(|c| !verified.contains(&c.as_str()))
        .map(|c| format!("{c} (not verified on it against PostgreSQL)"))
}

/// Whether an error of this kind is the engine's fault (unreachable, broken) rather than the
/// statement's: only those count against an engine and fail over.
pub(crate) fn engine_fault(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Unavailable | ErrorKind::Internal)
}

/// Polls the first batch, so that an engine failing at the start fails here (and can be
/// failed over) rather than in the client's stream.
async fn first_batch(mut stream: SendableRecordBatchStream) -> Result<SendableRecordBatchStream> {
    let schema = stream.schema();
    match stream.next().await {
        Some(Err(e)) => Err(Error::Engine(e.into())),
        Some(Ok(batch)) => {
            let rest = futures::stream::once(async move { Ok(batch) }).chain(stream);
            Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rest)))
        }
        None => Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::empty(),
        ))),
    }
}

/// What a running query holds until its stream ends: the group slot, and what to tell the
/// router.
struct Held {
    router: Arc<Router>,
    engine: String,
    shape: Shape,
    bytes: u64,
    /// When the engine began its work (after DataFusion's planning).
    started: Instant,
    /// Report the latency (not for a statement that also set the engine up).
    learn: bool,
    _slot: Option<Slot>,
    /// The snapshots it reads, kept from expiry.
    _reading: Option<lakegate_maintenance::readers::ReadGuard>,
}

/// Reports the query's latency (to the last batch) or engine failure to the router, and holds
/// the group slot until the stream ends or is dropped. Fused: polled after its end, it stays
/// ended.
fn tracked(stream: SendableRecordBatchStream, held: Held) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let rows = futures::stream::unfold((stream, Some(held)), |(mut stream, mut held)| async move {
        match stream.next().await {
            Some(Ok(b)) => Some((Ok(b), (stream, held))),
            Some(Err(e)) => {
                if let Some(h) = held.take()
                    && engine_fault(lakegate_engines::error::datafusion_kind(&e))
                {
                    h.router
                        .record(&h.engine, h.shape, h.bytes, Outcome::Failed);
                }
                Some((Err(e), (stream, held)))
            }
            None => {
                if let Some(h) = held.take()
                    && h.learn
                {
                    let ms = h.started.elapsed().as_secs_f64() * 1000.0;
                    h.router
                        .record(&h.engine, h.shape, h.bytes, Outcome::Answered(ms));
                }
                None
            }
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, rows.fuse()))
}

/// Runs a request on `engine`, with PostgreSQL's output column names; with the time its
/// planning took ([`lakegate_engines::Started::planning`]).
async fn execute_on(
    engine: &EngineRef,
    request: EngineRequest<'_>,
    names: Option<&[String]>,
) -> Result<(SendableRecordBatchStream, Duration)> {
    let Started { stream, planning } = engine.start(request).await?;
    let stream = match names {
        Some(names) => output_names::rename_stream(stream, names),
        None => stream,
    };
    Ok((stream, planning))
}

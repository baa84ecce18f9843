//! One query, end to end: recorded in the history, planned, answered from the result cache
//! or run (single flight: identical concurrent misses run once), limited by its group, and
//! bounded by the statement's cancel token and deadline.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::Statement;
use futures::StreamExt;

use super::cache::{CacheOutcome, CachedResult, ResultCache, Uncached};
use super::encodings::Encodings;
use super::output_names;
use super::plan::Plan;
use super::run::Ran;
use super::{GatewayService, StatementContext};
use crate::error::{Error, Result};
use crate::observe::history::PendingQuery;
use crate::session::Session;

/// A plan's rows as the cache or an engine gives them.
struct Answer {
    stream: SendableRecordBatchStream,
    /// The engine that computed them (empty when another caller did).
    engine: String,
    outcome: CacheOutcome,
    /// How long this caller's run waited for a slot of its group.
    queued: Duration,
    /// Where a frontend may keep their encoding, when they are a cached result's.
    encodings: Option<Arc<Encodings>>,
}

impl Answer {
    fn ran(ran: Ran, outcome: CacheOutcome) -> Self {
        Self {
            stream: ran.stream,
            engine: ran.engine,
            outcome,
            queued: ran.queued,
            encodings: None,
        }
    }
}

/// A query's rows, streamed, and where a frontend may keep their encoding (a cached
/// result's: [`super::encodings`]).
pub(crate) struct Rows {
    pub stream: SendableRecordBatchStream,
    pub encodings: Option<Arc<Encodings>>,
}

/// How long a query's rows are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// By the statement itself: its cancel and deadline end them.
    Statement,
    /// By later `FETCH`es of a cursor, each under its own cancel and deadline.
    Cursor,
}

impl GatewayService {
    /// Runs one query for `session`: its rows, streamed. `lifted_from` is the statement as
    /// the client wrote it when `statement` is its template with the literals lifted out
    /// ([`lakegate_sql::lift`]): the history shows what the client sent.
    ///
    /// # Errors
    /// Anything planning or running it fails with (also recorded in the history).
    pub(crate) async fn query(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        lifted_from: Option<&Statement>,
        session: &Session,
        ctx: &StatementContext,
        reading: Reading,
    ) -> Result<Rows> {
        // The text is the plan's (printed once per kept plan), or printed here on a failure.
        let mut pending = self.history.start(ctx, String::new());
        if let Some(written) = lifted_from {
            match &ctx.text {
                Some(text) => pending.set_sql(text.trim().trim_end_matches(';').trim_end()),
                None => pending.set_sql(&written.to_string()),
            }
        }
        match self
            .answer(statement, params, session, ctx, reading, &mut pending)
            .await
        {
            Ok(Rows { stream, encodings }) => Ok(Rows {
                stream: pending.track(self.history.clone(), stream),
                encodings,
            }),
            Err(e) => {
                if pending.record.sql.is_empty() {
                    pending.set_sql(&lifted_from.unwrap_or(statement).to_string());
                }
                pending.fail(&self.history, &e.to_string());
                Err(e)
            }
        }
    }

    async fn answer(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &Session,
        ctx: &StatementContext,
        reading: Reading,
        pending: &mut PendingQuery,
    ) -> Result<Rows> {
        let started = Instant::now();
        let settings = self.engine_settings(session);
        let plan = ctx
            .guard(self.plan(statement, params, settings, ctx))
            .await?;
        if pending.record.sql.is_empty() {
            pending.set_sql(plan.rewrites.text(statement));
        }
        let r = &mut pending.record;
        r.snapshots = super::snapshot_list(&plan.resolved.pins, ",");
        r.shape = Some(plan.profile.shape);
        r.scan_bytes = plan.scan_bytes();
        r.group = plan.decision.group.name.clone();
        r.route = Some(plan.route());
        let planned_us = started.elapsed().as_micros() as u64;
        let Answer {
            stream,
            engine,
            outcome,
            queued,
            encodings,
        } = ctx
            .guard(self.cached_or_run(&plan, params, ctx.query_id))
            .await?;
        pending.observation = self.observation(&plan, params, outcome != CacheOutcome::Hit);
        tracing::debug!(
            group = plan.decision.group.name.as_str(),
            route = plan.route().name(),
            engine = engine.as_str(),
            cache = outcome.name(),
            plan_us = planned_us,
            queued_us = queued.as_micros() as u64,
            first_batch_us = started.elapsed().as_micros() as u64,
            "answering"
        );
        pending.record.engine = engine;
        pending.record.cache = outcome;
        pending.record.queued_ms = queued.as_secs_f64() * 1000.0;
        let stream = match &plan.rewrites.numeric {
            Some(numeric) => numeric.apply(stream),
            None => stream,
        };
        let annotated = plan.with_origins(&stream.schema());
        let stream = output_names::with_schema(stream, annotated);
        let rows = self.limited(stream, &plan.decision.group);
        let stream = match reading {
            Reading::Statement => ctx.bound(rows),
            Reading::Cursor => rows,
        };
        Ok(Rows { stream, encodings })
    }

    /// The plan's answer from the cache when it may be cached, else run.
    async fn cached_or_run(
        &self,
        plan: &Plan,
        params: Option<&ParamValues>,
        query_id: u64,
    ) -> Result<Answer> {
        let pins = &plan.resolved.pins;
        let cacheable = plan.decision.group.cache
            && plan.resolved.system_tables.is_empty()
            && ResultCache::cacheable(&plan.rewrites, pins);
        if !self.cache.enabled() || !cacheable {
            self.cache.bypass();
            let outcome = if self.cache.enabled() {
                CacheOutcome::Bypass
            } else {
                CacheOutcome::Off
            };
            return Ok(Answer::ran(
                self.run(plan, params, query_id).await?,
                outcome,
            ));
        }
        let interned = plan.rewrites.tree(|s| self.cache.intern(s));
        let key = self.cache.key_of(interned, params, pins, &plan.settings);
        let max = self.cache.max_entry_bytes();
        let ran_on = Mutex::new(None::<(String, Duration)>);
        // When this caller computes a result too large to cache: what it already read and the
        // rest of the engine's stream, to answer from instead of running again.
        let overflow = Mutex::new(None::<SendableRecordBatchStream>);
        let computed = self
            .cache
            .get_or_compute(key, async {
                // `run` is boxed: made only on a miss.
                let ran = self
                    .run(plan, params, query_id)
                    .await
                    .map_err(|e| Uncached::Failed(Arc::new(e)))?;
                *ran_on.lock().unwrap_or_else(|p| p.into_inner()) = Some((ran.engine, ran.queued));
                collect_capped(ran.stream, max, &overflow).await
            })
            .await;
        // A caller that waited on another's computation counts as a hit too.
        let ran_on = ran_on.into_inner().unwrap_or_else(|p| p.into_inner());
        let ran_here = ran_on.is_some();
        let (engine, queued) = ran_on.unwrap_or_default();
        match computed {
            Ok(result) => {
                let outcome = if ran_here {
                    CacheOutcome::Miss
                } else {
                    CacheOutcome::Hit
                };
                let stream = batches_stream(result.schema.clone(), result.batches.clone());
                Ok(Answer {
                    stream,
                    engine,
                    outcome,
                    queued,
                    encodings: Some(result.encodings.clone()),
                })
            }
            Err(e) => match e.as_ref() {
                Uncached::TooLarge => {
                    let rest = overflow.into_inner().unwrap_or_else(|p| p.into_inner());
                    match rest {
                        Some(stream) => Ok(Answer {
                            stream,
                            engine,
                            outcome: CacheOutcome::TooLarge,
                            queued,
                            encodings: None,
                        }),
                        // Another caller computed it: run it here, streaming.
                        None => Ok(Answer::ran(
                            self.run(plan, params, query_id).await?,
                            CacheOutcome::TooLarge,
                        )),
                    }
                }
                Uncached::Failed(err) => Err(Error::Shared(err.clone())),
            },
        }
    }
}

/// Drains a stream into memory, giving up once it exceeds `max` bytes: the batches read so far
/// and the rest of the stream are left in `overflow` for this caller.
async fn collect_capped(
    mut stream: SendableRecordBatchStream,
    max: u64,
    overflow: &Mutex<Option<SendableRecordBatchStream>>,
) -> Result<CachedResult, Uncached> {
    let schema = stream.schema();
    let (mut batches, mut bytes) = (Vec::new(), 0u64);
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| Uncached::Failed(Arc::new(Error::Engine(e.into()))))?;
        // Engines hand out batches that share (and keep alive) much larger buffers; a cached
        // result gets buffers of its own, so its size is what it really holds.
        let indices = arrow::array::UInt32Array::from_iter_values(0..batch.num_rows() as u32);
        let batch = arrow::compute::take_record_batch(&batch, &indices).map_err(|e| {
            Uncached::Failed(Arc::new(Error::Engine(
                datafusion::error::DataFusionError::from(e).into(),
            )))
        })?;
        bytes += batch.get_array_memory_size() as u64;
        batches.push(batch);
        if bytes > max {
            let read = futures::stream::iter(batches.into_iter().map(Ok));
            let whole = RecordBatchStreamAdapter::new(schema, read.chain(stream));
            *overflow.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::pin(whole));
            return Err(Uncached::TooLarge);
        }
    }
    Ok(CachedResult::new(schema, batches, bytes))
}

/// Batches already in memory, as a stream.
pub(crate) fn batches_stream(
    schema: arrow::datatypes::SchemaRef,
    batches: Vec<arrow::array::RecordBatch>,
) -> SendableRecordBatchStream {
    match MemoryStream::try_new(batches, schema.clone(), None) {
        Ok(s) => Box::pin(s),
        Err(_) => Box::pin(datafusion::physical_plan::EmptyRecordBatchStream::new(
            schema,
        )),
    }
}

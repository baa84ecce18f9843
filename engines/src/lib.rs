//! lakegate-engines: the lake and the engines that read it.
//!
//! ```text
//!   Lake ── catalog (SQL on SQLite/PostgreSQL, REST) ── version tokens ── ResolvedTable
//!     │
//!   Engine::execute(EngineRequest { statement, params, pins, settings })
//!     ├── DataFusionEngine (embedded planner; also answers pg_catalog / information_schema)
//!     ├── DuckDbEngine     (embedded, Iceberg extension)
//!     ├── TrinoEngine      (HTTP client protocol)
//!     └── SparkEngine      (Spark Connect over gRPC)
//!   each non-planner engine: dialect::render → run → conform to the planner's schema
//! ```
//!
//! Layout:
//! - [`error`] — the crate's error type and the protocol-neutral [`ErrorKind`].
//! - [`lake`] — catalog connection, table resolution and the version token of each table.
//! - [`engine`] — the [`Engine`] trait and what a request to an engine carries.
//! - [`datafusion_engine`] — the embedded DataFusion engine (also the planner of record).
//! - [`duckdb_engine`], [`trino`], [`spark`]: the other engines.
//! - [`dialect`] — one parsed statement rendered for each engine, pinned to the snapshots.
//! - [`accel`] — exact acceleration: serving tables held in memory at their current snapshot.
//! - [`conform`] — another engine's answer cast to the planner's schema.
//! - [`constructs`] — what a statement is made of, for the engines' verified lists.
//! - [`system_catalog`] — `pg_catalog` emulation over the lake for BI tools.
//! - [`pg_attribute`] — exact column types in `pg_catalog.pg_attribute`.
//! - [`semantics`] — PostgreSQL's value semantics: what the embedded engine keeps, and the
//!   features a statement relies on that other engines refuse.
//! - [`pg_float_keys`] — `-0` equal to `0` in comparisons and keys, as in PostgreSQL.
//! - [`pg_float_numeric`] — float/numeric comparisons and casts as PostgreSQL makes them.
//! - [`pg_numeric`] — PostgreSQL's numeric division (value-dependent scale).
//! - [`pg_result_types`] — PostgreSQL's result types for `ceil`/`floor`/`trunc` of a numeric
//!   and `sum` of a `bigint`.
//! - [`pg_text`] — values printed as PostgreSQL prints them.
//! - [`pg_text_rules`] — `SIMILAR TO` and `varchar(n)` casts as PostgreSQL reads them.
//! - [`refusals`] — what no engine answers as PostgreSQL does yet, refused at planning.
//! - [`pg_datetime_input`] — date and time literals read as PostgreSQL reads them.
//! - [`pg_zone`] — PostgreSQL's `AT TIME ZONE` (both directions) on the embedded engine.
//! - `plan_cache` — the embedded engine's plans kept across executions of a statement.
//! - [`session_zone`] — the session's `TimeZone`: `timestamptz` columns read in it.
//! - [`pg_window`] — PostgreSQL's window functions where DataFusion's differ (`ntile`).
//! - [`to_char`] — PostgreSQL's `to_char` templates on the embedded engine.
//! - [`units`] — byte counts as people read them.
//! - [`verified`] — the constructs each engine was verified for (generated).

pub mod accel;
pub mod conform;
pub mod constructs;
pub mod datafusion_engine;
pub mod dialect;
mod direct;
pub mod duckdb_engine;
pub mod engine;
pub mod error;
mod idle;
pub mod lake;
mod lake_scan;
mod optimized;
pub mod pg_attribute;
pub mod pg_datetime_input;
pub mod pg_extract;
pub mod pg_float_keys;
pub mod pg_float_numeric;
pub mod pg_functions;
pub mod pg_integer;
pub mod pg_like;
pub mod pg_numeric;
pub mod pg_result_types;
pub mod pg_temporal;
pub mod pg_text;
pub mod pg_text_rules;
pub mod pg_unknown_literals;
pub mod pg_window;
pub mod pg_zone;
mod plan_cache;
pub mod refusals;
pub mod semantics;
pub mod session_zone;
pub mod spark;
pub mod system_catalog;
pub mod to_char;
pub mod trino;
pub mod units;
pub mod verified;

pub use engine::{Engine, EngineRef, EngineRequest, Pins, Settings, Started};
pub use error::{Error, ErrorKind, Result};
pub use lake::{Lake, LakeConfig, ResolvedTable, TableVersion};

//! lakegate: one SQL endpoint in front of an Apache Iceberg lakehouse.
//!
//! ```text
//! client ──pgwire──▶ frontend::pg ──▶ GatewayService::execute(statement, params, session)
//!     1. parse      sqlparser, PostgreSQL dialect (+ rewrites for what BI tools send)
//!     2. classify   query / session / transaction / cursor / refused write
//!     3. resolve    each lake table → its current metadata location (the version token)
//!     3b. profile   shape, tables, columns, limit, estimated scan bytes (profile.rs)
//!     3c. route     rules pick the routing group; observed latency orders its engines (routing/)
//!     4. cache      key = statement + params + settings + every table's metadata location
//!     5. execute    in the group's slots, on the first engine that answers (failover)
//! ◀── rows encoded per column format (text or binary), streamed batch by batch
//! ```
//!
//! Layout:
//! - `main.rs`: the `lakegate` CLI (`serve`, `demo`).
//! - [`config`]: TOML configuration and command-line overrides.
//! - [`gateway`]: builds the services and runs the servers.
//! - [`service`]: the protocol-neutral query pipeline.
//! - [`cache`]: the result cache keyed by the snapshots a result read.
//! - [`classify`]: statement kinds and the tables a statement reads.
//! - [`profile`]: the query profile (shape, columns, scan estimate) the router decides on.
//! - [`routing`]: routing groups and rules, latency statistics, admission.
//! - [`history`]: the bounded query history (`lakegate.queries`).
//! - [`metrics`], [`http`]: Prometheus `/metrics` and the JSON admin API (`--http-listen`).
//! - [`admin_cli`]: `lakegate status | tables | queries` over that API.
//! - [`output_names`]: PostgreSQL's names for result columns.
//! - [`session`]: per-connection settings and cursors.
//! - [`frontend`]: wire protocols (`pg`).
//! - [`demo`]: the demo estate.
//! - [`error`]: the gateway's error type.

pub mod access;
pub mod admin_cli;
pub mod auth;
pub mod cache;
#[cfg(test)]
mod classify_tests;
/// Statement kinds and the tables a statement reads (the `lakegate-sql` crate).
pub use lakegate_sql::classify;
pub mod config;
pub mod console;
pub mod demo;
pub mod error;
pub mod frontend;
pub mod gateway;
pub mod history;
pub mod http;
pub mod limits;
pub mod maintenance_tables;
pub mod mask;
pub mod metrics;
pub mod output_names;
pub mod profile;
pub mod routing;
pub mod service;
pub mod session;
pub mod tls;

pub use config::Config;
pub use error::{Error, Result};
pub use gateway::Gateway;

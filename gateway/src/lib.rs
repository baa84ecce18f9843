//! lakegate: one SQL endpoint in front of an Apache Iceberg lakehouse.
//!
//! ```text
//! client ──pgwire──▶ frontend::pg     ┐ session + StatementContext (user, group, deadline,
//! client ─FlightSQL▶ frontend::flight │ cancel, query id)
//! agent ───MCP─────▶ frontend::mcp    ┘ (+ agents: budgets, approvals, expensive statements)
//!   ▶ service::GatewayService::describe / execute
//!       parse     sqlparser, PostgreSQL dialect (+ rewrites for what BI tools send)
//!       plan      references → profile → group → access → resolve → masks → scan estimate
//!                 → guardrail → candidates: one Plan for Describe, Execute and EXPLAIN ROUTE
//!       answer    result cache (full key) or run: admission → first engine that answers
//!       limit     max_rows / max_result_bytes, then cancel and statement_timeout
//!   ◀ rows encoded per frontend (pg text/binary, Flight IPC), streamed batch by batch
//! ```
//!
//! Layout (follow the names from `main.rs`):
//! - [`acceleration`] — `[acceleration]`: serving tables held in memory (the `accelerated` engine).
//! - [`gateway`] — builds the service from the [`config`] and runs the endpoints.
//! - [`frontend`] — the endpoints behind one `Server` lifecycle — `pg`, `flight`, `http` (with
//!   `mcp` at `/mcp`; `lakegate mcp` serves it over stdio).
//! - [`agents`] — `[mcp]`: the guardrails an operator composes per agent.
//! - [`service`] — the protocol-neutral query pipeline (plan, run, cache, hooks, system tables).
//! - [`routing`] — routing groups and rules, latency statistics, admission.
//! - [`security`] — authentication, access rules, masks, limits, TLS.
//! - [`observe`] — the query history, Prometheus metrics, the web console's data.
//! - [`session`] — per-connection settings and cursors; [`profile`]: a query's shape.
//! - [`cli`] — the in-process and admin subcommands, and the demo estate.
//! - [`classify`] — statement kinds and the tables a statement reads (`lakegate-sql`).
//! - [`error`] — the gateway's error type.

pub mod acceleration;
pub mod agents;
pub mod cli;
/// Statement kinds and the tables a statement reads (the `lakegate-sql` crate).
pub use lakegate_sql::classify;
pub mod config;
pub mod error;
pub mod frontend;
pub mod gateway;
pub mod mirror;
pub mod observe;
pub mod profile;
pub mod routing;
pub mod security;
pub mod service;
pub mod session;

pub use config::Config;
pub use error::{Error, Result};
pub use gateway::Gateway;

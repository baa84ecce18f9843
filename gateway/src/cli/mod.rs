//! The `lakegate` subcommands besides `serve` (see `main.rs` for the command line itself).
//!
//! - [`local`] — `exec`, `route`, `maintenance plan|run --once`, in-process.
//! - [`admin`] — `status`, `tables`, `queries` over a running gateway's HTTP API.
//! - [`demo`] — the demo estate `lakegate demo` writes and serves.

pub mod admin;
pub mod demo;
pub mod local;

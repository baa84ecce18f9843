//! What lakegate shows of itself: the query history (`lakegate.queries`, the history file),
//! Prometheus metrics and the web console's data. Everything here observes; nothing decides.
//!
//! - [`history`] — every query's record, bounded in memory, optionally kept in a file.
//! - [`metrics`] — counters per finished query and gauges read at scrape time.
//! - [`console`] — the web console page and its per-table data.

pub mod console;
mod handles;
pub mod history;
pub mod metrics;

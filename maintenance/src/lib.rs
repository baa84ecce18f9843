//! lakegate's maintenance loop. Query telemetry ([`telemetry`]) tells which tables, partitions
//! and columns are read; [`health`] scores each table from its Iceberg metadata weighted by
//! that heat; [`plan`] picks a cycle's operations within budget; [`compact`], [`expire`],
//! [`orphans`] and manifest rewrites (in [`snapshot`]) change the table through conflict-aware
//! commits ([`commit`]); `operate` runs one planned operation into a record and [`oplog`]
//! keeps what happened. [`Maintainer`] ties them together.

pub mod approvals;
pub mod autonomy;
pub mod commit;
pub mod compact;
pub mod config;
pub mod error;
pub mod executor;
pub mod expire;
pub mod health;
pub mod inventory;
pub mod layout;
pub mod maintainer;
mod operate;
pub mod oplog;
pub mod orphans;
pub mod plan;
pub mod policy;
pub mod readers;
pub mod snapshot;
pub mod state;
pub mod telemetry;

pub use config::MaintenanceConfig;
pub use error::{Error, Result};
pub use maintainer::Maintainer;

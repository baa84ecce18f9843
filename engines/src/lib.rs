//! lakegate-engines: the lake and the engines that read it.
//!
//! ```text
//!   Lake ── catalog (SQL on SQLite/PostgreSQL, REST) ── version tokens ── ResolvedTable
//!     │
//!   Engine::execute(EngineRequest { statement, params, pins, settings })
//!     └── DataFusionEngine (embedded; also answers pg_catalog / information_schema)
//! ```
//!
//! Layout:
//! - [`error`]: the crate's error type and the protocol-neutral [`ErrorKind`].
//! - [`lake`]: catalog connection, table resolution and the version token of each table.
//! - [`engine`]: the [`Engine`] trait and what a request to an engine carries.
//! - [`datafusion_engine`]: the embedded DataFusion engine.
//! - [`system_catalog`]: `pg_catalog` emulation over the lake for BI tools.
//! - [`pg_attribute`]: exact column types in `pg_catalog.pg_attribute`.

pub mod datafusion_engine;
pub mod engine;
pub mod error;
pub mod lake;
pub mod pg_attribute;
pub mod system_catalog;

pub use engine::{Engine, EngineRef, EngineRequest, Pins, Settings};
pub use error::{Error, ErrorKind, Result};
pub use lake::{Lake, LakeConfig, ResolvedTable};

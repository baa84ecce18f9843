//! `[acceleration]`: which serving tables the `accelerated` engine holds in memory, and the
//! engine itself (see [`lakegate_engines::accel`] for how copies stay exact).
//!
//! ```toml
//! [acceleration]
//! tables = ["shop.orders", "app.*"]      # held at their current snapshot (`ns.*`: all of ns)
//! max_bytes = 1073741824                 # every copy's batches and indexes (default 1 GiB)
//! index = ["shop.orders.customer_id"]    # beside identifier fields and hot filter columns
//! refresh = "1s"                         # how often snapshots are checked
//! ```

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lakegate_engines::Lake;
use lakegate_engines::accel::{Accelerator, HotColumns, Options};
use lakegate_maintenance::Maintainer;
use serde::Deserialize;

use crate::error::{Error, Result};

/// Filter columns at least this share of a table's hottest one are indexed.
const HOT_SHARE: f64 = 0.25;
/// Hot columns indexed per table, at most.
const HOT_COLUMNS: usize = 3;

/// `[acceleration]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccelerationConfig {
    /// Tables (`namespace.table`, or `namespace.*` for all of a namespace) held in memory;
    /// none: no `accelerated` engine.
    pub tables: Vec<String>,
    /// Memory every copy may hold together, batches and indexes (default 1 GiB).
    pub max_bytes: u64,
    /// Columns (`namespace.table.column`) to index beside each table's identifier fields and
    /// the columns its queries filter on most.
    pub index: Vec<String>,
    /// How often the tables' snapshots are checked (default 1 s); a statement that finds a
    /// newer snapshot than the one held also starts a refresh.
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
}

impl Default for AccelerationConfig {
    fn default() -> Self {
        Self {
            tables: Vec::new(),
            max_bytes: 1 << 30,
            index: Vec::new(),
            refresh: Duration::from_secs(1),
        }
    }
}

impl AccelerationConfig {
    /// The engines crate's options.
    ///
    /// # Errors
    /// A table that is not `namespace.table`, a column not `namespace.table.column`.
    pub fn options(&self) -> Result<Options> {
        let bad = |setting: &str, reason: String| Error::Config {
            setting: setting.into(),
            reason,
        };
        let tables = self
            .tables
            .iter()
            .map(|t| {
                t.rsplit_once('.')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                    .map(|(ns, name)| (ns.to_string(), name.to_string()))
                    .ok_or_else(|| {
                        bad(
                            "acceleration.tables",
                            format!("`{t}` is not namespace.table"),
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let index = self
            .index
            .iter()
            .map(|c| {
                let (table, column) = c
                    .rsplit_once('.')
                    .filter(|(_, column)| !column.is_empty())
                    .ok_or_else(|| {
                        bad(
                            "acceleration.index",
                            format!("`{c}` is not namespace.table.column"),
                        )
                    })?;
                let (ns, name) = table
                    .rsplit_once('.')
                    .filter(|t| {
                        tables.iter().any(|(n, m)| {
                            n == t.0 && (m == t.1 || m == lakegate_engines::accel::ALL)
                        })
                    })
                    .ok_or_else(|| {
                        bad(
                            "acceleration.index",
                            format!("`{c}`: `{table}` is not one of acceleration.tables"),
                        )
                    })?;
                Ok((ns.to_string(), name.to_string(), column.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        if self.refresh.is_zero() {
            return Err(bad("acceleration.refresh", "must be above zero".into()));
        }
        Ok(Options {
            tables,
            max_bytes: self.max_bytes,
            index,
            refresh: self.refresh,
        })
    }
}

/// The accelerator of `config`'s tables (`None`: none configured), not yet started; its hot
/// columns come from `maintainer` once [`OnceLock::set`].
///
/// # Errors
/// As [`AccelerationConfig::options`].
pub fn accelerator(
    config: &AccelerationConfig,
    lake: Arc<Lake>,
    maintainer: Arc<OnceLock<Arc<Maintainer>>>,
) -> Result<Option<Arc<Accelerator>>> {
    if config.tables.is_empty() {
        return Ok(None);
    }
    let hot: HotColumns = Arc::new(move |ns: &str, table: &str| {
        maintainer
            .get()
            .map(|m| m.hot_columns(ns, table, HOT_SHARE, HOT_COLUMNS))
            .unwrap_or_default()
    });
    Ok(Some(Accelerator::new(lake, config.options()?, Some(hot))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_split_at_their_last_dots() {
        let config = AccelerationConfig {
            tables: vec!["a.b.orders".into()],
            index: vec!["a.b.orders.customer_id".into()],
            ..AccelerationConfig::default()
        };
        let options = config.options().expect("valid");
        assert_eq!(options.tables, vec![("a.b".into(), "orders".into())]);
        assert_eq!(
            options.index,
            vec![("a.b".into(), "orders".into(), "customer_id".into())]
        );
        let bad = AccelerationConfig {
            tables: vec!["orders".into()],
            ..AccelerationConfig::default()
        };
        assert!(
            bad.options()
                .expect_err("invalid")
                .to_string()
                .contains("namespace.table")
        );
        let stray = AccelerationConfig {
            tables: vec!["shop.orders".into()],
            index: vec!["shop.other.id".into()],
            ..AccelerationConfig::default()
        };
        assert!(
            stray
                .options()
                .expect_err("invalid")
                .to_string()
                .contains("not one of")
        );
    }
}

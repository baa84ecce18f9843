//! lakegate's own tables (`lakegate.<name>`): what the gateway and the maintenance loop know,
//! materialised as Arrow batches when a statement reads them and answered by the embedded
//! planner like any table.
//!
//! - [`queries`] — `lakegate.queries` (the query history).
//! - [`cache`] — `lakegate.cache_stats`.
//! - [`router`] — `lakegate.routing` and `lakegate.engines`.
//! - [`maintenance`] — `lakegate.table_health`, `lakegate.table_partitions`, `lakegate.operations`.
//! - [`acceleration`] — `lakegate.acceleration`.

pub mod acceleration;
pub mod cache;
pub mod maintenance;
pub mod queries;
pub mod router;

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{Field, Schema};

use super::GatewayService;
use crate::error::{Error, Result};

/// One of lakegate's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemTable {
    /// `lakegate.cache_stats`.
    CacheStats,
    /// `lakegate.queries`.
    Queries,
    /// `lakegate.engines`.
    Engines,
    /// `lakegate.routing`.
    Routing,
    /// `lakegate.table_health`.
    TableHealth,
    /// `lakegate.table_partitions`.
    TablePartitions,
    /// `lakegate.operations`.
    Operations,
    /// `lakegate.acceleration`.
    Acceleration,
    /// `lakegate.maintenance_policy`.
    MaintenancePolicy,
    /// `lakegate.consumers`.
    Consumers,
    /// `lakegate.pending_operations`.
    PendingOperations,
}

impl SystemTable {
    /// Every table, in the order `lakegate` lists them.
    pub const ALL: [SystemTable; 11] = [
        Self::CacheStats,
        Self::Queries,
        Self::Engines,
        Self::Routing,
        Self::TableHealth,
        Self::TablePartitions,
        Self::Operations,
        Self::Acceleration,
        Self::MaintenancePolicy,
        Self::Consumers,
        Self::PendingOperations,
    ];

    /// The table's name (without `lakegate.`).
    pub fn name(self) -> &'static str {
        match self {
            Self::CacheStats => "cache_stats",
            Self::Queries => "queries",
            Self::Engines => "engines",
            Self::Routing => "routing",
            Self::TableHealth => "table_health",
            Self::TablePartitions => "table_partitions",
            Self::Operations => "operations",
            Self::Acceleration => "acceleration",
            Self::MaintenancePolicy => "maintenance_policy",
            Self::Consumers => "consumers",
            Self::PendingOperations => "pending_operations",
        }
    }

    /// The table called `name`.
    ///
    /// # Errors
    /// [`Error::UnknownSystemTable`] (42P01).
    pub fn named(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| Error::UnknownSystemTable {
                name: name.to_string(),
            })
    }
}

impl GatewayService {
    /// Materialises the `lakegate.<name>` tables a statement reads, as `user` may see them.
    ///
    /// # Errors
    /// An unknown table; the maintenance loop failing to assess the estate.
    pub(crate) async fn system_tables(
        &self,
        names: &[String],
        user: &str,
    ) -> Result<Vec<(String, RecordBatch)>> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let batch = match SystemTable::named(name)? {
                SystemTable::CacheStats => cache::stats_batch(
                    self.cache_stats().await,
                    self.lake.token_stats(),
                    self.lake.object_cache_stats(),
                    self.lake.decoded_stats(),
                ),
                SystemTable::Queries => {
                    // With access rules, a user sees its own queries unless it has `admin`.
                    let own = (self.security.access.enabled()
                        && !self.security.has_role(user, "admin"))
                    .then_some(user);
                    queries::batch(&self.history.records_for(own))
                }
                SystemTable::Engines => {
                    router::engines_batch(&self.engines.health().await, &self.engines.default)
                }
                SystemTable::Routing => router::routing_batch(&self.router),
                SystemTable::TableHealth => {
                    maintenance::health_batch(&self.maintainer.health().await?)
                }
                SystemTable::TablePartitions => {
                    maintenance::partitions_batch(&self.maintainer.health().await?)
                }
                SystemTable::Operations => {
                    maintenance::operations_batch(&self.maintainer.log().all())
                }
                SystemTable::Acceleration => {
                    acceleration::batch(self.engines.accelerator.as_deref())
                }
                SystemTable::MaintenancePolicy => {
                    maintenance::policy_batch(&self.maintainer.policies().await?)
                }
                SystemTable::PendingOperations => {
                    maintenance::pending_batch(&self.maintainer.approvals().list())
                }
                SystemTable::Consumers => {
                    maintenance::consumers_batch(&self.maintainer.consumers().await?)
                }
            };
            out.push((name.clone(), batch));
        }
        Ok(out)
    }
}

/// A batch of nullable columns named as given.
pub(crate) fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .unwrap_or_else(|_| RecordBatch::new_empty(Arc::new(Schema::empty())))
}

pub(crate) fn text<T: AsRef<str>>(v: impl Iterator<Item = T>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

pub(crate) fn int(v: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(v))
}

pub(crate) fn float(v: impl Iterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(v))
}

pub(crate) fn timestamps(v: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from_iter_values(v).with_timezone("UTC"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_found_by_its_name_and_others_are_42p01() {
        for t in SystemTable::ALL {
            assert_eq!(SystemTable::named(t.name()).expect("known"), t);
        }
        let e = SystemTable::named("secrets").expect_err("unknown");
        assert_eq!(e.kind(), lakegate_engines::ErrorKind::UndefinedTable);
    }
}

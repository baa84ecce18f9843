//! What queries read, for the maintenance loop's heat: each successful query's tables and
//! columns (and, for one table, its WHERE as an Iceberg predicate) go to the telemetry when it
//! finishes; at start, the kept history is replayed so the heat does not start cold.

use datafusion::common::ParamValues;
use lakegate_engines::lake::estimate;
use lakegate_maintenance::telemetry::{Event, Observation, Read};

use super::GatewayService;
use super::plan::Plan;
use crate::classify::{self, StatementKind};
use crate::profile::QueryProfile;

impl GatewayService {
    /// What a planned query reads (`None`: no lake table); its WHERE as a predicate only when
    /// it `scanned` (an answer from the result cache reads no file: its tables and columns
    /// count, but the partitions compaction serves are the ones scans read).
    pub(crate) fn observation(
        &self,
        plan: &Plan,
        params: Option<&ParamValues>,
        scanned: bool,
    ) -> Option<Observation> {
        let p = &plan.profile;
        if p.tables.is_empty() {
            return None;
        }
        let mut pins = plan.resolved.pins.iter();
        let predicate = match (pins.next(), pins.next()) {
            (Some((_, table)), None) if scanned => crate::profile::top_where(plan.statement())
                .and_then(|w| {
                    let bound = crate::profile::bind_parameters(w, params);
                    estimate::predicate(&bound, table.table.metadata().current_schema())
                }),
            _ => None,
        };
        Some(Observation {
            read: plan.read.clone(),
            predicate,
        })
    }

    /// Rebuilds query heat from the kept history (tables and columns; predicates need the
    /// tables' schemas and start again with live traffic). Returns the queries replayed.
    pub fn replay_history(&self) -> usize {
        self.history
            .all()
            .iter()
            .map(|record| self.replay_record(record))
            .sum()
    }

    /// Feeds one query record (a kept one, or another replica's) to the maintenance heat;
    /// returns the statements replayed.
    pub fn replay_record(&self, record: &crate::observe::history::QueryRecord) -> usize {
        if record.error.is_some() || record.snapshots.is_empty() {
            return 0;
        }
        let Ok(statements) = self.parse(&record.sql) else {
            return 0;
        };
        let mut n = 0;
        for statement in statements {
            let Ok(refs) = classify::references(&statement, "public") else {
                continue;
            };
            let profile = QueryProfile::of(&statement, &StatementKind::Query, &refs);
            if profile.tables.is_empty() {
                continue;
            }
            self.maintainer.replay(&Event {
                observation: Observation {
                    read: std::sync::Arc::new(Read {
                        tables: profile.tables,
                        filter_columns: profile.filter_columns,
                        join_columns: profile.join_columns,
                        group_columns: profile.group_columns,
                    }),
                    predicate: None,
                },
                millis: record.millis,
                at: record.started_us as f64 / 1e6,
            });
            n += 1;
        }
        n
    }
}

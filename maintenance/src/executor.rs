//! Handing big compactions to a distributed engine the user already runs. The planner still
//! decides what to do (which partition, which sort); a job of at least `executor_min_bytes`
//! runs as Iceberg's own `rewrite_data_files` procedure on Spark (through Spark Connect), with
//! partial progress and the starting sequence number (so deletes committed meanwhile still
//! apply), and its result is recorded like any compaction. Spark's procedure commits file
//! groups atomically and validates against concurrent commits itself; a failed job commits
//! nothing of the failed group and is retried next cycle.

use std::sync::Arc;

use iceberg::spec::{Literal, PartitionSpec, PrimitiveLiteral, Schema, Struct, Transform};
use lakegate_engines::spark::SparkEngine;
use serde::Deserialize;

use crate::error::{Error, Result};

/// Where big compactions run (`[maintenance] executor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// In this process (DataFusion), whatever the size.
    #[default]
    Embedded,
    /// Jobs of at least `executor_min_bytes` on Spark (`[spark] url`).
    Spark,
}

/// Runs compactions on Spark.
#[derive(Debug)]
pub struct SparkExecutor {
    engine: Arc<SparkEngine>,
}

/// One big compaction.
#[derive(Debug, Clone)]
pub struct BigJob {
    /// `ns.table`.
    pub table: String,
    /// The partition as a Spark SQL predicate (`None`: the whole table).
    pub filter: Option<String>,
    /// Sort columns (empty: bin-pack).
    pub sort: Vec<String>,
    /// Target file size.
    pub target_file_size: u64,
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl SparkExecutor {
    /// An executor on `engine`.
    pub fn new(engine: Arc<SparkEngine>) -> Self {
        Self { engine }
    }

    /// The statement `job` runs.
    pub fn statement(&self, job: &BigJob) -> String {
        let mut args = vec![format!("table => {}", quoted(&job.table))];
        if let Some(filter) = &job.filter {
            args.push(format!("where => {}", quoted(filter)));
        }
        if job.sort.is_empty() {
            args.push("strategy => 'binpack'".into());
        } else {
            args.push("strategy => 'sort'".into());
            let order: Vec<String> = job
                .sort
                .iter()
                .map(|c| format!("{c} ASC NULLS FIRST"))
                .collect();
            args.push(format!("sort_order => {}", quoted(&order.join(", "))));
        }
        args.push(format!(
            "options => map('partial-progress.enabled', 'true', \
             'use-starting-sequence-number', 'true', 'rewrite-all', 'true', \
             'target-file-size-bytes', '{}')",
            job.target_file_size
        ));
        format!(
            "CALL {}.system.rewrite_data_files({})",
            self.engine.catalog(),
            args.join(", ")
        )
    }

    /// Runs `job` to its end.
    ///
    /// # Errors
    /// Spark's error (nothing of the failing file group is committed).
    pub async fn rewrite(&self, job: &BigJob) -> Result<()> {
        let sql = self.statement(job);
        tracing::info!(table = %job.table, %sql, "compaction handed to spark");
        self.engine.run_statement(&sql).await.map_err(Error::Lake)
    }
}

/// The partition `data` of `spec` as a Spark SQL predicate on its source columns (empty for an
/// unpartitioned table), when every field is an identity transform of a string, integer, date
/// or boolean (`None` otherwise: the embedded executor does it).
pub fn partition_filter(spec: &PartitionSpec, schema: &Schema, data: &Struct) -> Option<String> {
    if spec.is_unpartitioned() {
        return Some(String::new());
    }
    let mut terms = Vec::new();
    for (field, value) in spec.fields().iter().zip(data.iter()) {
        if field.transform != Transform::Identity {
            return None;
        }
        let column = schema.field_by_id(field.source_id)?.name.clone();
        if !column
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return None;
        }
        let term = match value {
            None => format!("{column} IS NULL"),
            Some(Literal::Primitive(p)) => {
                let v = match p {
                    PrimitiveLiteral::String(s) => quoted(s),
                    PrimitiveLiteral::Int(i) if is_date(schema, field.source_id) => {
                        let day = chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(*i as i64);
                        format!("DATE '{}'", day.format("%Y-%m-%d"))
                    }
                    PrimitiveLiteral::Int(i) => i.to_string(),
                    PrimitiveLiteral::Long(i) => i.to_string(),
                    PrimitiveLiteral::Boolean(b) => b.to_string(),
                    _ => return None,
                };
                format!("{column} = {v}")
            }
            Some(_) => return None,
        };
        terms.push(term);
    }
    Some(terms.join(" AND "))
}

fn is_date(schema: &Schema, id: i32) -> bool {
    schema.field_by_id(id).is_some_and(|f| {
        matches!(
            *f.field_type,
            iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Date)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{NestedField, PrimitiveType, Type};

    #[test]
    fn identity_partitions_become_a_predicate_others_stay_embedded() {
        let schema = Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "day",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::required(
                    2,
                    "d",
                    Type::Primitive(PrimitiveType::Date),
                )),
            ])
            .build()
            .expect("schema");
        let spec = PartitionSpec::builder(schema.clone())
            .add_partition_field("day", "day", Transform::Identity)
            .expect("field")
            .add_partition_field("d", "d", Transform::Identity)
            .expect("field")
            .build()
            .expect("spec");
        let data = Struct::from_iter([
            Some(Literal::string("2026-12-01 o'clock")),
            Some(Literal::date(20_000)),
        ]);
        assert_eq!(
            partition_filter(&spec, &schema, &data).as_deref(),
            Some("day = '2026-12-01 o''clock' AND d = DATE '2024-10-04'")
        );
        let bucketed = PartitionSpec::builder(schema.clone())
            .add_partition_field("day", "b", Transform::Bucket(4))
            .expect("field")
            .build()
            .expect("spec");
        let one = Struct::from_iter([Some(Literal::int(1))]);
        assert_eq!(partition_filter(&bucketed, &schema, &one), None);
    }
}

//! `lakegate.table_health`, `lakegate.table_partitions`, `lakegate.operations`,
//! `lakegate.maintenance_policy` and `lakegate.consumers`: the maintenance loop's view of the
//! estate as system tables.

use std::sync::Arc;

use arrow::array::{BooleanArray, Float64Array, Int64Array, RecordBatch};
use lakegate_maintenance::health::TableHealth;
use lakegate_maintenance::oplog::OperationRecord;

use super::{batch, float, int, text, timestamps};

/// One row per table, least healthy first.
pub fn health_batch(tables: &[TableHealth]) -> RecordBatch {
    let t = || tables.iter();
    batch(vec![
        ("table", text(t().map(|h| h.table.as_str()))),
        ("score", float(t().map(|h| h.score))),
        ("reasons", text(t().map(|h| h.reasons.join("; ")))),
        (
            "snapshot_id",
            Arc::new(Int64Array::from_iter(t().map(|h| h.snapshot_id))),
        ),
        ("data_files", int(t().map(|h| h.data_files as i64))),
        ("small_files", int(t().map(|h| h.small_files as i64))),
        ("bytes", int(t().map(|h| h.bytes as i64))),
        ("records", int(t().map(|h| h.records as i64))),
        ("delete_files", int(t().map(|h| h.delete_files as i64))),
        ("delete_records", int(t().map(|h| h.delete_records as i64))),
        (
            "equality_delete_files",
            int(t().map(|h| h.equality_delete_files as i64)),
        ),
        (
            "equality_delete_records",
            int(t().map(|h| h.equality_delete_records as i64)),
        ),
        ("manifests", int(t().map(|h| h.manifests as i64))),
        ("snapshots", int(t().map(|h| h.snapshots as i64))),
        ("snapshot_lag_s", float(t().map(|h| h.snapshot_lag_s))),
        (
            "oldest_snapshot_age_s",
            float(t().map(|h| h.oldest_snapshot_age_s)),
        ),
        (
            "commits_last_hour",
            int(t().map(|h| h.commits_last_hour as i64)),
        ),
        ("heat", float(t().map(|h| h.heat))),
        (
            "read_latency_ms",
            Arc::new(Float64Array::from_iter(t().map(|h| h.read_latency_ms))),
        ),
        ("sort_columns", text(t().map(|h| h.sort_columns.join(", ")))),
    ])
}

/// One row per (table, partition), with the health assessment's `hot` mark.
pub fn partitions_batch(tables: &[TableHealth]) -> RecordBatch {
    let rows: Vec<(
        &TableHealth,
        &lakegate_maintenance::health::PartitionHealth,
        bool,
    )> = tables
        .iter()
        .flat_map(|h| h.partitions.iter().map(move |p| (h, p, p.hot)))
        .collect();
    let r = || rows.iter();
    batch(vec![
        ("table", text(r().map(|(h, _, _)| h.table.as_str()))),
        ("partition", text(r().map(|(_, p, _)| p.partition.as_str()))),
        ("spec_id", int(r().map(|(_, p, _)| p.spec_id as i64))),
        ("data_files", int(r().map(|(_, p, _)| p.data_files as i64))),
        (
            "small_files",
            int(r().map(|(_, p, _)| p.small_files as i64)),
        ),
        ("bytes", int(r().map(|(_, p, _)| p.bytes as i64))),
        ("records", int(r().map(|(_, p, _)| p.records as i64))),
        (
            "delete_files",
            int(r().map(|(_, p, _)| p.delete_files as i64)),
        ),
        (
            "delete_records",
            int(r().map(|(_, p, _)| p.delete_records as i64)),
        ),
        (
            "equality_delete_files",
            int(r().map(|(_, p, _)| p.equality_delete_files as i64)),
        ),
        (
            "last_write",
            timestamps(r().map(|(_, p, _)| p.last_write_ms * 1000)),
        ),
        ("heat", float(r().map(|(_, p, _)| p.heat))),
        (
            "hot",
            Arc::new(BooleanArray::from_iter(r().map(|(_, _, hot)| Some(*hot)))),
        ),
    ])
}

/// The operations log, oldest first.
pub fn operations_batch(ops: &[OperationRecord]) -> RecordBatch {
    let o = || ops.iter();
    batch(vec![
        ("id", int(o().map(|r| r.id as i64))),
        ("started", timestamps(o().map(|r| r.started_us))),
        ("table", text(o().map(|r| r.table.as_str()))),
        ("kind", text(o().map(|r| r.kind.name()))),
        ("partition", text(o().map(|r| r.partition.as_str()))),
        ("result", text(o().map(|r| r.result.name()))),
        ("files_before", int(o().map(|r| r.files_before as i64))),
        ("files_after", int(o().map(|r| r.files_after as i64))),
        ("bytes_before", int(o().map(|r| r.bytes_before as i64))),
        ("bytes_after", int(o().map(|r| r.bytes_after as i64))),
        ("files_deleted", int(o().map(|r| r.files_deleted as i64))),
        ("millis", float(o().map(|r| r.millis))),
        (
            "snapshot_before",
            Arc::new(Int64Array::from_iter(o().map(|r| r.snapshot_before))),
        ),
        (
            "snapshot_after",
            Arc::new(Int64Array::from_iter(o().map(|r| r.snapshot_after))),
        ),
        ("reason", text(o().map(|r| r.reason.as_str()))),
        ("detail", text(o().map(|r| r.detail.as_str()))),
    ])
}

/// One row per (table, key): each table's effective policy and where each value came from.
pub fn policy_batch(policies: &[(String, lakegate_maintenance::policy::Policy)]) -> RecordBatch {
    let rows: Vec<(&str, &lakegate_maintenance::policy::Entry)> = policies
        .iter()
        .flat_map(|(t, p)| p.entries.iter().map(move |e| (t.as_str(), e)))
        .collect();
    let r = || rows.iter();
    batch(vec![
        ("table", text(r().map(|(t, _)| *t))),
        ("key", text(r().map(|(_, e)| e.key.name()))),
        ("value", text(r().map(|(_, e)| e.value.as_str()))),
        ("source", text(r().map(|(_, e)| e.source.to_string()))),
    ])
}

/// One row per (table, consumer): its position, lag and whether it holds expiry back.
pub fn consumers_batch(rows: &[(String, lakegate_maintenance::expire::Consumer)]) -> RecordBatch {
    let r = || rows.iter();
    batch(vec![
        ("table", text(r().map(|(t, _)| t.as_str()))),
        ("consumer", text(r().map(|(_, c)| c.name.as_str()))),
        ("snapshot_id", int(r().map(|(_, c)| c.snapshot_id))),
        ("lag_s", float(r().map(|(_, c)| c.lag_s))),
        (
            "commits_behind",
            int(r().map(|(_, c)| c.commits_behind as i64)),
        ),
        (
            "holds_expiry",
            Arc::new(BooleanArray::from_iter(r().map(|(_, c)| Some(c.holds)))),
        ),
    ])
}

/// One row per maintenance operation held for approval.
pub fn pending_batch(ops: &[lakegate_maintenance::approvals::PendingOperation]) -> RecordBatch {
    let r = || ops.iter();
    batch(vec![
        ("id", int(r().map(|o| o.id as i64))),
        ("table", text(r().map(|o| o.table.as_str()))),
        ("kind", text(r().map(|o| o.kind.name()))),
        ("partition", text(r().map(|o| o.partition.as_str()))),
        ("reason", text(r().map(|o| o.reason.as_str()))),
        (
            "snapshot_id",
            Arc::new(Int64Array::from_iter(r().map(|o| o.snapshot_id))),
        ),
        (
            "approved_by",
            Arc::new(arrow::array::StringArray::from_iter(
                r().map(|o| o.approved_by.as_deref()),
            )),
        ),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_empty_log_is_an_empty_table_with_columns() {
        let b = super::operations_batch(&[]);
        assert_eq!(b.num_rows(), 0);
        assert_eq!(b.schema().field(3).name(), "kind");
    }
}

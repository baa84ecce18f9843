//! The web console: one page (HTML, CSS and JavaScript embedded in the binary, no build step)
//! served at `/`, reading the admin API; and the per-table JSON it needs (`/api/table/{name}`):
//! the freshness budget (snapshot lag, visibility latency, answer latency), health with
//! partitions, the health trend, and the table's operations with the read latency before and
//! after each.

use serde_json::{Value, json};

use lakegate_engines::Lake;
use lakegate_maintenance::Maintainer;

use super::history::{QueryHistory, QueryRecord};
use crate::error::{Error, Result};

/// The console page.
pub const PAGE: &str = include_str!("console/index.html");

/// Window before/after an operation over which read latency is compared.
const AROUND_US: i64 = 10 * 60 * 1_000_000;

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Whether `r` read `key` (`ns.table`) successfully.
fn reads(r: &QueryRecord, key: &str) -> bool {
    r.error.is_none()
        && r.snapshots
            .split(',')
            .any(|s| s.split_once('@').is_some_and(|(t, _)| t == key))
}

/// `/api/table/{ns.table}`.
///
/// # Errors
/// An unknown table; catalog errors.
pub async fn table_detail(
    lake: &Lake,
    maintainer: &Maintainer,
    queries: &QueryHistory,
    name: &str,
) -> Result<Value> {
    let (ns, table) = name.rsplit_once('.').ok_or_else(|| Error::Unsupported {
        what: format!("`{name}`: name a table as namespace.table"),
    })?;
    // A fresh lookup: the console shows a commit within one refresh.
    let resolved = lake
        .resolve_within(ns, table, std::time::Duration::ZERO)
        .await?;
    let assessment = maintainer.assess(ns, table).await?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let current = resolved.table.metadata().current_snapshot().cloned();
    let history: Vec<QueryRecord> = queries
        .all()
        .into_iter()
        .filter(|r| reads(r, name))
        .collect();
    let visibility_ms = current.as_ref().and_then(|s| {
        let tag = format!("{name}@{}", s.snapshot_id());
        history
            .iter()
            .filter(|r| r.snapshots.split(',').any(|x| x == tag))
            .map(|r| r.started_us / 1000 - s.timestamp_ms())
            .min()
            .map(|ms| ms.max(0))
    });
    let recent: Vec<f64> = history.iter().rev().take(50).map(|r| r.millis).collect();
    let answer_p50 = median(recent.clone());
    let operations: Vec<Value> = maintainer
        .log()
        .all()
        .into_iter()
        .rev()
        .filter(|o| o.table == name)
        .take(200)
        .map(|o| {
            let t = o.started_us;
            let before = median(
                history
                    .iter()
                    .filter(|r| r.started_us < t && r.started_us >= t - AROUND_US)
                    .map(|r| r.millis)
                    .collect(),
            );
            let after = median(
                history
                    .iter()
                    .filter(|r| r.started_us > t && r.started_us <= t + AROUND_US)
                    .map(|r| r.millis)
                    .collect(),
            );
            let mut v = serde_json::to_value(&o).unwrap_or(Value::Null);
            v["latency_before_ms"] = json!(before);
            v["latency_after_ms"] = json!(after);
            v
        })
        .collect();
    let trend: Vec<Value> = maintainer
        .trend(name)
        .into_iter()
        .map(|(at, score, files)| json!({"at_ms": at, "score": score, "files": files}))
        .collect();
    Ok(json!({
        "table": name,
        "freshness": {
            "snapshot_id": current.as_ref().map(|s| s.snapshot_id()),
            "committed_ms": current.as_ref().map(|s| s.timestamp_ms()),
            "snapshot_lag_s": current.as_ref().map(|s| (now_ms - s.timestamp_ms()).max(0) as f64 / 1000.0),
            "visibility_latency_ms": visibility_ms,
            "answer_p50_ms": answer_p50,
            "queries": history.len(),
        },
        "health": assessment.health,
        "policy": {
            "enabled": assessment.policy.enabled,
            "entries": assessment.policy.entries,
            "ignored": assessment.policy.ignored,
        },
        "trend": trend,
        "operations": operations,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_table_matching() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(super::median(vec![]), None);
        let h = QueryHistory::new(4);
        let ctx = crate::service::context::StatementContext::new(
            h.next_id(),
            "u",
            crate::service::context::Frontend::Pg,
            tokio_util::sync::CancellationToken::new(),
            None,
        );
        let mut p = h.start(&ctx, "q".into());
        p.record.snapshots = "public.orders@1,public.customers@2".into();
        let r = p.record.clone();
        assert!(super::reads(&r, "public.customers"));
        assert!(!super::reads(&r, "public.order"));
    }
}

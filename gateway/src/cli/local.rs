//! The in-process commands: `lakegate exec` (run SQL, print rows, bytes and time), `lakegate
//! route` (EXPLAIN ROUTE) and `lakegate maintenance plan|run --once` — the same service as
//! `serve`, without a wire in between.

use arrow::array::{Array, RecordBatch, StringArray};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::Result;
use crate::gateway::build_service;
use crate::service::{GatewayService, QueryOutput};
use crate::session::Session;

/// Runs every statement of `sql` as user `local`, handing each result batch to `each`.
async fn run_local(
    service: &GatewayService,
    config: &Config,
    sql: &str,
    mut each: impl FnMut(&RecordBatch),
) -> Result<()> {
    let mut session =
        Session::new("local", &config.pg.default_schema).with_database(&config.pg.database);
    for statement in service.parse(sql)? {
        let ctx = service.context(&session, CancellationToken::new());
        if let QueryOutput::Rows { mut stream, .. } = service
            .execute(&statement, None, &mut session, &ctx)
            .await?
        {
            while let Some(batch) = stream.next().await {
                each(&batch.map_err(lakegate_engines::Error::from)?);
            }
        }
    }
    Ok(())
}

/// Runs `sql` in-process through the query service and drains the result: (rows, Arrow bytes).
/// Used by `lakegate exec` and the benchmarks as the no-wire baseline.
///
/// # Errors
/// Any error of the statement.
pub async fn execute_local(config: &Config, sql: &str) -> Result<(u64, u64)> {
    let service = build_service(config).await?;
    let (mut rows, mut bytes) = (0u64, 0u64);
    run_local(&service, config, sql, |batch| {
        rows += batch.num_rows() as u64;
        bytes += batch.get_array_memory_size() as u64;
    })
    .await?;
    Ok((rows, bytes))
}

/// `EXPLAIN ROUTE <sql>` in-process: the (item, value) rows. Used by `lakegate route`.
///
/// # Errors
/// Any error of routing the statement.
pub async fn explain_route_local(config: &Config, sql: &str) -> Result<Vec<(String, String)>> {
    let service = build_service(config).await?;
    let mut out = Vec::new();
    run_local(&service, config, &format!("EXPLAIN ROUTE {sql}"), |batch| {
        let column = |i: usize| batch.column(i).as_any().downcast_ref::<StringArray>();
        if let (Some(items), Some(values)) = (column(0), column(1)) {
            for i in 0..items.len() {
                out.push((items.value(i).to_string(), values.value(i).to_string()));
            }
        }
    })
    .await?;
    Ok(out)
}

/// `lakegate maintenance plan|run --once`: the estate's health and the plan (`run`: executed,
/// with progress), as text.
///
/// # Errors
/// Configuration and catalog errors.
pub async fn maintenance_local(config: &Config, table: Option<&str>, run: bool) -> Result<String> {
    use std::fmt::Write;
    let service = build_service(config).await?;
    let m = service.maintainer();
    let mut out = String::new();
    if run {
        let records = m.run_cycle(true, table, &|line| println!("{line}")).await?;
        let _ = writeln!(out, "{} operations run", records.len());
        return Ok(out);
    }
    let (planned, assessed) = m.plan(true, table).await?;
    let _ = writeln!(
        out,
        "{:<32} {:>5} {:>7} {:>7} {:>7} {:>9}  reasons",
        "table", "score", "files", "small", "deletes", "manifests"
    );
    for a in &assessed {
        let h = &a.health;
        let _ = writeln!(
            out,
            "{:<32} {:>5.0} {:>7} {:>7} {:>7} {:>9}  {}",
            h.table,
            h.score,
            h.data_files,
            h.small_files,
            h.delete_files,
            h.manifests,
            if h.reasons.is_empty() {
                "healthy".to_string()
            } else {
                h.reasons.join("; ")
            }
        );
    }
    let _ = writeln!(out, "\nplan ({} operations):", planned.len());
    for p in &planned {
        let _ = writeln!(
            out,
            "  {:<18} {:<28} {}",
            p.action.kind().name(),
            p.table,
            p.reason
        );
    }
    Ok(out)
}

/// `lakegate maintenance policy --table ns.table`: the table's effective policy, each key with
/// the level it came from, and the values that were set but ignored.
///
/// # Errors
/// Configuration and catalog errors; a name that is not `ns.table`.
pub async fn policy_local(config: &Config, table: &str) -> Result<String> {
    use std::fmt::Write;
    let (ns, name) = table
        .rsplit_once('.')
        .ok_or_else(|| crate::error::Error::Unsupported {
            what: format!("`{table}`: name a table as namespace.table"),
        })?;
    let service = build_service(config).await?;
    let policy = service.maintainer().policy(ns, name).await?;
    let mut out = format!(
        "{table}: {}\n",
        if policy.enabled {
            "maintained"
        } else {
            "not maintained"
        }
    );
    for e in &policy.entries {
        let _ = writeln!(out, "  {:<22} {:<12} {}", e.key.name(), e.value, e.source);
    }
    for i in &policy.ignored {
        let _ = writeln!(out, "  ignored: {i}");
    }
    Ok(out)
}

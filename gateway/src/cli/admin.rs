//! `lakegate status`, `lakegate tables`, `lakegate queries` and `lakegate agents`: terminal
//! views of a running gateway (and approvals of agents' held statements), through its admin API (`--http`, default http://127.0.0.1:8080; with users
//! configured, give one with role admin or monitor as `http://user:password@host:port`).

use serde_json::Value;

use crate::error::{Error, Result};

async fn fetch(base: &str, path: &str) -> Result<Value> {
    call(base, path, reqwest::Method::GET).await
}

async fn call(base: &str, path: &str, method: reqwest::Method) -> Result<Value> {
    let mut url = format!("{}{path}", base.trim_end_matches('/'));
    let mut credentials = None;
    if let Ok(mut parsed) = reqwest::Url::parse(&url)
        && !parsed.username().is_empty()
    {
        credentials = Some((
            parsed.username().to_string(),
            parsed.password().map(str::to_string),
        ));
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        url = parsed.to_string();
    }
    let unreachable = |e: &dyn std::fmt::Display| Error::Config {
        setting: "--http".into(),
        reason: format!(
            "cannot read {url}: {e} (is the gateway running with --http-listen there?)"
        ),
    };
    let mut request = reqwest::Client::new()
        .request(method, &url)
        .timeout(std::time::Duration::from_secs(15));
    if let Some((user, password)) = credentials {
        request = request.basic_auth(user, password);
    }
    let response = request.send().await.map_err(|e| unreachable(&e))?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(Error::Config {
            setting: "--http".into(),
            reason: format!(
                "{url} answered {status}: give a user with role admin or monitor (admin to \
                 decide approvals) as http://user:password@host:port"
            ),
        });
    }
    if !status.is_success() {
        let body: Value = response.json().await.unwrap_or(Value::Null);
        return Err(Error::Unsupported {
            what: body["error"]
                .as_str()
                .map_or_else(|| format!("{url} answered {status}"), str::to_string),
        });
    }
    response.json().await.map_err(|e| unreachable(&e))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Number(n) if n.is_f64() => format!("{:.1}", n.as_f64().unwrap_or_default()),
        other => other.to_string(),
    }
}

fn rows(v: &Value, key: &str) -> Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The estate at a glance: engines, groups with their load, cache, tables.
///
/// # Errors
/// When the admin API cannot be read.
pub async fn status(base: &str) -> Result<String> {
    let engines = fetch(base, "/api/engines").await?;
    let routing = fetch(base, "/api/routing").await?;
    let cache = fetch(base, "/api/cache").await?;
    let tables = fetch(base, "/api/tables").await?;
    let mut out = String::from("engines\n");
    for e in rows(&engines, "engines") {
        out += &format!(
            "  {:<11} {:<9} {}\n",
            text(&e["engine"]),
            if e["healthy"].as_bool() == Some(true) {
                "healthy"
            } else {
                "DOWN"
            },
            text(&e["error"])
        );
    }
    out += &format!(
        "routing groups (default {})\n",
        text(&routing["default_group"])
    );
    let load = rows(&routing, "load");
    for g in rows(&routing, "groups") {
        let name = text(&g["name"]);
        let l = load.iter().find(|l| text(&l["group"]) == name);
        out += &format!(
            "  {:<14} engines {:<32} running {} queued {}\n",
            name,
            g["engines"].to_string(),
            l.map_or("0".into(), |l| text(&l["running"])),
            l.map_or("0".into(), |l| text(&l["queued"])),
        );
    }
    out += &format!(
        "cache: {} hits, {} misses, {} entries, {} bytes\n",
        text(&cache["hits"]),
        text(&cache["misses"]),
        text(&cache["entries"]),
        text(&cache["bytes"])
    );
    out += &format!("tables seen: {}\n", rows(&tables, "tables").len());
    let m = fetch(base, "/api/maintenance").await?;
    out += &format!(
        "maintenance: {} of {} tables maintained, failure ratio {:.2} (24 h), backlog {} \
         (oldest {:.0} s), {} operations / {} commits last hour\n",
        text(&m["maintained"]),
        text(&m["tables"]),
        m["failure_ratio"].as_f64().unwrap_or(0.0),
        text(&m["backlog"]),
        m["oldest_wait_s"].as_f64().unwrap_or(0.0),
        text(&m["operations_last_hour"]),
        text(&m["commits_last_hour"])
    );
    Ok(out)
}

/// Every table's health: score, files, small files, deletes, manifests, snapshots, lag, why.
///
/// # Errors
/// When the admin API cannot be read.
pub async fn tables(base: &str) -> Result<String> {
    let tables = fetch(base, "/api/table_health").await?;
    let mut out = format!(
        "{:<32} {:>6} {:>8} {:>7} {:>8} {:>9} {:>9} {:>11}  {}\n",
        "table", "health", "files", "small", "deletes", "manifests", "snapshots", "lag", "why"
    );
    for t in rows(&tables, "tables") {
        let reasons: Vec<String> = t["reasons"]
            .as_array()
            .map(|a| a.iter().map(text).collect())
            .unwrap_or_default();
        out += &format!(
            "{:<32} {:>6.0} {:>8} {:>7} {:>8} {:>9} {:>9} {:>10.1}s  {}\n",
            text(&t["table"]),
            t["score"].as_f64().unwrap_or(0.0),
            text(&t["data_files"]),
            text(&t["small_files"]),
            text(&t["delete_files"]),
            text(&t["manifests"]),
            text(&t["snapshots"]),
            t["snapshot_lag_s"].as_f64().unwrap_or(0.0),
            if reasons.is_empty() {
                "healthy".to_string()
            } else {
                reasons.join("; ")
            }
        );
    }
    Ok(out)
}

/// Recent (or the slowest) queries.
///
/// # Errors
/// When the admin API cannot be read.
pub async fn queries(base: &str, limit: usize, slowest: bool) -> Result<String> {
    let q = fetch(
        base,
        &format!("/api/queries?limit={limit}&slowest={slowest}"),
    )
    .await?;
    let mut out = format!(
        "{:>8} {:>10} {:<10} {:<14} {:<13} {:<6} sql\n",
        "id", "ms", "engine", "group", "shape", "cache"
    );
    for r in rows(&q, "queries") {
        let mut sql = text(&r["sql"]).replace('\n', " ");
        if sql.chars().count() > 80 {
            sql = sql.chars().take(77).collect::<String>() + "...";
        }
        out += &format!(
            "{:>8} {:>10} {:<10} {:<14} {:<13} {:<6} {}{}\n",
            text(&r["id"]),
            text(&r["millis"]),
            text(&r["engine"]),
            text(&r["group"]),
            text(&r["shape"]),
            text(&r["cache"]),
            sql,
            r["error"]
                .as_str()
                .map(|e| format!("  ERROR {e}"))
                .unwrap_or_default()
        );
    }
    Ok(out)
}

/// Agents' statements waiting for approval, and the last decisions.
///
/// # Errors
/// When the admin API cannot be read.
pub async fn pending(base: &str) -> Result<String> {
    let p = fetch(base, "/api/pending").await?;
    let mut out = format!(
        "{:>6} {:<14} {:>10}  {:<40} sql\n",
        "id", "agent", "scan", "why held"
    );
    for r in rows(&p, "pending") {
        out += &format!(
            "{:>6} {:<14} {:>10}  {:<40} {}\n",
            text(&r["id"]),
            text(&r["user"]),
            lakegate_engines::units::human_bytes(r["scan_bytes"].as_u64().unwrap_or(0)),
            text(&r["reason"]),
            text(&r["sql"]).replace('\n', " ")
        );
    }
    let decided = rows(&p, "decided");
    if !decided.is_empty() {
        out += "decided (newest first)\n";
        for r in decided.iter().take(10) {
            out += &format!(
                "{:>6} {:<14} {:<9} by {}\n",
                text(&r["id"]),
                text(&r["user"]),
                text(&r["decision"]["verdict"]),
                text(&r["decision"]["by"])
            );
        }
    }
    Ok(out)
}

/// `POST {list}/{id}/approve` (or `/reject`): the decision's JSON.
async fn post_decision(base: &str, list: &str, id: u64, approve: bool) -> Result<Value> {
    let verb = if approve { "approve" } else { "reject" };
    call(base, &format!("{list}/{id}/{verb}"), reqwest::Method::POST).await
}

/// Approves (or rejects) held statement `id`.
///
/// # Errors
/// When the statement is not waiting, or the admin API refuses.
pub async fn decide(base: &str, id: u64, approve: bool) -> Result<String> {
    let d = post_decision(base, "/api/pending", id, approve).await?;
    Ok(format!(
        "statement {id} of {}: {} by {}\n",
        text(&d["user"]),
        text(&d["decision"]["verdict"]),
        text(&d["decision"]["by"])
    ))
}

/// Maintenance operations held for approval.
///
/// # Errors
/// When the admin API cannot be read.
pub async fn pending_operations(base: &str) -> Result<String> {
    let p = fetch(base, "/api/pending_operations").await?;
    let mut out = format!(
        "{:>5} {:<28} {:<18} {:<24} {:<10} why\n",
        "id", "table", "operation", "partition", "approved"
    );
    for o in rows(&p, "operations") {
        out += &format!(
            "{:>5} {:<28} {:<18} {:<24} {:<10} {}\n",
            text(&o["id"]),
            text(&o["table"]),
            text(&o["kind"]),
            text(&o["partition"]),
            o["approved_by"].as_str().unwrap_or("no"),
            text(&o["reason"])
        );
    }
    Ok(out)
}

/// Approves (or rejects) held maintenance operation `id`.
///
/// # Errors
/// When the operation is not waiting, or the admin API refuses.
pub async fn decide_operation(base: &str, id: u64, approve: bool) -> Result<String> {
    let d = post_decision(base, "/api/pending_operations", id, approve).await?;
    Ok(format!(
        "{} {} of {}: {} by {}\n",
        text(&d["operation"]["kind"]),
        id,
        text(&d["operation"]["table"]),
        if approve {
            "approved (runs at the next cycle)"
        } else {
            "rejected"
        },
        text(&d["by"])
    ))
}

//! The admin API's routes (see the table in [`super`]): each reads the service and answers
//! JSON, or the Prometheus text for `/metrics`.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use crate::observe::metrics::{Scrape, table_infos};

/// The web console.
pub(super) async fn console_page() -> axum::response::Html<&'static str> {
    axum::response::Html(crate::observe::console::PAGE)
}

/// One table's page data (see [`crate::observe::console::table_detail`]).
pub(super) async fn table_detail(
    State(s): State<AppState>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> axum::response::Response {
    let service = &s.service;
    let detail = crate::observe::console::table_detail(
        service.lake(),
        service.maintainer(),
        service.history(),
        &name,
    );
    match detail.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => {
            let status = match e.kind() {
                lakegate_engines::ErrorKind::UndefinedTable => StatusCode::NOT_FOUND,
                lakegate_engines::ErrorKind::Unsupported => StatusCode::BAD_REQUEST,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            (status, Json(json!({ "error": e.to_string() }))).into_response()
        }
    }
}

/// Every table's health (assessed at most 2 s ago), least healthy first, with its trend.
pub(super) async fn table_health(State(s): State<AppState>) -> axum::response::Response {
    let m = s.service.maintainer();
    match m.health_within(std::time::Duration::from_secs(2)).await {
        Ok(h) => {
            let tables: Vec<Value> = h
                .iter()
                .map(|t| {
                    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
                    let trend: Vec<Value> = m
                        .trend(&t.table)
                        .into_iter()
                        .rev()
                        .take(60)
                        .rev()
                        .map(|(at, score, files)| json!({"at_ms": at, "score": score, "files": files}))
                        .collect();
                    v["trend"] = json!(trend);
                    // The estate view lists tables; partitions are on each table's page.
                    v["partitions"] = json!(t.partitions.len());
                    v
                })
                .collect();
            Json(json!({ "tables": tables })).into_response()
        }
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// The maintenance loop's service levels.
pub(super) async fn maintenance(State(s): State<AppState>) -> Json<Value> {
    Json(json!(s.service.maintainer().slo()))
}

/// The maintenance operations log (with shared state, every replica's), newest first.
pub(super) async fn operations(State(s): State<AppState>) -> Json<serde_json::Value> {
    let mut ops = s.service.maintainer().log().all();
    ops.sort_by(|a, b| b.started_us.cmp(&a.started_us).then(b.id.cmp(&a.id)));
    Json(json!({ "operations": ops }))
}

/// This gateway among its replicas: its name, whether state is shared, who leads the
/// maintenance loop and whether it is this one.
pub(super) async fn state(State(s): State<AppState>) -> Json<Value> {
    let m = s.service.maintainer();
    match m.shared() {
        None => Json(json!({ "shared": false, "leading": m.is_leader() })),
        Some(state) => {
            let leader = state
                .holder(lakegate_maintenance::state::LEADER)
                .await
                .ok()
                .flatten();
            Json(json!({
                "shared": true,
                "replica": state.replica(),
                "leader": leader,
                "leading": m.is_leader(),
            }))
        }
    }
}

pub(super) async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(&Scrape {
            router: s.service.router(),
            engines: s.service.engines().names(),
            cache: s.service.cache_stats().await,
            lake: s.service.lake(),
            maintainer: s.service.maintainer(),
            auth_failures: s.service.auth().failures(),
            accelerator: s.service.engines().accelerator.as_deref(),
        }),
    )
}

pub(super) async fn ready(State(s): State<AppState>) -> impl IntoResponse {
    let check =
        tokio::time::timeout(std::time::Duration::from_secs(2), s.service.directory()).await;
    match check {
        Ok(Ok(d)) => (
            StatusCode::OK,
            Json(json!({"status": "ready", "schemas": d.schemas.len()})),
        ),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "catalog unavailable", "error": e.to_string()})),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "catalog did not answer within 2 s"})),
        ),
    }
}

pub(super) async fn engines(State(s): State<AppState>) -> Json<Value> {
    let default = s.service.engines().default.clone();
    let list: Vec<Value> = s
        .service
        .engines()
        .health()
        .await
        .into_iter()
        .map(|h| {
            json!({"engine": h.engine, "healthy": h.error.is_none(),
                   "is_default": h.engine == default, "check_ms": h.check_ms, "error": h.error})
        })
        .collect();
    Json(json!({ "engines": list }))
}

pub(super) async fn routing(State(s): State<AppState>) -> Json<Value> {
    let router = s.service.router();
    let table = router.table();
    let groups: Vec<Value> = table
        .groups
        .values()
        .map(|g| {
            json!({"name": g.name, "engines": g.engines, "max_concurrent": g.max_concurrent,
                   "queue_length": g.queue_length, "queue_timeout_ms": g.queue_timeout.as_millis() as u64,
                   "cache": g.cache, "max_staleness_ms": g.max_staleness.as_millis() as u64,
                   "explore": g.explore, "selectable": g.selectable})
        })
        .collect();
    let rules: Vec<Value> = table
        .rules
        .iter()
        .map(|r| {
            json!({"name": r.spec.name, "priority": r.spec.priority, "group": r.spec.group,
                        "file": r.file.display().to_string()})
        })
        .collect();
    let load: Vec<Value> = router
        .load_by_group()
        .into_iter()
        .map(|(g, running, queued)| json!({"group": g, "running": running, "queued": queued}))
        .collect();
    let observed: Vec<Value> = router
        .stats
        .snapshot()
        .into_iter()
        .map(|((engine, shape, bucket), o)| {
            json!({"engine": engine, "shape": shape.name(),
                   "size_bucket": crate::routing::stats::bucket_name(bucket), "queries": o.count,
                   "ewma_ms": o.ewma_ms, "p50_ms": o.quantile(0.5), "p95_ms": o.quantile(0.95),
                   "success_rate": o.success})
        })
        .collect();
    let breakers: serde_json::Map<String, Value> = s
        .service
        .engines()
        .names()
        .into_iter()
        .map(|e| (e.to_string(), json!(router.stats.breaker(e).state())))
        .collect();
    Json(
        json!({"default_group": table.default_group, "groups": groups, "rules": rules,
                "load": load, "observed": observed, "warnings": table.warnings,
                "breakers": breakers}),
    )
}

#[derive(Deserialize)]
pub(super) struct QueriesParams {
    limit: Option<usize>,
    slowest: Option<bool>,
}

pub(super) async fn queries(
    State(s): State<AppState>,
    Query(p): Query<QueriesParams>,
) -> Json<Value> {
    let records = s.service.history().recent(
        p.limit.unwrap_or(100).min(10_000),
        p.slowest.unwrap_or(false),
    );
    let list: Vec<Value> = records
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    Json(json!({ "queries": list }))
}

pub(super) async fn cache(State(s): State<AppState>) -> Json<Value> {
    let stats: serde_json::Map<String, Value> = s
        .service
        .cache()
        .stats_values()
        .await
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    Json(Value::Object(stats))
}

pub(super) async fn tables(State(s): State<AppState>) -> Json<Value> {
    Json(json!({ "tables": table_infos(s.service.lake()) }))
}

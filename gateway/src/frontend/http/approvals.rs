//! What waits for an operator: agents' statements (`GET /api/pending`, with the last
//! decisions; `POST /api/pending/{id}/approve|reject`) and maintenance operations of tables in
//! manual mode or of kinds that always need approval (`GET /api/pending_operations`; `POST
//! /api/pending_operations/{id}/approve|reject`). Deciding takes role `admin` when users are
//! configured; the decision records who (the user, or `local` without users).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use super::AppState;
use crate::agents::approvals::Verdict;
use lakegate_maintenance::state::Waiting;

/// `GET /api/pending`.
pub(super) async fn pending(State(s): State<AppState>) -> Json<serde_json::Value> {
    let approvals = &s.service.agents().approvals;
    let pending = match shared_waiting(&s, Waiting::Statements).await {
        Some(items) => json!(items),
        None => json!(approvals.pending()),
    };
    Json(json!({
        "pending": pending,
        "decided": approvals.decided().into_iter().take(50).collect::<Vec<_>>(),
    }))
}

/// With shared state, every replica's waiting items of `kind` (each with its `replica`);
/// `None` alone, or when the database cannot be read (this replica's own list then).
async fn shared_waiting(s: &AppState, kind: Waiting) -> Option<Vec<serde_json::Value>> {
    let state = s.service.maintainer().shared()?;
    let items = state.waiting(kind).await.ok()?;
    Some(
        items
            .into_iter()
            .filter_map(|i| {
                let mut v: serde_json::Value = serde_json::from_str(&i.json).ok()?;
                v["replica"] = json!(i.replica);
                Some(v)
            })
            .collect(),
    )
}

/// A decision on an item another replica holds (recorded for it to apply at its next poll).
async fn decide_elsewhere(
    s: &AppState,
    kind: Waiting,
    id: u64,
    approve: bool,
    by: &str,
) -> Option<serde_json::Value> {
    let state = s.service.maintainer().shared()?;
    let item = state.decide(kind, id, approve, by).await.ok()??;
    let mut v: serde_json::Value = serde_json::from_str(&item.json).ok()?;
    v["replica"] = json!(item.replica);
    Some(v)
}

/// `POST /api/pending/{id}/approve`.
pub(super) async fn approve(
    State(s): State<AppState>,
    Path(id): Path<u64>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let by = decider(&s, &request);
    drop(request);
    decide(&s, id, Verdict::Approved, by).await
}

/// `POST /api/pending/{id}/reject`.
pub(super) async fn reject(
    State(s): State<AppState>,
    Path(id): Path<u64>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let by = decider(&s, &request);
    drop(request);
    decide(&s, id, Verdict::Rejected, by).await
}

/// `GET /api/pending_operations` (with shared state, the leader's, from any replica).
pub(super) async fn pending_operations(State(s): State<AppState>) -> Json<serde_json::Value> {
    match shared_waiting(&s, Waiting::Operations).await {
        Some(items) => Json(json!({ "operations": items })),
        None => Json(json!({ "operations": s.service.maintainer().approvals().list() })),
    }
}

/// `POST /api/pending_operations/{id}/approve` (`approve`) or `/reject`.
pub(super) async fn decide_operation(
    State(s): State<AppState>,
    Path((id, verb)): Path<(u64, String)>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let approve = match verb.as_str() {
        "approve" => true,
        "reject" => false,
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let by = match decider(&s, &request) {
        Ok(by) => by,
        Err(refused) => return refused,
    };
    drop(request);
    match s.service.maintainer().approvals().decide(id, approve, &by) {
        Ok(op) => {
            tracing::info!(id, by = %by, approve, table = %op.table, kind = %op.kind, "maintenance operation decided");
            Json(json!({"operation": op, "approved": approve, "by": by})).into_response()
        }
        Err(e) => match decide_elsewhere(&s, Waiting::Operations, id, approve, &by).await {
            Some(op) => {
                Json(json!({"operation": op, "approved": approve, "by": by})).into_response()
            }
            None => (StatusCode::NOT_FOUND, Json(json!({"error": e.to_string()}))).into_response(),
        },
    }
}

/// Who decides: an admin (users configured), else `local`; or the refusal to answer.
#[allow(clippy::result_large_err)]
fn decider(
    s: &AppState,
    request: &axum::extract::Request,
) -> Result<String, axum::response::Response> {
    let auth = s.service.auth();
    if !auth.required() {
        return Ok("local".to_string());
    }
    match super::authorized_user(auth, request.headers()) {
        Some(user) if auth.roles(&user).iter().any(|r| r == "admin") => Ok(user),
        Some(user) => Err((
            StatusCode::FORBIDDEN,
            Json(json!({"error": format!("user \"{user}\" needs role admin to decide")})),
        )
            .into_response()),
        None => Err(StatusCode::UNAUTHORIZED.into_response()),
    }
}

async fn decide(
    s: &AppState,
    id: u64,
    verdict: Verdict,
    by: Result<String, axum::response::Response>,
) -> axum::response::Response {
    let by = match by {
        Ok(by) => by,
        Err(refused) => return refused,
    };
    match s.service.agents().approvals.decide(id, verdict, &by) {
        Ok(decided) => Json(json!(decided)).into_response(),
        Err(e) => {
            let approve = verdict == Verdict::Approved;
            match decide_elsewhere(s, Waiting::Statements, id, approve, &by).await {
                Some(mut request) => {
                    request["decision"] = json!({"verdict": verdict, "by": by});
                    Json(request).into_response()
                }
                None => {
                    (StatusCode::NOT_FOUND, Json(json!({"error": e.to_string()}))).into_response()
                }
            }
        }
    }
}

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

/// `GET /api/pending`.
pub(super) async fn pending(State(s): State<AppState>) -> Json<serde_json::Value> {
    let approvals = &s.service.agents().approvals;
    Json(json!({
        "pending": approvals.pending(),
        "decided": approvals.decided().into_iter().take(50).collect::<Vec<_>>(),
    }))
}

/// `POST /api/pending/{id}/approve`.
pub(super) async fn approve(
    State(s): State<AppState>,
    Path(id): Path<u64>,
    request: axum::extract::Request,
) -> axum::response::Response {
    decide(&s, id, Verdict::Approved, &request)
}

/// `POST /api/pending/{id}/reject`.
pub(super) async fn reject(
    State(s): State<AppState>,
    Path(id): Path<u64>,
    request: axum::extract::Request,
) -> axum::response::Response {
    decide(&s, id, Verdict::Rejected, &request)
}

/// `GET /api/pending_operations`.
pub(super) async fn pending_operations(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({ "operations": s.service.maintainer().approvals().list() }))
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
    match s.service.maintainer().approvals().decide(id, approve, &by) {
        Ok(op) => {
            tracing::info!(id, by = %by, approve, table = %op.table, kind = %op.kind, "maintenance operation decided");
            Json(json!({"operation": op, "approved": approve, "by": by})).into_response()
        }
        Err(e) => (StatusCode::NOT_FOUND, Json(json!({"error": e.to_string()}))).into_response(),
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

fn decide(
    s: &AppState,
    id: u64,
    verdict: Verdict,
    request: &axum::extract::Request,
) -> axum::response::Response {
    let by = match decider(s, request) {
        Ok(by) => by,
        Err(refused) => return refused,
    };
    match s.service.agents().approvals.decide(id, verdict, &by) {
        Ok(decided) => Json(json!(decided)).into_response(),
        Err(e) => (StatusCode::NOT_FOUND, Json(json!({"error": e.to_string()}))).into_response(),
    }
}

//! Agents' statements held for approval: `GET /api/pending` lists them (and the last
//! decisions), `POST /api/pending/{id}/approve` and `/reject` decide one. Deciding takes role
//! `admin` when users are configured; the decision records who (the user, or `local` without
//! users) and when.

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

fn decide(
    s: &AppState,
    id: u64,
    verdict: Verdict,
    request: &axum::extract::Request,
) -> axum::response::Response {
    let auth = s.service.auth();
    let by = if auth.required() {
        match super::authorized_user(auth, request.headers()) {
            Some(user) if auth.roles(&user).iter().any(|r| r == "admin") => user,
            Some(user) => {
                return (
                    StatusCode::FORBIDDEN,
                    Json(json!({"error": format!("user \"{user}\" needs role admin to decide")})),
                )
                    .into_response();
            }
            None => return StatusCode::UNAUTHORIZED.into_response(),
        }
    } else {
        "local".to_string()
    };
    match s.service.agents().approvals.decide(id, verdict, &by) {
        Ok(decided) => Json(json!(decided)).into_response(),
        Err(e) => (StatusCode::NOT_FOUND, Json(json!({"error": e.to_string()}))).into_response(),
    }
}

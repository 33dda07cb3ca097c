//! The JSON API under `/api/`, one module per resource.

pub mod auth;

use axum::routing::{delete, get, post};
use axum::Router;

use crate::AppState;

/// All `/api/` routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/health", get(health))
        .route("/api/auth/signin", post(auth::signin))
        .route("/api/auth/signout", post(auth::signout))
        .route("/api/sessions", get(auth::list_sessions))
        .route("/api/sessions/{id}", delete(auth::revoke_session))
        .route("/api/events/ticket", post(auth::ticket))
        .route("/api/cli/challenge", get(auth::cli_challenge))
        .route("/api/cli/signin-link", post(auth::cli_signin_link))
}

async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "ok": true, "dashboard_built": crate::assets::DASHBOARD_BUILT }))
}

//! Sign-in, sessions, event-stream tickets and the CLI challenge.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// A request carrying a valid `Authorization: Bearer <session token>`.
#[derive(Debug, Clone)]
pub struct Authed {
    /// Public id of the session.
    pub session_id: String,
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized)?;
        let session_id = state
            .auth
            .check_session(token)
            .ok_or(ApiError::Unauthorized)?;
        Ok(Authed { session_id })
    }
}

#[derive(Deserialize)]
pub(crate) struct SigninBody {
    token: String,
}

/// `POST /api/auth/signin` — exchange a one-time link token for a session.
pub(crate) async fn signin(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Json(body): Json<SigninBody>,
) -> ApiResult<Json<Value>> {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let new = state
        .auth
        .redeem_signin(&body.token, ua)
        .ok_or(ApiError::SigninLinkInvalid)?;
    state.record_signin(&new.session).await;
    Ok(Json(json!({ "token": new.token, "session": new.session })))
}

/// `POST /api/auth/signout` — revoke the calling session.
pub(crate) async fn signout(State(state): State<AppState>, who: Authed) -> StatusCode {
    state.auth.revoke(&who.session_id);
    StatusCode::NO_CONTENT
}

/// `GET /api/sessions`
pub(crate) async fn list_sessions(State(state): State<AppState>, who: Authed) -> Json<Value> {
    let items: Vec<Value> = state
        .auth
        .sessions()
        .into_iter()
        .map(|s| {
            let current = s.id == who.session_id;
            let mut v = serde_json::to_value(s).expect("SessionInfo serializes");
            v["current"] = json!(current);
            v
        })
        .collect();
    Json(json!({ "items": items }))
}

/// `DELETE /api/sessions/{id}`
pub(crate) async fn revoke_session(
    State(state): State<AppState>,
    _who: Authed,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if state.auth.revoke(&id) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("session"))
    }
}

/// `POST /api/events/ticket` — a single-use ticket for the event stream.
pub(crate) async fn ticket(State(state): State<AppState>, who: Authed) -> Json<Value> {
    Json(json!({ "ticket": state.auth.mint_ticket(&who.session_id) }))
}

/// `GET /api/cli/challenge` — a nonce for the CLI to MAC with its secret.
pub(crate) async fn cli_challenge(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "nonce": state.auth.mint_challenge() }))
}

#[derive(Deserialize)]
pub(crate) struct CliSigninBody {
    nonce: String,
    mac: String,
}

/// `POST /api/cli/signin-link` — a fresh sign-in path for a verified CLI,
/// with the control plane's proof that it knows the secret too
/// ([`crate::auth::control_proof`], over the Host the guard let in).
pub(crate) async fn cli_signin_link(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Json(body): Json<CliSigninBody>,
) -> ApiResult<Json<Value>> {
    if !state.auth.verify_challenge(&body.nonce, &body.mac) {
        return Err(ApiError::ChallengeFailed);
    }
    let url = crate::signin_path(&state.auth.mint_signin());
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let proof = state.auth.control_proof(host, &body.nonce, &url);
    Ok(Json(json!({ "url": url, "proof": proof })))
}

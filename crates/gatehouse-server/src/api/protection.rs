//! `GET /api/protection`, `POST /api/protection/pause {minutes}`,
//! `POST /api/protection/resume`: the global pause every wrap follows
//! (see [`crate::protection`]).

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Authed;
use super::store_err;
use crate::error::{ApiError, ApiResult};
use crate::protection::{self, PauseError, ProtectionState};
use crate::AppState;

/// `{"state": "active"}` or `{"state": "paused", "until_ms": …}`.
pub(crate) fn state_json(state: ProtectionState) -> Value {
    match state {
        ProtectionState::Active => json!({ "state": "active" }),
        ProtectionState::Paused { until_ms } => json!({ "state": "paused", "until_ms": until_ms }),
    }
}

fn pause_err(e: PauseError) -> ApiError {
    match e {
        PauseError::Length(_) | PauseError::Duration => ApiError::BadRequest(e.to_string()),
        PauseError::Store(e) => store_err(e),
    }
}

pub(crate) async fn current(state: &AppState) -> ApiResult<ProtectionState> {
    protection::state(&state.store, &state.mac_key, state.now_ms())
        .await
        .map_err(pause_err)
}

/// `GET /api/protection`
pub(crate) async fn get(State(state): State<AppState>, _who: Authed) -> ApiResult<Json<Value>> {
    Ok(Json(state_json(current(&state).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseBody {
    /// Defaults to one hour.
    #[serde(default = "one_hour")]
    minutes: u32,
}

fn one_hour() -> u32 {
    60
}

/// `POST /api/protection/pause {minutes}`
pub(crate) async fn pause(
    State(state): State<AppState>,
    _who: Authed,
    Json(b): Json<PauseBody>,
) -> ApiResult<Json<Value>> {
    protection::pause(
        &state.store,
        &state.mac_key,
        b.minutes,
        state.now_ms(),
        "the dashboard",
    )
    .await
    .map_err(pause_err)?;
    Ok(Json(state_json(current(&state).await?)))
}

/// `POST /api/protection/resume`
pub(crate) async fn resume(State(state): State<AppState>, _who: Authed) -> ApiResult<Json<Value>> {
    protection::resume(&state.store, state.now_ms(), "the dashboard")
        .await
        .map_err(pause_err)?;
    Ok(Json(state_json(current(&state).await?)))
}

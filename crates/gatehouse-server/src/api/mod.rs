//! The JSON API under `/api/`, one module per resource. Documented in
//! `docs/api.md`. Every route but health, sign-in and the CLI challenge
//! requires a session ([`auth::Authed`]).

pub mod auth;
pub mod clients;
pub mod consent;
pub mod events;
pub mod inventory;
pub mod policy;
pub mod protection;
pub mod vault;

use std::collections::HashMap;

use axum::extract::State;
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use gatehouse_store::{ConsentState, PinState, StoreError};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// Event types the control plane itself records.
pub mod event_types {
    /// A dashboard sign-in.
    pub const UI_SIGNIN: &str = "ui_signin";
    /// A person approved a tool definition.
    pub const TOOL_APPROVED: &str = "tool_approved";
    /// A person rejected a tool definition.
    pub const TOOL_REJECTED: &str = "tool_rejected";
    /// A person reset a pin.
    pub const PIN_RESET: &str = "pin_reset";
    /// A person approved a changed server launch.
    pub const LAUNCH_APPROVED: &str = "launch_approved";
    /// A person approved a package held as a likely typosquat.
    pub const PACKAGE_APPROVED: &str = "package_approved";
    /// A person answered an input request or shadowing tie.
    pub const CONSENT_ANSWERED: &str = "consent_answered";
    /// A person (or the sensitive-field rule) declined a request.
    pub const CONSENT_DECLINED: &str = "consent_declined";
    /// The policy was saved from the dashboard.
    pub const POLICY_SAVED: &str = "policy_saved";
    /// A secret was stored (name only; one row per name).
    pub const SECRET_SET: &str = gatehouse_store::event_types::SECRET_SET;
    /// A secret was deleted (name only; one row per name).
    pub const SECRET_DELETED: &str = gatehouse_store::event_types::SECRET_DELETED;
    /// A client's configs were protected from the dashboard.
    pub const CLIENT_PROTECTED: &str = "client_protected";
    /// A client's configs were restored from the dashboard.
    pub const CLIENT_UNPROTECTED: &str = "client_unprotected";
    /// Wrapped entries were pointed at the current binary at start.
    pub const CLIENT_CONFIG_REPAIRED: &str = "client_config_repaired";
    /// Protection was paused (audit only until a deadline).
    pub const PROTECTION_PAUSED: &str = gatehouse_store::event_types::PROTECTION_PAUSED;
    /// A pause ended: a person ended it, or it reached its deadline.
    pub const PROTECTION_RESUMED: &str = gatehouse_store::event_types::PROTECTION_RESUMED;
}

/// Maps store failures to safe API errors.
pub(crate) fn store_err(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { what } => ApiError::NotFound(what),
        StoreError::UnknownToolHash { .. } => {
            ApiError::Conflict("that definition hash was never seen for this tool".into())
        }
        StoreError::Invalid(why) => ApiError::BadRequest(why.to_owned()),
        StoreError::Busy => ApiError::Conflict("the database is busy; try again".into()),
        other => ApiError::internal(format!("store: {other}")),
    }
}

/// Server id → display name.
pub(crate) async fn server_names(state: &AppState) -> ApiResult<HashMap<String, String>> {
    let servers = state.store.list_servers().await.map_err(store_err)?;
    Ok(servers
        .iter()
        .map(|s| (s.id.clone(), inventory::display_name(s)))
        .collect())
}

/// All `/api/` routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/health", get(health))
        .route("/api/auth/signin", post(auth::signin))
        .route("/api/auth/signout", post(auth::signout))
        .route("/api/sessions", get(auth::list_sessions))
        .route("/api/sessions/{id}", delete(auth::revoke_session))
        .route("/api/cli/challenge", get(auth::cli_challenge))
        .route("/api/cli/signin-link", post(auth::cli_signin_link))
        .route("/api/overview", get(overview))
        .route("/api/events", get(events::list))
        .route("/api/events/ticket", post(auth::ticket))
        .route("/api/events/stream", get(crate::stream::events_stream))
        .route("/api/events/{id}", get(events::get))
        .route("/api/servers", get(inventory::servers))
        .route("/api/tools", get(inventory::tools))
        .route("/api/tools/{server}/{name}", get(inventory::tool))
        .route("/api/pins", get(inventory::pins))
        .route("/api/pins/diff", get(inventory::diff))
        .route("/api/pins/approve", post(inventory::approve))
        .route("/api/pins/reject", post(inventory::reject))
        .route("/api/pins/reset", post(inventory::reset))
        .route("/api/pins/approve-launch", post(inventory::approve_launch))
        .route("/api/consent", get(consent::list))
        .route("/api/consent/{id}/answer", post(consent::answer))
        .route("/api/vault", get(vault::list))
        .route(
            "/api/vault/{server}/{name}",
            put(vault::set).delete(vault::delete),
        )
        .route("/api/clients", get(clients::list))
        .route("/api/clients/{id}/protect", post(clients::protect))
        .route("/api/clients/{id}/unprotect", post(clients::unprotect))
        .route("/api/policy", get(policy::get).put(policy::save))
        .route("/api/policy/validate", post(policy::check))
        .route("/api/policy/generate", post(policy::generate))
        .route("/api/protection", get(protection::get))
        .route("/api/protection/pause", post(protection::pause))
        .route("/api/protection/resume", post(protection::resume))
}

async fn health() -> Json<Value> {
    Json(json!({ "ok": true, "dashboard_built": crate::assets::DASHBOARD_BUILT }))
}

/// `GET /api/overview` — counts and recent events for the first page.
async fn overview(State(state): State<AppState>, _who: auth::Authed) -> ApiResult<Json<Value>> {
    let servers = state.store.list_servers().await.map_err(store_err)?;
    let pins = state
        .store
        .all_pins(&state.mac_key)
        .await
        .map_err(store_err)?;
    let pending = state
        .store
        .list_consents(Some(ConsentState::Pending), 1000)
        .await
        .map_err(store_err)?;
    let since = state.now_ms() - 24 * 60 * 60 * 1000;
    let blocks: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(count), 0) FROM events WHERE action = 'block' AND time_ms >= ?",
    )
    .bind(since)
    .fetch_one(state.store.pool())
    .await
    .map_err(|e| ApiError::internal(format!("overview: {e}")))?;
    let names = server_names(&state).await?;
    let recent = events::query(
        &state,
        &events::EventQuery {
            limit: Some(10),
            ..Default::default()
        },
    )
    .await?;
    let per_server: Vec<Value> = servers
        .iter()
        .map(|s| {
            let waiting = pins.iter().filter(|p| p.server_id == s.id && p.state != PinState::Trusted).count();
            json!({ "id": s.id, "name": inventory::display_name(s), "client": s.client, "protected": inventory::origin_name(s) == "protect", "waiting": waiting })
        })
        .collect();
    let protection = protection::state_json(protection::current(&state).await?);
    Ok(Json(json!({
        "protection": protection,
        "servers": per_server,
        "counts": {
            "servers": servers.len(),
            "tools_waiting": pins.iter().filter(|p| p.state != PinState::Trusted).count(),
            "pending_consents": pending.len(),
            "blocks_24h": blocks,
        },
        "recent_events": recent.iter().map(|e| events::event_json(e, &names)).collect::<Vec<_>>(),
    })))
}

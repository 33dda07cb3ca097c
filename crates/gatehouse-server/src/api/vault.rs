//! Server secrets: names only, set, delete. Values go into the OS keyring
//! and never come back out through the API.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use gatehouse_vault::{Secret, Vault, VaultError};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Authed;
use super::inventory::display_name;
use super::{event_types, store_err};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

fn vault(state: &AppState) -> ApiResult<Arc<dyn Vault>> {
    state
        .vault
        .clone()
        .ok_or_else(|| ApiError::KeyringUnavailable(crate::keyring_probe_failure()))
}

/// Vault failures as API errors. `VaultError` messages carry names and
/// reasons, never values.
pub(crate) fn vault_err(e: VaultError) -> ApiError {
    match e {
        VaultError::InvalidName { what, reason, .. } => {
            ApiError::BadRequest(format!("invalid {what}: {reason}"))
        }
        e @ VaultError::ReservedName { .. } => ApiError::BadRequest(e.to_string()),
        VaultError::TooLarge { max, .. } => {
            ApiError::BadRequest(format!("value too large (at most {max} bytes)"))
        }
        e @ (VaultError::Timeout(_) | VaultError::Unavailable(_)) => {
            ApiError::KeyringUnavailable(e.to_string())
        }
        other => ApiError::internal(format!("vault: {other}")),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, VaultError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| ApiError::internal("vault task failed"))?
        .map_err(vault_err)
}

/// `GET /api/vault` — per server, the names of its secrets.
pub(crate) async fn list(State(state): State<AppState>, _who: Authed) -> ApiResult<Json<Value>> {
    let servers = state.store.list_servers().await.map_err(store_err)?;
    let Some(v) = state.vault.clone() else {
        return Ok(Json(json!({
            "available": false,
            "reason": format!("the OS keyring is unavailable: {}", crate::keyring_probe_failure()),
            "items": [],
        })));
    };
    let ids: Vec<(String, String)> = servers
        .iter()
        .map(|s| (s.id.clone(), display_name(s)))
        .collect();
    let listed = blocking(move || {
        ids.into_iter()
            .map(|(id, name)| v.list(&id).map(|names| (id, name, names)))
            .collect::<Result<Vec<_>, _>>()
    })
    .await?;
    let items: Vec<Value> = listed
        .into_iter()
        .map(|(id, name, names)| json!({ "server_id": id, "server_name": name, "names": names }))
        .collect();
    Ok(Json(json!({ "available": true, "items": items })))
}

#[derive(Deserialize)]
pub(crate) struct SetBody {
    value: String,
}

/// `PUT /api/vault/{server}/{name} {value}`
pub(crate) async fn set(
    State(state): State<AppState>,
    who: Authed,
    Path((server, name)): Path<(String, String)>,
    Json(b): Json<SetBody>,
) -> ApiResult<StatusCode> {
    let v = vault(&state)?;
    if state
        .store
        .get_server(&server)
        .await
        .map_err(store_err)?
        .is_none()
    {
        return Err(ApiError::NotFound("server"));
    }
    let secret = Secret::new(b.value);
    let (s2, n2) = (server.clone(), name.clone());
    blocking(move || v.set(&s2, &n2, secret)).await?;
    state
        .record(
            event_types::SECRET_SET,
            Some(&server),
            None,
            &format!("secret {name} set"),
            &who.session_id,
        )
        .await;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/vault/{server}/{name}`
pub(crate) async fn delete(
    State(state): State<AppState>,
    who: Authed,
    Path((server, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let v = vault(&state)?;
    let (s2, n2) = (server.clone(), name.clone());
    if !blocking(move || v.delete(&s2, &n2)).await? {
        return Err(ApiError::NotFound("secret"));
    }
    state
        .record(
            event_types::SECRET_DELETED,
            Some(&server),
            None,
            &format!("secret {name} deleted"),
            &who.session_id,
        )
        .await;
    Ok(StatusCode::NO_CONTENT)
}

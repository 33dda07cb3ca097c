//! Servers, tools (with full definitions) and pins: list, diff two versions,
//! approve exactly one hash, reject, reset.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use gatehouse_store::{Pin, PinState, Server, StoreError, ToolDefinition};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Authed;
use super::{event_types, store_err};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// A person-facing name for a server.
pub fn display_name(s: &Server) -> String {
    s.display_name
        .clone()
        .or_else(|| s.entry_name.clone())
        .unwrap_or_else(|| s.id.clone())
}

/// Who registered the server: `protect` or `wrap`.
pub fn origin_name(s: &Server) -> &'static str {
    match s.origin {
        gatehouse_store::ServerOrigin::Protect => "protect",
        gatehouse_store::ServerOrigin::Wrap => "wrap",
    }
}

/// The launch command as one line (argv joined by spaces), if recorded.
pub fn command_line(s: &Server) -> Option<String> {
    let argv: Vec<String> = serde_json::from_str(s.argv_json.as_deref()?).ok()?;
    Some(argv.join(" "))
}

fn server_json(s: &Server, mode: Option<&str>, tools: usize, waiting: usize) -> Value {
    json!({
        "id": s.id,
        "name": display_name(s),
        "origin": origin_name(s),
        "client": s.client,
        "config_path": s.config_path,
        "scope": s.scope,
        "entry_name": s.entry_name,
        "command": command_line(s),
        "cwd": s.cwd,
        "mode": mode.unwrap_or("normal"),
        "tools": tools,
        "waiting": waiting,
        "first_seen_ms": s.first_seen_ms,
        "last_seen_ms": s.last_seen_ms,
    })
}

/// Definition text parsed for the client; kept as text if it is not JSON.
fn definition(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

fn findings(pin: &Pin) -> Value {
    pin.findings_json
        .as_deref()
        .map(definition)
        .unwrap_or(Value::Null)
}

/// `unpinned` for tools seen but never pinned; else the pin state, and
/// `invalid` for a pin whose MAC does not verify (it grants nothing).
fn state_name(pin: Option<&Pin>) -> &'static str {
    match pin {
        None => "unpinned",
        Some(p) if !p.mac_valid => "invalid",
        Some(p) => p.state.as_str(),
    }
}

fn pin_json(
    server: Option<&Server>,
    server_id: &str,
    name: &str,
    pin: Option<&Pin>,
    versions: &[ToolDefinition],
) -> Value {
    let current = pin
        .and_then(|p| p.pending_hash.as_deref().or(p.approved_hash.as_deref()))
        .or_else(|| {
            versions
                .iter()
                .max_by_key(|v| v.first_seen_ms)
                .map(|v| v.hash.as_str())
        });
    let def = current
        .and_then(|h| versions.iter().find(|v| v.hash == h))
        .map(|v| definition(&v.definition_json));
    json!({
        "server_id": server_id,
        "server_name": server.map(display_name).unwrap_or_else(|| server_id.to_owned()),
        "name": name,
        "state": state_name(pin),
        "approved_hash": pin.and_then(|p| p.approved_hash.as_deref().filter(|_| p.mac_valid)),
        "pending_hash": pin.and_then(|p| p.pending_hash.clone()),
        "findings": pin.map(findings).unwrap_or(Value::Null),
        "pinned_at_ms": pin.map(|p| p.pinned_at_ms),
        "updated_ms": pin.map(|p| p.updated_ms),
        "mac_valid": pin.map(|p| p.mac_valid),
        "versions": versions.len(),
        "current_hash": current,
        "definition": def,
    })
}

/// `GET /api/servers`
pub(crate) async fn servers(State(state): State<AppState>, _who: Authed) -> ApiResult<Json<Value>> {
    let servers = state.store.list_servers().await.map_err(store_err)?;
    let modes = state
        .store
        .list_server_modes(&state.mac_key)
        .await
        .map_err(store_err)?;
    let pins = state
        .store
        .all_pins(&state.mac_key)
        .await
        .map_err(store_err)?;
    let mut items = Vec::new();
    for s in &servers {
        let mode = modes
            .iter()
            .find(|m| m.server_id == s.id)
            .map(|m| match m.effective() {
                Some(mode) => mode.as_str(),
                None => "invalid",
            });
        let tools = state
            .store
            .tools_of_server(&s.id)
            .await
            .map_err(store_err)?;
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        names.sort();
        names.dedup();
        let waiting = pins
            .iter()
            .filter(|p| p.server_id == s.id && p.state != PinState::Trusted)
            .count();
        items.push(server_json(s, mode, names.len(), waiting));
    }
    Ok(Json(json!({ "items": items })))
}

#[derive(Deserialize)]
pub(crate) struct ToolQuery {
    server: Option<String>,
    state: Option<String>,
}

/// Every (server, tool) with its pin and versions.
async fn all_tools(state: &AppState, only_server: Option<&str>) -> ApiResult<Vec<Value>> {
    let servers: HashMap<String, Server> = state
        .store
        .list_servers()
        .await
        .map_err(store_err)?
        .into_iter()
        .map(|s| (s.id.clone(), s))
        .collect();
    let pins = state
        .store
        .all_pins(&state.mac_key)
        .await
        .map_err(store_err)?;
    let mut ids: Vec<&String> = servers.keys().collect();
    ids.sort();
    let mut out = Vec::new();
    for id in ids
        .into_iter()
        .filter(|id| only_server.is_none_or(|o| o == id.as_str()))
    {
        let defs = state.store.tools_of_server(id).await.map_err(store_err)?;
        let mut by_name: std::collections::BTreeMap<&str, Vec<ToolDefinition>> = Default::default();
        for d in &defs {
            by_name.entry(d.name.as_str()).or_default().push(d.clone());
        }
        for (name, versions) in by_name {
            let pin = pins.iter().find(|p| p.server_id == *id && p.tool == name);
            out.push(pin_json(servers.get(id), id, name, pin, &versions));
        }
    }
    Ok(out)
}

/// `GET /api/tools?server=&state=`
pub(crate) async fn tools(
    State(state): State<AppState>,
    _who: Authed,
    Query(q): Query<ToolQuery>,
) -> ApiResult<Json<Value>> {
    let mut items = all_tools(&state, q.server.as_deref().filter(|s| !s.is_empty())).await?;
    if let Some(want) = q.state.as_deref().filter(|s| !s.is_empty()) {
        items.retain(|t| t["state"] == want);
    }
    Ok(Json(json!({ "items": items })))
}

/// `GET /api/tools/{server}/{name}` — the pin and every version seen.
pub(crate) async fn tool(
    State(state): State<AppState>,
    _who: Authed,
    Path((server, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let versions = state
        .store
        .tool_versions(&server, &name)
        .await
        .map_err(store_err)?;
    if versions.is_empty() {
        return Err(ApiError::NotFound("tool"));
    }
    let s = state.store.get_server(&server).await.map_err(store_err)?;
    let pin = state
        .store
        .get_pin(&state.mac_key, &server, &name)
        .await
        .map_err(store_err)?;
    let mut v = pin_json(s.as_ref(), &server, &name, pin.as_ref(), &versions);
    v["history"] = versions
        .iter()
        .map(|d| json!({ "hash": d.hash, "hash_version": d.hash_version, "first_seen_ms": d.first_seen_ms, "definition": definition(&d.definition_json) }))
        .collect();
    Ok(Json(v))
}

#[derive(Deserialize)]
pub(crate) struct DiffQuery {
    server: String,
    tool: String,
    from: Option<String>,
    to: Option<String>,
}

/// `GET /api/pins/diff?server=&tool=&from=&to=` — two definitions side by
/// side (defaults: approved → pending). The client renders the diff.
pub(crate) async fn diff(
    State(state): State<AppState>,
    _who: Authed,
    Query(q): Query<DiffQuery>,
) -> ApiResult<Json<Value>> {
    let pin = state
        .store
        .get_pin(&state.mac_key, &q.server, &q.tool)
        .await
        .map_err(store_err)?;
    let from = q.from.clone().or_else(|| {
        pin.as_ref()
            .and_then(|p| p.approved_hash.clone().filter(|_| p.mac_valid))
    });
    let to =
        q.to.clone()
            .or_else(|| pin.as_ref().and_then(|p| p.pending_hash.clone()));
    let side = |hash: Option<String>| {
        let state = state.clone();
        let (server, tool) = (q.server.clone(), q.tool.clone());
        async move {
            let Some(hash) = hash else {
                return Ok::<_, ApiError>(Value::Null);
            };
            let def = state
                .store
                .tool_definition(&server, &tool, &hash)
                .await
                .map_err(store_err)?
                .ok_or(ApiError::NotFound("tool version"))?;
            Ok(
                json!({ "hash": def.hash, "first_seen_ms": def.first_seen_ms, "definition": definition(&def.definition_json) }),
            )
        }
    };
    let (from, to) = (side(from).await?, side(to).await?);
    if from.is_null() && to.is_null() {
        return Err(ApiError::NotFound("tool version"));
    }
    Ok(Json(
        json!({ "server_id": q.server, "tool": q.tool, "state": state_name(pin.as_ref()), "from": from, "to": to, "findings": pin.as_ref().map(findings) }),
    ))
}

/// `GET /api/pins?server=&state=` — same rows as tools, pinned ones only.
pub(crate) async fn pins(
    State(state): State<AppState>,
    who: Authed,
    q: Query<ToolQuery>,
) -> ApiResult<Json<Value>> {
    let Json(mut v) = tools(State(state), who, q).await?;
    if let Some(items) = v["items"].as_array_mut() {
        items.retain(|t| t["state"] != "unpinned");
    }
    Ok(Json(v))
}

#[derive(Deserialize)]
pub(crate) struct PinAction {
    server: String,
    tool: String,
    hash: Option<String>,
}

/// `POST /api/pins/approve {server, tool, hash}` — trusts exactly `hash`.
pub(crate) async fn approve(
    State(state): State<AppState>,
    who: Authed,
    Json(b): Json<PinAction>,
) -> ApiResult<Json<Value>> {
    let hash = b.hash.as_deref().filter(|h| !h.is_empty()).ok_or_else(|| {
        ApiError::BadRequest("hash is required: approve exactly the version shown".into())
    })?;
    approve_hash(&state, &who.session_id, &b.server, &b.tool, hash).await
}

/// Why approving a hash other than the waiting one is refused.
pub(crate) const NOT_WAITING: &str =
    "not the waiting version: another definition of this tool waits for approval and stays waiting (see /api/pins/diff)";

/// Approves exactly `hash` (the pending one while a definition waits) and
/// settles the tool's consent requests (the store does, in one transaction).
pub(crate) async fn approve_hash(
    state: &AppState,
    session: &str,
    server: &str,
    tool: &str,
    hash: &str,
) -> ApiResult<Json<Value>> {
    let approved = state
        .store
        .approve_waiting_tool(&state.mac_key, server, tool, hash, state.now_ms())
        .await;
    let pin = match approved {
        Ok(pin) => pin,
        Err(StoreError::NotWaiting { .. }) => return Err(ApiError::Conflict(NOT_WAITING.into())),
        Err(StoreError::UnknownTool { .. }) => {
            let known = state.store.get_server(server).await.map_err(store_err)?;
            return Err(ApiError::NotFound(if known.is_some() {
                "tool on this server"
            } else {
                "server"
            }));
        }
        Err(other) => return Err(store_err(other)),
    };
    state
        .record(
            event_types::TOOL_APPROVED,
            Some(server),
            Some(tool),
            &format!("approved definition {hash}"),
            session,
        )
        .await;
    Ok(Json(
        json!({ "state": pin.state.as_str(), "approved_hash": pin.approved_hash }),
    ))
}

#[derive(Deserialize)]
pub(crate) struct LaunchAction {
    server: String,
    fingerprint: Option<String>,
}

/// `POST /api/pins/approve-launch {server, fingerprint}` — approves exactly
/// the changed launch shown (`pinning.on_launch_change = "hold"`).
pub(crate) async fn approve_launch(
    State(state): State<AppState>,
    who: Authed,
    Json(b): Json<LaunchAction>,
) -> ApiResult<Json<Value>> {
    let fingerprint = b
        .fingerprint
        .as_deref()
        .filter(|f| !f.is_empty())
        .ok_or_else(|| {
            ApiError::BadRequest("fingerprint is required: approve exactly the launch shown".into())
        })?;
    let approved = state
        .store
        .approve_launch(&state.mac_key, &b.server, Some(fingerprint), state.now_ms())
        .await
        .map_err(store_err)?;
    state
        .record(
            event_types::LAUNCH_APPROVED,
            Some(&b.server),
            None,
            &format!("approved launch {approved}"),
            &who.session_id,
        )
        .await;
    Ok(Json(json!({ "server": b.server, "approved": approved })))
}

/// `POST /api/pins/reject {server, tool}`
pub(crate) async fn reject(
    State(state): State<AppState>,
    who: Authed,
    Json(b): Json<PinAction>,
) -> ApiResult<Json<Value>> {
    reject_tool(&state, &who.session_id, &b.server, &b.tool).await
}

pub(crate) async fn reject_tool(
    state: &AppState,
    session: &str,
    server: &str,
    tool: &str,
) -> ApiResult<Json<Value>> {
    let pin = state
        .store
        .reject_tool(&state.mac_key, server, tool, state.now_ms())
        .await
        .map_err(store_err)?;
    state
        .record(
            event_types::TOOL_REJECTED,
            Some(server),
            Some(tool),
            "rejected pending definition",
            session,
        )
        .await;
    Ok(Json(
        json!({ "state": pin.state.as_str(), "approved_hash": pin.approved_hash }),
    ))
}

/// `POST /api/pins/reset {server, tool}` — forget the pin; next sight pins again.
pub(crate) async fn reset(
    State(state): State<AppState>,
    who: Authed,
    Json(b): Json<PinAction>,
) -> ApiResult<StatusCode> {
    if !state
        .store
        .reset_pin(&b.server, &b.tool)
        .await
        .map_err(store_err)?
    {
        return Err(ApiError::NotFound("pin"));
    }
    state
        .record(
            event_types::PIN_RESET,
            Some(&b.server),
            Some(&b.tool),
            "pin reset",
            &who.session_id,
        )
        .await;
    Ok(StatusCode::NO_CONTENT)
}

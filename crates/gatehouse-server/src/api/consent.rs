//! The consent inbox: changed and quarantined tools, shadowing ties and
//! input requests (`elicitation/create` routed to the person).
//!
//! Input requests name the server, its command and client before any field.
//! Requests whose fields look like secrets, and any request from a
//! `restricted` server, cannot be accepted here (the protocol forbids
//! collecting secrets through elicitation); URL-mode requests show the URL
//! and are never fetched. An accepted answer is sealed to the waiting wrap
//! process's key ([`crate::seal`]) so its plain text never rests in the DB.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use gatehouse_store::{ConsentKind, ConsentRequest, ConsentState, Server, ServerMode};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::auth::Authed;
use super::inventory::{command_line, display_name};
use super::{event_types, store_err};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// Words that mark a requested field as a secret.
use gatehouse_engine::sensitive::sensitive_fields;

fn payload(c: &ConsentRequest) -> Value {
    serde_json::from_str(&c.payload_json).unwrap_or(Value::Null)
}

/// Why this request can only be declined, if it can.
fn decline_only(c: &ConsentRequest, p: &Value, restricted: bool) -> Option<String> {
    if c.kind != ConsentKind::Elicitation {
        return None;
    }
    if restricted {
        return Some("This server is restricted: its input requests are always declined.".into());
    }
    let fields = sensitive_fields(p.get("requestedSchema").unwrap_or(&Value::Null));
    if !fields.is_empty() {
        return Some(format!(
            "Declined by default: the field(s) {} look like secrets, and MCP forbids collecting secrets through input requests. Put secrets in Gatehouse's vault instead.",
            fields.join(", ")
        ));
    }
    None
}

fn consent_json(
    c: &ConsentRequest,
    server: Option<&Server>,
    client: Option<&str>,
    restricted: bool,
) -> Value {
    let p = payload(c);
    let schema = p.get("requestedSchema").cloned().unwrap_or(Value::Null);
    json!({
        "id": c.id,
        "kind": c.kind.as_str(),
        "state": c.state.as_str(),
        "server_id": c.server_id,
        "server_name": server.map(display_name).or_else(|| p["server_name"].as_str().map(str::to_owned)).unwrap_or_else(|| c.server_id.clone()),
        "command": server.and_then(command_line).or_else(|| p["command"].as_str().map(str::to_owned)),
        "client": client.map(str::to_owned).or_else(|| p["client"].as_str().map(str::to_owned)),
        "tool": c.tool,
        "created_ms": c.created_ms,
        "expires_ms": c.expires_ms,
        "answered_ms": c.answered_ms,
        "restricted": restricted,
        "sensitive_fields": sensitive_fields(&schema),
        "decline_only": decline_only(c, &p, restricted),
        "payload": p,
    })
}

async fn servers_by_id(state: &AppState) -> ApiResult<HashMap<String, Server>> {
    Ok(state
        .store
        .list_servers()
        .await
        .map_err(store_err)?
        .into_iter()
        .map(|s| (s.id.clone(), s))
        .collect())
}

async fn is_restricted(state: &AppState, server_id: &str) -> ApiResult<bool> {
    let mode = state
        .store
        .get_server_mode(&state.mac_key, server_id)
        .await
        .map_err(store_err)?;
    Ok(mode.and_then(|m| m.effective()) == Some(ServerMode::Restricted))
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    state: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/consent?state=pending|answered|declined|expired|all`
pub(crate) async fn list(
    State(state): State<AppState>,
    _who: Authed,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let _ = state.store.expire_consents(state.now_ms()).await;
    let filter = match q.state.as_deref().unwrap_or("pending") {
        "all" => None,
        "pending" => Some(ConsentState::Pending),
        "answered" => Some(ConsentState::Answered),
        "declined" => Some(ConsentState::Declined),
        "expired" => Some(ConsentState::Expired),
        _ => return Err(ApiError::BadRequest("unknown state".into())),
    };
    let rows = state
        .store
        .list_consents(filter, q.limit.unwrap_or(200).clamp(1, 1000))
        .await
        .map_err(store_err)?;
    let servers = servers_by_id(&state).await?;
    let mut items = Vec::new();
    for c in &rows {
        let server = servers.get(&c.server_id);
        let restricted = is_restricted(&state, &c.server_id).await?;
        items.push(consent_json(
            c,
            server,
            server.and_then(|s| s.client.as_deref()),
            restricted,
        ));
    }
    Ok(Json(json!({ "items": items })))
}

#[derive(Deserialize)]
pub(crate) struct Answer {
    /// `accept` or `decline`.
    action: String,
    /// For tool consents: the exact definition hash being approved.
    hash: Option<String>,
    /// For input requests: the field values.
    content: Option<Map<String, Value>>,
}

/// Checks the answer against the requested schema: only known fields,
/// primitive values, required ones present.
fn check_content(schema: &Value, content: &Map<String, Value>) -> ApiResult<()> {
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, v) in content {
        if !props.contains_key(k) {
            return Err(ApiError::BadRequest(format!(
                "field {k:?} was not requested"
            )));
        }
        if !(v.is_string() || v.is_number() || v.is_boolean()) {
            return Err(ApiError::BadRequest(format!(
                "field {k:?} must be a string, number or boolean"
            )));
        }
    }
    for req in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = req.as_str() {
            if !content.contains_key(name) {
                return Err(ApiError::BadRequest(format!("field {name:?} is required")));
            }
        }
    }
    Ok(())
}

fn sealed_or_plain(c: &ConsentRequest, answer: &Value) -> ApiResult<Vec<u8>> {
    let plain = answer.to_string().into_bytes();
    match c.requester_key.as_deref() {
        Some(key) => crate::seal::seal(key, &plain).map_err(|_| {
            ApiError::Conflict(
                "the waiting process published no usable key; the request can only be declined"
                    .into(),
            )
        }),
        None if c.kind == ConsentKind::Elicitation => Err(ApiError::Conflict(
            "the waiting process published no key; the request can only be declined".into(),
        )),
        None => Ok(plain),
    }
}

/// Declines a request and records why; false when it was no longer pending
/// (nothing is recorded then).
async fn decline(
    state: &AppState,
    c: &ConsentRequest,
    now: i64,
    what: &str,
    session: &str,
) -> ApiResult<bool> {
    let declined = state
        .store
        .decline_consent(c.id, now)
        .await
        .map_err(store_err)?;
    if declined {
        state
            .record(
                event_types::CONSENT_DECLINED,
                Some(&c.server_id),
                c.tool.as_deref(),
                what,
                session,
            )
            .await;
    }
    Ok(declined)
}

/// `POST /api/consent/{id}/answer {action, hash?, content?}`
pub(crate) async fn answer(
    State(state): State<AppState>,
    who: Authed,
    Path(id): Path<i64>,
    Json(a): Json<Answer>,
) -> ApiResult<Json<Value>> {
    let c = state
        .store
        .get_consent(id)
        .await
        .map_err(store_err)?
        .ok_or(ApiError::NotFound("consent request"))?;
    if c.state != ConsentState::Pending {
        return Err(ApiError::Conflict(format!(
            "this request is already {}",
            c.state.as_str()
        )));
    }
    let now = state.now_ms();
    if c.expires_ms.is_some_and(|e| e <= now) {
        let _ = state.store.expire_consents(now).await;
        return Err(ApiError::Conflict("this request has expired".into()));
    }
    let accept = match a.action.as_str() {
        "accept" => true,
        "decline" => false,
        _ => {
            return Err(ApiError::BadRequest(
                "action must be accept or decline".into(),
            ))
        }
    };
    let tool = c.tool.clone().unwrap_or_default();
    match c.kind {
        ConsentKind::ChangedTool | ConsentKind::QuarantinedTool => {
            if accept {
                let hash = a.hash.as_deref().filter(|h| !h.is_empty()).ok_or_else(|| {
                    ApiError::BadRequest(
                        "hash is required: approve exactly the version shown".into(),
                    )
                })?;
                let _ = super::inventory::approve_hash(
                    &state,
                    &who.session_id,
                    &c.server_id,
                    &tool,
                    hash,
                )
                .await?;
            } else {
                let _ = super::inventory::reject_tool(&state, &who.session_id, &c.server_id, &tool)
                    .await?;
            }
        }
        ConsentKind::HeldLaunch | ConsentKind::HeldPackage => {
            let p = payload(&c);
            if accept {
                let what = match c.kind {
                    ConsentKind::HeldLaunch => {
                        let fingerprint = p["fingerprint"].as_str().ok_or_else(|| {
                            ApiError::Conflict("this request names no launch".into())
                        })?;
                        state
                            .store
                            .approve_launch(&state.mac_key, &c.server_id, Some(fingerprint), now)
                            .await
                            .map_err(store_err)?;
                        format!("approved launch {fingerprint}")
                    }
                    _ => {
                        let package = p["package"].as_str().ok_or_else(|| {
                            ApiError::Conflict("this request names no package".into())
                        })?;
                        state
                            .store
                            .approve_package(&state.mac_key, &c.server_id, package, now)
                            .await
                            .map_err(store_err)?;
                        format!("approved package {package}")
                    }
                };
                state
                    .store
                    .answer_consent(id, br#"{"action":"accept"}"#, now)
                    .await
                    .map_err(store_err)?;
                let event = if c.kind == ConsentKind::HeldLaunch {
                    event_types::LAUNCH_APPROVED
                } else {
                    event_types::PACKAGE_APPROVED
                };
                state
                    .record(event, Some(&c.server_id), None, &what, &who.session_id)
                    .await;
            } else {
                let why = format!("{} declined: it stays held", c.kind.as_str());
                decline(&state, &c, now, &why, &who.session_id).await?;
            }
        }
        ConsentKind::ShadowTie | ConsentKind::Elicitation => {
            let p = payload(&c);
            let restricted = is_restricted(&state, &c.server_id).await?;
            if accept {
                if let Some(why) = decline_only(&c, &p, restricted) {
                    let what = "input request declined: sensitive fields or restricted server";
                    decline(&state, &c, now, what, &who.session_id).await?;
                    return Err(ApiError::Conflict(why));
                }
                let content = a.content.unwrap_or_default();
                if c.kind == ConsentKind::Elicitation && p["mode"] != "url" {
                    check_content(p.get("requestedSchema").unwrap_or(&Value::Null), &content)?;
                }
                let sealed =
                    sealed_or_plain(&c, &json!({ "action": "accept", "content": content }))?;
                if !state
                    .store
                    .answer_consent(id, &sealed, now)
                    .await
                    .map_err(store_err)?
                {
                    return Err(ApiError::Conflict(
                        "this request is no longer pending".into(),
                    ));
                }
                state
                    .record(
                        event_types::CONSENT_ANSWERED,
                        Some(&c.server_id),
                        c.tool.as_deref(),
                        &format!("{} accepted", c.kind.as_str()),
                        &who.session_id,
                    )
                    .await;
            } else {
                let what = format!("{} declined", c.kind.as_str());
                if !decline(&state, &c, now, &what, &who.session_id).await? {
                    return Err(ApiError::Conflict(
                        "this request is no longer pending".into(),
                    ));
                }
            }
        }
    }
    let after = state
        .store
        .get_consent(id)
        .await
        .map_err(store_err)?
        .ok_or(ApiError::NotFound("consent request"))?;
    Ok(Json(json!({ "id": id, "state": after.state.as_str() })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_engine::sensitive::is_sensitive_name;

    fn check(name: &str, expect: bool) {
        assert_eq!(
            is_sensitive_name(name),
            expect,
            "field {name:?} sensitive should be {expect}"
        );
    }

    #[test]
    fn sensitive_names() {
        for n in [
            "password",
            "Password",
            "apiKey",
            "api_key",
            "API-KEY",
            "token",
            "accessToken",
            "client_secret",
            "privateKey",
            "passphrase",
            "pin",
            "authorization",
            "credentials",
            "otp",
            "sshPrivateKey",
            "passwordConfirm",
            "tokenizerModel",
        ] {
            check(n, true);
        }
        for n in [
            "name",
            "email",
            "author",
            "shipping",
            "spinner",
            "monkey",
            "keyboardLayout",
            "city",
            "description",
        ] {
            check(n, false);
        }
    }

    #[test]
    fn fields_by_name_or_title() {
        let schema = json!({ "properties": { "user": {"type": "string"}, "pw": {"type": "string", "title": "Your password"}, "apiKey": {"type": "string"} } });
        let mut got = sensitive_fields(&schema);
        got.sort();
        assert_eq!(got, vec!["apiKey".to_string(), "pw".to_string()]);
    }

    #[test]
    fn content_must_match_schema() {
        let schema = json!({ "properties": { "city": {"type": "string"} }, "required": ["city"] });
        let ok: Map<String, Value> = serde_json::from_value(json!({ "city": "Oslo" })).unwrap();
        assert!(check_content(&schema, &ok).is_ok());
        let extra: Map<String, Value> =
            serde_json::from_value(json!({ "city": "Oslo", "x": 1 })).unwrap();
        assert!(
            check_content(&schema, &extra).is_err(),
            "unrequested fields are refused"
        );
        let missing: Map<String, Value> = serde_json::from_value(json!({})).unwrap();
        assert!(
            check_content(&schema, &missing).is_err(),
            "required fields are enforced"
        );
        let nested: Map<String, Value> =
            serde_json::from_value(json!({ "city": {"a": 1} })).unwrap();
        assert!(
            check_content(&schema, &nested).is_err(),
            "values are primitives"
        );
    }
}

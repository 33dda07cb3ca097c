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
        .list_consents(filter, super::events::page_limit(q.limit, 200, 1000)?)
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

/// Checks the answer against the requested schema (MCP elicitation's flat
/// object of primitives): only requested fields, required ones present, and
/// each value of its field's declared type — `string` (within `enum` or
/// `oneOf` constants, `minLength`/`maxLength`), `number`, `integer`
/// (`minimum`/`maximum`), `boolean`. A field with no or an unknown type
/// takes any primitive. Errors name the field, never the value.
fn check_content(schema: &Value, content: &Map<String, Value>) -> ApiResult<()> {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (k, v) in content {
        let Some(field) = props.get(k) else {
            return Err(ApiError::BadRequest(format!(
                "field {k:?} was not requested"
            )));
        };
        check_field(field, v).map_err(|why| ApiError::BadRequest(format!("field {k:?} {why}")))?;
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

/// Why `value` does not fit the field's schema (a phrase after the field
/// name; never the value).
fn check_field(field: &Value, value: &Value) -> Result<(), String> {
    if !(value.is_string() || value.is_number() || value.is_boolean()) {
        return Err("must be a string, number or boolean".into());
    }
    let bound = |key: &str| field.get(key).and_then(Value::as_f64);
    match field.get("type").and_then(Value::as_str) {
        Some("string") => {
            let Some(text) = value.as_str() else {
                return Err("must be a string".into());
            };
            let allowed: Vec<&Value> = match (field.get("enum"), field.get("oneOf")) {
                (Some(Value::Array(values)), _) => values.iter().collect(),
                (_, Some(Value::Array(options))) => {
                    options.iter().filter_map(|o| o.get("const")).collect()
                }
                _ => Vec::new(),
            };
            if !allowed.is_empty() && !allowed.iter().any(|a| a.as_str() == Some(text)) {
                return Err("must be one of the offered choices".into());
            }
            let chars = text.chars().count() as f64;
            if bound("minLength").is_some_and(|min| chars < min) {
                return Err("is shorter than its minimum length".into());
            }
            if bound("maxLength").is_some_and(|max| chars > max) {
                return Err("is longer than its maximum length".into());
            }
            Ok(())
        }
        Some(kind @ ("number" | "integer")) => {
            let Some(n) = value.as_f64() else {
                return Err(format!(
                    "must be {}",
                    if kind == "integer" {
                        "an integer"
                    } else {
                        "a number"
                    }
                ));
            };
            let integral = value.is_i64() || value.is_u64() || (n.is_finite() && n.fract() == 0.0);
            if kind == "integer" && !integral {
                return Err("must be an integer".into());
            }
            if bound("minimum").is_some_and(|min| n < min) {
                return Err("is below its minimum".into());
            }
            if bound("maximum").is_some_and(|max| n > max) {
                return Err("is above its maximum".into());
            }
            Ok(())
        }
        Some("boolean") if !value.is_boolean() => Err("must be true or false".into()),
        _ => Ok(()),
    }
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
                // Settled first, while still pending: a decline in another
                // tab cannot leave the item approved under a declined
                // request. Should the approval then fail, it stays held.
                if !state
                    .store
                    .answer_consent(id, br#"{"action":"accept"}"#, now)
                    .await
                    .map_err(store_err)?
                {
                    return Err(ApiError::Conflict(
                        "this request is no longer pending".into(),
                    ));
                }
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

    #[test]
    fn values_match_their_declared_types() {
        let schema = json!({ "properties": {
            "city": {"type": "string", "maxLength": 5},
            "size": {"type": "string", "enum": ["s", "m"]},
            "pick": {"type": "string", "oneOf": [{"const": "a", "title": "A"}]},
            "n": {"type": "integer", "minimum": 1, "maximum": 10},
            "x": {"type": "number"},
            "ok": {"type": "boolean"},
            "any": {"description": "no type"},
        } });
        let check = |answer: Value, expect: Result<(), &str>| {
            let content: Map<String, Value> = serde_json::from_value(answer.clone()).unwrap();
            let got = check_content(&schema, &content).map_err(|e| e.to_string());
            match expect {
                Ok(()) => assert!(got.is_ok(), "{answer} fits the schema: {got:?}"),
                Err(field) => {
                    let msg = got.expect_err(&format!("{answer} does not fit the schema"));
                    assert!(msg.contains(field), "the error names {field}: {msg}");
                    assert!(!msg.contains("SECRETVAL"), "never the value: {msg}");
                }
            }
        };
        check(
            json!({"city": "Oslo", "size": "m", "pick": "a", "n": 3, "x": 1.5, "ok": true, "any": 1}),
            Ok(()),
        );
        check(json!({"n": 3.0}), Ok(()));
        check(json!({"n": "SECRETVAL"}), Err("\"n\""));
        check(json!({"n": 1.5}), Err("\"n\""));
        check(json!({"n": 11}), Err("\"n\""));
        check(json!({"x": "SECRETVAL"}), Err("\"x\""));
        check(json!({"ok": "SECRETVAL"}), Err("\"ok\""));
        check(json!({"city": 5}), Err("\"city\""));
        check(json!({"city": "SECRETVAL"}), Err("\"city\""));
        check(json!({"size": "SECRETVAL"}), Err("\"size\""));
        check(json!({"pick": "SECRETVAL"}), Err("\"pick\""));
    }
}

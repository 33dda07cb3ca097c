//! `policy.toml`: read, validate (with `file:line:column` diagnostics from
//! gatehouse-config), save atomically, and generate a locked policy from
//! what was observed.

use std::io::Write;

use axum::extract::State;
use axum::Json;
use gatehouse_store::PinState;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::auth::Authed;
use super::inventory::display_name;
use super::{event_types, store_err};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

fn path(state: &AppState) -> std::path::PathBuf {
    state.home.join(gatehouse_config::POLICY_FILE)
}

/// Validation of an edit of `policy.toml` (its bytes), exactly as every wrap
/// and `gatehouse policy check` will load it: the `base` it names
/// (relative to the home) and `$GATEHOUSE_POLICY_BASE` are followed, so a
/// missing, unreadable or invalid base makes the edit invalid. A file that
/// is not UTF-8 is invalid, with a diagnostic at its first bad byte.
/// Diagnostics name files, positions and keys, never a file's contents.
fn validate(state: &AppState, bytes: &[u8]) -> Value {
    match gatehouse_config::check_as(&path(state), bytes) {
        Ok(loaded) => {
            json!({ "valid": true, "diagnostics": [], "warnings": loaded.warnings.iter().map(diag).collect::<Vec<_>>() })
        }
        Err(e) => {
            json!({ "valid": false, "diagnostics": e.to_diagnostics().iter().map(diag).collect::<Vec<_>>(), "warnings": [] })
        }
    }
}

fn diag(d: &gatehouse_config::Diagnostic) -> Value {
    json!({ "file": d.file, "line": d.line, "column": d.column, "message": d.message })
}

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The policy file's bytes (the default policy when there is none) and
/// whether it exists.
fn read(state: &AppState) -> ApiResult<(Vec<u8>, bool)> {
    match std::fs::read(path(state)) {
        Ok(bytes) => Ok((bytes, true)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((
            gatehouse_config::default_policy_toml().as_bytes().to_vec(),
            false,
        )),
        Err(e) => Err(ApiError::internal(format!("reading policy: {e}"))),
    }
}

/// `GET /api/policy`. A file that is not UTF-8 is shown with replacement
/// characters and reported invalid, never a server error.
pub(crate) async fn get(State(state): State<AppState>, _who: Authed) -> ApiResult<Json<Value>> {
    let (bytes, exists) = read(&state)?;
    let mut v = validate(&state, &bytes);
    let text = String::from_utf8_lossy(&bytes);
    v["text"] = json!(text);
    v["exists"] = json!(exists);
    v["sha256"] = json!(sha(&text));
    v["path"] = json!(path(&state).display().to_string());
    Ok(Json(v))
}

#[derive(Deserialize)]
pub(crate) struct TextBody {
    text: String,
    /// For saves: the `sha256` the editor started from (refuses lost updates).
    base_sha256: Option<String>,
}

/// `POST /api/policy/validate {text}`
pub(crate) async fn check(
    State(state): State<AppState>,
    _who: Authed,
    Json(b): Json<TextBody>,
) -> Json<Value> {
    Json(validate(&state, b.text.as_bytes()))
}

/// `PUT /api/policy {text, base_sha256?}` — validates, then writes a 0600
/// temp file and renames it over `policy.toml` (atomic on one filesystem).
pub(crate) async fn save(
    State(state): State<AppState>,
    who: Authed,
    Json(b): Json<TextBody>,
) -> ApiResult<Json<Value>> {
    let v = validate(&state, b.text.as_bytes());
    if v["valid"] != true {
        return Ok(Json(
            json!({ "saved": false, "valid": false, "diagnostics": v["diagnostics"] }),
        ));
    }
    let (current, _) = read(&state)?;
    if b.base_sha256
        .as_deref()
        .is_some_and(|base| base != sha(&String::from_utf8_lossy(&current)))
    {
        return Err(ApiError::Conflict(
            "the policy changed since you opened it; reload and re-apply your edit".into(),
        ));
    }
    let target = path(&state);
    let tmp = state.home.join(format!(
        ".{}.{}.tmp",
        gatehouse_config::POLICY_FILE,
        crate::auth::random_id()
    ));
    let write = || -> std::io::Result<()> {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(b.text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(ApiError::internal(format!("saving policy: {e}")));
    }
    state
        .record(
            event_types::POLICY_SAVED,
            None,
            None,
            "policy saved from the dashboard",
            &who.session_id,
        )
        .await;
    Ok(Json(
        json!({ "saved": true, "valid": true, "sha256": sha(&b.text), "warnings": v["warnings"] }),
    ))
}

/// A locked policy from what was observed (servers last seen at or after
/// `since_ms`, all when `None`): each server allowed with its trusted tool
/// hashes; rejected or quarantined tools listed as comments for review.
/// Shared by the API and `gatehouse policy generate`.
pub async fn locked_policy(
    store: &gatehouse_store::Store,
    mac_key: &gatehouse_store::MacKey,
    since_ms: Option<i64>,
) -> gatehouse_store::Result<String> {
    let servers = store.list_servers().await?;
    let pins = store.all_pins(mac_key).await?;
    let mut allowed = Vec::new();
    let mut blocked = Vec::new();
    for s in servers
        .iter()
        .filter(|s| since_ms.is_none_or(|since| s.last_seen_ms >= since))
    {
        let name = display_name(s);
        let mut tools = Vec::new();
        for p in pins.iter().filter(|p| p.server_id == s.id && p.mac_valid) {
            match (p.state, p.approved_hash.as_ref()) {
                (PinState::Trusted, Some(h)) => tools.push((p.tool.clone(), h.clone())),
                (PinState::Rejected | PinState::Quarantined, _) => {
                    blocked.push((name.clone(), p.tool.clone()))
                }
                _ => {}
            }
        }
        allowed.push((name, tools));
    }
    Ok(gatehouse_config::generate_locked_policy(&allowed, &blocked))
}

/// `POST /api/policy/generate` — a locked policy from observed servers and
/// tools (trusted hashes allowed; rejected/quarantined ones commented out).
/// Returned for review; it is not saved.
pub(crate) async fn generate(
    State(state): State<AppState>,
    _who: Authed,
) -> ApiResult<Json<Value>> {
    let text = locked_policy(&state.store, &state.mac_key, None)
        .await
        .map_err(store_err)?;
    let mut v = validate(&state, text.as_bytes());
    v["text"] = json!(text);
    Ok(Json(v))
}

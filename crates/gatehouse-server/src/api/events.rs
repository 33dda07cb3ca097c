//! `GET /api/events` (newest first, cursor `before`), `GET /api/events/{id}`,
//! and the JSON shape shared with the live stream.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use gatehouse_store::{Action, Event, Severity};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Authed;
use super::{server_names, store_err};
use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// Filters shared by the list and the stream.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct EventQuery {
    /// Server id.
    pub server: Option<String>,
    /// Tool name.
    pub tool: Option<String>,
    /// Event type (`mcp_tool_call_intercepted`, …).
    pub r#type: Option<String>,
    /// Minimum severity.
    pub severity: Option<String>,
    /// Action (`allow`, `audit`, `alert`, `block`, `hold`).
    pub action: Option<String>,
    /// Only events at or after this time (ms since epoch).
    pub since: Option<i64>,
    /// Page cursor: only ids below this.
    pub before: Option<i64>,
    /// Page size (1–500, default 100).
    pub limit: Option<u32>,
    /// Stream ticket (stream only).
    pub ticket: Option<String>,
}

/// Parses stored evidence: JSON when it is JSON, else the text itself.
fn evidence(raw: &Option<String>) -> Value {
    match raw {
        None => Value::Null,
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())),
    }
}

/// The API's event shape.
pub fn event_json(ev: &Event, names: &HashMap<String, String>) -> Value {
    json!({
        "id": ev.id,
        "time_ms": ev.time_ms,
        "last_time_ms": ev.last_time_ms,
        "type": ev.event_type,
        "server_id": ev.server_id,
        "server_name": ev.server_id.as_ref().and_then(|id| names.get(id)),
        "tool": ev.tool,
        "action": ev.action.as_str(),
        "rule": ev.rule,
        "severity": ev.severity.as_str(),
        "reason": ev.reason,
        "evidence": evidence(&ev.evidence_json),
        "session": ev.session,
        "count": ev.count,
    })
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    time_ms: i64,
    last_time_ms: i64,
    r#type: String,
    server_id: Option<String>,
    tool: Option<String>,
    action: String,
    rule: Option<String>,
    severity: String,
    reason: String,
    evidence: Option<String>,
    session: Option<String>,
    count: i64,
}

impl Row {
    /// Rows are untrusted input: unknown enum spellings are an error.
    fn parse(self) -> Option<Event> {
        Some(Event {
            id: self.id,
            time_ms: self.time_ms,
            last_time_ms: self.last_time_ms,
            event_type: self.r#type,
            server_id: self.server_id,
            tool: self.tool,
            action: Action::parse(&self.action)?,
            rule: self.rule,
            severity: Severity::parse(&self.severity)?,
            reason: self.reason,
            evidence_json: self.evidence,
            session: self.session,
            count: self.count,
        })
    }
}

const SEVERITIES: [&str; 5] = ["info", "low", "medium", "high", "critical"];

/// The page size asked for: `default` when absent, else within
/// `1..=max` — a value outside is refused (400 naming the range), never
/// silently changed.
pub(crate) fn page_limit(limit: Option<u32>, default: u32, max: u32) -> ApiResult<u32> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::BadRequest(format!(
            "limit must be between 1 and {max}"
        ))),
    }
}

/// Most events one page returns.
pub(crate) const MAX_EVENTS_LIMIT: u32 = 500;

/// Events matching `q`, newest first, at most `limit` (1–500, default 100).
pub(crate) async fn query(state: &AppState, q: &EventQuery) -> ApiResult<Vec<Event>> {
    let limit = page_limit(q.limit, 100, MAX_EVENTS_LIMIT)?;
    let min_sev = match q.severity.as_deref() {
        None | Some("") => None,
        Some(s) => Some(
            SEVERITIES
                .iter()
                .position(|x| *x == s)
                .ok_or_else(|| ApiError::BadRequest("unknown severity".into()))?,
        ),
    };
    if let Some(a) = q.action.as_deref().filter(|a| !a.is_empty()) {
        Action::parse(a).ok_or_else(|| ApiError::BadRequest("unknown action".into()))?;
    }
    let allowed: Vec<&str> = match min_sev {
        Some(i) => SEVERITIES[i..].to_vec(),
        None => SEVERITIES.to_vec(),
    };
    let nonempty = |o: &Option<String>| o.clone().filter(|s| !s.is_empty());
    // Only the filters given become clauses, so SQLite can pick the index
    // for the one that narrows (and scan ids backwards when there is none).
    let mut sql = String::from(
        "SELECT id, time_ms, last_time_ms, type, server_id, tool, action, rule, severity, reason, evidence, session, count FROM events WHERE 1",
    );
    let mut binds: Vec<String> = Vec::new();
    for (col, val) in [
        ("server_id", nonempty(&q.server)),
        ("tool", nonempty(&q.tool)),
        ("type", nonempty(&q.r#type)),
        ("action", nonempty(&q.action)),
    ] {
        if let Some(v) = val {
            sql.push_str(&format!(" AND {col} = ?"));
            binds.push(v);
        }
    }
    if min_sev.is_some() {
        sql.push_str(" AND severity IN (SELECT value FROM json_each(?))");
        binds.push(serde_json::to_string(&allowed).expect("strings serialize"));
    }
    if q.since.is_some() {
        sql.push_str(" AND time_ms >= ?");
    }
    if q.before.is_some() {
        sql.push_str(" AND id < ?");
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    // Safe: `sql` is assembled only from the fixed column names above; values are bound.
    let mut query = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql));
    for b in binds {
        query = query.bind(b);
    }
    if let Some(since) = q.since {
        query = query.bind(since);
    }
    if let Some(before) = q.before {
        query = query.bind(before);
    }
    let rows: Vec<Row> = query
        .bind(i64::from(limit))
        .fetch_all(state.store.pool())
        .await
        .map_err(|e| ApiError::internal(format!("events query: {e}")))?;
    Ok(rows.into_iter().filter_map(Row::parse).collect())
}

/// `GET /api/events`
pub(crate) async fn list(
    State(state): State<AppState>,
    _who: Authed,
    Query(q): Query<EventQuery>,
) -> ApiResult<Json<Value>> {
    let limit = page_limit(q.limit, 100, MAX_EVENTS_LIMIT)? as usize;
    let events = query(&state, &q).await?;
    let names = server_names(&state).await?;
    let next = (events.len() == limit)
        .then(|| events.last().map(|e| e.id))
        .flatten();
    let items: Vec<Value> = events.iter().map(|e| event_json(e, &names)).collect();
    Ok(Json(json!({ "items": items, "next_before": next })))
}

/// `GET /api/events/{id}`
pub(crate) async fn get(
    State(state): State<AppState>,
    _who: Authed,
    Path(id): Path<i64>,
) -> ApiResult<Json<Value>> {
    let ev = state
        .store
        .get_event(id)
        .await
        .map_err(store_err)?
        .ok_or(ApiError::NotFound("event"))?;
    let names = server_names(&state).await?;
    Ok(Json(event_json(&ev, &names)))
}

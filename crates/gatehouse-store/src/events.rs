//! `events`: every decision, with flood aggregation, filters, retention and a
//! size cap.
//!
//! Aggregation: identical events — same type, server, tool, action, rule,
//! severity and session — whose times fall in one slot of
//! `StoreOptions::event_aggregation_ms` share one row whose `count` grows
//! (one `INSERT … ON CONFLICT DO UPDATE` statement, keyed by a hash of those
//! fields and the slot). The first event's reason and evidence are kept.

use sha2::{Digest, Sha256};
use sqlx::{QueryBuilder, Sqlite};

use crate::db::Store;
use crate::error::{corrupt, Result, StoreError};
use crate::util::{check_json, non_negative};

/// Event type names, after agentsh's where they fit.
pub mod event_types {
    pub const MCP_TOOL_SEEN: &str = "mcp_tool_seen";
    pub const MCP_TOOL_CHANGED: &str = "mcp_tool_changed";
    pub const MCP_TOOL_CALLED: &str = "mcp_tool_called";
    pub const MCP_TOOL_CALL_INTERCEPTED: &str = "mcp_tool_call_intercepted";
    pub const MCP_CROSS_SERVER_BLOCKED: &str = "mcp_cross_server_blocked";
    pub const MCP_DETECTION: &str = "mcp_detection";
    pub const MCP_OUTPUT_INSPECTION: &str = "mcp_output_inspection";
    pub const MCP_SERVER_NAME_SIMILARITY: &str = "mcp_server_name_similarity";
    pub const MCP_SERVER_BINARY_MISMATCH: &str = "mcp_server_binary_mismatch";
    pub const SERVER_IDENTITY_MISMATCH: &str = "server_identity_mismatch";
    pub const FRAME_DROPPED: &str = "frame_dropped";
    pub const ENV_STRIPPED: &str = "env_stripped";
    pub const PIN_MAC_INVALID: &str = "pin_mac_invalid";
}

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    Allow,
    Audit,
    Alert,
    Block,
    Hold,
}

impl Action {
    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Audit => "audit",
            Action::Alert => "alert",
            Action::Block => "block",
            Action::Hold => "hold",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allow" => Some(Action::Allow),
            "audit" => Some(Action::Audit),
            "alert" => Some(Action::Alert),
            "block" => Some(Action::Block),
            "hold" => Some(Action::Hold),
            _ => None,
        }
    }
}

/// How serious, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    const ALL: [Severity; 5] = [
        Severity::Info,
        Severity::Low,
        Severity::Medium,
        Severity::High,
        Severity::Critical,
    ];

    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|sev| sev.as_str() == s)
    }
}

/// An event to record. `evidence_json` must already be redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub time_ms: i64,
    pub event_type: String,
    pub server_id: Option<String>,
    pub tool: Option<String>,
    pub action: Action,
    pub rule: Option<String>,
    pub severity: Severity,
    pub reason: String,
    pub evidence_json: Option<String>,
    pub session: Option<String>,
}

impl NewEvent {
    /// An event with no server, tool, rule, evidence or session.
    pub fn new(
        time_ms: i64,
        event_type: &str,
        action: Action,
        severity: Severity,
        reason: &str,
    ) -> Self {
        Self {
            time_ms,
            event_type: event_type.to_owned(),
            server_id: None,
            tool: None,
            action,
            rule: None,
            severity,
            reason: reason.to_owned(),
            evidence_json: None,
            session: None,
        }
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: i64,
    /// First occurrence.
    pub time_ms: i64,
    /// Last occurrence folded into this row.
    pub last_time_ms: i64,
    pub event_type: String,
    pub server_id: Option<String>,
    pub tool: Option<String>,
    pub action: Action,
    pub rule: Option<String>,
    pub severity: Severity,
    pub reason: String,
    pub evidence_json: Option<String>,
    pub session: Option<String>,
    /// How many identical events this row stands for (≥ 1).
    pub count: i64,
}

/// Filter for [`Store::query_events`]; `Default` is "the newest 100".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFilter {
    pub server_id: Option<String>,
    pub tool: Option<String>,
    pub event_type: Option<String>,
    /// This severity or worse.
    pub min_severity: Option<Severity>,
    pub action: Option<Action>,
    /// `time_ms >= since_ms`.
    pub since_ms: Option<i64>,
    /// `time_ms < until_ms`.
    pub until_ms: Option<i64>,
    /// Only ids above this; switches the order to oldest id first (tailing).
    pub after_id: Option<i64>,
    /// At most this many rows (capped at [`EventFilter::MAX_LIMIT`]).
    pub limit: u32,
}

impl Default for EventFilter {
    fn default() -> Self {
        Self {
            server_id: None,
            tool: None,
            event_type: None,
            min_severity: None,
            action: None,
            since_ms: None,
            until_ms: None,
            after_id: None,
            limit: 100,
        }
    }
}

impl EventFilter {
    /// Largest page one query returns.
    pub const MAX_LIMIT: u32 = 10_000;
}

/// Bounds on the events table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Events older than this are deleted (default 30 days).
    pub max_age_ms: i64,
    /// When the database's used pages exceed this, the oldest events go
    /// (default 256 MiB).
    pub max_bytes: u64,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            max_age_ms: 30 * 24 * 60 * 60 * 1000,
            max_bytes: 256 * 1024 * 1024,
        }
    }
}

/// What a prune deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Rows older than the retention age.
    pub expired: u64,
    /// Rows removed to get under the size cap.
    pub over_size: u64,
}

#[derive(sqlx::FromRow)]
struct EventRow {
    id: i64,
    time_ms: i64,
    last_time_ms: i64,
    #[sqlx(rename = "type")]
    event_type: String,
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

const EVENT_COLUMNS: &str = "id, time_ms, last_time_ms, type, server_id, tool, action, rule, \
     severity, reason, evidence, session, count";

impl TryFrom<EventRow> for Event {
    type Error = StoreError;

    fn try_from(row: EventRow) -> Result<Self> {
        let action =
            Action::parse(&row.action).ok_or_else(|| corrupt("events", "unknown action"))?;
        let severity =
            Severity::parse(&row.severity).ok_or_else(|| corrupt("events", "unknown severity"))?;
        if let Some(evidence) = &row.evidence {
            check_json("events", "evidence", evidence)?;
        }
        if row.count < 1 {
            return Err(corrupt("events", "count below 1"));
        }
        Ok(Event {
            id: row.id,
            time_ms: non_negative("events", "time_ms", row.time_ms)?,
            last_time_ms: non_negative("events", "last_time_ms", row.last_time_ms)?,
            event_type: row.event_type,
            server_id: row.server_id,
            tool: row.tool,
            action,
            rule: row.rule,
            severity,
            reason: row.reason,
            evidence_json: row.evidence,
            session: row.session,
            count: row.count,
        })
    }
}

/// The aggregation key: a hash of the identifying fields and the time slot.
fn aggregation_key(event: &NewEvent, slot_ms: i64) -> Option<i64> {
    if slot_ms <= 0 {
        return None;
    }
    let mut hash = Sha256::new();
    let mut put = |part: Option<&str>| match part {
        None => hash.update([0u8]),
        Some(s) => {
            hash.update([1u8]);
            hash.update((s.len() as u64).to_be_bytes());
            hash.update(s.as_bytes());
        }
    };
    put(Some(&event.event_type));
    put(event.server_id.as_deref());
    put(event.tool.as_deref());
    put(Some(event.action.as_str()));
    put(event.rule.as_deref());
    put(Some(event.severity.as_str()));
    put(event.session.as_deref());
    hash.update(event.time_ms.div_euclid(slot_ms).to_be_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Some(i64::from_be_bytes(first))
}

fn validate(event: &NewEvent) -> Result<()> {
    if event.event_type.is_empty()
        || event.event_type.len() > 64
        || !event
            .event_type
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(StoreError::Invalid("event type must be 1-64 of [a-z0-9_]"));
    }
    if event.time_ms < 0 {
        return Err(StoreError::Invalid("event time must not be negative"));
    }
    if let Some(evidence) = &event.evidence_json {
        check_json("events", "evidence", evidence)
            .map_err(|_| StoreError::Invalid("event evidence is not valid JSON"))?;
    }
    Ok(())
}

impl Store {
    /// Records an event, folding it into an identical one of the same slot
    /// (see the module docs). Returns the id of the row that holds it.
    pub async fn insert_event(&self, event: &NewEvent) -> Result<i64> {
        validate(event)?;
        let key = aggregation_key(event, self.options().event_aggregation_ms);
        if key.is_some() {
            // The WHERE guards against a hash collision folding two
            // different events: then nothing is returned and we insert plain.
            let folded: Option<i64> = sqlx::query_scalar(
                "INSERT INTO events (time_ms, last_time_ms, type, server_id, tool, action, rule, \
                                     severity, reason, evidence, session, count, agg_key) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?) \
                 ON CONFLICT (agg_key) WHERE agg_key IS NOT NULL DO UPDATE SET \
                     count = count + 1, last_time_ms = MAX(last_time_ms, excluded.last_time_ms) \
                 WHERE type = excluded.type AND server_id IS excluded.server_id \
                   AND tool IS excluded.tool AND action = excluded.action \
                   AND rule IS excluded.rule AND severity = excluded.severity \
                   AND session IS excluded.session \
                 RETURNING id",
            )
            .bind(event.time_ms)
            .bind(event.time_ms)
            .bind(&event.event_type)
            .bind(&event.server_id)
            .bind(&event.tool)
            .bind(event.action.as_str())
            .bind(&event.rule)
            .bind(event.severity.as_str())
            .bind(&event.reason)
            .bind(&event.evidence_json)
            .bind(&event.session)
            .bind(key)
            .fetch_optional(self.pool())
            .await?;
            if let Some(id) = folded {
                return Ok(id);
            }
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO events (time_ms, last_time_ms, type, server_id, tool, action, rule, \
                                 severity, reason, evidence, session, count, agg_key) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, NULL) RETURNING id",
        )
        .bind(event.time_ms)
        .bind(event.time_ms)
        .bind(&event.event_type)
        .bind(&event.server_id)
        .bind(&event.tool)
        .bind(event.action.as_str())
        .bind(&event.rule)
        .bind(event.severity.as_str())
        .bind(&event.reason)
        .bind(&event.evidence_json)
        .bind(&event.session)
        .fetch_one(self.pool())
        .await?;
        Ok(id)
    }

    /// Events matching `filter`: newest first, or oldest id first when
    /// `after_id` is set (for tailing with a cursor).
    pub async fn query_events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        let mut sql = build_event_query("", filter);
        let rows: Vec<EventRow> = sql.build_query_as().fetch_all(self.pool()).await?;
        rows.into_iter().map(Event::try_from).collect()
    }

    /// One event by id.
    pub async fn get_event(&self, id: i64) -> Result<Option<Event>> {
        let row: Option<EventRow> = sqlx::query_as(
            "SELECT id, time_ms, last_time_ms, type, server_id, tool, action, rule, severity, \
                    reason, evidence, session, count FROM events WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.map(Event::try_from).transpose()
    }

    /// The highest event id (0 when none). Cheap; pollers compare it.
    /// Aggregation updates an existing row's `count` without a new id:
    /// `data_version` notices those.
    pub async fn latest_event_id(&self) -> Result<i64> {
        let id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(self.pool())
            .await?;
        Ok(id)
    }

    /// Deletes events older than the retention age, then the oldest events
    /// until the database's used pages fit the size cap; returns freed pages
    /// to the file system where the database allows it.
    pub async fn prune_events(&self, now_ms: i64, policy: &RetentionPolicy) -> Result<PruneReport> {
        const BATCH: i64 = 10_000;
        let mut report = PruneReport::default();
        let cutoff = now_ms.saturating_sub(policy.max_age_ms);
        loop {
            let done = sqlx::query(
                "DELETE FROM events WHERE id IN \
                   (SELECT id FROM events WHERE time_ms < ? ORDER BY time_ms LIMIT ?)",
            )
            .bind(cutoff)
            .bind(BATCH)
            .execute(self.pool())
            .await?;
            report.expired += done.rows_affected();
            if done.rows_affected() < BATCH as u64 {
                break;
            }
        }
        loop {
            let used = self.used_bytes().await?;
            if used <= policy.max_bytes {
                break;
            }
            let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
                .fetch_one(self.pool())
                .await?;
            if rows == 0 {
                break;
            }
            // Delete the share of rows that the excess is of the used size
            // (events dominate), at least one, at most one batch per round.
            let excess = (used - policy.max_bytes) as f64 / used as f64;
            let n = ((rows as f64 * excess).ceil() as i64).clamp(1, BATCH);
            let done = sqlx::query(
                "DELETE FROM events WHERE id IN \
                   (SELECT id FROM events ORDER BY time_ms, id LIMIT ?)",
            )
            .bind(n)
            .execute(self.pool())
            .await?;
            report.over_size += done.rows_affected();
        }
        if report.expired + report.over_size > 0 {
            sqlx::query("PRAGMA incremental_vacuum")
                .execute(self.pool())
                .await?;
        }
        Ok(report)
    }

    /// Bytes in pages that hold data (file size minus free pages).
    pub async fn used_bytes(&self) -> Result<u64> {
        let mut conn = self.pool().acquire().await?;
        let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
            .fetch_one(&mut *conn)
            .await?;
        let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(&mut *conn)
            .await?;
        let size: i64 = sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&mut *conn)
            .await?;
        Ok(u64::try_from((pages - free).max(0) * size).unwrap_or(0))
    }
}

/// The filter's query; `prefix` lets tests prepend `EXPLAIN QUERY PLAN`.
pub(crate) fn build_event_query(prefix: &str, filter: &EventFilter) -> QueryBuilder<Sqlite> {
    let mut sql = QueryBuilder::<Sqlite>::new(prefix);
    sql.push("SELECT ");
    sql.push(EVENT_COLUMNS);
    sql.push(" FROM events WHERE 1 = 1");
    if let Some(server_id) = &filter.server_id {
        sql.push(" AND server_id = ").push_bind(server_id.clone());
    }
    if let Some(tool) = &filter.tool {
        sql.push(" AND tool = ").push_bind(tool.clone());
    }
    if let Some(event_type) = &filter.event_type {
        sql.push(" AND type = ").push_bind(event_type.clone());
    }
    if let Some(action) = filter.action {
        sql.push(" AND action = ").push_bind(action.as_str());
    }
    if let Some(min) = filter.min_severity {
        sql.push(" AND severity IN (");
        let mut list = sql.separated(", ");
        for severity in Severity::ALL.into_iter().filter(|s| *s >= min) {
            list.push_bind(severity.as_str());
        }
        sql.push(")");
    }
    if let Some(since) = filter.since_ms {
        sql.push(" AND time_ms >= ").push_bind(since);
    }
    if let Some(until) = filter.until_ms {
        sql.push(" AND time_ms < ").push_bind(until);
    }
    if let Some(after) = filter.after_id {
        sql.push(" AND id > ").push_bind(after);
        sql.push(" ORDER BY id ASC");
    } else {
        sql.push(" ORDER BY time_ms DESC, id DESC");
    }
    sql.push(" LIMIT ")
        .push_bind(i64::from(filter.limit.min(EventFilter::MAX_LIMIT)));
    sql
}

//! `events`: every decision, with flood aggregation, filters, retention and a
//! size cap.
//!
//! Aggregation: identical events — same type, server, tool, action, rule,
//! severity and session — whose times fall in one slot of
//! `StoreOptions::event_aggregation_ms` share one row whose `count` grows
//! (one `INSERT … ON CONFLICT DO UPDATE` statement, keyed by a hash of those
//! fields and the slot). The first event's reason and evidence are kept.
//!
//! The reason is not part of the key in general: under a flood the reasons
//! of one (server, rule) differ in details (sizes, names), and folding them
//! is what bounds the table. The exception is the types in
//! [`REASON_KEYED_TYPES`], whose reason *is* the finding (a policy file's
//! diagnostics, a pause's length, the hash a held tool waits with): two
//! different reasons are two rows, so none hides behind another's count.

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
    pub const POLICY_INVALID: &str = "policy_invalid";
    /// Protection was paused (who, for how long).
    pub const PROTECTION_PAUSED: &str = "protection_paused";
    /// A pause ended (by a person, or by itself at its deadline).
    pub const PROTECTION_RESUMED: &str = "protection_resumed";
    /// A person stored a secret (the reason names it, never its value).
    pub const SECRET_SET: &str = "secret_set";
    /// A person deleted a secret (the reason names it).
    pub const SECRET_DELETED: &str = "secret_deleted";
    /// wrap left a stored secret out of a server's environment (the reason
    /// names it: a reserved name).
    pub const SECRET_NOT_INJECTED: &str = "secret_not_injected";
}

/// Event types whose reason is part of the aggregation key (see the module
/// docs): identical reasons still fold, different ones never do. A pause
/// and its end are the record of who switched protection off, and for how
/// long: two pauses in one second are two rows. A tool's seen and changed
/// events name the hash that waits for approval: a second changed
/// definition of one tool is a row of its own, so the hash a person must
/// approve is always in the events. A secret set or deleted names the
/// secret in its reason: each name changed (or left out of a server's
/// environment) is a row of its own, so the audit log shows every secret a
/// session touched.
pub const REASON_KEYED_TYPES: &[&str] = &[
    event_types::MCP_TOOL_SEEN,
    event_types::MCP_TOOL_CHANGED,
    event_types::POLICY_INVALID,
    event_types::PROTECTION_PAUSED,
    event_types::PROTECTION_RESUMED,
    event_types::SECRET_SET,
    event_types::SECRET_DELETED,
    event_types::SECRET_NOT_INJECTED,
];

fn reason_keyed(event_type: &str) -> bool {
    REASON_KEYED_TYPES.contains(&event_type)
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
    pub(crate) const ALL: [Severity; 5] = [
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
    // The hashed bytes are gathered first and hashed in one call: one
    // `update` per part cost more than the hashing (an event per call).
    let mut bytes = Vec::with_capacity(256);
    let mut put = |part: Option<&str>| match part {
        None => bytes.push(0u8),
        Some(s) => {
            bytes.push(1u8);
            bytes.extend_from_slice(&(s.len() as u64).to_be_bytes());
            bytes.extend_from_slice(s.as_bytes());
        }
    };
    put(Some(&event.event_type));
    put(event.server_id.as_deref());
    put(event.tool.as_deref());
    put(Some(event.action.as_str()));
    put(event.rule.as_deref());
    put(Some(event.severity.as_str()));
    put(event.session.as_deref());
    if reason_keyed(&event.event_type) {
        put(Some(&event.reason));
    }
    // The slot; `same_slot` compares the same.
    bytes.extend_from_slice(&event.time_ms.div_euclid(slot_ms).to_be_bytes());
    let digest = Sha256::digest(&bytes);
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

/// Identical events of one aggregation slot in a batch, folded before they
/// are written: the row the database's own aggregation would make, from one
/// statement instead of one per event.
struct Folded<'a> {
    event: &'a NewEvent,
    key: Option<i64>,
    count: i64,
    last_time_ms: i64,
}

impl Folded<'_> {
    /// Counts one more `event` of this row's aggregate and slot.
    fn absorb(&mut self, event: &NewEvent) {
        self.count += 1;
        self.last_time_ms = self.last_time_ms.max(event.time_ms);
    }
}

fn fold(events: &[NewEvent], aggregation_ms: i64) -> Vec<Folded<'_>> {
    let mut folded: Vec<Folded<'_>> = Vec::new();
    let mut by_key: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    for event in events {
        // A run of one event (one per call in a burst of calls) folds into
        // the row before it unhashed: the same fields in the same slot make
        // the same key.
        if let Some(last) = folded.last_mut() {
            if last.key.is_some()
                && same_slot(last.event, event, aggregation_ms)
                && same_aggregate(last.event, event)
            {
                last.absorb(event);
                continue;
            }
        }
        let key = aggregation_key(event, aggregation_ms);
        if let Some(key) = key {
            if let Some(&at) = by_key.get(&key) {
                let into = &mut folded[at];
                // The key is a hash: fold only what the database would.
                if same_aggregate(into.event, event) {
                    into.absorb(event);
                    continue;
                }
            } else {
                by_key.insert(key, folded.len());
            }
        }
        folded.push(Folded {
            event,
            key,
            count: 1,
            last_time_ms: event.time_ms,
        });
    }
    folded
}

/// Whether two events fall in one aggregation slot (`slot_ms` > 0).
fn same_slot(a: &NewEvent, b: &NewEvent, slot_ms: i64) -> bool {
    a.time_ms.div_euclid(slot_ms) == b.time_ms.div_euclid(slot_ms)
}

/// The fields the aggregation upsert compares (its `WHERE`).
fn same_aggregate(a: &NewEvent, b: &NewEvent) -> bool {
    a.event_type == b.event_type
        && a.server_id == b.server_id
        && a.tool == b.tool
        && a.action == b.action
        && a.rule == b.rule
        && a.severity == b.severity
        && a.session == b.session
        && (!reason_keyed(&a.event_type) || a.reason == b.reason)
}

/// Folded events per statement batch at most (13 values each; SQLite
/// takes 32,766).
const EVENTS_PER_BATCH: usize = 64;

const INSERTED_COLUMNS: &str = "time_ms, last_time_ms, type, server_id, tool, action, rule, \
                                severity, reason, evidence, session, count, agg_key";

/// `?(first)`, …, `?(first + 11)`: an event's values but its key.
fn event_params(first: usize) -> String {
    (first..first + 12)
        .map(|n| format!("?{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Folds the event bound at `?first`… (its key at `?(first + 12)`) into an
/// identical one of its slot, or inserts it. The `WHERE` guards against a
/// hash collision folding two different events: then the statement changes
/// nothing (and returns no row).
fn upsert_event_sql(first: usize) -> String {
    format!(
        "INSERT INTO events ({INSERTED_COLUMNS}) VALUES ({}, ?{}) \
         ON CONFLICT (agg_key) WHERE agg_key IS NOT NULL DO UPDATE SET \
             count = count + excluded.count, \
             last_time_ms = MAX(last_time_ms, excluded.last_time_ms) \
         WHERE type = excluded.type AND server_id IS excluded.server_id \
           AND tool IS excluded.tool AND action = excluded.action \
           AND rule IS excluded.rule AND severity = excluded.severity \
           AND session IS excluded.session \
           AND (reason = excluded.reason OR type NOT IN ({}))",
        event_params(first),
        first + 12,
        reason_keyed_sql()
    )
}

/// [`REASON_KEYED_TYPES`] as an SQL list (constant names, `[a-z_]` only).
fn reason_keyed_sql() -> String {
    REASON_KEYED_TYPES
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Inserts the event bound at `?first`… on a row of its own.
fn plain_event_sql(first: usize) -> String {
    format!(
        "INSERT INTO events ({INSERTED_COLUMNS}) VALUES ({}, NULL)",
        event_params(first)
    )
}

/// Binds one event's 13 values (the last is its key).
fn bind_event<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    one: &Folded<'q>,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    let e = one.event;
    query
        .bind(e.time_ms)
        .bind(one.last_time_ms)
        .bind(&e.event_type)
        .bind(&e.server_id)
        .bind(&e.tool)
        .bind(e.action.as_str())
        .bind(&e.rule)
        .bind(e.severity.as_str())
        .bind(&e.reason)
        .bind(&e.evidence_json)
        .bind(&e.session)
        .bind(one.count)
        .bind(one.key)
}

/// The statement batch writing `chunk`: per event, the upsert and a plain
/// insert that runs only when the upsert changed nothing (a collision it
/// refused to fold); an event without a key is inserted plain. Event `i`
/// binds `?(13i+1)`…`?(13i+13)`. Only fixed text and parameter numbers:
/// every value is bound.
fn batch_sql(chunk: &[Folded<'_>]) -> String {
    let mut sql = String::from("BEGIN IMMEDIATE; ");
    for (i, one) in chunk.iter().enumerate() {
        let first = 13 * i + 1;
        if one.key.is_some() {
            sql.push_str(&upsert_event_sql(first));
            sql.push_str(&format!(
                "; INSERT INTO events ({INSERTED_COLUMNS}) SELECT {}, NULL WHERE changes() = 0; ",
                event_params(first)
            ));
        } else {
            sql.push_str(&plain_event_sql(first));
            sql.push_str("; ");
        }
    }
    sql.push_str("COMMIT");
    sql
}

/// Records `event` on `conn` (inside the caller's transaction), folding
/// it like [`Store::insert_event`].
pub(crate) async fn insert_on(
    conn: &mut sqlx::SqliteConnection,
    event: &NewEvent,
    aggregation_ms: i64,
) -> Result<i64> {
    let one = Folded {
        event,
        key: aggregation_key(event, aggregation_ms),
        count: 1,
        last_time_ms: event.time_ms,
    };
    insert_one(conn, &one).await
}

async fn insert_one(conn: &mut sqlx::SqliteConnection, one: &Folded<'_>) -> Result<i64> {
    validate(one.event)?;
    if one.key.is_some() {
        let sql = upsert_event_sql(1) + " RETURNING id";
        let folded = bind_event(sqlx::query(sqlx::AssertSqlSafe(sql)), one)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(row) = folded {
            return Ok(sqlx::Row::try_get(&row, 0)?);
        }
    }
    let sql = plain_event_sql(1) + " RETURNING id";
    let row = bind_event(sqlx::query(sqlx::AssertSqlSafe(sql)), one)
        .fetch_one(&mut *conn)
        .await?;
    Ok(sqlx::Row::try_get(&row, 0)?)
}

impl Store {
    /// Records an event, folding it into an identical one of the same slot
    /// (see the module docs). Returns the id of the row that holds it.
    pub async fn insert_event(&self, event: &NewEvent) -> Result<i64> {
        let _gate = self.write_gate().await;
        let mut conn = self.pool().acquire().await?;
        let one = Folded {
            event,
            key: aggregation_key(event, self.options().event_aggregation_ms),
            count: 1,
            last_time_ms: event.time_ms,
        };
        insert_one(&mut conn, &one).await
    }

    /// Records several events in one transaction (one commit instead of
    /// one per event). One that cannot be written (invalid, or refused by a
    /// constraint) is skipped and the rest are kept; the first such error is
    /// returned only when nothing was written. A busy or broken database
    /// fails the whole batch.
    ///
    /// Identical events of a slot are folded first; the rest go to the
    /// database as one statement batch (`BEGIN IMMEDIATE; …; COMMIT`, one
    /// hop to sqlx's worker thread, so the write lock is never held while
    /// this task waits for a CPU). Only when that batch fails are the events
    /// written one by one, each on its own savepoint, to find the bad one.
    pub async fn insert_events(&self, events: &[NewEvent]) -> Result<usize> {
        let _gate = self.write_gate().await;
        let mut first_error = None;
        let folded: Vec<Folded<'_>> = fold(events, self.options().event_aggregation_ms)
            .into_iter()
            .filter(|one| match validate(one.event) {
                Ok(()) => true,
                Err(err) => {
                    first_error.get_or_insert(err);
                    false
                }
            })
            .collect();
        let mut written = 0;
        for chunk in folded.chunks(EVENTS_PER_BATCH) {
            written += match self.insert_batch(chunk).await {
                Ok(()) => chunk.iter().map(|one| one.count as usize).sum(),
                Err(StoreError::Busy) => return Err(StoreError::Busy),
                Err(_) => self.insert_each(chunk, &mut first_error).await?,
            };
        }
        match first_error {
            Some(err) if written == 0 => Err(err),
            _ => Ok(written),
        }
    }

    /// `chunk` as one statement batch in one transaction.
    async fn insert_batch(&self, chunk: &[Folded<'_>]) -> Result<()> {
        let mut conn = self.pool().acquire().await?;
        // The text varies with the batch. Batches of one or two events,
        // what a wrap flushes while calls trickle in, have six texts in
        // all and are kept in the connection's statement cache (preparing
        // one cost ~58k instructions); larger ones are not, so one-off
        // batches never evict the statements every call uses.
        let cached = chunk.len() <= 2;
        let mut query = sqlx::query(sqlx::AssertSqlSafe(batch_sql(chunk))).persistent(cached);
        for one in chunk {
            query = bind_event(query, one);
        }
        let done = query.execute(&mut *conn).await;
        if done.is_err() && sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
            // Never hand back a connection with a transaction open.
            conn.close_on_drop();
        }
        done.map(|_| ()).map_err(StoreError::from)
    }

    /// `chunk` one event per savepoint, in one transaction.
    async fn insert_each(
        &self,
        chunk: &[Folded<'_>],
        first_error: &mut Option<StoreError>,
    ) -> Result<usize> {
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let mut written = 0;
        for one in chunk {
            sqlx::query("SAVEPOINT one_event").execute(&mut *tx).await?;
            match insert_one(&mut tx, one).await {
                Ok(_) => written += one.count as usize,
                Err(StoreError::Busy) => return Err(StoreError::Busy),
                Err(err) => {
                    sqlx::query("ROLLBACK TO one_event")
                        .execute(&mut *tx)
                        .await?;
                    first_error.get_or_insert(err);
                }
            }
            sqlx::query("RELEASE one_event").execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(written)
    }

    /// Events matching `filter`: newest first, or oldest id first when
    /// `after_id` is set (for tailing with a cursor).
    ///
    /// A severity range runs one index-ordered query per level and merges
    /// them here, so no query ever sorts a large table.
    pub async fn query_events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        let levels: Vec<Option<Severity>> = match filter.min_severity {
            None => vec![None],
            Some(min) => Severity::ALL
                .into_iter()
                .filter(|s| *s >= min)
                .map(Some)
                .collect(),
        };
        let mut events = Vec::new();
        for level in levels.iter().copied() {
            let mut sql = build_event_query("", filter, level);
            let rows: Vec<EventRow> = sql.build_query_as().fetch_all(self.pool()).await?;
            for row in rows {
                events.push(Event::try_from(row)?);
            }
        }
        if levels.len() > 1 {
            if filter.after_id.is_some() {
                events.sort_by_key(|e| e.id);
            } else {
                events.sort_by_key(|e| std::cmp::Reverse((e.time_ms, e.id)));
            }
            events.truncate(filter.limit.min(EventFilter::MAX_LIMIT) as usize);
        }
        Ok(events)
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

    /// The distinct event types recorded, sorted: what a filter on an
    /// unknown type can suggest. Walks the type index, not the table.
    pub async fn recorded_event_types(&self) -> Result<Vec<String>> {
        let types: Vec<String> =
            sqlx::query_scalar("SELECT DISTINCT type FROM events ORDER BY type")
                .fetch_all(self.pool())
                .await?;
        Ok(types)
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

/// The filter's query for one exact severity (or any, with `None`);
/// `prefix` lets tests prepend `EXPLAIN QUERY PLAN`.
pub(crate) fn build_event_query(
    prefix: &str,
    filter: &EventFilter,
    severity: Option<Severity>,
) -> QueryBuilder<Sqlite> {
    let mut sql = QueryBuilder::<Sqlite>::new(prefix);
    sql.push("SELECT ");
    sql.push(EVENT_COLUMNS);
    sql.push(" FROM events WHERE 1 = 1");
    // A tail walks the primary key forward from its cursor and stops at the
    // limit; `+column` keeps the planner off the other indexes, which would
    // make it sort every match by id.
    let col = |name: &str| {
        if filter.after_id.is_some() {
            format!(" AND +{name} ")
        } else {
            format!(" AND {name} ")
        }
    };
    if let Some(server_id) = &filter.server_id {
        sql.push(col("server_id"))
            .push("= ")
            .push_bind(server_id.clone());
    }
    if let Some(tool) = &filter.tool {
        sql.push(col("tool")).push("= ").push_bind(tool.clone());
    }
    if let Some(event_type) = &filter.event_type {
        sql.push(col("type"))
            .push("= ")
            .push_bind(event_type.clone());
    }
    if let Some(action) = filter.action {
        sql.push(col("action"))
            .push("= ")
            .push_bind(action.as_str());
    }
    if let Some(severity) = severity {
        sql.push(col("severity"))
            .push("= ")
            .push_bind(severity.as_str());
    }
    if let Some(since) = filter.since_ms {
        sql.push(col("time_ms")).push(">= ").push_bind(since);
    }
    if let Some(until) = filter.until_ms {
        sql.push(col("time_ms")).push("< ").push_bind(until);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{mem, TempHome};
    use crate::StoreOptions;

    fn ev(time_ms: i64, ty: &str, server: &str, action: Action, severity: Severity) -> NewEvent {
        NewEvent {
            server_id: Some(server.into()),
            tool: Some("read_file".into()),
            rule: Some("r1".into()),
            evidence_json: Some(r#"{"len":3}"#.into()),
            session: Some("sess".into()),
            ..NewEvent::new(time_ms, ty, action, severity, "because")
        }
    }

    /// The keys the part-by-part hashing (before session 19) gave these
    /// events: rows written before keep folding with new events.
    #[test]
    fn the_aggregation_key_is_the_one_stored_rows_have() {
        let full = ev(
            12_345,
            "mcp_tool_called",
            "srv",
            Action::Allow,
            Severity::Info,
        );
        let bare = NewEvent::new(
            -7,
            "mcp_server_exited",
            Action::Block,
            Severity::High,
            "why",
        );
        let long_reason = NewEvent {
            reason: "é".repeat(300),
            ..ev(
                1,
                "mcp_tool_call_intercepted",
                "s",
                Action::Block,
                Severity::High,
            )
        };
        let keys: Vec<i64> = [full, bare, long_reason]
            .iter()
            .flat_map(|event| [1, 1000, 60_000].map(|slot| aggregation_key(event, slot).unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                -6666153290664391255,
                -8124896985392554383,
                -2093067073505031484,
                -6039892120359054616,
                734640575047503842,
                734640575047503842,
                -8827458796215012460,
                4514829637520863041,
                4514829637520863041,
            ]
        );
    }

    proptest::proptest! {
        /// Folding (runs unhashed, the rest by key) gives what grouping
        /// every event with the first equal one of its slot gives.
        #[test]
        fn folding_groups_equal_events_of_a_slot(
            picks in proptest::collection::vec((0usize..4, 0i64..3_000), 0..40),
            slot_ms in 0i64..1_500,
        ) {
            let kinds = [
                ("mcp_tool_called", "s", Action::Allow),
                ("mcp_tool_called", "t", Action::Allow),
                ("frame_dropped", "s", Action::Block),
                ("mcp_tool_called", "s", Action::Block),
            ];
            let events: Vec<NewEvent> = picks
                .iter()
                .map(|&(kind, time)| {
                    let (ty, server, action) = kinds[kind];
                    ev(time, ty, server, action, Severity::Info)
                })
                .collect();
            let mut expected: Vec<(usize, i64, i64)> = Vec::new(); // first, count, last time
            for (i, event) in events.iter().enumerate() {
                let joins = slot_ms > 0;
                match expected.iter_mut().find(|(first, ..)| {
                    joins
                        && same_slot(&events[*first], event, slot_ms)
                        && same_aggregate(&events[*first], event)
                }) {
                    Some((_, count, last)) => {
                        *count += 1;
                        *last = (*last).max(event.time_ms);
                    }
                    None => expected.push((i, 1, event.time_ms)),
                }
            }
            let got: Vec<(i64, i64, i64, Option<i64>)> = fold(&events, slot_ms)
                .iter()
                .map(|f| (f.event.time_ms, f.count, f.last_time_ms, f.key))
                .collect();
            let want: Vec<(i64, i64, i64, Option<i64>)> = expected
                .iter()
                .map(|&(first, count, last)| {
                    let event = &events[first];
                    (event.time_ms, count, last, aggregation_key(event, slot_ms))
                })
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[tokio::test]
    async fn floods_fold_into_one_row() {
        let store = mem().await; // 1000 ms slots
        let a = store
            .insert_event(&ev(
                10_000,
                "mcp_tool_called",
                "s",
                Action::Allow,
                Severity::Info,
            ))
            .await
            .unwrap();
        let b = store
            .insert_event(&ev(
                10_400,
                "mcp_tool_called",
                "s",
                Action::Allow,
                Severity::Info,
            ))
            .await
            .unwrap();
        let c = store
            .insert_event(&ev(
                10_999,
                "mcp_tool_called",
                "s",
                Action::Allow,
                Severity::Info,
            ))
            .await
            .unwrap();
        assert_eq!((a, b), (a, a), "identical events in one slot share a row");
        assert_eq!(c, a);
        let row = store.get_event(a).await.unwrap().unwrap();
        assert_eq!(
            (row.count, row.time_ms, row.last_time_ms),
            (3, 10_000, 10_999)
        );

        // Anything that differs gets its own row.
        let block = store
            .insert_event(&ev(
                10_500,
                "mcp_tool_called",
                "s",
                Action::Block,
                Severity::Info,
            ))
            .await
            .unwrap();
        assert_ne!(block, a, "a block is never folded into allows");
        let other_server = store
            .insert_event(&ev(
                10_500,
                "mcp_tool_called",
                "t",
                Action::Allow,
                Severity::Info,
            ))
            .await
            .unwrap();
        assert_ne!(other_server, a);
        let next_slot = store
            .insert_event(&ev(
                11_000,
                "mcp_tool_called",
                "s",
                Action::Allow,
                Severity::Info,
            ))
            .await
            .unwrap();
        assert_ne!(next_slot, a, "a new slot starts a new row");
        assert_eq!(store.latest_event_id().await.unwrap(), next_slot);
    }

    #[tokio::test]
    async fn two_pauses_in_one_second_are_two_rows() {
        let store = mem().await; // 1000 ms slots
        let pause = |t: i64, reason: &str| {
            NewEvent::new(
                t,
                event_types::PROTECTION_PAUSED,
                Action::Alert,
                Severity::High,
                reason,
            )
        };
        let first = store
            .insert_event(&pause(10_000, "paused by cli for 1 h"))
            .await
            .unwrap();
        let second = store
            .insert_event(&pause(10_100, "paused by cli for 3 s"))
            .await
            .unwrap();
        assert_ne!(
            first, second,
            "who paused for how long is never folded away"
        );
    }

    #[tokio::test]
    async fn each_secret_set_or_deleted_is_named_by_its_own_row() {
        let store = mem().await; // 1000 ms slots
        for (t, kind) in [
            (10_000, event_types::SECRET_SET),
            (20_000, event_types::SECRET_DELETED),
            (30_000, event_types::SECRET_NOT_INJECTED),
        ] {
            let ev = |dt: i64, name: &str| NewEvent {
                server_id: Some("s".into()),
                session: Some("ui-1".into()),
                ..NewEvent::new(
                    t + dt,
                    kind,
                    Action::Allow,
                    Severity::Info,
                    &format!("secret {name} x"),
                )
            };
            let a = store.insert_event(&ev(0, "AAA_FIRST")).await.unwrap();
            let b = store.insert_event(&ev(100, "ZZZ_HIDDEN")).await.unwrap();
            assert_ne!(a, b, "{kind}: a second name within a second is not hidden");
            let again = store.insert_event(&ev(200, "AAA_FIRST")).await.unwrap();
            assert_eq!(again, a, "{kind}: the same name still folds");
        }
    }

    #[tokio::test]
    async fn each_held_hash_of_a_tool_keeps_its_own_row() {
        let store = mem().await; // 1000 ms slots
        let held = |t: i64, hash: &str| NewEvent {
            server_id: Some("s".into()),
            tool: Some("a".into()),
            rule: Some("pin.held".into()),
            ..NewEvent::new(
                t,
                event_types::MCP_TOOL_CHANGED,
                Action::Hold,
                Severity::High,
                &format!("tool definition changed: held until a person approves hash {hash}"),
            )
        };
        let batch = [
            held(10_000, "sha256:v2"),
            held(10_050, "sha256:v2"),
            held(10_100, "sha256:v3"),
        ];
        store.insert_events(&batch).await.unwrap();
        store
            .insert_events(&[held(10_200, "sha256:v3")])
            .await
            .unwrap();
        let rows = store.query_events(&EventFilter::default()).await.unwrap();
        let mut seen: Vec<(String, i64)> = rows
            .iter()
            .map(|e| (e.reason.rsplit(' ').next().unwrap().to_string(), e.count))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [("sha256:v2".to_string(), 2), ("sha256:v3".to_string(), 2)],
            "the hash that waits is always named by an event"
        );
    }

    #[tokio::test]
    async fn different_policy_errors_never_fold_into_one() {
        let store = mem().await; // 1000 ms slots
        let invalid = |t: i64, reason: &str| NewEvent {
            server_id: Some("s".into()),
            ..NewEvent::new(
                t,
                event_types::POLICY_INVALID,
                Action::Alert,
                Severity::High,
                reason,
            )
        };
        let reasons = [
            "policy.toml:2:1: unknown field `fail_closd`",
            "policy.toml:1:8: unknown value",
            "policy.toml:3:19: `limits.max_frame_bytes`: invalid type",
            "policy.toml:1:1: not valid UTF-8",
        ];
        let mut ids = Vec::new();
        for (i, reason) in reasons.iter().enumerate() {
            ids.push(
                store
                    .insert_event(&invalid(10_000 + i as i64, reason))
                    .await
                    .unwrap(),
            );
        }
        ids.dedup();
        assert_eq!(ids.len(), 4, "each distinct reason keeps its own row");
        let again = store
            .insert_event(&invalid(10_500, reasons[0]))
            .await
            .unwrap();
        assert_eq!(again, ids[0], "the same reason still folds");
        assert_eq!(store.get_event(ids[0]).await.unwrap().unwrap().count, 2);
        // In a batch too.
        let batch: Vec<NewEvent> = reasons.iter().map(|r| invalid(20_000, r)).collect();
        assert_eq!(store.insert_events(&batch).await.unwrap(), 4);
        let rows = store.query_events(&EventFilter::default()).await.unwrap();
        assert_eq!(rows.len(), 8, "four rows per slot, one per reason");
        // Other types still fold by (server, rule) whatever the reason.
        let a = store
            .insert_event(&ev(
                30_000,
                "frame_dropped",
                "s",
                Action::Block,
                Severity::High,
            ))
            .await
            .unwrap();
        let b = store
            .insert_event(&NewEvent {
                reason: "another size".into(),
                ..ev(30_001, "frame_dropped", "s", Action::Block, Severity::High)
            })
            .await
            .unwrap();
        assert_eq!(a, b, "floods of other types still fold");
    }

    #[tokio::test]
    async fn recorded_types_are_distinct_and_sorted() {
        let store = mem().await;
        assert!(store.recorded_event_types().await.unwrap().is_empty());
        for (t, ty) in [
            (1, "mcp_tool_called"),
            (2, "frame_dropped"),
            (5_000, "mcp_tool_called"),
        ] {
            store
                .insert_event(&ev(t, ty, "s", Action::Allow, Severity::Info))
                .await
                .unwrap();
        }
        assert_eq!(
            store.recorded_event_types().await.unwrap(),
            ["frame_dropped", "mcp_tool_called"],
            "each recorded type once, in order, for `events --type` hints"
        );
    }

    #[tokio::test]
    async fn aggregation_can_be_switched_off() {
        let store = Store::open_in_memory_with(StoreOptions {
            event_aggregation_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
        let a = store
            .insert_event(&ev(1, "frame_dropped", "s", Action::Block, Severity::High))
            .await
            .unwrap();
        let b = store
            .insert_event(&ev(1, "frame_dropped", "s", Action::Block, Severity::High))
            .await
            .unwrap();
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn colliding_key_never_folds_different_events() {
        let store = mem().await;
        let first = ev(5, "frame_dropped", "s", Action::Block, Severity::High);
        let a = store.insert_event(&first).await.unwrap();
        // Forge the stored row to look like another event with the same key.
        sqlx::query("UPDATE events SET type = 'env_stripped'")
            .execute(store.pool())
            .await
            .unwrap();
        let b = store.insert_event(&first).await.unwrap();
        assert_ne!(
            a, b,
            "the WHERE guard must refuse to fold a different event"
        );
        assert_eq!(store.get_event(a).await.unwrap().unwrap().count, 1);
        // The same in a batch: the refused fold becomes a row of its own.
        let before = store.query_events(&EventFilter::default()).await.unwrap();
        assert_eq!(
            store
                .insert_events(std::slice::from_ref(&first))
                .await
                .unwrap(),
            1
        );
        let after = store.query_events(&EventFilter::default()).await.unwrap();
        assert_eq!(after.len(), before.len() + 1);
        assert_eq!(store.get_event(a).await.unwrap().unwrap().count, 1);
    }

    #[tokio::test]
    async fn a_batch_is_written_together_and_folds_like_single_inserts() {
        let store = mem().await;
        let called = ev(
            10_000,
            "mcp_tool_called",
            "s",
            Action::Allow,
            Severity::Info,
        );
        let bad = ev(10_000, "Bad Type", "s", Action::Allow, Severity::Info);
        let dropped = ev(10_001, "frame_dropped", "s", Action::Block, Severity::High);
        let written = store
            .insert_events(&[called.clone(), called.clone(), bad.clone(), dropped])
            .await
            .unwrap();
        assert_eq!(written, 3, "the invalid event is skipped, the rest kept");
        let rows = store.query_events(&EventFilter::default()).await.unwrap();
        assert_eq!(rows.len(), 2, "two identical calls fold into one row");
        let folded = rows
            .iter()
            .find(|e| e.event_type == "mcp_tool_called")
            .unwrap();
        assert_eq!(folded.count, 2);
        assert!(matches!(
            store.insert_events(&[bad]).await,
            Err(StoreError::Invalid(_))
        ));
        // A later batch of the same slot folds (in memory, then into the
        // stored row) with its count and its latest time; another slot's
        // identical event gets its own row.
        let mut later = called.clone();
        later.time_ms = 10_400;
        let mut next_slot = called.clone();
        next_slot.time_ms = 11_000;
        let written = store
            .insert_events(&[called.clone(), later, called.clone(), next_slot])
            .await
            .unwrap();
        assert_eq!(written, 4);
        let rows = store.query_events(&EventFilter::default()).await.unwrap();
        let calls: Vec<_> = rows
            .iter()
            .filter(|e| e.event_type == "mcp_tool_called")
            .map(|e| (e.time_ms, e.count))
            .collect();
        assert_eq!(calls, vec![(11_000, 1), (10_000, 5)]);
        let first = rows.iter().find(|e| e.time_ms == 10_000).unwrap();
        assert_eq!(first.last_time_ms, 10_400);
    }

    /// Small batches keep their prepared statements: the same texts run
    /// again after a batch that failed inside its transaction.
    #[tokio::test]
    async fn a_cached_batch_runs_again_after_one_failed_halfway() {
        let store = mem().await;
        sqlx::query(
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON events \
             WHEN NEW.server_id = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let ok = |t| ev(t, "frame_dropped", "s", Action::Block, Severity::High);
        let boom = ev(
            20_000,
            "frame_dropped",
            "boom",
            Action::Block,
            Severity::High,
        );
        for round in 0..3 {
            let t = 10_000 * (round + 1);
            assert_eq!(store.insert_events(&[ok(t)]).await.unwrap(), 1);
            assert_eq!(
                store
                    .insert_events(&[ok(t + 1), ok(t + 50_000)])
                    .await
                    .unwrap(),
                2
            );
            assert!(store
                .insert_events(std::slice::from_ref(&boom))
                .await
                .is_err());
        }
        let rows = store.query_events(&EventFilter::default()).await.unwrap();
        assert!(rows.iter().all(|e| e.server_id.as_deref() != Some("boom")));
        assert_eq!(rows.iter().map(|e| e.count).sum::<i64>(), 9);
    }

    #[tokio::test]
    async fn invalid_events_are_refused() {
        let store = mem().await;
        let mut bad = ev(1, "Bad Type", "s", Action::Allow, Severity::Info);
        assert!(matches!(
            store.insert_event(&bad).await,
            Err(StoreError::Invalid(_))
        ));
        bad.event_type = "ok_type".into();
        bad.evidence_json = Some("{nope".into());
        assert!(matches!(
            store.insert_event(&bad).await,
            Err(StoreError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn corrupt_event_rows_are_errors() {
        let store = mem().await;
        let id = store
            .insert_event(&ev(1, "frame_dropped", "s", Action::Block, Severity::High))
            .await
            .unwrap();
        for (sql, why) in [
            (
                "UPDATE events SET severity = 'apocalyptic'",
                "unknown severity",
            ),
            (
                "UPDATE events SET severity = 'high', action = 'smite'",
                "unknown action",
            ),
            (
                "UPDATE events SET action = 'block', evidence = '{'",
                "bad evidence",
            ),
            ("UPDATE events SET evidence = NULL, count = 0", "zero count"),
        ] {
            sqlx::query(sql).execute(store.pool()).await.unwrap();
            assert!(
                matches!(
                    store.get_event(id).await,
                    Err(StoreError::CorruptRow {
                        table: "events",
                        ..
                    })
                ),
                "{why} must be a corrupt-row error"
            );
        }
        sqlx::query("UPDATE events SET count = 'many'")
            .execute(store.pool())
            .await
            .expect_err("STRICT tables refuse a value of the wrong type");
    }

    /// Inserts a fixed set of events and checks which ids a filter returns.
    async fn check(store: &Store, filter: EventFilter, expect: &[i64]) {
        let got: Vec<i64> = store
            .query_events(&filter)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(got, expect, "filter {filter:?}");
    }

    #[tokio::test]
    async fn query_filters() {
        let store = Store::open_in_memory_with(StoreOptions {
            event_aggregation_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
        let rows = [
            ev(100, "mcp_tool_called", "a", Action::Allow, Severity::Info), // 1
            ev(
                200,
                "mcp_tool_call_intercepted",
                "a",
                Action::Block,
                Severity::High,
            ), // 2
            ev(
                300,
                "mcp_cross_server_blocked",
                "b",
                Action::Block,
                Severity::Critical,
            ), // 3
            ev(400, "mcp_tool_changed", "b", Action::Hold, Severity::Medium), // 4
            ev(500, "mcp_tool_called", "b", Action::Alert, Severity::Low),  // 5
        ];
        for row in &rows {
            store.insert_event(row).await.unwrap();
        }
        let mut other_tool = ev(600, "mcp_tool_called", "a", Action::Allow, Severity::Info);
        other_tool.tool = Some("send".into());
        store.insert_event(&other_tool).await.unwrap(); // 6

        check(&store, EventFilter::default(), &[6, 5, 4, 3, 2, 1]).await;
        check(
            &store,
            EventFilter {
                server_id: Some("a".into()),
                ..Default::default()
            },
            &[6, 2, 1],
        )
        .await;
        check(
            &store,
            EventFilter {
                tool: Some("send".into()),
                ..Default::default()
            },
            &[6],
        )
        .await;
        check(
            &store,
            EventFilter {
                event_type: Some("mcp_tool_called".into()),
                ..Default::default()
            },
            &[6, 5, 1],
        )
        .await;
        check(
            &store,
            EventFilter {
                action: Some(Action::Block),
                ..Default::default()
            },
            &[3, 2],
        )
        .await;
        check(
            &store,
            EventFilter {
                min_severity: Some(Severity::High),
                ..Default::default()
            },
            &[3, 2],
        )
        .await;
        check(
            &store,
            EventFilter {
                min_severity: Some(Severity::Low),
                ..Default::default()
            },
            &[5, 4, 3, 2],
        )
        .await;
        check(
            &store,
            EventFilter {
                since_ms: Some(300),
                until_ms: Some(500),
                ..Default::default()
            },
            &[4, 3],
        )
        .await;
        check(
            &store,
            EventFilter {
                after_id: Some(3),
                ..Default::default()
            },
            &[4, 5, 6],
        )
        .await;
        check(
            &store,
            EventFilter {
                after_id: Some(3),
                limit: 2,
                ..Default::default()
            },
            &[4, 5],
        )
        .await;
        check(
            &store,
            EventFilter {
                limit: 2,
                ..Default::default()
            },
            &[6, 5],
        )
        .await;
        check(
            &store,
            EventFilter {
                server_id: Some("b".into()),
                action: Some(Action::Block),
                since_ms: Some(250),
                ..Default::default()
            },
            &[3],
        )
        .await;
        let event = store.get_event(2).await.unwrap().unwrap();
        assert_eq!(event.evidence_json.as_deref(), Some(r#"{"len":3}"#));
        assert_eq!(event.session.as_deref(), Some("sess"));
        assert_eq!(event.rule.as_deref(), Some("r1"));
        assert!(store.get_event(99).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn retention_by_age() {
        let store = mem().await;
        let day = 24 * 60 * 60 * 1000;
        for d in 0..40 {
            store
                .insert_event(&ev(
                    d * day,
                    "frame_dropped",
                    "s",
                    Action::Block,
                    Severity::High,
                ))
                .await
                .unwrap();
        }
        let latest = store.latest_event_id().await.unwrap();
        let report = store
            .prune_events(40 * day, &RetentionPolicy::default())
            .await
            .unwrap();
        assert_eq!(
            report,
            PruneReport {
                expired: 10,
                over_size: 0
            },
            "days 0..9 are older than 30 days"
        );
        let left = store
            .query_events(&EventFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(left.len(), 30);
        assert!(left.iter().all(|e| e.time_ms >= 10 * day));
        assert_eq!(store.latest_event_id().await.unwrap(), latest);
        // AUTOINCREMENT: pruning everything never lets an id come back.
        store
            .prune_events(1000 * day, &RetentionPolicy::default())
            .await
            .unwrap();
        assert_eq!(store.latest_event_id().await.unwrap(), 0);
        let id = store
            .insert_event(&ev(
                1000 * day,
                "frame_dropped",
                "s",
                Action::Block,
                Severity::High,
            ))
            .await
            .unwrap();
        assert!(
            id > latest,
            "ids are never reused, so pollers' cursors stay valid"
        );
    }

    #[tokio::test]
    async fn size_cap_removes_oldest_first() {
        let tmp = TempHome::new();
        let store = tmp
            .open_with(StoreOptions {
                event_aggregation_ms: 0,
                ..Default::default()
            })
            .await;
        let evidence = format!(r#"{{"blob":"{}"}}"#, "x".repeat(4000));
        for i in 0..1000 {
            let mut e = ev(
                1_000_000 + i,
                "frame_dropped",
                "s",
                Action::Block,
                Severity::High,
            );
            e.evidence_json = Some(evidence.clone());
            store.insert_event(&e).await.unwrap();
        }
        let before = store.used_bytes().await.unwrap();
        assert!(before > 4_000_000, "about 4 MB of events, got {before}");
        let cap = 1_000_000;
        let policy = RetentionPolicy {
            max_bytes: cap,
            ..Default::default()
        };
        let report = store.prune_events(1_000_000, &policy).await.unwrap();
        assert_eq!(report.expired, 0);
        assert!(
            report.over_size > 500,
            "most rows must go, removed {}",
            report.over_size
        );
        assert!(
            store.used_bytes().await.unwrap() <= cap,
            "under the cap after pruning"
        );
        let left = store
            .query_events(&EventFilter {
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(left.len() as u64, 1000 - report.over_size);
        assert_eq!(left[0].time_ms, 1_000_999, "the newest event survives");
        let oldest_left = left.iter().map(|e| e.time_ms).min().unwrap();
        assert_eq!(
            oldest_left,
            1_000_000 + report.over_size as i64,
            "oldest went first"
        );
    }
}

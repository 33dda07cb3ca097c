//! `call_window`: the calls of one client session that passed the whole
//! chain, seen by every wrap process of that session, and the atomic
//! check-and-record that cross-server rules, bursts and rate limits need.
//!
//! # Cost of one call
//! [`Store::check_and_record_call`] runs in one `BEGIN IMMEDIATE`
//! transaction: two indexed reads (the session's window rows, its bucket
//! rows), one indexed `MIN(time_ms)` read, the caller's pure `decide`, then
//! writes only what the decision asks for:
//! - an allowed call: exactly one `INSERT` (the call row; plain rowid, no
//!   `AUTOINCREMENT` bookkeeping);
//! - a bucket row only when `decide` returns one (`CallDecision::bucket`).
//!   A session with one server needs none for the cross-server rules; burst
//!   and rate checks can be computed from `WindowSnapshot::entries` when the
//!   window passed covers their period, leaving the bucket row for
//!   cool-downs, which only blocked calls set;
//! - pruning is amortized: the session's expired rows are deleted only once
//!   its oldest row is older than twice the window, so at most about one
//!   `DELETE` per window per session.
//!
//! One commit either way; a blocked call that sets no bucket writes nothing.

use sqlx::SqliteConnection;

use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::rate_buckets::{self, BucketState};

/// A call about to be forwarded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewCall {
    pub server_id: String,
    pub tool: String,
    /// Classification (`read`, `write`, `send`, `compute`, `unknown`).
    pub category: String,
    /// How it passed (`allow`, `alert`, …).
    pub outcome: String,
    /// Caller's opaque per-call material (e.g. argument digests).
    pub detail: Option<Vec<u8>>,
}

/// Identifies a recorded call for [`Store::attach_result`]. The time is part
/// of it so a pruned call's reused rowid can never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallId {
    pub id: i64,
    pub time_ms: i64,
}

/// One recorded call in a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowEntry {
    pub call: CallId,
    pub server_id: String,
    pub tool: String,
    pub category: String,
    pub time_ms: i64,
    pub outcome: String,
    pub detail: Option<Vec<u8>>,
    /// Taint material attached after the result arrived.
    pub result: Option<Vec<u8>>,
}

/// What `decide` sees: the session's calls with `time_ms >= window_start_ms`
/// (oldest first) and its rate buckets (by server id).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSnapshot {
    pub session: String,
    pub now_ms: i64,
    pub window_start_ms: i64,
    pub entries: Vec<WindowEntry>,
    pub buckets: Vec<(String, BucketState)>,
}

impl WindowSnapshot {
    /// The bucket of `server_id`, if one is stored.
    pub fn bucket(&self, server_id: &str) -> Option<&BucketState> {
        self.buckets
            .iter()
            .find(|(id, _)| id == server_id)
            .map(|(_, state)| state)
    }

    /// Entries of other servers than `server_id`.
    pub fn other_servers<'a>(
        &'a self,
        server_id: &'a str,
    ) -> impl Iterator<Item = &'a WindowEntry> {
        self.entries
            .iter()
            .filter(move |e| e.server_id != server_id)
    }
}

/// The caller's decision. `record` adds the call to the window; `bucket`,
/// when set, is stored for the calling server; `verdict` is passed back.
#[derive(Debug, Clone, PartialEq)]
pub struct CallDecision<V> {
    pub record: bool,
    pub bucket: Option<BucketState>,
    pub verdict: V,
}

impl<V> CallDecision<V> {
    /// Record the call.
    pub fn allow(verdict: V) -> Self {
        Self {
            record: true,
            bucket: None,
            verdict,
        }
    }

    /// Do not record the call.
    pub fn deny(verdict: V) -> Self {
        Self {
            record: false,
            bucket: None,
            verdict,
        }
    }

    /// Also store this bucket state for the calling server.
    pub fn with_bucket(mut self, bucket: BucketState) -> Self {
        self.bucket = Some(bucket);
        self
    }
}

/// The decision, and the recorded call's id when it was recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome<V> {
    pub decision: CallDecision<V>,
    pub recorded: Option<CallId>,
}

#[derive(sqlx::FromRow)]
struct EntryRow {
    id: i64,
    server_id: String,
    tool: String,
    category: String,
    time_ms: i64,
    outcome: String,
    detail: Option<Vec<u8>>,
    result: Option<Vec<u8>>,
}

impl From<EntryRow> for WindowEntry {
    fn from(row: EntryRow) -> Self {
        WindowEntry {
            call: CallId {
                id: row.id,
                time_ms: row.time_ms,
            },
            server_id: row.server_id,
            tool: row.tool,
            category: row.category,
            time_ms: row.time_ms,
            outcome: row.outcome,
            detail: row.detail,
            result: row.result,
        }
    }
}

async fn load_entries(
    conn: &mut SqliteConnection,
    session: &str,
    since_ms: i64,
) -> Result<Vec<WindowEntry>> {
    let rows: Vec<EntryRow> = sqlx::query_as(
        "SELECT id, server_id, tool, category, time_ms, outcome, detail, result \
         FROM call_window WHERE session = ? AND time_ms >= ? ORDER BY time_ms, id",
    )
    .bind(session)
    .bind(since_ms)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(WindowEntry::from).collect())
}

impl Store {
    /// Checks a call against the session's recent calls and records it, in
    /// one `BEGIN IMMEDIATE` transaction: no other process can record a call
    /// of any session between the snapshot `decide` sees and the write of its
    /// decision. `decide` must be pure and quick (it runs holding the write
    /// lock). Past the busy budget: [`StoreError::Busy`], nothing written.
    pub async fn check_and_record_call<V, F>(
        &self,
        session: &str,
        now_ms: i64,
        window_ms: i64,
        call: NewCall,
        decide: F,
    ) -> Result<CheckOutcome<V>>
    where
        F: FnOnce(&WindowSnapshot) -> CallDecision<V> + Send,
        V: Send,
    {
        if session.is_empty() || call.server_id.is_empty() {
            return Err(StoreError::Invalid("call needs a session and a server id"));
        }
        if window_ms <= 0 {
            return Err(StoreError::Invalid("window must be positive"));
        }
        let window_start_ms = now_ms.saturating_sub(window_ms);
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let entries = load_entries(&mut tx, session, window_start_ms).await?;
        let buckets = rate_buckets::load(&mut tx, session).await?;
        let oldest: Option<i64> =
            sqlx::query_scalar("SELECT MIN(time_ms) FROM call_window WHERE session = ?")
                .bind(session)
                .fetch_one(&mut *tx)
                .await?;
        let snapshot = WindowSnapshot {
            session: session.to_owned(),
            now_ms,
            window_start_ms,
            entries,
            buckets,
        };
        let decision = decide(&snapshot);
        drop(snapshot);

        let mut recorded = None;
        if decision.record {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO call_window (session, server_id, tool, category, time_ms, outcome, detail) \
                 VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            )
            .bind(session)
            .bind(&call.server_id)
            .bind(&call.tool)
            .bind(&call.category)
            .bind(now_ms)
            .bind(&call.outcome)
            .bind(&call.detail)
            .fetch_one(&mut *tx)
            .await?;
            recorded = Some(CallId {
                id,
                time_ms: now_ms,
            });
        }
        if let Some(bucket) = &decision.bucket {
            rate_buckets::store(&mut tx, session, &call.server_id, bucket).await?;
        }
        if oldest.is_some_and(|oldest| oldest < now_ms.saturating_sub(window_ms.saturating_mul(2)))
        {
            sqlx::query("DELETE FROM call_window WHERE session = ? AND time_ms < ?")
                .bind(session)
                .bind(window_start_ms)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(CheckOutcome { decision, recorded })
    }

    /// Adds taint material to a recorded call once its result arrived. False
    /// when the call is no longer in the window.
    pub async fn attach_result(&self, call: CallId, result: &[u8]) -> Result<bool> {
        let done = sqlx::query("UPDATE call_window SET result = ? WHERE id = ? AND time_ms = ?")
            .bind(result)
            .bind(call.id)
            .bind(call.time_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A session's recorded calls since `since_ms`, oldest first (read-only,
    /// e.g. to show the related calls of a block).
    pub async fn window_entries(&self, session: &str, since_ms: i64) -> Result<Vec<WindowEntry>> {
        let mut conn = self.pool().acquire().await?;
        load_entries(&mut conn, session, since_ms).await
    }

    /// Deletes every session's calls older than `before_ms` (sessions whose
    /// processes ended never prune themselves).
    pub async fn prune_call_window(&self, before_ms: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM call_window WHERE time_ms < ?")
            .bind(before_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}

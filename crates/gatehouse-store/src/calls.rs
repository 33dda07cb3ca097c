//! `call_window`: the calls of one client session that passed the whole
//! chain, seen by every wrap process of that session, and the atomic
//! check-and-record that cross-server rules, bursts and rate limits need.
//!
//! # Cost of one call
//! [`Store::check_call`] runs in one `BEGIN IMMEDIATE` transaction, taken
//! by the statement batch that reads and released by the one that writes
//! (the write lock is held across one hop to sqlx's worker thread). It
//! reads, in one statement, only the window rows changed since this
//! process's last check of the session (every change stamps its row with
//! the next `seq`, migration 0007; the rest is kept in memory, see
//! [`LoadedWindow`]), the caller's bucket, the session's oldest call time
//! and the servers exposing the tool; so a check reads the calls made since
//! the previous one, not the whole window, however busy the session. Then
//! the caller's pure `decide`, then only the writes the decision asks for:
//! - an allowed call: one `INSERT` (the call row; plain rowid) and the
//!   change counter's update (a trigger);
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

use std::sync::Arc;

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
/// (oldest first), its rate buckets (by server id; with
/// [`Store::check_call`] only the calling server's), and the servers of the
/// session exposing the called tool (when asked for).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSnapshot {
    pub session: String,
    pub now_ms: i64,
    pub window_start_ms: i64,
    pub entries: Vec<Arc<WindowEntry>>,
    pub buckets: Vec<(String, BucketState)>,
    pub exposing: Vec<ExposingServer>,
}

/// A server of the session that listed the called tool's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposingServer {
    pub server_id: String,
    pub command_hash: String,
    /// When its pin of that name was made; until that pin is committed,
    /// when the name was exposed (a first sight is as old as its exposure).
    pub pinned_at_ms: Option<i64>,
}

/// Which of the session's calls [`Store::check_call`] hands to `decide`.
/// What is read from the database does not depend on it: only the rows
/// changed since this process's last check (`LoadedWindow`), each
/// with its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowLoad {
    /// Every call since the window start, every result, every bucket.
    All,
    /// What one call's rules need.
    Lean {
        /// Other servers' calls whose results leave taint marks (`read`,
        /// `compute`, `unknown`) this far back (the sequence rules).
        other_reads_ms: Option<i64>,
        /// The calling server's own calls this far back (burst, rate limit).
        own_ms: Option<i64>,
    },
}

/// One call check: the session, the time, the pruning horizon, what to load.
#[derive(Debug, Clone, Copy)]
pub struct CallCheck<'a> {
    pub session: &'a str,
    pub now_ms: i64,
    /// Read the time again once the write lock is held (the later of both
    /// counts): a process that waited for the lock must not judge its call
    /// as if it came before the calls recorded while it waited. None in
    /// tests with fixed times.
    pub clock: Option<fn() -> i64>,
    /// The longest look-back of any rule: older calls may be pruned.
    pub window_ms: i64,
    pub load: WindowLoad,
    /// Load the session's servers exposing this tool name (shadowing).
    pub exposing: Option<&'a str>,
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
            .map(|e| &**e)
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

pub(crate) async fn load_entries(
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

/// Everything a check reads, in one statement (one round trip). Kind 0 is a
/// call row changed since this process's last check of the session (`seq`
/// above ?3, migration 0007; its seq in `num2`) and not older than ?4; kind
/// 3 the session's oldest call time (decides pruning); kind 1 a bucket (all
/// of the session's when ?5 = 1, else the caller's); kind 2 a server
/// exposing the called tool (?6).
macro_rules! snapshot_sql {
    () => {
        "\
SELECT 0 AS kind, id, server_id, tool, category, time_ms, outcome, detail, result, \
       NULL AS num, seq AS num2 \
  FROM call_window INDEXED BY call_window_session_seq \
 WHERE session = ?1 AND seq > ?3 AND time_ms >= ?4 \
UNION ALL \
SELECT 3, 0, '', '', '', \
       (SELECT time_ms FROM call_window WHERE session = ?1 ORDER BY time_ms LIMIT 1), \
       '', NULL, NULL, NULL, NULL \
UNION ALL \
SELECT 1, 0, server_id, '', '', updated_ms, '', NULL, NULL, tokens, cooldown_until_ms \
  FROM rate_buckets WHERE session = ?1 AND (?5 = 1 OR server_id = ?2) \
UNION ALL \
SELECT 2, 0, t.server_id, t.command_hash, '', 0, '', NULL, NULL, NULL, \
       COALESCE(p.pinned_at_ms, t.updated_ms) \
  FROM session_tools t LEFT JOIN pins p ON p.server_id = t.pin_server_id AND p.name = t.name \
 WHERE t.session = ?1 AND t.name = ?6"
    };
}
#[cfg(test)]
pub(crate) const SNAPSHOT_SQL: &str = snapshot_sql!();
/// The snapshot batch of [`check_locked`]: takes the write lock and reads.
const LOCK_AND_SNAPSHOT_SQL: &str = concat!("BEGIN IMMEDIATE; ", snapshot_sql!());
/// The decision batch's statements (binds: see `check_locked`).
const RECORD_SQL: &str = "INSERT INTO call_window \
    (session, server_id, tool, category, time_ms, outcome, detail, seq) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, (SELECT value + 1 FROM call_seq WHERE id = 1)) \
    RETURNING id; ";
const PRUNE_SQL: &str = "DELETE FROM call_window WHERE session = ?1 AND time_ms < ?11; ";

#[derive(sqlx::FromRow)]
struct SnapshotRow {
    kind: i64,
    id: i64,
    server_id: String,
    tool: String,
    category: String,
    time_ms: Option<i64>,
    outcome: String,
    detail: Option<Vec<u8>>,
    result: Option<Vec<u8>>,
    num: Option<f64>,
    num2: Option<i64>,
}

/// Sessions whose loaded windows one process keeps at most.
const MAX_LOADED_SESSIONS: usize = 16;

/// What one process has loaded of a session's window: every row changed up
/// to `seq` (migration 0007) and not older than the window, oldest first.
/// A check loads only the rows changed since; rows it does not get again
/// are unchanged.
#[derive(Debug, Default)]
pub(crate) struct LoadedWindow {
    /// The highest `seq` loaded; `None` before the first load.
    seq: Option<i64>,
    entries: Vec<Arc<WindowEntry>>,
}

impl LoadedWindow {
    /// Adds changed rows (a read's attached result replaces its row) and
    /// forgets rows older than `since_ms`.
    fn merge(&mut self, changed: Vec<(i64, WindowEntry)>, since_ms: i64) {
        if !changed.is_empty() {
            let ids: std::collections::HashSet<i64> =
                changed.iter().map(|(_, e)| e.call.id).collect();
            self.entries.retain(|e| !ids.contains(&e.call.id));
            for (seq, entry) in changed {
                self.seq = Some(self.seq.map_or(seq, |s| s.max(seq)));
                self.entries.push(Arc::new(entry));
            }
            self.entries.sort_by_key(|e| (e.time_ms, e.call.id));
        }
        let old = self.entries.partition_point(|e| e.time_ms < since_ms);
        self.entries.drain(..old);
    }

    /// The entries `load` asks for.
    fn select(&self, load: WindowLoad, server_id: &str, now_ms: i64) -> Vec<Arc<WindowEntry>> {
        let since = |back: Option<i64>| back.map_or(i64::MAX, |b| now_ms.saturating_sub(b));
        match load {
            WindowLoad::All => self.entries.clone(),
            WindowLoad::Lean {
                other_reads_ms,
                own_ms,
                ..
            } => {
                let (other_since, own_since) = (since(other_reads_ms), since(own_ms));
                self.entries
                    .iter()
                    .filter(|e| {
                        if e.server_id == server_id {
                            e.time_ms >= own_since
                        } else {
                            // The classes whose results leave taint marks
                            // (`ToolClass::leaves_marks`).
                            matches!(e.category.as_str(), "read" | "compute" | "unknown")
                                && e.time_ms >= other_since
                        }
                    })
                    .cloned()
                    .collect()
            }
        }
    }
}

/// One check's parts apart from the I/O (`check_locked`): the snapshot
/// statement's arguments, the snapshot from its rows, the decision's writes.
struct Plan<'a> {
    session: &'a str,
    server_id: &'a str,
    clock: Option<fn() -> i64>,
    window_ms: i64,
    load: WindowLoad,
    /// The clock before the lock: the rows' range starts from it (the
    /// decision uses the clock after it; `judge` filters by time itself,
    /// and an earlier start only loads more rows).
    read_ms: i64,
    /// ?3–?6 of the snapshot statement (?1 session, ?2 server).
    after_seq: i64,
    since_ms: i64,
    all_buckets: i64,
    exposing: &'a str,
}

/// What a decision writes: the call row (at `now_ms`), a bucket, the
/// session's expired rows (pruned only once the oldest is older than twice
/// the window, about once per window).
struct Writes {
    now_ms: i64,
    record: bool,
    bucket: Option<BucketState>,
    /// `Some(horizon)`: delete the session's rows older than it.
    prune_before: Option<i64>,
}

impl<'a> Plan<'a> {
    fn new(check: &CallCheck<'a>, server_id: &'a str, loaded: &LoadedWindow) -> Self {
        let read_ms = check
            .clock
            .map_or(check.now_ms, |clock| check.now_ms.max(clock()));
        Plan {
            session: check.session,
            server_id,
            clock: check.clock,
            window_ms: check.window_ms,
            load: check.load,
            read_ms,
            after_seq: loaded.seq.unwrap_or(i64::MIN),
            since_ms: read_ms.saturating_sub(check.window_ms),
            all_buckets: i64::from(matches!(check.load, WindowLoad::All)),
            exposing: check.exposing.unwrap_or(""),
        }
    }

    /// The snapshot `decide` sees, from the rows read holding the lock
    /// (merged into `loaded`), and the session's oldest call time.
    fn snapshot(
        &self,
        loaded: &mut LoadedWindow,
        rows: Vec<SnapshotRow>,
    ) -> Result<(WindowSnapshot, Option<i64>)> {
        let now_ms = self.clock.map_or(self.read_ms, |c| self.read_ms.max(c()));
        let window_start_ms = now_ms.saturating_sub(self.window_ms);
        let mut oldest: Option<i64> = None;
        let mut changed = Vec::new();
        let mut buckets = Vec::new();
        let mut exposing = Vec::new();
        for row in rows {
            match row.kind {
                0 => changed.push((
                    row.num2.unwrap_or(0),
                    WindowEntry::from(EntryRow {
                        id: row.id,
                        server_id: row.server_id,
                        tool: row.tool,
                        category: row.category,
                        time_ms: row.time_ms.unwrap_or(0),
                        outcome: row.outcome,
                        detail: row.detail,
                        result: row.result,
                    }),
                )),
                3 => oldest = row.time_ms,
                1 => buckets.push(rate_buckets::parse_parts(
                    row.server_id,
                    row.num.unwrap_or(f64::NAN),
                    row.time_ms.unwrap_or(0),
                    row.num2.unwrap_or(0),
                )?),
                _ => exposing.push(ExposingServer {
                    server_id: row.server_id,
                    command_hash: row.tool,
                    pinned_at_ms: row.num2,
                }),
            }
        }
        buckets.sort_by(|a, b| a.0.cmp(&b.0));
        loaded.merge(changed, window_start_ms);
        let snapshot = WindowSnapshot {
            session: self.session.to_owned(),
            now_ms,
            window_start_ms,
            entries: loaded.select(self.load, self.server_id, now_ms),
            buckets,
            exposing,
        };
        Ok((snapshot, oldest))
    }

    fn writes<V>(
        &self,
        snapshot: &WindowSnapshot,
        oldest: Option<i64>,
        decision: &CallDecision<V>,
    ) -> Result<Writes> {
        if let Some(bucket) = &decision.bucket {
            rate_buckets::check(bucket)?;
        }
        let horizon = snapshot
            .now_ms
            .saturating_sub(self.window_ms.saturating_mul(2));
        Ok(Writes {
            now_ms: snapshot.now_ms,
            record: decision.record,
            bucket: decision.bucket,
            prune_before: oldest
                .filter(|oldest| *oldest < horizon)
                .map(|_| snapshot.window_start_ms),
        })
    }
}

/// [`Store::check_call`] on one pooled connection: the batch `BEGIN IMMEDIATE; snapshot`, the decision, then the batch
/// `writes…; COMMIT`, so the write lock is held across one hop to sqlx's
/// worker thread. On an error the caller rolls back (and drops `loaded`).
async fn check_locked<V, F>(
    conn: &mut SqliteConnection,
    loaded: &mut LoadedWindow,
    check: CallCheck<'_>,
    call: NewCall,
    decide: F,
) -> Result<CheckOutcome<V>>
where
    F: FnOnce(&WindowSnapshot) -> CallDecision<V> + Send,
    V: Send,
{
    let plan = Plan::new(&check, &call.server_id, loaded);
    let rows: Vec<SnapshotRow> = sqlx::query_as(LOCK_AND_SNAPSHOT_SQL)
        .bind(plan.session)
        .bind(plan.server_id)
        .bind(plan.after_seq)
        .bind(plan.since_ms)
        .bind(plan.all_buckets)
        .bind(plan.exposing)
        .fetch_all(&mut *conn)
        .await?;
    let (snapshot, oldest) = plan.snapshot(loaded, rows)?;
    let decision = decide(&snapshot);
    let w = plan.writes(&snapshot, oldest, &decision)?;
    drop(snapshot);
    let mut sql = String::new();
    if w.record {
        sql.push_str(RECORD_SQL);
    }
    if w.bucket.is_some() {
        sql.push_str(rate_buckets::STORE_SQL);
    }
    if w.prune_before.is_some() {
        sql.push_str(PRUNE_SQL);
    }
    sql.push_str("COMMIT");
    let (tokens, updated_ms, cooldown_until_ms) = w.bucket.as_ref().map_or((0.0, 0, 0), |b| {
        (b.tokens, b.updated_ms, b.cooldown_until_ms)
    });
    // Only fixed statements, every value bound.
    let ids: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(plan.session)
        .bind(plan.server_id)
        .bind(&call.tool)
        .bind(&call.category)
        .bind(w.now_ms)
        .bind(&call.outcome)
        .bind(&call.detail)
        .bind(tokens)
        .bind(updated_ms)
        .bind(cooldown_until_ms)
        .bind(w.prune_before.unwrap_or(0))
        .fetch_all(&mut *conn)
        .await?;
    let recorded = match (w.record, ids.first()) {
        (true, Some(&id)) => Some(CallId {
            id,
            time_ms: w.now_ms,
        }),
        (true, None) => return Err(StoreError::Invalid("the call was not recorded")),
        (false, _) => None,
    };
    Ok(CheckOutcome { decision, recorded })
}

impl Store {
    /// Checks a call against the session's recent calls and records it, in
    /// one `BEGIN IMMEDIATE` transaction: no other process can record a call
    /// of any session between the snapshot `decide` sees and the write of its
    /// decision. `decide` must be pure and quick (it runs holding the write
    /// lock). Past the busy budget: [`StoreError::Busy`], nothing written.
    /// Loads every result and every bucket of the session; see
    /// [`Store::check_call`] for the lean form.
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
        let check = CallCheck {
            session,
            now_ms,
            window_ms,
            clock: None,
            load: WindowLoad::All,
            exposing: None,
        };
        self.check_call(check, call, decide).await
    }

    /// [`Store::check_and_record_call`] with a choice of what `decide` sees
    /// ([`WindowLoad`]): one read statement, then only the writes the
    /// decision asks for.
    pub async fn check_call<V, F>(
        &self,
        check: CallCheck<'_>,
        call: NewCall,
        decide: F,
    ) -> Result<CheckOutcome<V>>
    where
        F: FnOnce(&WindowSnapshot) -> CallDecision<V> + Send,
        V: Send,
    {
        let session = check.session;
        if session.is_empty() || call.server_id.is_empty() {
            return Err(StoreError::Invalid("call needs a session and a server id"));
        }
        if check.window_ms <= 0 {
            return Err(StoreError::Invalid("window must be positive"));
        }
        let mut gate = self.write_gate().await;
        // A process checks calls of one session or a few (wrap: one).
        if gate.windows.len() >= MAX_LOADED_SESSIONS && !gate.windows.contains_key(session) {
            gate.windows.clear();
        }
        let mut loaded = gate.windows.remove(session).unwrap_or_default();
        let mut conn = self.pool().acquire().await?;
        // The write lock is taken by the statement batch that also reads the
        // snapshot, and released by the one that writes the decision: held
        // across one hop to sqlx's worker thread and back instead of three
        // (with several wrap processes calling at once, each hop is a
        // scheduler wake-up the others wait behind).
        let outcome = check_locked(&mut conn, &mut loaded, check, call, decide).await;
        if outcome.is_err() {
            // Whatever failed, the transaction must not outlive this call,
            // and what was loaded is loaded again next time.
            if sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
                conn.close_on_drop();
            }
        } else {
            gate.windows.insert(session.to_owned(), loaded);
        }
        outcome
    }

    /// Replaces the tool names `server_id` exposes in `session` (shadowing).
    pub async fn set_session_tools(
        &self,
        session: &str,
        server_id: &str,
        pin_server_id: &str,
        command_hash: &str,
        names: &[&str],
        now_ms: i64,
    ) -> Result<()> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("DELETE FROM session_tools WHERE session = ? AND server_id = ?")
            .bind(session)
            .bind(server_id)
            .execute(&mut *tx)
            .await?;
        for name in names {
            sqlx::query(
                "INSERT OR REPLACE INTO session_tools \
                 (session, name, server_id, pin_server_id, command_hash, updated_ms) \
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(session)
            .bind(name)
            .bind(server_id)
            .bind(pin_server_id)
            .bind(command_hash)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Deletes session tool rows not refreshed since `before_ms` (sessions
    /// whose wrap processes died without leaving).
    pub async fn prune_session_tools(&self, before_ms: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM session_tools WHERE updated_ms < ?")
            .bind(before_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// Adds taint material to a recorded call once its result arrived. False
    /// when the call is no longer in the window.
    pub async fn attach_result(&self, call: CallId, result: &[u8]) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE call_window SET result = ?, seq = (SELECT value + 1 FROM call_seq WHERE id = 1) \
             WHERE id = ? AND time_ms = ?",
        )
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::test_support::{mem, patient, TempHome};

    fn call(server: &str, tool: &str, category: &str) -> NewCall {
        NewCall {
            server_id: server.into(),
            tool: tool.into(),
            category: category.into(),
            outcome: "allow".into(),
            detail: Some(vec![1, 2, 3]),
        }
    }

    /// The "max N allowed in the window" rule the concurrency tests use.
    fn at_most(n: usize) -> impl FnOnce(&WindowSnapshot) -> CallDecision<bool> + Send {
        move |snapshot: &WindowSnapshot| {
            if snapshot.entries.len() < n {
                CallDecision::allow(true)
            } else {
                CallDecision::deny(false)
            }
        }
    }

    async fn total_changes(store: &Store) -> i64 {
        sqlx::query_scalar("SELECT total_changes()")
            .fetch_one(store.pool())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn snapshot_decision_and_record() {
        let store = mem().await;
        let first = store
            .check_and_record_call(
                "s1",
                1000,
                30_000,
                call("fs", "read_file", "read"),
                |snap| {
                    assert!(snap.entries.is_empty() && snap.buckets.is_empty());
                    assert_eq!(
                        (snap.session.as_str(), snap.now_ms, snap.window_start_ms),
                        ("s1", 1000, -29_000)
                    );
                    CallDecision::allow("ok")
                },
            )
            .await
            .unwrap();
        let first_id = first.recorded.expect("allowed calls are recorded");
        assert_eq!(first.decision.verdict, "ok");
        assert!(store.attach_result(first_id, b"taint").await.unwrap());
        assert!(
            !store
                .attach_result(
                    CallId {
                        id: first_id.id,
                        time_ms: 1
                    },
                    b"x"
                )
                .await
                .unwrap(),
            "a call id with another time is a different call"
        );

        let bucket = BucketState {
            tokens: 19.0,
            updated_ms: 2000,
            cooldown_until_ms: 0,
        };
        let denied = store
            .check_and_record_call(
                "s1",
                2000,
                30_000,
                call("mail", "send_email", "send"),
                |snap| {
                    let earlier: Vec<_> = snap.other_servers("mail").collect();
                    assert_eq!(earlier.len(), 1, "the read of another server is visible");
                    assert_eq!(earlier[0].tool, "read_file");
                    assert_eq!(earlier[0].detail.as_deref(), Some(&[1u8, 2, 3][..]));
                    assert_eq!(
                        earlier[0].result.as_deref(),
                        Some(&b"taint"[..]),
                        "attached result visible"
                    );
                    CallDecision::deny("blocked").with_bucket(bucket)
                },
            )
            .await
            .unwrap();
        assert_eq!(denied.recorded, None, "a blocked call is not recorded");
        store
            .check_and_record_call(
                "s1",
                3000,
                30_000,
                call("mail", "send_email", "send"),
                |snap| {
                    assert_eq!(snap.entries.len(), 1, "the blocked call left no entry");
                    assert_eq!(snap.bucket("mail"), Some(&bucket), "the bucket was stored");
                    assert_eq!(snap.bucket("fs"), None);
                    CallDecision::allow(())
                },
            )
            .await
            .unwrap();
        // Other sessions are invisible.
        store
            .check_and_record_call(
                "s2",
                3000,
                30_000,
                call("fs", "read_file", "read"),
                |snap| {
                    assert!(
                        snap.entries.is_empty() && snap.buckets.is_empty(),
                        "sessions are isolated"
                    );
                    CallDecision::allow(())
                },
            )
            .await
            .unwrap();
        assert_eq!(store.window_entries("s1", 0).await.unwrap().len(), 2);
        assert_eq!(store.window_entries("s1", 2500).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn one_server_session_writes_one_row() {
        let store = mem().await; // one pooled connection: total_changes() sees every write
        for now in [1000, 1100, 1200] {
            let before = total_changes(&store).await;
            store
                .check_and_record_call("s", now, 30_000, call("only", "read", "read"), |_| {
                    CallDecision::allow(())
                })
                .await
                .unwrap();
            assert_eq!(
                total_changes(&store).await - before,
                2,
                "one call row per allowed call, and the window's change counter"
            );
        }
        let before = total_changes(&store).await;
        store
            .check_and_record_call("s", 1300, 30_000, call("only", "read", "read"), |_| {
                CallDecision::deny(())
            })
            .await
            .unwrap();
        assert_eq!(
            total_changes(&store).await,
            before,
            "a blocked call without a bucket writes nothing"
        );
    }

    #[tokio::test]
    async fn window_prunes_as_it_goes() {
        let store = mem().await;
        let allow = |_: &WindowSnapshot| CallDecision::allow(());
        let rows = |store: Store| async move {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM call_window")
                .fetch_one(store.pool())
                .await
                .unwrap()
        };
        store
            .check_and_record_call("s", 0, 1000, call("a", "t", "read"), allow)
            .await
            .unwrap();
        store
            .check_and_record_call("s", 900, 1000, call("a", "t", "read"), allow)
            .await
            .unwrap();
        store
            .check_and_record_call("s", 1500, 1000, call("a", "t", "read"), |snap| {
                assert_eq!(snap.entries.len(), 1, "the call at 0 is outside the window");
                CallDecision::allow(())
            })
            .await
            .unwrap();
        assert_eq!(
            rows(store.clone()).await,
            3,
            "not pruned before the oldest row is 2 windows old"
        );
        store
            .check_and_record_call("s", 2100, 1000, call("a", "t", "read"), allow)
            .await
            .unwrap();
        assert_eq!(
            rows(store.clone()).await,
            2,
            "rows before 1100 pruned (0 and 900), one added"
        );
        store
            .check_and_record_call("x", 9000, 1000, call("a", "t", "read"), allow)
            .await
            .unwrap();
        assert_eq!(
            store.prune_call_window(5000).await.unwrap(),
            2,
            "the sweep removes dead sessions"
        );
        assert_eq!(rows(store.clone()).await, 1);
    }

    #[tokio::test]
    async fn buckets_are_swept_and_validated() {
        let store = mem().await;
        let bucket = |tokens: f64, updated_ms: i64, cooldown_until_ms: i64| BucketState {
            tokens,
            updated_ms,
            cooldown_until_ms,
        };
        store
            .check_and_record_call("s", 100, 1000, call("a", "t", "read"), move |_| {
                CallDecision::deny(()).with_bucket(bucket(0.0, 100, 10_000))
            })
            .await
            .unwrap();
        store
            .check_and_record_call("s", 100, 1000, call("b", "t", "read"), move |_| {
                CallDecision::allow(()).with_bucket(bucket(5.0, 100, 0))
            })
            .await
            .unwrap();
        assert_eq!(
            store.prune_rate_buckets(5000).await.unwrap(),
            1,
            "b is idle; a is cooling down"
        );
        assert_eq!(store.prune_rate_buckets(20_000).await.unwrap(), 1);
        let bad = store
            .check_and_record_call("s", 100, 1000, call("a", "t", "read"), move |_| {
                CallDecision::allow(()).with_bucket(bucket(f64::NAN, 100, 0))
            })
            .await;
        assert!(matches!(bad, Err(StoreError::Invalid(_))));
        assert!(
            store.window_entries("s", 0).await.unwrap().len() == 1,
            "the failed call rolled back"
        );
        sqlx::query("INSERT INTO rate_buckets VALUES ('s', 'z', -1.0, 0, 0)")
            .execute(store.pool())
            .await
            .unwrap();
        let corrupt = store
            .check_and_record_call("s", 100, 1000, call("a", "t", "read"), |_| {
                CallDecision::allow(())
            })
            .await;
        assert!(
            matches!(corrupt, Err(StoreError::CorruptRow { .. })),
            "negative tokens are corrupt"
        );
        assert!(matches!(
            store
                .check_and_record_call("", 1, 1, call("a", "t", "r"), |_| CallDecision::allow(()))
                .await,
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            store
                .check_and_record_call("s", 1, 0, call("a", "t", "r"), |_| CallDecision::allow(()))
                .await,
            Err(StoreError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn maintenance_runs_every_prune() {
        let store = mem().await;
        store
            .check_and_record_call("s", 0, 1000, call("a", "t", "read"), |_| {
                CallDecision::allow(())
            })
            .await
            .unwrap();
        let report = store
            .run_maintenance(24 * 60 * 60 * 1000, &crate::MaintenancePolicy::default())
            .await
            .unwrap();
        assert_eq!(report.calls, 1);
    }

    /// K tasks, each with its own store (its own connections, as separate
    /// processes would have), race to record calls against "at most N".
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_tasks_record_exactly_n() {
        const K: usize = 8;
        const N: usize = 3;
        let tmp = TempHome::new();
        let mut stores = Vec::new();
        for _ in 0..K {
            stores.push(tmp.open_with(patient()).await);
        }
        for round in 0..100 {
            let session = format!("round-{round}");
            let barrier = Arc::new(tokio::sync::Barrier::new(K));
            let mut tasks = Vec::new();
            for (k, store) in stores.iter().enumerate() {
                let (store, barrier, session) = (store.clone(), barrier.clone(), session.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let server = format!("srv{}", k % 3);
                    store
                        .check_and_record_call(
                            &session,
                            1000,
                            30_000,
                            call(&server, "t", "read"),
                            at_most(N),
                        )
                        .await
                        .expect("patient stores wait out the contention")
                }));
            }
            let mut allowed = 0;
            for task in tasks {
                let outcome = task.await.unwrap();
                assert_eq!(outcome.decision.record, outcome.recorded.is_some());
                allowed += usize::from(outcome.decision.verdict);
            }
            let recorded = stores[0].window_entries(&session, 0).await.unwrap().len();
            assert_eq!(
                (allowed, recorded),
                (N, N),
                "round {round}: exactly N allowed and recorded"
            );
        }
    }

    #[tokio::test]
    async fn a_check_loads_only_what_changed_and_sees_every_change() {
        // Two processes' stores on one database.
        let tmp = TempHome::new();
        let (a, b) = (tmp.open().await, tmp.open().await);
        let all = |now_ms| CallCheck {
            session: "s",
            now_ms,
            clock: None,
            window_ms: 1_000,
            load: WindowLoad::All,
            exposing: None,
        };
        let seen = |snap: &WindowSnapshot| -> Vec<(String, Option<Vec<u8>>)> {
            snap.entries
                .iter()
                .map(|e| (e.tool.clone(), e.result.clone()))
                .collect()
        };
        let peek = |store: &Store, now_ms| {
            let store = store.clone();
            async move {
                let mut got = Vec::new();
                store
                    .check_call(all(now_ms), call("a", "peek", "compute"), |snap| {
                        got = seen(snap);
                        CallDecision::deny(())
                    })
                    .await
                    .unwrap();
                got
            }
        };
        assert!(peek(&a, 100).await.is_empty());
        let read = b
            .check_call(all(200), call("b", "read_notes", "read"), |_| {
                CallDecision::allow(())
            })
            .await
            .unwrap()
            .recorded
            .unwrap();
        assert_eq!(peek(&a, 300).await, [("read_notes".into(), None)]);
        // A result attached later is a change too: loaded again, replacing.
        b.attach_result(read, b"marks").await.unwrap();
        assert_eq!(
            peek(&a, 400).await,
            [("read_notes".into(), Some(b"marks".to_vec()))]
        );
        // A later call is added to what was loaded, not instead of it.
        b.check_call(all(500), call("b", "send", "send"), |_| {
            CallDecision::allow(())
        })
        .await
        .unwrap();
        assert_eq!(
            peek(&a, 600).await,
            [
                ("read_notes".into(), Some(b"marks".to_vec())),
                ("send".into(), None)
            ]
        );
        // Out of the window, out of the snapshot (and out of memory).
        assert_eq!(peek(&a, 1_300).await, [("send".into(), None)]);
        assert!(peek(&a, 2_000).await.is_empty());
        // The session went quiet and was pruned; new calls are seen.
        b.prune_call_window(i64::MAX).await.unwrap();
        b.check_call(all(5_000), call("b", "late", "read"), |_| {
            CallDecision::allow(())
        })
        .await
        .unwrap();
        assert_eq!(peek(&a, 5_100).await, [("late".into(), None)]);
    }

    #[tokio::test]
    async fn lean_check_loads_what_it_is_asked_for() {
        let store = mem().await;
        let allow = |_: &WindowSnapshot| CallDecision::allow(());
        let read = store
            .check_and_record_call("s", 1000, 30_000, call("fs", "read_file", "read"), allow)
            .await
            .unwrap()
            .recorded
            .unwrap();
        store.attach_result(read, b"marks-fs").await.unwrap();
        let own = store
            .check_and_record_call("s", 1100, 30_000, call("mail", "list_mail", "read"), allow)
            .await
            .unwrap()
            .recorded
            .unwrap();
        store.attach_result(own, b"marks-mail").await.unwrap();
        store
            .set_session_tools(
                "s",
                "fs",
                "fs",
                "sha256:aa",
                &["send_email", "read_file"],
                900,
            )
            .await
            .unwrap();
        store
            .set_session_tools("s", "mail", "mail", "sha256:bb", &["send_email"], 950)
            .await
            .unwrap();
        store
            .set_session_tools("other", "x", "x", "sha256:cc", &["send_email"], 950)
            .await
            .unwrap();
        let check = |load, exposing| CallCheck {
            session: "s",
            now_ms: 2000,
            clock: None,
            window_ms: 30_000,
            load,
            exposing,
        };
        let lean = |other: Option<i64>, own: Option<i64>| WindowLoad::Lean {
            other_reads_ms: other,
            own_ms: own,
        };
        store
            .check_call(
                check(lean(Some(30_000), Some(30_000)), Some("send_email")),
                call("mail", "send_email", "send"),
                |snap| {
                    let results: Vec<_> = snap.entries.iter().map(|e| e.result.clone()).collect();
                    assert_eq!(
                        results,
                        [Some(b"marks-fs".to_vec()), Some(b"marks-mail".to_vec())],
                        "the other server's read and the caller's own call"
                    );
                    let mut ids: Vec<_> =
                        snap.exposing.iter().map(|e| e.server_id.as_str()).collect();
                    ids.sort_unstable();
                    assert_eq!(
                        ids,
                        ["fs", "mail"],
                        "both servers of this session, not the other"
                    );
                    let mut ages: Vec<_> = snap
                        .exposing
                        .iter()
                        .map(|e| (e.server_id.as_str(), e.pinned_at_ms))
                        .collect();
                    ages.sort_unstable();
                    assert_eq!(
                        ages,
                        [("fs", Some(900)), ("mail", Some(950))],
                        "no pins yet: each as old as its exposure"
                    );
                    CallDecision::deny(())
                },
            )
            .await
            .unwrap();
        store
            .check_call(
                check(lean(Some(30_000), None), None),
                call("mail", "x", "read"),
                |snap| {
                    let ids: Vec<_> = snap.entries.iter().map(|e| e.server_id.as_str()).collect();
                    assert_eq!(ids, ["fs"], "other servers' reads only, not own calls");
                    assert!(snap.exposing.is_empty(), "not asked for");
                    CallDecision::deny(())
                },
            )
            .await
            .unwrap();
        store
            .check_call(
                check(lean(Some(500), Some(30_000)), None),
                call("mail", "x", "read"),
                |snap| {
                    let ids: Vec<_> = snap.entries.iter().map(|e| e.server_id.as_str()).collect();
                    assert_eq!(ids, ["mail"], "fs read is older than the look-back");
                    CallDecision::deny(())
                },
            )
            .await
            .unwrap();
        store
            .set_session_tools("s", "fs", "fs", "sha256:aa", &["read_file"], 1000)
            .await
            .unwrap();
        store
            .check_call(
                check(lean(None, None), Some("send_email")),
                call("mail", "send_email", "send"),
                |snap| {
                    assert_eq!(snap.exposing.len(), 1, "fs listed again without send_email");
                    CallDecision::deny(())
                },
            )
            .await
            .unwrap();
        assert_eq!(store.prune_session_tools(1001).await.unwrap(), 3);
    }

    const CHILD_ENV: &str = "GATEHOUSE_STORE_TEST_CHILD";

    /// Not a test on its own: the body of one child process of
    /// `concurrent_processes_record_exactly_n` (a no-op without its env).
    #[tokio::test]
    async fn child_process_worker() {
        let Ok(spec) = std::env::var(CHILD_ENV) else {
            return;
        };
        let parts: Vec<&str> = spec.split('\n').collect();
        let [home, session, dir, k, n] = parts[..] else {
            panic!("bad child spec");
        };
        let dir = PathBuf::from(dir);
        let store = Store::open(Path::new(home), patient()).await.unwrap();
        std::fs::write(dir.join(format!("ready-{k}")), b"").unwrap();
        let go = dir.join("go");
        for _ in 0..30_000 {
            if go.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let n: usize = n.parse().unwrap();
        let outcome = store
            .check_and_record_call(
                session,
                1000,
                30_000,
                call(&format!("srv{k}"), "t", "read"),
                at_most(n),
            )
            .await
            .unwrap();
        std::fs::write(
            dir.join(format!("result-{k}")),
            if outcome.decision.verdict { "1" } else { "0" },
        )
        .unwrap();
    }

    /// K real processes released together against one database file.
    #[tokio::test]
    async fn concurrent_processes_record_exactly_n() {
        const K: usize = 6;
        const N: usize = 2;
        const ROUNDS: usize = 20;
        let tmp = TempHome::new();
        let store = tmp.open().await;
        let exe = std::env::current_exe().unwrap();
        for round in 0..ROUNDS {
            let dir = tempfile::tempdir().unwrap();
            let session = format!("proc-round-{round}");
            let mut children = Vec::new();
            for k in 0..K {
                let spec = format!(
                    "{}\n{session}\n{}\n{k}\n{N}",
                    tmp.home().display(),
                    dir.path().display()
                );
                children.push(
                    std::process::Command::new(&exe)
                        .args([
                            "--exact",
                            "calls::tests::child_process_worker",
                            "--test-threads=1",
                            "-q",
                        ])
                        .env(CHILD_ENV, spec)
                        .stdout(std::process::Stdio::null())
                        .spawn()
                        .unwrap(),
                );
            }
            let ready = |k: usize| dir.path().join(format!("ready-{k}")).exists();
            for _ in 0..60_000 {
                if (0..K).all(ready) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert!((0..K).all(ready), "round {round}: children did not start");
            std::fs::write(dir.path().join("go"), b"").unwrap();
            for mut child in children {
                assert!(
                    child.wait().unwrap().success(),
                    "round {round}: a child failed"
                );
            }
            let allowed: usize = (0..K)
                .map(|k| std::fs::read_to_string(dir.path().join(format!("result-{k}"))).unwrap())
                .filter(|r| r == "1")
                .count();
            let recorded = store.window_entries(&session, 0).await.unwrap().len();
            assert_eq!(
                (allowed, recorded),
                (N, N),
                "round {round}: exactly N across processes"
            );
        }
    }
}

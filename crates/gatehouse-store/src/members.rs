//! `session_members`: the wrap processes of each client session, so a
//! process alone in its session can keep its calls in memory and still hand
//! them over, before they matter, when another process joins.
//!
//! The join protocol: a joiner inserts its row (its id orders it after
//! every earlier member) and reads the other members in the same
//! transaction. Each earlier member, on noticing the join, writes its recent
//! calls to `call_window` and raises its `synced_id` to the joiner's id in
//! one transaction ([`Store::sync_session_calls`]). The joiner checks its
//! first call only once [`Store::unsynced_members`] is empty.

use crate::calls::{load_entries, CallId, WindowEntry};
use crate::db::Store;
use crate::error::Result;
use crate::rate_buckets::{self, BucketState};

/// One wrap process of a session.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionMember {
    pub id: i64,
    pub server_id: String,
    pub pid: i64,
    /// The highest member id this member has synced its calls for.
    pub synced_id: i64,
}

/// A call kept in memory by a process alone in its session, written out
/// when another process joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCall {
    pub tool: String,
    pub category: String,
    pub time_ms: i64,
    pub outcome: String,
    /// Taint material of its result, when it arrived.
    pub result: Option<Vec<u8>>,
}

impl Store {
    /// Adds this process to `session`; returns its member id and the other
    /// members (read in the same transaction).
    pub async fn join_session(
        &self,
        session: &str,
        server_id: &str,
        pid: u32,
        now_ms: i64,
    ) -> Result<(i64, Vec<SessionMember>)> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO session_members (session, server_id, pid, joined_ms, synced_id) \
             VALUES (?, ?, ?, ?, 0) RETURNING id",
        )
        .bind(session)
        .bind(server_id)
        .bind(i64::from(pid))
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await?;
        let others = sqlx::query_as(
            "SELECT id, server_id, pid, synced_id FROM session_members \
             WHERE session = ? AND id != ? ORDER BY id",
        )
        .bind(session)
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((id, others))
    }

    /// Every member of `session`, in join order.
    pub async fn session_members(&self, session: &str) -> Result<Vec<SessionMember>> {
        Ok(sqlx::query_as(
            "SELECT id, server_id, pid, synced_id FROM session_members \
             WHERE session = ? ORDER BY id",
        )
        .bind(session)
        .fetch_all(self.pool())
        .await?)
    }

    /// Removes members (this process leaving, or processes found dead).
    pub async fn remove_members(&self, ids: &[i64]) -> Result<()> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin().await?;
        for id in ids {
            sqlx::query("DELETE FROM session_members WHERE id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Members of `session` joined before `member` that have not yet synced
    /// for it (the joiner waits for these before checking a call).
    pub async fn unsynced_members(&self, session: &str, member: i64) -> Result<Vec<SessionMember>> {
        Ok(sqlx::query_as(
            "SELECT id, server_id, pid, synced_id FROM session_members \
             WHERE session = ? AND id < ? AND synced_id < ? ORDER BY id",
        )
        .bind(session)
        .bind(member)
        .bind(member)
        .fetch_all(self.pool())
        .await?)
    }

    /// Writes a member's in-memory calls (and its burst cool-down) to the
    /// session's window and marks it synced up to `synced_id`, in one
    /// transaction. Returns the recorded calls' ids, in order.
    pub async fn sync_session_calls(
        &self,
        session: &str,
        member: i64,
        server_id: &str,
        synced_id: i64,
        calls: &[LocalCall],
        bucket: Option<&BucketState>,
    ) -> Result<Vec<CallId>> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let ids = write_calls(&mut tx, session, server_id, calls, bucket).await?;
        sqlx::query("UPDATE session_members SET synced_id = MAX(synced_id, ?) WHERE id = ?")
            .bind(synced_id)
            .bind(member)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// Writes calls that were relayed unchecked while the database could
    /// not be reached (DESIGN §8: recorded later), with their results'
    /// taint marks, in one transaction.
    pub async fn record_late_calls(
        &self,
        session: &str,
        server_id: &str,
        calls: &[LocalCall],
    ) -> Result<()> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        write_calls(&mut tx, session, server_id, calls, None).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A member alone in its session leaves: its in-memory calls and its
    /// limiter state (cool-down) are written to the session's window and its
    /// row removed, in one transaction, so a wrap of the session started
    /// later — the same server restarted, or another — judges against them
    /// (bursts, rate limits and reads outlive the process within their
    /// window).
    pub async fn leave_session(
        &self,
        session: &str,
        member: i64,
        server_id: &str,
        calls: &[LocalCall],
        bucket: Option<&BucketState>,
    ) -> Result<()> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        write_calls(&mut tx, session, server_id, calls, bucket).await?;
        sqlx::query("DELETE FROM session_members WHERE id = ?")
            .bind(member)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// What a wrap that is (again) alone in its session judges against:
    /// the session's calls since `since_ms` (oldest first, with their
    /// results' taint marks) and `server_id`'s stored limiter state. One
    /// read transaction.
    pub async fn session_state(
        &self,
        session: &str,
        server_id: &str,
        since_ms: i64,
    ) -> Result<(Vec<WindowEntry>, Option<BucketState>)> {
        let mut tx = self.pool().begin().await?;
        let entries = load_entries(&mut tx, session, since_ms).await?;
        let bucket = rate_buckets::load(&mut tx, session, server_id).await?;
        tx.commit().await?;
        Ok((entries, bucket))
    }
}

/// Inserts a member's in-memory calls and its bucket.
async fn write_calls(
    conn: &mut sqlx::SqliteConnection,
    session: &str,
    server_id: &str,
    calls: &[LocalCall],
    bucket: Option<&BucketState>,
) -> Result<Vec<CallId>> {
    let mut ids = Vec::with_capacity(calls.len());
    for call in calls {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO call_window (session, server_id, tool, category, time_ms, outcome, result) \
             VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(session)
        .bind(server_id)
        .bind(&call.tool)
        .bind(&call.category)
        .bind(call.time_ms)
        .bind(&call.outcome)
        .bind(&call.result)
        .fetch_one(&mut *conn)
        .await?;
        ids.push(CallId {
            id,
            time_ms: call.time_ms,
        });
    }
    if let Some(bucket) = bucket {
        rate_buckets::store(conn, session, server_id, bucket).await?;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::mem;
    use crate::{CallCheck, CallDecision, NewCall, WindowLoad};

    #[tokio::test]
    async fn join_sync_and_leave() {
        let store = mem().await;
        let (a, others) = store.join_session("s", "fs", 10, 1000).await.unwrap();
        assert!(others.is_empty(), "first member is alone");
        let (other_session, _) = store.join_session("t", "x", 12, 1000).await.unwrap();
        let (b, others) = store.join_session("s", "mail", 11, 1100).await.unwrap();
        assert!(b > a && b > other_session);
        assert_eq!(others.len(), 1, "only this session's members");
        assert_eq!(others[0].server_id, "fs");
        assert_eq!(
            store.unsynced_members("s", b).await.unwrap().len(),
            1,
            "fs has not synced for mail yet"
        );

        let calls = [LocalCall {
            tool: "read_file".into(),
            category: "read".into(),
            time_ms: 1050,
            outcome: "allow".into(),
            result: Some(b"marks".to_vec()),
        }];
        let cooling = BucketState {
            tokens: 0.0,
            updated_ms: 1050,
            cooldown_until_ms: 9000,
        };
        let ids = store
            .sync_session_calls("s", a, "fs", b, &calls, Some(&cooling))
            .await
            .unwrap();
        assert_eq!(ids.len(), 1);
        assert!(store.unsynced_members("s", b).await.unwrap().is_empty());

        // The joiner's check sees the synced read with its marks, and the
        // synced member's cool-down holds in the store.
        let check = CallCheck {
            session: "s",
            now_ms: 1200,
            clock: None,
            window_ms: 30_000,
            load: WindowLoad::All,
            exposing: None,
        };
        let call = NewCall {
            server_id: "mail".into(),
            tool: "send".into(),
            category: "send".into(),
            ..NewCall::default()
        };
        store
            .check_call(check, call, |snap| {
                assert_eq!(snap.entries.len(), 1);
                assert_eq!(snap.entries[0].result.as_deref(), Some(&b"marks"[..]));
                assert_eq!(snap.bucket("fs"), Some(&cooling));
                CallDecision::deny(())
            })
            .await
            .unwrap();

        store.remove_members(&[a]).await.unwrap();
        let left = store.session_members("s").await.unwrap();
        assert_eq!(left.iter().map(|m| m.id).collect::<Vec<_>>(), [b]);
    }
}

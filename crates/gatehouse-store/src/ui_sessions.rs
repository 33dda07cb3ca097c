//! `ui_sessions`: control-plane sign-in sessions. Only a hash of each token
//! is stored; the token itself never reaches the database.

use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::util::non_negative;

/// A sign-in session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiSession {
    pub id: String,
    pub token_hash: Vec<u8>,
    /// What the person sees in the session list (e.g. the browser).
    pub label: Option<String>,
    pub created_ms: i64,
    pub last_seen_ms: i64,
    pub revoked_ms: Option<i64>,
}

impl UiSession {
    /// Not revoked.
    pub fn is_active(&self) -> bool {
        self.revoked_ms.is_none()
    }
}

#[derive(sqlx::FromRow)]
struct UiSessionRow {
    id: String,
    token_hash: Vec<u8>,
    label: Option<String>,
    created_ms: i64,
    last_seen_ms: i64,
    revoked_ms: Option<i64>,
}

impl TryFrom<UiSessionRow> for UiSession {
    type Error = StoreError;

    fn try_from(row: UiSessionRow) -> Result<Self> {
        Ok(UiSession {
            id: row.id,
            token_hash: row.token_hash,
            label: row.label,
            created_ms: non_negative("ui_sessions", "created_ms", row.created_ms)?,
            last_seen_ms: non_negative("ui_sessions", "last_seen_ms", row.last_seen_ms)?,
            revoked_ms: row.revoked_ms,
        })
    }
}

macro_rules! session_columns {
    () => {
        "id, token_hash, label, created_ms, last_seen_ms, revoked_ms"
    };
}

impl Store {
    /// Records a new session.
    pub async fn create_ui_session(
        &self,
        id: &str,
        token_hash: &[u8],
        label: Option<&str>,
        now_ms: i64,
    ) -> Result<()> {
        if id.is_empty() || token_hash.len() < 16 {
            return Err(StoreError::Invalid(
                "session needs an id and a token hash of 16+ bytes",
            ));
        }
        sqlx::query(
            "INSERT INTO ui_sessions (id, token_hash, label, created_ms, last_seen_ms) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(token_hash)
        .bind(label)
        .bind(now_ms)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The active (not revoked) session holding `token_hash`, touching its
    /// `last_seen_ms`.
    pub async fn authenticate_ui_session(
        &self,
        token_hash: &[u8],
        now_ms: i64,
    ) -> Result<Option<UiSession>> {
        let row: Option<UiSessionRow> = sqlx::query_as(concat!(
            "UPDATE ui_sessions SET last_seen_ms = MAX(last_seen_ms, ?) \
             WHERE token_hash = ? AND revoked_ms IS NULL RETURNING ",
            session_columns!()
        ))
        .bind(now_ms)
        .bind(token_hash)
        .fetch_optional(self.pool())
        .await?;
        row.map(UiSession::try_from).transpose()
    }

    /// Every session, newest first.
    pub async fn list_ui_sessions(&self) -> Result<Vec<UiSession>> {
        let rows: Vec<UiSessionRow> = sqlx::query_as(concat!(
            "SELECT ",
            session_columns!(),
            " FROM ui_sessions ORDER BY created_ms DESC, id"
        ))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(UiSession::try_from).collect()
    }

    /// Revokes a session; false when unknown or already revoked.
    pub async fn revoke_ui_session(&self, id: &str, now_ms: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE ui_sessions SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL",
        )
        .bind(now_ms)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes sessions revoked, or idle, since before `before_ms`.
    pub async fn prune_ui_sessions(&self, before_ms: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM ui_sessions WHERE (revoked_ms IS NOT NULL AND revoked_ms < ?1) \
                OR last_seen_ms < ?1",
        )
        .bind(before_ms)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::mem;

    #[tokio::test]
    async fn sign_in_sessions() {
        let store = mem().await;
        let hash_a = [1u8; 32];
        let hash_b = [2u8; 32];
        store
            .create_ui_session("a", &hash_a, Some("Firefox"), 10)
            .await
            .unwrap();
        store
            .create_ui_session("b", &hash_b, None, 20)
            .await
            .unwrap();
        assert!(
            store
                .create_ui_session("c", &hash_a, None, 30)
                .await
                .is_err(),
            "a token hash belongs to one session"
        );
        assert!(matches!(
            store.create_ui_session("d", &[1, 2], None, 1).await,
            Err(StoreError::Invalid(_))
        ));

        let session = store
            .authenticate_ui_session(&hash_a, 50)
            .await
            .unwrap()
            .expect("active");
        assert_eq!((session.id.as_str(), session.last_seen_ms), ("a", 50));
        assert_eq!(session.label.as_deref(), Some("Firefox"));
        assert!(store
            .authenticate_ui_session(&[9u8; 32], 50)
            .await
            .unwrap()
            .is_none());

        assert!(store.revoke_ui_session("a", 60).await.unwrap());
        assert!(
            !store.revoke_ui_session("a", 61).await.unwrap(),
            "already revoked"
        );
        assert!(
            store
                .authenticate_ui_session(&hash_a, 70)
                .await
                .unwrap()
                .is_none(),
            "a revoked session must not authenticate"
        );
        let all = store.list_ui_sessions().await.unwrap();
        assert_eq!(
            all.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
        assert!(!all[1].is_active() && all[0].is_active());

        assert_eq!(
            store.prune_ui_sessions(45).await.unwrap(),
            1,
            "b idle since 20; a seen at 50"
        );
        assert_eq!(
            store.prune_ui_sessions(65).await.unwrap(),
            1,
            "a revoked at 60"
        );
        assert!(store.list_ui_sessions().await.unwrap().is_empty());
    }
}

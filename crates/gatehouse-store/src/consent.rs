//! `consent_requests`: everything waiting on the person (changed and
//! quarantined tools, shadowing ties, input requests). An answer is stored
//! only sealed to the requester's public key: ciphertext, never plain text.

use sqlx::SqliteConnection;

use crate::db::Store;
use crate::error::{corrupt, Result, StoreError};
use crate::util::{check_json, non_negative};

/// What is being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsentKind {
    ChangedTool,
    QuarantinedTool,
    ShadowTie,
    Elicitation,
    /// A changed launch (`pinning.on_launch_change = "hold"`); payload
    /// `{fingerprint, launch}`.
    HeldLaunch,
    /// A package held as a likely typosquat; payload `{package, similar_to, similarity}`.
    HeldPackage,
}

impl ConsentKind {
    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsentKind::ChangedTool => "changed_tool",
            ConsentKind::QuarantinedTool => "quarantined_tool",
            ConsentKind::ShadowTie => "shadow_tie",
            ConsentKind::Elicitation => "elicitation",
            ConsentKind::HeldLaunch => "held_launch",
            ConsentKind::HeldPackage => "held_package",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "changed_tool" => Some(ConsentKind::ChangedTool),
            "quarantined_tool" => Some(ConsentKind::QuarantinedTool),
            "shadow_tie" => Some(ConsentKind::ShadowTie),
            "elicitation" => Some(ConsentKind::Elicitation),
            "held_launch" => Some(ConsentKind::HeldLaunch),
            "held_package" => Some(ConsentKind::HeldPackage),
            _ => None,
        }
    }
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsentState {
    Pending,
    Answered,
    Declined,
    Expired,
}

impl ConsentState {
    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsentState::Pending => "pending",
            ConsentState::Answered => "answered",
            ConsentState::Declined => "declined",
            ConsentState::Expired => "expired",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(ConsentState::Pending),
            "answered" => Some(ConsentState::Answered),
            "declined" => Some(ConsentState::Declined),
            "expired" => Some(ConsentState::Expired),
            _ => None,
        }
    }
}

/// A request to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewConsent {
    pub kind: ConsentKind,
    pub server_id: String,
    pub tool: Option<String>,
    /// What to show the person (JSON; redacted by the caller).
    pub payload_json: String,
    pub created_ms: i64,
    /// When the request is declined unanswered.
    pub expires_ms: Option<i64>,
    /// Public key the answer is sealed to (input requests).
    pub requester_key: Option<Vec<u8>>,
}

/// A stored request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsentRequest {
    pub id: i64,
    pub kind: ConsentKind,
    pub server_id: String,
    pub tool: Option<String>,
    pub payload_json: String,
    pub state: ConsentState,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    pub answered_ms: Option<i64>,
    /// Sealed answer (ciphertext); `None` once taken.
    pub sealed_answer: Option<Vec<u8>>,
    pub requester_key: Option<Vec<u8>>,
}

#[derive(sqlx::FromRow)]
struct ConsentRow {
    id: i64,
    kind: String,
    server_id: String,
    tool: Option<String>,
    payload: String,
    state: String,
    created_ms: i64,
    expires_ms: Option<i64>,
    answered_ms: Option<i64>,
    answer: Option<Vec<u8>>,
    requester_key: Option<Vec<u8>>,
}

macro_rules! consent_columns {
    () => {
        "id, kind, server_id, tool, payload, state, created_ms, expires_ms, answered_ms, answer, \
         requester_key"
    };
}

impl TryFrom<ConsentRow> for ConsentRequest {
    type Error = StoreError;

    fn try_from(row: ConsentRow) -> Result<Self> {
        let kind = ConsentKind::parse(&row.kind)
            .ok_or_else(|| corrupt("consent_requests", "unknown kind"))?;
        let state = ConsentState::parse(&row.state)
            .ok_or_else(|| corrupt("consent_requests", "unknown state"))?;
        check_json("consent_requests", "payload", &row.payload)?;
        if row.answer.is_some() && state != ConsentState::Answered {
            return Err(corrupt(
                "consent_requests",
                "answer on a request not answered",
            ));
        }
        Ok(ConsentRequest {
            id: row.id,
            kind,
            server_id: row.server_id,
            tool: row.tool,
            payload_json: row.payload,
            state,
            created_ms: non_negative("consent_requests", "created_ms", row.created_ms)?,
            expires_ms: row.expires_ms,
            answered_ms: row.answered_ms,
            sealed_answer: row.answer,
            requester_key: row.requester_key,
        })
    }
}

/// Asks the person about a tool waiting at `to_hash` (called by
/// [`Store::hold_tool`] in its transaction): once per server, tool and hash.
/// A pending request about another hash of the same tool is expired, since
/// that version no longer waits.
pub(crate) async fn ask_about_tool(
    conn: &mut SqliteConnection,
    kind: ConsentKind,
    server_id: &str,
    tool: &str,
    payload_json: &str,
    to_hash: &str,
    now_ms: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE consent_requests SET state = 'expired', answered_ms = ? \
         WHERE state = 'pending' AND kind IN ('changed_tool', 'quarantined_tool') \
           AND server_id = ? AND tool = ? \
           AND json_extract(payload, '$.to_hash') IS NOT ?",
    )
    .bind(now_ms)
    .bind(server_id)
    .bind(tool)
    .bind(to_hash)
    .execute(&mut *conn)
    .await?;
    let asked: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM consent_requests \
           WHERE state = 'pending' AND kind = ? AND server_id = ? AND tool = ? \
             AND json_extract(payload, '$.to_hash') = ?)",
    )
    .bind(kind.as_str())
    .bind(server_id)
    .bind(tool)
    .bind(to_hash)
    .fetch_one(&mut *conn)
    .await?;
    if !asked {
        sqlx::query(
            "INSERT INTO consent_requests (kind, server_id, tool, payload, state, created_ms) \
             VALUES (?, ?, ?, ?, 'pending', ?)",
        )
        .bind(kind.as_str())
        .bind(server_id)
        .bind(tool)
        .bind(payload_json)
        .bind(now_ms)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Settles the pending changed/quarantined-tool requests of one tool after a
/// pin decision, whichever route made it: `answered` after an approval,
/// `declined` after a rejection.
pub(crate) async fn settle_tool(
    conn: &mut SqliteConnection,
    server_id: &str,
    tool: &str,
    to: ConsentState,
    now_ms: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE consent_requests SET state = ?, answered_ms = ? \
         WHERE state = 'pending' AND kind IN ('changed_tool', 'quarantined_tool') \
           AND server_id = ? AND tool = ?",
    )
    .bind(to.as_str())
    .bind(now_ms)
    .bind(server_id)
    .bind(tool)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

impl Store {
    /// Creates a pending request; returns its id.
    pub async fn create_consent(&self, request: &NewConsent) -> Result<i64> {
        check_json("consent_requests", "payload", &request.payload_json)
            .map_err(|_| StoreError::Invalid("consent payload is not valid JSON"))?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO consent_requests (kind, server_id, tool, payload, state, created_ms, \
                                           expires_ms, requester_key) \
             VALUES (?, ?, ?, ?, 'pending', ?, ?, ?) RETURNING id",
        )
        .bind(request.kind.as_str())
        .bind(&request.server_id)
        .bind(&request.tool)
        .bind(&request.payload_json)
        .bind(request.created_ms)
        .bind(request.expires_ms)
        .bind(&request.requester_key)
        .fetch_one(self.pool())
        .await?;
        Ok(id)
    }

    /// Creates a pending request unless one of the same kind, server and
    /// payload is already pending (a held server asks once, not at every
    /// start); returns the pending request's id either way.
    pub async fn ask_once(&self, request: &NewConsent) -> Result<i64> {
        let existing: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM consent_requests WHERE state = 'pending' AND kind = ?              AND server_id = ? AND payload = ? ORDER BY id LIMIT 1",
        )
        .bind(request.kind.as_str())
        .bind(&request.server_id)
        .bind(&request.payload_json)
        .fetch_optional(self.pool())
        .await?;
        match existing {
            Some(id) => Ok(id),
            None => self.create_consent(request).await,
        }
    }

    /// Marks the pending requests of `kind` for `server_id` answered (the
    /// thing they asked about was approved elsewhere, e.g. the CLI);
    /// returns how many.
    pub async fn settle_consents(
        &self,
        kind: ConsentKind,
        server_id: &str,
        now_ms: i64,
    ) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE consent_requests SET state = 'answered', answered_ms = ?              WHERE state = 'pending' AND kind = ? AND server_id = ?",
        )
        .bind(now_ms)
        .bind(kind.as_str())
        .bind(server_id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// One request.
    pub async fn get_consent(&self, id: i64) -> Result<Option<ConsentRequest>> {
        let row: Option<ConsentRow> = sqlx::query_as(concat!(
            "SELECT ",
            consent_columns!(),
            " FROM consent_requests WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.map(ConsentRequest::try_from).transpose()
    }

    /// Requests in `state` (all states when `None`), oldest first.
    pub async fn list_consents(
        &self,
        state: Option<ConsentState>,
        limit: u32,
    ) -> Result<Vec<ConsentRequest>> {
        let rows: Vec<ConsentRow> = sqlx::query_as(concat!(
            "SELECT ",
            consent_columns!(),
            " FROM consent_requests WHERE (?1 IS NULL OR state = ?1) \
              ORDER BY created_ms, id LIMIT ?2"
        ))
        .bind(state.map(ConsentState::as_str))
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(ConsentRequest::try_from).collect()
    }

    /// Answers a pending request with a sealed answer. False when it was no
    /// longer pending (already answered, declined or expired).
    pub async fn answer_consent(&self, id: i64, sealed_answer: &[u8], now_ms: i64) -> Result<bool> {
        if sealed_answer.is_empty() {
            return Err(StoreError::Invalid("sealed answer is empty"));
        }
        let done = sqlx::query(
            "UPDATE consent_requests SET state = 'answered', answer = ?, answered_ms = ? \
             WHERE id = ? AND state = 'pending'",
        )
        .bind(sealed_answer)
        .bind(now_ms)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Hands the sealed answer to the waiting process once and erases it
    /// from the database. `None` when unanswered or already taken.
    pub async fn take_consent_answer(&self, id: i64) -> Result<Option<Vec<u8>>> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let answer: Option<Option<Vec<u8>>> = sqlx::query_scalar(
            "SELECT answer FROM consent_requests WHERE id = ? AND state = 'answered'",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(Some(answer)) = answer else {
            return Ok(None);
        };
        sqlx::query("UPDATE consent_requests SET answer = NULL WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(answer))
    }

    /// Declines a pending request. False when it was no longer pending.
    pub async fn decline_consent(&self, id: i64, now_ms: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE consent_requests SET state = 'declined', answered_ms = ? \
             WHERE id = ? AND state = 'pending'",
        )
        .bind(now_ms)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Marks pending requests past their expiry as expired; returns how many.
    pub async fn expire_consents(&self, now_ms: i64) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE consent_requests SET state = 'expired', answered_ms = ? \
             WHERE state = 'pending' AND expires_ms IS NOT NULL AND expires_ms <= ?",
        )
        .bind(now_ms)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes settled requests created before `before_ms`; returns how many.
    pub async fn prune_consents(&self, before_ms: i64) -> Result<u64> {
        let done =
            sqlx::query("DELETE FROM consent_requests WHERE state != 'pending' AND created_ms < ?")
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

    fn request(kind: ConsentKind, created_ms: i64, expires_ms: Option<i64>) -> NewConsent {
        NewConsent {
            kind,
            server_id: "srv".into(),
            tool: Some("ask".into()),
            payload_json: r#"{"message":"Server srv asks: your name?"}"#.into(),
            created_ms,
            expires_ms,
            requester_key: Some(vec![7; 32]),
        }
    }

    #[tokio::test]
    async fn lifecycle() {
        let store = mem().await;
        let ask = store
            .create_consent(&request(ConsentKind::Elicitation, 10, Some(1000)))
            .await
            .unwrap();
        let tool = store
            .create_consent(&request(ConsentKind::ChangedTool, 20, None))
            .await
            .unwrap();
        let stale = store
            .create_consent(&request(ConsentKind::ShadowTie, 30, Some(50)))
            .await
            .unwrap();
        let quarantine = store
            .create_consent(&request(ConsentKind::QuarantinedTool, 40, None))
            .await
            .unwrap();

        let pending: Vec<_> = store
            .list_consents(Some(ConsentState::Pending), 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(pending, [ask, tool, stale, quarantine], "oldest first");

        assert!(store
            .answer_consent(ask, b"sealed-bytes", 60)
            .await
            .unwrap());
        assert!(
            !store.answer_consent(ask, b"again", 61).await.unwrap(),
            "answered once only"
        );
        assert!(
            !store.decline_consent(ask, 61).await.unwrap(),
            "cannot decline an answer"
        );
        let answered = store.get_consent(ask).await.unwrap().unwrap();
        assert_eq!(answered.state, ConsentState::Answered);
        assert_eq!(answered.answered_ms, Some(60));
        assert_eq!(answered.requester_key.as_deref(), Some(&[7u8; 32][..]));
        assert_eq!(
            store.take_consent_answer(ask).await.unwrap().as_deref(),
            Some(&b"sealed-bytes"[..])
        );
        assert_eq!(
            store.take_consent_answer(ask).await.unwrap(),
            None,
            "the answer is handed over once"
        );
        assert_eq!(
            store.get_consent(ask).await.unwrap().unwrap().sealed_answer,
            None,
            "erased after taking"
        );

        assert!(store.decline_consent(tool, 70).await.unwrap());
        assert_eq!(
            store.expire_consents(100).await.unwrap(),
            1,
            "only the request past its expiry"
        );
        assert_eq!(
            store.get_consent(stale).await.unwrap().unwrap().state,
            ConsentState::Expired
        );
        assert!(matches!(
            store.answer_consent(quarantine, b"", 1).await,
            Err(StoreError::Invalid(_))
        ));

        assert_eq!(store.list_consents(None, 10).await.unwrap().len(), 4);
        assert_eq!(
            store.prune_consents(35).await.unwrap(),
            3,
            "settled and older than 35"
        );
        let left = store.list_consents(None, 10).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(
            left[0].kind,
            ConsentKind::QuarantinedTool,
            "pending requests are never pruned"
        );
        assert!(store.get_consent(999).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn corrupt_consent_rows_are_errors() {
        let store = mem().await;
        let id = store
            .create_consent(&request(ConsentKind::Elicitation, 1, None))
            .await
            .unwrap();
        sqlx::query("UPDATE consent_requests SET answer = x'01'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(
            matches!(
                store.get_consent(id).await,
                Err(StoreError::CorruptRow { .. })
            ),
            "an answer on a pending request is not believable"
        );
        sqlx::query("UPDATE consent_requests SET answer = NULL, kind = 'bribe'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(
            store.get_consent(id).await,
            Err(StoreError::CorruptRow { .. })
        ));
        let mut bad = request(ConsentKind::Elicitation, 1, None);
        bad.payload_json = "{".into();
        assert!(matches!(
            store.create_consent(&bad).await,
            Err(StoreError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn a_held_server_asks_once_and_settles() {
        let store = mem().await;
        let held = |payload: &str| NewConsent {
            kind: ConsentKind::HeldPackage,
            server_id: "srv".into(),
            tool: None,
            payload_json: payload.into(),
            created_ms: 1,
            expires_ms: None,
            requester_key: None,
        };
        let a = store.ask_once(&held(r#"{"package":"p"}"#)).await.unwrap();
        let again = store.ask_once(&held(r#"{"package":"p"}"#)).await.unwrap();
        assert_eq!(a, again, "the next start does not ask again");
        let other = store.ask_once(&held(r#"{"package":"q"}"#)).await.unwrap();
        assert_ne!(a, other, "another package is another question");
        assert_eq!(
            store.get_consent(a).await.unwrap().unwrap().kind,
            ConsentKind::HeldPackage
        );
        assert_eq!(
            store
                .settle_consents(ConsentKind::HeldPackage, "srv", 5)
                .await
                .unwrap(),
            2
        );
        assert!(store
            .list_consents(Some(ConsentState::Pending), 10)
            .await
            .unwrap()
            .is_empty());
    }
}

//! The global pause ("Pause protection" in the tray, `gatehouse pause`):
//! until its deadline every wrap process records its decisions but blocks
//! nothing (audit only). Stored in `meta` with a MAC: a forged pause would
//! switch protection off, so a row that does not verify pauses nothing.
//!
//! A pause that ends by itself is recorded once: the first process that
//! sees it over (the control plane, or any wrap) calls
//! [`Store::end_expired_pause`], which deletes exactly that MAC'd row and
//! records `protection_resumed` in one transaction; every later caller finds
//! no row and records nothing.

use crate::db::Store;
use crate::error::Result;
use crate::events::{event_types, Action, NewEvent, Severity};
use crate::mac::{self, Field, MacKey};

const KEY: &str = "protection.pause";
const DOMAIN: &str = "gatehouse.protection_pause.v1";

/// A pause as set by a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// Protection resumes by itself at this time (unix ms).
    pub until_ms: i64,
    /// When the pause was set.
    pub set_ms: i64,
}

impl Pause {
    /// Whether the pause is still in effect at `now_ms`.
    pub fn active_at(&self, now_ms: i64) -> bool {
        self.until_ms > now_ms
    }
}

/// What the stored pause row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseRecord {
    /// No pause was set (or it was lifted).
    None,
    /// A verified pause (possibly already over; see [`Pause::active_at`]).
    Set(Pause),
    /// A row that fails its MAC or cannot be read: it pauses nothing, and
    /// the tampering should be reported.
    Forged,
}

impl PauseRecord {
    /// Whether protection is paused at `now_ms`.
    pub fn paused_at(&self, now_ms: i64) -> bool {
        matches!(self, PauseRecord::Set(p) if p.active_at(now_ms))
    }
}

fn fields(until_ms: i64, set_ms: i64) -> [Field<'static>; 2] {
    [Field::Int(until_ms), Field::Int(set_ms)]
}

fn parse(key: &MacKey, value: &str) -> PauseRecord {
    let mut parts = value.split(' ');
    let (Some(until), Some(set), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return PauseRecord::Forged;
    };
    let (Ok(until_ms), Ok(set_ms), Ok(tag)) = (until.parse(), set.parse(), hex::decode(tag)) else {
        return PauseRecord::Forged;
    };
    if mac::verify(key, DOMAIN, &fields(until_ms, set_ms), &tag) {
        PauseRecord::Set(Pause { until_ms, set_ms })
    } else {
        PauseRecord::Forged
    }
}

impl Store {
    /// Pauses protection until `until_ms`, MAC'd with `key`.
    pub async fn set_pause(&self, key: &MacKey, until_ms: i64, now_ms: i64) -> Result<()> {
        let tag = mac::compute(key, DOMAIN, &fields(until_ms, now_ms));
        self.set_meta(KEY, &format!("{until_ms} {now_ms} {}", hex::encode(tag)))
            .await
    }

    /// Ends a pause now; true if one was stored.
    pub async fn clear_pause(&self) -> Result<bool> {
        self.delete_meta(KEY).await
    }

    /// Ends a verified pause whose deadline is past (at `now_ms`): deletes
    /// exactly that row and records one `protection_resumed` event (at the
    /// deadline), in one transaction. Returns the pause it ended; `None`
    /// when there was nothing to end (no row, still active, forged, or
    /// another process ended it first).
    pub async fn end_expired_pause(&self, key: &MacKey, now_ms: i64) -> Result<Option<Pause>> {
        let _gate = self.write_gate().await;
        let mut conn = self.pool().acquire().await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let result =
            end_expired_in(&mut conn, key, now_ms, self.options().event_aggregation_ms).await;
        let end = if matches!(result, Ok(Some(_))) {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        let closed = sqlx::query(end).execute(&mut *conn).await;
        let ended = result?;
        closed?;
        Ok(ended)
    }

    /// The stored pause, verified with `key`.
    pub async fn pause(&self, key: &MacKey) -> Result<PauseRecord> {
        Ok(match self.get_meta(KEY).await? {
            None => PauseRecord::None,
            Some(value) => parse(key, &value),
        })
    }
}

async fn end_expired_in(
    conn: &mut sqlx::SqliteConnection,
    key: &MacKey,
    now_ms: i64,
    aggregation_ms: i64,
) -> Result<Option<Pause>> {
    let value: Option<String> = sqlx::query_scalar("SELECT value FROM meta WHERE key = ?")
        .bind(KEY)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(value) = value else {
        return Ok(None);
    };
    let PauseRecord::Set(pause) = parse(key, &value) else {
        return Ok(None);
    };
    if pause.active_at(now_ms) {
        return Ok(None);
    }
    let gone = sqlx::query("DELETE FROM meta WHERE key = ? AND value = ?")
        .bind(KEY)
        .bind(&value)
        .execute(&mut *conn)
        .await?;
    if gone.rows_affected() != 1 {
        return Ok(None);
    }
    let mut event = NewEvent::new(
        pause.until_ms,
        event_types::PROTECTION_RESUMED,
        Action::Audit,
        Severity::Info,
        "protection resumed: the pause ended",
    );
    event.rule = Some("protection.pause".to_owned());
    crate::events::insert_on(conn, &event, aggregation_ms).await?;
    Ok(Some(pause))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{key, mem};

    #[tokio::test]
    async fn pause_round_trip_expiry_and_tamper() {
        let store = mem().await;
        let key = key();
        assert_eq!(store.pause(&key).await.unwrap(), PauseRecord::None);
        store.set_pause(&key, 5_000, 1_000).await.unwrap();
        let record = store.pause(&key).await.unwrap();
        assert_eq!(
            record,
            PauseRecord::Set(Pause {
                until_ms: 5_000,
                set_ms: 1_000
            })
        );
        assert!(record.paused_at(4_999));
        assert!(
            !record.paused_at(5_000),
            "resumes by itself at the deadline"
        );

        // Someone with file access extends the pause by a year.
        let forged = store
            .get_meta(KEY)
            .await
            .unwrap()
            .unwrap()
            .replacen("5000", "31536005000", 1);
        store.set_meta(KEY, &forged).await.unwrap();
        let record = store.pause(&key).await.unwrap();
        assert_eq!(record, PauseRecord::Forged);
        assert!(!record.paused_at(2_000), "a forged pause pauses nothing");

        store.set_meta(KEY, "garbage").await.unwrap();
        assert_eq!(store.pause(&key).await.unwrap(), PauseRecord::Forged);
        let other = MacKey::new([7; 32]);
        store.set_pause(&key, 5_000, 1_000).await.unwrap();
        assert_eq!(store.pause(&other).await.unwrap(), PauseRecord::Forged);

        assert!(store.clear_pause().await.unwrap());
        assert_eq!(store.pause(&key).await.unwrap(), PauseRecord::None);
        assert!(!store.clear_pause().await.unwrap());
    }

    #[tokio::test]
    async fn a_pause_that_ends_by_itself_is_recorded_once() {
        let store = mem().await;
        let key = key();
        let resumed = |store: Store| async move {
            store
                .query_events(&crate::EventFilter::default())
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.event_type == event_types::PROTECTION_RESUMED)
                .collect::<Vec<_>>()
        };
        store.set_pause(&key, 30_000, 0).await.unwrap();
        assert_eq!(
            store.end_expired_pause(&key, 29_999).await.unwrap(),
            None,
            "an active pause is left alone"
        );
        // A forged row is never "ended" (and so never announced).
        let other = MacKey::new([9; 32]);
        assert_eq!(store.end_expired_pause(&other, 40_000).await.unwrap(), None);
        assert!(resumed(store.clone()).await.is_empty());

        // Several processes notice the deadline: one records it.
        let (a, b, c) = tokio::join!(
            store.end_expired_pause(&key, 30_000),
            store.end_expired_pause(&key, 30_250),
            store.end_expired_pause(&key, 31_000),
        );
        let ended: Vec<_> = [a, b, c].into_iter().filter_map(|r| r.unwrap()).collect();
        assert_eq!(ended.len(), 1, "exactly one caller ends the pause");
        let events = resumed(store.clone()).await;
        assert_eq!(events.len(), 1, "one protection_resumed event");
        assert_eq!(events[0].time_ms, 30_000, "recorded at the deadline");
        assert!(events[0].reason.contains("the pause ended"));
        assert_eq!(store.pause(&key).await.unwrap(), PauseRecord::None);
        assert_eq!(store.end_expired_pause(&key, 99_000).await.unwrap(), None);
        assert_eq!(resumed(store.clone()).await.len(), 1);
    }
}

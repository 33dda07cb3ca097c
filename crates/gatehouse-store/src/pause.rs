//! The global pause ("Pause protection" in the tray, `gatehouse pause`):
//! until its deadline every wrap process records its decisions but blocks
//! nothing (audit only). Stored in `meta` with a MAC: a forged pause would
//! switch protection off, so a row that does not verify pauses nothing.

use crate::db::Store;
use crate::error::Result;
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

    /// The stored pause, verified with `key`.
    pub async fn pause(&self, key: &MacKey) -> Result<PauseRecord> {
        Ok(match self.get_meta(KEY).await? {
            None => PauseRecord::None,
            Some(value) => parse(key, &value),
        })
    }
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
}

//! Pausing protection for every wrapped server at once (tray menu,
//! dashboard, `gatehouse pause`): the MAC'd pause row that each
//! `gatehouse wrap` follows, and the event that says who paused it.

use gatehouse_store::{Action, MacKey, NewEvent, Pause, PauseRecord, Severity, Store, StoreError};

use crate::api::event_types;

/// Longest pause accepted (24 h); the tray offers up to 8 h.
pub const MAX_PAUSE_MIN: u32 = 24 * 60;

/// Why a pause was refused or could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("a pause must last between 1 and {MAX_PAUSE_MIN} minutes, not {0}")]
    Length(u32),
    #[error("the Gatehouse database is unavailable: {0}")]
    Store(#[from] StoreError),
}

/// The protection state as of some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtectionState {
    Active,
    /// Audit only until `until_ms`.
    Paused {
        until_ms: i64,
    },
}

/// Pauses protection for `minutes` from `now_ms`; `by` says who, for the
/// event (e.g. "the tray", "the dashboard", "gatehouse pause").
pub async fn pause(
    store: &Store,
    key: &MacKey,
    minutes: u32,
    now_ms: i64,
    by: &str,
) -> Result<Pause, PauseError> {
    if minutes == 0 || minutes > MAX_PAUSE_MIN {
        return Err(PauseError::Length(minutes));
    }
    let until_ms = now_ms + i64::from(minutes) * 60_000;
    store.set_pause(key, until_ms, now_ms).await?;
    record(
        store,
        now_ms,
        event_types::PROTECTION_PAUSED,
        Severity::High,
        &format!("protection paused by {by} for {minutes} min: wrapped servers record but block nothing until it ends"),
    )
    .await;
    Ok(Pause {
        until_ms,
        set_ms: now_ms,
    })
}

/// Ends a pause now; false when none was set.
pub async fn resume(store: &Store, now_ms: i64, by: &str) -> Result<bool, PauseError> {
    let was = store.clear_pause().await?;
    if was {
        record(
            store,
            now_ms,
            event_types::PROTECTION_RESUMED,
            Severity::Info,
            &format!("protection resumed by {by}"),
        )
        .await;
    }
    Ok(was)
}

/// The state at `now_ms`. A pause row that fails its MAC pauses nothing.
pub async fn state(
    store: &Store,
    key: &MacKey,
    now_ms: i64,
) -> Result<ProtectionState, PauseError> {
    Ok(match store.pause(key).await? {
        PauseRecord::Set(p) if p.active_at(now_ms) => ProtectionState::Paused {
            until_ms: p.until_ms,
        },
        _ => ProtectionState::Active,
    })
}

async fn record(store: &Store, now_ms: i64, event_type: &str, severity: Severity, reason: &str) {
    let mut ev = NewEvent::new(now_ms, event_type, Action::Audit, severity, reason);
    ev.rule = Some("protection.pause".to_owned());
    if let Err(e) = store.insert_event(&ev).await {
        tracing::warn!(error = %e, event_type, "could not record the pause");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_store::{EventFilter, StoreOptions};

    #[tokio::test]
    async fn pause_resume_and_expiry_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let key = MacKey::new([3; 32]);
        assert_eq!(
            state(&store, &key, 0).await.unwrap(),
            ProtectionState::Active
        );
        assert!(matches!(
            pause(&store, &key, 0, 0, "test").await,
            Err(PauseError::Length(0))
        ));
        assert!(matches!(
            pause(&store, &key, MAX_PAUSE_MIN + 1, 0, "test").await,
            Err(PauseError::Length(_))
        ));
        let p = pause(&store, &key, 60, 1_000, "the tray").await.unwrap();
        assert_eq!(p.until_ms, 1_000 + 3_600_000);
        assert_eq!(
            state(&store, &key, 2_000).await.unwrap(),
            ProtectionState::Paused {
                until_ms: p.until_ms
            }
        );
        assert_eq!(
            state(&store, &key, p.until_ms).await.unwrap(),
            ProtectionState::Active,
            "resumes by itself"
        );
        assert_eq!(
            state(&store, &MacKey::new([4; 32]), 2_000).await.unwrap(),
            ProtectionState::Active,
            "another key's pause verifies nothing"
        );
        assert!(resume(&store, 3_000, "the tray").await.unwrap());
        assert!(!resume(&store, 3_000, "the tray").await.unwrap());
        let events = store.query_events(&EventFilter::default()).await.unwrap();
        let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert!(types.contains(&event_types::PROTECTION_PAUSED), "{types:?}");
        assert_eq!(
            types
                .iter()
                .filter(|t| **t == event_types::PROTECTION_RESUMED)
                .count(),
            1,
            "a resume with nothing paused records nothing"
        );
        let paused = events
            .iter()
            .find(|e| e.event_type == event_types::PROTECTION_PAUSED)
            .unwrap();
        assert!(paused.reason.contains("the tray") && paused.reason.contains("60 min"));
    }
}

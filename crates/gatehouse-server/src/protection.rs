//! Pausing protection for every wrapped server at once (tray menu,
//! dashboard, `gatehouse pause`): the MAC'd pause row that each
//! `gatehouse wrap` follows, and the events that say who paused it and when
//! it ended. A pause that ends by itself is recorded once, by whichever
//! process notices first: the control plane checks every second
//! ([`end_pauses`]), each wrap every quarter second; the MAC'd pause row is
//! deleted and the event written in one transaction
//! (`Store::end_expired_pause`), so the others find nothing to record.

use std::time::Duration;

use gatehouse_store::{Action, MacKey, NewEvent, Pause, PauseRecord, Severity, Store, StoreError};

use crate::api::event_types;

/// Longest pause accepted (24 h); the tray offers up to 8 h.
pub const MAX_PAUSE_MIN: u32 = 24 * 60;
/// Longest pause accepted, in ms.
const MAX_PAUSE_MS: i64 = MAX_PAUSE_MIN as i64 * 60_000;

/// Why a pause was refused or could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("a pause must last between 1 and {MAX_PAUSE_MIN} minutes, not {0}")]
    Length(u32),
    /// A pause given to the second (`gatehouse pause --for 30s`) out of range.
    #[error("a pause must last between 1 second and 24 hours")]
    Duration,
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
    pause_for(store, key, i64::from(minutes) * 60_000, now_ms, by).await
}

/// Pauses protection for exactly `duration_ms` (1 s to 24 h) from `now_ms`:
/// the stored deadline is in ms, so `30s` means 30 seconds.
pub async fn pause_for(
    store: &Store,
    key: &MacKey,
    duration_ms: i64,
    now_ms: i64,
    by: &str,
) -> Result<Pause, PauseError> {
    if !(1_000..=MAX_PAUSE_MS).contains(&duration_ms) {
        return Err(PauseError::Duration);
    }
    let until_ms = now_ms + duration_ms;
    store.set_pause(key, until_ms, now_ms).await?;
    record(
        store,
        now_ms,
        event_types::PROTECTION_PAUSED,
        Severity::High,
        &format!(
            "protection paused by {by} for {}: wrapped servers record but block nothing until it ends",
            describe(duration_ms)
        ),
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

/// `90 s`, `15 min`, `1 h 30 min`, `1 min 30 s`: a length as people say it.
fn describe(ms: i64) -> String {
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let parts: Vec<String> = [(h, "h"), (m, "min"), (s, "s")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n} {unit}"))
        .collect();
    if parts.is_empty() {
        "0 s".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The control plane's side of "a pause that ends by itself is recorded":
/// checks every second (a read; a write only at the deadline) until the
/// server shuts down.
pub(crate) async fn end_pauses(state: crate::AppState) {
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        let now = state.now_ms();
        let (store, key) = (&state.store, &state.mac_key);
        if matches!(store.pause(key).await, Ok(PauseRecord::Set(p)) if !p.active_at(now)) {
            if let Err(e) = store.end_expired_pause(key, now).await {
                tracing::warn!(error = %e, "could not record the end of a pause");
            }
        }
    }
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
        assert!(paused.reason.contains("the tray") && paused.reason.contains("1 h"));
    }

    #[tokio::test]
    async fn a_pause_lasts_exactly_what_was_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let key = MacKey::new([3; 32]);
        let p = pause_for(&store, &key, 30_000, 1_000, "gatehouse pause")
            .await
            .unwrap();
        assert_eq!(p.until_ms, 31_000, "30 s, not rounded up to a minute");
        let events = store.query_events(&EventFilter::default()).await.unwrap();
        assert!(
            events[0].reason.contains("for 30 s:"),
            "the event says how long: {}",
            events[0].reason
        );
        for refused in [0, 999, MAX_PAUSE_MS + 1] {
            assert!(
                matches!(
                    pause_for(&store, &key, refused, 0, "t").await,
                    Err(PauseError::Duration)
                ),
                "{refused} ms is refused"
            );
        }
        assert_eq!(describe(90_000), "1 min 30 s");
        assert_eq!(describe(5_400_000), "1 h 30 min");
    }
}

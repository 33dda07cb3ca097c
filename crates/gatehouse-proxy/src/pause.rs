//! Follows the global pause (tray "Pause protection", `gatehouse pause`):
//! while it lasts, this wrap records its decisions and blocks nothing. The
//! pause ends by itself at its deadline, with no database write needed to
//! resume; the first process to notice the deadline (this poller, or the
//! control plane) records one `protection_resumed` event
//! (`Store::end_expired_pause` makes that exactly once). A pause row that
//! fails its MAC pauses nothing (and is logged).

use std::time::Duration;

use gatehouse_store::{MacKey, PauseRecord, Store};
use tokio::sync::watch;
use tracing::warn;

use crate::ready::Gate;

/// How often the database is asked whether anything changed (one cheap
/// `PRAGMA data_version`); the pause row is read only after a change.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Whether protection is paused right now (one read; for start-up checks).
pub async fn paused_now(store: Option<&Store>, key: &MacKey) -> bool {
    match store {
        Some(store) => read(store, key)
            .await
            .paused_at(crate::wrap::now_ms() as i64),
        None => false,
    }
}

/// A receiver that holds `true` while protection is paused, followed from
/// when `after` opens (until then nothing is paused: enforcement is the
/// safe side). Without a database nothing is ever paused.
pub fn follow(store: Option<Store>, key: MacKey, after: Gate) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    if let Some(store) = store {
        tokio::spawn(async move {
            after.wait().await;
            poll(store, key, tx).await;
        });
    }
    rx
}

async fn poll(store: Store, key: MacKey, tx: watch::Sender<bool>) {
    let mut version = None;
    let mut record = PauseRecord::None;
    loop {
        let now = store.data_version().await.ok();
        if now.is_none() || now != version {
            version = now;
            record = read(&store, &key).await;
        }
        let now_ms = crate::wrap::now_ms() as i64;
        let paused = record.paused_at(now_ms);
        if let PauseRecord::Set(_) = record {
            if !paused {
                // Over by itself: record it once (another process may have).
                if let Err(err) = store.end_expired_pause(&key, now_ms).await {
                    warn!(%err, "could not record the end of the pause");
                }
                record = PauseRecord::None;
            }
        }
        tx.send_if_modified(|current| std::mem::replace(current, paused) != paused);
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

async fn read(store: &Store, key: &MacKey) -> PauseRecord {
    match store.pause(key).await {
        Ok(PauseRecord::Forged) => {
            warn!("the stored pause does not verify; protection stays on");
            PauseRecord::Forged
        }
        Ok(record) => record,
        // The process is exiting.
        Err(gatehouse_store::StoreError::Closed) => PauseRecord::None,
        Err(err) => {
            warn!(%err, "could not read the pause state; protection stays on");
            PauseRecord::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_store::StoreOptions;

    #[tokio::test]
    async fn follows_a_pause_and_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let key = MacKey::new([9; 32]);
        let (opener, after) = crate::ready::gate();
        let mut paused = follow(Some(store.clone()), key.clone(), after);
        assert!(!*paused.borrow_and_update());
        let now = crate::wrap::now_ms() as i64;
        store.set_pause(&key, now + 1_500, now).await.unwrap();
        tokio::time::sleep(POLL_INTERVAL * 2).await;
        assert!(
            !paused.has_changed().unwrap(),
            "not followed before the gate opens"
        );
        opener.open();
        tokio::time::timeout(Duration::from_secs(5), paused.changed())
            .await
            .expect("noticed within a poll")
            .unwrap();
        assert!(*paused.borrow_and_update(), "paused");
        assert!(paused_now(Some(&store), &key).await);
        tokio::time::timeout(Duration::from_secs(5), paused.changed())
            .await
            .expect("the deadline ends it without a write")
            .unwrap();
        assert!(!*paused.borrow_and_update(), "resumed by itself");
        tokio::time::sleep(POLL_INTERVAL * 3).await;
        let resumed = store
            .query_events(&gatehouse_store::EventFilter::default())
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.event_type == gatehouse_store::event_types::PROTECTION_RESUMED)
            .count();
        assert_eq!(resumed, 1, "the wrap records the end of the pause, once");

        // A pause MAC'd with another install's key pauses nothing.
        store
            .set_pause(&MacKey::new([1; 32]), now + 60_000, now)
            .await
            .unwrap();
        tokio::time::sleep(POLL_INTERVAL * 3).await;
        assert!(!*paused.borrow(), "a forged pause is ignored");
        assert!(!paused_now(Some(&store), &key).await);
        assert!(!paused_now(None, &key).await, "no database, no pause");
    }
}

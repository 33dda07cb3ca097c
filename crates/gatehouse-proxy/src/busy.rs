//! Start-up statements on a busy database. A client starts its servers
//! together, each writing at start (its identity, its launch, its first
//! pins); one that gives up after the per-call budget would run its whole
//! life as if the database were gone: its identity unchecked, so no secrets
//! and nothing trusted at first sight. A busy store wrote nothing
//! ([`StoreError::Busy`]), so the statement is tried again, a few times.

use std::future::Future;
use std::time::Duration;

use gatehouse_store::{Result, StoreError};

/// Tries after the first, and the first wait (doubling): 0.8 s in all.
const RETRIES: u32 = 5;
const BACKOFF: Duration = Duration::from_millis(25);

/// `attempt`'s result once it is not busy, or busy after the retries.
pub(crate) async fn retry_busy<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = BACKOFF;
    for _ in 0..RETRIES {
        match attempt().await {
            Err(StoreError::Busy) => {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            done => return done,
        }
    }
    attempt().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn busy_is_tried_again_and_anything_else_is_not() {
        let mut calls = 0;
        let got = retry_busy(|| {
            calls += 1;
            let busy = calls < 3;
            async move {
                if busy {
                    Err(StoreError::Busy)
                } else {
                    Ok(calls)
                }
            }
        })
        .await;
        assert_eq!(got.ok(), Some(3));

        let mut calls = 0;
        let always: Result<()> = retry_busy(|| {
            calls += 1;
            async { Err(StoreError::Busy) }
        })
        .await;
        assert!(matches!(always, Err(StoreError::Busy)));
        assert_eq!(calls, RETRIES + 1);
    }
}

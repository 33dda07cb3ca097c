//! Start-up writes that can wait until the relay runs: on wrap's one
//! database connection they would otherwise delay the reads the relay's
//! set-up needs (the first write of a process also syncs the journal).

use tokio::sync::watch;

/// Opened once the relay handles frames (or wrap gave up starting it).
pub(crate) struct RelayReady(watch::Sender<bool>);

/// What deferred work waits on.
#[derive(Clone)]
pub(crate) struct AfterReady(watch::Receiver<bool>);

pub(crate) fn gate() -> (RelayReady, AfterReady) {
    let (tx, rx) = watch::channel(false);
    (RelayReady(tx), AfterReady(rx))
}

impl RelayReady {
    pub(crate) fn open(&self) {
        self.0.send_replace(true);
    }
}

impl AfterReady {
    /// Returns once the gate is open, or its opener is gone.
    pub(crate) async fn wait(mut self) {
        let _ = self.0.wait_for(|open| *open).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_the_opener_or_its_end() {
        let (ready, after) = gate();
        let waiting = tokio::spawn(after.clone().wait());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "closed gate holds the work");
        ready.open();
        waiting.await.unwrap();

        let (ready, after) = gate();
        let waiting = tokio::spawn(after.wait());
        drop(ready);
        waiting.await.unwrap();
    }
}

//! Start-up work that waits for a moment: the start-up writes, the database
//! pollers, the egress guard's first read, the scanner's build and the
//! session join wait until the server's first frame has been passed on to
//! the client. Before, they
//! would take wrap's one database connection from the reads the relay's
//! set-up needs (the first write of a process also syncs the journal), or
//! a CPU from the server's start-up and from the client reading that frame.

use tokio::sync::watch;

/// Opens the gate; dropping it opens it too (nothing is left to wait for).
pub struct Opener(watch::Sender<bool>);

/// What deferred work waits on.
#[derive(Clone)]
pub struct Gate(watch::Receiver<bool>);

pub(crate) fn gate() -> (Opener, Gate) {
    let (tx, rx) = watch::channel(false);
    (Opener(tx), Gate(rx))
}

impl Opener {
    pub(crate) fn open(&self) {
        self.0.send_replace(true);
    }
}

impl Gate {
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

//! What reaches the relay loop rarely — pins re-read from the database, a
//! pin reload after a lost first sight, a protection pause, a signal —
//! merged by one task into one queue. The loop then polls a single queue
//! per turn instead of a future per source, each re-created every turn
//! (watch and signal futures take a lock to register and another to
//! deregister): measured at several microseconds per call.

use gatehouse_engine::PinTable;
use tokio::sync::{mpsc, watch};

pub(crate) enum Control {
    /// The server's pins as the database now has them.
    Pins(PinTable),
    /// The recorder's pin reload changed: the loop reads its receiver.
    Reloaded,
    /// Protection was paused or resumed: the loop reads its receiver.
    Paused,
    /// A signal to stop (its number).
    Signal(i32),
}

/// Starts the merging task. The loop keeps its own receivers of `reloads`
/// and `paused` (clones of these) to read the values.
pub(crate) fn merge(
    mut pins: mpsc::Receiver<PinTable>,
    mut reloads: watch::Receiver<Option<PinTable>>,
    mut paused: watch::Receiver<bool>,
    mut signals: Signals,
) -> mpsc::UnboundedReceiver<Control> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let control = tokio::select! {
                Some(table) = pins.recv() => Control::Pins(table),
                Ok(()) = reloads.changed() => Control::Reloaded,
                Ok(()) = paused.changed() => Control::Paused,
                sig = signals.recv() => Control::Signal(sig),
            };
            if tx.send(control).is_err() {
                return;
            }
        }
    });
    rx
}

/// SIGTERM, SIGINT and SIGHUP end wrap (and its server) cleanly.
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    pub(crate) fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    #[cfg(not(unix))]
    pub(crate) fn new() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    /// The number of the first signal received.
    #[cfg(unix)]
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.int.recv() => libc::SIGINT,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> i32 {
        let _ = tokio::signal::ctrl_c().await;
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn next(queue: &mut mpsc::UnboundedReceiver<Control>) -> Option<Control> {
        tokio::time::timeout(Duration::from_secs(5), queue.recv())
            .await
            .expect("a control within 5 s")
    }

    #[tokio::test]
    async fn each_source_reaches_the_one_queue() {
        let (pins_tx, pins_rx) = mpsc::channel(1);
        let (reload_tx, reloads) = watch::channel(None);
        let (pause_tx, paused) = watch::channel(false);
        let mut queue = merge(pins_rx, reloads, paused, Signals::new().unwrap());
        pins_tx.send(PinTable::default()).await.unwrap();
        assert!(matches!(next(&mut queue).await, Some(Control::Pins(_))));
        reload_tx.send(Some(PinTable::default())).unwrap();
        assert!(matches!(next(&mut queue).await, Some(Control::Reloaded)));
        pause_tx.send(true).unwrap();
        assert!(matches!(next(&mut queue).await, Some(Control::Paused)));
    }

    #[tokio::test]
    async fn closed_sources_leave_the_others_working() {
        let (pins_tx, pins_rx) = mpsc::channel(1);
        let (reload_tx, reloads) = watch::channel(None);
        let (pause_tx, paused) = watch::channel(false);
        drop((reload_tx, pause_tx));
        let mut queue = merge(pins_rx, reloads, paused, Signals::new().unwrap());
        pins_tx.send(PinTable::default()).await.unwrap();
        assert!(matches!(next(&mut queue).await, Some(Control::Pins(_))));
        let nothing = tokio::time::timeout(Duration::from_millis(50), queue.recv());
        assert!(nothing.await.is_err(), "a closed watch is not a change");
    }
}

//! Frames on their way to one peer. The relay loop never waits on a peer: what
//! the writer task's queue cannot take yet waits in a backlog, and the loop
//! stops reading the *other* peer while that backlog is long. A client that
//! pipelines thousands of calls, or a burst of held calls released at once,
//! therefore cannot wedge wrap between two full pipes.

use std::collections::VecDeque;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

/// Backlog length at which the loop stops reading the opposite peer.
const BACKLOG_LIMIT: usize = 64;

pub struct Outbox {
    tx: Option<mpsc::Sender<Vec<u8>>>,
    backlog: VecDeque<Vec<u8>>,
}

impl Outbox {
    pub fn new(tx: mpsc::Sender<Vec<u8>>) -> Self {
        Self {
            tx: Some(tx),
            backlog: VecDeque::new(),
        }
    }

    /// Queues a frame; frames for a closed peer are discarded.
    pub fn push(&mut self, frame: Vec<u8>) {
        if self.tx.is_some() {
            self.backlog.push_back(frame);
            self.flush();
        }
    }

    /// Hands as much of the backlog to the writer as its queue takes now.
    pub fn flush(&mut self) {
        let Some(tx) = &self.tx else { return };
        while let Some(frame) = self.backlog.pop_front() {
            match tx.try_send(frame) {
                Ok(()) => {}
                Err(TrySendError::Full(frame)) => {
                    self.backlog.push_front(frame);
                    return;
                }
                Err(TrySendError::Closed(_)) => {
                    self.backlog.clear();
                    self.tx = None;
                    return;
                }
            }
        }
    }

    /// Whether the loop may read more from the opposite peer.
    pub fn has_room(&self) -> bool {
        self.backlog.len() < BACKLOG_LIMIT
    }

    pub fn is_idle(&self) -> bool {
        self.backlog.is_empty()
    }

    pub fn is_open(&self) -> bool {
        self.tx.is_some()
    }

    /// Resolves when a backlogged frame can move; pending while there is none.
    pub async fn writable(&self) {
        match &self.tx {
            Some(tx) if !self.backlog.is_empty() => {
                // The permit is released at once; `flush` then takes the slot.
                let _ = tx.reserve().await;
            }
            _ => std::future::pending().await,
        }
    }

    /// Delivers the whole backlog, waiting as needed, then closes the peer's
    /// input.
    pub async fn finish(mut self) {
        if let Some(tx) = self.tx.take() {
            for frame in self.backlog.drain(..) {
                if tx.send(frame).await.is_err() {
                    break;
                }
            }
        }
    }

    /// Closes the peer's input once the backlog is delivered (see `finish`);
    /// here the backlog must already be empty.
    pub fn close(&mut self) {
        debug_assert!(self.backlog.is_empty());
        self.tx = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn backlog_waits_for_the_writer_and_keeps_order() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut out = Outbox::new(tx);
        for n in 0..5u8 {
            out.push(vec![n]);
        }
        assert_eq!(out.backlog.len(), 3, "the queue took two");
        assert!(out.has_room());
        assert_eq!(rx.recv().await, Some(vec![0]));
        out.writable().await;
        out.flush();
        assert_eq!(out.backlog.len(), 2);
        let finishing = tokio::spawn(out.finish());
        let mut got = Vec::new();
        while let Some(frame) = rx.recv().await {
            got.push(frame);
        }
        finishing.await.unwrap();
        assert_eq!(got, vec![vec![1], vec![2], vec![3], vec![4]]);
    }

    #[tokio::test]
    async fn a_closed_peer_drops_its_backlog() {
        let (tx, rx) = mpsc::channel(1);
        let mut out = Outbox::new(tx);
        drop(rx);
        out.push(vec![1]);
        assert!(!out.is_open());
        assert!(out.is_idle());
    }
}

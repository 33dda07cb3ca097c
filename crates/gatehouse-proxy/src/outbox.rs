//! Frames on their way to one peer, written by the relay loop itself. A frame
//! is written the moment it is pushed when the peer's input has room (no
//! hand-off to another task); what the pipe cannot take yet waits in a
//! backlog, written as the pipe drains, and the loop stops reading the
//! *other* peer while that backlog is long. A client that pipelines
//! thousands of calls, or a burst of held calls released at once, therefore
//! cannot wedge wrap between two full pipes.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Backlog length at which the loop stops reading the opposite peer.
const BACKLOG_LIMIT: usize = 64;

/// Backlog length at which the loop stops reading this outbox's own peer:
/// Gatehouse's own answers to it (a declined `roots/list`, an error for a
/// frame it dropped) pile up here when that peer sends without reading.
/// Far above [`BACKLOG_LIMIT`]: a server that writes while its input is
/// full is not stopped while it could still be working through it.
const OWN_ANSWERS_LIMIT: usize = 4096;

/// A peer's input: a pipe or socket driven non-blocking on the relay's
/// thread, or (a terminal, a file) tokio's stdio.
pub type Sink = Box<dyn AsyncWrite + Unpin + Send>;

pub struct Outbox {
    /// None once the peer's input is closed or failed.
    sink: Option<Sink>,
    /// Frames not yet wholly written, each with its newline.
    backlog: VecDeque<Vec<u8>>,
    /// How much of the first frame is written.
    written: usize,
}

impl Outbox {
    pub fn new(sink: Sink) -> Self {
        Self {
            sink: Some(sink),
            backlog: VecDeque::new(),
            written: 0,
        }
    }

    /// Queues a frame and writes what the peer's input takes now; frames for
    /// a closed peer are discarded.
    pub fn push(&mut self, mut frame: Vec<u8>) {
        if self.sink.is_none() {
            return;
        }
        frame.push(b'\n');
        self.backlog.push_back(frame);
        if self.backlog.len() == 1 {
            // Nothing is waiting on readiness: try now. A `Pending` here
            // leaves the frame for `writable`, which registers the real waker.
            let _ = self.poll_write_backlog(&mut Context::from_waker(Waker::noop()));
        }
    }

    /// Whether the loop may read more from the opposite peer.
    pub fn has_room(&self) -> bool {
        self.backlog.len() < BACKLOG_LIMIT
    }

    /// Whether the loop may read more from this outbox's own peer (whose
    /// frames may be answered here rather than passed on).
    pub fn takes_answers(&self) -> bool {
        self.backlog.len() < OWN_ANSWERS_LIMIT
    }

    pub fn is_idle(&self) -> bool {
        self.backlog.is_empty()
    }

    pub fn is_open(&self) -> bool {
        self.sink.is_some()
    }

    /// Writes backlogged frames as the peer's input drains; resolves once a
    /// frame has gone (so the loop re-checks `has_room`), pending while
    /// there is no backlog.
    pub async fn writable(&mut self) {
        if self.backlog.is_empty() {
            return std::future::pending().await;
        }
        let before = self.backlog.len();
        poll_fn(|cx| match self.poll_write_backlog(cx) {
            Poll::Pending if self.backlog.len() == before => Poll::Pending,
            _ => Poll::Ready(()),
        })
        .await
    }

    /// Delivers the whole backlog, then closes the peer's input.
    pub async fn finish(mut self) {
        poll_fn(|cx| self.poll_write_backlog(cx)).await;
        if let Some(mut sink) = self.sink.take() {
            let _ = sink.shutdown().await;
        }
    }

    /// Closes the peer's input once the backlog is delivered (see `finish`);
    /// here the backlog must already be empty.
    pub fn close(&mut self) {
        debug_assert!(self.backlog.is_empty());
        self.sink = None;
    }

    /// Writes frames until the backlog is empty (ready) or the peer's input
    /// is full (pending, with `cx` woken when it drains). A failed write
    /// closes the outbox and drops its backlog: the peer is gone.
    fn poll_write_backlog(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(sink) = self.sink.as_mut() else {
            return Poll::Ready(());
        };
        while let Some(frame) = self.backlog.front() {
            match Pin::new(&mut *sink).poll_write(cx, &frame[self.written..]) {
                Poll::Ready(Ok(n)) if n > 0 => {
                    self.written += n;
                    if self.written == frame.len() {
                        self.backlog.pop_front();
                        self.written = 0;
                    }
                }
                Poll::Ready(_) => return self.fail(),
                Poll::Pending => return Poll::Pending,
            }
        }
        // Pipes and sockets hold nothing back; tokio's stdio finishes its
        // write on a blocking thread.
        match Pin::new(&mut *sink).poll_flush(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Ready(Err(_)) => self.fail(),
            Poll::Pending => Poll::Pending,
        }
    }

    fn fail(&mut self) -> Poll<()> {
        self.sink = None;
        self.backlog.clear();
        self.written = 0;
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_frame_is_written_at_once_when_the_pipe_has_room() {
        let (writer, mut reader) = tokio::io::duplex(1024);
        let mut out = Outbox::new(Box::new(writer));
        out.push(b"one".to_vec());
        assert!(out.is_idle(), "written during push, nothing backlogged");
        let mut got = [0u8; 4];
        reader.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one\n");
    }

    #[tokio::test]
    async fn a_full_pipe_backlogs_in_order_and_drains_as_it_empties() {
        let (writer, mut reader) = tokio::io::duplex(8);
        let mut out = Outbox::new(Box::new(writer));
        for n in 0..5u8 {
            out.push(vec![b'a' + n; 5]);
        }
        assert!(!out.is_idle(), "an 8-byte pipe cannot take 30 bytes");
        assert!(out.has_room());
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            reader.read_to_end(&mut got).await.unwrap();
            got
        });
        while !out.is_idle() {
            out.writable().await;
        }
        out.finish().await;
        let got = reading.await.unwrap();
        assert_eq!(got, b"aaaaa\nbbbbb\nccccc\nddddd\neeeee\n");
    }

    /// A peer that never reads stops being read once Gatehouse's answers
    /// to it reach the limit, long after the opposite peer is held back.
    #[tokio::test]
    async fn answers_a_peer_does_not_read_stop_its_reading_at_the_limit() {
        let (writer, _reader) = tokio::io::duplex(8);
        let mut out = Outbox::new(Box::new(writer));
        let mut pushed = 0;
        while out.takes_answers() {
            out.push(b"{}".to_vec());
            pushed += 1;
            assert!(pushed <= OWN_ANSWERS_LIMIT + 8, "the limit holds");
            if pushed == BACKLOG_LIMIT + 8 {
                assert!(!out.has_room(), "the other peer is held back first");
            }
        }
        assert!(pushed >= OWN_ANSWERS_LIMIT, "{pushed}");
    }

    #[tokio::test]
    async fn a_closed_peer_drops_its_backlog() {
        let (writer, reader) = tokio::io::duplex(8);
        let mut out = Outbox::new(Box::new(writer));
        drop(reader);
        out.push(vec![1]);
        assert!(!out.is_open());
        assert!(out.is_idle());
        out.push(vec![2]);
        assert!(out.is_idle(), "frames for a closed peer are discarded");
    }

    #[tokio::test]
    async fn nothing_to_write_is_never_writable() {
        let (writer, _reader) = tokio::io::duplex(8);
        let mut out = Outbox::new(Box::new(writer));
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), out.writable());
        assert!(waited.await.is_err(), "an empty backlog stays pending");
    }
}

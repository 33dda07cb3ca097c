//! Newline-delimited frames with a size ceiling: memory stays bounded by the
//! ceiling, oversized frames are skipped to their end and reported with
//! their first and last bytes (where their id is: `gatehouse_protocol::peek`).

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One read result.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A frame without its `\n`.
    Frame(Vec<u8>),
    /// A frame longer than the ceiling was skipped.
    Oversized(Skipped),
    Eof,
}

/// What is kept of a skipped frame.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Its length in bytes.
    pub len: u64,
    /// Its first [`KEEP`] bytes.
    pub head: Vec<u8>,
    /// Its last [`KEEP`] bytes.
    pub tail: Vec<u8>,
}

/// Bytes kept from each end of a skipped frame.
pub const KEEP: usize = 4096;

impl Skipped {
    /// The frame so far, `read`, and the `more` that took it over the ceiling.
    fn start(read: &[u8], more: &[u8]) -> Skipped {
        let mut skipped = Skipped::default();
        skipped.extend(read);
        skipped.extend(more);
        skipped
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        let room = KEEP.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        if bytes.len() >= KEEP {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - KEEP..]);
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * KEEP {
            self.tail.drain(..self.tail.len() - KEEP);
        }
    }

    fn finish(mut self) -> Skipped {
        if self.tail.len() > KEEP {
            self.tail.drain(..self.tail.len() - KEEP);
        }
        self
    }
}

/// Reads frames from `reader`, never holding more than `max` bytes of one.
///
/// [`LineReader::next`] is cancel-safe: a partly read frame is kept here,
/// not in the future, so the relay loop can `select!` on it directly.
pub struct LineReader<R> {
    reader: R,
    max: usize,
    /// The frame read so far.
    buf: Vec<u8>,
    /// An oversized frame being skipped.
    skipped: Option<Skipped>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(reader: R, max: usize) -> Self {
        LineReader {
            reader,
            max,
            buf: Vec::new(),
            skipped: None,
        }
    }

    pub async fn next(&mut self) -> std::io::Result<Line> {
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                // EOF: a final unterminated line still counts as a frame.
                return Ok(match (self.skipped.take(), self.buf.is_empty()) {
                    (Some(skipped), _) => Line::Oversized(skipped.finish()),
                    (None, true) => Line::Eof,
                    (None, false) => Line::Frame(std::mem::take(&mut self.buf)),
                });
            }
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            match &mut self.skipped {
                Some(skipped) => skipped.extend(&chunk[..take]),
                None if self.buf.len() + take > self.max => {
                    self.skipped = Some(Skipped::start(&self.buf, &chunk[..take]));
                    self.buf = Vec::new();
                }
                None => {
                    // Room for the `\n` the writer appends when it forwards.
                    self.buf.reserve(take + usize::from(done));
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            self.reader.consume(if done { take + 1 } else { take });
            if done {
                return Ok(match self.skipped.take() {
                    Some(skipped) => Line::Oversized(skipped.finish()),
                    None => Line::Frame(std::mem::take(&mut self.buf)),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8], max: usize) -> Vec<Line> {
        let mut reader = LineReader::new(tokio::io::BufReader::with_capacity(4, input), max);
        let mut out = Vec::new();
        loop {
            let line = reader.next().await.unwrap();
            let eof = line == Line::Eof;
            out.push(line);
            if eof {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn splits_and_skips_oversized_frames() {
        let lines = read_all(b"ab\n0123456789\ncd\nlast", 5).await;
        assert_eq!(
            lines,
            vec![
                Line::Frame(b"ab".to_vec()),
                Line::Oversized(Skipped {
                    len: 10,
                    head: b"0123456789".to_vec(),
                    tail: b"0123456789".to_vec(),
                }),
                Line::Frame(b"cd".to_vec()),
                Line::Frame(b"last".to_vec()),
                Line::Eof
            ],
            "the frame after an oversized one must still arrive intact"
        );
    }

    #[tokio::test]
    async fn a_cancelled_read_loses_nothing() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut reader = LineReader::new(tokio::io::BufReader::new(rx), 100);
        use tokio::io::AsyncWriteExt;
        tx.write_all(b"half of a ").await.unwrap();
        // The frame is incomplete: the read is pending and then dropped.
        let pending =
            tokio::time::timeout(std::time::Duration::from_millis(20), reader.next()).await;
        assert!(pending.is_err(), "no whole frame yet");
        tx.write_all(b"frame\nnext\n").await.unwrap();
        assert_eq!(
            reader.next().await.unwrap(),
            Line::Frame(b"half of a frame".to_vec())
        );
        assert_eq!(reader.next().await.unwrap(), Line::Frame(b"next".to_vec()));
    }

    #[tokio::test]
    async fn a_skipped_frame_keeps_its_first_and_last_bytes() {
        // No `\n` inside; a period that no offset of the ends lines up with.
        let frame: Vec<u8> = (0..3 * KEEP + 17)
            .map(|i| match (i % 251) as u8 {
                b'\n' => b'!',
                b => b,
            })
            .collect();
        let mut input = frame.clone();
        input.extend_from_slice(b"\nnext\n");
        let mut reader = LineReader::new(
            tokio::io::BufReader::with_capacity(1000, &input[..]),
            KEEP + 5,
        );
        let Line::Oversized(skipped) = reader.next().await.unwrap() else {
            panic!("the frame is over the ceiling");
        };
        assert_eq!(skipped.len, frame.len() as u64);
        assert_eq!(skipped.head, frame[..KEEP]);
        assert_eq!(skipped.tail, frame[frame.len() - KEEP..]);
        assert_eq!(reader.next().await.unwrap(), Line::Frame(b"next".to_vec()));
    }

    #[tokio::test]
    async fn frame_at_the_ceiling_passes() {
        assert_eq!(
            read_all(b"12345\n", 5).await[0],
            Line::Frame(b"12345".to_vec())
        );
    }
}

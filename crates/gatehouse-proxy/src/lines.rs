//! Newline-delimited frames with a size ceiling: memory stays bounded by the
//! ceiling, oversized frames are skipped to their end and reported.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One read result.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A frame without its `\n`.
    Frame(Vec<u8>),
    /// A frame longer than the ceiling was skipped; its length in bytes.
    Oversized(u64),
    Eof,
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
    /// Bytes of an oversized frame skipped so far.
    skipped: Option<u64>,
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
                    (Some(n), _) => Line::Oversized(n),
                    (None, true) => Line::Eof,
                    (None, false) => Line::Frame(std::mem::take(&mut self.buf)),
                });
            }
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            match &mut self.skipped {
                Some(n) => *n += take as u64,
                None if self.buf.len() + take > self.max => {
                    self.skipped = Some((self.buf.len() + take) as u64);
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
                    Some(n) => Line::Oversized(n),
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
                Line::Oversized(10),
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
    async fn frame_at_the_ceiling_passes() {
        assert_eq!(
            read_all(b"12345\n", 5).await[0],
            Line::Frame(b"12345".to_vec())
        );
    }
}

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
pub struct LineReader<R> {
    reader: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(reader: R, max: usize) -> Self {
        LineReader { reader, max }
    }

    pub async fn next(&mut self) -> std::io::Result<Line> {
        let mut buf = Vec::new();
        let mut skipped: Option<u64> = None;
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                // EOF: a final unterminated line still counts as a frame.
                return Ok(match (skipped, buf.is_empty()) {
                    (Some(n), _) => Line::Oversized(n),
                    (None, true) => Line::Eof,
                    (None, false) => Line::Frame(buf),
                });
            }
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            match &mut skipped {
                Some(n) => *n += take as u64,
                None if buf.len() + take > self.max => {
                    skipped = Some((buf.len() + take) as u64);
                    buf = Vec::new();
                }
                None => buf.extend_from_slice(&chunk[..take]),
            }
            self.reader.consume(if done { take + 1 } else { take });
            if done {
                return Ok(match skipped {
                    Some(n) => Line::Oversized(n),
                    None => Line::Frame(buf),
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
    async fn frame_at_the_ceiling_passes() {
        assert_eq!(
            read_all(b"12345\n", 5).await[0],
            Line::Frame(b"12345".to_vec())
        );
    }
}

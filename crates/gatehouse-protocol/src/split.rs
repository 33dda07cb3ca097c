//! A large line's longest string, held once. The relay keeps a line's bytes
//! (to forward them unchanged) and its parsed value (to judge it); for a
//! multi-megabyte tool result that would be the same text twice. A line of
//! at least [`SPLIT_MIN`] bytes whose longest string is written without
//! escapes keeps only the bytes around that string; the string's buffer
//! (the line's own, not a copy) moves into the value, and goes back in
//! place when the line is forwarded.

use std::ops::Range;

use serde_json::Value;

/// The shortest string worth moving: below it, a copy costs less than the
/// bookkeeping.
pub const SPLIT_MIN: usize = 1 << 20;

/// What stands for the moved string while the rest of the line is parsed,
/// as written in JSON and as read.
const MARK_WRITTEN: &str = r"\u0000gatehouse:split\u0000";
const MARK: &str = "\0gatehouse:split\0";

/// A line's bytes, as the relay forwards them.
#[derive(Debug)]
pub enum Raw {
    /// Every byte of the line.
    Whole(Vec<u8>),
    /// The line around its longest string, which the parsed value holds.
    Split(Split),
}

/// The bytes before and after a moved string, and where it is in the value.
#[derive(Debug)]
pub struct Split {
    head: Vec<u8>,
    tail: Vec<u8>,
    path: Vec<Step>,
    len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

impl Raw {
    /// The line's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Raw::Whole(bytes) => bytes.len(),
            Raw::Split(split) => split.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The line's first and last bytes (for [`crate::peek`]): a whole line
    /// is both.
    pub fn ends(&self) -> (&[u8], &[u8]) {
        match self {
            Raw::Whole(bytes) => (bytes, bytes),
            Raw::Split(split) => (&split.head, &split.tail),
        }
    }

    /// The line, byte for byte. A split line takes its string back out of
    /// `value`, the value it was parsed with (which keeps an empty string
    /// there); a whole line ignores `value`. The string's buffer becomes
    /// the line's, with room for the writer's `\n`.
    pub fn into_bytes(self, value: &mut Value) -> Vec<u8> {
        let split = match self {
            Raw::Whole(bytes) => return bytes,
            Raw::Split(split) => split,
        };
        let mut line = take_string(value, &split.path).into_bytes();
        debug_assert_eq!(
            line.len() + split.head.len() + split.tail.len(),
            split.len,
            "a split line is put back with the value it was parsed with"
        );
        let moved = line.len();
        line.reserve(split.head.len() + split.tail.len() + 1);
        line.resize(split.head.len() + moved, 0);
        line.copy_within(..moved, split.head.len());
        line[..split.head.len()].copy_from_slice(&split.head);
        line.extend_from_slice(&split.tail);
        line
    }
}

/// A large line parsed with its longest string moved into the value: the
/// value, the bytes around the string, and the text that was parsed (the
/// line with a placeholder for the string). `Err` gives the line back
/// untouched when it does not qualify: under [`SPLIT_MIN`], not UTF-8, its
/// longest string escaped, a key or not unique, or the rest not JSON (the
/// caller's own parse then says why).
pub(crate) fn parse_split(
    raw: Vec<u8>,
    parse: impl FnOnce(&str) -> Option<Value>,
) -> Result<(Value, Split, String), Vec<u8>> {
    let Some(string) = movable_string(&raw) else {
        return Err(raw);
    };
    let mut text = String::with_capacity(raw.len() - string.len() + MARK_WRITTEN.len());
    // UTF-8 was checked by `movable_string`; the cut is at ASCII quotes.
    text.push_str(std::str::from_utf8(&raw[..string.start]).unwrap_or_default());
    text.push_str(MARK_WRITTEN);
    text.push_str(std::str::from_utf8(&raw[string.end..]).unwrap_or_default());
    let parsed = parse(text.strip_suffix('\r').unwrap_or(&text));
    let Some(mut value) = parsed else {
        return Err(raw);
    };
    let mut paths = Vec::new();
    find_mark(&value, &mut Vec::new(), &mut paths);
    let Ok([path]) = <[Vec<Step>; 1]>::try_from(paths) else {
        return Err(raw);
    };
    let len = raw.len();
    let head = raw[..string.start].to_vec();
    let tail = raw[string.end..].to_vec();
    let mut bytes = raw;
    bytes.truncate(string.end);
    bytes.drain(..string.start);
    let moved = match String::from_utf8(bytes) {
        Ok(moved) => moved,
        Err(err) => {
            let mut raw = head;
            raw.extend_from_slice(err.as_bytes());
            raw.extend_from_slice(&tail);
            return Err(raw);
        }
    };
    *slot(&mut value, &path) = Value::String(moved);
    Ok((
        value,
        Split {
            head,
            tail,
            path,
            len,
        },
        text,
    ))
}

/// The contents of the line's longest string when it may move: the line
/// is UTF-8 and at least [`SPLIT_MIN`] long, and the string is written
/// without escapes or control characters (so its bytes are its value).
fn movable_string(raw: &[u8]) -> Option<Range<usize>> {
    if raw.len() < SPLIT_MIN || std::str::from_utf8(raw).is_err() {
        return None;
    }
    let string = longest_plain_string(raw)?;
    if string.len() < SPLIT_MIN / 2 {
        return None;
    }
    // Control characters are invalid in a JSON string: the line must fail
    // to parse as it would whole. Folded per chunk so it vectorizes.
    let control = raw[string.clone()]
        .chunks(4096)
        .any(|chunk| chunk.iter().fold(false, |seen, &b| seen | (b < 0x20)));
    (!control).then_some(string)
}

/// The contents (between the quotes) of the longest string written
/// without a backslash. Outside strings a `"` opens one; inside, only `"`
/// ends it and `\` escapes the next byte.
fn longest_plain_string(text: &[u8]) -> Option<Range<usize>> {
    let mut best: Option<Range<usize>> = None;
    let mut i = 0;
    while let Some(open) = memchr::memchr(b'"', &text[i..]) {
        let start = i + open + 1;
        let mut at = start;
        let mut escaped = false;
        let end = loop {
            let found = memchr::memchr2(b'"', b'\\', &text[at..])?;
            at += found;
            if text[at] == b'"' {
                break at;
            }
            escaped = true;
            at += 2;
            if at > text.len() {
                return best;
            }
        };
        if !escaped && best.as_ref().is_none_or(|b| end - start > b.len()) {
            best = Some(start..end);
        }
        i = end + 1;
    }
    best
}

/// Paths of the string values equal to the placeholder.
fn find_mark(value: &Value, path: &mut Vec<Step>, found: &mut Vec<Vec<Step>>) {
    match value {
        Value::String(s) if s == MARK => found.push(path.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                find_mark(item, path, found);
                path.pop();
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                path.push(Step::Key(key.clone()));
                find_mark(item, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The value at `path`, which `find_mark` found.
fn slot<'v>(value: &'v mut Value, path: &[Step]) -> &'v mut Value {
    path.iter().fold(value, |at, step| match step {
        Step::Key(key) => &mut at[key.as_str()],
        Step::Index(i) => &mut at[*i],
    })
}

/// Takes the string at `path` out of `value`, leaving an empty one.
fn take_string(value: &mut Value, path: &[Step]) -> String {
    match slot(value, path) {
        Value::String(s) => std::mem::take(s),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Option<Value> {
        serde_json::from_str(text).ok()
    }

    fn big(c: char) -> String {
        c.to_string().repeat(SPLIT_MIN + 3)
    }

    #[test]
    fn a_split_line_reads_and_writes_back_exactly() {
        let text = big('y');
        for line in [
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{text}"}}],"n":"short"}}}}"#
            ),
            format!("{{\"id\":\"a\",\"result\":{{\"t\":\"{text}\",\"x\":[1,\"\\\"q\"]}}}}\r"),
            format!(r#"{{"id":1,"result":["é{text}ü", "b"]}}"#),
        ] {
            let (mut value, split, _) =
                parse_split(line.clone().into_bytes(), parse).expect("splits");
            let whole: Value = serde_json::from_str(line.trim_end_matches('\r')).unwrap();
            assert_eq!(value, whole, "the value reads as the whole line does");
            assert!(split.head.len() + split.tail.len() < 200);
            let raw = Raw::Split(split);
            assert_eq!(raw.len(), line.len());
            assert_eq!(raw.into_bytes(&mut value), line.as_bytes());
        }
    }

    #[test]
    fn lines_that_cannot_split_come_back_untouched() {
        let text = big('y');
        let escaped = format!(r#"{{"id":1,"result":{{"t":"\n{text}"}}}}"#);
        let key = format!(r#"{{"id":1,"result":{{"{text}":1}}}}"#);
        let control = format!("{{\"id\":1,\"result\":{{\"t\":\"\t{text}\"}}}}");
        let twice = format!(r#"{{"id":1,"result":{{"t":"{text}","m":"{MARK_WRITTEN}"}}}}"#);
        let broken = format!(r#"{{"id":1,"result":{{"t":"{text}"}}"#);
        let small = r#"{"id":1,"result":{"t":"yyyy"}}"#.to_string();
        for line in [escaped, key, control, twice, broken, small] {
            let back = parse_split(line.clone().into_bytes(), parse).unwrap_err();
            assert_eq!(back, line.as_bytes());
        }
    }

    #[test]
    fn the_longest_plain_string_skips_escaped_quotes() {
        let text = br#"{"a":"x\"yyyyyyyy","b":"zzz","c":"\\"}"#;
        let r = longest_plain_string(text).unwrap();
        assert_eq!(&text[r], b"zzz");
        assert_eq!(longest_plain_string(br#"{"a":"unterminated"#), None);
        assert_eq!(longest_plain_string(b"\"ends in \\"), None);
    }

    proptest::proptest! {
        #[test]
        fn a_whole_line_is_its_bytes(bytes in proptest::collection::vec(0u8..=255, 0..64)) {
            proptest::prop_assert_eq!(Raw::Whole(bytes.clone()).into_bytes(&mut Value::Null), bytes);
        }
    }
}

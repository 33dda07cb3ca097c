//! A large line's longest string, held once. The relay keeps a line's bytes
//! (to forward them unchanged) and its parsed value (to judge it); for a
//! multi-megabyte tool result that would be the same text twice. A line of
//! at least [`SPLIT_MIN`] bytes keeps only the bytes around its longest
//! string; the string's buffer (the line's own, not a copy) moves into the
//! value, unescaped in place, and goes back, escaped in place, when the
//! line is forwarded. Only a string that writing back gives the same bytes
//! moves (see `movable_string` for the conditions).

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
#[derive(Debug, Clone, PartialEq)]
pub enum Raw {
    /// Every byte of the line.
    Whole(Vec<u8>),
    /// The line around its longest string, which the parsed value holds.
    Split(Split),
}

/// The bytes before and after a moved string, and where it is in the value.
#[derive(Debug, Clone, PartialEq)]
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
    /// the line's, with room for the writer's `\n`. Given any other value,
    /// a split line comes back empty: nothing goes on rather than other
    /// bytes.
    pub fn into_bytes(self, value: &mut Value) -> Vec<u8> {
        let split = match self {
            Raw::Whole(bytes) => return bytes,
            Raw::Split(split) => split,
        };
        let moved = take_string(value, &split.path).unwrap_or_default();
        assemble(&split.head, moved.into_bytes(), &split.tail, split.len)
    }

    /// The line of a frame that is not one object message (empty, not
    /// parsed, a batch): such a line is never split. Were it split, it would
    /// come back empty, as from [`Raw::into_bytes`] with another value.
    pub fn into_unsplit_bytes(self) -> Vec<u8> {
        self.into_bytes(&mut Value::Null)
    }
}

/// `head`, `moved` escaped in place, `tail`: the line of `len` bytes the
/// three were cut from, with room for the writer's `\n`. Empty when they
/// do not make up that line (a value other than the one parsed with it):
/// nothing rather than other bytes goes on.
fn assemble(head: &[u8], mut moved: Vec<u8>, tail: &[u8], len: usize) -> Vec<u8> {
    if !escape_in_place(
        &mut moved,
        head.len(),
        len.checked_sub(tail.len()),
        tail.len() + 1,
    ) {
        return Vec::new();
    }
    moved[..head.len()].copy_from_slice(head);
    moved.extend_from_slice(tail);
    moved
}

/// A large line parsed with its longest string moved into the value: the
/// value, the bytes around the string, and the text that was parsed (the
/// line with a placeholder for the string). `Err` gives the line back
/// untouched when it does not qualify (`movable_string`), is not UTF-8,
/// its longest string is a key or the placeholder is not unique, or the
/// rest is not JSON (the caller's own parse then says why).
pub(crate) fn parse_split(
    raw: Vec<u8>,
    parse: impl FnOnce(&str) -> Option<Value>,
) -> Result<(Value, Split, String), Vec<u8>> {
    let Some(string) = movable_string(&raw) else {
        return Err(raw);
    };
    // The cuts are at ASCII quotes, so the line is UTF-8 exactly when its
    // three parts are; the moved string is checked once, after it moved.
    let (Ok(head), Ok(tail)) = (
        std::str::from_utf8(&raw[..string.start]),
        std::str::from_utf8(&raw[string.end..]),
    ) else {
        return Err(raw);
    };
    let mut text = String::with_capacity(head.len() + MARK_WRITTEN.len() + tail.len());
    text.push_str(head);
    text.push_str(MARK_WRITTEN);
    text.push_str(tail);
    let parsed = parse(text.strip_suffix('\r').unwrap_or(&text));
    let Some(mut value) = parsed else {
        return Err(raw);
    };
    let mut marks = Marks::default();
    find_mark(&value, &mut Vec::new(), &mut marks);
    let Ok([path]) = <[Vec<Step>; 1]>::try_from(marks.values) else {
        return Err(raw);
    };
    if marks.keys > 0 {
        return Err(raw);
    }
    let len = raw.len();
    let head = raw[..string.start].to_vec();
    let tail = raw[string.end..].to_vec();
    let mut bytes = raw;
    bytes.truncate(string.end);
    bytes.drain(..string.start);
    unescape_in_place(&mut bytes);
    // Not UTF-8: the line goes back as it came (escaping undoes the
    // unescaping exactly), for the caller's parse to refuse.
    let moved = match String::from_utf8(bytes) {
        Ok(moved) => moved,
        Err(err) => return Err(assemble(&head, err.into_bytes(), &tail, len)),
    };
    let Some(slot) = slot(&mut value, &path) else {
        return Err(assemble(&head, moved.into_bytes(), &tail, len));
    };
    *slot = Value::String(moved);
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
/// is one object of at least [`SPLIT_MIN`] bytes, the string is at
/// least half of it, nothing else in the line writes a NUL, the string
/// holds no control character (invalid in JSON: the line must fail to
/// parse as it would whole) and writes each escape as serde_json would.
fn movable_string(raw: &[u8]) -> Option<Range<usize>> {
    if raw.len() < SPLIT_MIN {
        return None;
    }
    // One message (an object): a batch is never split.
    if raw.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let string = longest_string(raw)?;
    // Most of the line, or the kept bytes around it (and the moved
    // buffer's spare room) cost more than the copy they save.
    if string.len() < raw.len() / 2 {
        return None;
    }
    // A NUL can only be written `\u0000`: without one around the string,
    // no other string of the line can spell the placeholder, whatever
    // duplicate keys the parse drops.
    let nul = memchr::memmem::find(&raw[..string.start], br"\u0000").is_some()
        || memchr::memmem::find(&raw[string.end..], br"\u0000").is_some();
    if nul {
        return None;
    }
    let content = &raw[string.clone()];
    // Folded per chunk so it vectorizes.
    let control = content
        .chunks(4096)
        .any(|chunk| chunk.iter().fold(false, |seen, &b| seen | (b < 0x20)));
    (!control && escapes_are_canonical(content)).then_some(string)
}

/// The contents (between the quotes) of the line's longest string.
/// Outside strings a `"` opens one; inside, only `"` ends it and `\`
/// escapes the next byte.
fn longest_string(text: &[u8]) -> Option<Range<usize>> {
    let mut best: Option<Range<usize>> = None;
    let mut i = 0;
    while let Some(open) = memchr::memchr(b'"', &text[i..]) {
        let start = i + open + 1;
        let mut at = start;
        let end = loop {
            let found = memchr::memchr2(b'"', b'\\', &text[at..])?;
            at += found;
            if text[at] == b'"' {
                break at;
            }
            at += 2;
            if at > text.len() {
                return best;
            }
        };
        if best.as_ref().is_none_or(|b| end - start > b.len()) {
            best = Some(start..end);
        }
        i = end + 1;
    }
    best
}

/// The escape serde_json writes for a byte of a string, if any: `\` and
/// this letter, or (`Some(b'u')`) `\u00` and two lowercase hex digits.
fn escape_letter(b: u8) -> Option<u8> {
    match b {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        0x08 => Some(b'b'),
        0x0c => Some(b'f'),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b'\t' => Some(b't'),
        0..0x20 => Some(b'u'),
        _ => None,
    }
}

/// How serde_json writes byte `b` inside a string: its escape and the
/// escape's length, `None` when it writes the byte itself.
fn escaped(b: u8) -> Option<([u8; 6], usize)> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    Some(match escape_letter(b)? {
        b'u' => {
            let (hi, lo) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]);
            ([b'\\', b'u', b'0', b'0', hi, lo], 6)
        }
        letter => ([b'\\', letter, 0, 0, 0, 0], 2),
    })
}

/// Whether every escape in a string's contents is the one serde_json
/// writes for its character (`\/`, `\u0041` or `\u001F` are not).
fn escapes_are_canonical(content: &[u8]) -> bool {
    let mut i = 0;
    while let Some(at) = memchr::memchr(b'\\', &content[i..]) {
        i += at;
        let Some(byte) = unescape_at(content, i) else {
            return false;
        };
        let Some((written, len)) = escaped(byte) else {
            return false;
        };
        if !content[i..].starts_with(&written[..len]) {
            return false;
        }
        i += len;
    }
    true
}

/// The byte the escape at `at` stands for, when it stands for one byte.
fn unescape_at(content: &[u8], at: usize) -> Option<u8> {
    match *content.get(at + 1)? {
        b'b' => Some(0x08),
        b'f' => Some(0x0c),
        b'n' => Some(b'\n'),
        b'r' => Some(b'\r'),
        b't' => Some(b'\t'),
        b'u' => {
            let digits = std::str::from_utf8(content.get(at + 2..at + 6)?).ok()?;
            u8::try_from(u32::from_str_radix(digits, 16).ok()?).ok()
        }
        other => Some(other),
    }
}

/// Replaces each (canonical) escape in `bytes` by its byte.
fn unescape_in_place(bytes: &mut Vec<u8>) {
    let (mut read, mut write) = (0, 0);
    while let Some(at) = memchr::memchr(b'\\', &bytes[read..]) {
        let at = read + at;
        bytes.copy_within(read..at, write);
        write += at - read;
        let byte = unescape_at(bytes, at).unwrap_or(b'?');
        bytes[write] = byte;
        write += 1;
        read = at + if bytes[at + 1] == b'u' { 6 } else { 2 };
    }
    bytes.copy_within(read.., write);
    write += bytes.len() - read;
    bytes.truncate(write);
}

/// Escapes `bytes` in place as serde_json writes a string, after `front`
/// bytes left for the caller, with room for `spare` more at the end; false
/// (and `bytes` untouched) when the escaped string would not end at
/// `end`. Two passes, both skipping 64-byte chunks with nothing to escape:
/// one counts, one moves bytes from the back (each moves right, so none is
/// overwritten before it is read).
fn escape_in_place(bytes: &mut Vec<u8>, front: usize, end: Option<usize>, spare: usize) -> bool {
    const CHUNK: usize = 64;
    let needs = |b: u8| escape_letter(b).is_some();
    let clean = |chunk: &[u8]| !chunk.iter().fold(false, |seen, &b| seen | needs(b));
    let extra_of = |b: u8| match escape_letter(b) {
        Some(b'u') => 5,
        Some(_) => 1,
        None => 0,
    };
    let extra: usize = bytes
        .chunks(CHUNK)
        .filter(|chunk| !clean(chunk))
        .flat_map(|chunk| chunk.iter().map(|&b| extra_of(b)))
        .sum();
    let len = bytes.len();
    if end != Some(front + len + extra) {
        return false;
    }
    bytes.reserve(front + extra + spare);
    bytes.resize(front + len + extra, 0);
    let mut to = front + len + extra;
    let mut chunk_end = len;
    while chunk_end > 0 {
        let chunk_start = (chunk_end - 1) / CHUNK * CHUNK;
        if clean(&bytes[chunk_start..chunk_end]) {
            let run = chunk_end - chunk_start;
            bytes.copy_within(chunk_start..chunk_end, to - run);
            to -= run;
        } else {
            // From escape to escape: the bytes between move as one run.
            let mut end = chunk_end;
            while let Some(at) = bytes[chunk_start..end].iter().rposition(|&b| needs(b)) {
                let at = chunk_start + at;
                let run = end - (at + 1);
                bytes.copy_within(at + 1..end, to - run);
                to -= run;
                let (written, n) = escaped(bytes[at]).unwrap_or(([bytes[at]; 6], 1));
                bytes[to - n..to].copy_from_slice(&written[..n]);
                to -= n;
                end = at;
            }
            let run = end - chunk_start;
            bytes.copy_within(chunk_start..end, to - run);
            to -= run;
        }
        chunk_end = chunk_start;
    }
    debug_assert_eq!(to, front);
    true
}

/// Where the placeholder is in a parsed line.
#[derive(Default)]
struct Marks {
    /// Paths of the string values equal to it.
    values: Vec<Vec<Step>>,
    /// How many keys equal it.
    keys: usize,
}

/// Finds the placeholder. The moved string goes back only where exactly one
/// value and no key spells it: a string that was a key, or a line that
/// already held the placeholder's text, finds otherwise.
fn find_mark(value: &Value, path: &mut Vec<Step>, marks: &mut Marks) {
    match value {
        Value::String(s) if s == MARK => marks.values.push(path.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                find_mark(item, path, marks);
                path.pop();
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                marks.keys += usize::from(key == MARK);
                path.push(Step::Key(key.clone()));
                find_mark(item, path, marks);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The value at `path` (which `find_mark` found), looked up without
/// inserting anything.
fn slot<'v>(value: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    path.iter().try_fold(value, |at, step| match step {
        Step::Key(key) => at.get_mut(key.as_str()),
        Step::Index(i) => at.get_mut(*i),
    })
}

/// Takes the string at `path` out of `value`, leaving an empty one.
fn take_string(value: &mut Value, path: &[Step]) -> Option<String> {
    match slot(value, path)? {
        Value::String(s) => Some(std::mem::take(s)),
        _ => None,
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
            format!(r#"{{"id":1,"result":{{"t":"\n{text}\"\\\u0001\t\b\f\r\u001f"}}}}"#),
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

    /// Lines that are not UTF-8: in the string that would move (after an
    /// escape it unescapes), and around it.
    fn not_utf8(text: &str) -> [Vec<u8>; 2] {
        let mut inside = format!(r#"{{"id":1,"result":{{"t":"\n{text}"}}}}"#).into_bytes();
        let at = inside.len() - 10;
        inside[at] = 0xff;
        let mut around = format!(r#"{{"id":1,"result":{{"x":"é","t":"{text}"}}}}"#).into_bytes();
        let at = around.iter().position(|&b| b >= 0x80).expect("é");
        around[at] = 0xff;
        [inside, around]
    }

    #[test]
    fn lines_that_cannot_split_come_back_untouched() {
        let text = big('y');
        let written = |escape: &str| format!(r#"{{"id":1,"result":{{"t":"{escape}{text}"}}}}"#);
        let key = format!(r#"{{"id":1,"result":{{"{text}":1}}}}"#);
        // The longest string is a key; a value elsewhere spells the
        // placeholder: the value must not take the key's text.
        let key_and_mark = format!(r#"{{"id":1,"result":{{"{text}":1,"m":"{MARK_WRITTEN}"}}}}"#);
        let control = format!("{{\"id\":1,\"result\":{{\"t\":\"\t{text}\"}}}}");
        let twice = format!(r#"{{"id":1,"result":{{"t":"{text}","m":"{MARK_WRITTEN}"}}}}"#);
        let broken = format!(r#"{{"id":1,"result":{{"t":"{text}"}}"#);
        // The parse keeps the last of two `t`s: the placeholder's text.
        let duplicate = format!(r#"{{"id":1,"result":{{"t":"{text}","t":"{MARK_WRITTEN}"}}}}"#);
        let batch = format!(r#"[{{"id":1,"result":{{"t":"{text}"}}}}]"#);
        let half = format!(r#"{{"id":1,"result":{{"t":"{text}","u":"{text}z"}}}}"#);
        let small = r#"{"id":1,"result":{"t":"yyyy"}}"#.to_string();
        for (case, line) in [
            written(r"\/"),
            written(r"\u0041"),
            written(r"\u001F"),
            written(r"\u000a"),
            written(r"\ud83d\ude00"),
            key,
            key_and_mark,
            control,
            twice,
            broken,
            duplicate,
            batch,
            half,
            small,
        ]
        .into_iter()
        .map(String::into_bytes)
        .chain(not_utf8(&text))
        .enumerate()
        {
            let Err(back) = parse_split(line.clone(), parse) else {
                panic!("case {case} was split");
            };
            assert!(back == line, "case {case} came back changed");
        }
    }

    #[test]
    fn a_split_line_put_back_with_another_value_goes_on_as_nothing() {
        let line = format!(r#"{{"id":1,"result":{{"t":"{}"}}}}"#, big('y'));
        let (mut value, split, _) = parse_split(line.into_bytes(), parse).expect("splits");
        for mut other in [Value::Null, serde_json::json!({"result": {"t": "short"}})] {
            let raw = Raw::Split(split.clone());
            assert!(raw.into_bytes(&mut other).is_empty());
        }
        assert!(!Raw::Split(split).into_bytes(&mut value).is_empty());
    }

    #[test]
    fn the_longest_string_skips_escaped_quotes() {
        let text = br#"{"a":"x\"yyyyyyyy","b":"zzz","c":"\\"}"#;
        let r = longest_string(text).unwrap();
        assert_eq!(&text[r], br#"x\"yyyyyyyy"#);
        assert_eq!(longest_string(br#"{"a":"unterminated"#), None);
        assert_eq!(longest_string(b"\"ends in \\"), None);
    }

    proptest::proptest! {
        /// Escaping in place writes a string as serde_json does, and
        /// unescaping reads it back.
        #[test]
        fn escapes_are_serde_json_s(text in "[\\x00-\\x21\"\\\\/a-zé😀]{0,40}") {
            let written = serde_json::to_string(&text).unwrap();
            let content = &written.as_bytes()[1..written.len() - 1];
            proptest::prop_assert!(escapes_are_canonical(content));
            let mut bytes = text.clone().into_bytes();
            proptest::prop_assert!(escape_in_place(&mut bytes, 3, Some(3 + content.len()), 0));
            proptest::prop_assert_eq!(&bytes[3..], content);
            let mut back = content.to_vec();
            unescape_in_place(&mut back);
            proptest::prop_assert_eq!(back, text.into_bytes());
        }

        #[test]
        fn a_whole_line_is_its_bytes(bytes in proptest::collection::vec(0u8..=255, 0..64)) {
            proptest::prop_assert_eq!(Raw::Whole(bytes.clone()).into_bytes(&mut Value::Null), bytes);
        }
    }
}

//! One line of newline-delimited JSON-RPC: the original bytes, kept for
//! byte-for-byte forwarding, plus the parsed view that inspection uses.

use serde::Deserialize;
use serde_json::Value;

use crate::message::Message;
use crate::split::{parse_split, Raw};

/// Deepest nesting Gatehouse inspects. Deeper frames are reported as
/// [`FrameBody::TooDeep`]: the recursive walkers downstream (scanner,
/// serializer, drop) must not overflow the stack on attacker-chosen input.
pub const MAX_INSPECTABLE_DEPTH: usize = 4096;

/// A parsed line. `raw` excludes the line terminator.
#[derive(Debug)]
pub struct Frame {
    pub raw: Raw,
    pub body: FrameBody,
}

#[derive(Debug)]
pub enum FrameBody {
    /// One JSON-RPC message (or a JSON value that is not one; see its kind).
    Single(Message),
    /// A JSON-RPC batch (2025-03-26), judged element by element.
    Batch(Vec<Message>),
    /// Blank line.
    Empty,
    /// Nested deeper than [`MAX_INSPECTABLE_DEPTH`].
    TooDeep,
    /// Not UTF-8 or not JSON; the text says where.
    Unparseable(String),
}

/// Parses one line (without its `\n`; a trailing `\r` is tolerated). A
/// large single message's longest string is moved into its value rather
/// than copied ([`crate::split`]); [`Raw::into_bytes`] puts it back.
pub fn parse_frame(raw: Vec<u8>) -> Frame {
    let raw = match parse_split(raw, read_object) {
        Ok((value, split, text)) => {
            let mut msg = Message::from_value(value);
            msg.keep_id_text(text.as_bytes());
            return Frame {
                raw: Raw::Split(split),
                body: FrameBody::Single(msg),
            };
        }
        Err(raw) => raw,
    };
    let body = parse_body(&raw);
    Frame {
        raw: Raw::Whole(raw),
        body,
    }
}

fn parse_body(raw: &[u8]) -> FrameBody {
    let text = raw.strip_suffix(b"\r").unwrap_or(raw);
    if text.iter().all(u8::is_ascii_whitespace) {
        return FrameBody::Empty;
    }
    let text = match std::str::from_utf8(text) {
        Ok(text) => text,
        Err(err) => {
            return FrameBody::Unparseable(format!("invalid UTF-8 at byte {}", err.valid_up_to()))
        }
    };
    let parsed = match read_json(text) {
        Some(parsed) => parsed,
        None => return FrameBody::TooDeep,
    };
    match parsed {
        Ok(Value::Array(items)) if !items.is_empty() => {
            let mut items: Vec<Message> = items.into_iter().map(Message::from_value).collect();
            if items.iter().any(Message::id_read_as_double) {
                let written = crate::peek::array_items(text.as_bytes());
                for (item, written) in items.iter_mut().zip(written) {
                    item.keep_id_text(written);
                }
            }
            FrameBody::Batch(items)
        }
        Ok(value) => {
            let mut msg = Message::from_value(value);
            msg.keep_id_text(text.as_bytes());
            FrameBody::Single(msg)
        }
        Err(err) => FrameBody::Unparseable(format!(
            "invalid JSON at line {} column {}: {}",
            err.line(),
            err.column(),
            err.classify_name()
        )),
    }
}

/// The JSON value of `text` as inspection reads it: lone surrogate escapes
/// replaced, numbers beyond the double range clamped, no recursion limit
/// (serde_stacker). `None` when it nests deeper than
/// [`MAX_INSPECTABLE_DEPTH`].
fn read_json(text: &str) -> Option<Result<Value, serde_json::Error>> {
    let shape = shape(text.as_bytes());
    if shape.depth > MAX_INSPECTABLE_DEPTH {
        return None;
    }
    let sanitized;
    let text = if shape.surrogate_escape {
        sanitized = replace_lone_surrogates(text);
        &sanitized[..]
    } else {
        text
    };
    Some(
        parse_value(text).or_else(|err| match clamp_huge_numbers(text) {
            Some(clamped) => parse_value(&clamped).map_err(|_| err),
            None => Err(err),
        }),
    )
}

/// A line that reads as one JSON object (a split line is one message).
fn read_object(text: &str) -> Option<Value> {
    match read_json(text) {
        Some(Ok(value @ Value::Object(_))) => Some(value),
        _ => None,
    }
}

/// A forwarded line's JSON value, read exactly as [`parse_frame`] reads it,
/// for a check that runs after the relay's (so both agree on every line
/// the relay judged; serde_json's own `from_slice` stops at 128 levels and
/// refuses `1e400`). `None` for a line that is not such JSON.
pub fn json_value(raw: &[u8]) -> Option<Value> {
    let text = raw.strip_suffix(b"\r").unwrap_or(raw);
    read_json(std::str::from_utf8(text).ok()?)?.ok()
}

/// [`json_value`] for a line the caller owns: a large single message's
/// longest string is moved into the value, not copied; [`Raw::into_bytes`]
/// gives the line back.
pub fn json_value_owned(raw: Vec<u8>) -> (Raw, Option<Value>) {
    match parse_split(raw, read_object) {
        Ok((value, split, _)) => (Raw::Split(split), Some(value)),
        Err(raw) => {
            let value = json_value(&raw);
            (Raw::Whole(raw), value)
        }
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "data error",
            serde_json::error::Category::Eof => "unexpected end of input",
        }
    }
}

/// Readies this thread for parsing: the first parse on a thread looks up
/// its stack bounds (glibc reads `/proc/self/maps` for the main thread),
/// which otherwise lands on the first frame. Wrap calls it while the
/// server starts.
pub fn prepare_thread() {
    let _ = parse_value("{}");
}

/// Parses without serde_json's recursion limit; serde_stacker grows the
/// stack on the heap as needed. From `&str`: the UTF-8 was checked once.
fn parse_value(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Numbers beyond the double range (`1e400`) are valid JSON that serde_json
/// refuses. The parsed view reads them as the largest double of their sign
/// (the raw bytes are what is forwarded); `None` when there is none, so
/// the parse error stands.
fn clamp_huge_numbers(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut clamped) = (0, false);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Skip the string: only an unescaped `"` ends it.
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let number = &text[start..i];
                if number.parse::<f64>().is_ok_and(f64::is_infinite) {
                    out.push_str(&text[copied..start]);
                    out.push_str(if number.starts_with('-') {
                        "-1.7976931348623157e308"
                    } else {
                        "1.7976931348623157e308"
                    });
                    (copied, clamped) = (i, true);
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    clamped.then_some(out)
}

/// What one pass over a line finds before it is parsed.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    /// Maximum nesting of arrays and objects, ignoring brackets inside strings.
    depth: usize,
    /// A `\uD…` escape inside a string: a surrogate that may be lone.
    surrogate_escape: bool,
}

/// One pass on every frame, so it skips through string contents with
/// `memchr` (a result's text is most of its bytes) instead of byte by byte.
fn shape(text: &[u8]) -> Shape {
    let (mut depth, mut max, mut surrogate_escape) = (0usize, 0usize, false);
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                // Inside a string: only `"` ends it and only `\` escapes.
                i += 1;
                loop {
                    let Some(at) = memchr::memchr2(b'"', b'\\', &text[i..]) else {
                        // Unterminated: the parser reports it.
                        i = text.len();
                        break;
                    };
                    i += at;
                    if text[i] == b'"' {
                        break;
                    }
                    surrogate_escape |= text.get(i + 1) == Some(&b'u')
                        && matches!(text.get(i + 2), Some(b'd' | b'D'));
                    i = (i + 2).min(text.len());
                }
            }
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Shape {
        depth: max,
        surrogate_escape,
    }
}

/// Rewrites `\uD800`–`\uDFFF` escapes that do not form a valid pair into
/// `\uFFFD`, so the parsed view keeps every other character. JavaScript
/// clients accept lone surrogates; refusing them would make a parser
/// difference, and the raw bytes are what gets forwarded anyway.
fn replace_lone_surrogates(text: &str) -> String {
    let text = text.as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    let mut in_string = false;
    while i < text.len() {
        let b = text[i];
        if !in_string {
            in_string = b == b'"';
            out.push(b);
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = false;
                out.push(b);
                i += 1;
            }
            b'\\' if text.get(i + 1) == Some(&b'u') => {
                let unit = hex4(&text[i + 2..]);
                match unit {
                    Some(hi @ 0xD800..=0xDBFF) => {
                        let lo = (text.get(i + 6) == Some(&b'\\')
                            && text.get(i + 7) == Some(&b'u'))
                        .then(|| hex4(&text[i + 8..]))
                        .flatten();
                        if matches!(lo, Some(0xDC00..=0xDFFF)) {
                            out.extend_from_slice(&text[i..i + 12]);
                            i += 12;
                        } else {
                            let _ = hi;
                            out.extend_from_slice(b"\\uFFFD");
                            i += 6;
                        }
                    }
                    Some(0xDC00..=0xDFFF) => {
                        out.extend_from_slice(b"\\uFFFD");
                        i += 6;
                    }
                    _ => {
                        out.extend_from_slice(&text[i..(i + 2).min(text.len())]);
                        i += 2;
                    }
                }
            }
            b'\\' => {
                out.extend_from_slice(&text[i..(i + 2).min(text.len())]);
                i += 2;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    // Only ASCII escapes were replaced (by ASCII); every other byte is
    // copied in order, so the text is still UTF-8.
    String::from_utf8(out)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

fn hex4(bytes: &[u8]) -> Option<u32> {
    let digits = bytes.get(..4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_value_reads_what_parse_frame_reads() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"a":{}1{}}}}}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        for line in [
            deep.as_str(),
            r#"{"id":1,"params":{"n":1e400}}"#,
            r#"{"id":1,"params":{"s":"\ud800 lone"}}"#,
            "{\"id\":1}\r",
        ] {
            let value = json_value(line.as_bytes());
            assert!(value.is_some(), "read: {line:.60}");
            assert!(matches!(
                parse_frame(line.as_bytes().to_vec()).body,
                FrameBody::Single(_)
            ));
        }
        let too_deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        assert_eq!(json_value(too_deep.as_bytes()), None);
        assert_eq!(json_value(b"not json"), None);
        assert_eq!(json_value(b"{\"a\":NaN}"), None);
    }
    use crate::message::{MessageKind, RequestId};

    fn body(line: &str) -> FrameBody {
        parse_frame(line.as_bytes().to_vec()).body
    }

    /// The byte-by-byte walk `shape` replaced, kept as its oracle.
    fn shape_byte_by_byte(text: &[u8]) -> Shape {
        let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
        let mut surrogate_escape = false;
        for (i, &b) in text.iter().enumerate() {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => {
                        escaped = true;
                        surrogate_escape |= text.get(i + 1) == Some(&b'u')
                            && matches!(text.get(i + 2), Some(b'd' | b'D'));
                    }
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        Shape {
            depth: max,
            surrogate_escape,
        }
    }

    proptest::proptest! {
        #[test]
        fn shape_agrees_with_the_byte_by_byte_walk(
            text in proptest::collection::vec(proptest::sample::select(
                b"[]{}\"\\uUdD0x ".to_vec()), 0..64)
        ) {
            proptest::prop_assert_eq!(shape(&text), shape_byte_by_byte(&text));
        }
    }

    #[test]
    fn shape_sees_escapes_only_inside_strings() {
        let s = |t: &str| shape(t.as_bytes());
        assert!(s(r#"{"a":"\ud800"}"#).surrogate_escape);
        assert!(s(r#"{"a":"\uDC00"}"#).surrogate_escape);
        assert!(
            !s(r#"{"a":"\\ud800"}"#).surrogate_escape,
            "an escaped backslash"
        );
        assert!(!s(r#"{"a":"\u0041"}"#).surrogate_escape);
        assert_eq!(
            s(r#"{"a":"[[\"{{"}"#).depth,
            1,
            "brackets after an escaped quote"
        );
        assert_eq!(s(r#"[{"a":"unterminated [["#).depth, 2);
        assert_eq!(s(r#""ends in a backslash \"#).depth, 0);
    }

    #[test]
    fn lone_surrogates_parse_as_replacement_characters() {
        let FrameBody::Single(msg) =
            body(r#"{"jsonrpc":"2.0","id":1,"result":{"t":"a\ud800b\udc00c"}}"#)
        else {
            panic!("a lone surrogate escape is valid JSON text and must parse");
        };
        assert_eq!(msg.value["result"]["t"], "a\u{FFFD}b\u{FFFD}c");
    }

    #[test]
    fn surrogate_pairs_stay_intact() {
        // U+E0041 (TAG LATIN CAPITAL LETTER A) as an escaped pair.
        let FrameBody::Single(msg) =
            body(r#"{"jsonrpc":"2.0","id":1,"result":{"t":"\uDB40\uDC41"}}"#)
        else {
            panic!("valid pair must parse");
        };
        assert_eq!(msg.value["result"]["t"], "\u{E0041}");
    }

    #[test]
    fn deep_nesting_within_the_limit_parses() {
        let depth = 3000;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{}1{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(
            matches!(body(&line), FrameBody::Single(_)),
            "3000 levels is valid JSON"
        );
        let too_deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        assert!(matches!(body(&too_deep), FrameBody::TooDeep));
    }

    #[test]
    fn brackets_inside_strings_do_not_count_as_depth() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{{"s":"{}"}}}}"#,
            "[".repeat(9000)
        );
        assert!(matches!(body(&line), FrameBody::Single(_)));
    }

    #[test]
    fn batches_are_split() {
        let FrameBody::Batch(items) = body(
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
        ) else {
            panic!("an array of messages is a batch");
        };
        assert_eq!(items.len(), 2);
        assert!(matches!(items[1].kind, MessageKind::Notification { .. }));
    }

    #[test]
    fn garbage_is_unparseable_with_position() {
        let FrameBody::Unparseable(why) = body("Server started on stdio") else {
            panic!("a banner is not JSON");
        };
        assert!(why.contains("line 1 column"), "{why}");
        assert!(matches!(
            body("{\"a\":1} trailing"),
            FrameBody::Unparseable(_)
        ));
        assert!(matches!(
            parse_frame(vec![b'{', 0xff, b'}']).body,
            FrameBody::Unparseable(_)
        ));
        assert!(matches!(body("  \r"), FrameBody::Empty));
    }

    #[test]
    fn ids_read_as_doubles_keep_their_text() {
        let id = |line: &str| match body(line) {
            FrameBody::Single(msg) => msg.id().cloned(),
            other => panic!("{other:?}"),
        };
        let text = |id: Option<RequestId>| match id {
            Some(RequestId::Number(text)) => text,
            other => panic!("{other:?}"),
        };
        for n in ["18446744073709551616", "1e2", "-0", "1.50", "7"] {
            let line = format!(r#"{{"jsonrpc":"2.0","method":"x","params":{{"id":1}},"id":{n}}}"#);
            assert_eq!(text(id(&line)), n);
        }
        // Duplicate ids: the parsed view has the last; a different first
        // one is never taken for it.
        assert_eq!(
            text(id(r#"{"jsonrpc":"2.0","id":1e2,"id":2e2,"method":"x"}"#)),
            "200.0"
        );
        let FrameBody::Batch(items) = body(
            r#"[{"jsonrpc":"2.0","id":1,"method":"x"}, {"jsonrpc":"2.0","id":{"a":1},"method":"x"},{"id":3E0,"jsonrpc":"2.0","method":"x"}]"#,
        ) else {
            panic!("a batch");
        };
        assert_eq!(text(items[2].id().cloned()), "3E0");
    }

    #[test]
    fn numbers_beyond_the_double_range_parse() {
        let FrameBody::Single(msg) = body(
            r#"{"jsonrpc":"2.0","id":1,"result":{"n":1e400,"m":-2E+999,"k":123456789012345678901234567890,"s":"1e400"}}"#,
        ) else {
            panic!("1e400 is valid JSON");
        };
        assert_eq!(msg.value["result"]["n"], f64::MAX);
        assert_eq!(msg.value["result"]["m"], f64::MIN);
        assert_eq!(msg.value["result"]["s"], "1e400", "strings are untouched");
        assert!(matches!(body(r#"{"a":1e400,}"#), FrameBody::Unparseable(_)));
    }

    #[test]
    fn crlf_is_tolerated_and_raw_is_kept() {
        let frame = parse_frame(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\r".to_vec());
        assert!(matches!(frame.body, FrameBody::Single(_)));
        assert_eq!(
            frame.raw.ends().1.last(),
            Some(&b'\r'),
            "raw bytes are forwarded unchanged"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10))]
        /// A line of 1 MiB or more reads as it reads whole and goes on
        /// byte for byte, whether its longest string moves (escapes as
        /// serde_json writes them) or stays (one written otherwise).
        #[test]
        fn a_large_line_reads_as_whole_and_writes_back_exactly(
            pattern in "[a-z \"\\\\\n\t\u{1}\u{1f}é😀/]{1,8}",
            others in proptest::collection::vec(("[a-z]{1,3}", "[a-z\"\\\\ ]{0,5}"), 0..4),
            at in 0usize..4,
            written_otherwise in proptest::bool::ANY,
        ) {
            let mut big = pattern.repeat(crate::split::SPLIT_MIN / pattern.len() + 1);
            let middle = (big.len() / 2..).find(|&i| big.is_char_boundary(i)).unwrap_or(0);
            big.insert(middle, '§');
            let mut result = serde_json::Map::new();
            for (i, (key, value)) in others.iter().enumerate() {
                if i == at {
                    result.insert("BIG".into(), Value::String(big.clone()));
                }
                result.insert(key.clone(), Value::String(value.clone()));
            }
            if !result.contains_key("BIG") {
                result.insert("BIG".into(), serde_json::json!([1, big]));
            }
            let mut line = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string();
            if written_otherwise {
                line = line.replace('§', "\\u00a7");
            }
            let whole = json_value(line.as_bytes()).expect("valid JSON");

            let frame = parse_frame(line.clone().into_bytes());
            proptest::prop_assert_eq!(matches!(frame.raw, Raw::Split(_)), !written_otherwise);
            let FrameBody::Single(mut msg) = frame.body else {
                panic!("one message");
            };
            proptest::prop_assert!(msg.value == whole, "the value differs");
            proptest::prop_assert!(frame.raw.into_bytes(&mut msg.value) == line.as_bytes(), "the bytes differ");

            let (raw, value) = json_value_owned(line.clone().into_bytes());
            let mut value = value.expect("valid JSON");
            proptest::prop_assert!(value == whole, "the owned value differs");
            proptest::prop_assert!(raw.into_bytes(&mut value) == line.as_bytes(), "the owned bytes differ");
        }
    }

    #[test]
    fn a_large_result_moves_its_text_and_forwards_it_exactly() {
        let text = "y".repeat(crate::split::SPLIT_MIN);
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3.0,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}}}}\r"
        );
        let frame = parse_frame(line.clone().into_bytes());
        assert!(matches!(frame.raw, Raw::Split(_)), "the text is held once");
        let FrameBody::Single(mut msg) = frame.body else {
            panic!("one message");
        };
        assert_eq!(msg.value["result"]["content"][0]["text"], text.as_str());
        assert_eq!(msg.id().map(ToString::to_string).as_deref(), Some("3.0"));
        assert_eq!(frame.raw.into_bytes(&mut msg.value), line.as_bytes());

        let (raw, value) = json_value_owned(line.clone().into_bytes());
        assert!(matches!(raw, Raw::Split(_)));
        let mut value = value.expect("JSON");
        assert_eq!(Some(&value), json_value(line.as_bytes()).as_ref());
        assert_eq!(raw.into_bytes(&mut value), line.as_bytes());
    }
}

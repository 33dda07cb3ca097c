//! What can be read of a frame Gatehouse will not parse whole — too large,
//! nested too deeply, or broken further on: its top-level `id` and whether
//! it is a request or a response, so the peer that sent it gets an error
//! instead of waiting forever for an answer.
//!
//! Reads the head of the line member by member, and the tail backwards
//! (`…,"id":7}` is how many encoders end a message whose `params` come
//! first). Anything unexpected gives up rather than guesses.

use crate::message::RequestId;

/// The readable part of an unparsed frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peek {
    pub id: RequestId,
    pub kind: PeekKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeekKind {
    /// A `method` member came before the head ran out.
    Request,
    /// A `result` or `error` member came first.
    Response,
    /// Neither was seen.
    Unknown,
}

/// Peeks at a frame from its first bytes and its last bytes (the same
/// slice twice when the whole line is at hand).
pub fn peek(head: &[u8], tail: &[u8]) -> Option<Peek> {
    let (head_id, kind) = read_head(head);
    let id = head_id.or_else(|| read_tail(tail))?;
    Some(Peek { id, kind })
}

/// Walks the top-level object's members from the start until the bytes run
/// out or something is not JSON: the `id` if its value is complete, and
/// which of `method`, `result`, `error` came first.
fn read_head(bytes: &[u8]) -> (Option<RequestId>, PeekKind) {
    // A byte order mark is not JSON, but the id behind it is still the id.
    let bom = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
    let mut at = skip_ws(bytes, bom);
    let (mut id, mut kind) = (None, PeekKind::Unknown);
    if bytes.get(at) != Some(&b'{') {
        return (id, kind);
    }
    at += 1;
    loop {
        at = skip_ws(bytes, at);
        let Some(key_end) = string_end(bytes, at) else {
            break;
        };
        let key = decode_string(&bytes[at..key_end]);
        at = skip_ws(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            break;
        }
        at = skip_ws(bytes, at + 1);
        match key.as_deref() {
            Some("method") if kind == PeekKind::Unknown => kind = PeekKind::Request,
            Some("result" | "error") if kind == PeekKind::Unknown => kind = PeekKind::Response,
            _ => {}
        }
        let Some(value_end) = value_end(bytes, at) else {
            break;
        };
        if key.as_deref() == Some("id") && id.is_none() {
            id = RequestId::from_token(&bytes[at..value_end]);
        }
        at = skip_ws(bytes, value_end);
        if bytes.get(at) != Some(&b',') {
            break;
        }
        at += 1;
    }
    (id, kind)
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The top-level `id` of a whole object as written (a number keeps its text).
pub(crate) fn head_id(object: &[u8]) -> Option<RequestId> {
    read_head(object).0
}

/// The elements of a whole top-level array, as written.
pub(crate) fn array_items(array: &[u8]) -> Vec<&[u8]> {
    let mut items = Vec::new();
    let mut at = skip_ws(array, 0);
    if array.get(at) != Some(&b'[') {
        return items;
    }
    at += 1;
    loop {
        at = skip_ws(array, at);
        let Some(end) = value_end(array, at) else {
            break;
        };
        items.push(&array[at..end]);
        at = skip_ws(array, end);
        if array.get(at) != Some(&b',') {
            break;
        }
        at += 1;
    }
    items
}

/// Reads `"id": <number or string> }` backwards from the end of the line.
/// The last `}` of a valid line closes the top-level object, so the member
/// right before it is a top-level member.
fn read_tail(bytes: &[u8]) -> Option<RequestId> {
    let mut end = skip_ws_back(bytes, bytes.len());
    if end == 0 || bytes[end - 1] != b'}' {
        return None;
    }
    end = skip_ws_back(bytes, end - 1);
    let value_start = if end > 0 && bytes[end - 1] == b'"' {
        string_start(bytes, end - 1)?
    } else {
        let mut start = end;
        while start > 0
            && matches!(
                bytes[start - 1],
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
            )
        {
            start -= 1;
        }
        start
    };
    if value_start == end {
        return None;
    }
    let id = RequestId::from_token(&bytes[value_start..end])?;
    let colon = skip_ws_back(bytes, value_start);
    if colon == 0 || bytes[colon - 1] != b':' {
        return None;
    }
    let key_end = skip_ws_back(bytes, colon - 1);
    if key_end == 0 || bytes[key_end - 1] != b'"' {
        return None;
    }
    let key_start = string_start(bytes, key_end - 1)?;
    if decode_string(&bytes[key_start..key_end]).as_deref() != Some("id") {
        return None;
    }
    let before = skip_ws_back(bytes, key_start);
    (before > 0 && matches!(bytes[before - 1], b',' | b'{')).then_some(id)
}

fn decode_string(token: &[u8]) -> Option<String> {
    serde_json::from_slice(token).ok()
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && bytes[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

fn skip_ws_back(bytes: &[u8], mut end: usize) -> usize {
    while end > 0 && bytes[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    end
}

/// End (exclusive) of the string starting at `at`, when it ends in `bytes`.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Start of the string whose closing quote is at `close`: the nearest
/// quote before it that is not escaped (preceded by an even run of `\`).
fn string_start(bytes: &[u8], close: usize) -> Option<usize> {
    let mut i = close;
    while i > 0 {
        i -= 1;
        if bytes[i] == b'"' {
            let backslashes = bytes[..i].iter().rev().take_while(|&&b| b == b'\\').count();
            if backslashes % 2 == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// End (exclusive) of the JSON value starting at `at`, when it ends in
/// `bytes`: strings and brackets are followed, scalars run to a delimiter.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let len = bytes[at..]
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())?;
            Some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;
    use serde_json::Value;

    fn whole(line: &str) -> Option<Peek> {
        peek(line.as_bytes(), line.as_bytes())
    }

    fn number(n: &str) -> RequestId {
        RequestId::Number(n.into())
    }

    fn message(id: &Value, request: bool, payload: &str, id_last: bool) -> String {
        let mut map = serde_json::Map::new();
        map.insert("jsonrpc".into(), "2.0".into());
        if !id_last {
            map.insert("id".into(), id.clone());
        }
        if request {
            map.insert("method".into(), "tools/call".into());
            map.insert(
                "params".into(),
                serde_json::json!({"id": 0, "text": payload}),
            );
        } else {
            map.insert(
                "result".into(),
                serde_json::json!({"text": payload, "id": "x"}),
            );
        }
        if id_last {
            map.insert("id".into(), id.clone());
        }
        Value::Object(map).to_string()
    }

    proptest::proptest! {
        /// Whole or cut anywhere, a peek never names another message's id,
        /// and the whole line always gives the id.
        #[test]
        fn a_peek_is_never_wrong(
            id in proptest::prop_oneof![
                proptest::num::i64::ANY.prop_map(Value::from),
                "[a-z\\\\\"{}:, ]{0,8}".prop_map(Value::from),
            ],
            request: bool,
            id_last: bool,
            payload in "[a-z\\\\\"{}:, ]{0,40}",
            cut_head in 0usize..200,
            cut_tail in 0usize..200,
        ) {
            let line = message(&id, request, &payload, id_last);
            let expected = RequestId::from_value(&id);
            let whole = peek(line.as_bytes(), line.as_bytes());
            proptest::prop_assert_eq!(whole.as_ref().map(|p| p.id.clone()), expected.clone());
            let kind = if request { PeekKind::Request } else { PeekKind::Response };
            proptest::prop_assert_eq!(whole.map(|p| p.kind), Some(kind));
            let bytes = line.as_bytes();
            let head = &bytes[..cut_head.min(bytes.len())];
            let tail = &bytes[bytes.len() - cut_tail.min(bytes.len())..];
            if let Some(p) = peek(head, tail) {
                proptest::prop_assert_eq!(Some(p.id), expected);
            }
        }
    }

    #[test]
    fn an_id_before_the_payload_is_read_from_the_head() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"x":"#;
        assert_eq!(
            peek(line.as_bytes(), b""),
            Some(Peek {
                id: number("7"),
                kind: PeekKind::Request
            })
        );
        let line = r#"{"jsonrpc":"2.0","id":"a\"b","result":{"content":[{"text":"…"#;
        assert_eq!(
            peek(line.as_bytes(), "…".as_bytes()),
            Some(Peek {
                id: RequestId::String("a\"b".into()),
                kind: PeekKind::Response
            })
        );
    }

    #[test]
    fn an_id_after_the_payload_is_read_from_the_tail() {
        let head = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"x":"yyyy"#;
        let tail = br#"yyyy"}},"id":12}"#;
        assert_eq!(
            peek(head, tail),
            Some(Peek {
                id: number("12"),
                kind: PeekKind::Request
            })
        );
        assert_eq!(
            peek(b"{\"params\":{\"x\":\"yy", b"yy\"}, \"id\" : \"k-1\" }\r\n")
                .map(|p| (p.id, p.kind)),
            Some((RequestId::String("k-1".into()), PeekKind::Unknown))
        );
    }

    #[test]
    fn nested_or_quoted_ids_are_not_top_level() {
        // The id inside params, or inside a string, is not the message's.
        assert_eq!(whole(r#"{"method":"x","params":{"id":3}}"#), None);
        assert_eq!(
            peek(b"{\"method\":\"x\",\"params\":{\"a\":1", br#"{"id":3}}"#),
            None
        );
        assert_eq!(peek(b"{\"method\":\"x\"", br#""s":"a\",\"id\":3}"}"#), None);
        assert_eq!(peek(b"{\"method\":\"x\"", br#"  "a":{"id":3}}"#), None);
    }

    #[test]
    fn escaped_quotes_before_the_tail_id_are_handled() {
        assert_eq!(
            peek(b"{\"method\":\"x\",\"p\":\"", br#"q\\","id":"z\"}"}"#).map(|p| p.id),
            Some(RequestId::String("z\"}".into()))
        );
    }

    #[test]
    fn garbage_and_ids_that_are_not_ids_give_nothing() {
        assert_eq!(whole("Server started"), None);
        assert_eq!(whole(r#"{"jsonrpc":"2.0","id":null,"error":{}}"#), None);
        assert_eq!(whole(r#"{"jsonrpc":"2.0","id":[1],"method":"x"}"#), None);
        assert_eq!(whole(r#"{"id":"#), None);
        assert_eq!(
            whole(r#"{"jsonrpc":"2.0","id":4,"result":{"a":tru"#).map(|p| p.id),
            Some(number("4"))
        );
        assert_eq!(peek(b"", b""), None);
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_the_id() {
        assert_eq!(
            whole("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}"),
            Some(Peek {
                id: number("5"),
                kind: PeekKind::Response
            })
        );
    }

    #[test]
    fn numbers_keep_their_textual_form() {
        let text = |line: &str| match whole(line).map(|p| p.id) {
            Some(RequestId::Number(text)) => text,
            other => panic!("{other:?}"),
        };
        assert_eq!(text(r#"{"id":1e2,"method":"x"}"#), "1e2");
        assert_eq!(
            text(r#"{"method":"x","id":18446744073709551616}"#),
            "18446744073709551616"
        );
        assert_eq!(
            whole(r#"{"id":1.50,"method":"x"}"#).map(|p| p.id),
            RequestId::from_value(&serde_json::json!(1.5))
        );
        assert_eq!(
            whole(r#"{"method":"x","id":-3}"#).map(|p| p.id),
            Some(number("-3"))
        );
    }
}

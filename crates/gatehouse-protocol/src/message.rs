//! One JSON-RPC message: the parsed value plus what kind of message it is.

use std::fmt;

use serde_json::{Map, Value};

/// A JSON-RPC id: a string or a number, never null.
///
/// A number keeps the text it arrived with, so answers Gatehouse writes
/// echo it exactly ([`message_line`]). Two numbers are the same id when
/// serde_json reads them as the same number, kind included: `1e2` and
/// `100.0` are one id (a server that re-encodes `1e2` still answers it),
/// `1` and `1.0` stay two, as they are on the wire.
#[derive(Clone, Debug)]
pub enum RequestId {
    Number(String),
    String(String),
}

impl RequestId {
    /// From a parsed value; a number's text is serde_json's, which differs
    /// from the wire for numbers read as doubles (see [`RequestId::from_token`]).
    pub fn from_value(value: &Value) -> Option<RequestId> {
        match value {
            Value::Number(n) => Some(RequestId::Number(n.to_string())),
            Value::String(s) => Some(RequestId::String(s.clone())),
            _ => None,
        }
    }

    /// From the id's own JSON text, which a number keeps.
    pub fn from_token(token: &[u8]) -> Option<RequestId> {
        let token = token.trim_ascii();
        match serde_json::from_slice(token).ok()? {
            Value::Number(_) => Some(RequestId::Number(String::from_utf8(token.to_vec()).ok()?)),
            value => RequestId::from_value(&value),
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => serde_json::from_str(n).unwrap_or(Value::Null),
            RequestId::String(s) => Value::String(s.clone()),
        }
    }

    /// The number as serde_json prints it: what ids are compared by.
    fn number_key(text: &str) -> std::borrow::Cow<'_, str> {
        // Integers up to 18 digits print as they are written (`-0` does not).
        let digits = text.strip_prefix('-').unwrap_or(text);
        let plain = !digits.is_empty()
            && digits.len() <= 18
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'))
            && text != "-0";
        if plain {
            return text.into();
        }
        match serde_json::from_str::<serde_json::Number>(text) {
            Ok(n) => n.to_string().into(),
            Err(_) => text.into(),
        }
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &RequestId) -> bool {
        match (self, other) {
            (RequestId::Number(a), RequestId::Number(b)) => {
                a == b || Self::number_key(a) == Self::number_key(b)
            }
            (RequestId::String(a), RequestId::String(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for RequestId {}

impl std::hash::Hash for RequestId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            RequestId::Number(n) => Self::number_key(n).hash(state),
            RequestId::String(s) => s.hash(state),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => f.write_str(n),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// What a JSON-RPC message is, read off its members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageKind {
    Request {
        id: RequestId,
        method: String,
    },
    Notification {
        method: String,
    },
    Response {
        id: RequestId,
        is_error: bool,
    },
    /// An error response whose id could not be read (`"id": null`).
    OrphanError,
    /// Valid JSON that is not a JSON-RPC message; the reason says why.
    Invalid(&'static str),
}

/// A parsed JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub value: Value,
    pub kind: MessageKind,
}

impl Message {
    pub fn from_value(value: Value) -> Message {
        let kind = classify(&value);
        Message { value, kind }
    }

    /// serde_json reads a number beyond i64/u64 as a double (`1e2`, `-0`,
    /// `18446744073709551616`), so such an id's text is read again from
    /// the message as written.
    pub(crate) fn keep_id_text(&mut self, written: &[u8]) {
        if !self.id_read_as_double() {
            return;
        }
        let Some(exact) = crate::peek::head_id(written) else {
            return;
        };
        if let MessageKind::Request { id, .. } | MessageKind::Response { id, .. } = &mut self.kind {
            // The first `id` member; the parsed view keeps the last one.
            if *id == exact {
                *id = exact;
            }
        }
    }

    /// Whether [`Message::keep_id_text`] has anything to do.
    pub(crate) fn id_read_as_double(&self) -> bool {
        self.value.get("id").is_some_and(Value::is_f64)
    }

    pub fn method(&self) -> Option<&str> {
        match &self.kind {
            MessageKind::Request { method, .. } | MessageKind::Notification { method } => {
                Some(method)
            }
            _ => None,
        }
    }

    pub fn id(&self) -> Option<&RequestId> {
        match &self.kind {
            MessageKind::Request { id, .. } | MessageKind::Response { id, .. } => Some(id),
            _ => None,
        }
    }

    pub fn params(&self) -> Option<&Value> {
        self.value.get("params")
    }

    pub fn result(&self) -> Option<&Value> {
        self.value.get("result")
    }
}

fn classify(value: &Value) -> MessageKind {
    let Value::Object(obj) = value else {
        return MessageKind::Invalid("not a JSON object");
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return MessageKind::Invalid("missing \"jsonrpc\": \"2.0\"");
    }
    match (obj.get("method"), obj.get("id")) {
        (Some(Value::String(method)), None) => MessageKind::Notification {
            method: method.clone(),
        },
        (Some(Value::String(method)), Some(id)) => match RequestId::from_value(id) {
            Some(id) => MessageKind::Request {
                id,
                method: method.clone(),
            },
            None => MessageKind::Invalid("request id must be a string or a number"),
        },
        (Some(_), _) => MessageKind::Invalid("method must be a string"),
        (None, id) => classify_response(obj, id),
    }
}

fn classify_response(obj: &Map<String, Value>, id: Option<&Value>) -> MessageKind {
    let has_result = obj.contains_key("result");
    let has_error = obj.contains_key("error");
    if has_result == has_error {
        return MessageKind::Invalid("a response needs exactly one of result and error");
    }
    match id.and_then(RequestId::from_value) {
        Some(id) => MessageKind::Response {
            id,
            is_error: has_error,
        },
        None if has_error && matches!(id, Some(Value::Null) | None) => MessageKind::OrphanError,
        None => MessageKind::Invalid("response id must be a string or a number"),
    }
}

/// Serializes a message whose top-level `id` is `id`, writing that member
/// as the text the id arrived with: serde_json would print `1e2` as
/// `100.0` and `18446744073709551616` as `1.8446744073709552e19`.
pub fn message_line(value: &Value, id: &RequestId) -> Vec<u8> {
    let (Value::Object(members), RequestId::Number(text)) = (value, id) else {
        return serde_json::to_vec(value).unwrap_or_default();
    };
    let printed = members.get("id").map(Value::to_string);
    if printed.is_none() || printed.as_deref() == Some(text.as_str()) {
        return serde_json::to_vec(value).unwrap_or_default();
    }
    let mut line = vec![b'{'];
    for (i, (key, member)) in members.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        let _ = serde_json::to_writer(&mut line, key);
        line.push(b':');
        if key == "id" {
            line.extend_from_slice(text.as_bytes());
        } else {
            let _ = serde_json::to_writer(&mut line, member);
        }
    }
    line.push(b'}');
    line
}

/// Builds a JSON-RPC success response line (no trailing newline).
pub fn response_line(id: &RequestId, result: Value) -> Vec<u8> {
    let msg = serde_json::json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result});
    message_line(&msg, id)
}

/// Builds a JSON-RPC error response line (no trailing newline).
pub fn error_line(id: &RequestId, code: i64, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut error = serde_json::json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let msg = serde_json::json!({"jsonrpc": "2.0", "id": id.to_value(), "error": error});
    message_line(&msg, id)
}

/// Builds a JSON-RPC request or notification line (no trailing newline).
pub fn request_line(id: Option<&RequestId>, method: &str, params: Option<Value>) -> Vec<u8> {
    let mut msg = serde_json::json!({"jsonrpc": "2.0", "method": method});
    if let Some(id) = id {
        msg["id"] = id.to_value();
    }
    if let Some(params) = params {
        msg["params"] = params;
    }
    match id {
        Some(id) => message_line(&msg, id),
        None => serde_json::to_vec(&msg).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(value: Value, expect: MessageKind) {
        assert_eq!(
            Message::from_value(value.clone()).kind,
            expect,
            "for {value}"
        );
    }

    #[test]
    fn classifies_messages() {
        check(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
            MessageKind::Request {
                id: RequestId::Number("1".into()),
                method: "tools/list".into(),
            },
        );
        check(
            json!({"jsonrpc":"2.0","id":"a","result":{}}),
            MessageKind::Response {
                id: RequestId::String("a".into()),
                is_error: false,
            },
        );
        check(
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            MessageKind::Notification {
                method: "notifications/initialized".into(),
            },
        );
        check(
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}),
            MessageKind::OrphanError,
        );
        check(
            json!({"jsonrpc":"2.0","id":null,"method":"x"}),
            MessageKind::Invalid("request id must be a string or a number"),
        );
        check(
            json!({"id":1,"result":{}}),
            MessageKind::Invalid("missing \"jsonrpc\": \"2.0\""),
        );
        check(
            json!({"jsonrpc":"2.0","id":1,"result":{},"error":{}}),
            MessageKind::Invalid("a response needs exactly one of result and error"),
        );
    }

    #[test]
    fn a_number_id_keeps_its_text_and_matches_by_value() {
        let id = |t: &str| RequestId::from_token(t.as_bytes()).unwrap();
        assert_eq!(id("1e2"), id("100.0"), "a server may re-encode 1e2");
        assert_eq!(id("1e2"), RequestId::from_value(&json!(100.0)).unwrap());
        assert_ne!(id("1"), id("1.0"), "an integer and a double differ");
        assert_ne!(id("-0"), id("0"));
        assert_eq!(id(" 7 "), RequestId::Number("7".into()));
        let set: std::collections::HashSet<RequestId> = [id("1e2"), id("100.0")].into();
        assert_eq!(set.len(), 1, "equal ids hash alike");
        for text in ["18446744073709551616", "1e2", "-0", "1.50", "1E+2", "7"] {
            let line = error_line(&id(text), -1, "m", None);
            let line = String::from_utf8(line).unwrap();
            assert_eq!(
                line,
                format!(r#"{{"jsonrpc":"2.0","id":{text},"error":{{"code":-1,"message":"m"}}}}"#)
            );
        }
        let line = response_line(&RequestId::String("a".into()), json!(1));
        assert_eq!(line, br#"{"jsonrpc":"2.0","id":"a","result":1}"#);
    }

    #[test]
    fn numeric_and_string_ids_differ() {
        let n = RequestId::from_value(&json!(1)).unwrap();
        let s = RequestId::from_value(&json!("1")).unwrap();
        assert_ne!(n, s, "id 1 and id \"1\" are different requests");
        assert_eq!(n.to_value(), json!(1));
    }
}

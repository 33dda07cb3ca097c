//! One JSON-RPC message: the parsed value plus what kind of message it is.

use std::fmt;

use serde_json::{Map, Value};

/// A JSON-RPC id: a string or a number, never null. Numbers keep their
/// textual form so `1` and `1.0` stay distinct, as they are on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RequestId {
    Number(String),
    String(String),
}

impl RequestId {
    pub fn from_value(value: &Value) -> Option<RequestId> {
        match value {
            Value::Number(n) => Some(RequestId::Number(n.to_string())),
            Value::String(s) => Some(RequestId::String(s.clone())),
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => serde_json::from_str(n).unwrap_or(Value::Null),
            RequestId::String(s) => Value::String(s.clone()),
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

/// Builds a JSON-RPC success response line (no trailing newline).
pub fn response_line(id: &RequestId, result: Value) -> Vec<u8> {
    let msg = serde_json::json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result});
    serde_json::to_vec(&msg).unwrap_or_default()
}

/// Builds a JSON-RPC error response line (no trailing newline).
pub fn error_line(id: &RequestId, code: i64, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut error = serde_json::json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let msg = serde_json::json!({"jsonrpc": "2.0", "id": id.to_value(), "error": error});
    serde_json::to_vec(&msg).unwrap_or_default()
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
    serde_json::to_vec(&msg).unwrap_or_default()
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
    fn numeric_and_string_ids_differ() {
        let n = RequestId::from_value(&json!(1)).unwrap();
        let s = RequestId::from_value(&json!("1")).unwrap();
        assert_ne!(n, s, "id 1 and id \"1\" are different requests");
        assert_eq!(n.to_value(), json!(1));
    }
}

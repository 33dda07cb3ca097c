//! Frames as the cross-server stage sees them: a JSON-RPC batch is judged
//! element by element, like single messages in a row (DESIGN §3: every
//! `tools/call` goes through the same check-and-record, in order), and what
//! it blocks is answered in one batch reply (DESIGN §4).

use serde_json::Value;

/// A client frame bound for the server.
#[derive(Debug, PartialEq)]
pub enum CallFrame {
    /// One message.
    Single(Value),
    /// A batch's elements, in order.
    Batch(Vec<Value>),
    /// Not JSON (the server rejects it): passed on as it is.
    Other,
}

/// Splits a frame bound for the server.
pub fn call_frame(bytes: &[u8]) -> CallFrame {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(items)) => CallFrame::Batch(items),
        Ok(v) => CallFrame::Single(v),
        Err(_) => CallFrame::Other,
    }
}

/// The messages of a server frame (a batch reply's elements, or the one
/// message); empty when it is not JSON.
pub fn messages(bytes: &[u8]) -> Vec<Value> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(items)) => items,
        Ok(v) => vec![v],
        Err(_) => Vec::new(),
    }
}

/// Whether a message is a `tools/call` request (it has an id).
pub fn is_call(msg: &Value) -> bool {
    msg.get("method").and_then(Value::as_str) == Some("tools/call")
        && msg.get("id").is_some_and(|id| !id.is_null())
}

/// A batch after its elements were judged: `answers[i]` is the answer of a
/// blocked element `i` (None: forward it). Returns the batch to forward
/// (`raw` itself when nothing was blocked; None when every element was)
/// and the batch reply to the client (None when nothing was blocked).
pub fn assemble(
    raw: Vec<u8>,
    items: Vec<Value>,
    answers: Vec<Option<Value>>,
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    if answers.iter().all(Option::is_none) {
        return (Some(raw), None);
    }
    let mut forward = Vec::new();
    let mut reply = Vec::new();
    for (item, answer) in items
        .into_iter()
        .zip(answers.into_iter().chain(std::iter::repeat(None)))
    {
        match answer {
            Some(a) => reply.push(a),
            None => forward.push(item),
        }
    }
    let line = |values: Vec<Value>| serde_json::to_vec(&Value::Array(values)).unwrap_or_default();
    let forward = (!forward.is_empty()).then(|| line(forward));
    (forward, Some(line(reply)))
}

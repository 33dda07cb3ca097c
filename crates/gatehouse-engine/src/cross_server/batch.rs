//! Frames as the cross-server stage sees them: a JSON-RPC batch is judged
//! element by element, like single messages in a row (DESIGN §3: every
//! `tools/call` goes through the same check-and-record, in order), and what
//! it blocks is answered in one batch reply (DESIGN §4).

use gatehouse_protocol::Raw;
use serde_json::Value;

use crate::{Output, Passed, Peer};

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

impl CallFrame {
    /// Its messages, and whether they came as a batch; `None` when it is
    /// not JSON.
    pub fn into_messages(self) -> Option<(Vec<Value>, bool)> {
        match self {
            CallFrame::Single(msg) => Some((vec![msg], false)),
            CallFrame::Batch(items) => Some((items, true)),
            CallFrame::Other => None,
        }
    }
}

/// Whether a frame bound for the server may hold a `tools/call`: sound for
/// every JSON spelling of it. Without a `\u` escape anywhere in the line,
/// the letters of `tools` can only be written as themselves (`/` may be
/// `\/`), so a line with neither `tools` nor `\u` holds no call; the rest
/// is parsed.
pub fn may_hold_call(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, b"tools").is_some() || memchr::memmem::find(bytes, b"\\u").is_some()
}

/// Whether an output bound for the server may hold a `tools/call`: a
/// passed frame's messages are looked at, a line is [`may_hold_call`].
pub fn sends_call(output: &Output) -> bool {
    match output {
        Output::ToServer(bytes) => may_hold_call(bytes),
        Output::Pass {
            to: Peer::Server,
            frame,
        } => frame.messages.iter().any(is_call),
        _ => false,
    }
}

/// Splits a frame bound for the server, read as the relay read it
/// ([`gatehouse_protocol::json_value`]: no 128-level limit, `1e400` read).
/// A large message's longest string moves into it rather than being
/// copied; [`judged`] puts it back into the line.
pub fn call_frame(bytes: Vec<u8>) -> (CallFrame, Raw) {
    let (raw, value) = gatehouse_protocol::json_value_owned(bytes);
    let frame = match value {
        Some(Value::Array(items)) => CallFrame::Batch(items),
        Some(v) => CallFrame::Single(v),
        None => CallFrame::Other,
    };
    (frame, raw)
}

/// A frame as the relay passes it on ([`crate::Passed`]), read from its
/// line as [`call_frame`] reads it; the line back when it is not JSON.
pub fn passed(bytes: Vec<u8>) -> Result<Passed, Vec<u8>> {
    let (frame, raw) = call_frame(bytes);
    match frame.into_messages() {
        Some((messages, batch)) => Ok(Passed {
            raw,
            messages,
            batch,
        }),
        None => Err(raw.into_unsplit_bytes()),
    }
}

/// The frame of an output bound for `to`, parsed when it is a line; `Err`
/// gives back as it was what is not JSON or not bound for `to`.
// The `Err` is the caller's own output handed back, moved as it came.
#[allow(clippy::result_large_err)]
pub fn frame_of(output: Output, to: Peer) -> Result<Passed, Output> {
    match output {
        Output::Pass { to: t, frame } if t == to => Ok(frame),
        Output::ToServer(bytes) if to == Peer::Server => passed(bytes).map_err(Output::ToServer),
        Output::ToClient(bytes) if to == Peer::Client => passed(bytes).map_err(Output::ToClient),
        other => Err(other),
    }
}

/// A frame bound for the server after its messages were judged
/// (`answers[i]`: the answer of a blocked message `i`, None: it goes on),
/// as outputs: passed on whole when nothing was blocked, else what
/// [`judged`] makes of it.
pub fn settle(frame: Passed, answers: Vec<Option<Value>>, out: &mut Vec<Output>) {
    if answers.iter().all(Option::is_none) {
        return out.push(Output::Pass {
            to: Peer::Server,
            frame,
        });
    }
    let (forward, reply) = judged(frame.raw, frame.batch, frame.messages, answers);
    out.extend(forward.map(Output::ToServer));
    out.extend(reply.map(Output::ToClient));
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
/// A frame after its messages were judged ([`CallFrame::into_messages`]),
/// as what goes to the server and what goes back to the client: a single
/// message is forwarded as `raw` or answered alone, a batch as
/// [`assemble`] splits it.
pub fn judged(
    raw: Raw,
    batched: bool,
    mut items: Vec<Value>,
    mut answers: Vec<Option<Value>>,
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    if batched {
        return assemble(raw, items, answers);
    }
    match answers.pop().flatten() {
        Some(answer) => (None, Some(serde_json::to_vec(&answer).unwrap_or_default())),
        None => {
            let mut msg = items.pop().unwrap_or_default();
            (Some(raw.into_bytes(&mut msg)), None)
        }
    }
}

/// A batch (never split) after its elements were judged.
pub fn assemble(
    raw: Raw,
    items: Vec<Value>,
    answers: Vec<Option<Value>>,
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    if answers.iter().all(Option::is_none) {
        return (Some(raw.into_unsplit_bytes()), None);
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

#[cfg(test)]
mod spelling_tests {
    use super::{call_frame, is_call, may_hold_call, CallFrame};

    /// Every JSON spelling of a call reaches the check, read as the relay
    /// reads it.
    #[test]
    fn every_spelling_of_a_call_is_read() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        for line in [
            r#"{"id":1,"method":"tools/call","params":{}}"#.to_string(),
            r#"{"id":1,"method":"tools\/call","params":{}}"#.to_string(),
            r#"{"id":1,"method":"\u0074ools/call","params":{}}"#.to_string(),
            r#"{"id":1,"m\u0065thod":"tools/call","params":{}}"#.to_string(),
            format!(r#"{{"id":1,"method":"tools/call","params":{{"a":{deep},"n":1e400}}}}"#),
        ] {
            assert!(may_hold_call(line.as_bytes()), "{line:.60}");
            match call_frame(line.clone().into_bytes()).0 {
                CallFrame::Single(msg) => assert!(is_call(&msg), "{line:.60}"),
                other => panic!("{line:.60}: {other:?}"),
            }
        }
        assert!(!may_hold_call(br#"{"id":1,"method":"ping"}"#));
    }
}

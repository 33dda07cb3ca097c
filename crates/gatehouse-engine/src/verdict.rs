//! What the engine hands back to its host: outputs, events, pin changes.

use std::fmt;

use gatehouse_protocol::{Raw, RequestId};
use serde_json::Value;

/// Severity of a finding or decision, ordered from least to most severe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }

    pub fn parse(text: &str) -> Option<Severity> {
        Some(match text {
            "info" => Severity::Info,
            "low" => Severity::Low,
            "medium" => Severity::Medium,
            "high" => Severity::High,
            "critical" => Severity::Critical,
            _ => return None,
        })
    }

    /// High and critical findings are the ones Gatehouse acts on.
    pub fn is_flagged(self) -> bool {
        self >= Severity::High
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What was done about something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Allow,
    Audit,
    Alert,
    Block,
    Hold,
    Drop,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Audit => "audit",
            Action::Alert => "alert",
            Action::Block => "block",
            Action::Hold => "hold",
            Action::Drop => "drop",
        }
    }
}

/// An event for the host to record. Evidence is already redacted.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineEvent {
    pub kind: &'static str,
    pub severity: Severity,
    pub action: Action,
    pub tool: Option<String>,
    pub rule: String,
    pub reason: String,
    pub evidence: Value,
}

impl EngineEvent {
    pub fn new(kind: &'static str, severity: Severity, action: Action, rule: &str) -> EngineEvent {
        EngineEvent {
            kind,
            severity,
            action,
            tool: None,
            rule: rule.to_string(),
            reason: String::new(),
            evidence: Value::Null,
        }
    }

    pub fn tool(mut self, tool: &str) -> Self {
        self.tool = Some(tool.to_string());
        self
    }

    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    pub fn evidence(mut self, evidence: Value) -> Self {
        self.evidence = evidence;
        self
    }
}

/// A pin change for the host to persist.
#[derive(Clone, Debug, PartialEq)]
pub enum PinUpdate {
    /// Pin `hash` as trusted at first sight, unless the tool is pinned by
    /// now (another process of the server's first session pinned it): then
    /// the host holds `hash` unless it is the pinned one, and reloads the
    /// pins ([`Relay::on_pins_reloaded`](crate::relay::Relay::on_pins_reloaded)).
    TrustFirst {
        tool: String,
        hash: String,
        definition: Value,
    },
    /// Pin (or re-pin) `hash` as trusted.
    Trust {
        tool: String,
        hash: String,
        definition: Value,
    },
    /// Withhold `hash` until a person approves it.
    Hold {
        tool: String,
        hash: String,
        definition: Value,
        reason: String,
    },
    /// Withhold `hash` because the scanner flagged it; findings as JSON.
    Quarantine {
        tool: String,
        hash: String,
        definition: Value,
        findings: Value,
    },
    /// The tool was seen with a hash that is already pinned (no state change).
    Seen { tool: String, hash: String },
}

/// One thing for the host to do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Write this line (without newline) to the server's stdin.
    ToServer(Vec<u8>),
    /// Write this line (without newline) to the client (our stdout).
    ToClient(Vec<u8>),
    /// Write this frame, passed on as it came, to `to`: its line
    /// ([`Passed::into_line`]) with the messages the relay read from it,
    /// so a later stage reads them rather than parsing the line again.
    Pass {
        to: Peer,
        frame: Passed,
    },
    Event(EngineEvent),
    Persist(PinUpdate),
    /// Ask the person in the dashboard inbox; the host answers the server.
    Inbox(InputRequest),
    /// A client request the server will not answer through the relay: the
    /// client cancelled it, or a later stage (the egress guard, the
    /// cross-server check) answered it in the server's place. Whatever
    /// tracks it stops ([`crate::Relay::forget`]); nothing is written.
    Settled(RequestId),
}

impl Output {
    /// A line to write to `to`.
    pub fn line(to: Peer, line: Vec<u8>) -> Output {
        match to {
            Peer::Client => Output::ToClient(line),
            Peer::Server => Output::ToServer(line),
        }
    }

    /// A passed frame as the line it is written as; anything else as it is.
    pub fn written(self) -> Output {
        match self {
            Output::Pass { to, frame } => Output::line(to, frame.into_line()),
            other => other,
        }
    }
}

/// One end of the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Client,
    Server,
}

impl Peer {
    /// The other end.
    pub fn other(self) -> Peer {
        match self {
            Peer::Client => Peer::Server,
            Peer::Server => Peer::Client,
        }
    }
}

/// A frame read as the relay reads it (`gatehouse_protocol::parse_frame`):
/// its line and its messages, a batch's elements in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Passed {
    pub raw: Raw,
    pub messages: Vec<Value>,
    pub batch: bool,
}

impl Passed {
    /// The line, byte for byte: a split line takes its string back from
    /// its one message (see [`Raw::into_bytes`]).
    pub fn into_line(mut self) -> Vec<u8> {
        match (self.batch, self.messages.as_mut_slice()) {
            (false, [msg]) => self.raw.into_bytes(msg),
            _ => self.raw.into_unsplit_bytes(),
        }
    }
}

/// An `elicitation/create` routed to the dashboard inbox instead of the
/// client. The host posts it, waits, and answers the server with
/// `{"action": "accept" | "decline", …}` under `id`.
#[derive(Clone, Debug, PartialEq)]
pub struct InputRequest {
    pub id: gatehouse_protocol::RequestId,
    /// The request's params as the server sent them (shown as text).
    pub params: Value,
    /// `clientInfo.name` from the client's `initialize`, if any.
    pub client: Option<String>,
    /// Why it goes to the inbox (the rule recorded).
    pub rule: &'static str,
}

/// A call that a later stage blocked (cross-server rules, the secret egress
/// guard) and answered in the server's place: the relay's `mcp_tool_called`
/// allow event for it is taken back from `out`, so the record shows the
/// block only, never an allowed call beside it; and the request is settled
/// ([`Output::Settled`]), as the server will not answer it.
pub fn call_blocked_after_relay(out: &mut Vec<Output>, tool: &str, id: RequestId) {
    let allowed = out.iter().rposition(|o| {
        matches!(o, Output::Event(e)
            if e.kind == "mcp_tool_called"
                && e.action == Action::Allow
                && e.tool.as_deref() == Some(tool))
    });
    if let Some(i) = allowed {
        out.remove(i);
    }
    out.push(Output::Settled(id));
}

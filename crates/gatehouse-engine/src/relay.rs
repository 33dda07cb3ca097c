//! The per-server relay state machine: every frame from the client or the
//! server goes through [`Relay`], which returns what to forward, answer,
//! record and persist (DESIGN §3, §4).

use std::collections::{HashMap, HashSet, VecDeque};

use gatehouse_protocol::message::{error_line, request_line, response_line};
use gatehouse_protocol::{
    peek, tool_hash, Frame, FrameBody, Message, MessageKind, Peek, PeekKind, Raw, RequestId,
};
use serde_json::{json, Value};

use crate::inspect::{findings_json, max_severity, Finding, Inspector};
use crate::pins::{judge, PinEntry, PinState, PinTable, ToolJudgement};
use crate::settings::{ResultAction, SamplingContext, SensitiveElicitation, Settings, ToolRule};
use crate::verdict::{
    Action, EngineEvent, InputRequest, Output, Passed, Peer, PinUpdate, Severity,
};

/// Who the relay speaks for.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    pub server_id: String,
}

/// What the relay remembers about a client request in flight.
#[derive(Clone, Debug)]
enum Pending {
    Initialize,
    /// One page of the client's listing; `cursor` names it (`None`: the
    /// first page).
    ToolsList {
        cursor: Option<String>,
    },
    ToolsCall {
        tool: String,
    },
    Inspected(String),
    Other,
}

/// Our own requests to the server (never forwarded).
#[derive(Clone, Debug)]
enum Internal {
    /// A page of our listing, named like [`Pending::ToolsList`].
    ToolsList { cursor: Option<String> },
    /// A listing page given up on (it timed out): a late answer is dropped.
    Abandoned,
}

/// How long Gatehouse waits for its own `tools/list`, all pages, before the
/// calls parked behind it are answered with an error. Half the 60 s request
/// timeout common in MCP clients, so the client hears why first.
pub const OWN_LIST_TIMEOUT_MS: u64 = 30_000;

/// Most pages of Gatehouse's own listing: a server whose cursors never end
/// (or repeat) fails the listing instead of parking the client for good.
pub const OWN_LIST_MAX_PAGES: usize = 100;

/// After a failed own listing, calls that need it are blocked at once for
/// this long, doubling with each failure in a row up to
/// [`OWN_LIST_RETRY_MAX_MS`]; the first call after that lists again.
pub const OWN_LIST_RETRY_MS: u64 = 1_000;
pub const OWN_LIST_RETRY_MAX_MS: u64 = 60_000;

/// The `tools/list` Gatehouse sends itself to judge a call made before the
/// client listed (DESIGN §3: "wrap lists first").
#[derive(Debug, Default)]
struct OwnListing {
    /// While a listing is under way: when its last page must have come.
    deadline_ms: Option<u64>,
    /// The cursors asked for so far in this listing.
    cursors: Vec<String>,
    /// The last listing failed: why, and when the next may start.
    failed: Option<ListFailure>,
    /// The protocol fields of the call's `_meta` that started the listing
    /// (see [`protocol_meta`]), repeated in each of its requests.
    meta: Option<Value>,
}

#[derive(Debug)]
struct ListFailure {
    reason: String,
    in_a_row: u32,
    retry_at_ms: u64,
}

impl OwnListing {
    fn in_progress(&self) -> bool {
        self.deadline_ms.is_some()
    }

    /// The failure a call must be blocked with now, if any.
    fn failure_at(&self, now_ms: u64) -> Option<&str> {
        self.failed
            .as_ref()
            .filter(|f| now_ms < f.retry_at_ms && !self.in_progress())
            .map(|f| f.reason.as_str())
    }

    fn succeeded(&mut self) {
        self.deadline_ms = None;
        self.failed = None;
    }

    fn fail(&mut self, reason: String, now_ms: u64) {
        let in_a_row = self.failed.as_ref().map_or(1, |f| f.in_a_row + 1);
        let backoff = OWN_LIST_RETRY_MS
            .saturating_mul(1 << (in_a_row - 1).min(16))
            .min(OWN_LIST_RETRY_MAX_MS);
        self.deadline_ms = None;
        self.failed = Some(ListFailure {
            reason,
            in_a_row,
            retry_at_ms: now_ms + backoff,
        });
    }
}

/// A tool as last listed by the server in this session.
#[derive(Clone, Debug)]
struct SeenTool {
    hash: String,
    exposed: bool,
    /// Why it is withheld (rule id), when it is.
    withheld_rule: &'static str,
    /// The definition's description and annotations (for classification).
    facts: Value,
}

/// A client message or frame waiting for Gatehouse's own tool list.
#[derive(Debug)]
enum Parked {
    /// A call to a tool the relay has not seen listed yet, with its line
    /// when it came alone (sent on as written; a batch's is rewritten).
    Call(Message, Option<Raw>),
    /// A client frame that arrived while a call was parked: it waits its
    /// turn, so nothing the client sent later reaches the server first.
    Frame(Frame),
}

impl Parked {
    /// The id of the one request this entry holds (none for a batch).
    fn request_id(&self) -> Option<&RequestId> {
        let msg = match self {
            Parked::Call(msg, _) => msg,
            Parked::Frame(Frame {
                body: FrameBody::Single(msg),
                ..
            }) => msg,
            Parked::Frame(_) => return None,
        };
        match &msg.kind {
            MessageKind::Request { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// Where a frame's outputs go, by the peer that sent it.
impl Peer {
    /// Passing a frame on goes to the other peer.
    fn forward(self, line: Vec<u8>) -> Output {
        Output::line(self.other(), line)
    }

    /// Passing a frame on as it came.
    fn pass(self, frame: Passed) -> Output {
        Output::Pass {
            to: self.other(),
            frame,
        }
    }

    /// Answering a frame goes back to its sender.
    fn answer(self, line: Vec<u8>) -> Output {
        Output::line(self, line)
    }
}

/// What to do with one message.
enum Verdict {
    Forward,
    /// Replace the message with this value.
    Rewrite(Value),
    /// Do not forward; answer the sender with this message.
    Answer(Value),
    /// Do not forward; nothing to answer.
    Drop,
    /// Hold the message until the tool list is known.
    Park,
}

/// One server's relay.
pub struct Relay<I: Inspector> {
    server: ServerInfo,
    settings: Settings,
    inspector: I,
    pins: PinTable,
    nonce: String,
    /// Results spotlighted so far (part of each per-call nonce).
    spotlights: u64,
    next_internal: u64,
    pending: HashMap<RequestId, Pending>,
    internal: HashMap<RequestId, Internal>,
    tools: HashMap<String, SeenTool>,
    /// The page (cursor) of the current listing each name was first seen on.
    listed_on: HashMap<String, Option<String>>,
    listed_once: bool,
    own_listing: OwnListing,
    exposed_in_listing: usize,
    /// Client messages waiting for the tool list, in the client's order.
    parked: VecDeque<Parked>,
    reported: HashSet<(String, String)>,
    last_list_changed_ms: Option<u64>,
    trailing_list_changed: bool,
    refused: Option<(String, String)>,
    tools_generation: u64,
    /// What the client's `initialize` said: elicitation support, its name.
    client_elicits: bool,
    client_name: Option<String>,
    /// `_meta.progressToken` of forwarded client calls still in flight.
    progress_tokens: HashMap<RequestId, Value>,
    /// Ids of the latest requests answered (a second answer is dropped).
    answered: RecentIds,
}

/// The last [`RecentIds::CAP`] ids inserted, oldest forgotten first.
#[derive(Default)]
struct RecentIds {
    order: std::collections::VecDeque<RequestId>,
    set: HashSet<RequestId>,
}

impl RecentIds {
    const CAP: usize = 1024;

    fn insert(&mut self, id: RequestId) {
        if self.set.insert(id.clone()) {
            self.order.push_back(id);
            if self.order.len() > Self::CAP {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    fn contains(&self, id: &RequestId) -> bool {
        self.set.contains(id)
    }
}

impl<I: Inspector> Relay<I> {
    /// `nonce` makes our own request ids impossible for the client to guess.
    pub fn new(
        server: ServerInfo,
        settings: Settings,
        inspector: I,
        pins: PinTable,
        nonce: &str,
    ) -> Self {
        Relay {
            server,
            settings,
            inspector,
            pins,
            nonce: nonce.to_string(),
            spotlights: 0,
            next_internal: 0,
            pending: HashMap::new(),
            internal: HashMap::new(),
            tools: HashMap::new(),
            listed_on: HashMap::new(),
            listed_once: false,
            own_listing: OwnListing::default(),
            exposed_in_listing: 0,
            parked: VecDeque::new(),
            reported: HashSet::new(),
            last_list_changed_ms: None,
            trailing_list_changed: false,
            refused: None,
            tools_generation: 0,
            client_elicits: false,
            client_name: None,
            progress_tokens: HashMap::new(),
            answered: RecentIds::default(),
        }
    }

    /// Refuse the server: `initialize` and every other request get a
    /// JSON-RPC error naming the rule (server policy stage).
    pub fn refuse(&mut self, rule: &str, reason: &str) {
        self.refused = Some((rule.to_string(), reason.to_string()));
    }

    /// Our own requests or parked calls still in flight: the host keeps the
    /// server's stdin open until they are done, even after the client left.
    pub fn has_outstanding_work(&self) -> bool {
        !self.parked.is_empty()
            || self
                .internal
                .values()
                .any(|i| !matches!(i, Internal::Abandoned))
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Changes whenever a listed tool is judged (cross-server hosts re-read
    /// [`Relay::exposed_tools`] then).
    pub fn tools_generation(&self) -> u64 {
        self.tools_generation
    }

    /// Names of the tools the client currently sees.
    pub fn exposed_tools(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .tools
            .iter()
            .filter(|(_, t)| t.exposed)
            .map(|(n, _)| n.as_str())
            .collect();
        names.sort_unstable();
        names
    }

    /// A listed tool's description and annotations (`{"description", "annotations"}`).
    pub fn tool_facts(&self, tool: &str) -> Option<&Value> {
        self.tools.get(tool).map(|t| &t.facts)
    }

    /// Progress tokens of the client's calls in flight (an inbox wait keeps
    /// them alive with `notifications/progress`).
    pub fn progress_tokens(&self) -> Vec<Value> {
        self.progress_tokens.values().cloned().collect()
    }

    /// Replaces the audit-only switch (pause / resume).
    pub fn set_audit_only(&mut self, audit_only: bool) {
        self.settings.audit_only = audit_only;
    }

    /// Judges the messages of one frame sent by `from` and emits what to
    /// forward (the original bytes when nothing changed) and what to answer.
    /// A batch stays a batch on both sides; a parked message waits for the
    /// tool list (only client requests are ever parked).
    fn relay_messages(
        &mut self,
        from: Peer,
        raw: Raw,
        batch: bool,
        items: Vec<Message>,
        now_ms: u64,
        out: &mut Vec<Output>,
    ) {
        // What goes on, with its rewrite if any; written out only when the
        // frame changed (an untouched frame goes on as its raw bytes).
        let mut forward: Vec<(Message, Option<Value>)> = Vec::new();
        let mut answers = Vec::new();
        let mut untouched = true;
        let mut raw = Some(raw);
        for msg in items {
            let verdict = match from {
                Peer::Client => self.client_message(&msg, now_ms, out),
                Peer::Server => self.server_message(&msg, now_ms, out),
            };
            match verdict {
                Verdict::Forward => forward.push((msg, None)),
                Verdict::Rewrite(v) => {
                    untouched = false;
                    forward.push((msg, Some(v)))
                }
                Verdict::Answer(v) => {
                    untouched = false;
                    answers.push(message_line(&v, msg.id()))
                }
                Verdict::Drop => untouched = false,
                Verdict::Park => {
                    untouched = false;
                    let line = if batch { None } else { raw.take() };
                    self.parked.push_back(Parked::Call(msg, line))
                }
            }
        }
        if let (true, Some(raw)) = (untouched, raw) {
            let messages = forward.into_iter().map(|(msg, _)| msg.value).collect();
            out.push(from.pass(Passed {
                raw,
                messages,
                batch,
            }));
            return;
        }
        let line = |mut lines: Vec<Vec<u8>>| {
            if batch {
                let mut joined = vec![b'['];
                joined.extend(lines.join(&b','));
                joined.push(b']');
                joined
            } else {
                lines.swap_remove(0)
            }
        };
        if !forward.is_empty() {
            let lines = forward
                .iter()
                .map(|(msg, v)| message_line(v.as_ref().unwrap_or(&msg.value), msg.id()))
                .collect();
            out.push(from.forward(line(lines)));
        }
        if !answers.is_empty() {
            out.push(from.answer(line(answers)));
        }
    }

    // ----- client → server -------------------------------------------------

    pub fn on_client_frame(&mut self, frame: Frame, now_ms: u64) -> Vec<Output> {
        let mut out = Vec::new();
        if !self.parked.is_empty() && !self.may_overtake(&frame) {
            self.hold_back(frame, &mut out);
            return out;
        }
        let Frame { raw, body } = frame;
        match body {
            FrameBody::Single(msg) => {
                self.relay_messages(Peer::Client, raw, false, vec![msg], now_ms, &mut out)
            }
            FrameBody::Batch(items) => {
                self.relay_messages(Peer::Client, raw, true, items, now_ms, &mut out)
            }
            // A line that is not even meant as JSON passes through: the
            // server is the one that has to reject it.
            FrameBody::Empty => out.push(Output::ToServer(raw.into_unsplit_bytes())),
            FrameBody::Unparseable(_) if !looks_like_json(raw.ends().0) => {
                out.push(Output::ToServer(raw.into_unsplit_bytes()))
            }
            FrameBody::Unparseable(why) => {
                let why = format!("it could not be parsed ({why})");
                let raw = raw.into_unsplit_bytes();
                self.refuse_client_frame(raw, "framing.unparseable", -32700, &why, &mut out)
            }
            FrameBody::TooDeep => {
                let why = "it is nested too deeply to inspect";
                self.refuse_client_frame(
                    raw.into_unsplit_bytes(),
                    "framing.too_deep",
                    -32600,
                    why,
                    &mut out,
                )
            }
        }
        out
    }

    /// What refusing a client frame does now: in audit only (a pause) it
    /// is forwarded with the event, else answered and not forwarded.
    fn refusal(&self) -> (bool, Action, &'static str) {
        match self.settings.audit_only {
            true => (true, Action::Audit, "audit-only: forwarded"),
            false => (false, Action::Block, "not forwarded"),
        }
    }

    /// A client line meant as JSON that Gatehouse cannot read is never
    /// forwarded: a server might read it (`NaN`, a BOM, invalid UTF-8,
    /// 5000 levels) as a call that was never judged. Its sender gets the
    /// error in its place (`id` null when none can be read). Audit only
    /// (a pause) forwards it with the event.
    fn refuse_client_frame(
        &mut self,
        raw: Vec<u8>,
        rule: &str,
        code: i64,
        why: &str,
        out: &mut Vec<Output>,
    ) {
        let (audit, action, outcome) = self.refusal();
        out.push(Output::Event(
            EngineEvent::new("frame_dropped", Severity::Medium, action, rule)
                .reason(format!(
                    "client sent a line Gatehouse cannot inspect: {why}; {outcome}"
                ))
                .evidence(json!({ "bytes": raw.len() })),
        ));
        if audit {
            out.push(Output::ToServer(raw));
            return;
        }
        let peeked = peek(&raw, &raw);
        if peeked.is_none() {
            let message = format!("Gatehouse did not forward a line: {why}");
            out.push(Output::ToClient(to_line(&null_id_error(code, &message))));
        }
        answer_dropped_client_frame(peeked, code, "did not forward", why, out);
    }

    /// A client frame over the size ceiling, skipped unread; `peeked` is
    /// what its first and last bytes say. A request gets an error back; an
    /// answer to a server request is replaced by an error to the server.
    pub fn on_client_oversized(
        &mut self,
        len: u64,
        max: usize,
        peeked: Option<Peek>,
    ) -> Vec<Output> {
        let mut out = vec![oversized_event("client", len, max)];
        let why = format!("its {len} bytes exceed the {max}-byte frame ceiling");
        answer_dropped_client_frame(peeked, -32600, "dropped", &why, &mut out);
        out
    }

    /// While a call is parked, only the client's answers to the server's
    /// own requests go on at once: they refer to no request of the
    /// client's, and the server may need one before it answers our listing.
    fn may_overtake(&self, frame: &Frame) -> bool {
        let is_answer = |msg: &Message| matches!(msg.kind, MessageKind::Response { .. });
        match &frame.body {
            FrameBody::Single(msg) => is_answer(msg),
            FrameBody::Batch(items) => !items.is_empty() && items.iter().all(is_answer),
            _ => false,
        }
    }

    /// A client frame that arrived while a call is parked. It waits behind
    /// the call, except a cancellation of a request still waiting here:
    /// that request is dropped, unanswered (a cancelled request gets no
    /// response), and neither it nor the cancellation reaches the server.
    fn hold_back(&mut self, frame: Frame, out: &mut Vec<Output>) {
        let cancelled = match &frame.body {
            FrameBody::Single(msg) => cancelled_request(msg),
            _ => None,
        };
        let waiting =
            cancelled.and_then(|id| self.parked.iter().position(|p| p.request_id() == Some(&id)));
        let Some(at) = waiting else {
            self.parked.push_back(Parked::Frame(frame));
            return;
        };
        let Some(dropped) = self.parked.remove(at) else {
            return;
        };
        let id = dropped
            .request_id()
            .map(ToString::to_string)
            .unwrap_or_default();
        let mut event = EngineEvent::new(
            "request_cancelled",
            Severity::Info,
            Action::Drop,
            "client.cancelled",
        )
        .reason(format!(
            "the client cancelled request {id} while it waited for the tool list; it never reached the server"
        ));
        if let Parked::Call(call, _) = &dropped {
            event = event.tool(called_tool(call));
        }
        out.push(Output::Event(event));
    }

    /// The client cancelled a request the server has: it is no longer
    /// tracked (the server need not answer; an answer that crosses the
    /// cancellation is then unmatched and dropped, as the client would
    /// ignore it), and later stages are told ([`Output::Settled`]).
    fn cancelled(&mut self, id: RequestId, out: &mut Vec<Output>) {
        if self.pending.contains_key(&id) {
            self.forget(&id);
            out.push(Output::Settled(id));
        }
    }

    /// Stops tracking a client request the server will not answer through
    /// the relay (cancelled, or answered by a later stage in its place).
    pub fn forget(&mut self, id: &RequestId) {
        self.pending.remove(id);
        self.progress_tokens.remove(id);
    }

    fn client_message(&mut self, msg: &Message, now_ms: u64, out: &mut Vec<Output>) -> Verdict {
        let MessageKind::Request { id, method } = &msg.kind else {
            // JSON that is no JSON-RPC message (`123`, `[]`, a batch inside
            // a batch) is answered, never forwarded: a lenient server could
            // read it as a call nobody judged. A malformed answer to a
            // server request is the exception, left to the server.
            let attempted_answer = msg.value.get("method").is_none()
                && (msg.value.get("result").is_some() || msg.value.get("error").is_some());
            if let Some(cancelled) = cancelled_request(msg) {
                self.cancelled(cancelled, out);
            }
            return match msg.kind {
                MessageKind::Invalid(why) if !attempted_answer => {
                    self.invalid_request(msg, why, out)
                }
                _ => Verdict::Forward,
            };
        };
        if let Some((rule, reason)) = &self.refused {
            out.push(Output::Event(
                EngineEvent::new("mcp_server_refused", Severity::High, Action::Block, rule)
                    .reason(reason.clone()),
            ));
            return Verdict::Answer(error_value(
                id,
                -32001,
                &format!("Gatehouse refused to start this server ({rule}): {reason}"),
            ));
        }
        let pending = match method.as_str() {
            "initialize" => {
                let params = msg.params();
                self.client_elicits = params
                    .and_then(|p| p.pointer("/capabilities/elicitation"))
                    .is_some_and(|c| !c.is_null());
                self.client_name = params
                    .and_then(|p| p.pointer("/clientInfo/name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.pending.insert(id.clone(), Pending::Initialize);
                if self.client_elicits {
                    return Verdict::Forward;
                }
                // The inbox answers input requests the client cannot show,
                // so the server may send them (SDKs check this capability).
                let mut v = msg.value.clone();
                if let Some(caps) = v
                    .pointer_mut("/params/capabilities")
                    .and_then(Value::as_object_mut)
                {
                    caps.insert("elicitation".into(), json!({}));
                    return Verdict::Rewrite(v);
                }
                return Verdict::Forward;
            }
            "tools/list" => Pending::ToolsList {
                cursor: msg
                    .params()
                    .and_then(|p| p.get("cursor"))
                    .map(Value::to_string),
            },
            "tools/call" => {
                let tool = called_tool(msg).to_string();
                let verdict = self.check_call(id, &tool, msg, now_ms, out);
                if matches!(verdict, Verdict::Forward) {
                    self.pending.insert(id.clone(), Pending::ToolsCall { tool });
                    // `get`, not `pointer`: no allocation per call.
                    if let Some(token) = msg
                        .params()
                        .and_then(|p| p.get("_meta")?.get("progressToken"))
                    {
                        self.progress_tokens.insert(id.clone(), token.clone());
                    }
                }
                return verdict;
            }
            "resources/read"
            | "prompts/get"
            | "tasks/result"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "server/discover" => Pending::Inspected(method.clone()),
            _ => Pending::Other,
        };
        // Every forwarded request is tracked, judged or not: an answer
        // Gatehouse must drop still ends it with an error, and an id the
        // client uses again after its answer is a new request.
        self.pending.insert(id.clone(), pending);
        Verdict::Forward
    }

    /// A request that is not valid JSON-RPC (an id that is null, an object,
    /// an array or a boolean; no `"jsonrpc": "2.0"`) cannot be judged, and
    /// a lenient server might still run it: it is answered "Invalid
    /// Request" (with its id when that is a string or a number, else null,
    /// as JSON-RPC says) and not forwarded, except in audit only.
    fn invalid_request(&mut self, msg: &Message, why: &str, out: &mut Vec<Output>) -> Verdict {
        let (audit, action, outcome) = self.refusal();
        let rule = "framing.invalid_request";
        let mut event = EngineEvent::new("frame_dropped", Severity::Medium, action, rule).reason(
            format!("client sent a message that is not valid JSON-RPC ({why}); {outcome}"),
        );
        if let Some(tool) = msg.value.pointer("/params/name").and_then(Value::as_str) {
            event = event.tool(tool);
        }
        out.push(Output::Event(event));
        if audit {
            return Verdict::Forward;
        }
        let message = format!("Invalid Request: {why}; Gatehouse did not forward it");
        match msg.value.get("id").and_then(RequestId::from_value) {
            Some(id) => Verdict::Answer(error_value(&id, -32600, &message)),
            None => Verdict::Answer(null_id_error(-32600, &message)),
        }
    }

    fn check_call(
        &mut self,
        id: &RequestId,
        tool: &str,
        msg: &Message,
        now_ms: u64,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if !self.listed_once && !self.tools.contains_key(tool) {
            if let Some(failure) = self.own_listing.failure_at(now_ms) {
                let reason = format!(
                    "the server's tool list, needed to judge this call, could not be had: {failure}"
                );
                return self.block_call(id, tool, "list.failed", Severity::Medium, &reason, out);
            }
            // Judge only against a known list: ask the server first.
            if !self.own_listing.in_progress() {
                self.own_listing.meta = protocol_meta(msg);
                self.start_internal_listing(None, now_ms, out);
            }
            return Verdict::Park;
        }
        // Borrowed: a call's arguments can be as large as the frame.
        let arguments = msg
            .params()
            .and_then(|p| p.get("arguments"))
            .unwrap_or(&Value::Null);
        let block = match self.tools.get(tool) {
            None => Some((
                "tool.unknown",
                Severity::Medium,
                format!("the server did not list a tool named {tool:?}"),
            )),
            Some(seen) if !seen.exposed && seen.withheld_rule == "launch.held" => Some((
                "launch.held",
                Severity::High,
                self.settings.launch_held.clone().unwrap_or_default(),
            )),
            Some(seen) if !seen.exposed => {
                // Withheld by policy: refused naming the policy's own rule
                // (`tool_policy.blocked_tools`, `trust.restricted`, …).
                if seen.withheld_rule == "policy.tool_not_exposed" {
                    if let ToolRule::Block { rule, reason } =
                        self.settings
                            .policy
                            .tool_decision(tool, Some(&seen.hash), arguments)
                    {
                        return self.block_call(id, tool, &rule, Severity::High, &reason, out);
                    }
                }
                Some((
                    seen.withheld_rule,
                    Severity::High,
                    withheld_reason(seen.withheld_rule).to_string(),
                ))
            }
            Some(seen) => {
                match self
                    .settings
                    .policy
                    .tool_decision(tool, Some(&seen.hash), arguments)
                {
                    ToolRule::Allow => None,
                    ToolRule::Audit { rule, reason } => {
                        out.push(Output::Event(
                            EngineEvent::new(
                                "mcp_tool_called",
                                Severity::Low,
                                Action::Audit,
                                &rule,
                            )
                            .tool(tool)
                            .reason(reason),
                        ));
                        return Verdict::Forward;
                    }
                    ToolRule::Block { rule, reason } => {
                        return self.block_call(id, tool, &rule, Severity::High, &reason, out);
                    }
                }
            }
        };
        if let Some((rule, severity, reason)) = block {
            return self.block_call(id, tool, rule, severity, &reason, out);
        }
        out.push(Output::Event(
            EngineEvent::new(
                "mcp_tool_called",
                Severity::Info,
                Action::Allow,
                "call.allowed",
            )
            .tool(tool),
        ));
        Verdict::Forward
    }

    fn block_call(
        &mut self,
        id: &RequestId,
        tool: &str,
        rule: &str,
        severity: Severity,
        reason: &str,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if self.settings.audit_only {
            out.push(Output::Event(
                EngineEvent::new("mcp_tool_call_intercepted", severity, Action::Audit, rule)
                    .tool(tool)
                    .reason(format!("audit-only: would block: {reason}")),
            ));
            return Verdict::Forward;
        }
        out.push(Output::Event(
            EngineEvent::new("mcp_tool_call_intercepted", severity, Action::Block, rule)
                .tool(tool)
                .reason(reason.to_string()),
        ));
        Verdict::Answer(blocked_call_result(
            id,
            &self.server.server_id,
            tool,
            rule,
            reason,
        ))
    }

    fn start_internal_listing(
        &mut self,
        cursor: Option<&Value>,
        now_ms: u64,
        out: &mut Vec<Output>,
    ) {
        self.next_internal += 1;
        let id = RequestId::String(format!("gatehouse-{}-{}", self.nonce, self.next_internal));
        self.internal.insert(
            id.clone(),
            Internal::ToolsList {
                cursor: cursor.map(Value::to_string),
            },
        );
        match cursor {
            None => {
                self.begin_listing();
                self.own_listing.deadline_ms = Some(now_ms + OWN_LIST_TIMEOUT_MS);
                self.own_listing.cursors.clear();
            }
            Some(cursor) => self.own_listing.cursors.push(cursor.to_string()),
        }
        let mut params = serde_json::Map::new();
        if let Some(cursor) = cursor {
            params.insert("cursor".into(), cursor.clone());
        }
        if let Some(meta) = &self.own_listing.meta {
            params.insert("_meta".into(), meta.clone());
        }
        let params = (!params.is_empty()).then_some(Value::Object(params));
        out.push(Output::ToServer(request_line(
            Some(&id),
            "tools/list",
            params,
        )));
    }

    fn begin_listing(&mut self) {
        self.exposed_in_listing = 0;
        self.tools.clear();
        self.listed_on.clear();
    }

    // ----- server → client -------------------------------------------------

    pub fn on_server_frame(&mut self, frame: Frame, now_ms: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let Frame { raw, body } = frame;
        match body {
            FrameBody::Single(msg) => {
                self.relay_messages(Peer::Server, raw, false, vec![msg], now_ms, &mut out)
            }
            FrameBody::Batch(items) => {
                self.relay_messages(Peer::Server, raw, true, items, now_ms, &mut out)
            }
            FrameBody::Empty => {}
            FrameBody::Unparseable(why) => {
                out.push(Output::Event(
                    EngineEvent::new(
                        "frame_dropped",
                        Severity::Medium,
                        Action::Drop,
                        "framing.unparseable",
                    )
                    .reason(format!(
                        "server sent a line Gatehouse cannot parse ({why}); dropped"
                    ))
                    .evidence(json!({ "bytes": raw.len() })),
                ));
                let (head, tail) = raw.ends();
                let peeked = peek(head, tail);
                let why = format!("it could not be parsed ({why})");
                self.answer_dropped_server_frame(peeked, &why, now_ms, &mut out);
            }
            FrameBody::TooDeep => {
                out.push(Output::Event(
                    EngineEvent::new(
                        "frame_dropped",
                        Severity::Medium,
                        Action::Drop,
                        "framing.too_deep",
                    )
                    .reason("server frame nested too deeply to inspect; dropped")
                    .evidence(json!({ "bytes": raw.len() })),
                ));
                let (head, tail) = raw.ends();
                let peeked = peek(head, tail);
                let why = "it is nested too deeply to inspect";
                self.answer_dropped_server_frame(peeked, why, now_ms, &mut out);
            }
        }
        out
    }

    /// A server frame over the size ceiling, skipped unread; `peeked` is
    /// what its first and last bytes say.
    pub fn on_server_oversized(
        &mut self,
        len: u64,
        max: usize,
        peeked: Option<Peek>,
        now_ms: u64,
    ) -> Vec<Output> {
        let mut out = vec![oversized_event("server", len, max)];
        let why = format!("its {len} bytes exceed the {max}-byte frame ceiling");
        self.answer_dropped_server_frame(peeked, &why, now_ms, &mut out);
        out
    }

    /// A dropped server frame must not leave anyone waiting: a request of
    /// the client's in flight gets an error in its place, and a request the
    /// server made is answered with an error.
    fn answer_dropped_server_frame(
        &mut self,
        peeked: Option<Peek>,
        why: &str,
        now_ms: u64,
        out: &mut Vec<Output>,
    ) {
        let Some(Peek { id, kind }) = peeked else {
            return;
        };
        if kind == PeekKind::Request {
            let message = format!("Gatehouse dropped this request: {why}");
            out.push(Output::ToServer(error_line(&id, -32600, &message, None)));
            return;
        }
        // The client's id as the client wrote it.
        let id = match self.pending.get_key_value(&id) {
            Some((written, _)) => written.clone(),
            None if self.internal.contains_key(&id) => id,
            None => return,
        };
        // Relayed as if the server had answered with the error, so what the
        // relay tracks for the request (a listing, parked calls, progress)
        // ends as it would.
        let message = format!("Gatehouse dropped the server's response: {why}");
        let line = Raw::Whole(error_line(&id, -32603, &message, None));
        let msg = Message::from_value(error_value(&id, -32603, &message));
        self.relay_messages(Peer::Server, line, false, vec![msg], now_ms, out);
    }

    /// An answer to no request Gatehouse has passed on. The client may
    /// still take it for one of its own: SDKs read `"1"` and `1` alike,
    /// and a request may be on its way, not yet read here. Judged as
    /// nothing it would carry an unjudged tool list or result, so it is
    /// dropped; in audit only (a pause) it is scanned and forwarded.
    fn unmatched_response(
        &mut self,
        id: &RequestId,
        msg: &Message,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let audit = self.settings.audit_only;
        let (action, outcome) = match audit {
            true => (Action::Audit, "audit-only: scanned and forwarded"),
            false => (Action::Drop, "dropped"),
        };
        out.push(Output::Event(
            EngineEvent::new(
                "frame_dropped",
                Severity::Medium,
                action,
                "response.unmatched",
            )
            .reason(format!(
                "server answered request {id}, which Gatehouse has not passed on; {outcome}"
            )),
        ));
        match (audit, msg.result()) {
            (true, Some(result)) => {
                self.inspect_result(msg, "unmatched response", None, result, out)
            }
            (true, None) => Verdict::Forward,
            (false, _) => Verdict::Drop,
        }
    }

    fn server_message(&mut self, msg: &Message, now_ms: u64, out: &mut Vec<Output>) -> Verdict {
        match &msg.kind {
            MessageKind::Response { id, .. } => {
                if let Some(internal) = self.internal.remove(id) {
                    self.internal_response(internal, msg, now_ms, out);
                    return Verdict::Drop;
                }
                self.progress_tokens.remove(id);
                if let Some(pending) = self.pending.remove(id) {
                    self.answered.insert(id.clone());
                    return self.inspect_response(pending, msg, out);
                }
                if self.answered.contains(id) {
                    // A second answer to one request: the client has its
                    // answer, and this one could carry what the first was
                    // judged without (a changed tool list, a result).
                    out.push(Output::Event(
                        EngineEvent::new(
                            "frame_dropped",
                            Severity::Medium,
                            Action::Drop,
                            "response.duplicate",
                        )
                        .reason(format!(
                            "server answered request {id} a second time; dropped"
                        )),
                    ));
                    return Verdict::Drop;
                }
                self.unmatched_response(id, msg, out)
            }
            MessageKind::Request { id, method } => self.server_request(id, method, msg, out),
            MessageKind::Notification { method }
                if method == "notifications/tools/list_changed" =>
            {
                self.server_list_changed(now_ms, out);
                Verdict::Drop
            }
            MessageKind::Notification { method } => {
                self.inspect_notification(method, msg, out);
                Verdict::Forward
            }
            MessageKind::OrphanError => Verdict::Forward,
            MessageKind::Invalid(why) => {
                out.push(Output::Event(
                    EngineEvent::new(
                        "frame_dropped",
                        Severity::Medium,
                        Action::Drop,
                        "framing.not_jsonrpc",
                    )
                    .reason(format!(
                        "server sent JSON that is not JSON-RPC ({why}); dropped"
                    )),
                ));
                // Its id may still be that of a request in flight.
                let peeked = msg
                    .value
                    .get("id")
                    .and_then(RequestId::from_value)
                    .map(|id| {
                        let kind = match msg.value.get("method") {
                            Some(_) => PeekKind::Request,
                            None => PeekKind::Response,
                        };
                        Peek { id, kind }
                    });
                let why = format!("it is not JSON-RPC ({why})");
                self.answer_dropped_server_frame(peeked, &why, now_ms, out);
                Verdict::Drop
            }
        }
    }

    fn internal_response(
        &mut self,
        internal: Internal,
        msg: &Message,
        now_ms: u64,
        out: &mut Vec<Output>,
    ) {
        let cursor = match internal {
            Internal::ToolsList { cursor } => cursor,
            // Given up on: the calls that waited have had their answer.
            Internal::Abandoned => return,
        };
        let Some(tools) = msg
            .result()
            .and_then(|r| r.get("tools"))
            .and_then(Value::as_array)
        else {
            let reason = list_failure(msg, &self.inspector);
            return self.own_listing_failed(reason, now_ms, out);
        };
        self.judge_page(tools, cursor.as_deref(), out);
        match msg
            .result()
            .and_then(|r| r.get("nextCursor"))
            .filter(|c| !c.is_null())
        {
            Some(cursor) => {
                let seen = &self.own_listing.cursors;
                if seen.contains(&cursor.to_string()) || seen.len() + 1 >= OWN_LIST_MAX_PAGES {
                    let reason = format!(
                        "the server's tools/list pages do not end (a cursor repeated, or more than {OWN_LIST_MAX_PAGES} pages)"
                    );
                    return self.own_listing_failed(reason, now_ms, out);
                }
                let cursor = cursor.clone();
                self.start_internal_listing(Some(&cursor), now_ms, out);
            }
            None => {
                self.own_listing.succeeded();
                self.listed_once = true;
                self.release_parked(now_ms, out);
            }
        }
    }

    /// Our listing failed (an error, no tools, no answer in time): the
    /// waiting calls are blocked naming why, and calls keep being blocked
    /// until the retry delay has passed.
    fn own_listing_failed(&mut self, reason: String, now_ms: u64, out: &mut Vec<Output>) {
        out.push(Output::Event(
            EngineEvent::new(
                "mcp_tool_list_failed",
                Severity::Medium,
                Action::Alert,
                "list.failed",
            )
            .reason(reason.clone()),
        ));
        self.own_listing.fail(reason, now_ms);
        self.release_parked(now_ms, out);
    }

    /// The tool list is known (or cannot be had): what the client sent
    /// meanwhile goes on in its order.
    fn release_parked(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let mut waiting = std::mem::take(&mut self.parked);
        while let Some(next) = waiting.pop_front() {
            match next {
                Parked::Call(msg, line) => {
                    let raw =
                        line.unwrap_or_else(|| Raw::Whole(message_line(&msg.value, msg.id())));
                    self.relay_messages(Peer::Client, raw, false, vec![msg], now_ms, out);
                }
                Parked::Frame(frame) => out.extend(self.on_client_frame(frame, now_ms)),
            }
            if !self.parked.is_empty() {
                // Parked again (a new listing): the rest keeps waiting
                // behind it.
                self.parked.extend(waiting);
                return;
            }
        }
    }

    fn inspect_response(
        &mut self,
        pending: Pending,
        msg: &Message,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let Some(result) = msg.result() else {
            return match msg.value.get("error") {
                Some(error) => self.judge_error(msg, &pending, error, out),
                None => Verdict::Forward,
            };
        };
        match pending {
            Pending::Initialize => self.inspect_initialize(msg, result, out),
            Pending::ToolsList { cursor } => {
                self.inspect_tools_page(msg, result, cursor.as_deref(), out)
            }
            Pending::ToolsCall { tool } => {
                self.inspect_result(msg, "tools/call", Some(&tool), result, out)
            }
            Pending::Inspected(method) => match method.as_str() {
                "prompts/list" | "resources/list" | "resources/templates/list" => {
                    self.inspect_listed(msg, &method, result, out)
                }
                "server/discover" => self.inspect_initialize(msg, result, out),
                _ => self.inspect_result(msg, &method, None, result, out),
            },
            Pending::Other => Verdict::Forward,
        }
    }

    fn inspect_initialize(
        &mut self,
        msg: &Message,
        result: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let mut rewritten: Option<Value> = None;
        if let Some(text) = result.get("instructions").and_then(Value::as_str) {
            if self.settings.scan_definitions {
                let findings = self.inspector.scan_instructions(text);
                if let Some(sev) = max_severity(&findings) {
                    let withhold = sev.is_flagged() && !self.settings.audit_only;
                    out.push(Output::Event(
                        EngineEvent::new(
                            "mcp_instructions_finding",
                            sev,
                            if withhold {
                                Action::Block
                            } else {
                                Action::Alert
                            },
                            &findings[0].rule,
                        )
                        .reason("server instructions carry hidden instructions")
                        .evidence(findings_json(&findings)),
                    ));
                    if withhold {
                        let mut v = msg.value.clone();
                        if let Some(r) = v.get_mut("result").and_then(Value::as_object_mut) {
                            r.remove("instructions");
                        }
                        rewritten = Some(v);
                    }
                }
            }
        }
        // Declare tools.listChanged so an approval can tell the client to re-list.
        let caps_tools = result.get("capabilities").and_then(|c| c.get("tools"));
        if let Some(tools_cap) = caps_tools {
            if tools_cap.get("listChanged") != Some(&Value::Bool(true)) {
                let v = rewritten.get_or_insert_with(|| msg.value.clone());
                if let Some(t) = v
                    .pointer_mut("/result/capabilities/tools")
                    .and_then(Value::as_object_mut)
                {
                    t.insert("listChanged".into(), Value::Bool(true));
                }
            }
        }
        match rewritten {
            Some(v) => Verdict::Rewrite(v),
            None => Verdict::Forward,
        }
    }

    fn inspect_tools_page(
        &mut self,
        msg: &Message,
        result: &Value,
        cursor: Option<&str>,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if cursor.is_none() {
            self.begin_listing();
        }
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return Verdict::Forward;
        };
        let keep = self.judge_page(tools, cursor, out);
        if result.get("nextCursor").filter(|c| !c.is_null()).is_none() {
            self.listed_once = true;
        }
        if keep.iter().all(|k| *k) || self.settings.audit_only {
            return Verdict::Forward;
        }
        let mut v = msg.value.clone();
        if let Some(list) = v.pointer_mut("/result/tools").and_then(Value::as_array_mut) {
            let mut flags = keep.iter();
            list.retain(|_| *flags.next().unwrap_or(&true));
        }
        Verdict::Rewrite(v)
    }

    /// Judges one page of a tool listing (`cursor` names the page, `None`
    /// the first); returns which of its tools the client may see.
    ///
    /// A name listed with two different definitions in one listing, on one
    /// page or on two, is ambiguous: a call could run either. Every
    /// definition of it is withheld, unjudged and unpinned, and calls to it
    /// are blocked (`list.duplicate_name`), in whatever order the server
    /// listed them. (A copy on an earlier page has reached the client
    /// already; calls to it are blocked all the same.) An identical repeat
    /// is judged like the first, so a page listed twice changes nothing.
    fn judge_page(
        &mut self,
        tools: &[Value],
        cursor: Option<&str>,
        out: &mut Vec<Output>,
    ) -> Vec<bool> {
        let mut by_name: HashMap<&str, Vec<&Value>> = HashMap::new();
        for tool in tools {
            if let Some(name) = tool.get("name").and_then(Value::as_str) {
                by_name.entry(name).or_default().push(tool);
            }
        }
        let mut ambiguous = HashSet::new();
        for (name, definitions) in &by_name {
            let earlier = self
                .listed_on
                .get(*name)
                .filter(|page| page.as_deref() != cursor)
                .and_then(|_| self.tools.get(*name));
            if definitions.len() < 2 && earlier.is_none() {
                continue;
            }
            let mut hashes: Vec<String> = definitions.iter().map(|t| tool_hash(t)).collect();
            if let Some(earlier) = earlier {
                hashes.extend(earlier.hash.split(' ').map(str::to_owned));
            }
            hashes.sort_unstable();
            hashes.dedup();
            if hashes.len() > 1 {
                ambiguous.insert(*name);
                self.withhold_ambiguous(name, hashes, out);
            }
        }
        for name in by_name.keys() {
            self.listed_on
                .entry(name.to_string())
                .or_insert_with(|| cursor.map(str::to_owned));
        }
        tools
            .iter()
            .map(|tool| match tool.get("name").and_then(Value::as_str) {
                Some(name) if ambiguous.contains(name) => false,
                _ => self.judge_tool(tool, out),
            })
            .collect()
    }

    /// `name` was listed with several definitions (`hashes`, sorted).
    fn withhold_ambiguous(&mut self, name: &str, hashes: Vec<String>, out: &mut Vec<Output>) {
        let rule = "list.duplicate_name";
        if self.tools.get(name).is_some_and(|t| t.exposed) {
            self.exposed_in_listing = self.exposed_in_listing.saturating_sub(1);
        }
        let hash = hashes.join(" ");
        if self.reported.insert((name.to_string(), hash.clone())) {
            out.push(Output::Event(
                EngineEvent::new("mcp_tool_hidden", Severity::High, self.hold_action(), rule)
                    .tool(name)
                    .reason(format!(
                        "the server listed {} different definitions named {name:?}; all are withheld",
                        hashes.len()
                    ))
                    .evidence(json!({ "hashes": hashes })),
            ));
        }
        self.tools.insert(
            name.to_string(),
            SeenTool {
                hash,
                exposed: false,
                withheld_rule: rule,
                facts: json!({"description": null, "annotations": null}),
            },
        );
        self.tools_generation += 1;
    }

    /// Judges one listed tool; returns whether it is exposed to the client.
    fn judge_tool(&mut self, tool: &Value, out: &mut Vec<Output>) -> bool {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return false;
        };
        let name = name.to_string();
        let hash = tool_hash(tool);
        let first_report = self.reported.insert((name.clone(), hash.clone()));
        let findings: Vec<Finding> = if self.settings.scan_definitions && first_report {
            self.inspector.scan_tool(tool)
        } else {
            Vec::new()
        };
        let flagged = max_severity(&findings).is_some_and(Severity::is_flagged)
            || (!first_report && self.tools_previously_quarantined(&name, &hash));
        let judgement = judge(
            self.pins.get(&name),
            &hash,
            flagged,
            self.settings.trust_first_sight,
            self.settings.on_change,
            self.settings.lock_tool_list,
        );
        let (mut exposed, mut rule) = (true, "");
        match judgement {
            ToolJudgement::Expose => {}
            ToolJudgement::TrustFirst => {
                self.set_pin(&name, Some(hash.clone()), PinState::Trusted, None);
                if first_report {
                    out.push(Output::Persist(PinUpdate::TrustFirst {
                        tool: name.clone(),
                        hash: hash.clone(),
                        definition: tool.clone(),
                    }));
                    out.push(Output::Event(
                        EngineEvent::new(
                            "mcp_tool_seen",
                            Severity::Info,
                            Action::Allow,
                            "pin.first_sight",
                        )
                        .tool(&name)
                        .evidence(json!({ "hash": hash })),
                    ));
                }
            }
            ToolJudgement::ExposeChanged { previous, repin } => {
                if repin {
                    self.set_pin(&name, Some(hash.clone()), PinState::Trusted, None);
                }
                if first_report {
                    if repin {
                        out.push(Output::Persist(PinUpdate::Trust {
                            tool: name.clone(),
                            hash: hash.clone(),
                            definition: tool.clone(),
                        }));
                    }
                    out.push(Output::Event(
                        EngineEvent::new(
                            "mcp_tool_changed",
                            Severity::Medium,
                            Action::Alert,
                            "pin.changed",
                        )
                        .tool(&name)
                        .reason("tool definition changed since it was pinned")
                        .evidence(json!({ "previous": previous, "hash": hash })),
                    ));
                }
            }
            ToolJudgement::Hold { reason, previous } => {
                exposed = false;
                rule = if reason == "tool list locked" {
                    "pin.locked"
                } else {
                    "pin.held"
                };
                if first_report {
                    let approved = self.pins.get(&name).and_then(|p| p.approved_hash.clone());
                    self.set_pin(&name, approved, PinState::Held, Some(hash.clone()));
                    out.push(Output::Persist(PinUpdate::Hold {
                        tool: name.clone(),
                        hash: hash.clone(),
                        definition: tool.clone(),
                        reason: reason.to_string(),
                    }));
                    let kind = if previous.is_some() {
                        "mcp_tool_changed"
                    } else {
                        "mcp_tool_seen"
                    };
                    out.push(Output::Event(
                        EngineEvent::new(kind, Severity::High, self.hold_action(), rule)
                            .tool(&name)
                            .reason(format!(
                                "{reason}: held until a person approves hash {hash}"
                            ))
                            .evidence(json!({ "previous": previous, "hash": hash })),
                    ));
                }
            }
            ToolJudgement::Quarantine => {
                exposed = false;
                rule = "scan.quarantined";
                if first_report {
                    let approved = self.pins.get(&name).and_then(|p| p.approved_hash.clone());
                    self.set_pin(&name, approved, PinState::Quarantined, Some(hash.clone()));
                    let sev = max_severity(&findings).unwrap_or(Severity::High);
                    out.push(Output::Persist(PinUpdate::Quarantine {
                        tool: name.clone(),
                        hash: hash.clone(),
                        definition: tool.clone(),
                        findings: findings_json(&findings),
                    }));
                    out.push(Output::Event(
                        EngineEvent::new("mcp_tool_quarantined", sev, self.hold_action(), "scan.quarantined")
                            .tool(&name)
                            .reason(format!(
                                "tool definition carries {} finding(s); held until a person approves hash {hash}",
                                findings.len()
                            ))
                            .evidence(findings_json(&findings)),
                    ));
                }
            }
        }
        if exposed && first_report && !findings.is_empty() {
            let sev = max_severity(&findings).unwrap_or(Severity::Low);
            out.push(Output::Event(
                EngineEvent::new("mcp_tool_finding", sev, Action::Alert, &findings[0].rule)
                    .tool(&name)
                    .evidence(findings_json(&findings)),
            ));
        }
        if exposed && !self.settings.policy.tool_exposed(&name) {
            exposed = false;
            rule = "policy.tool_not_exposed";
            if first_report {
                out.push(Output::Event(
                    EngineEvent::new("mcp_tool_hidden", Severity::Info, self.hold_action(), rule)
                        .tool(&name)
                        .reason("policy does not expose this tool"),
                ));
            }
        }
        if exposed && self.settings.launch_held.is_some() {
            exposed = false;
            rule = "launch.held";
            if first_report {
                out.push(Output::Event(
                    EngineEvent::new("mcp_tool_hidden", Severity::High, self.hold_action(), rule)
                        .tool(&name)
                        .reason("the server's launch changed and waits for approval"),
                ));
            }
        }
        if exposed && self.exposed_in_listing >= self.settings.max_tools {
            exposed = false;
            rule = "list.tool_cap";
            if first_report {
                out.push(Output::Event(
                    EngineEvent::new(
                        "mcp_tool_hidden",
                        Severity::Medium,
                        self.hold_action(),
                        rule,
                    )
                    .tool(&name)
                    .reason(format!(
                        "more than {} tools; the overflow is withheld",
                        self.settings.max_tools
                    )),
                ));
            }
        }
        if self.settings.audit_only {
            exposed = true;
        }
        if exposed {
            self.exposed_in_listing += 1;
        }
        self.tools.insert(
            name,
            SeenTool {
                hash,
                exposed,
                withheld_rule: if rule.is_empty() { "pin.held" } else { rule },
                facts: json!({
                    "description": tool.get("description").cloned().unwrap_or(Value::Null),
                    "annotations": tool.get("annotations").cloned().unwrap_or(Value::Null),
                }),
            },
        );
        self.tools_generation += 1;
        exposed
    }

    fn tools_previously_quarantined(&self, name: &str, hash: &str) -> bool {
        self.pins.get(name).is_some_and(|p| {
            p.state == PinState::Quarantined && p.pending_hash.as_deref() == Some(hash)
        })
    }

    fn hold_action(&self) -> Action {
        if self.settings.audit_only {
            Action::Audit
        } else {
            Action::Hold
        }
    }

    fn set_pin(
        &mut self,
        name: &str,
        approved: Option<String>,
        state: PinState,
        pending: Option<String>,
    ) {
        self.pins.pins.insert(
            name.to_string(),
            PinEntry {
                approved_hash: approved,
                state,
                pending_hash: pending,
            },
        );
    }

    fn inspect_listed(
        &mut self,
        msg: &Message,
        method: &str,
        result: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if !self.settings.scan_definitions {
            return Verdict::Forward;
        }
        let key = match method {
            "prompts/list" => "prompts",
            "resources/list" => "resources",
            _ => "resourceTemplates",
        };
        let Some(items) = result.get(key).and_then(Value::as_array) else {
            return Verdict::Forward;
        };
        let mut keep = Vec::with_capacity(items.len());
        for item in items {
            let findings = self.inspector.scan_listed(method, item);
            let sev = max_severity(&findings);
            let withhold = sev.is_some_and(Severity::is_flagged) && !self.settings.audit_only;
            if let Some(sev) = sev {
                let name = item.get("name").and_then(Value::as_str).unwrap_or("?");
                out.push(Output::Event(
                    EngineEvent::new(
                        "mcp_listed_item_finding",
                        sev,
                        if withhold {
                            Action::Block
                        } else {
                            Action::Alert
                        },
                        &findings[0].rule,
                    )
                    .reason(format!("{method} item {name:?}"))
                    .evidence(findings_json(&findings)),
                ));
            }
            keep.push(!withhold);
        }
        if keep.iter().all(|k| *k) {
            return Verdict::Forward;
        }
        let mut v = msg.value.clone();
        if let Some(list) = v
            .get_mut("result")
            .and_then(|r| r.get_mut(key))
            .and_then(Value::as_array_mut)
        {
            let mut flags = keep.iter();
            list.retain(|_| *flags.next().unwrap_or(&true));
        }
        Verdict::Rewrite(v)
    }

    fn inspect_result(
        &mut self,
        msg: &Message,
        method: &str,
        tool: Option<&str>,
        result: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let verdict = self.judge_result(msg, method, tool, result, out);
        if matches!(verdict, Verdict::Forward)
            && self.settings.spotlight_results
            && method == "tools/call"
        {
            if let Some(rewritten) = self.spotlight_result(msg) {
                return Verdict::Rewrite(rewritten);
            }
        }
        verdict
    }

    /// The message with every text block of its result between nonce
    /// markers; `None` when there is no text to mark.
    fn spotlight_result(&mut self, msg: &Message) -> Option<Value> {
        self.spotlights += 1;
        let nonce = format!("{}{:x}", self.nonce, self.spotlights);
        let mut v = msg.value.clone();
        let blocks = v.get_mut("result")?.get_mut("content")?.as_array_mut()?;
        let mut marked = false;
        for block in blocks {
            if block.get("type").and_then(Value::as_str) != Some("text") {
                continue;
            }
            if let Some(text) = block.get_mut("text") {
                if let Some(s) = text.as_str() {
                    *text = Value::String(self.inspector.spotlight(s, &nonce));
                    marked = true;
                }
            }
        }
        marked.then_some(v)
    }

    fn judge_result(
        &mut self,
        msg: &Message,
        method: &str,
        tool: Option<&str>,
        result: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if !self.settings.scan_results {
            return Verdict::Forward;
        }
        let findings = self.inspector.scan_result(method, result);
        self.act_on_output_findings(msg, method, tool, "result", findings, out)
    }

    /// An error answer's text reaches the model as a result's would (a
    /// host hands a failed call's message to it): judged the same way.
    fn judge_error(
        &mut self,
        msg: &Message,
        pending: &Pending,
        error: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if !self.settings.scan_results {
            return Verdict::Forward;
        }
        let (method, tool) = match pending {
            Pending::Initialize => ("initialize", None),
            Pending::ToolsList { .. } => ("tools/list", None),
            Pending::ToolsCall { tool } => ("tools/call", Some(tool.as_str())),
            Pending::Inspected(method) => (method.as_str(), None),
            Pending::Other => ("request", None),
        };
        let findings = self.inspector.scan_error(error);
        self.act_on_output_findings(msg, method, tool, "error", findings, out)
    }

    /// A notification's text (a log message, a progress message) is shown
    /// by hosts and may reach the model, but only the changes of DESIGN §4
    /// are made on the wire: a finding is an alert (audit when paused) and
    /// the notification goes on.
    fn inspect_notification(&mut self, method: &str, msg: &Message, out: &mut Vec<Output>) {
        let Some(params) = msg.value.get("params") else {
            return;
        };
        if !self.settings.scan_results {
            return;
        }
        let findings = self.inspector.scan_notification(method, params);
        let Some(sev) = max_severity(&findings) else {
            return;
        };
        let action = if self.settings.audit_only && sev.is_flagged() {
            Action::Audit
        } else {
            Action::Alert
        };
        out.push(Output::Event(
            EngineEvent::new("mcp_notification_finding", sev, action, &findings[0].rule)
                .reason(format!(
                    "{method} carries {} finding(s); notifications are passed on, not blocked",
                    findings.len()
                ))
                .evidence(findings_json(&findings)),
        ));
    }

    /// What a result's or an error's findings (`what`) do: an event, and
    /// when they are flagged and results are blocked, the answer replaced.
    fn act_on_output_findings(
        &mut self,
        msg: &Message,
        method: &str,
        tool: Option<&str>,
        what: &str,
        findings: Vec<Finding>,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let Some(sev) = max_severity(&findings) else {
            return Verdict::Forward;
        };
        let block = sev.is_flagged()
            && self.settings.result_action == ResultAction::Block
            && !self.settings.audit_only;
        let action = match (block, self.settings.audit_only) {
            (true, _) => Action::Block,
            (false, true) if sev.is_flagged() => Action::Audit,
            _ => Action::Alert,
        };
        let mut event = EngineEvent::new("mcp_tool_result_finding", sev, action, &findings[0].rule)
            .reason(format!(
                "{method} {what} carries {} finding(s)",
                findings.len()
            ))
            .evidence(findings_json(&findings));
        if let Some(tool) = tool {
            event = event.tool(tool);
        }
        out.push(Output::Event(event));
        if !block {
            return Verdict::Forward;
        }
        let Some(id) = msg.id() else {
            return Verdict::Drop;
        };
        let first = &findings[0];
        let reason = format!(
            "the {what} carried {} ({}, {}) at {}",
            first.family, first.rule, first.severity, first.path
        );
        if method == "tools/call" {
            Verdict::Rewrite(blocked_call_result(
                id,
                &self.server.server_id,
                tool.unwrap_or("?"),
                "scan.result",
                &reason,
            ))
        } else {
            Verdict::Rewrite(error_value(
                id,
                -32001,
                &format!("Gatehouse withheld this {method} {what}: {reason}"),
            ))
        }
    }

    fn server_request(
        &mut self,
        id: &RequestId,
        method: &str,
        msg: &Message,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let params = msg.params().unwrap_or(&Value::Null);
        match method {
            "elicitation/create" => self.elicitation(id, msg, params, out),
            "sampling/createMessage" => self.sampling(id, msg, params, out),
            "roots/list" => self.roots(id, out),
            _ => Verdict::Forward,
        }
    }

    /// `roots/list`: declined for restricted servers and under
    /// `requests.roots = "decline"` with a JSON-RPC error to the server.
    fn roots(&self, id: &RequestId, out: &mut Vec<Output>) -> Verdict {
        let (rule, reason) = if self.settings.restricted {
            ("restricted.roots", "restricted servers may not list roots")
        } else if !self.settings.roots_allowed {
            (
                "requests.roots",
                "policy declines roots/list (requests.roots)",
            )
        } else {
            return Verdict::Forward;
        };
        // Audit mode records what enforcement would do; restricted trust
        // is declined in every mode, like elicitation and sampling.
        let audit = self.settings.audit_only && !self.settings.restricted;
        out.push(Output::Event(
            EngineEvent::new(
                "mcp_roots_declined",
                Severity::Medium,
                if audit { Action::Audit } else { Action::Block },
                rule,
            )
            .reason(reason.to_string()),
        ));
        if audit {
            return Verdict::Forward;
        }
        Verdict::Answer(error_value(
            id,
            -32601,
            &format!("Gatehouse declined this roots/list request ({rule}): {reason}"),
        ))
    }

    fn sampling(
        &mut self,
        id: &RequestId,
        msg: &Message,
        params: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        if self.settings.restricted {
            return self.decline_sampling(
                id,
                "restricted.sampling",
                "restricted servers may not sample",
                out,
            );
        }
        let audit = self.settings.audit_only;
        if !self.settings.sampling_allowed {
            let reason = "policy declines sampling (requests.sampling)";
            if !audit {
                return self.decline_sampling(id, "requests.sampling", reason, out);
            }
            out.push(Output::Event(
                EngineEvent::new(
                    "mcp_sampling_blocked",
                    Severity::Medium,
                    Action::Audit,
                    "requests.sampling",
                )
                .reason(reason.to_string()),
            ));
        }
        let findings = if self.settings.scan_results {
            self.inspector
                .scan_server_request("sampling/createMessage", params)
        } else {
            Vec::new()
        };
        if max_severity(&findings).is_some_and(Severity::is_flagged) && !audit {
            out.push(Output::Event(
                EngineEvent::new(
                    "mcp_sampling_blocked",
                    Severity::High,
                    Action::Block,
                    &findings[0].rule,
                )
                .evidence(findings_json(&findings)),
            ));
            return Verdict::Answer(error_value(
                id,
                -1,
                "Gatehouse declined this sampling request: it carries hidden instructions",
            ));
        }
        // Other servers' context (`allServers`); `thisServer` is the
        // server's own and passes.
        if params.get("includeContext").and_then(Value::as_str) != Some("allServers") {
            return Verdict::Forward;
        }
        let rule = "requests.sampling_include_context";
        let evidence = json!({"includeContext": "allServers"});
        match self.settings.sampling_context {
            SamplingContext::Allow => {
                out.push(Output::Event(
                    EngineEvent::new("mcp_sampling_context", Severity::Low, Action::Allow, rule)
                        .reason(
                            "sampling asks for every server's context; forwarded (policy: allow)",
                        )
                        .evidence(evidence),
                ));
                Verdict::Forward
            }
            SamplingContext::Decline if !audit => {
                out.push(Output::Event(
                    EngineEvent::new(
                        "mcp_sampling_blocked",
                        Severity::Medium,
                        Action::Block,
                        rule,
                    )
                    .reason("sampling asked for every server's context (policy: decline)")
                    .evidence(evidence),
                ));
                Verdict::Answer(error_value(
                    id,
                    -1,
                    "Gatehouse declined this sampling request: it asks for other servers' context (requests.sampling_include_context)",
                ))
            }
            SamplingContext::Strip if !audit => {
                out.push(Output::Event(
                    EngineEvent::new("mcp_sampling_context", Severity::Medium, Action::Alert, rule)
                        .reason("sampling asked for every server's context; downgraded to \"thisServer\" (policy: strip)")
                        .evidence(evidence),
                ));
                let mut v = msg.value.clone();
                if let Some(p) = v.get_mut("params").and_then(Value::as_object_mut) {
                    p.insert("includeContext".into(), Value::String("thisServer".into()));
                }
                Verdict::Rewrite(v)
            }
            SamplingContext::Strip | SamplingContext::Decline => {
                out.push(Output::Event(
                    EngineEvent::new("mcp_sampling_context", Severity::Medium, Action::Audit, rule)
                        .reason("audit mode: sampling asks for every server's context; would be changed or declined")
                        .evidence(evidence),
                ));
                Verdict::Forward
            }
        }
    }

    fn decline_sampling(
        &self,
        id: &RequestId,
        rule: &str,
        reason: &str,
        out: &mut Vec<Output>,
    ) -> Verdict {
        out.push(Output::Event(
            EngineEvent::new(
                "mcp_sampling_blocked",
                Severity::Medium,
                Action::Block,
                rule,
            )
            .reason(reason.to_string()),
        ));
        Verdict::Answer(error_value(
            id,
            -1,
            &format!("Gatehouse declined this sampling request: {reason}"),
        ))
    }

    fn elicitation(
        &mut self,
        id: &RequestId,
        msg: &Message,
        params: &Value,
        out: &mut Vec<Output>,
    ) -> Verdict {
        let decline = |rule: &str, reason: String, out: &mut Vec<Output>| {
            out.push(Output::Event(
                EngineEvent::new(
                    "mcp_elicitation_declined",
                    Severity::Medium,
                    Action::Block,
                    rule,
                )
                .reason(reason),
            ));
            Verdict::Answer(
                json!({"jsonrpc": "2.0", "id": id.to_value(), "result": {"action": "decline"}}),
            )
        };
        if self.settings.restricted {
            return decline(
                "restricted.elicitation",
                "restricted servers may not ask for input".into(),
                out,
            );
        }
        if !self.settings.elicitation_allowed {
            let reason = "policy declines input requests (requests.elicitation)";
            if !self.settings.audit_only {
                return decline("requests.elicitation", reason.into(), out);
            }
            out.push(Output::Event(
                EngineEvent::new(
                    "mcp_elicitation_declined",
                    Severity::Medium,
                    Action::Audit,
                    "requests.elicitation",
                )
                .reason(format!("audit mode: {reason}")),
            ));
        }
        let sensitive = sensitive_field(params);
        if let (Some(field), SensitiveElicitation::Decline) =
            (&sensitive, self.settings.sensitive_elicitation)
        {
            return decline(
                "elicitation.sensitive_field",
                format!(
                    "asked for {field:?}; secrets must not be collected through form elicitation"
                ),
                out,
            );
        }
        let findings = self
            .inspector
            .scan_server_request("elicitation/create", params);
        if max_severity(&findings).is_some_and(Severity::is_flagged) && !self.settings.audit_only {
            return decline(
                "scan.elicitation",
                "the request carries hidden instructions".into(),
                out,
            );
        }
        // The person answers in the dashboard: sensitive fields (decline
        // only there) and clients that cannot show input requests.
        let inbox_rule = match (&sensitive, self.settings.sensitive_elicitation) {
            (Some(_), SensitiveElicitation::Inbox) => Some("elicitation.sensitive_field"),
            _ if self.settings.elicitation_inbox => Some("requests.elicitation"),
            _ if !self.client_elicits => Some("elicitation.inbox"),
            _ => None,
        };
        if let Some(rule) = inbox_rule {
            out.push(Output::Inbox(InputRequest {
                id: id.clone(),
                params: params.clone(),
                client: self.client_name.clone(),
                rule,
            }));
            return Verdict::Drop;
        }
        if let Some(field) = &sensitive {
            out.push(Output::Event(
                EngineEvent::new(
                    "mcp_elicitation_sensitive",
                    Severity::Medium,
                    Action::Alert,
                    "elicitation.sensitive_field",
                )
                .reason(format!(
                    "asked for {field:?}; forwarded to the client with a warning (policy: warn)"
                )),
            ));
        }
        // Fixed identity prefix the server cannot spoof.
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut v = msg.value.clone();
        if let Some(p) = v.get_mut("params").and_then(Value::as_object_mut) {
            p.insert(
                "message".into(),
                Value::String(format!(
                    "Server {} asks: {}",
                    self.settings.server_label, message
                )),
            );
        }
        out.push(Output::Event(EngineEvent::new(
            "mcp_elicitation_forwarded",
            Severity::Info,
            Action::Allow,
            "elicitation.prefixed",
        )));
        Verdict::Rewrite(v)
    }

    fn server_list_changed(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let due = self.last_list_changed_ms.is_none_or(|last| {
            now_ms.saturating_sub(last) >= self.settings.list_changed_interval_ms
        });
        if due {
            self.send_list_changed(now_ms, out);
        } else {
            self.trailing_list_changed = true;
        }
    }

    fn send_list_changed(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        self.last_list_changed_ms = Some(now_ms);
        self.trailing_list_changed = false;
        out.push(Output::ToClient(request_line(
            None,
            "notifications/tools/list_changed",
            None,
        )));
    }

    /// When the host should call [`Relay::on_tick`] next, if at all.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        let list_changed = self.trailing_list_changed.then(|| {
            self.last_list_changed_ms.unwrap_or(0) + self.settings.list_changed_interval_ms
        });
        list_changed
            .into_iter()
            .chain(self.own_listing.deadline_ms)
            .min()
    }

    /// Timers: sends a coalesced trailing `list_changed` when it is due, and
    /// gives up on our own listing when the server is too slow to answer.
    pub fn on_tick(&mut self, now_ms: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let list_changed_due =
            self.last_list_changed_ms.unwrap_or(0) + self.settings.list_changed_interval_ms;
        if self.trailing_list_changed && now_ms >= list_changed_due {
            self.send_list_changed(now_ms, &mut out);
        }
        if self.own_listing.deadline_ms.is_some_and(|d| now_ms >= d) {
            for request in self.internal.values_mut() {
                *request = Internal::Abandoned;
            }
            let reason = format!(
                "the server did not list its tools within {} s",
                OWN_LIST_TIMEOUT_MS / 1000
            );
            self.own_listing_failed(reason, now_ms, &mut out);
        }
        out
    }

    /// New pins from the store (a person approved, rejected or reset).
    /// Tools whose seen hash is now approved become callable at once, and the
    /// client gets one `notifications/tools/list_changed`.
    pub fn on_pins_reloaded(&mut self, pins: PinTable, now_ms: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let mut changed = false;
        for (name, seen) in self.tools.iter_mut() {
            let approved = pins
                .get(name)
                .filter(|p| p.state == PinState::Trusted)
                .and_then(|p| p.approved_hash.as_deref())
                == Some(seen.hash.as_str());
            let pin_withheld = matches!(
                seen.withheld_rule,
                "pin.held" | "pin.locked" | "scan.quarantined"
            );
            if !seen.exposed && pin_withheld && approved {
                seen.exposed = true;
                changed = true;
                out.push(Output::Event(
                    EngineEvent::new(
                        "mcp_tool_approved",
                        Severity::Info,
                        Action::Allow,
                        "pin.approved",
                    )
                    .tool(name)
                    .evidence(json!({ "hash": seen.hash })),
                ));
            } else if seen.exposed
                && !approved
                && pins.get(name).is_some_and(|p| {
                    p.state == PinState::Rejected
                        // Trusted here at first sight while another process
                        // pinned a different definition first: now held.
                        || (p.state == PinState::Held
                            && p.pending_hash.as_deref() == Some(seen.hash.as_str()))
                })
            {
                seen.exposed = false;
                seen.withheld_rule = "pin.held";
                changed = true;
            }
        }
        // Forget what was reported so reset pins are judged afresh.
        self.reported.retain(|(name, _)| pins.get(name).is_some());
        self.pins = pins;
        if changed {
            self.send_list_changed(now_ms, &mut out);
        }
        out
    }
}

/// Why the server's answer to our `tools/list` is no list, fit to show the
/// client: the error's code and message, the message without control
/// characters, at most 120 characters, and withheld when the scanner finds
/// anything in it (a credential, hidden instructions).
fn list_failure<I: Inspector>(msg: &Message, inspector: &I) -> String {
    let Some(error) = msg.value.get("error") else {
        return "the server answered tools/list without a list of tools".into();
    };
    let code = match error.get("code").and_then(Value::as_i64) {
        Some(code) => format!(" {code}"),
        None => String::new(),
    };
    let text = error.get("message").and_then(Value::as_str).unwrap_or("");
    let findings = inspector.scan_result(
        "tools/list",
        &json!({"content": [{"type": "text", "text": text}]}),
    );
    let said = match findings.first() {
        Some(finding) => format!("a message withheld for {}", finding.family),
        None => {
            let shown: String = text.chars().filter(|c| !c.is_control()).take(120).collect();
            format!("{shown:?}")
        }
    };
    format!("the server answered tools/list with error{code}: {said}")
}

/// The `_meta` fields by which a request of the stateless revision
/// (2026-07-28) says which protocol its client speaks: that revision has
/// no `initialize`, so every request, our own included, must carry them.
const PROTOCOL_META: [&str; 3] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
];

/// The [`PROTOCOL_META`] fields `msg` carries, if any.
fn protocol_meta(msg: &Message) -> Option<Value> {
    let meta = msg.params()?.get("_meta")?.as_object()?;
    let fields: serde_json::Map<String, Value> = PROTOCOL_META
        .iter()
        .filter_map(|key| Some((key.to_string(), meta.get(*key)?.clone())))
        .collect();
    (!fields.is_empty()).then_some(Value::Object(fields))
}

/// The tool a `tools/call` names ("" when it names none).
fn called_tool(msg: &Message) -> &str {
    msg.params()
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The request a `notifications/cancelled` names, if `msg` is one.
fn cancelled_request(msg: &Message) -> Option<RequestId> {
    match &msg.kind {
        MessageKind::Notification { method } if method == "notifications/cancelled" => msg
            .params()
            .and_then(|p| p.get("requestId"))
            .and_then(RequestId::from_value),
        _ => None,
    }
}

/// Whoever waits on a client frame Gatehouse dropped gets an error: the
/// server, for the client's answer to its request; the client, for its
/// request ("Gatehouse {verb} this request: {why}", `code`).
fn answer_dropped_client_frame(
    peeked: Option<Peek>,
    code: i64,
    verb: &str,
    why: &str,
    out: &mut Vec<Output>,
) {
    match peeked {
        Some(Peek {
            id,
            kind: PeekKind::Response,
        }) => {
            let message = format!("Gatehouse dropped the client's response: {why}");
            out.push(Output::ToServer(error_line(&id, -32603, &message, None)));
        }
        Some(Peek { id, .. }) => {
            let message = format!("Gatehouse {verb} this request: {why}");
            out.push(Output::ToClient(error_line(&id, code, &message, None)));
        }
        None => {}
    }
}

fn oversized_event(side: &str, len: u64, max: usize) -> Output {
    Output::Event(
        EngineEvent::new(
            "frame_dropped",
            Severity::Medium,
            Action::Drop,
            "framing.oversized",
        )
        .reason(format!(
            "{side} frame of {len} bytes exceeds the {max}-byte ceiling; dropped"
        ))
        .evidence(json!({ "bytes": len, "side": side })),
    )
}

fn withheld_reason(rule: &str) -> &'static str {
    match rule {
        "scan.quarantined" => "the tool definition carries hidden instructions and is quarantined until a person approves it",
        "pin.locked" => "the tool list is locked and this tool was not in it",
        "policy.tool_not_exposed" => "policy does not expose this tool",
        "list.tool_cap" => "the server lists more tools than policy allows",
        "list.duplicate_name" => "the server lists different tools under this one name, so a call could run any of them",
        _ => "the tool definition is new or changed since it was approved and waits for approval",
    }
}

/// The first requested field whose name or title looks like a secret.
pub fn sensitive_field(params: &Value) -> Option<String> {
    let schema = params.get("requestedSchema")?;
    crate::sensitive::sensitive_fields(schema)
        .into_iter()
        .next()
}

fn to_line(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// A message the relay writes, its id echoed as the request's text (an
/// answer Gatehouse writes, a rewrite, a batch's other members).
fn message_line(value: &Value, id: Option<&RequestId>) -> Vec<u8> {
    match id {
        Some(id) if RequestId::from_value(&value["id"]).as_ref() == Some(id) => {
            gatehouse_protocol::message::message_line(value, id)
        }
        _ => to_line(value),
    }
}

/// The error JSON-RPC sends when a request's id cannot be read.
fn null_id_error(code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}})
}

/// Whether a line that did not parse was meant as JSON (a BOM aside): an
/// object or an array.
fn looks_like_json(raw: &[u8]) -> bool {
    let text = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
    matches!(text.trim_ascii_start().first(), Some(b'{' | b'['))
}

fn error_value(id: &RequestId, code: i64, message: &str) -> Value {
    serde_json::from_slice(&error_line(id, code, message, None)).unwrap_or(Value::Null)
}

/// The `isError` result a blocked call gets (DESIGN §4): names the rule, the
/// reason and where to review it.
pub(crate) fn blocked_call_result(
    id: &RequestId,
    server_id: &str,
    tool: &str,
    rule: &str,
    reason: &str,
) -> Value {
    let text = format!(
        "Gatehouse blocked this call to {tool:?} (rule {rule}): {reason}. \
         Review it in the Gatehouse dashboard or with `gatehouse events --server {server_id}`."
    );
    serde_json::from_slice(&response_line(
        id,
        json!({"content": [{"type": "text", "text": text}], "isError": true}),
    ))
    .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;

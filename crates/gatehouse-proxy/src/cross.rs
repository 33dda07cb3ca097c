//! Cross-server rules in the relay (issue 5): the engine decides
//! (`gatehouse_engine::cross_server`), this module does the store round trip.
//!
//! Every `tools/call` the relay lets through is checked against the calls of
//! every wrap process of the client session, and recorded, in one
//! `BEGIN IMMEDIATE` transaction ([`Store::check_call`]). A blocked call is
//! answered here with an `isError` result. The results of recorded reads are
//! reduced to taint marks (keyed hashes, see `cross_server::taint`) and
//! attached before any later call of another server can be judged: in the
//! database before the client sees them, or, while the server is alone in
//! its session, on another thread once they were forwarded ([`LateMarks`]),
//! so the marks cost the client no wait, and a hand-over to a joining
//! server waits for them (`Presence::lock_marked`). The tools this
//! server exposes are published per session for the shadowing rule. Package
//! typosquatting is judged once, before the server starts.

use std::collections::HashMap;
use std::sync::Arc;

use gatehouse_config::{FlowMode as PolicyFlow, Policy, ServerSettings, ToolClass as PolicyClass};
use gatehouse_engine::cross_server::batch;
use gatehouse_engine::cross_server::{
    self, blocked_value, decision_event, typosquat, ArgMarks, Bucket, BurstSettings, CallFacts,
    CrossDecision, CrossRules, CrossVerdict, FlowMode, FlowSettings, Prior, RateSettings,
    ShadowFacts, ShadowPeer, TaintKey, ToolClass,
};
use gatehouse_engine::{Action, EngineEvent, Inspector, Output, Passed, Peer, Relay, Severity};
use gatehouse_protocol::{Raw, RequestId};
use gatehouse_store::{
    now_ms, BucketState, CallCheck, CallDecision, CallId, LocalCall, NewCall, Store, WindowLoad,
    WindowSnapshot,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::presence::{Local, Pending, Presence};

/// What the cross-server stage does with one call.
enum Checked {
    Forward,
    /// Blocked: this answer goes to the client.
    Answer(Value),
}

/// Results of reads made while alone, forwarded before their marks are
/// taken ([`Cross::attach_late`]). The session's lock is held from before
/// the client can see them until they are counted as on their way, so a
/// hand-over to the database (a joining server) cannot slip between.
pub struct LateMarks {
    presence: Arc<Presence>,
    local: OwnedMutexGuard<Local>,
    results: Vec<(u64, Value)>,
}

/// Who this wrap process is, for the session's shared window.
pub struct CrossIdentity {
    pub session: String,
    pub server_id: String,
    pub pin_server_id: String,
    pub command_hash: String,
}

/// A call relayed unchecked, waiting to be written (`Cross::unrecorded`).
struct Unrecorded {
    call: LocalCall,
    /// Its request's id while its result is awaited.
    request: Option<String>,
}

/// Calls relayed unchecked kept for a later write at most (the oldest go).
const MAX_UNRECORDED: usize = 256;

/// The cross-server hook of one wrap process.
pub struct Cross {
    store: Option<Store>,
    /// Session membership: the fast path while alone (None: every call goes
    /// through the store, e.g. when joining failed).
    presence: Option<Arc<Presence>>,
    /// The join, while it runs in the background.
    joining: Option<JoinHandle<Option<Arc<Presence>>>>,
    /// Lets the background join begin (`start_joining`).
    join_opener: Option<crate::ready::Opener>,
    me: CrossIdentity,
    rules: CrossRules,
    policy: Policy,
    key: TaintKey,
    fail_closed: bool,
    /// Recorded reads waiting for their result (request id → call), without
    /// presence; with it they live in its `Local`.
    pending: HashMap<String, CallId>,
    /// Calls relayed unchecked while the database could not be reached,
    /// whose results may be carried out later: written, with their marks,
    /// by the next check that reaches it (DESIGN §8, "record what can be
    /// recorded later"), so a later call can still be linked to them.
    unrecorded: Vec<Unrecorded>,
    tools_generation: u64,
    /// Listed tools' classes, for the relay's tool list of
    /// `classes_generation`: a class depends only on the name, the listed
    /// definition and the policy, so it is worked out once per listing,
    /// not on every call.
    classes: HashMap<String, ToolClass>,
    classes_generation: u64,
}

fn flow(mode: PolicyFlow, window: std::time::Duration, on: bool) -> FlowSettings {
    FlowSettings {
        mode: match mode {
            _ if !on => FlowMode::Off,
            PolicyFlow::Off => FlowMode::Off,
            PolicyFlow::Linked => FlowMode::Linked,
            PolicyFlow::Strict => FlowMode::Strict,
        },
        window_ms: window.as_millis() as i64,
    }
}

/// The engine's rules for one server, from the policy.
pub fn rules_for(policy: &Policy, server: &ServerSettings) -> CrossRules {
    let cs = &policy.cross_server;
    let read_then_send = flow(cs.read_then_send.mode, cs.read_then_send.window, true);
    // Whatever this server's own checks, the session's other servers link
    // to its calls for as long as the policy's longest sequence window.
    let session_reads_ms = read_then_send
        .reach_ms()
        .max(flow(cs.flow.mode, cs.flow.window, true).reach_ms());
    CrossRules {
        session_reads_ms,
        read_then_send,
        flow: flow(cs.flow.mode, cs.flow.window, server.flow_checked),
        burst: server.burst_checked.then_some(BurstSettings {
            max_calls: cs.burst.max_calls,
            window_ms: cs.burst.window.as_millis() as i64,
            cooldown_ms: cs.burst.cooldown.as_millis() as i64,
        }),
        rate: server.rate_limited.then_some(RateSettings {
            per_minute: server.rate_limit.calls_per_minute,
            burst: server.rate_limit.burst,
        }),
    }
}

fn engine_class(c: PolicyClass) -> ToolClass {
    match c {
        PolicyClass::Read => ToolClass::Read,
        PolicyClass::Write => ToolClass::Write,
        PolicyClass::Send => ToolClass::Send,
        PolicyClass::Compute => ToolClass::Compute,
        PolicyClass::Unknown => ToolClass::Unknown,
    }
}

/// The taint key: derived from the per-install key, never stored.
pub fn taint_key(install_key: &[u8]) -> TaintKey {
    let bytes: [u8; 32] = Sha256::new()
        .chain_update(b"gatehouse.taint.v1")
        .chain_update(install_key)
        .finalize()
        .into();
    TaintKey::new(&bytes)
}

fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The id key of a response (None for requests and notifications).
fn result_key(msg: &Value) -> Option<String> {
    if msg.get("method").is_some() {
        return None;
    }
    msg.get("id").map(id_key)
}

/// Cheap pre-filter before parsing a line again.
impl Cross {
    pub fn new(
        store: Option<Store>,
        joining: Option<(JoinHandle<Option<Arc<Presence>>>, crate::ready::Opener)>,
        me: CrossIdentity,
        policy: &Policy,
        rules: CrossRules,
        key: TaintKey,
    ) -> Cross {
        let (joining, join_opener) = joining.unzip();
        Cross {
            store,
            presence: None,
            joining,
            join_opener,
            rules,
            policy: policy.clone(),
            key,
            fail_closed: policy.fail_closed(),
            me,
            pending: HashMap::new(),
            unrecorded: Vec::new(),
            tools_generation: 0,
            classes: HashMap::new(),
            classes_generation: 0,
        }
    }

    /// Checks the relay's outputs: `tools/call`s bound for the server go
    /// through the session's rules; results of recorded reads leave marks.
    /// Results whose marks wait are returned with the lock that keeps
    /// them safe: the caller forwards, then calls [`Cross::attach_late`].
    pub async fn filter<I: Inspector>(
        &mut self,
        outputs: Vec<Output>,
        relay: &Relay<I>,
    ) -> (Vec<Output>, Option<LateMarks>) {
        if self.store.is_none() && !self.fail_closed {
            return (outputs, None);
        }
        self.publish_tools(relay).await;
        if self.joining.is_some() && outputs.iter().any(batch::sends_call) {
            self.joined().await;
        }
        let mut out = Vec::with_capacity(outputs.len());
        let mut late = None;
        for output in outputs {
            match output {
                output if batch::sends_call(&output) => {
                    // The check takes the session lock: results waiting
                    // under it go to be marked first (rare: a result and a
                    // call in one turn).
                    if let Some(waiting) = late.take() {
                        self.attach_late(waiting);
                    }
                    match batch::frame_of(output, Peer::Server) {
                        Ok(frame) => self.check_frame(frame, relay, &mut out).await,
                        Err(line) => out.push(line),
                    }
                }
                Output::Settled(id) => {
                    // No result will come for it: its read stops waiting.
                    let key = id_key(&id.to_value());
                    self.mark_unrecorded(&key, None);
                    match (&self.presence, late.as_mut()) {
                        (_, Some(held)) => drop(held.local.pending.remove(&key)),
                        (Some(p), None) => drop(p.local.lock().await.pending.remove(&key)),
                        (None, None) => drop(self.pending.remove(&key)),
                    }
                    out.push(Output::Settled(id));
                }
                output @ (Output::ToClient(_)
                | Output::Pass {
                    to: Peer::Client, ..
                }) if self.may_await_result(&late).await => {
                    match batch::frame_of(output, Peer::Client) {
                        Ok(frame) => out.push(self.observe_result(frame, &mut late).await),
                        Err(line) => out.push(line),
                    }
                }
                other => out.push(other),
            }
        }
        (out, late)
    }

    /// Has the marks of results already forwarded taken on another thread
    /// (`Presence::mark_later`) and releases the session lock.
    pub fn attach_late(&self, late: LateMarks) {
        let LateMarks {
            presence,
            local,
            results,
        } = late;
        presence.mark_later(&self.key, local, results);
    }

    /// Publishes the exposed tool names when the relay judged a listing,
    /// before that listing reaches the client: another server's call made
    /// right after must already see them (shadowing). One write per
    /// listing, never per call.
    async fn publish_tools<I: Inspector>(&mut self, relay: &Relay<I>) {
        if relay.tools_generation() == self.tools_generation {
            return;
        }
        self.tools_generation = relay.tools_generation();
        let Some(store) = self.store.clone() else {
            return;
        };
        let names: Vec<String> = relay
            .exposed_tools()
            .into_iter()
            .map(str::to_owned)
            .collect();
        let me = (
            self.me.session.clone(),
            self.me.server_id.clone(),
            self.me.pin_server_id.clone(),
            self.me.command_hash.clone(),
        );
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        if let Err(err) = store
            .set_session_tools(&me.0, &me.1, &me.2, &me.3, &refs, now_ms())
            .await
        {
            warn!(%err, "could not publish the session's tools");
        }
    }

    /// A frame bound for the server: a single `tools/call`, or every
    /// `tools/call` of a batch in order (each checked and recorded like a
    /// single call), the blocked ones answered in one batch reply.
    async fn check_frame<I: Inspector>(
        &mut self,
        frame: Passed,
        relay: &Relay<I>,
        out: &mut Vec<Output>,
    ) {
        let mut answers = Vec::with_capacity(frame.messages.len());
        for item in &frame.messages {
            let answer = match batch::is_call(item) {
                true => match self.check_call(item, relay, out).await {
                    Checked::Forward => None,
                    Checked::Answer(answer) => Some(answer),
                },
                false => None,
            };
            answers.push(answer);
        }
        batch::settle(frame, answers, out);
    }

    /// One `tools/call` request (`batch::is_call`): judged, recorded when
    /// it passes, its events pushed to `out`.
    async fn check_call<I: Inspector>(
        &mut self,
        msg: &Value,
        relay: &Relay<I>,
        out: &mut Vec<Output>,
    ) -> Checked {
        let Some((id, rid)) = msg
            .get("id")
            .and_then(|id| Some((id, RequestId::from_value(id)?)))
        else {
            return Checked::Forward;
        };
        let params = msg.get("params");
        let tool = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if self.store.is_none() {
            let err = "the database could not be opened".to_string();
            let audit_only = relay.settings().audit_only;
            return self.unavailable(&rid, &tool, audit_only, err, None, out);
        }
        let class = self.class_of(&tool, relay);
        let needs_marks = self.rules.needs_marks(class);
        // Hashing the arguments is most of a large call's check: done only
        // when another server's read could be linked to them.
        let marks = || {
            params
                .and_then(|p| p.get("arguments"))
                .map(|a| ArgMarks::of(&self.key, a))
                .unwrap_or_default()
        };
        let mut facts = CallFacts {
            server_id: self.me.server_id.clone(),
            tool: tool.clone(),
            class,
            args: ArgMarks::default(),
        };
        let audit_only = relay.settings().audit_only;
        let now = now_ms();
        if let Some(presence) = self.presence.clone() {
            presence.catch_up().await;
            let mut local = presence.local.lock().await;
            if local.alone {
                if needs_marks && local.holds_others_marks() {
                    facts.args = marks();
                }
                let d = judge_local(&self.rules, &self.me, &facts, now, &local);
                let d = if audit_only { d.audited() } else { d };
                if let Some(b) = d.bucket {
                    local.bucket = Some(b);
                }
                if d.record {
                    let call = LocalCall {
                        tool: tool.clone(),
                        category: class.as_str().to_string(),
                        time_ms: now,
                        outcome: d.outcome().to_string(),
                        result: None,
                    };
                    let request = class.leaves_marks().then(|| id_key(id));
                    local.record(class, call, request, self.rules.window_ms());
                }
                drop(local);
                return self.answer(&rid, &tool, d, out);
            }
            drop(local);
            if let Err(err) = presence.wait_join_synced().await {
                let relayed = Some((id, class));
                return self.unavailable(&rid, &tool, audit_only, err, relayed, out);
            }
        }
        if needs_marks {
            facts.args = marks();
        }
        self.record_unrecorded().await;
        let back = self.rules.lookback(class);
        let check = CallCheck {
            session: &self.me.session,
            now_ms: now,
            clock: Some(now_ms),
            window_ms: self.rules.window_ms(),
            load: WindowLoad::Lean {
                other_reads_ms: back.other_reads_ms,
                own_ms: back.own_ms,
            },
            exposing: Some(&tool),
        };
        let call = NewCall {
            server_id: self.me.server_id.clone(),
            tool: tool.clone(),
            category: class.as_str().to_string(),
            outcome: String::new(),
            detail: None,
        };
        let rules = &self.rules;
        let me = &self.me;
        let store = self.store.as_ref().expect("checked by filter");
        let outcome = store
            .check_call(check, call, |snap| {
                let d = judge(rules, me, &facts, snap);
                let d = if audit_only { d.audited() } else { d };
                CallDecision {
                    record: d.record,
                    bucket: d.bucket.map(|b| BucketState {
                        tokens: b.tokens,
                        updated_ms: b.updated_ms,
                        cooldown_until_ms: b.cooldown_until_ms,
                    }),
                    verdict: d,
                }
            })
            .await;
        match outcome {
            Ok(outcome) => {
                // A blocked call gets no result to wait for.
                let forwarded = !matches!(outcome.decision.verdict.verdict, CrossVerdict::Block(_));
                let marked = forwarded && class.leaves_marks();
                if let (Some(call), true) = (outcome.recorded, marked) {
                    match &self.presence {
                        Some(p) => {
                            p.local
                                .lock()
                                .await
                                .pending
                                .insert(id_key(id), Pending::Stored(call));
                        }
                        None => {
                            self.pending.insert(id_key(id), call);
                        }
                    }
                }
                self.answer(&rid, &tool, outcome.decision.verdict, out)
            }
            Err(err) => {
                let relayed = Some((id, class));
                self.unavailable(&rid, &tool, audit_only, err.to_string(), relayed, out)
            }
        }
    }

    /// A tool's class (`cross_server::classify`), remembered for the tools
    /// of the current listing. A tool the relay has no definition of is
    /// classified by its name on every call (nothing bounds such names).
    fn class_of<I: Inspector>(&mut self, tool: &str, relay: &Relay<I>) -> ToolClass {
        let facts = relay.tool_facts(tool);
        if facts.is_some() {
            if self.classes_generation != relay.tools_generation() {
                self.classes.clear();
                self.classes_generation = relay.tools_generation();
            }
            if let Some(class) = self.classes.get(tool) {
                return *class;
            }
        }
        let overrides: Vec<ToolClass> = self
            .policy
            .cross_server
            .classification_override(tool)
            .into_iter()
            .map(engine_class)
            .collect();
        let class = cross_server::classify(tool, facts, &overrides);
        if facts.is_some() {
            self.classes.insert(tool.to_string(), class);
        }
        class
    }

    /// The event and the answer for a decision: a block is answered here,
    /// anything else is forwarded.
    fn answer(
        &self,
        rid: &RequestId,
        tool: &str,
        decision: CrossDecision,
        out: &mut Vec<Output>,
    ) -> Checked {
        if let Some(event) = decision_event(tool, &decision.verdict) {
            out.push(Output::Event(event));
        }
        match &decision.verdict {
            CrossVerdict::Block(finding) => {
                gatehouse_engine::call_blocked_after_relay(out, tool, rid.clone());
                Checked::Answer(blocked_value(rid, &self.me.server_id, tool, finding))
            }
            _ => Checked::Forward,
        }
    }

    /// Writes the calls relayed unchecked whose results came (or will not
    /// come), still inside the window; kept for the next try when the
    /// database is still out of reach.
    async fn record_unrecorded(&mut self) {
        if self.unrecorded.is_empty() {
            return;
        }
        let horizon = now_ms() - self.rules.window_ms();
        self.unrecorded.retain(|u| u.call.time_ms >= horizon);
        let ready: Vec<LocalCall> = self
            .unrecorded
            .extract_if(.., |u| u.request.is_none())
            .map(|u| u.call)
            .collect();
        // Calls are kept only where there is a store to write them to.
        let Some(store) = self.store.as_ref().filter(|_| !ready.is_empty()) else {
            return;
        };
        let written = store
            .record_late_calls(&self.me.session, &self.me.server_id, &ready)
            .await;
        if let Err(err) = written {
            warn!(%err, "could not record calls relayed unchecked; tried again later");
            let again = ready.into_iter().map(|call| Unrecorded {
                call,
                request: None,
            });
            self.unrecorded.extend(again);
        }
    }

    /// The result of a call relayed unchecked: its marks, kept with it.
    fn mark_unrecorded(&mut self, key: &str, result: Option<&Value>) {
        let waiting = self
            .unrecorded
            .iter_mut()
            .find(|u| u.request.as_deref() == Some(key));
        if let Some(u) = waiting {
            u.request = None;
            u.call.result = result.map(|r| cross_server::taint::result_marks(&self.key, r));
        }
    }

    /// DESIGN §8: the database is unavailable or busy past budget. A call
    /// `relayed` unchecked (not blocked) whose result leaves marks is kept
    /// to be written later (`record_unrecorded`).
    fn unavailable(
        &mut self,
        rid: &RequestId,
        tool: &str,
        audit_only: bool,
        err: String,
        relayed: Option<(&Value, ToolClass)>,
        out: &mut Vec<Output>,
    ) -> Checked {
        let block = self.fail_closed && !audit_only;
        if let Some((id, class)) = relayed.filter(|(_, class)| !block && class.leaves_marks()) {
            if self.unrecorded.len() >= MAX_UNRECORDED {
                self.unrecorded.remove(0);
            }
            self.unrecorded.push(Unrecorded {
                call: LocalCall {
                    tool: tool.to_string(),
                    category: class.as_str().to_string(),
                    time_ms: now_ms(),
                    outcome: "unchecked".into(),
                    result: None,
                },
                request: Some(id_key(id)),
            });
        }
        out.push(Output::Event(
            EngineEvent::new(
                "mcp_cross_server_unavailable",
                Severity::Medium,
                if block { Action::Block } else { Action::Alert },
                "cross_server.unavailable",
            )
            .tool(tool)
            .reason(format!(
                "cross-server rules could not be checked ({err}); {}",
                if block {
                    "blocked (fail_closed)"
                } else {
                    "call relayed unchecked"
                }
            )),
        ));
        if block {
            gatehouse_engine::call_blocked_after_relay(out, tool, rid.clone());
            let finding = cross_server::CrossFinding {
                rule: "cross_server.unavailable",
                severity: Severity::Medium,
                reason: "the session's call window could not be checked".into(),
                related: Vec::new(),
                retry_after_ms: None,
                hold: false,
            };
            Checked::Answer(blocked_value(rid, &self.me.server_id, tool, &finding))
        } else {
            Checked::Forward
        }
    }

    /// Lets the background join begin (it waits for this, so that it does
    /// not compete with the server's start-up).
    pub fn start_joining(&mut self) {
        if let Some(opener) = self.join_opener.take() {
            opener.open();
        }
    }

    /// Finishes the background join (once).
    async fn joined(&mut self) {
        self.start_joining();
        if let Some(join) = self.joining.take() {
            self.presence = join.await.ok().flatten();
        }
    }

    /// Whether a recorded read may be waiting for its result.
    async fn may_await_result(&self, late: &Option<LateMarks>) -> bool {
        if self.unrecorded.iter().any(|u| u.request.is_some()) {
            return true;
        }
        match (&self.presence, late) {
            (_, Some(held)) => !held.local.pending.is_empty(),
            (Some(p), None) => !p.local.lock().await.pending.is_empty(),
            (None, None) => !self.pending.is_empty(),
        }
    }

    /// The results of recorded reads in a server frame. A read recorded in
    /// the database gets its marks there (one indexed UPDATE) before the
    /// result is forwarded; a read kept in memory while alone, from a line
    /// forwarded as it was read, gets them after ([`LateMarks`]).
    async fn observe_result(&mut self, frame: Passed, late: &mut Option<LateMarks>) -> Output {
        // A batch reply's elements are results like single ones.
        let Passed {
            raw,
            mut messages,
            batch,
        } = frame;
        // A split line takes its longest string back from the message when
        // it is forwarded, so only a whole line's results can wait.
        let may_wait = matches!(raw, Raw::Whole(_));
        if !self.unrecorded.is_empty() {
            for msg in &messages {
                if let Some(key) = result_key(msg) {
                    self.mark_unrecorded(&key, msg.get("result"));
                }
            }
        }
        let mut stored = Vec::new();
        match &self.presence {
            Some(p) => {
                // One lock hold: a hand-over cannot slip between the
                // lookup and the attach.
                let mut held = match late.take() {
                    Some(held) => held,
                    None => LateMarks {
                        presence: Arc::clone(p),
                        local: Arc::clone(&p.local).lock_owned().await,
                        results: Vec::new(),
                    },
                };
                for msg in &mut messages {
                    let Some(key) = result_key(msg) else { continue };
                    match held.local.pending.remove(&key) {
                        None => {}
                        Some(Pending::Stored(call)) => stored.extend(
                            msg.get("result")
                                .map(|r| (call, cross_server::taint::result_marks(&self.key, r))),
                        ),
                        Some(Pending::Local(seq)) => match msg.get_mut("result") {
                            Some(result) if may_wait => held.results.push((seq, result.take())),
                            Some(result) => {
                                let marks = cross_server::taint::result_marks(&self.key, result);
                                held.local.attach(seq, marks);
                            }
                            None => {}
                        },
                    }
                }
                if !held.results.is_empty() {
                    *late = Some(held);
                }
            }
            None => {
                for msg in &messages {
                    let Some(call) = result_key(msg).and_then(|key| self.pending.remove(&key))
                    else {
                        continue;
                    };
                    stored.extend(
                        msg.get("result")
                            .map(|r| (call, cross_server::taint::result_marks(&self.key, r))),
                    );
                }
            }
        }
        if let Some(store) = &self.store {
            for (call, marks) in stored {
                if let Err(err) = store.attach_result(call, &marks).await {
                    warn!(%err, "could not attach a result's taint marks");
                }
            }
        }
        // The messages may have given their results to the late marks, so
        // only the line goes on: nothing after this may read them.
        let line = Passed {
            raw,
            messages,
            batch,
        }
        .into_line();
        Output::ToClient(line)
    }

    /// Removes this server's tools from the session and leaves it (the
    /// process ends).
    pub async fn leave(&mut self) {
        self.joined().await;
        // Calls relayed unchecked whose results came still count.
        self.record_unrecorded().await;
        if let Some(presence) = &self.presence {
            let rules = &self.rules;
            presence
                .leave(|class, age_ms| rules.outlives_exit(class, age_ms))
                .await;
        }
        if let Some(store) = &self.store {
            let _ = store
                .set_session_tools(
                    &self.me.session,
                    &self.me.server_id,
                    &self.me.pin_server_id,
                    &self.me.command_hash,
                    &[],
                    now_ms(),
                )
                .await;
        }
    }
}

/// The engine's decision over a store snapshot.
fn judge(
    rules: &CrossRules,
    me: &CrossIdentity,
    facts: &CallFacts,
    snap: &WindowSnapshot,
) -> CrossDecision {
    let prior: Vec<Prior<'_>> = snap
        .entries
        .iter()
        .map(|e| Prior {
            server_id: &e.server_id,
            tool: &e.tool,
            class: ToolClass::parse(&e.category).unwrap_or(ToolClass::Unknown),
            time_ms: e.time_ms,
            marks: e.result.as_deref(),
        })
        .collect();
    let bucket = snap.bucket(&me.server_id).map(|b| Bucket {
        tokens: b.tokens,
        updated_ms: b.updated_ms,
        cooldown_until_ms: b.cooldown_until_ms,
    });
    let mut shadow = ShadowFacts::default();
    for e in &snap.exposing {
        if e.server_id == me.server_id {
            shadow.own_pinned_ms = e.pinned_at_ms;
        } else {
            shadow.peers.push(ShadowPeer {
                server_id: e.server_id.clone(),
                same_command: e.command_hash == me.command_hash,
                pinned_ms: e.pinned_at_ms,
            });
        }
    }
    cross_server::decide(rules, facts, snap.now_ms, &prior, bucket, &shadow)
}

/// The engine's decision while this server is alone in its session: its
/// own in-memory calls and the reads other servers of the session made
/// before they left (loaded when it became alone), no peers to shadow.
fn judge_local(
    rules: &CrossRules,
    me: &CrossIdentity,
    facts: &CallFacts,
    now_ms: i64,
    local: &Local,
) -> CrossDecision {
    // Only what the rules look back at (`CrossRules::lookback`), not the
    // whole window: the window holds thousands of calls after a busy minute.
    let back = rules.lookback(facts.class);
    let since = |ms: Option<i64>| ms.map(|ms| now_ms.saturating_sub(ms));
    // With no other server's call in the window there is no read to find.
    let other_reads_ms = back.other_reads_ms.filter(|_| local.holds_others());
    let (own_since, other_since) = (since(back.own_ms), since(other_reads_ms));
    // The window is in time order (`Local::record`): skip to the first
    // call the rules look at instead of walking the whole window.
    let first = match own_since.into_iter().chain(other_since).min() {
        Some(start) => local.calls.partition_point(|e| e.call.time_ms < start),
        None => local.calls.len(),
    };
    let after = |bound: Option<i64>, t: i64| bound.is_some_and(|b| t >= b);
    let prior: Vec<Prior<'_>> = local
        .calls
        .range(first..)
        .filter(|e| match &e.server {
            None => after(own_since, e.call.time_ms),
            Some(_) => e.class.leaves_marks() && after(other_since, e.call.time_ms),
        })
        .map(|e| Prior {
            server_id: e.server.as_deref().unwrap_or(&me.server_id),
            tool: &e.call.tool,
            class: e.class,
            time_ms: e.call.time_ms,
            marks: e.call.result.as_deref(),
        })
        .collect();
    cross_server::decide(
        rules,
        facts,
        now_ms,
        &prior,
        local.bucket,
        &ShadowFacts::default(),
    )
}

/// Before the server starts: typosquatting. A server id similar to another
/// known id is a low event; a launched package similar to another configured
/// package or a popular MCP package is high and the server is held (refused
/// with the rule) — returns `(rule, reason)` then. `servers` is every known
/// server (read once at start; this one's own row is skipped).
pub async fn startup_checks(
    store: Option<&Store>,
    servers: &[gatehouse_store::Server],
    key: &gatehouse_store::MacKey,
    policy: &Policy,
    server_id: &str,
    argv: &[String],
    events: &mut Vec<EngineEvent>,
) -> Option<(String, String)> {
    let ty = &policy.cross_server.typosquat;
    if ty.server_names {
        let ids = servers
            .iter()
            .map(|s| s.id.as_str())
            .filter(|id| *id != server_id);
        if let Some((similar, score)) = typosquat::most_similar(server_id, ids, ty.server_threshold)
        {
            events.push(
                EngineEvent::new(
                    "mcp_server_name_similarity",
                    Severity::Low,
                    Action::Alert,
                    "cross_server.typosquat.server",
                )
                .reason(format!(
                    "server id {server_id:?} is similar to the known server {similar:?}"
                ))
                .evidence(serde_json::json!({ "similar_to": similar, "similarity": score })),
            );
        }
    }
    if !ty.packages {
        return None;
    }
    let facts = gatehouse_engine::launch::launch_facts(argv);
    let configured: Vec<String> = servers
        .iter()
        .filter(|s| s.id != server_id)
        .filter_map(|s| {
            s.launch
                .as_ref()
                .and_then(|l| l.package_spec.clone())
                .or_else(|| {
                    let argv: Vec<String> = serde_json::from_str(s.argv_json.as_deref()?).ok()?;
                    gatehouse_engine::launch::launch_facts(&argv).package
                })
        })
        .collect();
    // Every package the runner installs, the one it runs first; the first
    // similar one a person has not approved for this server holds it.
    let mut held = None;
    for package in facts.package.into_iter().chain(facts.also_installed) {
        let Some((similar, score)) =
            typosquat::similar_package(&package, &configured, &[], ty.package_threshold)
        else {
            continue;
        };
        let approved = match store {
            Some(store) => store
                .package_approved(key, server_id, &package)
                .await
                .unwrap_or(false),
            None => false,
        };
        if !approved {
            held = Some((package, similar, score));
            break;
        }
    }
    let (package, similar, score) = held?;
    let reason = format!(
        "the launched package {:?} is similar to {similar:?} (similarity {score:.2}); \
         held: not started until a person approves it in the dashboard's inbox or with \
         `gatehouse pins trust-package --server {server_id}`",
        typosquat::package_name(&package)
    );
    if let Some(store) = store {
        let payload = serde_json::json!({
            "package": package,
            "similar_to": similar,
            "similarity": score,
        });
        let ask = gatehouse_store::NewConsent {
            kind: gatehouse_store::ConsentKind::HeldPackage,
            server_id: server_id.to_string(),
            tool: None,
            payload_json: payload.to_string(),
            created_ms: crate::wrap::now_ms() as i64,
            expires_ms: None,
            requester_key: None,
        };
        if let Err(err) = store.ask_once(&ask).await {
            tracing::warn!(%err, "could not ask about the held package");
        }
    }
    events.push(
        EngineEvent::new(
            "mcp_server_name_similarity",
            Severity::High,
            Action::Hold,
            "cross_server.typosquat.package",
        )
        .reason(reason.clone())
        .evidence(serde_json::json!({
            "package": typosquat::package_name(&package),
            "similar_to": similar,
            "similarity": score,
        })),
    );
    Some(("cross_server.typosquat.package".into(), reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_engine::{NoInspector, PinTable, ServerInfo, Settings};
    use gatehouse_protocol::parse_frame;
    use serde_json::json;

    fn list(relay: &mut Relay<NoInspector>, id: u64, description: &str) {
        let ask = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"});
        relay.on_client_frame(parse_frame(serde_json::to_vec(&ask).unwrap()), 0);
        let tools = json!([{"name": "helper", "description": description, "inputSchema": {"type": "object"}}]);
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}});
        relay.on_server_frame(parse_frame(serde_json::to_vec(&answer).unwrap()), 0);
    }

    /// A trusted server's flow rule is off, yet the session's other servers
    /// link to its reads for the policy's longest window: its window keeps
    /// them (store pruning, the in-memory window, what outlives its exit).
    #[test]
    fn a_trusted_servers_reads_stay_for_the_policys_longest_window() {
        let text =
            "[cross_server.flow]\nwindow_secs = 120\n[servers.\"fs\"]\ntrust = \"trusted\"\n";
        let policy = gatehouse_config::check_text("p", text).unwrap().policy;
        let trusted = rules_for(&policy, &policy.server_settings("fs"));
        assert_eq!(
            trusted.flow.mode,
            FlowMode::Off,
            "its own calls are not checked"
        );
        assert_eq!(trusted.session_reads_ms, 120_000);
        assert!(trusted.window_ms() >= 120_000);
        assert!(trusted.outlives_exit(ToolClass::Read, 100_000));
        let other = rules_for(&policy, &policy.server_settings("mail"));
        assert_eq!(other.flow.window_ms, 120_000);
    }

    /// A read relayed unchecked while the database is locked is written,
    /// with its result's marks, by the next check that reaches it: a later
    /// call carrying that result is still linked (DESIGN §8).
    #[tokio::test]
    async fn a_read_relayed_unchecked_is_recorded_later_and_still_links() {
        let home = tempfile::tempdir().unwrap();
        let opts = gatehouse_store::StoreOptions {
            busy_timeout: std::time::Duration::from_millis(50),
            ..Default::default()
        };
        let store = Store::open(home.path(), opts.clone()).await.unwrap();
        let policy = Policy::default();
        let cross_of = |server: &str| {
            let me = CrossIdentity {
                session: "s".into(),
                server_id: server.into(),
                pin_server_id: server.into(),
                command_hash: server.into(),
            };
            let rules = rules_for(&policy, &policy.server_settings(server));
            Cross::new(
                Some(store.clone()),
                None,
                me,
                &policy,
                rules,
                taint_key(b"k"),
            )
        };
        let relay = Relay::new(
            ServerInfo {
                server_id: "fs".into(),
            },
            Settings::default(),
            NoInspector,
            PinTable::default(),
            "n",
        );
        let call = |id: u64, tool: &str, args: Value| {
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": args}});
            Output::ToServer(serde_json::to_vec(&msg).unwrap())
        };
        let event_rules = |out: &[Output]| -> Vec<String> {
            out.iter()
                .filter_map(|o| match o {
                    Output::Event(e) => Some(e.rule.clone()),
                    _ => None,
                })
                .collect()
        };

        let mut fs = cross_of("fs");
        let other = Store::open(home.path(), opts).await.unwrap();
        let writing = other.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
        let (out, _) = fs
            .filter(
                vec![call(1, "read_file", json!({"path": "memo.txt"}))],
                &relay,
            )
            .await;
        assert_eq!(event_rules(&out), ["cross_server.unavailable"]);
        assert!(
            matches!(
                &out[1],
                Output::Pass {
                    to: Peer::Server,
                    ..
                }
            ),
            "relayed unchecked: {out:?}"
        );
        let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text",
            "text": "the vault code is BLUEHERON-7731, rotate it monthly"}]}});
        let (out, _) = fs
            .filter(
                vec![Output::ToClient(serde_json::to_vec(&result).unwrap())],
                &relay,
            )
            .await;
        assert_eq!(out.len(), 1, "the result goes on");
        writing.rollback().await.unwrap();
        // The database is back: the read is written by the next check.
        let (out, _) = fs
            .filter(
                vec![call(2, "read_file", json!({"path": "todo.txt"}))],
                &relay,
            )
            .await;
        assert!(event_rules(&out).is_empty(), "{out:?}");

        let mut mail = cross_of("mail");
        let (out, _) = mail
            .filter(
                vec![call(
                    1,
                    "send_email",
                    json!({"body": "code BLUEHERON-7731"}),
                )],
                &relay,
            )
            .await;
        let blocked = out.iter().any(|o| {
            matches!(o, Output::Event(e)
                if e.rule == "cross_server.read_then_send" && e.action == Action::Block)
        });
        assert!(
            blocked,
            "the send carrying the unchecked read is linked: {out:?}"
        );
    }

    /// A remembered class is the one `classify` gives for the definition
    /// listed now: a listing that changes the description changes it.
    #[test]
    fn a_tools_class_follows_its_listed_definition() {
        let policy = Policy::default();
        let rules = rules_for(&policy, &policy.server_settings("srv"));
        let me = CrossIdentity {
            session: "s".into(),
            server_id: "srv".into(),
            pin_server_id: "srv".into(),
            command_hash: "h".into(),
        };
        let mut cross = Cross::new(None, None, me, &policy, rules, taint_key(b"k"));
        let info = ServerInfo {
            server_id: "srv".into(),
        };
        let mut relay = Relay::new(
            info,
            Settings::default(),
            NoInspector,
            PinTable::default(),
            "n",
        );
        let classes = |cross: &mut Cross, relay: &Relay<NoInspector>| {
            let fresh = cross_server::classify("helper", relay.tool_facts("helper"), &[]);
            (
                cross.class_of("helper", relay),
                cross.class_of("helper", relay),
                fresh,
            )
        };

        assert_eq!(
            classes(&mut cross, &relay),
            (ToolClass::Unknown, ToolClass::Unknown, ToolClass::Unknown)
        );
        list(&mut relay, 1, "Reads the page at a URL.");
        let read = classes(&mut cross, &relay);
        list(&mut relay, 2, "Sends the text by email.");
        let send = classes(&mut cross, &relay);
        assert_eq!(read.2, ToolClass::Read, "the listing reached the relay");
        assert_eq!((read.0, read.1), (read.2, read.2));
        assert_eq!(
            send.2,
            ToolClass::Send,
            "the second listing reached the relay"
        );
        assert_eq!((send.0, send.1), (send.2, send.2));
    }
}

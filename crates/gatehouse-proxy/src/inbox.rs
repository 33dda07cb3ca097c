//! Input requests answered in the dashboard inbox (DESIGN §3, issue 7).
//!
//! When the engine routes an `elicitation/create` here ([`Output::Inbox`]:
//! the client declared no elicitation support, or a field looks like a
//! secret), wrap posts a consent request naming the server, its command and
//! the client, with a fresh X25519 public key. The control plane seals the
//! person's answer to that key (`gatehouse_server::seal`), so only
//! ciphertext rests in the database and only this process can open it; the
//! secret key never leaves memory. Nobody answering within the timeout
//! (default 50 s, under the 60 s request timeout of the MCP SDKs) is a
//! decline; meanwhile the client's calls in flight that carry a progress
//! token get `notifications/progress`, so a client that resets its timeout
//! on progress keeps waiting.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crypto_box::aead::OsRng;
use crypto_box::SecretKey;
use gatehouse_engine::{Action, EngineEvent, InputRequest, Inspector, Output, Relay, Severity};
use gatehouse_protocol::message::{request_line, response_line};
use gatehouse_protocol::RequestId;
use gatehouse_store::{ConsentKind, ConsentState, NewConsent, Store};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// How long a request waits for the person by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(50);
/// How often the waiting task looks at its consent row.
const POLL: Duration = Duration::from_millis(200);
/// Longest gap between progress notifications.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Requests one server may have waiting in the inbox at once; more are
/// declined at once (each wait holds a consent row and polls the database,
/// which the relay's own checks share).
pub const MAX_WAITING: usize = 4;

/// Who is asking, as the inbox shows it.
#[derive(Clone)]
pub(crate) struct Asker {
    pub server_id: String,
    pub server_name: String,
    pub command: String,
}

/// What a waiting task reports to the relay loop.
enum Note {
    /// Still waiting: keep the client's calls alive.
    Progress,
    /// Answer the server.
    Done {
        id: RequestId,
        result: Value,
        event: Box<EngineEvent>,
    },
}

/// The wrap side of the inbox: one task per waiting request.
pub(crate) struct Inbox {
    store: Option<Store>,
    asker: Asker,
    timeout: Duration,
    tx: mpsc::UnboundedSender<Note>,
    rx: mpsc::UnboundedReceiver<Note>,
    progress: u64,
    /// Consent rows this process still waits on.
    waiting: Waiting,
    /// Waits under way (from the post, before their row exists).
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

type Waiting = Arc<Mutex<HashSet<i64>>>;

impl Inbox {
    pub fn new(store: Option<Store>, asker: Asker, timeout: Duration) -> Inbox {
        let (tx, rx) = mpsc::unbounded_channel();
        Inbox {
            store,
            asker,
            timeout,
            tx,
            rx,
            progress: 0,
            waiting: Waiting::default(),
            in_flight: Arc::default(),
        }
    }

    /// Wrap is ending: nobody will take an answer, so the requests still
    /// waiting are declined rather than left for the person.
    pub async fn leave(&self) {
        let Some(store) = &self.store else { return };
        let ids: Vec<i64> = self
            .waiting
            .lock()
            .map(|w| w.iter().copied().collect())
            .unwrap_or_default();
        for id in ids {
            let _ = store
                .decline_consent(id, crate::wrap::now_ms() as i64)
                .await;
        }
    }

    /// Starts a wait for every [`Output::Inbox`]; passes the rest through.
    pub fn take(&mut self, outputs: Vec<Output>) -> Vec<Output> {
        if !outputs.iter().any(|o| matches!(o, Output::Inbox(_))) {
            return outputs;
        }
        let mut rest = Vec::with_capacity(outputs.len());
        for output in outputs {
            match output {
                Output::Inbox(request) => rest.extend(self.post(request)),
                other => rest.push(other),
            }
        }
        rest
    }

    fn post(&mut self, request: InputRequest) -> Vec<Output> {
        use std::sync::atomic::Ordering;
        if self.in_flight.load(Ordering::Acquire) >= MAX_WAITING {
            return declined_now(
                &request,
                format!(
                    "{MAX_WAITING} input requests of this server already wait in the dashboard; declined"
                ),
            );
        }
        let Some(store) = self.store.clone() else {
            return declined_now(
                &request,
                "the database is unavailable, so nobody can answer in the dashboard; declined"
                    .into(),
            );
        };
        let routed = EngineEvent::new(
            "mcp_elicitation_routed",
            Severity::Info,
            Action::Hold,
            request.rule,
        )
        .reason(match request.rule {
            "elicitation.inbox" => "the client cannot show input requests; waiting for an answer in the Gatehouse dashboard",
            "requests.elicitation" => "policy sends input requests to the Gatehouse dashboard; waiting for an answer there",
            _ => "the request asks for a secret-like field; waiting in the Gatehouse dashboard (decline only)",
        });
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let task = Waiter {
            store,
            asker: self.asker.clone(),
            timeout: self.timeout,
            tx: self.tx.clone(),
            waiting: self.waiting.clone(),
            _in_flight: InFlight(self.in_flight.clone()),
        };
        tokio::spawn(task.run(request));
        vec![Output::Event(routed)]
    }

    /// The next report of a waiting task (pending forever when none waits).
    pub async fn recv(&mut self) -> Option<NoteOut> {
        self.rx.recv().await.map(NoteOut)
    }

    /// What the relay loop sends for a report.
    pub fn outputs<I: Inspector>(&mut self, note: NoteOut, relay: &Relay<I>) -> Vec<Output> {
        match note.0 {
            Note::Progress => {
                self.progress += 1;
                relay
                    .progress_tokens()
                    .into_iter()
                    .map(|token| {
                        Output::ToClient(request_line(
                            None,
                            "notifications/progress",
                            Some(json!({
                                "progressToken": token,
                                "progress": self.progress,
                                "message": "Waiting for an answer in the Gatehouse dashboard",
                            })),
                        ))
                    })
                    .collect()
            }
            Note::Done { id, result, event } => {
                vec![
                    Output::ToServer(response_line(&id, result)),
                    Output::Event(*event),
                ]
            }
        }
    }
}

/// A report for the relay loop (opaque outside this module).
pub(crate) struct NoteOut(Note);

/// A request declined without a wait: the answer to the server, the event.
fn declined_now(request: &InputRequest, reason: String) -> Vec<Output> {
    let (id, result) = decline(&request.id);
    vec![
        Output::ToServer(response_line(&id, result)),
        Output::Event(settled(
            "mcp_elicitation_declined",
            Action::Block,
            request.rule,
            reason,
        )),
    ]
}

fn decline(id: &RequestId) -> (RequestId, Value) {
    (id.clone(), json!({ "action": "decline" }))
}

fn settled(kind: &'static str, action: Action, rule: &str, reason: String) -> EngineEvent {
    let severity = if action == Action::Allow {
        Severity::Info
    } else {
        Severity::Medium
    };
    EngineEvent::new(kind, severity, action, rule).reason(reason)
}

/// One request waiting for the person.
struct Waiter {
    store: Store,
    asker: Asker,
    timeout: Duration,
    tx: mpsc::UnboundedSender<Note>,
    waiting: Waiting,
    /// Counts this wait until it ends, however it ends.
    _in_flight: InFlight,
}

/// One wait under way; the count drops with it.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Waiter {
    async fn run(self, request: InputRequest) {
        let (result, event) = self.wait(&request).await;
        // The wait's place is free before its answer is seen.
        let tx = self.tx.clone();
        drop(self);
        let _ = tx.send(Note::Done {
            id: request.id,
            result,
            event: Box::new(event),
        });
    }

    async fn wait(&self, request: &InputRequest) -> (Value, EngineEvent) {
        let rule = request.rule;
        let declined = |reason: String| {
            (
                json!({ "action": "decline" }),
                settled("mcp_elicitation_declined", Action::Block, rule, reason),
            )
        };
        let secret = SecretKey::generate(&mut OsRng);
        let p = &request.params;
        let mode = if p.get("url").is_some() || p["mode"] == "url" {
            "url"
        } else {
            "form"
        };
        let mut payload = json!({
            "message": p.get("message").cloned().unwrap_or(Value::String(String::new())),
            "mode": mode,
            "server_name": self.asker.server_name,
            "command": self.asker.command,
            "client": request.client,
        });
        for key in ["requestedSchema", "url"] {
            if let Some(v) = p.get(key) {
                payload[key] = v.clone();
            }
        }
        let now = crate::wrap::now_ms() as i64;
        let expires = now + self.timeout.as_millis() as i64;
        let id = match self
            .store
            .create_consent(&NewConsent {
                kind: ConsentKind::Elicitation,
                server_id: self.asker.server_id.clone(),
                tool: None,
                payload_json: payload.to_string(),
                created_ms: now,
                expires_ms: Some(expires),
                requester_key: Some(secret.public_key().as_bytes().to_vec()),
            })
            .await
        {
            Ok(id) => id,
            Err(err) => {
                return declined(format!(
                    "could not post the request to the inbox ({err}); declined"
                ))
            }
        };
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(id);
        }
        let outcome = self.poll(id, expires, &secret, rule).await;
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(&id);
        }
        outcome
    }

    /// Waits for the person (or the deadline) on consent row `id`.
    async fn poll(
        &self,
        id: i64,
        expires: i64,
        secret: &SecretKey,
        rule: &'static str,
    ) -> (Value, EngineEvent) {
        let declined = |reason: String| {
            (
                json!({ "action": "decline" }),
                settled("mcp_elicitation_declined", Action::Block, rule, reason),
            )
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let progress_every = PROGRESS_EVERY.min(self.timeout / 3).max(POLL);
        let mut next_progress = tokio::time::Instant::now() + progress_every;
        let mut expired = false;
        loop {
            match self.store.get_consent(id).await {
                Ok(Some(c)) => match c.state {
                    ConsentState::Pending => {}
                    ConsentState::Answered => return self.open(id, secret, rule).await,
                    ConsentState::Declined => {
                        return declined(format!("declined in the dashboard (consent #{id})"))
                    }
                    ConsentState::Expired => {
                        return declined(format!(
                            "nobody answered within {} s (consent #{id}); declined",
                            self.timeout.as_secs()
                        ))
                    }
                },
                Ok(None) => return declined(format!("consent #{id} disappeared; declined")),
                Err(err) => tracing::debug!(%err, "consent not readable yet"),
            }
            if expired {
                // Expired between two reads, or the row could not be marked.
                let _ = self
                    .store
                    .decline_consent(id, crate::wrap::now_ms() as i64)
                    .await;
                return declined(format!(
                    "nobody answered within {} s (consent #{id}); declined",
                    self.timeout.as_secs()
                ));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                // Marked expired (unless answered just now: the next read says).
                let _ = self.store.expire_consents(expires).await;
                expired = true;
                continue;
            }
            if now >= next_progress {
                next_progress = now + progress_every;
                let _ = self.tx.send(Note::Progress);
            }
            tokio::time::sleep(POLL.min(deadline - now)).await;
        }
    }

    /// Takes the sealed answer once (erasing it) and opens it.
    async fn open(&self, id: i64, secret: &SecretKey, rule: &str) -> (Value, EngineEvent) {
        let declined = |reason: &str| {
            (
                json!({ "action": "decline" }),
                settled(
                    "mcp_elicitation_declined",
                    Action::Block,
                    rule,
                    format!("{reason} (consent #{id}); declined"),
                ),
            )
        };
        let sealed = match self.store.take_consent_answer(id).await {
            Ok(Some(sealed)) => sealed,
            _ => return declined("the answer could not be read"),
        };
        let Ok(plain) = secret.unseal(&sealed) else {
            return declined("the answer was not sealed to this process");
        };
        let Ok(answer) = serde_json::from_slice::<Value>(&plain) else {
            return declined("the answer is not JSON");
        };
        match answer["action"].as_str() {
            Some("accept") => {
                let mut result = json!({ "action": "accept" });
                // URL-mode (and empty) answers carry no content.
                if let Some(content) = answer
                    .get("content")
                    .filter(|c| c.as_object().is_some_and(|o| !o.is_empty()))
                {
                    result["content"] = content.clone();
                }
                (
                    result,
                    settled(
                        "mcp_elicitation_answered",
                        Action::Allow,
                        rule,
                        format!("answered in the dashboard (consent #{id})"),
                    ),
                )
            }
            _ => declined("declined in the dashboard"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control plane's side of the seal (what `gatehouse_server::seal`
    /// does): an anonymous sealed box to the published key.
    fn seal_to(key: &[u8], plain: &Value) -> Vec<u8> {
        let key: [u8; 32] = key.try_into().unwrap();
        crypto_box::PublicKey::from(key)
            .seal(&mut OsRng, plain.to_string().as_bytes())
            .unwrap()
    }

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), gatehouse_store::StoreOptions::default())
            .await
            .unwrap();
        (dir, store)
    }

    fn request(id: u64) -> InputRequest {
        InputRequest {
            id: RequestId::from_value(&json!(id)).unwrap(),
            params: json!({"message": "Which city?", "requestedSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}),
            client: Some("cursor".into()),
            rule: "elicitation.inbox",
        }
    }

    fn asker() -> Asker {
        Asker {
            server_id: "srv".into(),
            server_name: "weather".into(),
            command: "python3 weather.py".into(),
        }
    }

    async fn next_done(inbox: &mut Inbox) -> (Value, EngineEvent, usize) {
        let mut progress = 0;
        loop {
            match inbox.rx.recv().await.unwrap() {
                Note::Progress => progress += 1,
                Note::Done { result, event, .. } => return (result, *event, progress),
            }
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_waiting_process_sealed() {
        let (_dir, store) = store().await;
        let mut inbox = Inbox::new(Some(store.clone()), asker(), Duration::from_secs(30));
        let rest = inbox.take(vec![Output::Inbox(request(7))]);
        assert!(
            matches!(&rest[..], [Output::Event(e)] if e.kind == "mcp_elicitation_routed"),
            "posting is recorded"
        );
        let pending = loop {
            let list = store
                .list_consents(Some(ConsentState::Pending), 10)
                .await
                .unwrap();
            if let Some(c) = list.into_iter().next() {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let payload: Value = serde_json::from_str(&pending.payload_json).unwrap();
        assert_eq!(payload["server_name"], "weather", "names the server");
        assert_eq!(payload["command"], "python3 weather.py", "and its command");
        assert_eq!(payload["client"], "cursor", "and the client");
        assert_eq!(payload["message"], "Which city?");
        let answer = json!({"action": "accept", "content": {"city": "Bergen"}});
        let sealed = seal_to(pending.requester_key.as_deref().unwrap(), &answer);
        assert!(
            !sealed.windows(6).any(|w| w == b"Bergen"),
            "only ciphertext is stored"
        );
        assert!(store.answer_consent(pending.id, &sealed, 1).await.unwrap());
        let (result, event, _) = next_done(&mut inbox).await;
        assert_eq!(
            result,
            json!({"action": "accept", "content": {"city": "Bergen"}})
        );
        assert_eq!(event.kind, "mcp_elicitation_answered");
        assert!(
            !event.reason.contains("Bergen"),
            "the answer is never in an event"
        );
        let row = store.get_consent(pending.id).await.unwrap().unwrap();
        assert_eq!(
            row.sealed_answer, None,
            "the ciphertext is erased once taken"
        );
    }

    /// A server cannot fill the inbox: past four waiting requests, the
    /// next is declined at once; once one ends, another may wait.
    #[tokio::test]
    async fn a_fifth_waiting_request_is_declined_at_once() {
        let (_dir, store) = store().await;
        let mut inbox = Inbox::new(Some(store.clone()), asker(), Duration::from_secs(30));
        for id in 1..=MAX_WAITING as u64 {
            let rest = inbox.take(vec![Output::Inbox(request(id))]);
            assert!(matches!(&rest[..], [Output::Event(e)] if e.kind == "mcp_elicitation_routed"));
        }
        let rest = inbox.take(vec![Output::Inbox(request(99))]);
        let answer = rest.iter().find_map(|o| match o {
            Output::ToServer(line) => Some(serde_json::from_slice::<Value>(line).unwrap()),
            _ => None,
        });
        assert_eq!(
            answer,
            Some(json!({"jsonrpc": "2.0", "id": 99, "result": {"action": "decline"}}))
        );
        let pending = loop {
            let list = store
                .list_consents(Some(ConsentState::Pending), 10)
                .await
                .unwrap();
            if list.len() == MAX_WAITING {
                break list;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(store.decline_consent(pending[0].id, 1).await.unwrap());
        next_done(&mut inbox).await;
        let rest = inbox.take(vec![Output::Inbox(request(100))]);
        assert!(matches!(&rest[..], [Output::Event(e)] if e.kind == "mcp_elicitation_routed"));
    }

    #[tokio::test]
    async fn unanswered_requests_are_declined_after_progress() {
        let (_dir, store) = store().await;
        let mut inbox = Inbox::new(Some(store.clone()), asker(), Duration::from_millis(1500));
        inbox.take(vec![Output::Inbox(request(8))]);
        let (result, event, progress) = next_done(&mut inbox).await;
        assert_eq!(result, json!({"action": "decline"}));
        assert_eq!(event.kind, "mcp_elicitation_declined");
        assert!(event.reason.contains("nobody answered"), "{}", event.reason);
        assert!(progress >= 2, "progress while waiting (got {progress})");
        let all = store.list_consents(None, 10).await.unwrap();
        assert_eq!(all[0].state, ConsentState::Expired);
    }

    #[tokio::test]
    async fn a_decline_or_a_foreign_seal_declines() {
        let (_dir, store) = store().await;
        let mut inbox = Inbox::new(Some(store.clone()), asker(), Duration::from_secs(30));
        inbox.take(vec![Output::Inbox(request(1)), Output::Inbox(request(2))]);
        let rows = loop {
            let list = store
                .list_consents(Some(ConsentState::Pending), 10)
                .await
                .unwrap();
            if list.len() == 2 {
                break list;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(store.decline_consent(rows[0].id, 1).await.unwrap());
        let (_, other_public) = {
            let s = SecretKey::generate(&mut OsRng);
            let p = *s.public_key().as_bytes();
            (s, p)
        };
        let forged = seal_to(
            &other_public,
            &json!({"action": "accept", "content": {"city": "x"}}),
        );
        assert!(store.answer_consent(rows[1].id, &forged, 1).await.unwrap());
        for _ in 0..2 {
            let (result, event, _) = next_done(&mut inbox).await;
            assert_eq!(result, json!({"action": "decline"}), "{}", event.reason);
        }
    }

    #[tokio::test]
    async fn url_mode_shows_the_url_and_accepts_without_content() {
        let (_dir, store) = store().await;
        let mut inbox = Inbox::new(Some(store.clone()), asker(), Duration::from_secs(30));
        let mut req = request(4);
        req.params = json!({"mode": "url", "message": "Sign in", "url": "https://example.com/oauth?x=1", "elicitationId": "e1"});
        inbox.take(vec![Output::Inbox(req)]);
        let pending = loop {
            if let Some(c) = store
                .list_consents(Some(ConsentState::Pending), 10)
                .await
                .unwrap()
                .pop()
            {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let payload: Value = serde_json::from_str(&pending.payload_json).unwrap();
        assert_eq!(payload["mode"], "url");
        assert_eq!(
            payload["url"], "https://example.com/oauth?x=1",
            "the full URL is shown"
        );
        let sealed = seal_to(
            pending.requester_key.as_deref().unwrap(),
            &json!({"action": "accept", "content": {}}),
        );
        assert!(store.answer_consent(pending.id, &sealed, 1).await.unwrap());
        let (result, _, _) = next_done(&mut inbox).await;
        assert_eq!(result, json!({"action": "accept"}));
    }

    #[tokio::test]
    async fn leaving_declines_what_still_waits() {
        let (_dir, store) = store().await;
        let mut inbox = Inbox::new(Some(store.clone()), asker(), Duration::from_secs(30));
        inbox.take(vec![Output::Inbox(request(9))]);
        while inbox.waiting.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let id = *inbox.waiting.lock().unwrap().iter().next().unwrap();
        inbox.leave().await;
        assert_eq!(
            store.get_consent(id).await.unwrap().unwrap().state,
            ConsentState::Declined,
            "nobody is left to take an answer"
        );
    }

    #[tokio::test]
    async fn without_a_database_the_request_is_declined_at_once() {
        let mut inbox = Inbox::new(None, asker(), DEFAULT_TIMEOUT);
        let out = inbox.take(vec![Output::Inbox(request(3))]);
        let answer: Value = match &out[0] {
            Output::ToServer(b) => serde_json::from_slice(b).unwrap(),
            other => panic!("expected an answer to the server, got {other:?}"),
        };
        assert_eq!(answer["result"]["action"], "decline");
        assert_eq!(answer["id"], 3);
    }
}

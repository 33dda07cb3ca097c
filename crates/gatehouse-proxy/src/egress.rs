//! Secret egress guard in the relay (`secret_egress`, DESIGN §3 call
//! checks): a `tools/call` whose arguments carry another server's vault
//! secret is blocked before it reaches the server.
//!
//! No wrap process holds another server's plain text. Each wrap publishes
//! keyed fingerprints of its own secrets (`gatehouse_vault::guard`) to the
//! store when it starts with them, and keeps a [`SecretGuard`] over every
//! other server's published fingerprints, reloaded in the background when
//! the table changes. The call path waits on the database only for the
//! first read, and only when a call comes before it (it starts once the
//! server's first frame has been passed on).
//! The key is derived from the per-install key; same-user code that reads
//! that key and the database could test guesses against a fingerprint
//! (DESIGN §6: a speed bump), which is why secrets under 8 bytes are not
//! fingerprinted at all.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_engine::cross_server::batch;
use gatehouse_engine::cross_server::{blocked_value, CrossFinding};
use gatehouse_engine::{Action, EngineEvent, Output, Passed, Peer, Severity};
use gatehouse_protocol::RequestId;
use gatehouse_store::{now_ms, Store};
use gatehouse_vault::guard::Encoding;
use gatehouse_vault::{GuardKey, SecretFingerprint, SecretGuard};
use serde_json::Value;
use tokio::sync::watch;
use tracing::warn;

use crate::ready::Opener;

/// The rule name on events and blocked answers.
pub const RULE: &str = "secret_egress";

/// How often the published fingerprints are checked for changes.
const RELOAD_INTERVAL: Duration = Duration::from_millis(250);

/// The fingerprint key: derived from the per-install key, never stored.
pub fn guard_key(install_key: &[u8]) -> GuardKey {
    GuardKey::for_install(install_key)
}

/// The egress hook of one wrap process.
pub struct Egress {
    /// `None` until the fingerprints were first read.
    guard: watch::Receiver<Option<Arc<SecretGuard>>>,
    /// Starts the publishing and the first read (see [`Egress::start`]).
    go: Option<Opener>,
    /// The caller as the guard sees it: the server id, or its separate
    /// namespace after an identity mismatch (so an impostor of server A is
    /// not allowed A's secrets).
    caller: String,
    audit_only: bool,
}

impl Egress {
    /// Publishes `own` (this server's fingerprints; only when its identity
    /// check passed and it got secrets) and follows the others', in the
    /// background from [`Egress::start_loading`] on: wrap calls it once the
    /// server's first frame has been passed on (`crate::ready`), and a call
    /// that comes before does.
    pub fn start(
        store: Option<Store>,
        key: GuardKey,
        server_id: &str,
        caller: &str,
        own: Vec<SecretFingerprint>,
        audit_only: bool,
    ) -> Egress {
        let (tx, rx) = watch::channel(None);
        let (go, after) = crate::ready::gate();
        match store {
            Some(store) => {
                let (server_id, caller) = (server_id.to_owned(), caller.to_owned());
                tokio::spawn(async move {
                    after.wait().await;
                    publish(&store, &server_id, &own).await;
                    follow(store, key, caller, tx).await;
                });
            }
            None => {
                tx.send_replace(Some(Arc::new(SecretGuard::new(key, Vec::new()))));
            }
        }
        Egress {
            guard: rx,
            go: Some(go),
            caller: caller.to_owned(),
            audit_only,
        }
    }

    /// Starts publishing and reading the fingerprints (once).
    pub fn start_loading(&mut self) {
        if let Some(go) = self.go.take() {
            go.open();
        }
    }

    /// Starts loading and waits for the first read; `None` when it never
    /// comes (the process is exiting).
    async fn loaded(&mut self) -> Option<Arc<SecretGuard>> {
        self.start_loading();
        let guard = self.guard.wait_for(Option::is_some).await.ok()?;
        guard.clone()
    }

    /// Replaces the audit-only switch (pause / resume).
    pub fn set_audit_only(&mut self, audit_only: bool) {
        self.audit_only = audit_only;
    }

    /// Number of other servers' secrets guarded right now.
    pub fn guarded(&self) -> usize {
        self.guard.borrow().as_ref().map_or(0, |g| g.len())
    }

    /// Checks the `tools/call`s among the relay's outputs bound for the
    /// server, single or in a batch; a call carrying another server's
    /// secret is answered with a blocked result instead (or only recorded,
    /// in audit mode), the other elements of its batch go on. A call that
    /// comes before the fingerprints were first read waits for that read.
    pub async fn filter(&mut self, outputs: Vec<Output>) -> Vec<Output> {
        let current = self.guard.borrow().clone();
        let guard = match current {
            Some(guard) => guard,
            None if !outputs.iter().any(batch::sends_call) => return outputs,
            None => match self.loaded().await {
                Some(guard) => guard,
                None => return outputs,
            },
        };
        self.check_outputs(&guard, outputs)
    }

    fn check_outputs(&self, guard: &SecretGuard, outputs: Vec<Output>) -> Vec<Output> {
        if guard.is_empty() {
            return outputs;
        }
        let mut out = Vec::with_capacity(outputs.len());
        for output in outputs {
            match output {
                output if batch::sends_call(&output) => {
                    match batch::frame_of(output, Peer::Server) {
                        Ok(frame) => self.check_frame(guard, frame, &mut out),
                        Err(line) => out.push(line),
                    }
                }
                other => out.push(other),
            }
        }
        out
    }

    fn check_frame(&self, guard: &SecretGuard, frame: Passed, out: &mut Vec<Output>) {
        let mut answers = Vec::with_capacity(frame.messages.len());
        for item in &frame.messages {
            let answer = match self.check(guard, item) {
                Some((event, answer)) => {
                    let tool = event.tool.clone().unwrap_or_default();
                    out.push(Output::Event(event));
                    // An answer is given only to a call with an id.
                    let id = item.get("id").and_then(RequestId::from_value);
                    if let (Some(_), Some(id)) = (&answer, id) {
                        gatehouse_engine::call_blocked_after_relay(out, &tool, id);
                    }
                    answer
                }
                None => None,
            };
            answers.push(answer);
        }
        batch::settle(frame, answers, out);
    }

    /// `Some((event, blocked answer))` when the call carries a secret; the
    /// answer is `None` in audit mode (the call is forwarded).
    fn check(&self, guard: &SecretGuard, msg: &Value) -> Option<(EngineEvent, Option<Value>)> {
        if !batch::is_call(msg) {
            return None;
        }
        let rid = msg.get("id").and_then(RequestId::from_value)?;
        let params = msg.get("params")?;
        let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
        let mut strings = Vec::new();
        if let Some(args) = params.get("arguments") {
            collect_strings(args, &mut strings);
        }
        let hit = guard.check(&self.caller, strings.iter().copied())?;
        let reason = format!(
            "an argument of {tool} carries the vault secret {} of another server ({}){}",
            hit.name,
            hit.owner,
            match hit.encoding {
                Encoding::Plain => "",
                Encoding::Percent => " (percent-encoded)",
                Encoding::Base64 => " (base64-encoded)",
                Encoding::Hex => " (hex-encoded)",
            }
        );
        let action = if self.audit_only {
            Action::Audit
        } else {
            Action::Block
        };
        let event = EngineEvent::new("secret_egress", Severity::Critical, action, RULE)
            .tool(tool)
            .reason(if self.audit_only {
                format!("audit-only: would block: {reason}")
            } else {
                reason.clone()
            })
            .evidence(serde_json::json!({
                "owner": hit.owner,
                "secret": hit.name,
                "argument": hit.arg_index,
                "encoding": format!("{:?}", hit.encoding).to_lowercase(),
            }));
        let answer = (!self.audit_only).then(|| {
            let finding = CrossFinding {
                rule: RULE,
                severity: Severity::Critical,
                reason,
                related: Vec::new(),
                retry_after_ms: None,
                hold: false,
            };
            blocked_value(&rid, &self.caller, tool, &finding)
        });
        Some((event, answer))
    }
}

/// Every string in `value` (object keys included), depth first.
fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k);
                collect_strings(v, out);
            }
        }
        _ => {}
    }
}

/// Publishes this server's own fingerprints (none: nothing to replace).
async fn publish(store: &Store, server_id: &str, own: &[SecretFingerprint]) {
    if own.is_empty() {
        return;
    }
    let encoded: Vec<(String, String)> = own.iter().map(|f| (f.name.clone(), f.encode())).collect();
    let items: Vec<(&str, &str)> = encoded
        .iter()
        .map(|(n, f)| (n.as_str(), f.as_str()))
        .collect();
    if let Err(err) = store
        .replace_fingerprints(server_id, &items, now_ms())
        .await
    {
        eprintln!("gatehouse: could not publish secret fingerprints: {err}");
    }
}

/// The other servers' fingerprints as a guard, with the table's generation.
async fn load(
    store: &Store,
    key: &GuardKey,
    caller: &str,
) -> gatehouse_store::Result<((i64, i64), SecretGuard)> {
    let (generation, rows) = store.list_fingerprints().await?;
    let fps = rows
        .iter()
        .filter(|r| r.server_id != caller)
        .filter_map(|r| SecretFingerprint::decode(&r.server_id, &r.name, &r.fingerprint))
        .collect();
    Ok((generation, SecretGuard::new(key.clone(), fps)))
}

/// Reads the guard, then again whenever the published fingerprints change.
/// A first read that fails leaves an empty guard (DESIGN §8: calls do not
/// wait on the database) and is tried again at the next poll.
async fn follow(
    store: Store,
    key: GuardKey,
    caller: String,
    tx: watch::Sender<Option<Arc<SecretGuard>>>,
) {
    let mut generation = None;
    loop {
        let changed = match generation {
            None => true,
            Some(read) => store
                .fingerprints_generation()
                .await
                .is_ok_and(|now| now != read),
        };
        if changed {
            match load(&store, &key, &caller).await {
                Ok((read, guard)) => {
                    generation = Some(read);
                    tx.send_replace(Some(Arc::new(guard)));
                }
                // The process is exiting.
                Err(gatehouse_store::StoreError::Closed) => return,
                Err(err) => {
                    warn!(%err, "could not read secret fingerprints");
                    tx.send_if_modified(|guard| {
                        let unread = guard.is_none();
                        if unread {
                            *guard = Some(Arc::new(SecretGuard::new(key.clone(), Vec::new())));
                        }
                        unread
                    });
                }
            }
        }
        tokio::time::sleep(RELOAD_INTERVAL).await;
        if tx.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_vault::Secret;

    const CANARY: &str = "ghp_EgressCanary0123456789abcdefABCD";

    fn call(id: u64, tool: &str, args: Value) -> Output {
        Output::ToServer(
            serde_json::to_vec(&serde_json::json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": args}
            }))
            .unwrap(),
        )
    }

    /// GitHub's wrap, its token published, and Slack's, its guard not read yet.
    async fn two_wraps_unread(audit_only: bool) -> (Store, Egress, Egress) {
        let store = Store::open_in_memory().await.unwrap();
        let key = guard_key(&[3; 32]);
        let secret = Secret::new(CANARY.to_owned());
        let own = SecretFingerprint::compute(&key, "srv_gh", "GITHUB_TOKEN", &secret)
            .into_iter()
            .collect();
        let mut gh = Egress::start(
            Some(store.clone()),
            key.clone(),
            "srv_gh",
            "srv_gh",
            own,
            audit_only,
        );
        gh.loaded().await.expect("published, then read");
        let slack = Egress::start(
            Some(store.clone()),
            key,
            "srv_slack",
            "srv_slack",
            Vec::new(),
            audit_only,
        );
        (store, gh, slack)
    }

    async fn two_wraps(audit_only: bool) -> (Store, Egress, Egress) {
        let (store, gh, mut slack) = two_wraps_unread(audit_only).await;
        slack.loaded().await.expect("read");
        (store, gh, slack)
    }

    /// The outputs as written: passed frames as their lines.
    fn written(out: Vec<Output>) -> Vec<Output> {
        out.into_iter().map(Output::written).collect()
    }

    fn blocked(outputs: &[Output]) -> Option<String> {
        outputs.iter().find_map(|o| match o {
            Output::ToClient(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
    }

    /// However the call is spelled: escaped method names, arguments nested
    /// past serde_json's own 128 levels, a batch.
    #[tokio::test]
    async fn every_spelling_of_a_call_is_checked() {
        let (_store, _gh, mut slack) = two_wraps(false).await;
        let deep = format!("{}\"{CANARY}\"{}", "[".repeat(200), "]".repeat(200));
        for line in [
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools\/call","params":{{"name":"post","arguments":{{"t":"{CANARY}"}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"\u0074ools/call","params":{{"name":"post","arguments":{{"t":"{CANARY}"}}}}}}"#
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"post","arguments":{{"t":{deep},"n":1e400}}}}}}"#
            ),
        ] {
            let out = written(
                slack
                    .filter(vec![Output::ToServer(line.clone().into_bytes())])
                    .await,
            );
            assert!(blocked(&out).is_some(), "not blocked: {line:.90}");
            assert!(!out.iter().any(|o| matches!(o, Output::ToServer(_))));
        }
        let batch = serde_json::json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "post", "arguments": {"t": "hello"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "post", "arguments": {"t": CANARY}}},
        ]);
        let out = written(
            slack
                .filter(vec![Output::ToServer(serde_json::to_vec(&batch).unwrap())])
                .await,
        );
        let forwarded: Vec<Value> = out
            .iter()
            .filter_map(|o| match o {
                Output::ToServer(b) => Some(serde_json::from_slice(b).unwrap()),
                _ => None,
            })
            .collect();
        assert_eq!(
            forwarded,
            vec![serde_json::json!([batch[0]])],
            "the clean call goes on"
        );
        let reply: Value = serde_json::from_str(&blocked(&out).expect("a batch reply")).unwrap();
        assert_eq!(reply[0]["id"], 2);
        assert_eq!(reply[0]["result"]["isError"], true);
        assert!(!reply.to_string().contains(CANARY));
    }

    #[tokio::test]
    async fn another_servers_secret_is_blocked_in_any_argument() {
        let (_store, mut gh, mut slack) = two_wraps(false).await;
        assert_eq!(slack.guarded(), 1, "slack guards github's one secret");
        assert_eq!(gh.guarded(), 0, "a server never guards its own secrets");
        for args in [
            serde_json::json!({"text": format!("token is {CANARY}")}),
            serde_json::json!({"blocks": [{"fields": {"t": CANARY}}]}),
            serde_json::json!({"url": format!("https://x.example/?q={}", hex::encode(CANARY))}),
        ] {
            let out = written(slack.filter(vec![call(7, "post", args.clone())]).await);
            let answer = blocked(&out).unwrap_or_else(|| panic!("not blocked: {args}"));
            assert!(answer.contains("secret_egress") && answer.contains("\"isError\":true"));
            assert!(!answer.contains(CANARY), "the answer names, never shows");
            let event = out.iter().find_map(|o| match o {
                Output::Event(e) => Some(e),
                _ => None,
            });
            let event = event.expect("an event");
            assert_eq!(event.rule, RULE);
            assert!(!format!("{event:?}").contains("EgressCanary"));
            assert!(!out.iter().any(|o| matches!(o, Output::ToServer(_))));
            assert!(
                out.iter()
                    .any(|o| matches!(o, Output::Settled(id) if id.to_string() == "7")),
                "the relay is told the server will not answer it: {out:?}"
            );
        }
        // The owner may send its own secret; innocuous calls pass.
        let own = written(
            gh.filter(vec![call(
                8,
                "create_issue",
                serde_json::json!({"t": CANARY}),
            )])
            .await,
        );
        assert!(matches!(own.as_slice(), [Output::ToServer(_)]));
        let fine = written(
            slack
                .filter(vec![call(9, "post", serde_json::json!({"text": "hello"}))])
                .await,
        );
        assert!(matches!(fine.as_slice(), [Output::ToServer(_)]));
    }

    #[tokio::test]
    async fn audit_mode_records_and_forwards() {
        let (_store, _gh, mut slack) = two_wraps(true).await;
        let out = written(
            slack
                .filter(vec![call(1, "post", serde_json::json!({"text": CANARY}))])
                .await,
        );
        assert!(
            matches!(out.as_slice(), [Output::Event(e), Output::ToServer(_)] if e.action == Action::Audit)
        );
    }

    #[tokio::test]
    async fn a_server_started_later_is_guarded_without_a_restart() {
        let store = Store::open_in_memory().await.unwrap();
        let key = guard_key(&[3; 32]);
        let mut slack = Egress::start(
            Some(store.clone()),
            key.clone(),
            "srv_slack",
            "srv_slack",
            Vec::new(),
            false,
        );
        slack.loaded().await.expect("read");
        assert_eq!(slack.guarded(), 0);
        let secret = Secret::new(CANARY.to_owned());
        let own = SecretFingerprint::compute(&key, "srv_gh", "T", &secret)
            .into_iter()
            .collect();
        let mut gh = Egress::start(Some(store.clone()), key, "srv_gh", "srv_gh", own, false);
        gh.start_loading();
        for _ in 0..20 {
            tokio::time::sleep(RELOAD_INTERVAL).await;
            if slack.guarded() == 1 {
                break;
            }
        }
        assert_eq!(slack.guarded(), 1, "the new fingerprint is followed");
    }

    /// A call that comes before the first read (a client that calls at
    /// once) starts the read and waits for it: it is checked, not let by.
    #[tokio::test]
    async fn a_call_before_the_first_read_waits_for_it() {
        let (_store, _gh, mut slack) = two_wraps_unread(false).await;
        tokio::time::sleep(RELOAD_INTERVAL).await;
        assert!(
            slack.guard.borrow().is_none(),
            "not read before it is started"
        );
        let answer = slack.filter(vec![Output::ToClient(b"{}".to_vec())]).await;
        assert_eq!(answer.len(), 1, "what is not a call passes");
        assert!(
            slack.guard.borrow().is_none(),
            "and does not start the read"
        );
        let out = written(
            slack
                .filter(vec![call(1, "post", serde_json::json!({"t": CANARY}))])
                .await,
        );
        assert!(
            blocked(&out).is_some(),
            "checked against the read it waited for"
        );
    }

    #[tokio::test]
    async fn impostor_of_the_owner_is_not_the_owner() {
        let key = guard_key(&[1; 32]);
        let secret = Secret::new(CANARY.to_owned());
        let fp = SecretFingerprint::compute(&key, "srv_gh", "T", &secret).unwrap();
        let guard = SecretGuard::new(key, vec![fp]);
        let mut impostor = Egress {
            guard: watch::channel(Some(Arc::new(guard))).1,
            go: None,
            caller: "srv_gh~abcdef".into(),
            audit_only: false,
        };
        let out = impostor
            .filter(vec![call(1, "x", serde_json::json!({"a": CANARY}))])
            .await;
        assert!(blocked(&out).is_some());
    }
}

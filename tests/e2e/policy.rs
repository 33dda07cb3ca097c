//! `policy.toml` end to end: the real `gatehouse` binary between the real
//! PyPI `mcp` client and real servers (npm server-everything and
//! server-filesystem, a stdlib fixture server), with a policy written into
//! the sandbox's `GATEHOUSE_HOME`. Every test asserts what the client
//! received and what `gatehouse events --json` recorded.
//! Peers: `scripts/install-peers.sh`.

use gatehouse_e2e::{result_text, Driver, DriverOptions, Peers, Sandbox};
use serde_json::{json, Value};

/// The names in a `tools/list` answer.
fn names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect()
}

/// A blocked call: an `isError` result whose text names `rule`.
fn assert_blocked(result: &Value, rule: &str, why: &str) {
    assert!(
        result["isError"] == true && result_text(result).contains(rule),
        "{why}: expected an isError result naming {rule}, got {result}"
    );
}

/// Whether event `e` is of `kind`, for `tool` (any when `None`), with `rule`.
fn is_event(e: &Value, kind: &str, tool: Option<&str>, rule: &str) -> bool {
    e["type"] == kind && tool.is_none_or(|t| e["tool"] == t) && e["rule"] == rule
}

/// A temp home with a private key the filesystem server could read, and an
/// ordinary document. Returns (document path, key path).
fn home_with_ssh_key(sb: &Sandbox) -> (String, String) {
    let home = sb.user_home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join("notes")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "ssh-key-canary-4b1c\n").unwrap();
    std::fs::write(home.join("notes/todo.txt"), "buy milk\n").unwrap();
    (
        home.join("notes/todo.txt").display().to_string(),
        home.join(".ssh/id_ed25519").display().to_string(),
    )
}

/// Starts the client on `argv` and returns the JSON-RPC error it got for
/// `initialize` (panics when the server was started instead).
fn refused(peers: &Peers, sb: &Sandbox, argv: &[String]) -> Value {
    match Driver::try_start(peers, sb, argv, DriverOptions::default()) {
        Ok(d) => {
            let init = d.initialize.clone();
            d.quit();
            panic!("the server was started although the policy refuses it: {init}")
        }
        Err(error) => error,
    }
}

#[test]
fn denied_command_and_denied_server_are_refused_on_initialize() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    sb.write_policy(
        r#"
[server_policy]
mode = "denylist"
deny = ["evil-*"]
allowed_commands = ["npx", "uvx"]
"#,
    );

    // The fixture server runs under the venv's python, which is not allowed.
    let pid_file = sb.path().join("server.pid");
    let server = peers.py_server(
        "raw_server.py",
        &["--pid-file", &pid_file.display().to_string()],
    );
    let error = refused(&peers, &sb, &sb.wrap_argv("notes", &[], &server));
    assert_eq!(error["code"], -32001, "the refusal code: {error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("server_policy.allowed_commands") && message.contains("python"),
        "the error names the rule and the command: {error}"
    );
    assert!(!pid_file.exists(), "a refused server must never be started");
    sb.wait_for_event("mcp_server_refused for notes", |e| {
        is_event(
            e,
            "mcp_server_refused",
            None,
            "server_policy.allowed_commands",
        ) && e["server"] == "notes"
            && e["action"] == "block"
    });

    // A server whose name matches the denylist: refused by name first.
    let error = refused(&peers, &sb, &sb.wrap_argv("evil-notes", &[], &server));
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("server_policy.deny") && m.contains("evil-*")),
        "the error names the deny rule and its pattern: {error}"
    );
    sb.wait_for_event("mcp_server_refused for evil-notes", |e| {
        is_event(e, "mcp_server_refused", None, "server_policy.deny") && e["server"] == "evil-notes"
    });
    assert!(!pid_file.exists(), "a refused server must never be started");
}

#[test]
fn allowed_command_by_path_glob_starts() {
    // The counterpart of the refusal: the same server, its interpreter
    // allowed by a path glob, starts and answers.
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let venv_bin = peers.python().parent().unwrap().display().to_string();
    sb.write_policy(&format!(
        "[server_policy]\nallowed_commands = [\"npx\", \"{}/*\"]\n",
        glob_escape(&venv_bin)
    ));
    let server = peers.py_server("raw_server.py", &[]);
    let mut d = Driver::start(&peers, &sb, &sb.wrap_argv("notes", &[], &server), None, &[]);
    assert_eq!(d.initialize["serverInfo"]["name"], "raw-e2e");
    assert_eq!(result_text(&d.call("echo", json!({"text": "hi"}))), "hi");
    d.quit();
}

/// Escapes glob metacharacters as `gatehouse_config::glob_escape` does
/// (`[*]`); this package tests the binary and links no Gatehouse crate.
fn glob_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!') {
            out.push('[');
            out.push(c);
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn blocked_tools_glob_withholds_and_refuses_matching_tools() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    sb.write_policy("[tool_policy]\nblocked_tools = [\"trigger-*\"]\n");
    let argv = sb.wrap_argv("everything", &[], &peers.everything_server());
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    let listed = names(&d.list_tools());
    assert!(
        listed.iter().any(|n| n == "echo"),
        "tools outside the glob stay listed: {listed:?}"
    );
    assert!(
        !listed.iter().any(|n| n.starts_with("trigger-")),
        "tools matching `trigger-*` must be withheld from tools/list: {listed:?}"
    );

    // The client calls one anyway (a model may remember a name).
    let r = d.call(
        "trigger-long-running-operation",
        json!({"duration": 1, "steps": 1}),
    );
    assert!(
        r["isError"] == true && result_text(&r).contains("tool_policy.blocked_tools"),
        "a call to a blocked tool is refused with an isError result naming the rule: {r}"
    );
    let r = d.call("echo", json!({"message": "still here"}));
    assert_eq!(r["isError"], false, "echo is not blocked: {r}");
    assert!(result_text(&r).contains("still here"), "echo answered: {r}");
    d.quit();

    let hidden = sb.wait_for_event("mcp_tool_hidden for a trigger-* tool", |e| {
        e["type"] == "mcp_tool_hidden"
            && e["tool"]
                .as_str()
                .is_some_and(|t| t.starts_with("trigger-"))
    });
    assert_eq!(hidden["server"], "everything", "{hidden}");
    sb.wait_for_event("the blocked call", |e| {
        e["type"] == "mcp_tool_call_intercepted"
            && e["tool"] == "trigger-long-running-operation"
            && e["action"] == "block"
    });
    let events = sb.events();
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "mcp_tool_hidden" && e["tool"] == "echo"),
        "echo was never hidden: {events:#?}"
    );
}

const NO_SSH: &str = r#"
[[rules]]
id = "no-ssh"
tool_name_any = ["read_file", "read_text_file", "read_multiple_files", "read_media_file"]
argument_patterns = ["**/.ssh/**"]
decision = "block"
reason = "SSH keys are off limits"
"#;

#[test]
fn argument_pattern_blocks_ssh_reads_on_the_real_filesystem_server() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let (doc, key) = home_with_ssh_key(&sb);
    sb.write_policy(NO_SSH);
    let home = sb.user_home();
    let argv = sb.wrap_argv("filesystem", &[], &peers.filesystem_server(&[&home]));
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);

    let r = d.call("read_text_file", json!({"path": doc}));
    assert_eq!(r["isError"], false, "an ordinary read passes: {r}");
    assert_eq!(result_text(&r).trim(), "buy milk", "the file's text: {r}");

    let dotted = format!("{}/notes/../.ssh/id_ed25519", home.display());
    for (tool, args) in [
        ("read_text_file", json!({"path": key})),
        ("read_text_file", json!({"path": dotted})),
        ("read_multiple_files", json!({"paths": [doc, key]})),
    ] {
        let r = d.call(tool, args.clone());
        assert_blocked(&r, "rules.no-ssh", &format!("{tool} {args}"));
        assert!(
            result_text(&r).contains("SSH keys are off limits"),
            "the rule's reason reaches the client: {r}"
        );
        assert!(
            !r.to_string().contains("ssh-key-canary"),
            "the key's content reached the client: {r}"
        );
    }
    d.quit();

    let blocked = sb.wait_for_event("the blocked read", |e| {
        is_event(
            e,
            "mcp_tool_call_intercepted",
            Some("read_text_file"),
            "rules.no-ssh",
        ) && e["action"] == "block"
    });
    assert_eq!(blocked["server"], "filesystem");
    let events = sb.events();
    let blocks = events
        .iter()
        .filter(|e| e["rule"] == "rules.no-ssh" && e["action"] == "block")
        .map(|e| e["count"].as_u64().unwrap_or(1))
        .sum::<u64>();
    assert_eq!(blocks, 3, "one block per refused read: {events:#?}");
    assert!(
        events.iter().any(|e| e["type"] == "mcp_tool_called"
            && e["tool"] == "read_text_file"
            && e["action"] == "allow"),
        "the ordinary read is recorded as allowed: {events:#?}"
    );
}

#[test]
fn restricted_server_exposes_only_its_allowlist() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    sb.write_policy(
        r#"
[servers."everything"]
trust = "restricted"
tool_allowlist = ["echo", "get-sum", "trigger-sampling-request"]
"#,
    );
    let argv = sb.wrap_argv("everything", &[], &peers.everything_server());
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    let mut listed = names(&d.list_tools());
    listed.sort();
    assert_eq!(
        listed,
        ["echo", "get-sum", "trigger-sampling-request"],
        "a restricted server lists exactly its tool_allowlist"
    );
    let r = d.call("get-sum", json!({"a": 2, "b": 3}));
    assert_eq!(result_text(&r), "The sum of 2 and 3 is 5.", "{r}");
    let r = d.call("get-tiny-image", json!({}));
    assert!(
        r["isError"] == true && !r.to_string().contains("\"image\""),
        "a tool outside the allowlist is refused: {r}"
    );
    // Allowed to run, but a restricted server may never sample: the
    // client's sampling handler (which answers "stub sample") is not asked.
    let r = d.call(
        "trigger-sampling-request",
        json!({"prompt": "hello", "maxTokens": 5}),
    );
    assert!(
        !r.to_string().contains("stub sample"),
        "the sampling request must not reach the client: {r}"
    );
    d.quit();

    sb.wait_for_event("the declined sampling request", |e| {
        e["type"] == "mcp_sampling_blocked" && e["rule"] == "restricted.sampling"
    });
    sb.wait_for_event("the refused call", |e| {
        e["type"] == "mcp_tool_call_intercepted"
            && e["tool"] == "get-tiny-image"
            && e["action"] == "block"
    });
    let events = sb.events();
    let hidden: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "mcp_tool_hidden")
        .filter_map(|e| e["tool"].as_str())
        .collect();
    assert!(
        hidden.contains(&"get-tiny-image") && !hidden.contains(&"echo"),
        "tools outside the allowlist are recorded as hidden, allowlisted ones are not: {hidden:?}"
    );
}

#[test]
fn broken_policy_keeps_the_last_good_policy_in_force() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    sb.write_policy(
        r#"
[[rules]]
id = "no-echo"
tool_name = "echo"
decision = "block"
reason = "echo is switched off"
"#,
    );
    let server = peers.py_server("raw_server.py", &[]);
    let argv = sb.wrap_argv("notes", &[], &server);

    // Session 1 runs on the valid policy, which becomes the last good one.
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    assert_blocked(
        &d.call("echo", json!({"text": "x"})),
        "rules.no-echo",
        "the valid policy applies",
    );
    d.quit();

    // A typo: strict parsing rejects the whole file.
    sb.write_policy("fail_closd = true\n");
    let stderr = sb.path().join("session2.stderr");
    let opts = DriverOptions {
        stderr: Some(&stderr),
        ..DriverOptions::default()
    };
    let mut d = match Driver::try_start(&peers, &sb, &argv, opts) {
        Ok(d) => d,
        Err(e) => panic!("a broken policy must not stop the server: {e}"),
    };
    assert_blocked(
        &d.call("echo", json!({"text": "x"})),
        "rules.no-echo",
        "the last good policy stays in force (the built-in defaults would allow echo)",
    );
    d.quit();

    let said = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains("keeping the last good policy") && said.contains("policy.toml:1:1"),
        "stderr says the policy is invalid, where, and what runs instead:\n{said}"
    );
    let e = sb.wait_for_event("policy_invalid", |e| {
        e["type"] == "policy_invalid" && e["rule"] == "policy.invalid"
    });
    assert!(
        e["reason"]
            .as_str()
            .is_some_and(|r| r.contains("fail_closd")),
        "the event says what is wrong: {e}"
    );
    assert_eq!(e["severity"], "high", "a broken policy is loud: {e}");
}

#[test]
fn audit_mode_records_without_blocking() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let (_, key) = home_with_ssh_key(&sb);
    sb.write_policy(&format!(
        "mode = \"audit\"\n[tool_policy]\nblocked_tools = [\"write_file\"]\n{NO_SSH}"
    ));
    let home = sb.user_home();
    let argv = sb.wrap_argv("filesystem", &[], &peers.filesystem_server(&[&home]));
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    let listed = names(&d.list_tools());
    assert!(
        listed.iter().any(|n| n == "write_file"),
        "audit mode withholds nothing: {listed:?}"
    );
    let r = d.call("read_text_file", json!({"path": key}));
    assert_eq!(r["isError"], false, "audit mode blocks nothing: {r}");
    assert!(
        result_text(&r).contains("ssh-key-canary"),
        "the read really ran: {r}"
    );
    d.quit();

    let audited = sb.wait_for_event("the audited read", |e| {
        is_event(
            e,
            "mcp_tool_call_intercepted",
            Some("read_text_file"),
            "rules.no-ssh",
        )
    });
    assert_eq!(
        audited["action"], "audit",
        "recorded, not blocked: {audited}"
    );
    assert!(
        audited["reason"]
            .as_str()
            .is_some_and(|r| r.contains("would block")),
        "the event says what enforce mode would have done: {audited}"
    );
    let hidden = sb.wait_for_event("write_file recorded as would-be hidden", |e| {
        e["type"] == "mcp_tool_hidden" && e["tool"] == "write_file"
    });
    assert_eq!(hidden["action"], "audit", "{hidden}");
    let events = sb.events();
    assert!(
        !events.iter().any(|e| e["action"] == "block"),
        "nothing is blocked in audit mode: {events:#?}"
    );
}

#[test]
fn audit_mode_starts_a_denied_server_and_records_it() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    sb.write_policy("mode = \"audit\"\n[server_policy]\nallowed_commands = [\"npx\"]\n");
    let server = peers.py_server("raw_server.py", &[]);
    let mut d = Driver::start(&peers, &sb, &sb.wrap_argv("notes", &[], &server), None, &[]);
    assert_eq!(result_text(&d.call("echo", json!({"text": "hi"}))), "hi");
    d.quit();
    let e = sb.wait_for_event("the audited launch", |e| {
        e["rule"] == "server_policy.allowed_commands"
    });
    assert_eq!(e["action"], "audit", "{e}");
}

/// Uncomments the seed `gatehouse protect` wrote (and its header when the
/// header is commented too), as a person turning the allowlist on would.
fn turn_on_command_seed(policy: &str) -> String {
    let mut lines: Vec<String> = policy.lines().map(String::from).collect();
    for l in &mut lines {
        if l == "# [server_policy]" {
            *l = "[server_policy]".into();
        } else if let Some(rest) = l.strip_prefix("# allowed_commands = ") {
            *l = format!("allowed_commands = {rest}");
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn protect_seeds_the_command_allowlist_so_turning_it_on_breaks_nothing() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let server = peers.py_server("raw_server.py", &[]);
    let cursor = sb.user_home().join(".cursor");
    std::fs::create_dir_all(&cursor).unwrap();
    let config = json!({"mcpServers": {"notes": {"command": server[0], "args": server[1..]}}});
    std::fs::write(cursor.join("mcp.json"), config.to_string()).unwrap();

    let out = sb.gatehouse(&["protect", "cursor"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gatehouse protect failed: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("allowed_commands"),
        "protect says it seeded the list: {said}"
    );
    let policy_path = sb.gatehouse_home().join("policy.toml");
    let policy = std::fs::read_to_string(&policy_path).unwrap();
    assert!(
        !policy.lines().any(|l| l.starts_with("allowed_commands")),
        "the seed is off until a person turns it on:\n{policy}"
    );
    std::fs::write(&policy_path, turn_on_command_seed(&policy)).unwrap();
    let check = sb.gatehouse(&["policy", "check"]);
    assert!(
        check.status.success(),
        "the seed turned on is a valid policy: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    // The protected entry, exactly as the client would launch it.
    let wrapped: Value =
        serde_json::from_str(&std::fs::read_to_string(cursor.join("mcp.json")).unwrap()).unwrap();
    let entry = &wrapped["mcpServers"]["notes"];
    let mut argv = vec![entry["command"].as_str().unwrap().to_string()];
    argv.extend(
        entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    // (Starting is what counts here.)
    let d = match Driver::try_start(&peers, &sb, &argv, DriverOptions::default()) {
        Ok(d) => d,
        Err(e) => panic!("turning the seeded allowlist on refused a protected server: {e}"),
    };
    assert_eq!(
        d.initialize["serverInfo"]["name"], "raw-e2e",
        "the protected server itself answered initialize"
    );
    d.quit();

    // Anything else is refused.
    let other = vec!["node".to_string(), peers.everything().display().to_string()];
    let error = refused(&peers, &sb, &sb.wrap_argv("other", &[], &other));
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("server_policy.allowed_commands")),
        "a command protect never saw is refused: {error}"
    );
}

/// DESIGN §8: the database cannot be opened. By default calls are relayed
/// (and say nothing can be recorded); with `fail_closed` they are blocked
/// while lists still pass.
#[test]
fn unopenable_database_relays_by_default_and_blocks_calls_when_fail_closed() {
    let peers = Peers::locate();
    for fail_closed in [false, true] {
        let sb = Sandbox::new();
        let (doc, _) = home_with_ssh_key(&sb);
        sb.write_policy(&format!("fail_closed = {fail_closed}\n"));
        // A directory where the database file should be: opening fails.
        std::fs::create_dir_all(sb.gatehouse_home().join("gatehouse.db")).unwrap();
        let home = sb.user_home();
        let argv = sb.wrap_argv("filesystem", &[], &peers.filesystem_server(&[&home]));
        let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
        let listed = names(&d.list_tools());
        assert!(
            listed.iter().any(|n| n == "read_text_file"),
            "lists pass either way (fail_closed = {fail_closed}): {listed:?}"
        );
        let r = d.call("read_text_file", json!({"path": doc}));
        if fail_closed {
            assert_blocked(&r, "cross_server.unavailable", "fail_closed blocks calls");
            assert!(
                result_text(&r).contains("could not be checked"),
                "the answer says why: {r}"
            );
        } else {
            assert_eq!(r["isError"], false, "relayed by default: {r}");
            assert!(result_text(&r).contains("buy milk"), "{r}");
        }
        d.quit();
    }
}

/// `gatehouse policy generate`: after a session, the observed server and its
/// approved tools (with content hashes) become a locked policy that
/// validates, keeps the server working, and refuses a server it never saw.
#[test]
fn generated_policy_locks_down_to_what_was_observed() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let fastmcp = peers.py_server("fastmcp_server.py", &[]);
    let argv = sb.wrap_argv("fastmcp", &[], &fastmcp);
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    assert!(!d.list_tools().is_empty());
    d.quit();

    let out_file = sb.path().join("locked.toml");
    let out = sb.gatehouse(&[
        "policy",
        "generate",
        "--since",
        "1h",
        "--output",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(
        text.contains("\"fastmcp\"") && text.contains("tool = \"add\"") && text.contains("sha256:"),
        "the observed server and its tools with hashes: {text}"
    );
    let again = sb.gatehouse(&["policy", "generate", "--output", out_file.to_str().unwrap()]);
    assert!(
        !again.status.success(),
        "an existing file is not overwritten"
    );

    // In force, the locked policy keeps the observed server working …
    sb.write_policy(&text);
    let check = sb.gatehouse(&["policy", "check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    let r = d.call("add", json!({"a": 40, "b": 2}));
    assert_eq!(result_text(&r), "42", "an allowed tool with its hash: {r}");
    d.quit();
    // … and refuses a server it never saw.
    let other = sb.wrap_argv("stranger", &[], &fastmcp);
    let error = refused(&peers, &sb, &other);
    assert!(
        error.to_string().contains("server_policy"),
        "refused by the server allowlist: {error}"
    );
}

/// Runs the raw fixture server (with its request tools) behind wrap under
/// `policy`, calls each of `calls` (tool, arguments) and returns their
/// result texts and every raw server→client line the client received.
fn server_request_session(
    peers: &Peers,
    sb: &Sandbox,
    policy: &str,
    calls: &[(&str, Value)],
) -> (Vec<String>, Vec<Value>) {
    sb.write_policy(policy);
    let tee = sb.path().join(format!("wire-{}.jsonl", policy.len()));
    let _ = std::fs::remove_file(&tee);
    let server = peers.py_server("raw_server.py", &["--requests"]);
    let argv = sb.wrap_argv("requests", &[], &server);
    let mut d = Driver::start(peers, sb, &argv, Some(&tee), &[]);
    d.list_tools();
    let texts = calls
        .iter()
        .map(|(tool, args)| result_text(&d.call(tool, args.clone())))
        .collect();
    d.quit();
    (texts, gatehouse_e2e::read_frames(&tee))
}

/// The server→client requests of `method` the client received.
fn requests_seen<'a>(frames: &'a [Value], method: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["method"] == method).collect()
}

#[test]
fn each_requests_key_governs_its_own_server_to_client_request() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let all = [
        ("roots", json!({})),
        ("sample", json!({"context": "allServers"})),
        ("elicit", json!({})),
    ];

    // roots and elicitation declined; sampling allowed, allServers stripped.
    let (texts, frames) = server_request_session(
        &peers,
        &sb,
        "[requests]\nroots = \"decline\"\nelicitation = \"decline\"\n",
        &all,
    );
    assert!(
        texts[0].contains("\"error\"") && texts[0].contains("requests.roots"),
        "roots/list is answered to the server with an error naming the rule: {}",
        texts[0]
    );
    assert!(
        requests_seen(&frames, "roots/list").is_empty(),
        "roots/list never reaches the client"
    );
    assert!(
        texts[1].contains("stub sample"),
        "sampling is allowed: {}",
        texts[1]
    );
    let sampled = requests_seen(&frames, "sampling/createMessage");
    assert_eq!(
        sampled[0]["params"]["includeContext"], "thisServer",
        "allServers is downgraded to thisServer (strip, the default)"
    );
    assert!(texts[2].contains("decline"), "{}", texts[2]);
    assert!(
        requests_seen(&frames, "elicitation/create").is_empty(),
        "elicitation declined on its own"
    );
    sb.wait_for_event("the declined roots/list", |e| {
        is_event(e, "mcp_roots_declined", None, "requests.roots") && e["action"] == "block"
    });
    sb.wait_for_event("the stripped context", |e| {
        is_event(
            e,
            "mcp_sampling_context",
            None,
            "requests.sampling_include_context",
        ) && e["action"] == "alert"
    });
    sb.wait_for_event("the declined elicitation", |e| {
        is_event(e, "mcp_elicitation_declined", None, "requests.elicitation")
    });

    // sampling declined on its own: roots and elicitation reach the client.
    let (texts, frames) =
        server_request_session(&peers, &sb, "[requests]\nsampling = \"decline\"\n", &all);
    assert!(
        texts[0].contains("gatehouse-e2e-root"),
        "roots allowed: {}",
        texts[0]
    );
    assert!(
        texts[1].contains("\"error\"") && !texts[1].contains("stub sample"),
        "sampling declined: {}",
        texts[1]
    );
    assert!(requests_seen(&frames, "sampling/createMessage").is_empty());
    assert_eq!(
        requests_seen(&frames, "elicitation/create").len(),
        1,
        "elicitation still reaches the client"
    );
    sb.wait_for_event("the declined sampling", |e| {
        is_event(e, "mcp_sampling_blocked", None, "requests.sampling")
    });

    // sampling_include_context = "decline": only allServers is declined;
    // "allow" forwards it unchanged with an event.
    let (texts, frames) = server_request_session(
        &peers,
        &sb,
        "[requests]\nsampling_include_context = \"decline\"\n",
        &[
            ("sample", json!({"context": "allServers"})),
            ("sample", json!({"context": "thisServer"})),
        ],
    );
    assert!(
        texts[0].contains("requests.sampling_include_context") && !texts[0].contains("stub sample"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("stub sample"),
        "thisServer passes: {}",
        texts[1]
    );
    assert_eq!(requests_seen(&frames, "sampling/createMessage").len(), 1);
    let (texts, frames) = server_request_session(
        &peers,
        &sb,
        "[requests]\nsampling_include_context = \"allow\"\n",
        &[("sample", json!({"context": "allServers"}))],
    );
    assert!(texts[0].contains("stub sample"), "{}", texts[0]);
    assert_eq!(
        requests_seen(&frames, "sampling/createMessage")[0]["params"]["includeContext"],
        "allServers",
        "allow forwards it unchanged"
    );
    sb.wait_for_event("the allowed context", |e| {
        is_event(
            e,
            "mcp_sampling_context",
            None,
            "requests.sampling_include_context",
        ) && e["action"] == "allow"
    });

    // A restricted server may never list roots, whatever requests.roots says.
    let (texts, frames) = server_request_session(
        &peers,
        &sb,
        "[requests]\nroots = \"allow\"\n[servers.\"requests\"]\ntrust = \"restricted\"\ntool_allowlist = [\"roots\"]\n",
        &[("roots", json!({}))],
    );
    assert!(texts[0].contains("restricted.roots"), "{}", texts[0]);
    assert!(requests_seen(&frames, "roots/list").is_empty());
    sb.wait_for_event("the restricted roots/list", |e| {
        is_event(e, "mcp_roots_declined", None, "restricted.roots")
    });
}

/// Runs `script` with the venv's Python (stdlib `sqlite3`) against the
/// sandbox's database; `args` follow the database path in `sys.argv`.
fn db_script(peers: &Peers, sb: &Sandbox, script: &str, args: &[String]) -> String {
    let out = std::process::Command::new(peers.python())
        .arg("-c")
        .arg(script)
        .arg(sb.gatehouse_home().join("gatehouse.db"))
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "database script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Inserts `count` events of `blob_bytes` evidence each, the first `age_ms`
/// old and each next one a millisecond younger (rule `old-N`, server `seed`).
fn seed_events(peers: &Peers, sb: &Sandbox, count: u64, age_ms: u64, blob_bytes: usize) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    db_script(
        peers,
        sb,
        r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
count, start, blob = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
evidence = '{"blob":"' + "x" * blob + '"}'
db.executemany(
    "INSERT INTO events (time_ms, last_time_ms, type, server_id, action, rule, severity, reason, evidence) "
    "VALUES (?, ?, 'frame_dropped', 'seed', 'block', ?, 'high', 'seeded', ?)",
    [(start + i, start + i, "old-%d" % i, evidence) for i in range(count)])
db.commit()
"#,
        &[
            count.to_string(),
            (now - age_ms).to_string(),
            blob_bytes.to_string(),
        ],
    );
}

/// (count, oldest time, newest time) of the seeded events left.
fn seeded_left(peers: &Peers, sb: &Sandbox) -> (u64, u64, u64) {
    let out = db_script(
        peers,
        sb,
        "import sqlite3, sys\n\
         db = sqlite3.connect(sys.argv[1], timeout=10)\n\
         print(*db.execute(\"SELECT COUNT(*), IFNULL(MIN(time_ms), 0), IFNULL(MAX(time_ms), 0) FROM events WHERE server_id = 'seed'\").fetchone())",
        &[],
    );
    let v: Vec<u64> = out.split_whitespace().map(|n| n.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

#[test]
fn wrap_prunes_events_per_the_policy_retention_and_size_cap() {
    const DAY_MS: u64 = 24 * 60 * 60 * 1000;
    let peers = Peers::locate();
    let sb = Sandbox::new();
    sb.write_policy("[limits]\nevent_retention_days = 7\n");
    // `protect` creates the home's database (reading commands never do);
    // with no client config here it writes nothing else.
    let out = sb.gatehouse(&["protect", "cursor"]);
    assert!(
        out.status.success(),
        "gatehouse protect creates the database: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sb.events().is_empty(), "a fresh database has no events");
    seed_events(&peers, &sb, 3, 10 * DAY_MS, 10);
    seed_events(&peers, &sb, 2, 3 * DAY_MS, 10);

    let argv = sb.wrap_argv("notes", &[], &peers.py_server("raw_server.py", &[]));
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    assert_eq!(result_text(&d.call("echo", json!({"text": "hi"}))), "hi");
    // Maintenance runs in the background a moment after start.
    gatehouse_e2e::wait_until(
        "events older than 7 days are pruned",
        std::time::Duration::from_secs(15),
        || seeded_left(&peers, &sb).0 == 2,
    );
    d.quit();
    let (_, oldest, _) = seeded_left(&peers, &sb);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        now - oldest < 4 * DAY_MS,
        "the 3-day-old events stay under a 7-day retention"
    );

    // The size cap: ~24 MiB of recent events under a 16 MiB cap. The hourly
    // throttle is reset so this start runs maintenance again.
    sb.write_policy("[limits]\nevent_retention_days = 7\ndb_max_mb = 16\n");
    db_script(
        &peers,
        &sb,
        "import sqlite3, sys\n\
         db = sqlite3.connect(sys.argv[1], timeout=10)\n\
         db.execute(\"DELETE FROM meta WHERE key = 'maintenance.last_run_ms'\")\n\
         db.commit()",
        &[],
    );
    seed_events(&peers, &sb, 6000, DAY_MS, 4000);
    let (before, _, newest) = seeded_left(&peers, &sb);
    assert_eq!(before, 6002);
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);
    assert_eq!(result_text(&d.call("echo", json!({"text": "hi"}))), "hi");
    gatehouse_e2e::wait_until(
        "the oldest events are pruned to the size cap",
        std::time::Duration::from_secs(20),
        || seeded_left(&peers, &sb).0 < before,
    );
    d.quit();
    let (left, oldest, newest_left) = seeded_left(&peers, &sb);
    assert!(
        left < 4200,
        "about a third of ~24 MiB must go under a 16 MiB cap, {left} left"
    );
    assert_eq!(newest_left, newest, "the newest event survives");
    assert!(
        oldest > now - 2 * DAY_MS,
        "oldest first: the 3-day-old events went before the 1-day-old ones"
    );
    let used = db_script(
        &peers,
        &sb,
        "import sqlite3, sys\n\
         db = sqlite3.connect(sys.argv[1], timeout=10)\n\
         c = lambda p: db.execute('PRAGMA ' + p).fetchone()[0]\n\
         print((c('page_count') - c('freelist_count')) * c('page_size'))",
        &[],
    );
    assert!(
        used.parse::<u64>().unwrap() <= 16 * 1024 * 1024,
        "used bytes under the cap: {used}"
    );
}

#[test]
fn unreadable_keyring_refuses_initialize_when_fail_closed_and_starts_without_secrets_otherwise() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    // A session bus that does not exist: the keyring cannot be reached.
    let no_bus = format!("unix:path={}", sb.path().join("no-bus").display());
    let env = [("DBUS_SESSION_BUS_ADDRESS", no_bus.as_str())];
    let secrets = "[servers.\"sec\"]\nenv = { API_TOKEN = \"vault:API_TOKEN\" }\n";

    sb.write_policy(&format!("fail_closed = true\n{secrets}"));
    let pid_file = sb.path().join("server.pid");
    let server = peers.py_server(
        "raw_server.py",
        &["--pid-file", &pid_file.display().to_string()],
    );
    let argv = sb.wrap_argv("sec", &[], &server);
    let opts = DriverOptions {
        env: &env,
        ..DriverOptions::default()
    };
    let error = match Driver::try_start(&peers, &sb, &argv, opts) {
        Ok(d) => {
            d.quit();
            panic!("fail_closed must refuse a server whose secrets cannot be read")
        }
        Err(error) => error,
    };
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("vault.unavailable") && message.contains("keyring"),
        "the refusal names the rule and the reason: {error}"
    );
    assert!(!pid_file.exists(), "nothing is started under fail_closed");
    sb.wait_for_event("the refusal", |e| {
        is_event(e, "mcp_server_refused", None, "vault.unavailable") && e["action"] == "block"
    });

    // fail_closed = false: it starts, without the secret, loudly. (Another
    // id: another command under "sec" would be another server.)
    sb.write_policy(&secrets.replace("\"sec\"", "\"sec2\""));
    let stderr = sb.path().join("wrap.stderr");
    let argv = sb.wrap_argv("sec2", &[], &peers.py_server("fastmcp_server.py", &[]));
    let opts = DriverOptions {
        env: &env,
        stderr: Some(&stderr),
        ..DriverOptions::default()
    };
    let mut d = Driver::try_start(&peers, &sb, &argv, opts).expect("starts without secrets");
    let names = result_text(&d.call("env_names", json!({})));
    assert!(
        !names.contains("API_TOKEN"),
        "no secret, no variable: {names}"
    );
    d.quit();
    let said = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains("WITHOUT its secrets") && said.contains("keyring"),
        "a stderr line says why: {said}"
    );
    sb.wait_for_event("the loud event", |e| {
        is_event(e, "vault_unavailable", None, "vault.unavailable")
            && e["action"] == "alert"
            && e["server"] == "sec2"
    });
}

/// (approved, pending) of the server's `launch_approvals` row ("" = none).
fn launch_row(peers: &Peers, sb: &Sandbox, server: &str) -> String {
    db_script(
        peers,
        sb,
        "import sqlite3, sys\n\
         db = sqlite3.connect(sys.argv[1], timeout=10)\n\
         r = db.execute('SELECT approved, IFNULL(pending, \"\") FROM launch_approvals WHERE server_id = ?', (sys.argv[2],)).fetchone()\n\
         print('' if r is None else '%s %s' % r)",
        &[server.to_string()],
    )
}

#[test]
fn a_changed_launch_is_held_without_secrets_or_tools_until_approved() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    // The keyring is unreachable: a held launch must not even ask it.
    let no_bus = format!("unix:path={}", sb.path().join("no-bus").display());
    let env = [("DBUS_SESSION_BUS_ADDRESS", no_bus.as_str())];
    sb.write_policy("[servers.\"notes\"]\nenv = { API_TOKEN = \"vault:API_TOKEN\" }\n");
    // The script is a copy the test changes: same command, other code.
    let script = sb.path().join("server.py");
    let original =
        std::fs::read_to_string(gatehouse_e2e::tests_dir().join("servers/raw_server.py")).unwrap();
    std::fs::write(&script, &original).unwrap();
    let argv = sb.wrap_argv(
        "notes",
        &[],
        &[
            peers.python().display().to_string(),
            script.display().to_string(),
        ],
    );
    let start = |d_env: &[(&str, &str)]| {
        Driver::try_start(
            &peers,
            &sb,
            &argv,
            DriverOptions {
                env: d_env,
                ..DriverOptions::default()
            },
        )
        .expect("the server starts")
    };

    // First sight: approved, tools trusted.
    let mut d = start(&env);
    assert_eq!(names(&d.list_tools()), ["echo"]);
    d.quit();
    gatehouse_e2e::wait_until(
        "the first launch is approved",
        std::time::Duration::from_secs(10),
        || {
            let row = launch_row(&peers, &sb, "notes");
            row.starts_with("sha256:") && !row.trim_end().contains(' ')
        },
    );

    // The script changes behind the same command: held.
    let keyring_asked = |sb: &Sandbox| {
        sb.events()
            .iter()
            .filter(|e| e["type"] == "vault_unavailable")
            .count()
    };
    let asked_before = keyring_asked(&sb);
    std::fs::write(&script, format!("{original}\n# changed\n")).unwrap();
    let mut d = start(&env);
    assert!(d.list_tools().is_empty(), "a held launch lists no tools");
    let r = d.call("echo", json!({"text": "hi"}));
    assert_blocked(&r, "launch.held", "a held launch's calls are blocked");
    assert!(
        result_text(&r).contains("gatehouse pins trust-launch --server notes"),
        "the answer names the approval command: {r}"
    );
    d.quit();
    sb.wait_for_event("the held launch", |e| {
        is_event(e, "mcp_server_launch_held", None, "launch.held") && e["action"] == "hold"
    });
    sb.wait_for_event("the change", |e| {
        is_event(e, "mcp_server_binary_mismatch", None, "launch.changed") && e["action"] == "hold"
    });
    sb.wait_for_event("the withheld secrets", |e| {
        is_event(e, "vault_secret_withheld", None, "launch.held")
    });
    assert_eq!(
        keyring_asked(&sb),
        asked_before,
        "the keyring is not asked for a held launch's secrets"
    );
    let events = sb.events();
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "server_identity_mismatch"),
        "same command: a changed launch, not another server"
    );

    // Still held at the next start, until a person approves it.
    let mut d = start(&env);
    assert!(
        d.list_tools().is_empty(),
        "held on every start until approved"
    );
    d.quit();
    let out = sb.gatehouse(&["pins", "trust-launch", "--server", "notes"]);
    assert!(
        out.status.success(),
        "trust-launch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sb.gatehouse(&["pins", "trust-launch", "--server", "notes"]);
    assert!(!out.status.success(), "nothing waits any more");

    // Approved: tools back. (Without a keyring, its secrets now fail as usual.)
    let mut d = start(&env);
    assert_eq!(names(&d.list_tools()), ["echo"]);
    assert_eq!(result_text(&d.call("echo", json!({"text": "hi"}))), "hi");
    d.quit();

    // on_launch_change = "alert": a change only alerts.
    sb.write_policy("[pinning]\non_launch_change = \"alert\"\n");
    std::fs::write(&script, format!("{original}\n# changed again\n")).unwrap();
    let mut d = start(&[]);
    assert_eq!(names(&d.list_tools()), ["echo"], "alert mode holds nothing");
    d.quit();
    sb.wait_for_event("the alert", |e| {
        is_event(e, "mcp_server_binary_mismatch", None, "launch.changed") && e["action"] == "alert"
    });
}

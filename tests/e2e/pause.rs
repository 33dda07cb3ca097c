//! The global pause end to end: `gatehouse pause` switches a running
//! `gatehouse wrap` to audit only (recorded, not blocked) without a restart,
//! and `gatehouse resume` switches it back. The real PyPI `mcp` client drives
//! the real npm server-filesystem. Peers: `scripts/install-peers.sh`.

use std::time::Duration;

use gatehouse_e2e::{result_text, wait_until, Driver, Peers, Sandbox};
use serde_json::{json, Value};

const NO_SSH: &str = r#"
[[rules]]
id = "no-ssh"
tool_name = "read_text_file"
argument_patterns = ["**/.ssh/**"]
decision = "block"
reason = "SSH keys are off limits"
"#;

/// Calls until the answer's blocked-ness is `blocked` (a wrap notices a
/// pause within a quarter second; the deadline allows for a loaded machine).
fn call_until(d: &mut Driver, key: &str, blocked: bool, what: &str) -> Value {
    let mut last = Value::Null;
    wait_until(what, Duration::from_secs(10), || {
        last = d.call("read_text_file", json!({ "path": key }));
        (last["isError"] == true) == blocked
    });
    last
}

#[test]
fn pause_and_resume_reach_a_running_wrap() {
    let peers = Peers::locate();
    let sb = Sandbox::new();
    let home = sb.user_home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let key = home.join(".ssh/id_ed25519");
    std::fs::write(&key, "ssh-key-canary-77e2\n").unwrap();
    let key = key.display().to_string();
    sb.write_policy(NO_SSH);
    let argv = sb.wrap_argv("filesystem", &[], &peers.filesystem_server(&[&home]));
    let mut d = Driver::start(&peers, &sb, &argv, None, &[]);

    let r = d.call("read_text_file", json!({ "path": key }));
    assert!(
        r["isError"] == true && result_text(&r).contains("no-ssh"),
        "enforced before the pause: {r}"
    );

    let out = sb.gatehouse(&["pause", "--for", "15m"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("protection paused until"), "{said}");
    let r = call_until(&mut d, &key, false, "the running wrap to follow the pause");
    assert!(
        result_text(&r).contains("ssh-key-canary-77e2"),
        "paused: the read really ran: {r}"
    );
    let audited = sb.wait_for_event("the audited read", |e| {
        e["type"] == "mcp_tool_call_intercepted"
            && e["action"] == "audit"
            && e["rule"] == "rules.no-ssh"
    });
    assert!(
        audited["reason"]
            .as_str()
            .is_some_and(|r| r.contains("would block")),
        "recorded as what enforcement would have done: {audited}"
    );
    let paused = sb.wait_for_event("who paused, for how long", |e| {
        e["type"] == "protection_paused"
    });
    assert_eq!(paused["severity"], "high", "{paused}");

    let out = sb.gatehouse(&["resume"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("protection resumed"));
    call_until(&mut d, &key, true, "the running wrap to enforce again");

    // Seconds are honoured exactly, and a pause that ends by itself is
    // recorded once (by the wrap that notices the deadline).
    let out = sb.gatehouse(&["pause", "--for", "3s"]);
    assert!(out.status.success(), "{out:?}");
    call_until(
        &mut d,
        &key,
        false,
        "the running wrap to follow a 3 s pause",
    );
    call_until(&mut d, &key, true, "the 3 s pause to end by itself");
    let short = sb.wait_for_event("a 3 s pause", |e| {
        e["type"] == "protection_paused"
            && e["reason"].as_str().is_some_and(|r| r.contains("for 3 s"))
    });
    let ended = sb.wait_for_event("the end of the pause", |e| {
        e["type"] == "protection_resumed"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("the pause ended"))
    });
    assert_eq!(
        ended["time_ms"].as_i64().unwrap() - short["time_ms"].as_i64().unwrap(),
        3_000,
        "recorded at the deadline, 3 s after the pause: {ended}"
    );
    std::thread::sleep(Duration::from_secs(1));
    let ends = sb
        .events()
        .iter()
        .filter(|e| {
            e["type"] == "protection_resumed"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("the pause ended"))
        })
        .map(|e| e["count"].as_i64().unwrap_or(1))
        .sum::<i64>();
    assert_eq!(ends, 1, "recorded exactly once");
    d.quit();

    // Lengths outside 1 s – 24 h are refused, saying so.
    let out = sb.gatehouse(&["pause", "--for", "0m"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a zero-length pause is an error"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("between 1 second and 24 hours"),
        "{out:?}"
    );
}

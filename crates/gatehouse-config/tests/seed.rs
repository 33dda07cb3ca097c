//! `seed_allowed_commands`: the commented command allowlist `gatehouse
//! protect` writes, so that turning it on breaks nothing.

use gatehouse_config::{check_text, default_policy_toml, seed_allowed_commands, SEED_MARKER};

fn cmds(list: &[&str]) -> Vec<String> {
    list.iter().map(|c| c.to_string()).collect()
}

/// What a person does to turn the seed on: uncomment it (and its header
/// when that is commented too).
fn turn_on(text: &str) -> String {
    text.lines()
        .map(|l| {
            l.strip_prefix("# allowed_commands = ")
                .map(|rest| format!("allowed_commands = {rest}"))
                .unwrap_or_else(|| {
                    if l == "# [server_policy]" {
                        "[server_policy]".to_owned()
                    } else {
                        l.to_owned()
                    }
                })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Seeds `text` with `commands`, then checks: the effective policy did not
/// change, and once turned on the list allows every seeded command and
/// refuses `outsider`.
fn check(text: &str, commands: &[&str], outsider: &str) -> String {
    let seed = seed_allowed_commands("policy.toml", text, &cmds(commands)).expect("seed");
    let seeded = seed.text.expect("a new seed is written");
    assert_eq!(
        seeded.matches(SEED_MARKER).count(),
        1,
        "one seed:\n{seeded}"
    );
    let before = check_text("policy.toml", text).unwrap().policy;
    let after = check_text("policy.toml", &seeded).unwrap().policy;
    assert_eq!(
        before.to_toml(),
        after.to_toml(),
        "the seed is a comment:\n{seeded}"
    );
    assert!(!after.has_command_allowlist(), "the seed is off:\n{seeded}");
    let on = check_text("policy.toml", &turn_on(&seeded))
        .unwrap_or_else(|e| panic!("the seed turned on must parse: {e}\n{seeded}"))
        .policy;
    assert!(
        on.has_command_allowlist(),
        "turned on:\n{}",
        turn_on(&seeded)
    );
    for c in commands {
        assert!(
            on.command_allowed(c, None),
            "turning the seed on must not refuse {c}:\n{seeded}"
        );
    }
    assert!(
        !on.command_allowed(outsider, None),
        "the seed allows only what protect found, not {outsider}"
    );
    seeded
}

#[test]
fn default_policy_gets_a_commented_seed_under_server_policy() {
    let seeded = check(
        default_policy_toml(),
        &["npx", "uvx", "/opt/mcp/bin/server", "npx"],
        "/tmp/evil/npx",
    );
    let header = seeded.find("# [server_policy]").unwrap();
    let marker = seeded.find(SEED_MARKER).unwrap();
    let next_table = seeded.find("# [tool_policy]").unwrap();
    assert!(
        header < marker && marker < next_table,
        "the seed sits in the server_policy section:\n{seeded}"
    );
    assert!(
        seeded.contains("# allowed_commands = [\"/opt/mcp/bin/server\", \"npx\", \"uvx\"]\n"),
        "sorted, deduplicated:\n{seeded}"
    );
}

#[test]
fn empty_and_hand_written_files() {
    check("", &["node"], "python3");
    check("mode = \"enforce\"\n", &["node"], "python3");
    // An active header: the seed goes under it, the table keeps its keys.
    let seeded = check(
        "[server_policy]\nmode = \"denylist\"\ndeny = [\"evil-*\"]\n",
        &["node"],
        "python3",
    );
    assert!(seeded.starts_with(&format!("[server_policy]\n{SEED_MARKER}")));
    // Metacharacters in a path are literal.
    check("", &["/opt/my[1]/srv*"], "/opt/my1/srv");
}

#[test]
fn seeding_again_adds_only_new_commands() {
    let first = seed_allowed_commands("p", default_policy_toml(), &cmds(&["npx"]))
        .unwrap()
        .text
        .unwrap();
    let same = seed_allowed_commands("p", &first, &cmds(&["npx"])).unwrap();
    assert_eq!(same.text, None, "nothing new, nothing written");
    assert_eq!(same.seeded, ["npx"]);
    let second = seed_allowed_commands("p", &first, &cmds(&["node"]))
        .unwrap()
        .text
        .unwrap();
    assert_eq!(second.matches(SEED_MARKER).count(), 1, "{second}");
    assert!(
        second.contains("# allowed_commands = [\"node\", \"npx\"]\n"),
        "{second}"
    );
    assert_eq!(
        second.lines().count(),
        first.lines().count(),
        "one line replaced"
    );
}

#[test]
fn an_active_list_is_never_edited_and_refusals_are_reported() {
    let text = "[server_policy]\nallowed_commands = [\"npx\", \"/opt/mcp/*\"]\n";
    let seed = seed_allowed_commands(
        "p",
        text,
        &cmds(&["npx", "node", "/opt/mcp/srv", "node", "/tmp/x/npx"]),
    )
    .unwrap();
    assert_eq!(seed.text, None, "an active list is the person's");
    assert_eq!(seed.refused, ["/tmp/x/npx", "node"]);
}

#[test]
fn an_invalid_file_is_an_error_and_left_alone() {
    let err = seed_allowed_commands("policy.toml", "fail_closd = true\n", &cmds(&["npx"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("policy.toml:1:1"), "{err}");
}

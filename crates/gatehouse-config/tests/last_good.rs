//! The database's "last good" policy must be exactly the policy that was in
//! force: never looser after a broken file makes wrap fall back to it.

use gatehouse_config::{
    check_text, compile, compile_last_good, LoadedPolicy, PolicySource, ServerRef, SourceRole,
};
use serde_json::json;

const BASE: &str = r#"
[server_policy]
mode = "allowlist"
allow = ["github", "db"]
allowed_commands = ["npx", "uvx"]

[tool_policy]
mode = "allowlist"
allow = [{ server = "*", tool = "get_*" }, { server = "*", tool = "query" }]

[servers."db"]
trust = "restricted"
tool_allowlist = ["query", "get_*"]
"#;

const LOCAL: &str = r#"
[server_policy]
mode = "allowlist"
allow = ["github"]
allowed_commands = ["npx"]

[tool_policy]
mode = "allowlist"
allow = [{ server = "*", tool = "get_issue" }]

[servers."db"]
trust = "restricted"
tool_allowlist = ["query"]
"#;

fn layered() -> LoadedPolicy {
    compile(vec![
        PolicySource {
            role: SourceRole::Base,
            name: "team.toml".into(),
            text: BASE.into(),
        },
        PolicySource {
            role: SourceRole::Local,
            name: "policy.toml".into(),
            text: LOCAL.into(),
        },
    ])
    .expect("valid layers")
}

/// (what, decision is block) for the cases where the two layers disagree.
fn verdicts(p: &gatehouse_config::Policy) -> Vec<(&'static str, bool)> {
    let gh = ServerRef::from("github");
    let db = ServerRef::from("db");
    vec![
        ("launch db", p.server_decision(db, "npx", None).is_block()),
        ("launch uvx", p.server_decision(gh, "uvx", None).is_block()),
        (
            "call get_repo",
            p.tool_decision(gh, "get_repo", None, &json!({})).is_block(),
        ),
        ("list db get_x", !p.tool_exposed(db, "get_x")),
    ]
}

#[test]
fn the_record_rebuilds_the_layered_policy_exactly() {
    let loaded = layered();
    let want = verdicts(&loaded.policy);
    assert!(
        want.iter().all(|(_, blocked)| *blocked),
        "every case is refused by the local layer: {want:?}"
    );
    let back = compile_last_good(&loaded.last_good_record()).expect("record compiles");
    assert_eq!(verdicts(&back.policy), want);
    assert_eq!(back.policy.to_toml(), loaded.policy.to_toml());
}

#[test]
fn the_rendered_policy_is_not_a_safe_last_good_record() {
    // Why the record keeps the sources: `to_toml` shows one allowlist per
    // key, so the rendered text read back is looser than what was in force.
    let loaded = layered();
    let rendered = check_text("rendered", &loaded.policy.to_toml()).unwrap();
    assert_ne!(
        verdicts(&rendered.policy),
        verdicts(&loaded.policy),
        "if this starts to hold, to_toml became lossless for layers"
    );
}

#[test]
fn plain_text_records_still_load_and_garbage_is_an_error() {
    let old = compile_last_good("mode = \"audit\"\n").expect("plain policy text");
    assert!(old.policy.is_audit_only());
    for bad in [
        r#"{"v": 2, "sources": []}"#,
        r#"{"v": 1, "sources": []}"#,
        r#"{"v": 1, "sources": [{"role": "base", "name": "b", "text": ""}]}"#,
        r#"{"v": 1, "sources": [{"role": "x", "name": "b", "text": ""}]}"#,
        "[1, 2",
    ] {
        assert!(compile_last_good(bad).is_err(), "{bad} must not load");
    }
}

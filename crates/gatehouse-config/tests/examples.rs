//! Every shipped policy text parses, validates and behaves as documented:
//! the built-in default, and each file under `docs/examples/`.

mod common;

use std::path::PathBuf;

use common::{check, policy};
use gatehouse_config::{compile, default_policy_toml, Policy, PolicySource, SourceRole};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples")
}

fn example(name: &str) -> String {
    let path = examples_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn default_file_is_valid_and_equals_built_in_defaults() {
    let p = policy(default_policy_toml());
    assert_eq!(
        p.to_toml(),
        Policy::default().to_toml(),
        "the default file sets nothing"
    );
}

#[test]
fn uncommenting_every_default_line_changes_nothing() {
    // `# key = value` lines show the defaults; `## ` lines are prose.
    let uncommented: String = default_policy_toml()
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if !l.starts_with("##") && !rest.starts_with("base") => format!("{rest}\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    let p = policy(&uncommented);
    assert_eq!(
        p.to_toml(),
        Policy::default().to_toml(),
        "a commented default differs from the built-in default:\n{uncommented}"
    );
}

#[test]
fn defaults_match_the_issue() {
    let p = Policy::default();
    assert!(!p.is_audit_only() && !p.fail_closed());
    assert_eq!(p.limits.max_frame_bytes, 64 * 1024 * 1024);
    assert_eq!(p.limits.db_busy.as_millis(), 50);
    assert_eq!(p.limits.event_retention_days, 30);
    assert_eq!(p.tool_lists.refresh_coalesce.as_secs(), 5);
    assert_eq!(p.tool_lists.max_tools_per_server, 256);
    assert!(p.pinning.auto_trust_first && p.pinning.launch_pinning);
    assert!(p.scanner.definitions && p.scanner.outputs && !p.scanner.spotlight_results);
    let cs = &p.cross_server;
    assert_eq!(cs.read_then_send.mode, gatehouse_config::FlowMode::Linked);
    assert_eq!(cs.read_then_send.window.as_secs(), 30);
    assert_eq!(
        (
            cs.burst.max_calls,
            cs.burst.window.as_secs(),
            cs.burst.cooldown.as_secs()
        ),
        (20, 5, 10)
    );
    let rl = cs.rate_limit_for("any");
    assert_eq!((rl.calls_per_minute, rl.burst), (100, 20));
    assert!((cs.typosquat.server_threshold - 0.85).abs() < f64::EPSILON);
}

#[test]
fn every_example_parses_and_round_trips() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples_dir()).expect("docs/examples exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let p = policy(&text);
        let rendered = p.to_toml();
        assert_eq!(
            policy(&rendered).to_toml(),
            rendered,
            "{} must round-trip through `policy show`",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 5, "expected the shipped examples, found {seen}");
}

#[test]
fn laptop_strict_behaves() {
    let p = example("laptop-strict.toml");
    check(&p, "launch github npx", "allow");
    check(&p, "launch random npx", "block server_policy.allow");
    check(&p, "launch memory-test npx", "block server_policy.deny");
    check(
        &p,
        "launch github /tmp/npx",
        "block server_policy.allowed_commands",
    );
    check(&p, "launch github /opt/mcp/github-server", "allow");
    check(
        &p,
        r#"call filesystem read_text_file {"path":"/home/me/.aws/credentials"}"#,
        "block rules.no-credentials",
    );
    check(
        &p,
        r#"call filesystem write_file {"path":"/etc/hosts","content":"x"}"#,
        "audit rules.audit-system-writes",
    );
    check(
        &p,
        r#"call filesystem write_file {"path":"/home/me/notes.md","content":"x"}"#,
        "allow",
    );
    check(
        &p,
        "call any run_shell {}",
        "block tool_policy.blocked_tools",
    );
    check(&p, "call any exec_python {}", "block tool_policy.deny");
    check(&p, "list vendor-search search", "shown");
    check(&p, "list vendor-search upload", "hidden");
    let pol = policy(&p);
    assert!(pol.fail_closed());
    assert!(pol.tool_lists.lock_tool_list);
    let s = pol.server_settings("github");
    assert_eq!(s.env.len(), 1);
    assert!(!pol.server_settings("vendor-search").may_elicit);
}

#[test]
fn team_base_with_local_tightening() {
    let loaded = compile(vec![
        PolicySource {
            role: SourceRole::Base,
            name: "team-base.toml".into(),
            text: example("team-base.toml"),
        },
        PolicySource {
            role: SourceRole::Local,
            name: "audit-trial.toml".into(),
            text: example("audit-trial.toml"),
        },
    ])
    .expect("team base + local are valid together");
    let p = &loaded.policy;
    assert!(
        !p.is_audit_only(),
        "the audit-trial local file cannot switch a team base to audit"
    );
    assert_eq!(
        loaded.warnings.len(),
        1,
        "one warning, for `mode`: {:?}",
        loaded.warnings
    );
    assert_eq!(loaded.warnings[0].line, 4, "{}", loaded.warnings[0]);
    assert_eq!(
        p.cross_server.read_then_send.mode,
        gatehouse_config::FlowMode::Strict,
        "local tightened linked → strict"
    );
    assert_eq!(p.cross_server.read_then_send.window.as_secs(), 60);
    assert!(p.server_decision("foo-unofficial", "npx", None).is_block());
    let d = p.tool_decision(
        "fs",
        "read_file",
        None,
        &serde_json::json!({"path": "/home/u/.ssh/id_ed25519"}),
    );
    assert_eq!(
        d.rule(),
        Some("rules.team-no-ssh"),
        "the base's rule fires first, in layer order"
    );
    assert_eq!(p.scanner.custom_patterns[0].id, "corp-internal-host");
    assert!(p.scanner.custom_patterns[0]
        .regex
        .is_match("see INTERNAL.corp.example.com"));
}

#[test]
fn audit_trial_behaves() {
    let p = example("audit-trial.toml");
    check(
        &p,
        r#"call fs read_file {"path":"/home/u/.ssh/id_rsa"}"#,
        "block rules.would-block-ssh",
    );
    assert!(policy(&p).is_audit_only());
}

#[test]
fn cross_server_example_behaves() {
    let p = policy(&example("cross-server.toml"));
    let cs = &p.cross_server;
    assert_eq!(cs.read_then_send.window.as_secs(), 45);
    assert_eq!(cs.burst.max_calls, 40);
    assert_eq!(
        p.server_settings("filesystem").rate_limit.calls_per_minute,
        600
    );
    assert_eq!(p.server_settings("slack").rate_limit.burst, 5);
    assert_eq!(p.server_settings("other").rate_limit.calls_per_minute, 100);
    assert_eq!(
        cs.classification_override("slack_reply"),
        vec![gatehouse_config::ToolClass::Send]
    );
    assert_eq!(
        cs.classification_override("notes_add"),
        vec![gatehouse_config::ToolClass::Write]
    );
    assert!((cs.typosquat.package_threshold - 0.9).abs() < f64::EPSILON);
}

#[test]
fn locked_generated_example_behaves() {
    let p = example("locked-generated.toml");
    let h = "sha256:a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
    check(&p, &format!("call memory read_graph {h} {{}}"), "allow");
    check(&p, "call memory read_graph sha256:0000000000000000000000000000000000000000000000000000000000000000 {}", "block tool_policy.content_hash");
    check(&p, "call notes delete_all {}", "block tool_policy.allow");
    check(&p, "launch other npx", "block server_policy.allow");
}

#[test]
fn generated_policy_is_valid_and_locks_what_was_seen() {
    let h1 = format!("sha256:{}", "ab".repeat(32));
    let h2 = format!("sha256:{}", "cd".repeat(32));
    let text = gatehouse_config::generate_locked_policy(
        &[
            (
                "notes".into(),
                vec![
                    ("read_note".into(), h1.clone()),
                    ("write_note".into(), h2.clone()),
                ],
            ),
            ("odd[name]*".into(), vec![("t\"q".into(), h1.clone())]),
        ],
        &[("notes".into(), "delete_all".into())],
    );
    check(&text, &format!("call notes read_note {h1} {{}}"), "allow");
    check(
        &text,
        &format!("call notes read_note {h2} {{}}"),
        "block tool_policy.content_hash",
    );
    check(
        &text,
        &format!("call notes delete_all {h1} {{}}"),
        "block tool_policy.allow",
    );
    check(&text, &format!("call odd[name]* t\"q {h1} {{}}"), "allow");
    check(
        &text,
        &format!("call oddn t\"q {h1} {{}}"),
        "block tool_policy.allow",
    );
    check(&text, "launch odd[name]* npx", "allow");
    check(&text, "launch oddx npx", "block server_policy.allow");
    // Uncommenting the reviewed line (moved into `allow`) allows it.
    let reviewed = text.replace(
        "]\n\n# --- Blocked",
        "  { server = \"notes\", tool = \"delete_all\" },\n]\n\n# --- Blocked",
    );
    check(
        &reviewed,
        &format!("call notes delete_all {h1} {{}}"),
        "allow",
    );
}

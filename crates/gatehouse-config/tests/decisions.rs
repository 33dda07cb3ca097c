//! Policy decisions through the data-driven `check(policy_toml, input, expect)` helper.

mod common;

use common::{check, policy};

const H1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const H2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

#[test]
fn empty_policy_allows_everything() {
    check(
        "",
        "call any read_file {\"path\":\"/home/u/.ssh/id_rsa\"}",
        "allow",
    );
    check("", "launch any npx", "allow");
    check("", "list any anything", "shown");
}

#[test]
fn server_deny_and_allow_by_glob() {
    let deny = "[server_policy]\nmode = \"denylist\"\ndeny = [\"evil-*\"]\n";
    check(deny, "launch evil-notes npx", "block server_policy.deny");
    check(deny, "launch notes npx", "allow");
    check(deny, "launch notes#evil-id npx", "block server_policy.deny");

    let allow = "[server_policy]\nmode = \"allowlist\"\nallow = [\"github\", \"internal-*\"]\ndeny = [\"internal-old\"]\n";
    check(allow, "launch github npx", "allow");
    check(allow, "launch internal-db uvx", "allow");
    check(allow, "launch internal-old uvx", "block server_policy.deny");
    check(allow, "launch gitlab npx", "block server_policy.allow");
    check(allow, "launch mine#github npx", "allow");
}

#[test]
fn command_allowlist_by_name_and_path() {
    let p = "[server_policy]\nallowed_commands = [\"npx\", \"uvx\", \"/opt/mcp/*\"]\n";
    check(p, "launch a npx", "allow");
    check(p, "launch a npx.cmd", "allow");
    check(p, "launch a /opt/mcp/server", "allow");
    check(
        p,
        "launch a /opt/mcp/sub/server",
        "block server_policy.allowed_commands",
    );
    check(
        p,
        "launch a /tmp/evil/npx",
        "block server_policy.allowed_commands",
    );
    check(p, "launch a node", "block server_policy.allowed_commands");
    check(p, "launch a mcp-bin /opt/mcp/mcp-bin", "allow");
}

#[test]
fn tool_denylist_and_blocked_tools() {
    let p = r#"
[tool_policy]
mode = "denylist"
blocked_tools = ["execute_command", "run_*"]
deny = [{ server = "web*", tool = "fetch_url" }, { tool = "exec_*" }]
"#;
    check(
        p,
        "call any execute_command {}",
        "block tool_policy.blocked_tools",
    );
    check(
        p,
        "call any run_shell {}",
        "block tool_policy.blocked_tools",
    );
    check(p, "call web-search fetch_url {}", "block tool_policy.deny");
    check(p, "call notes fetch_url {}", "allow");
    check(p, "call notes exec_js {}", "block tool_policy.deny");
    check(p, "list any run_x", "hidden");
    check(p, "list web fetch_url", "hidden");
    check(p, "list notes fetch_url", "shown");
}

#[test]
fn tool_allowlist_with_content_hash() {
    let p = format!(
        r#"
[tool_policy]
mode = "allowlist"
allow = [{{ server = "db", tool = "query_*" }}, {{ server = "notes", tool = "read_note", content_hash = "{H1}" }}]
"#
    );
    check(&p, "call db query_users {}", "allow");
    check(&p, "call db drop_table {}", "block tool_policy.allow");
    check(&p, &format!("call notes read_note {H1} {{}}"), "allow");
    check(
        &p,
        &format!("call notes read_note {H2} {{}}"),
        "block tool_policy.content_hash",
    );
    check(
        &p,
        "call notes read_note {}",
        "block tool_policy.content_hash",
    );
    check(&p, "list notes read_note", "shown");
    check(&p, "list notes write_note", "hidden");
}

#[test]
fn hash_specific_deny_only_blocks_that_version() {
    let p = format!("[tool_policy]\nmode = \"denylist\"\ndeny = [{{ tool = \"t\", content_hash = \"{H1}\" }}]\n");
    check(&p, &format!("call s t {H1} {{}}"), "block tool_policy.deny");
    check(&p, &format!("call s t {H2} {{}}"), "allow");
    check(&p, "list s t", "shown");
}

const SSH_RULES: &str = r#"
[[rules]]
id = "no-ssh"
tool_name_any = ["read_file", "read_text_file", "write_file"]
argument_patterns = ["**/.ssh/**"]
decision = "block"
reason = "SSH keys are off limits"

[[rules]]
id = "audit-etc"
tool_name = "read_*"
argument_patterns = { path = "/etc/**" }
decision = "audit"

[[rules]]
id = "allow-tmp"
tool_name_regex = "read_(file|text_file)"
argument_patterns = { path = ["/tmp/**", "/var/tmp/**"] }
decision = "allow"
"#;

#[test]
fn argument_rules_most_restrictive_wins() {
    check(
        SSH_RULES,
        r#"call fs read_file {"path":"/home/u/.ssh/id_rsa"}"#,
        "block rules.no-ssh",
    );
    check(
        SSH_RULES,
        r#"call fs read_file {"path":"~/.ssh/config"}"#,
        "block rules.no-ssh",
    );
    check(
        SSH_RULES,
        r#"call fs write_file {"path":"notes.txt","content":"x","extra":{"p":["/root/.ssh/authorized_keys"]}}"#,
        "block rules.no-ssh",
    );
    check(
        SSH_RULES,
        r#"call fs read_file {"path":"/etc/hosts"}"#,
        "audit rules.audit-etc",
    );
    check(SSH_RULES, r#"call fs read_file {"path":"/tmp/x"}"#, "allow");
    // Allow never overrides: /tmp path under .ssh is still blocked.
    check(
        SSH_RULES,
        r#"call fs read_file {"path":"/tmp/.ssh/x"}"#,
        "block rules.no-ssh",
    );
    // `path` is named, so /etc in another argument does not trigger audit-etc.
    check(
        SSH_RULES,
        r#"call fs read_file {"other":"/etc/hosts"}"#,
        "allow",
    );
    check(
        SSH_RULES,
        r#"call fs list_directory {"path":"/home/u/.ssh"}"#,
        "allow",
    );
    // Regex is anchored: `xread_file` is not `read_file`.
    check(
        SSH_RULES,
        r#"call fs xread_file {"path":"/home/u/.ssh/id"}"#,
        "allow",
    );
}

#[test]
fn rule_server_glob_limits_rule() {
    let p = r#"
[[rules]]
id = "fs-only"
server = "filesystem*"
tool_name = "*"
argument_patterns = ["**/.aws/**"]
decision = "block"
"#;
    check(
        p,
        r#"call filesystem read {"p":"/home/u/.aws/credentials"}"#,
        "block rules.fs-only",
    );
    check(
        p,
        r#"call notes read {"p":"/home/u/.aws/credentials"}"#,
        "allow",
    );
}

#[test]
fn restricted_server_exposes_only_allowlist() {
    let p = r#"
[servers."third-party"]
trust = "restricted"
tool_allowlist = ["search", "fetch_*"]

[servers."empty"]
trust = "restricted"
"#;
    check(p, "list third-party search", "shown");
    check(p, "list third-party fetch_doc", "shown");
    check(p, "list third-party delete_all", "hidden");
    check(
        p,
        "call third-party delete_all {}",
        "block trust.restricted",
    );
    check(p, "call third-party search {}", "allow");
    check(p, "list empty anything", "hidden");
    check(p, "call other delete_all {}", "allow");
    // An entry keyed by the opaque id applies too.
    check(p, "list renamed#third-party delete_all", "hidden");
}

#[test]
fn blocked_tools_beat_everything_in_order() {
    let p = r#"
[tool_policy]
mode = "allowlist"
blocked_tools = ["danger"]
allow = [{ tool = "*" }]

[[rules]]
id = "a"
tool_name = "danger"
decision = "audit"
"#;
    check(p, "call s danger {}", "block tool_policy.blocked_tools");
    check(p, "call s other {}", "allow");
}

#[test]
fn server_settings_trust_switches() {
    let p = policy(
        r#"
[requests]
sampling = "decline"

[servers."mine"]
trust = "trusted"
env = { LOG_LEVEL = "debug", GITHUB_TOKEN = "vault:GITHUB_TOKEN" }
pass_env = ["HTTPS_PROXY"]

[servers."jail"]
trust = "restricted"
tool_allowlist = ["x"]

[cross_server.rate_limit]
calls_per_minute = 60
per_server = { "mine" = { burst = 5 } }
"#,
    );
    let mine = p.server_settings("mine");
    assert!(
        !mine.rate_limited && !mine.burst_checked && !mine.flow_checked,
        "trusted skips rate, burst, flow"
    );
    assert!(mine.pin_at_first_sight);
    assert!(
        mine.may_elicit && !mine.may_sample,
        "sampling declined by [requests] for everyone"
    );
    assert_eq!(mine.rate_limit.calls_per_minute, 60);
    assert_eq!(mine.rate_limit.burst, 5, "override applies");
    assert_eq!(
        mine.env.get("GITHUB_TOKEN"),
        Some(&gatehouse_config::EnvValue::Vault("GITHUB_TOKEN".into()))
    );
    assert!(mine.pass_env.contains("HTTPS_PROXY"));

    let jail = p.server_settings("jail");
    assert!(
        !jail.may_elicit && !jail.may_sample && !jail.may_list_roots,
        "restricted never elicits, samples, lists roots"
    );
    assert!(jail.rate_limited && jail.burst_checked && jail.flow_checked);

    let other = p.server_settings("other");
    assert_eq!(
        other.trust,
        gatehouse_config::Trust::Untrusted,
        "default trust is untrusted"
    );
    assert_eq!(other.rate_limit.burst, 20);
}

#[test]
fn classification_overrides_collect_every_class() {
    let p =
        policy("[cross_server.classification]\n\"mail_*\" = \"send\"\n\"mail_read*\" = \"read\"\n");
    use gatehouse_config::ToolClass::*;
    assert_eq!(
        p.cross_server.classification_override("mail_out"),
        vec![Send]
    );
    assert_eq!(
        p.cross_server.classification_override("mail_read_inbox"),
        vec![Read, Send]
    );
    assert!(p.cross_server.classification_override("other").is_empty());
}

#[test]
fn result_action_only_for_high_and_critical() {
    use gatehouse_config::{ResultAction, Severity};
    let p = policy("");
    assert_eq!(
        p.scanner.result_action_for(Severity::Critical),
        ResultAction::Block
    );
    assert_eq!(
        p.scanner.result_action_for(Severity::High),
        ResultAction::Block
    );
    assert_eq!(
        p.scanner.result_action_for(Severity::Medium),
        ResultAction::Alert
    );
    let p = policy("[scanner]\nresult_action = \"alert\"\n");
    assert_eq!(
        p.scanner.result_action_for(Severity::Critical),
        ResultAction::Alert
    );
}

#[test]
fn audit_mode_is_reported_and_decisions_unchanged() {
    let p = policy("mode = \"audit\"\n[tool_policy]\nblocked_tools = [\"x\"]\n");
    assert!(p.is_audit_only());
    assert!(
        p.tool_decision("s", "x", None, &serde_json::json!({}))
            .is_block(),
        "audit mode still reports Block; the engine records it as would-block"
    );
}

#[test]
fn elicitation_can_be_routed_to_the_inbox_and_a_base_route_is_kept() {
    use gatehouse_config::{compile, PolicySource, SourceRole};
    let p = policy("[requests]\nelicitation = \"route\"\n");
    let s = p.server_settings("any");
    assert!(
        s.may_elicit && s.elicit_via_inbox,
        "route: shown, in the inbox"
    );
    let p = policy("[requests]\nelicitation = \"decline\"\n");
    assert!(!p.server_settings("any").may_elicit && !p.server_settings("any").elicit_via_inbox);
    assert!(
        !policy("").server_settings("any").elicit_via_inbox,
        "default: to the client"
    );
    let layered = compile(vec![
        PolicySource {
            role: SourceRole::Base,
            name: "team.toml".into(),
            text: "[requests]\nelicitation = \"route\"\n".into(),
        },
        PolicySource {
            role: SourceRole::Local,
            name: "policy.toml".into(),
            text: "[requests]\nelicitation = \"allow\"\n".into(),
        },
    ])
    .expect("valid layers");
    assert!(
        layered.policy.server_settings("any").elicit_via_inbox,
        "a local file cannot loosen the team's route to allow"
    );
}

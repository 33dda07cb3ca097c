//! Layering: a local file may tighten a team base, never loosen it.
//! Unit cases for each kind of key, then property tests for the algebra.

use gatehouse_config::{compile, Policy, PolicySource, ServerRef, SourceRole};
use proptest::prelude::*;
use serde_json::json;

fn layered(base: &str, local: &str) -> gatehouse_config::LoadedPolicy {
    compile(vec![
        PolicySource {
            role: SourceRole::Base,
            name: "base.toml".into(),
            text: base.into(),
        },
        PolicySource {
            role: SourceRole::Local,
            name: "local.toml".into(),
            text: local.into(),
        },
    ])
    .unwrap_or_else(|e| panic!("valid layers expected: {e}\nbase:\n{base}\nlocal:\n{local}"))
}

fn single(text: &str) -> Policy {
    gatehouse_config::check_text("p.toml", text)
        .unwrap_or_else(|e| panic!("valid policy expected: {e}\n{text}"))
        .policy
}

#[test]
fn enforce_cannot_become_audit_and_is_reported() {
    let l = layered("mode = \"enforce\"\n", "\nmode = \"audit\"\n");
    assert!(
        !l.policy.is_audit_only(),
        "local audit must not loosen base enforce"
    );
    let w = &l.warnings[0];
    assert_eq!(
        (w.file.as_str(), w.line, w.column),
        ("local.toml", 2, 8),
        "warning points at the local value: {w}"
    );
    assert!(w.message.contains("looser"), "{w}");
    let l = layered("mode = \"audit\"\n", "mode = \"enforce\"\n");
    assert!(
        !l.policy.is_audit_only(),
        "local may tighten audit to enforce"
    );
    assert!(l.warnings.is_empty(), "tightening is not a warning");
    let l = layered("mode = \"audit\"\n", "");
    assert!(
        l.policy.is_audit_only(),
        "unset local keys inherit the base"
    );
}

#[test]
fn scalar_keys_take_the_stricter_value() {
    let base = r#"
fail_closed = true
[tool_lists]
max_tools_per_server = 100
refresh_coalesce_secs = 10
[pinning]
on_change = "block"
auto_trust_first = false
[limits]
max_frame_bytes = 1048576
event_retention_days = 90
[cross_server.burst]
max_calls = 10
[cross_server.typosquat]
server_threshold = 0.8
"#;
    let local = r#"
fail_closed = false
[tool_lists]
max_tools_per_server = 500
refresh_coalesce_secs = 1
[pinning]
on_change = "allow"
auto_trust_first = true
[limits]
max_frame_bytes = 2048
event_retention_days = 7
[cross_server.burst]
max_calls = 50
[cross_server.typosquat]
server_threshold = 0.95
"#;
    let l = layered(base, local);
    let p = &l.policy;
    assert!(p.fail_closed());
    assert_eq!(p.tool_lists.max_tools_per_server, 100);
    assert_eq!(p.tool_lists.refresh_coalesce.as_secs(), 10);
    assert_eq!(p.pinning.on_change, gatehouse_config::OnChange::Block);
    assert!(!p.pinning.auto_trust_first);
    assert_eq!(
        p.limits.max_frame_bytes, 2048,
        "a smaller frame ceiling is stricter: local wins"
    );
    assert_eq!(p.limits.event_retention_days, 90);
    assert_eq!(p.cross_server.burst.max_calls, 10);
    assert!((p.cross_server.typosquat.server_threshold - 0.8).abs() < f64::EPSILON);
    assert_eq!(
        l.warnings.len(),
        8,
        "every looser local key is reported (a smaller frame is stricter): {:#?}",
        l.warnings
    );
}

#[test]
fn denylists_union_allowlists_intersect() {
    let base = "[server_policy]\nmode = \"allowlist\"\nallow = [\"a*\"]\ndeny = [\"a-old\"]\n[tool_policy]\nblocked_tools = [\"exec\"]\n";
    let local = "[server_policy]\nmode = \"allowlist\"\nallow = [\"ab\", \"c\"]\ndeny = [\"ab-x\"]\n[tool_policy]\nblocked_tools = [\"rm\"]\n";
    let p = layered(base, local).policy;
    let launch = |s: &str| p.server_decision(s, "npx", None).rule().map(str::to_owned);
    assert_eq!(launch("ab"), None, "in both allowlists");
    assert_eq!(
        launch("a1").as_deref(),
        Some("server_policy.allow"),
        "only in base allowlist"
    );
    assert_eq!(
        launch("c").as_deref(),
        Some("server_policy.allow"),
        "only in local allowlist"
    );
    assert_eq!(launch("a-old").as_deref(), Some("server_policy.deny"));
    let args = json!({});
    assert!(p.tool_decision("ab", "exec", None, &args).is_block());
    assert!(p.tool_decision("ab", "rm", None, &args).is_block());
}

#[test]
fn local_mode_none_does_not_lift_base_allowlist() {
    let l = layered(
        "[tool_policy]\nmode = \"allowlist\"\nallow = [{ tool = \"read_*\" }]\n",
        "[tool_policy]\nmode = \"none\"\n",
    );
    assert!(l
        .policy
        .tool_decision("s", "write", None, &json!({}))
        .is_block());
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
}

#[test]
fn trust_and_per_server_settings() {
    let base = r#"
[servers."x"]
trust = "restricted"
tool_allowlist = ["a", "b"]
env = { MODE = "team" }
pass_env = ["A", "B"]
"#;
    let local = r#"
[servers."x"]
trust = "trusted"
tool_allowlist = ["b", "c"]
env = { MODE = "mine", EXTRA = "1" }
pass_env = ["B", "C"]
"#;
    let l = layered(base, local);
    let p = &l.policy;
    assert_eq!(p.trust("x"), gatehouse_config::Trust::Restricted);
    assert!(
        l.warnings.iter().any(|w| w.message.contains("trusted")),
        "{:?}",
        l.warnings
    );
    assert!(p.tool_exposed("x", "b"), "in both allowlists");
    assert!(
        !p.tool_exposed("x", "a") && !p.tool_exposed("x", "c"),
        "allowlists intersect"
    );
    let s = p.server_settings("x");
    assert_eq!(
        s.env.get("MODE"),
        Some(&gatehouse_config::EnvValue::Literal("team".into())),
        "base wins env conflicts"
    );
    assert!(s.env.contains_key("EXTRA"), "env keys union");
    assert_eq!(
        s.pass_env.iter().cloned().collect::<Vec<_>>(),
        vec!["B".to_owned()],
        "pass_env intersects"
    );
}

#[test]
fn name_and_id_entries_both_apply() {
    let p = single("[servers.\"github\"]\ntrust = \"trusted\"\n[servers.\"srv_1\"]\ntrust = \"restricted\"\ntool_allowlist = [\"get\"]\n");
    assert_eq!(
        p.trust(ServerRef::new("github", "srv_1")),
        gatehouse_config::Trust::Restricted
    );
    assert_eq!(p.trust("github"), gatehouse_config::Trust::Trusted);
}

#[test]
fn rate_limits_never_loosen_per_server() {
    let p = layered("[cross_server.rate_limit]\ncalls_per_minute = 50\n", "[cross_server.rate_limit]\nper_server = { \"x\" = { calls_per_minute = 500 }, \"y\" = { calls_per_minute = 10 } }\n").policy;
    assert_eq!(
        p.server_settings("x").rate_limit.calls_per_minute,
        50,
        "a local override cannot exceed the base default"
    );
    assert_eq!(p.server_settings("y").rate_limit.calls_per_minute, 10);
    assert_eq!(p.server_settings("z").rate_limit.calls_per_minute, 50);
}

#[test]
fn rules_and_patterns_union() {
    let base = "[[rules]]\nid = \"r\"\ntool_name = \"t\"\ndecision = \"block\"\n[[scanner.custom_patterns]]\nid = \"p\"\nregex = \"a\"\nfamily = \"x\"\nseverity = \"high\"\n";
    let local = "[[rules]]\nid = \"r\"\ntool_name = \"t\"\ndecision = \"allow\"\n[[scanner.custom_patterns]]\nid = \"p\"\nregex = \"b\"\nfamily = \"x\"\nseverity = \"low\"\n";
    let l = layered(base, local);
    assert!(
        l.policy
            .tool_decision("s", "t", None, &json!({}))
            .is_block(),
        "a local rule with the same id cannot replace the base's"
    );
    assert_eq!(l.policy.scanner.custom_patterns.len(), 1);
    assert_eq!(
        l.policy.scanner.custom_patterns[0].regex.as_str(),
        "a",
        "base pattern kept"
    );
}

#[test]
fn base_cannot_chain() {
    let err = compile(vec![PolicySource {
        role: SourceRole::Base,
        name: "b.toml".into(),
        text: "base = \"other.toml\"\n".into(),
    }])
    .expect_err("a base naming a base is invalid");
    let d = &err.diagnostics()[0];
    assert_eq!((d.line, d.column), (1, 1), "{d}");
}

#[test]
fn load_reads_local_and_bases() {
    let home = tempfile::tempdir().expect("tempdir");
    let team = tempfile::tempdir().expect("tempdir");
    // Missing local file: built-in defaults.
    let l = gatehouse_config::load_with(home.path(), None).expect("defaults load");
    assert_eq!(l.sources.len(), 1);
    assert_eq!(l.policy.to_toml(), Policy::default().to_toml());

    assert!(gatehouse_config::write_default_if_missing(home.path()).expect("write"));
    assert!(
        !gatehouse_config::write_default_if_missing(home.path()).expect("second write"),
        "never overwrites"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.path().join("policy.toml"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "policy file is private");
    }

    std::fs::write(team.path().join("team.toml"), "fail_closed = true\n").expect("write team");
    std::fs::write(
        team.path().join("env.toml"),
        "mode = \"enforce\"\n[tool_policy]\nblocked_tools = [\"x\"]\n",
    )
    .expect("write env base");
    let base_path = team.path().join("team.toml");
    std::fs::write(
        home.path().join("policy.toml"),
        format!(
            "base = {:?}\nmode = \"audit\"\n",
            base_path.display().to_string()
        ),
    )
    .expect("write local");
    let l = gatehouse_config::load_with(home.path(), Some(&team.path().join("env.toml")))
        .expect("layers load");
    assert_eq!(l.sources.len(), 3, "env base, file base, local");
    assert!(l.policy.fail_closed(), "file base applies");
    assert!(!l.policy.is_audit_only(), "env base's enforce holds");
    assert!(
        l.policy
            .tool_decision("s", "x", None, &json!({}))
            .is_block(),
        "env base applies"
    );

    std::fs::write(home.path().join("policy.toml"), "base = \"missing.toml\"\n")
        .expect("write local");
    match gatehouse_config::load_with(home.path(), None) {
        Err(gatehouse_config::PolicyError::Io { path, .. }) => {
            assert!(path.ends_with("missing.toml"))
        }
        other => panic!("a missing base must be an error, got {other:?}"),
    }
}

/// `check_as` judges an edit exactly as `load` would judge the saved file:
/// same bases (the file's, relative to its directory, and the environment's),
/// same verdict; an unreadable base is a diagnostic naming the file.
#[test]
fn check_as_judges_a_text_as_load_judges_the_file() {
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join("team.toml"), "fail_closed = true\n").expect("base");
    std::fs::write(home.path().join("broken.toml"), "mode = [\n").expect("broken");
    let at = home.path().join(gatehouse_config::POLICY_FILE);
    for (text, valid) in [
        ("mode = \"audit\"\n", true),
        ("base = \"team.toml\"\n", true),
        ("base = \"missing.toml\"\n", false),
        ("base = \"broken.toml\"\n", false),
        ("base = \"/nonexistent/team.toml\"\n", false),
    ] {
        let checked = gatehouse_config::check_as_with(&at, text.as_bytes(), None);
        std::fs::write(&at, text).expect("local");
        let loaded = gatehouse_config::load_with(home.path(), None);
        assert_eq!(checked.is_ok(), valid, "{text:?}: {checked:?}");
        assert_eq!(loaded.is_ok(), valid, "{text:?}: the loader agrees");
        if let Err(e) = checked {
            let d = e.to_diagnostics();
            assert!(!d.is_empty(), "{text:?}: says why");
        }
    }
    let with_env = gatehouse_config::check_as_with(
        &at,
        b"mode = \"audit\"\n",
        Some(&home.path().join("missing-env.toml")),
    );
    let d = with_env
        .expect_err("an unreadable environment base")
        .to_diagnostics();
    assert!(
        d[0].file.ends_with("missing-env.toml") && d[0].line == 0,
        "{d:?}"
    );
}

// ---------- property tests ----------

const SERVERS: &[&str] = &["a", "ab", "b"];
const TOOLS: &[&str] = &["read_file", "send_email", "exec_x", "t"];
const GLOBS: &[&str] = &["*", "a*", "read_*", "t", "exec_*", "b"];
const PATHS: &[&str] = &["/home/u/.ssh/id", "/etc/hosts", "/tmp/x"];
const PATH_GLOBS: &[&str] = &["**/.ssh/**", "/etc/**", "/tmp/*"];

fn pick(v: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(v)
}

fn q(s: &str) -> String {
    format!("{s:?}")
}

prop_compose! {
    fn rule_text()(id in 0..1000u32, name in pick(GLOBS), arg in prop::option::of(pick(PATH_GLOBS)),
                   decision in pick(&["allow", "audit", "block"])) -> String {
        let args = arg.map(|a| format!("argument_patterns = [{}]\n", q(a))).unwrap_or_default();
        format!("[[rules]]\nid = \"r{id}\"\ntool_name = {}\n{args}decision = \"{decision}\"\n", q(name))
    }
}

prop_compose! {
    fn policy_text()(
        mode in prop::option::of(pick(&["enforce", "audit"])),
        fail_closed in prop::option::of(any::<bool>()),
        server_allow in prop::option::of(prop::collection::vec(pick(GLOBS), 0..3)),
        server_deny in prop::collection::vec(pick(GLOBS), 0..2),
        blocked in prop::option::of(prop::collection::vec(pick(GLOBS), 0..2)),
        tool_allow in prop::option::of(prop::collection::vec((pick(GLOBS), pick(GLOBS)), 0..3)),
        tool_deny in prop::collection::vec((pick(GLOBS), pick(GLOBS)), 0..2),
        rules in prop::collection::vec(rule_text(), 0..3),
        trust in prop::option::of((pick(SERVERS), pick(&["trusted", "untrusted", "restricted"]), prop::option::of(prop::collection::vec(pick(GLOBS), 0..3)))),
        frame in prop::option::of(1024u64..1_000_000),
        max_tools in prop::option::of(1u64..500),
        on_change in prop::option::of(pick(&["allow", "alert", "block"])),
        rts in prop::option::of(pick(&["off", "linked", "strict"])),
        cpm in prop::option::of(1u64..200),
    ) -> String {
        let mut t = String::new();
        if let Some(m) = mode { t += &format!("mode = {}\n", q(m)); }
        if let Some(f) = fail_closed { t += &format!("fail_closed = {f}\n"); }
        let list = |v: &[&str]| v.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ");
        t += "[server_policy]\n";
        match &server_allow {
            Some(a) => t += &format!("mode = \"allowlist\"\nallow = [{}]\n", list(a)),
            None if !server_deny.is_empty() => t += "mode = \"denylist\"\n",
            None => {}
        }
        if !server_deny.is_empty() { t += &format!("deny = [{}]\n", list(&server_deny)); }
        t += "[tool_policy]\n";
        if let Some(b) = &blocked { t += &format!("blocked_tools = [{}]\n", list(b)); }
        let rules_list = |v: &[(&str, &str)]| v.iter().map(|(s, tl)| format!("{{ server = {}, tool = {} }}", q(s), q(tl))).collect::<Vec<_>>().join(", ");
        match &tool_allow {
            Some(a) => t += &format!("mode = \"allowlist\"\nallow = [{}]\n", rules_list(a)),
            None if !tool_deny.is_empty() => t += "mode = \"denylist\"\n",
            None => {}
        }
        if !tool_deny.is_empty() { t += &format!("deny = [{}]\n", rules_list(&tool_deny)); }
        if let Some((s, level, allow)) = &trust {
            t += &format!("[servers.{}]\ntrust = {}\n", q(s), q(level));
            if let Some(a) = allow { t += &format!("tool_allowlist = [{}]\n", list(a)); }
        }
        if let Some(f) = frame { t += &format!("[limits]\nmax_frame_bytes = {f}\n"); }
        if let Some(m) = max_tools { t += &format!("[tool_lists]\nmax_tools_per_server = {m}\n"); }
        if let Some(o) = on_change { t += &format!("[pinning]\non_change = {}\n", q(o)); }
        if let Some(r) = rts { t += &format!("[cross_server.read_then_send]\nmode = {}\n", q(r)); }
        if let Some(c) = cpm { t += &format!("[cross_server.rate_limit]\ncalls_per_minute = {c}\n"); }
        for r in &rules { t += r; }
        t
    }
}

/// Every (server, tool, arguments) combination of the vocabulary.
fn inputs() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    let mut v = Vec::new();
    for s in SERVERS {
        for t in TOOLS {
            for p in PATHS {
                v.push((*s, *t, json!({ "path": p })));
            }
        }
    }
    v
}

fn valid(text: &str) -> Option<Policy> {
    gatehouse_config::check_text("p.toml", text)
        .ok()
        .map(|l| l.policy)
}

/// `merged` is at least as strict as `p` on every input and every compared setting.
fn at_least_as_strict(merged: &Policy, p: &Policy) -> Result<(), TestCaseError> {
    for (s, t, args) in inputs() {
        let (m, b) = (
            merged.tool_decision(s, t, None, &args),
            p.tool_decision(s, t, None, &args),
        );
        prop_assert!(
            m.rank() >= b.rank(),
            "tool {s}/{t} {args}: merged {m:?} looser than layer {b:?}"
        );
        prop_assert!(
            !merged.tool_exposed(s, t) || p.tool_exposed(s, t),
            "{s}/{t} exposed by merged but not by layer"
        );
    }
    for s in SERVERS {
        prop_assert!(
            merged.server_decision(*s, "npx", None).rank()
                >= p.server_decision(*s, "npx", None).rank()
        );
    }
    Ok(())
}

/// Scalar settings: unset local keys inherit the base, so these compare with the base only.
fn scalars_at_least_as_strict(merged: &Policy, p: &Policy) -> Result<(), TestCaseError> {
    for s in SERVERS {
        prop_assert!(merged.trust(*s) >= p.trust(*s));
        prop_assert!(
            merged.server_settings(*s).rate_limit.calls_per_minute
                <= p.server_settings(*s).rate_limit.calls_per_minute
        );
    }
    prop_assert!(!merged.is_audit_only() || p.is_audit_only());
    prop_assert!(merged.fail_closed() || !p.fail_closed());
    prop_assert!(merged.limits.max_frame_bytes <= p.limits.max_frame_bytes);
    prop_assert!(merged.tool_lists.max_tools_per_server <= p.tool_lists.max_tools_per_server);
    prop_assert!(merged.pinning.on_change >= p.pinning.on_change);
    prop_assert!(merged.cross_server.read_then_send.mode >= p.cross_server.read_then_send.mode);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn layering_never_loosens(base in policy_text(), local in policy_text()) {
        let (Some(b), Some(l)) = (valid(&base), valid(&local)) else { return Ok(()) };
        let merged = layered(&base, &local).policy;
        at_least_as_strict(&merged, &b)?;
        scalars_at_least_as_strict(&merged, &b)?;
        at_least_as_strict(&merged, &l)?;
    }

    #[test]
    fn deny_beats_allow(text in policy_text(), s in pick(SERVERS), t in pick(TOOLS), p in pick(PATHS)) {
        let Some(_) = valid(&text) else { return Ok(()) };
        let args = json!({ "path": p });
        let denied = format!("{text}\n[[rules]]\nid = \"deny-it\"\ntool_name = {}\ndecision = \"block\"\n", q(t));
        let policy = valid(&denied).expect("adding a rule keeps the policy valid");
        prop_assert!(policy.tool_decision(s, t, None, &args).is_block(), "a matching block rule always blocks");
        let blocked = layered(&text, &format!("[tool_policy]\nblocked_tools = [{}]\n", q(t))).policy;
        prop_assert!(blocked.tool_decision(s, t, None, &args).is_block());
        prop_assert!(!blocked.tool_exposed(s, t));
    }

    #[test]
    fn adding_rules_never_lowers_a_decision(text in policy_text(), extra in rule_text()) {
        let Some(p) = valid(&text) else { return Ok(()) };
        let Some(q2) = valid(&format!("{text}\n{}", extra.replace("id = \"r", "id = \"x"))) else { return Ok(()) };
        for (s, t, args) in inputs() {
            prop_assert!(q2.tool_decision(s, t, None, &args).rank() >= p.tool_decision(s, t, None, &args).rank());
        }
    }

    #[test]
    fn deterministic(text in policy_text()) {
        let (Some(p1), Some(p2)) = (valid(&text), valid(&text)) else { return Ok(()) };
        for (s, t, args) in inputs() {
            let d = p1.tool_decision(s, t, None, &args);
            prop_assert_eq!(&d, &p1.tool_decision(s, t, None, &args));
            prop_assert_eq!(&d, &p2.tool_decision(s, t, None, &args));
        }
        prop_assert_eq!(p1.to_toml(), p2.to_toml());
    }

    #[test]
    fn rendering_round_trips(text in policy_text()) {
        let Some(p) = valid(&text) else { return Ok(()) };
        let rendered = p.to_toml();
        let again = valid(&rendered).unwrap_or_else(|| panic!("rendered policy must parse:\n{rendered}"));
        prop_assert_eq!(&again.to_toml(), &rendered);
        for (s, t, args) in inputs() {
            prop_assert_eq!(again.tool_decision(s, t, None, &args), p.tool_decision(s, t, None, &args));
        }
    }
}

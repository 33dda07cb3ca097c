//! Invalid policies: every error names file, line and column, and never
//! echoes a value that could be a secret.

use gatehouse_config::{check_text, Diagnostic};

fn diagnostics(text: &str) -> Vec<Diagnostic> {
    match check_text("policy.toml", text) {
        Ok(_) => panic!("policy should be rejected:\n{text}"),
        Err(e) => e.diagnostics().to_vec(),
    }
}

/// `expect` is `line:col: substring of the message`.
#[track_caller]
fn check(text: &str, expect: &str) {
    let diags = diagnostics(text);
    let (pos, needle) = expect
        .split_once(": ")
        .expect("expect is `line:col: message`");
    let found = diags
        .iter()
        .any(|d| format!("{}:{}", d.line, d.column) == pos && d.message.contains(needle));
    assert!(
        found,
        "expected `{expect}` among:\n{}",
        diags
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        diags.iter().all(|d| d.file == "policy.toml"),
        "diagnostics name the file"
    );
}

#[test]
fn unknown_keys_point_at_the_key() {
    check(
        "mode = \"enforce\"\nfail_closd = true\n",
        "2:1: unknown field `fail_closd`",
    );
    check(
        "[pinning]\non_change = \"block\"\n  auto_trust = true\n",
        "3:3: unknown field `auto_trust`",
    );
    check(
        "[[rules]]\nid = \"a\"\ntool_name = \"x\"\ndecision = \"block\"\nargs = []\n",
        "5:1: unknown field `args`",
    );
    check(
        "[servers.github]\ntrust = \"trusted\"\nenv_allow = []\n",
        "3:1: unknown field `env_allow`",
    );
    check(
        "[tool_policy]\nallow = [{ tool = \"x\", hash = \"y\" }]\nmode = \"allowlist\"\n",
        "2:24: unknown field `hash`",
    );
}

#[test]
fn bad_enum_values() {
    check(
        "mode = \"enforcing\"\n",
        "1:8: unknown value, expected `audit` or `enforce`",
    );
    check(
        "\n[servers.x]\ntrust = \"sandboxed\"\n",
        "3:9: unknown value",
    );
}

#[test]
fn syntax_errors_have_positions() {
    check("mode = \n", "1:8: ");
    check("[pinning\n", "1:9: ");
}

#[test]
fn validation_errors_point_at_the_value() {
    check(
        "[tool_policy]\nblocked_tools = [\"ok\", \"a[\"]\n",
        "2:24: invalid glob",
    );
    check(
        "[[rules]]\nid = \"r\"\ntool_name_regex = \"(unclosed\"\ndecision = \"block\"\n",
        "3:19: invalid regex",
    );
    check(
        "[[scanner.custom_patterns]]\nid = \"p\"\nregex = \"a{99999999}\"\nfamily = \"x\"\nseverity = \"high\"\n",
        "3:9: ",
    );
    check("[limits]\nmax_frame_bytes = 10\n", "2:19: out of range");
    check("[limits]\ndb_busy_ms = 500\n", "2:14: out of range");
    check(
        "[cross_server.typosquat]\nserver_threshold = 1.0\n",
        "2:20: below 1.0",
    );
    check(
        "[tool_policy]\nmode = \"allowlist\"\nallow = [{ tool = \"x\", content_hash = \"md5:abc\" }]\n",
        "3:39: sha256",
    );
}

#[test]
fn rule_shape_errors() {
    check(
        "[[rules]]\nid = \"r\"\ndecision = \"block\"\n",
        "1:1: needs one of",
    );
    check(
        "[[rules]]\nid = \"r\"\ntool_name = \"a\"\ntool_name_any = [\"b\"]\ndecision = \"block\"\n",
        "1:1: set only one",
    );
    check(
        "[[rules]]\nid = \"r\"\ntool_name = \"a\"\n",
        "1:1: missing `decision`",
    );
    check(
        "[[rules]]\nid = \"r\"\ntool_name = \"a\"\ndecision = \"block\"\n[[rules]]\nid = \"r\"\ntool_name = \"b\"\ndecision = \"audit\"\n",
        "6:6: duplicate rule id",
    );
}

#[test]
fn list_mode_mismatches_are_errors() {
    check("[server_policy]\ndeny = [\"x\"]\n", "2:1: has no effect");
    check(
        "[server_policy]\nmode = \"denylist\"\nallow = [\"x\"]\n",
        "3:1: has no effect",
    );
    check(
        "[tool_policy]\nmode = \"allowlist\"\n",
        "2:1: needs an `allow` list",
    );
    check(
        "[server_policy]\nallowed_commands = []\n",
        "2:20: refuses every server",
    );
}

#[test]
fn shadowing_cannot_be_disabled() {
    check(
        "[cross_server.shadowing]\nenabled = false\n",
        "1:15: always on",
    );
    check(
        "[cross_server]\nshadow_tool = { enabled = false }\n",
        "2:1: always on",
    );
}

#[test]
fn same_turn_only_belongs_to_flow() {
    check(
        "[cross_server.read_then_send]\nsame_turn_only = true\n",
        "2:1: only applies to `cross_server.flow`",
    );
}

#[test]
fn secrets_never_come_back_in_errors() {
    let canary = "ghp_CANARYcanary0123456789abcdefABCDEF";
    for text in [
        format!("[servers.gh]\nenv = {{ GITHUB_TOKEN = \"{canary}\" }}\n"),
        format!("[servers.gh]\nenv = {{ SOME_VAR = \"{canary}\" }}\n"),
        format!("[servers.gh]\nenv = \"{canary}\"\n"),
        format!("[servers.gh]\npass_env = \"{canary}\"\n"),
        format!("mode = \"{canary}\"\n"),
        format!("fail_closed = \"{canary}\"\n"),
    ] {
        let diags = diagnostics(&text);
        for d in &diags {
            assert!(
                !d.to_string().contains("CANARY"),
                "secret leaked into `{d}`"
            );
        }
        let err = check_text("p.toml", &text).expect_err("invalid");
        assert!(
            !format!("{err} {err:?}").contains("CANARY"),
            "secret leaked into the error's Display/Debug"
        );
    }
    check(
        &format!("[servers.gh]\nenv = {{ GITHUB_TOKEN = \"{canary}\" }}\n"),
        "2:24: looks like a secret",
    );
}

/// What `gatehouse protect` would move to the keyring is refused in a
/// policy's `env` too (the policy's text is kept in the database as the last
/// good one): a password in a URL, secret-shaped values under any name.
#[test]
fn env_secrets_protect_would_move_are_refused() {
    for (name, value) in [
        ("DATABASE_URL", "postgres://app:Canary-pw-77@db/app"),
        ("PGPASSWORD", "Canary-pw-77"),
        ("UPSTREAM", "https://app:Canary-pw-77@api.example/v1"),
        ("STRIPE", "sk_live_CanaryCanary0123456789abcdef"),
        (
            "SESSION",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
        ),
    ] {
        check(
            &format!("[servers.db]\nenv = {{ {name} = \"{value}\" }}\n"),
            &format!("2:{}: looks like a secret", name.len() + 12),
        );
    }
    for (name, value) in [
        ("LOG_LEVEL", "debug"),
        ("API_BASE", "https://api.example/v1"),
    ] {
        let text = format!("[servers.db]\nenv = {{ {name} = \"{value}\" }}\n");
        assert!(check_text("p.toml", &text).is_ok(), "{text}");
    }
}

#[test]
fn several_errors_are_all_reported_in_order() {
    let diags = diagnostics("[limits]\nmax_frame_bytes = 1\nscan_budget_ms = 0\n");
    let positions: Vec<usize> = diags.iter().map(|d| d.line).collect();
    assert_eq!(positions, vec![2, 3], "both range errors, sorted by line");
}

#[test]
fn display_is_file_line_col() {
    let d = &diagnostics("bogus = 1\n")[0];
    assert!(d.to_string().starts_with("policy.toml:1:1: "), "got `{d}`");
}

#[test]
fn type_errors_never_echo_the_value() {
    // Every kind of literal serde would quote in "invalid type"/"invalid
    // value" messages: none may come back, whatever the key.
    for (value, kind) in [
        ("12345", "integer"),
        ("-98765", "integer"),
        ("3.14159", "floating point"),
        ("true", "boolean"),
        ("\"s3cr3t, expected x\"", "string"),
        ("1979-05-27T07:32:00Z", ""),
        ("[\"s3cr3t\"]", ""),
    ] {
        for text in [
            format!("[servers.\"x\"]\nenv = {{ API_KEY = {value} }}\n"),
            format!("[limits]\nmax_frame_bytes = {value}\n"),
            format!("fail_closed = {value}\n"),
            format!("[servers.x]\ntrust = {value}\n"),
        ] {
            let Err(err) = check_text("policy.toml", &text) else {
                continue;
            };
            let shown = format!("{err} {err:?}");
            for secret in ["12345", "98765", "14159", "true", "s3cr3t", "1979"] {
                assert!(
                    !shown.contains(secret),
                    "`{secret}` leaked from:\n{text}into: {shown}"
                );
            }
            if !kind.is_empty() && shown.contains("invalid type: ") {
                assert!(shown.contains(kind), "the kind stays: {shown}");
            }
        }
    }
    check(
        "[servers.\"x\"]\nenv = { API_KEY = 12345 }\n",
        "2:19: `servers.x.env.API_KEY`: invalid type: integer, expected a string",
    );
}

#[test]
fn type_errors_name_the_key() {
    check(
        "[limits]\n\nmax_frame_bytes = \"big\"\n",
        "3:19: `limits.max_frame_bytes`: invalid type: string, expected u64",
    );
    check("db_busy_ms = 99999999999999999999999\n", "1:14: ");
    check(
        "[limits]\nmax_frame_bytes = -1\n",
        "2:19: `limits.max_frame_bytes`: ",
    );
    check(
        "[servers.x]\ntrust = 5\n",
        "2:9: `servers.x.trust`: invalid type, expected a string",
    );
    check(
        "[[rules]]\nid = \"r\"\ntool_name = 5\ndecision = \"block\"\n",
        "3:13: `rules[0].tool_name`: invalid type: integer",
    );
    check(
        "[tool_policy]\nmode = \"allowlist\"\nallow = [{ tool = 1 }]\n",
        "3:19: `tool_policy.allow[0].tool`: ",
    );
    check(
        "[pinning]\nauto_trust = true\n",
        "2:1: `pinning`: unknown field `auto_trust`",
    );
}

#[test]
fn a_file_that_is_not_utf8_names_line_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, b"mode = \"audit\"\n# caf\xe9\n").unwrap();
    let err = gatehouse_config::load_file(&path, None).expect_err("not UTF-8");
    let d = &err.diagnostics()[0];
    assert_eq!((d.line, d.column), (2, 6), "points at the bad byte: {d}");
    assert!(
        d.message.contains("UTF-8") && d.message.contains("byte offset 20"),
        "{d}"
    );
}

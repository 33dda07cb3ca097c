//! Protect / unprotect against fixture homes (every client, JSONC with
//! comments, TOML, Windows-style paths, a symlinked config).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gatehouse_clients::discover::{all_projects, config_files, ConfigFile};
use gatehouse_clients::entry::parse_wrap;
use gatehouse_clients::protect::{FixedProbe, NoRegistry, Options, ProcessProbe, Protector};
use gatehouse_clients::state::StateDir;
use gatehouse_clients::{detect, ClientError, HomeDirs, Os, CLIENTS};
use gatehouse_vault::{MemoryVault, Vault};

const CANARIES: &[&str] = &[
    "ghp_CANARY0123456789abcdefghijKLMNOP",
    "pg-Canary-Pass-77",
    "sntrys_Canary0123456789ABCdef",
    "github_pat_11CANARYWINDSURF0123456789abcdefghij",
    "xoxb-123456789012-CanarySlackToken",
    "ctx7sk-Canary0123456789ABCdef",
    "BSA-Canary0123456789abcDEF",
    "sk-CanaryProject0123456789abcdef",
];

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let ft = entry.file_type().unwrap();
        if ft.is_symlink() {
            let target = std::fs::read_link(&src).unwrap();
            #[cfg(unix)]
            std::os::unix::fs::symlink(target, &dst).unwrap();
            #[cfg(not(unix))]
            std::fs::copy(src.parent().unwrap().join(target), &dst)
                .map(|_| ())
                .unwrap();
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dirs: HomeDirs,
    vault: MemoryVault,
    probe: FixedProbe,
}

fn dry_run() -> Options {
    Options {
        dry_run: true,
        ..Options::default()
    }
}

impl Fixture {
    fn new(name: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures")
                .join(name),
            &root,
        );
        let dirs = HomeDirs::fixture(&root, Os::Linux);
        Self {
            _tmp: tmp,
            root,
            dirs,
            vault: MemoryVault::new(),
            probe: FixedProbe::default(),
        }
    }

    fn protector(&self) -> Protector<'_> {
        let n = AtomicUsize::new(0);
        Protector {
            gatehouse_home: self.root.join("gh"),
            exe: PathBuf::from("/opt/gatehouse/bin/gatehouse"),
            vault: &self.vault,
            registry: &NoRegistry,
            processes: &self.probe,
            ids: Mutex::new(Box::new(move || {
                format!("srv_test{:04}", n.fetch_add(1, Ordering::SeqCst) + 1)
            })),
            stamp: "20250101T000000".into(),
        }
    }

    /// Cursor's global config file.
    fn cursor(&self) -> ConfigFile {
        self.files()
            .into_iter()
            .find(|f| f.client.key == "cursor")
            .unwrap()
    }

    fn files(&self) -> Vec<ConfigFile> {
        let projects = all_projects(&self.dirs, &[self.root.join("project")]);
        CLIENTS
            .iter()
            .flat_map(|c| config_files(c, &self.dirs, &projects))
            .collect()
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    fn snapshot_text(&self, text: &str) -> String {
        text.replace(&self.root.to_string_lossy().into_owned(), "[ROOT]")
    }

    fn everything_in_gatehouse_home(&self) -> String {
        let mut all = String::new();
        let mut stack = vec![self.root.join("gh")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else {
                    all.push_str(&std::fs::read_to_string(e.path()).unwrap());
                }
            }
        }
        all
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn detect_reports_clients_servers_secrets_and_blockers() {
    let fx = Fixture::new("linux-all");
    let found = detect(&fx.dirs, &[fx.root.join("project")]);
    let keys: Vec<&str> = found.iter().map(|c| c.key).collect();
    assert_eq!(
        keys,
        [
            "cursor",
            "claude-desktop",
            "claude-code",
            "vscode",
            "windsurf",
            "gemini",
            "codex",
            "zed",
            "cline"
        ],
        "every fixture client is found"
    );
    let mut lines = Vec::new();
    for c in &found {
        for f in &c.files {
            for s in &f.servers {
                lines.push(format!(
                    "{} {} {} [{}] secrets={:?} blocker={:?}",
                    c.key,
                    s.name,
                    s.transport,
                    s.scope,
                    s.secrets,
                    s.blocker.as_deref().unwrap_or("-")
                ));
            }
        }
    }
    let json = serde_json::to_string(&found).unwrap();
    for canary in CANARIES {
        assert!(
            !json.contains(canary),
            "detect output must name secrets, never show them ({canary})"
        );
    }
    insta::assert_snapshot!("detect", lines.join("\n"));
}

#[test]
fn protect_every_client_snapshot_and_restore_byte_for_byte() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let files = fx.files();
    let originals: Vec<String> = files.iter().map(|f| read(&f.path)).collect();
    let opts = Options {
        yes: true,
        ..Options::default()
    };
    for f in &files {
        let report = p
            .protect_file(f, &opts)
            .unwrap_or_else(|e| panic!("protect {}: {e}", f.path.display()));
        assert!(report.changed, "{} should change", f.path.display());
        let text = read(&f.path);
        insta::assert_snapshot!(
            format!("protected-{}", fx.rel(&f.path).replace(['/', '.'], "_")),
            fx.snapshot_text(&text)
        );
        for canary in CANARIES {
            assert!(
                !text.contains(canary),
                "{} still holds a plain-text secret",
                f.path.display()
            );
        }
    }
    // Symlink written through.
    let link = fx.dirs.config.join("Claude/claude_desktop_config.json");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the symlink must survive"
    );
    assert!(
        read(&fx.dirs.home.join("dotfiles/claude_desktop_config.json")).contains("gatehouse"),
        "the target is rewritten"
    );
    // Secrets in the vault under their server ids; none in backups or state.
    assert_eq!(
        fx.vault
            .get("srv_test0001", "GITHUB_PERSONAL_ACCESS_TOKEN")
            .unwrap()
            .unwrap()
            .expose(),
        CANARIES[0]
    );
    let stored = fx.everything_in_gatehouse_home();
    assert!(
        stored.contains("{{vault:"),
        "backups keep keyring references"
    );
    for canary in CANARIES {
        assert!(
            !stored.contains(canary),
            "GATEHOUSE_HOME must not hold {canary}"
        );
    }
    // Idempotent.
    for f in &files {
        let again = p.protect_file(f, &opts).unwrap();
        assert!(
            !again.changed,
            "second protect of {} must change nothing",
            f.path.display()
        );
    }
    // Unprotect: byte for byte, secrets back, vault emptied.
    for (f, original) in files.iter().zip(&originals) {
        p.unprotect_file(f, &opts).unwrap();
        assert_eq!(
            &read(&f.path),
            original,
            "{} must be restored exactly",
            f.path.display()
        );
    }
    assert!(
        fx.vault.is_empty(),
        "unprotect removes the moved secrets from the vault"
    );
}

#[test]
fn launch_hash_matches_what_wrap_sees() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let cursor = fx.cursor();
    p.protect_file(&cursor, &Options::default()).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let state = StateDir {
        home: fx.root.join("gh"),
    }
    .load()
    .unwrap();
    for (name, entry) in doc["mcpServers"].as_object().unwrap() {
        let Some(command) = entry["command"].as_str() else {
            continue;
        };
        let args: Vec<String> = entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        let w = parse_wrap(command, &args).expect("stdio entries are wrapped");
        let rec = state
            .servers
            .iter()
            .find(|s| s.id == w.server_id)
            .expect("recorded");
        assert_eq!(&rec.entry_name, name);
        assert_eq!(
            rec.launch_hash,
            gatehouse_protocol::identity::launch_command_hash(&args[w.inner..]),
            "hash of argv after `--`"
        );
        assert_eq!(
            w.home.as_deref(),
            Some(fx.root.join("gh").to_str().unwrap())
        );
    }
}

#[test]
fn edits_after_protect_survive_unprotect() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let files = fx.files();
    let vscode = files
        .iter()
        .find(|f| f.client.key == "vscode" && f.path.ends_with("User/mcp.json"))
        .unwrap();
    let codex = files.iter().find(|f| f.client.key == "codex").unwrap();
    let cursor = files.iter().find(|f| f.client.key == "cursor").unwrap();
    for f in [vscode, codex, cursor] {
        p.protect_file(f, &Options::default()).unwrap();
    }
    // The person edits each file after protect.
    let t = read(&vscode.path).replace(
        "// VS Code user MCP servers",
        "// VS Code user MCP servers (edited)",
    );
    std::fs::write(&vscode.path, t).unwrap();
    let t = read(&codex.path).replace("model = \"o4-mini\"", "model = \"o3\"");
    std::fs::write(&codex.path, t).unwrap();
    let t = read(&cursor.path).replace(
        "\"mcpServers\": {",
        "\"mcpServers\": {\n    \"added\": { \"command\": \"added-server\" },",
    );
    std::fs::write(&cursor.path, t).unwrap();

    for f in [vscode, codex, cursor] {
        p.unprotect_file(f, &Options::default()).unwrap();
    }
    let v = read(&vscode.path);
    assert!(v.contains("(edited)"), "the comment edit survives");
    assert!(!v.contains("gatehouse"), "no wrapper is left");
    assert!(
        v.contains("\"args\": [\"-y\", \"server-perplexity-ask\"]"),
        "args are back as they were: {v}"
    );
    let c = read(&codex.path);
    assert!(c.contains("model = \"o3\""), "the TOML edit survives");
    assert!(
        c.contains("ctx7sk-Canary0123456789ABCdef") && c.contains("BSA-Canary0123456789abcDEF"),
        "secrets are put back"
    );
    assert!(
        c.contains("env_vars = [\"HTTPS_PROXY\"]"),
        "only Gatehouse's env_vars are removed: {c}"
    );
    assert!(!c.contains("gatehouse"), "no wrapper left: {c}");
    let k = read(&cursor.path);
    assert!(
        k.contains("\"added\": { \"command\": \"added-server\" }"),
        "the added server survives"
    );
    assert!(
        k.contains(CANARIES[0]) && k.contains(CANARIES[1]),
        "secrets are spliced back"
    );
    let parsed: serde_json::Value = serde_json::from_str(&k).unwrap();
    assert_eq!(
        parsed["mcpServers"]["github"]["args"],
        serde_json::json!(["-y", "@modelcontextprotocol/server-github"])
    );
    assert_eq!(parsed["mcpServers"]["postgres"]["command"], "npx");
}

#[test]
fn unparseable_file_is_untouched_with_position() {
    let fx = Fixture::new("linux-all");
    let cursor = fx.dirs.home.join(".cursor/mcp.json");
    std::fs::write(
        &cursor,
        "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"x\" }\n    \"b\": {}\n  }\n}\n",
    )
    .unwrap();
    let before = read(&cursor);
    let file = fx.cursor();
    let err = fx
        .protector()
        .protect_file(&file, &Options::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            ClientError::Parse {
                line: 4,
                col: 5,
                ..
            }
        ),
        "expected a parse error at 4:5, got {msg}"
    );
    assert!(
        msg.contains(".cursor/mcp.json:4:5"),
        "message names file:line:col: {msg}"
    );
    assert_eq!(read(&cursor), before, "the file is not touched");
}

#[test]
fn unavailable_vault_writes_nothing() {
    let mut fx = Fixture::new("linux-all");
    fx.vault = MemoryVault::unavailable("no Secret Service on the session bus");
    let file = fx.cursor();
    let before = read(&file.path);
    let err = fx
        .protector()
        .protect_file(&file, &Options::default())
        .unwrap_err();
    assert!(matches!(err, ClientError::Vault(_)), "got {err}");
    assert!(err.to_string().contains("nothing was written"));
    for canary in CANARIES {
        assert!(
            !err.to_string().contains(canary),
            "errors never carry values"
        );
    }
    assert_eq!(
        read(&file.path),
        before,
        "no plain-text fallback, no half-protected file"
    );
}

#[test]
fn claude_code_running_blocks_writing_its_state_file() {
    let mut fx = Fixture::new("linux-all");
    fx.probe = FixedProbe(vec!["claude".into()]);
    let file = fx
        .files()
        .into_iter()
        .find(|f| f.client.key == "claude-code" && f.project.is_none())
        .unwrap();
    let before = read(&file.path);
    let err = fx
        .protector()
        .protect_file(&file, &Options::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("Claude Code is running"),
        "got {err}"
    );
    assert_eq!(read(&file.path), before);
}

/// Claude Code "runs" for the first `n` looks, then has quit.
struct QuitsAfter(AtomicUsize);

impl ProcessProbe for QuitsAfter {
    fn running(&self, names: &[&str]) -> bool {
        names.contains(&"claude")
            && self
                .0
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }
}

#[test]
fn wait_writes_once_claude_code_has_quit_and_refuses_when_it_never_does() {
    let claude_file = |fx: &Fixture| {
        fx.files()
            .into_iter()
            .find(|f| f.client.key == "claude-code" && f.project.is_none())
            .unwrap()
    };
    // Never quits: --wait bounds the wait, then the clear refusal.
    let mut fx = Fixture::new("linux-all");
    fx.probe = FixedProbe(vec!["claude".into()]);
    let file = claude_file(&fx);
    let before = read(&file.path);
    let opts = Options {
        wait: std::time::Duration::from_millis(600),
        ..Options::default()
    };
    let started = std::time::Instant::now();
    let err = fx.protector().protect_file(&file, &opts).unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(600)
            && waited < std::time::Duration::from_secs(5),
        "waited {waited:?} for a wait of 600 ms"
    );
    assert!(
        err.to_string().contains("Claude Code is running") && err.to_string().contains("--wait"),
        "got {err}"
    );
    assert_eq!(read(&file.path), before, "nothing written");
    assert!(fx.vault.is_empty(), "no secret moved before the refusal");

    // Quits after three looks: protect goes on with a fresh read.
    let fx = Fixture::new("linux-all");
    let file = claude_file(&fx);
    let probe = QuitsAfter(AtomicUsize::new(3));
    let mut p = fx.protector();
    p.processes = &probe;
    let opts = Options {
        wait: std::time::Duration::from_secs(10),
        ..Options::default()
    };
    let report = p.protect_file(&file, &opts).unwrap();
    assert!(report.changed, "written once Claude Code quit");
    assert!(!read(&file.path).contains("sntrys_Canary"), "secret moved");
    p.unprotect_file(&file, &Options::default()).unwrap();
}

#[test]
fn dry_run_diff_is_redacted_and_writes_nothing() {
    let fx = Fixture::new("linux-all");
    let file = fx.cursor();
    let before = read(&file.path);
    let report = fx.protector().protect_file(&file, &dry_run()).unwrap();
    let diff = report.diff.expect("a diff");
    assert_eq!(read(&file.path), before, "dry run writes nothing");
    assert!(fx.vault.is_empty(), "dry run stores nothing");
    for canary in CANARIES {
        assert!(!diff.contains(canary), "diff leaks {canary}:\n{diff}");
    }
    assert!(
        diff.contains("<redacted>") && diff.contains("+") && diff.contains("gatehouse"),
        "{diff}"
    );
}

/// A secret written with JSON escapes never shows in a dry run, moved or
/// not (a reserved name's value stays in the file and in its diff lines).
#[test]
fn dry_run_redacts_secrets_written_with_escapes() {
    let fx = Fixture::new("linux-all");
    let file = fx.cursor();
    std::fs::write(
        &file.path,
        r#"{ "mcpServers": { "gh": { "command": "npx", "args": ["-y", "srv", "--api-key", "CANARYescArg\u00429XyZ12345abcQ"],
  "env": { "GITHUB_TOKEN": "ghp_CANARYescGh\u00300000000000000000000000000001", "LD_API_KEY": "CANARYescLd\u00415KlM6789nopQrS", "OTHER_TOKEN": "CANARYescOther\/5KlM6789nopQrS" } } } }"#,
    )
    .unwrap();
    let report = fx.protector().protect_file(&file, &dry_run()).unwrap();
    let diff = report.diff.expect("a diff");
    for shown in ["CANARYesc", "ghp_CANARY", "5KlM6789"] {
        assert!(!diff.contains(shown), "diff shows {shown}:\n{diff}");
    }
    assert!(diff.contains("<redacted>"), "{diff}");
}

/// Zed's older `command: {path, args, env}` is not rewritten, but its
/// plain-text secrets are listed and never shown in a dry run's diff.
#[test]
fn a_zed_command_object_shows_its_secrets_by_name_only() {
    let fx = Fixture::new("linux-all");
    let zed = client_file(&fx, "zed");
    std::fs::write(
        &zed.path,
        "{\"context_servers\": {\"old\": {\"command\": {\"path\": \"npx\", \
         \"args\": [\"srv\", \"--api-key\", \"CANARYzedArg0123456789\"], \
         \"env\": {\"API_KEY\": \"sk-CANARYzedEnv0123456789abcdef\"}}, \"settings\": {}}, \
         \"new\": {\"command\": \"npx\", \"args\": [\"other\"]}}}\n",
    )
    .unwrap();
    let found = gatehouse_clients::discover::inspect_file(&zed);
    let old = found.servers.iter().find(|s| s.name == "old").unwrap();
    assert!(old.blocker.is_some(), "not rewritten");
    assert_eq!(
        old.secrets,
        ["API_KEY", "API_KEY"],
        "env, then the --api-key argument"
    );
    let diff = fx
        .protector()
        .protect_file(&zed, &dry_run())
        .unwrap()
        .diff
        .unwrap();
    for shown in ["CANARYzedArg", "CANARYzedEnv"] {
        assert!(!diff.contains(shown), "diff shows {shown}:\n{diff}");
    }
}

/// An entry protected with another home is left as it is by this home's
/// unprotect, and the report says which home can undo it.
#[test]
fn an_entry_of_another_home_names_that_home() {
    let fx = Fixture::new("linux-all");
    let cursor = fx.cursor();
    let mut other = fx.protector();
    other.gatehouse_home = fx.root.join("other-home");
    other.protect_file(&cursor, &Options::default()).unwrap();
    let protected = read(&cursor.path);
    let report = fx
        .protector()
        .unprotect_file(&cursor, &Options::default())
        .unwrap();
    assert_eq!(read(&cursor.path), protected, "left as it is");
    let (_, why) = &report.skipped[0];
    let named = format!("--home {}", fx.root.join("other-home").display());
    assert!(why.contains(&named), "{why}");
}

/// Secrets in TOML multi-line strings (`"""…"""`, `'''…'''`, with or without
/// a line break after the opening quotes) are restored byte for byte.
#[test]
fn toml_multi_line_secrets_are_restored_byte_for_byte() {
    let fx = Fixture::new("linux-all");
    let codex = client_file(&fx, "codex");
    let text = "[mcp_servers.gh]\ncommand = \"npx\"\nargs = [\"-y\", \"gh-mcp\"]\n\n\
                [mcp_servers.gh.env]\nAPI_KEY = \"\"\"\nabcdefgh\"\"\"\n\
                OTHER_TOKEN = '''ijklmnop'''\nLITERAL_SECRET = 'qrstuvwx'\n\
                SNOWFLAKE_PRIVATE_KEY = \"\"\"\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\n\
                -----END PRIVATE KEY-----\n\"\"\"\n";
    std::fs::write(&codex.path, text).unwrap();
    let p = fx.protector();
    p.protect_file(&codex, &Options::default()).unwrap();
    let protected = read(&codex.path);
    for secret in ["abcdefgh", "ijklmnop", "qrstuvwx", "MIIEvQIB"] {
        assert!(!protected.contains(secret), "{secret} moved: {protected}");
    }
    let report = p.unprotect_file(&codex, &Options::default()).unwrap();
    assert!(
        !report.notes.iter().any(|n| n.contains("byte for byte")),
        "{:?}",
        report.notes
    );
    assert_eq!(read(&codex.path), text, "restored byte for byte");
}

/// A secret spanning lines (a PEM key in a TOML `"""` string) never shows
/// in a dry run, neither whole nor line by line.
#[test]
fn dry_run_redacts_a_secret_spanning_lines() {
    let fx = Fixture::new("linux-all");
    let codex = client_file(&fx, "codex");
    let body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7CANARYline1\n\
                QWxsIHRoZSBwcmV2aW91cyBsaW5lcyBvZiB0aGlzIGtleSBDQU5BUllsaW5lMg==";
    std::fs::write(
        &codex.path,
        format!(
            "[mcp_servers.sf]\ncommand = \"npx\"\nargs = [\"-y\", \"snowflake-mcp\"]\n\n\
             [mcp_servers.sf.env]\nSNOWFLAKE_PRIVATE_KEY = \"\"\"\n-----BEGIN PRIVATE KEY-----\n{body}\n\
             -----END PRIVATE KEY-----\n\"\"\"\n"
        ),
    )
    .unwrap();
    let report = fx.protector().protect_file(&codex, &dry_run()).unwrap();
    let diff = report.diff.expect("a diff");
    for shown in ["CANARYline1", "Q0FOQVJZbGluZTI", "BEGIN PRIVATE"] {
        assert!(!diff.contains(shown), "diff shows {shown}:\n{diff}");
    }
    assert!(diff.contains("<redacted>"), "{diff}");
}

#[test]
fn repair_repoints_wrappers() {
    let fx = Fixture::new("linux-all");
    let file = fx
        .files()
        .into_iter()
        .find(|f| f.client.key == "cline")
        .unwrap();
    fx.protector()
        .protect_file(&file, &Options::default())
        .unwrap();
    let mut moved = fx.protector();
    moved.exe = PathBuf::from("/usr/local/bin/gatehouse");
    let r = moved
        .protect_file(
            &file,
            &Options {
                repair: true,
                ..Options::default()
            },
        )
        .unwrap();
    assert!(r.changed);
    let text = read(&file.path);
    assert!(
        text.contains("\"command\": \"/usr/local/bin/gatehouse\""),
        "{text}"
    );
    assert!(!text.contains("/opt/gatehouse"), "old path gone");
    assert_eq!(text.matches("\"wrap\"").count(), 1, "not wrapped twice");
}

/// Repair moves text before a new entry's secret: the backup of that run
/// holds no piece of the secret, whether the new path is shorter or longer.
#[test]
fn a_repair_before_a_new_secret_keeps_every_piece_of_it_out_of_the_backup() {
    const TOKEN: &str = "ghp_CANARY0123456789abcdefghijKLMNOP";
    for exe in [
        "/usr/bin/gatehouse",
        "/home/someone/.local/share/gatehouse/bin/gatehouse",
    ] {
        let fx = Fixture::new("linux-all");
        let (_, cursor) = protected_cursor(
            &fx,
            "{\"mcpServers\": {\"keep\": {\"command\": \"npx\", \"args\": [\"other\"]}}}\n",
        );
        let mut v: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
        v["mcpServers"]["gh"] = serde_json::json!({
            "command": "npx", "args": ["server-github"], "env": {"GITHUB_TOKEN": TOKEN}
        });
        std::fs::write(&cursor.path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        let mut moved = fx.protector();
        moved.exe = PathBuf::from(exe);
        let options = Options {
            repair: true,
            ..Options::default()
        };
        moved.protect_file(&cursor, &options).unwrap();
        let written = read(&cursor.path);
        assert!(
            !written.contains(TOKEN) && written.contains(exe),
            "{written}"
        );
        for dir in [fx.root.join("gh"), fx.root.join("gh/backups")] {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                for piece in TOKEN.as_bytes().windows(8) {
                    let piece = std::str::from_utf8(piece).unwrap();
                    assert!(
                        !text.contains(piece),
                        "{} holds {piece:?} of the secret ({exe})",
                        entry.path().display()
                    );
                }
            }
        }
    }
}

/// Self-heal at start (`repair_file`): wrappers whose binary is gone point at
/// the current one; an entry the person added meanwhile is not wrapped behind
/// their back; a wrapper naming another existing binary is left alone.
#[test]
fn repair_file_repoints_wrappers_and_wraps_nothing_new() {
    let fx = Fixture::new("linux-all");
    let file = fx
        .files()
        .into_iter()
        .find(|f| f.client.key == "cline")
        .unwrap();
    fx.protector()
        .protect_file(&file, &Options::default())
        .unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&read(&file.path)).unwrap();
    doc["mcpServers"]["added-later"] =
        serde_json::json!({"command": "npx", "args": ["-y", "some-mcp-server@1.0.0"]});
    std::fs::write(&file.path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let wrapped_before = read(&file.path).matches("\"wrap\"").count();

    let mut moved = fx.protector();
    moved.exe = PathBuf::from("/usr/local/bin/gatehouse");
    let r = moved.repair_file(&file, &Options::default()).unwrap();
    assert!(r.changed, "the stale wrapper was repointed");
    let text = read(&file.path);
    assert!(!text.contains("/opt/gatehouse"), "old path gone: {text}");
    assert!(text.contains("/usr/local/bin/gatehouse"), "{text}");
    assert_eq!(
        text.matches("\"wrap\"").count(),
        wrapped_before,
        "nothing newly wrapped"
    );
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        doc["mcpServers"]["added-later"]["command"], "npx",
        "the added entry is left as the person wrote it"
    );
    let again = moved.repair_file(&file, &Options::default()).unwrap();
    assert!(!again.changed, "repair is idempotent");

    // Another install whose binary exists: its entries are not taken over.
    let existing = fx.root.join("other-install/gatehouse");
    std::fs::create_dir_all(existing.parent().unwrap()).unwrap();
    std::fs::write(&existing, "").unwrap();
    let mut other = fx.protector();
    other.exe = existing;
    other
        .protect_file(
            &file,
            &Options {
                repair: true,
                ..Options::default()
            },
        )
        .unwrap();
    let before = read(&file.path);
    let r = moved.repair_file(&file, &Options::default()).unwrap();
    assert!(!r.changed, "an existing binary's wrappers stay");
    assert_eq!(read(&file.path), before);
}

#[test]
fn git_tracked_project_file_needs_yes_and_committed_secret_means_rotate() {
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: git not installed");
        return;
    }
    let fx = Fixture::new("linux-all");
    let proj = fx.root.join("project");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(&proj)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", ".mcp.json"]);
    git(&["commit", "-q", "-m", "init"]);
    let file = fx
        .files()
        .into_iter()
        .find(|f| f.project.is_some())
        .unwrap();
    let err = fx
        .protector()
        .protect_file(&file, &Options::default())
        .unwrap_err();
    assert!(err.to_string().contains("--yes"), "got {err}");
    let r = fx
        .protector()
        .protect_file(
            &file,
            &Options {
                yes: true,
                ..Options::default()
            },
        )
        .unwrap();
    assert!(
        r.notes.iter().any(|n| n.contains("rotate")),
        "committed secret must be flagged: {:?}",
        r.notes
    );
}

#[test]
fn windows_layout_and_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/windows"),
        &root,
    );
    let dirs = HomeDirs::fixture(&root, Os::Windows);
    let found: Vec<&str> = detect(&dirs, &[]).iter().map(|c| c.key).collect();
    assert_eq!(
        found,
        ["claude-desktop", "codex", "zed"],
        "Windows locations (%APPDATA%, %USERPROFILE%) are searched"
    );
    let vault = MemoryVault::new();
    let n = AtomicUsize::new(0);
    let p = Protector {
        // Under the temp root: backups are really written there (on Linux
        // this Windows path is one odd directory name, not a drive).
        gatehouse_home: root.join("C:\\Users\\me\\AppData\\Local\\Gatehouse"),
        exe: PathBuf::from("C:\\Program Files\\Gatehouse\\gatehouse.exe"),
        vault: &vault,
        registry: &NoRegistry,
        processes: &FixedProbe::default(),
        ids: Mutex::new(Box::new(move || {
            format!("srv_win{}", n.fetch_add(1, Ordering::SeqCst))
        })),
        stamp: "t".into(),
    };
    let projects = all_projects(&dirs, &[]);
    for f in CLIENTS
        .iter()
        .flat_map(|c| config_files(c, &dirs, &projects))
    {
        let original = read(&f.path);
        p.protect_file(&f, &Options::default()).unwrap();
        let text = read(&f.path);
        let name = f
            .path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace(['/', '.', '\\'], "_");
        // The snapshot shows the path as a Windows user would see it.
        let shown = text.replace(&format!("{}/", root.display()), "");
        insta::assert_snapshot!(format!("windows-{name}"), shown);
        p.unprotect_file(&f, &Options::default()).unwrap();
        assert_eq!(
            read(&f.path),
            original,
            "Windows-style config restored exactly"
        );
    }
}

#[test]
fn cline_lock_is_respected_and_nothing_is_left_behind() {
    let fx = Fixture::new("linux-all");
    let file = fx
        .files()
        .into_iter()
        .find(|f| f.client.key == "cline")
        .unwrap();
    // Give the entry a secret so there is something to move.
    let text = read(&file.path).replace("\"timeout\": 60,", "\"timeout\": 60,\n      \"env\": { \"GITHUB_TOKEN\": \"ghp_ClineCanary0123456789abcdefABCD\" },");
    std::fs::write(&file.path, &text).unwrap();
    let lock = file.path.with_file_name("cline_mcp_settings.json.lock");
    std::fs::create_dir(&lock).unwrap();
    let err = fx
        .protector()
        .protect_file(&file, &Options::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("locked by its client"),
        "got {err}"
    );
    assert_eq!(
        read(&file.path),
        text,
        "nothing written while Cline holds its lock"
    );
    assert!(
        fx.vault.is_empty(),
        "secrets moved before the failed write are taken back"
    );
    std::fs::remove_dir(&lock).unwrap();
    fx.protector()
        .protect_file(&file, &Options::default())
        .unwrap();
    assert!(!lock.exists(), "Gatehouse releases the lock it took");
    assert!(!read(&file.path).contains("ClineCanary"));
}

#[test]
fn a_foreign_wrap_entry_claiming_a_protected_id_is_never_unwrapped() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let files = fx.files();
    let (project, user): (Vec<_>, Vec<_>) = files
        .into_iter()
        .partition(|f| f.path.starts_with(fx.root.join("project")));
    for f in &user {
        p.protect_file(f, &Options::default()).unwrap();
    }
    let state = StateDir {
        home: fx.root.join("gh"),
    }
    .load()
    .unwrap();
    let victim = state
        .servers
        .iter()
        .find(|s| !s.secret_names.is_empty())
        .expect("a protected server with a secret");
    let name = &victim.secret_names[0];
    // A cloned repository's config claims that id and asks for its secret.
    let file = &project[0];
    let text = format!(
        "{{\"mcpServers\": {{\"x\": {{\"command\": \"/opt/gatehouse/bin/gatehouse\", \
         \"args\": [\"wrap\", \"--server\", \"{}\", \"--\", \"evil\", \"{{{{vault:{name}}}}}\"], \
         \"env\": {{\"T\": \"{{{{vault:{name}}}}}\"}}}}}}}}\n",
        victim.id
    );
    std::fs::write(&file.path, &text).unwrap();
    let report = p.unprotect_file(file, &Options::default()).unwrap();
    assert_eq!(read(&file.path), text, "the foreign entry is left as it is");
    assert!(!report.changed);
    assert_eq!(report.skipped.len(), 1, "and reported: {report:?}");
    assert!(
        fx.vault.get(&victim.id, name).unwrap().is_some(),
        "the victim's secret stays in the vault"
    );
}

fn client_file(fx: &Fixture, key: &str) -> ConfigFile {
    fx.files()
        .into_iter()
        .find(|f| f.client.key == key && f.project.is_none())
        .unwrap()
}

/// Protect refuses `text` with a parse error at `at` naming `needle`, and
/// writes nothing.
fn check_refused(key: &str, text: &str, at: (usize, usize), needle: &str) {
    let fx = Fixture::new("linux-all");
    let file = client_file(&fx, key);
    std::fs::write(&file.path, text).unwrap();
    let err = fx
        .protector()
        .protect_file(&file, &Options::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ClientError::Parse { line, col, .. } if (line, col) == at),
        "expected a refusal at {at:?}: {msg}"
    );
    assert!(msg.contains(needle), "the message names {needle}: {msg}");
    assert_eq!(read(&file.path), text, "nothing is written");
    assert!(fx.vault.is_empty(), "no secret is moved");
    assert!(!fx.root.join("gh/backups").exists(), "no backup is written");
}

#[test]
fn duplicate_keys_where_gatehouse_edits_are_refused() {
    check_refused(
        "cursor",
        "{\"mcpServers\": {\"a\": {\"command\": \"npx\", \"args\": [\"one\"]},\n \"a\": {\"command\": \"node\", \"args\": [\"two\"], \"env\": {\"GITHUB_TOKEN\": \"ghp_CANARY0123456789abcdefghijKLMNOP\"}}}}\n",
        (2, 2),
        "duplicate key \"a\" in mcpServers (also at 1:17)",
    );
    check_refused(
        "cursor",
        "{\"mcpServers\": {\"a\": {\"command\": \"npx\",\n  \"args\": [\"one\"], \"args\": [\"two\"]}}}\n",
        (2, 20),
        "duplicate key \"args\" in entry \"a\"",
    );
    check_refused(
        "cursor",
        "{\"mcpServers\": {\"a\": {\"command\": \"npx\", \"env\": {\"T\": \"1\", \"T\": \"2\"}}}}",
        (1, 59),
        "duplicate key \"T\" in entry \"a\"",
    );
    check_refused(
        "cursor",
        "{\"mcpServers\": {},\n\"mcpServers\": {\"a\": {\"command\": \"npx\"}}}",
        (2, 1),
        "duplicate key \"mcpServers\" in the top level",
    );
    // TOML forbids duplicate keys and tables; its parser refuses them.
    check_refused(
        "codex",
        "[mcp_servers.a]\ncommand = \"npx\"\n\n[mcp_servers.a]\ncommand = \"node\"\n",
        (4, 1),
        "duplicate key",
    );
    check_refused(
        "codex",
        "[mcp_servers.a]\ncommand = \"npx\"\ncommand = \"node\"\n",
        (3, 1),
        "duplicate key",
    );
    // Duplicates elsewhere (not read by Gatehouse) are the client's business.
    let fx = Fixture::new("linux-all");
    let file = client_file(&fx, "cursor");
    std::fs::write(
        &file.path,
        "{\"theme\": 1, \"theme\": 2, \"mcpServers\": {\"a\": {\"command\": \"npx\"}}}",
    )
    .unwrap();
    fx.protector()
        .protect_file(&file, &Options::default())
        .unwrap();
}

#[test]
fn malformed_entries_are_skipped_with_the_reason_and_the_rest_protected() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let cursor = client_file(&fx, "cursor");
    let text = "{\"mcpServers\": {\n  \"a\": {\"command\": \"npx\", \"args\": \"notarray\"},\n  \
                \"b\": {\"command\": \"npx\", \"args\": [\"x\", 1]},\n  \
                \"c\": {\"command\": 7},\n  \
                \"d\": {\"command\": \"npx\", \"env\": [\"T=1\"]},\n  \
                \"e\": {\"command\": \"npx\", \"env\": {\"PORT\": 8080}},\n  \
                \"ok\": {\"command\": \"npx\", \"args\": [\"server\"]}\n}}\n";
    std::fs::write(&cursor.path, text).unwrap();
    let report = p.protect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(
        report.entries,
        ["ok"],
        "only the well-formed entry is wrapped"
    );
    let skipped: Vec<String> = report
        .skipped
        .iter()
        .map(|(n, why)| format!("{n}: {why}"))
        .collect();
    for expected in [
        "a: \"args\" is not an array of strings",
        "b: \"args\" is not an array of strings",
        "c: \"command\" is not a string",
        "d: \"env\" is not an object of strings",
        "e: \"env\" is not an object of strings",
    ] {
        assert!(
            skipped.iter().any(|s| s.starts_with(expected)),
            "{expected:?} is reported: {skipped:#?}"
        );
    }
    let written = read(&cursor.path);
    assert_eq!(
        written.matches("\"args\"").count(),
        3,
        "no second args key: {written}"
    );
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(read(&cursor.path), text, "restored byte for byte");

    let codex = client_file(&fx, "codex");
    let text = "[mcp_servers.a]\ncommand = \"npx\"\nargs = \"notarray\"\n\n[mcp_servers.ok]\ncommand = \"npx\"\n";
    std::fs::write(&codex.path, text).unwrap();
    let report = p.protect_file(&codex, &Options::default()).unwrap();
    assert_eq!(report.entries, ["ok"]);
    assert!(
        report.skipped[0]
            .1
            .contains("`args` is not an array of strings"),
        "{report:?}"
    );
    p.unprotect_file(&codex, &Options::default()).unwrap();
    assert_eq!(read(&codex.path), text, "restored byte for byte");
}

const HAND_EDITED: &str = "{\"mcpServers\": {\n  \
    \"gh\": {\"command\": \"npx\", \"args\": [\"server-github\"], \"env\": {\"GITHUB_TOKEN\": \"ghp_CANARY0123456789abcdefghijKLMNOP\"}},\n  \
    \"pg\": {\"command\": \"npx\", \"args\": [\"server-postgres\", \"postgresql://bob:pg-Canary-Pass-77@db/app\"]},\n  \
    \"keep\": {\"command\": \"npx\", \"args\": [\"other\"], \"env\": {\"API_KEY\": \"sk-CanaryProject0123456789abcdef\"}}\n}}\n";

fn wrapped_id(v: &serde_json::Value, name: &str) -> String {
    let entry = &v["mcpServers"][name];
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).unwrap();
    parse_wrap(entry["command"].as_str().unwrap(), &args)
        .expect("wrapped")
        .server_id
}

/// Cursor's file holding `text`, protected.
fn protected_cursor<'f>(fx: &'f Fixture, text: &str) -> (Protector<'f>, ConfigFile) {
    let p = fx.protector();
    let cursor = client_file(fx, "cursor");
    std::fs::write(&cursor.path, text).unwrap();
    p.protect_file(&cursor, &Options::default()).unwrap();
    (p, cursor)
}

/// Strips the `gatehouse wrap … --` prefix from entry `name` by hand, as a
/// person editing the file would; `command` replaces the original one.
fn unwrap_by_hand(v: &mut serde_json::Value, name: &str, command: Option<&str>) {
    let entry = &mut v["mcpServers"][name];
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).unwrap();
    let inner = args.iter().position(|a| a == "--").unwrap() + 1;
    entry["command"] = command.unwrap_or(&args[inner]).into();
    entry["args"] = args[inner + 1..].to_vec().into();
}

/// An entry unwrapped by hand that now runs another program does not get
/// the secrets Gatehouse moved for the original one.
#[test]
fn a_hand_unwrapped_entry_with_another_command_gets_no_secrets() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let mut v: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let pg = wrapped_id(&v, "pg");
    unwrap_by_hand(&mut v, "pg", Some("/tmp/attacker-server"));
    std::fs::write(&cursor.path, serde_json::to_string_pretty(&v).unwrap()).unwrap();

    let report = p.unprotect_file(&cursor, &Options::default()).unwrap();
    let after = read(&cursor.path);
    assert!(
        !after.contains("pg-Canary-Pass-77"),
        "the secret is not put into another program's entry: {after}"
    );
    let notes = report.notes.join("\n");
    assert!(
        notes.contains("command changed") && notes.contains(&pg),
        "the note says why and names the server: {notes}"
    );
    assert!(
        !fx.vault.list(&pg).unwrap().is_empty(),
        "the secret stays in the keyring"
    );
}

/// A wrap entry Gatehouse wrote whose wrapped command changed since (a
/// pulled commit of a project config) is unwrapped without the secrets
/// Gatehouse moved for the original program; the others get theirs.
#[test]
fn a_wrapped_entry_whose_command_changed_is_unwrapped_without_secrets() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let mut v: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let pg = wrapped_id(&v, "pg");
    let entry = &mut v["mcpServers"]["pg"];
    let mut args: Vec<String> = serde_json::from_value(entry["args"].clone()).unwrap();
    let inner = args.iter().position(|a| a == "--").unwrap() + 1;
    args[inner] = "/tmp/attacker-server".into();
    entry["args"] = args.into();
    std::fs::write(&cursor.path, serde_json::to_string_pretty(&v).unwrap()).unwrap();

    let report = p.unprotect_file(&cursor, &Options::default()).unwrap();
    let after: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let pg_entry = &after["mcpServers"]["pg"];
    assert_eq!(
        pg_entry["command"], "/tmp/attacker-server",
        "unwrapped: {after}"
    );
    let pg_text = pg_entry.to_string();
    assert!(
        !pg_text.contains("pg-Canary-Pass-77") && pg_text.contains("{{vault:"),
        "the placeholder stays, the secret is not put in: {pg_text}"
    );
    assert_eq!(
        after["mcpServers"]["gh"]["env"]["GITHUB_TOKEN"], "ghp_CANARY0123456789abcdefghijKLMNOP",
        "an unchanged entry gets its secret back"
    );
    let notes = report.notes.join("\n");
    assert!(
        notes.contains("changed since it was protected") && notes.contains(&pg),
        "the note says why and names the server: {notes}"
    );
    assert!(
        !fx.vault.list(&pg).unwrap().is_empty(),
        "the secret stays in the keyring"
    );
}

/// A file protected again (an entry added since) keeps the one backup its
/// record names: no copy of the later state, with its new secret's
/// neighbours, is left behind unreferenced.
#[test]
fn a_second_protect_writes_no_second_backup() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let backups = || {
        std::fs::read_dir(fx.root.join("gh/backups"))
            .unwrap()
            .count()
    };
    assert_eq!(backups(), 1);
    let mut v: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    v["mcpServers"]["new"] = serde_json::json!({"command": "npx", "args": ["new-server"]});
    std::fs::write(&cursor.path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let report = p.protect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(report.entries, ["new"]);
    assert_eq!(backups(), 1, "the first backup stays the only one");
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    let after: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    assert_eq!(
        after["mcpServers"]["gh"]["env"]["GITHUB_TOKEN"], "ghp_CANARY0123456789abcdefghijKLMNOP",
        "unprotect still puts the secrets back"
    );
    assert_eq!(after["mcpServers"]["new"]["command"], "npx");
}

/// A backup deleted (or unreadable) costs the byte-for-byte restore, not
/// the unprotect: the entries come back in place with their secrets.
#[test]
fn unprotect_without_its_backup_restores_the_entries_in_place() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let backups = fx.root.join("gh/backups");
    for entry in std::fs::read_dir(&backups).unwrap().flatten() {
        std::fs::remove_file(entry.path()).unwrap();
    }
    let report = p.unprotect_file(&cursor, &Options::default()).unwrap();
    let after: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let before: serde_json::Value = serde_json::from_str(HAND_EDITED).unwrap();
    assert_eq!(after, before, "every entry as it was, secrets included");
    let notes = report.notes.join("\n");
    assert!(
        notes.contains("backup could not be read"),
        "the note says why it is not byte for byte: {notes}"
    );
}

/// Unprotect takes back only what protect moved: a secret a person stored
/// for the server (`vault set`, the policy-env workaround for a reserved
/// name) stays, and the note names it.
#[test]
fn unprotect_keeps_secrets_stored_by_hand() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let v: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let gh = wrapped_id(&v, "gh");
    let own = gatehouse_vault::Secret::new("ld-own-0123456789".to_string());
    fx.vault.set(&gh, "LAUNCHDARKLY_API_KEY", own).unwrap();

    let report = p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(
        fx.vault.list(&gh).unwrap(),
        vec!["LAUNCHDARKLY_API_KEY".to_string()],
        "the moved secret is taken back, the person's own stays"
    );
    let notes = report.notes.join("\n");
    assert!(
        notes.contains("LAUNCHDARKLY_API_KEY") && notes.contains(&gh),
        "the kept secret is named: {notes}"
    );
}

#[test]
fn unprotect_after_hand_edits_restores_placeholders_and_names_stranded_secrets() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let mut v: serde_json::Value = serde_json::from_str(&read(&cursor.path)).unwrap();
    let (gh, pg) = (wrapped_id(&v, "gh"), wrapped_id(&v, "pg"));
    // By hand: delete one entry, strip the wrap prefix from another.
    v["mcpServers"].as_object_mut().unwrap().remove("gh");
    unwrap_by_hand(&mut v, "pg", None);
    std::fs::write(&cursor.path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    assert!(
        read(&cursor.path).contains("{{vault:"),
        "pg holds a placeholder"
    );

    let report = p.unprotect_file(&cursor, &Options::default()).unwrap();
    let after = read(&cursor.path);
    assert!(
        after.contains("postgresql://bob:pg-Canary-Pass-77@db/app"),
        "the hand-unwrapped entry gets its secret back: {after}"
    );
    assert!(
        !after.contains("{{vault:"),
        "no placeholder is left: {after}"
    );
    assert!(!after.contains("gatehouse"), "no wrapper is left: {after}");
    let notes = report.notes.join("\n");
    assert!(
        notes.contains(&gh)
            && notes.contains("GITHUB_TOKEN")
            && notes.contains("stay in the keyring"),
        "the stranded secret is named with its server: {notes}"
    );
    assert!(
        notes.contains(&format!("gatehouse vault rm {gh}")),
        "and how to remove it: {notes}"
    );
    assert!(
        fx.vault.get(&gh, "GITHUB_TOKEN").unwrap().is_some(),
        "the stranded secret stays in the keyring"
    );
    assert!(
        fx.vault.list(&pg).unwrap().is_empty(),
        "restored secrets leave the keyring"
    );
    let state = StateDir {
        home: fx.root.join("gh"),
    }
    .load()
    .unwrap();
    assert!(
        state.servers.is_empty(),
        "no record is left: {:?}",
        state.servers
    );
}

#[test]
fn secrets_in_remote_headers_are_listed_redacted_and_leave_no_backup() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let cursor = client_file(&fx, "cursor");
    let token = "sk-HeaderCanary0123456789abcdefXYZ";
    let text = format!(
        "{{\"mcpServers\": {{\n  \"remote\": {{\"url\": \"https://mcp.example.com\",\n    \
         \"headers\": {{\"Authorization\": \"Bearer {token}\"}}}},\n  \
         \"gh\": {{\"command\": \"npx\", \"args\": [\"server-github\"], \
         \"env\": {{\"GITHUB_TOKEN\": \"ghp_CANARY0123456789abcdefghijKLMNOP\"}}}}\n}}}}\n"
    );
    std::fs::write(&cursor.path, &text).unwrap();
    let found = detect(&fx.dirs, &[]);
    let remote = found
        .iter()
        .flat_map(|c| c.files.iter().flat_map(|f| &f.servers))
        .find(|s| s.name == "remote")
        .unwrap();
    assert_eq!(remote.secrets, ["Authorization (header)"], "listed by name");
    assert!(remote.blocker.is_some(), "and not moved");
    let dry = dry_run();
    let diff = p.protect_file(&cursor, &dry).unwrap().diff.unwrap();
    assert!(
        !diff.contains(token),
        "no diff line shows the header secret:\n{diff}"
    );
    assert!(diff.contains("Bearer <redacted>"), "{diff}");
    p.protect_file(&cursor, &Options::default()).unwrap();
    assert!(
        fx.everything_in_gatehouse_home().contains(token),
        "the backup holds the header secret protect did not move"
    );
    let diff = p.unprotect_file(&cursor, &dry).unwrap().diff.unwrap();
    assert!(
        !diff.contains(token),
        "nor any unprotect diff line:\n{diff}"
    );
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(read(&cursor.path), text, "restored byte for byte");
    assert!(
        !fx.everything_in_gatehouse_home().contains(token),
        "the verified restore removes the backup that held it"
    );
}

#[test]
fn unprotect_dry_run_shows_restored_values_as_changing_and_redacted() {
    let fx = Fixture::new("linux-all");
    let (p, cursor) = protected_cursor(&fx, HAND_EDITED);
    let before = read(&cursor.path);
    let diff = p.unprotect_file(&cursor, &dry_run()).unwrap().diff.unwrap();
    assert_eq!(read(&cursor.path), before, "a dry run writes nothing");
    for canary in CANARIES {
        assert!(!diff.contains(canary), "diff leaks {canary}:\n{diff}");
    }
    let changed = |l: &&str| l.starts_with('+') && !l.starts_with("+++");
    let added: Vec<&str> = diff.lines().filter(changed).collect();
    assert!(
        added
            .iter()
            .any(|l| l.contains("\"GITHUB_TOKEN\": \"<redacted>\"")),
        "the env value is shown changing, redacted:\n{diff}"
    );
    assert!(
        added
            .iter()
            .any(|l| l.contains("postgresql://bob:<redacted>@db/app")),
        "so is the arg:\n{diff}"
    );
    assert!(
        !diff
            .lines()
            .any(|l| l.starts_with(' ') && l.contains("{{vault:")),
        "no placeholder line is shown unchanged:\n{diff}"
    );
}

#[cfg(unix)]
#[test]
fn a_read_only_config_keeps_its_mode_and_is_reported() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let cursor = client_file(&fx, "cursor");
    let ro = std::fs::Permissions::from_mode(0o444);
    std::fs::set_permissions(&cursor.path, ro).unwrap();
    for report in [
        p.protect_file(&cursor, &Options::default()).unwrap(),
        p.unprotect_file(&cursor, &Options::default()).unwrap(),
    ] {
        assert!(
            report.notes.iter().any(|n| n.contains("was read-only")),
            "the person is told: {:?}",
            report.notes
        );
        let mode = std::fs::metadata(&cursor.path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o444, "the mode is kept");
    }
}

#[test]
fn escaped_commands_come_back_as_written() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let (cursor, codex) = (client_file(&fx, "cursor"), client_file(&fx, "codex"));
    let json = "{\"mcpServers\": {\"a\": {\"command\": \"\\u006epx\", \"args\": [\"-y\", \"\\u0073erver\"]},\n  \
                \"s\": {\"command\": \"\\u006epx\", \"args\": [\"--api-key\", \"sk-QAcanary\\u0041bcdefghijklmnopqrstuv\"]}}}\n";
    let toml = "[mcp_servers.a]\ncommand = \"\\u006epx\"\nargs = ['-y', \"\\u0073erver\"]\n";
    std::fs::write(&cursor.path, json).unwrap();
    std::fs::write(&codex.path, toml).unwrap();
    for f in [&cursor, &codex] {
        p.protect_file(f, &Options::default()).unwrap();
    }
    let wrapped = read(&cursor.path);
    assert!(
        !wrapped.contains("sk-QAcanary"),
        "the secret is moved: {wrapped}"
    );
    let report = p.unprotect_file(&cursor, &Options::default()).unwrap();
    p.unprotect_file(&codex, &Options::default()).unwrap();
    assert_eq!(read(&codex.path), toml, "TOML: byte for byte");
    let restored = read(&cursor.path);
    assert_eq!(
        restored,
        json.replace("\\u0041", "A"),
        "JSON: the command and plain args as written; the secret's string the same value"
    );
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("not restored byte for byte")),
        "and the person is told: {:?}",
        report.notes
    );
    // Edited after protect (restored in place): the command literal survives too.
    std::fs::write(&cursor.path, json.replace(",\n  \"s\"", ", \"s\"")).unwrap();
    p.protect_file(&cursor, &Options::default()).unwrap();
    let edited = read(&cursor.path).replace("{\"mcpServers\"", "{\"x\": 1, \"mcpServers\"");
    std::fs::write(&cursor.path, edited).unwrap();
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert!(
        read(&cursor.path)
            .contains("{\"command\": \"\\u006epx\", \"args\": [\"-y\", \"\\u0073erver\"]}"),
        "{}",
        read(&cursor.path)
    );
}

/// A registry whose store is down (busy past its budget, say).
struct DownRegistry;

impl gatehouse_clients::protect::ServerRegistry for DownRegistry {
    fn register(&self, _: &gatehouse_clients::state::ProtectedServer) -> Result<(), ClientError> {
        Err(ClientError::State("the database is busy".into()))
    }
}

#[test]
fn a_registry_failure_after_the_write_still_leaves_the_file_restorable() {
    let fx = Fixture::new("linux-all");
    let file = fx.cursor();
    let before = read(&file.path);
    let failing = Protector {
        registry: &DownRegistry,
        ..fx.protector()
    };
    let err = failing
        .protect_file(&file, &Options::default())
        .expect_err("the registry failed");
    assert!(err.to_string().contains("busy"), "{err}");
    assert_ne!(read(&file.path), before, "the file was already wrapped");
    let report = fx
        .protector()
        .unprotect_file(&file, &Options::default())
        .expect("unprotect");
    assert!(report.changed, "{report:?}");
    assert_eq!(read(&file.path), before, "restored byte for byte");
}

#[test]
fn a_project_file_is_restored_however_its_path_is_spelled_and_wherever_it_lives() {
    let fx = Fixture::new("linux-all");
    let file = fx
        .files()
        .into_iter()
        .find(|f| f.project.is_some())
        .expect("the fixture's project file");
    let before = read(&file.path);
    let opts = Options {
        yes: true,
        ..Options::default()
    };
    fx.protector().protect_file(&file, &opts).expect("protect");
    assert_ne!(read(&file.path), before);

    // No editor lists the project: its protection is remembered.
    let state = StateDir {
        home: fx.root.join("gh"),
    };
    let remembered = state.protected_projects(file.client.key).unwrap();
    assert_eq!(remembered, [fx.root.join("project")]);
    let found = config_files(file.client, &fx.dirs, &all_projects(&fx.dirs, &remembered));
    assert!(
        found.iter().any(|f| f.path == file.path),
        "the remembered project's file is found: {:?}",
        found.iter().map(|f| &f.path).collect::<Vec<_>>()
    );
    assert!(state.protected_projects("cursor").unwrap().is_empty());

    // The same file by another path.
    std::fs::create_dir_all(fx.root.join("project/sub")).unwrap();
    let name = file.path.file_name().unwrap();
    let respelled = ConfigFile {
        path: fx.root.join("project/sub/..").join(name),
        ..file.clone()
    };
    let report = fx
        .protector()
        .unprotect_file(&respelled, &opts)
        .expect("unprotect");
    assert!(report.changed, "{report:?}");
    assert_eq!(read(&file.path), before, "restored byte for byte");
    let backups = std::fs::read_dir(fx.root.join("gh/backups"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(backups, 0, "the file's backups went with its protection");
}

/// A CRLF file keeps CRLF lines where protect adds a line (an `args` array
/// or items on lines of their own), and comes back byte for byte.
#[test]
fn a_crlf_json_file_gets_crlf_lines() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let opts = Options {
        yes: true,
        ..Options::default()
    };
    let mut checked = 0;
    for f in fx.files() {
        let lf = read(&f.path);
        if f.path.extension().is_none_or(|e| e != "json") || lf.contains('\r') {
            continue;
        }
        let crlf = lf.replace('\n', "\r\n");
        std::fs::write(&f.path, &crlf).unwrap();
        let report = p.protect_file(&f, &opts).unwrap();
        if !report.changed {
            continue;
        }
        let wrapped = read(&f.path);
        let bare = wrapped
            .match_indices('\n')
            .filter(|(at, _)| !wrapped[..*at].ends_with('\r'))
            .count();
        assert_eq!(bare, 0, "{}: a bare LF in\n{wrapped}", f.path.display());
        p.unprotect_file(&f, &opts).unwrap();
        assert_eq!(read(&f.path), crlf, "{}", f.path.display());
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} JSON files were protected");
}

/// A Codex file keeps its comments inside `args`, its CRLF lines and its
/// byte-order mark through protect, and through an unprotect that cannot
/// restore bytes (Codex changed the file meanwhile).
#[test]
fn a_codex_file_keeps_its_array_comments_line_ends_and_bom() {
    let fx = Fixture::new("linux-all");
    let p = fx.protector();
    let codex = client_file(&fx, "codex");
    let args = "args = [\r\n  # the entry point\r\n  \"server.js\",\r\n  \"--port\", # default 1\r\n  \"1\",\r\n]";
    let original =
        format!("\u{feff}# Codex\r\n[mcp_servers.local]\r\ncommand = \"node\"\r\n{args}\r\n");
    std::fs::write(&codex.path, &original).unwrap();
    p.protect_file(&codex, &Options::default()).unwrap();
    let wrapped = read(&codex.path);
    assert!(wrapped.starts_with('\u{feff}'), "{wrapped:?}");
    assert!(!wrapped.replace("\r\n", "").contains('\n'), "{wrapped:?}");
    for comment in ["# the entry point", "# default 1"] {
        assert!(wrapped.contains(comment), "{comment} kept: {wrapped}");
    }
    assert!(
        wrapped.contains("\"wrap\"") && wrapped.contains("\"node\""),
        "{wrapped}"
    );
    // Codex adds a table: the bytes can no longer be restored as they were.
    let edited = format!("{wrapped}[projects.\"/w\"]\r\ntrust_level = \"trusted\"\r\n");
    std::fs::write(&codex.path, &edited).unwrap();
    p.unprotect_file(&codex, &Options::default()).unwrap();
    let restored = read(&codex.path);
    assert_eq!(
        restored,
        format!("{original}[projects.\"/w\"]\r\ntrust_level = \"trusted\"\r\n"),
        "the entry as written, the edit kept"
    );
}

/// A hard-linked config is not protected (a rewrite would leave the other
/// name with the secrets, read unprotected); nothing is written or moved.
/// One linked after protect is unprotected in place: both names restored.
#[cfg(unix)]
#[test]
fn a_hard_linked_config_is_refused_and_unprotected_in_place() {
    let fx = Fixture::new("linux-all");
    let text = "{\"mcpServers\": {\"gh\": {\"command\": \"npx\", \"args\": [\"-y\", \"gh-mcp\"], \
        \"env\": {\"GITHUB_TOKEN\": \"ghp_0123456789abcdefghijABCDEFGHIJ\"}}}}\n";
    let p = fx.protector();
    let cursor = client_file(&fx, "cursor");
    std::fs::write(&cursor.path, text).unwrap();
    let other = fx.root.join("dotfiles-mcp.json");
    std::fs::hard_link(&cursor.path, &other).unwrap();
    let err = p.protect_file(&cursor, &Options::default()).unwrap_err();
    assert!(err.to_string().contains("2 hard links"), "{err}");
    assert_eq!(read(&cursor.path), text);
    assert!(fx.vault.is_empty(), "no secret moved");

    std::fs::remove_file(&other).unwrap();
    p.protect_file(&cursor, &Options::default()).unwrap();
    std::fs::hard_link(&cursor.path, &other).unwrap();
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(read(&cursor.path), text, "restored byte for byte");
    assert_eq!(read(&other), text, "through both names");
}

/// An env value that is a URL with a password, or an `Authorization`
/// value, moves to the keyring whole, whatever the variable's name;
/// unprotect puts it back byte for byte.
#[test]
fn connection_strings_and_bearer_values_in_env_move_to_the_keyring() {
    let fx = Fixture::new("linux-all");
    let text = "{\"mcpServers\": {\"mongo\": {\"command\": \"npx\", \"args\": [\"-y\", \"mongodb-mcp-server\"], \
        \"env\": {\"MDB_MCP_CONNECTION_STRING\": \"mongodb+srv://admin:Hunter2Pass@c.example.net/app\", \
        \"UPSTREAM_AUTHORIZATION\": \"Bearer 9f8e7d6c5b4a3210\", \"LOG_LEVEL\": \"debug\"}}}}\n";
    let (p, cursor) = protected_cursor(&fx, text);
    let after = read(&cursor.path);
    for secret in ["Hunter2Pass", "9f8e7d6c5b4a3210"] {
        assert!(!after.contains(secret), "{secret} left in {after}");
    }
    assert!(after.contains("debug"), "{after}");
    let v: serde_json::Value = serde_json::from_str(&after).unwrap();
    let id = wrapped_id(&v, "mongo");
    let moved = fx
        .vault
        .get(&id, "MDB_MCP_CONNECTION_STRING")
        .unwrap()
        .unwrap();
    assert_eq!(
        moved.expose(),
        "mongodb+srv://admin:Hunter2Pass@c.example.net/app"
    );
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(read(&cursor.path), text, "restored byte for byte");
}

/// `mcp-remote`'s bearer token, given as a header argument, moves to the
/// keyring like any argument secret; unprotect puts it back byte for byte.
#[test]
fn a_header_argument_moves_its_credentials_to_the_keyring() {
    let fx = Fixture::new("linux-all");
    let text = "{\"mcpServers\": {\"remote\": {\"command\": \"npx\", \"args\": [\"mcp-remote\", \
        \"https://mcp.example/sse\", \"--header\", \"Authorization: Bearer sk_live_Canary0123456789\"]}}}\n";
    let (p, cursor) = protected_cursor(&fx, text);
    let after = read(&cursor.path);
    assert!(!after.contains("sk_live_Canary0123456789"), "{after}");
    assert!(
        after.contains("Authorization: Bearer {{vault:AUTHORIZATION}}"),
        "{after}"
    );
    p.unprotect_file(&cursor, &Options::default()).unwrap();
    assert_eq!(read(&cursor.path), text, "restored byte for byte");
}

//! gatehouse-e2e: end-to-end tests that run the real `gatehouse` binary
//! against real third-party MCP peers (npm `server-everything`, PyPI `mcp<2`
//! servers and client) installed by `scripts/install-peers.sh`.
//!
//! Key types: [`Peers`] (where the peers live; a missing install FAILS the
//! test with the command to run), [`gatehouse_bin`] (builds the debug binary
//! once per test process), [`Sandbox`] (a private `GATEHOUSE_HOME` and `HOME`
//! per test), [`Driver`] (the Python `mcp` client driven one JSON command per
//! line, see `tests/clients/driver.py`), [`spawn_wrap`] / [`Reaped`] (wrap
//! on raw pipes, killed when dropped), [`wait_until`] (poll a condition).
//!
//! **Invariant:** nothing here skips silently: every missing prerequisite is
//! a panic that says how to provide it; no test shares state with another
//! (each gets its own temp homes).
//!
//! Binary location: `GATEHOUSE_BIN` when set; otherwise the test runs
//! `$CARGO build -p gatehouse-cli` once (cheap when up to date, so the
//! binary always matches the checkout) and uses
//! `$CARGO_TARGET_DIR/debug/gatehouse` (default `<workspace>/target`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long one driver command may take before the test fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// How long an event may take to reach the database after the client saw
/// the answer it belongs to.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The workspace root (parent of this package).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `tests/` (this package's folder).
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the real peers are installed.
pub struct Peers {
    pub dir: PathBuf,
}

impl Peers {
    /// Finds the peers (`GATEHOUSE_PEERS` or `~/.cache/gatehouse-peers`);
    /// panics with the install command when they are missing.
    pub fn locate() -> Peers {
        let dir = std::env::var_os("GATEHOUSE_PEERS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").expect("HOME is set");
                PathBuf::from(home).join(".cache/gatehouse-peers")
            });
        let peers = Peers { dir };
        for needed in [peers.python(), peers.everything(), peers.filesystem()] {
            assert!(
                needed.exists(),
                "end-to-end peer missing: {} — run scripts/install-peers.sh \
                 (set GATEHOUSE_PEERS if you installed them elsewhere)",
                needed.display()
            );
        }
        peers
    }

    /// The venv's Python, which has `mcp` 1.30 (`mcp<2`).
    pub fn python(&self) -> PathBuf {
        self.dir.join("venv/bin/python")
    }

    /// The real Claude Code CLI (`@anthropic-ai/claude-code`, a native
    /// binary); panics with the install command when missing.
    pub fn claude(&self) -> PathBuf {
        let p = self.dir.join("npm/node_modules/.bin/claude");
        assert!(
            p.exists(),
            "end-to-end peer missing: {} — run scripts/install-peers.sh",
            p.display()
        );
        p
    }

    /// server-everything's entry point (run with `node`).
    pub fn everything(&self) -> PathBuf {
        self.dir
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    }

    /// server-filesystem's entry point (run with `node`).
    pub fn filesystem(&self) -> PathBuf {
        self.dir
            .join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
    }

    /// `node <server-everything>` as an argv.
    pub fn everything_server(&self) -> Vec<String> {
        vec!["node".into(), self.everything().display().to_string()]
    }

    /// `node <server-filesystem> DIR…` as an argv: the real filesystem
    /// server, allowed to read below `dirs`.
    pub fn filesystem_server(&self, dirs: &[&Path]) -> Vec<String> {
        let mut argv = vec!["node".into(), self.filesystem().display().to_string()];
        argv.extend(dirs.iter().map(|d| d.display().to_string()));
        argv
    }

    /// The command line of a fixture server under `tests/servers/`.
    pub fn py_server(&self, script: &str, args: &[&str]) -> Vec<String> {
        let mut argv = vec![
            self.python().display().to_string(),
            tests_dir()
                .join("servers")
                .join(script)
                .display()
                .to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        argv
    }
}

/// The `gatehouse` binary, built once per test process.
pub fn gatehouse_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("GATEHOUSE_BIN") {
            return PathBuf::from(bin);
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "gatehouse-cli"])
            .current_dir(workspace_root())
            .status()
            .expect("run cargo build -p gatehouse-cli");
        assert!(status.success(), "cargo build -p gatehouse-cli failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        let bin = target.join("debug/gatehouse");
        assert!(bin.exists(), "built binary not found at {}", bin.display());
        bin
    })
    .clone()
}

/// Private homes for one test: `GATEHOUSE_HOME` and a fake user `HOME` (so
/// no real client config on this machine counts as protected).
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("user")).expect("fake HOME");
        Sandbox { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn gatehouse_home(&self) -> PathBuf {
        self.dir.path().join("gh")
    }

    /// Runs `statements` against the sandbox's database with the `sqlite3`
    /// CLI: a test editing rows the way another process could.
    pub fn write_db(&self, statements: &str) {
        self.sqlite3(&[], statements);
    }

    /// Runs `query` read-only against the sandbox's database; its output.
    pub fn query_db(&self, query: &str) -> String {
        self.sqlite3(&["-readonly"], query)
    }

    fn sqlite3(&self, flags: &[&str], sql: &str) -> String {
        let out = Command::new("sqlite3")
            // A wrap that exits folds the write-ahead log in: wait it out.
            .args(["-cmd", ".timeout 5000"])
            .args(flags)
            .arg(self.gatehouse_home().join("gatehouse.db"))
            .arg(sql)
            .output()
            .expect("sqlite3 runs");
        assert!(
            out.status.success(),
            "sqlite3 {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The fake user `HOME` every process of this test sees.
    pub fn user_home(&self) -> PathBuf {
        self.dir.path().join("user")
    }

    /// Writes `$GATEHOUSE_HOME/policy.toml`.
    pub fn write_policy(&self, text: &str) {
        let home = self.gatehouse_home();
        std::fs::create_dir_all(&home).expect("create GATEHOUSE_HOME");
        std::fs::write(home.join("policy.toml"), text).expect("write policy.toml");
    }

    /// Environment every process of this test gets on top of the inherited one.
    pub fn envs(&self) -> Vec<(String, String)> {
        vec![
            (
                "GATEHOUSE_HOME".into(),
                self.gatehouse_home().display().to_string(),
            ),
            ("HOME".into(), self.user_home().display().to_string()),
        ]
    }

    /// `gatehouse wrap --server ID [--pass-env …] -- argv…` as an argv.
    pub fn wrap_argv(&self, server: &str, pass_env: &[&str], argv: &[String]) -> Vec<String> {
        let mut out = vec![
            gatehouse_bin().display().to_string(),
            "wrap".into(),
            "--server".into(),
            server.into(),
        ];
        if !pass_env.is_empty() {
            out.push("--pass-env".into());
            out.push(pass_env.join(","));
        }
        out.push("--".into());
        out.extend(argv.iter().cloned());
        out
    }

    /// Runs a `gatehouse` subcommand to completion.
    pub fn gatehouse(&self, args: &[&str]) -> Output {
        Command::new(gatehouse_bin())
            .args(args)
            .envs(self.envs())
            .output()
            .expect("run gatehouse")
    }

    /// `gatehouse events --json` parsed, one object per line.
    pub fn events(&self) -> Vec<Value> {
        let out = self.gatehouse(&["events", "--json", "--limit", "1000"]);
        assert!(
            out.status.success(),
            "gatehouse events --json failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("events --json prints JSON lines"))
            .collect()
    }

    /// Polls `gatehouse events --json` until an event satisfies `matches`
    /// (wrap records off the hot path, so an event may land just after the
    /// client saw the answer) and returns it; fails after [`EVENT_TIMEOUT`]
    /// with every event seen.
    pub fn wait_for_event(&self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        loop {
            let events = self.events();
            if let Some(e) = events.iter().find(|e| matches(e)) {
                return e.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no event {what} within {EVENT_TIMEOUT:?}; recorded: {events:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The Python `mcp` client (`tests/clients/driver.py`) around one server
/// command, driven one JSON command per line.
pub struct Driver {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// The server's `initialize` result as the SDK parsed it.
    pub initialize: Value,
}

/// How [`Driver::try_start`] runs the client.
#[derive(Default, Clone, Copy)]
pub struct DriverOptions<'a> {
    /// Record every raw server→client line here (`tests/clients/tee.py`).
    pub tee: Option<&'a Path>,
    /// Variables set on top of the sandbox environment.
    pub env: &'a [(&'a str, &'a str)],
    /// Write the client's stderr, which is also the server command's
    /// (wrap's) stderr, to this file instead of the test's stderr.
    pub stderr: Option<&'a Path>,
    /// Start from an empty environment (only `env`), the way clients that
    /// pass their servers an allowlist do; the sandbox variables are then
    /// not added either.
    pub clear_env: bool,
    /// Working directory of the client (and so of the server command).
    pub cwd: Option<&'a Path>,
    /// Declare no elicitation capability (a client that cannot show input
    /// requests; `gatehouse wrap` sends them to the dashboard inbox).
    pub no_elicitation: bool,
}

impl Driver {
    /// Starts the client; `tee` records every raw server→client line.
    /// Panics when `initialize` fails.
    pub fn start(
        peers: &Peers,
        sandbox: &Sandbox,
        argv: &[String],
        tee: Option<&Path>,
        extra_env: &[(&str, &str)],
    ) -> Driver {
        let opts = DriverOptions {
            tee,
            env: extra_env,
            ..DriverOptions::default()
        };
        match Driver::try_start(peers, sandbox, argv, opts) {
            Ok(driver) => driver,
            Err(error) => panic!("initialize was refused: {error}"),
        }
    }

    /// Starts the client. `Err` carries the JSON-RPC error (`code`,
    /// `message`, `data`) the client received for `initialize`; the client
    /// has exited by then.
    pub fn try_start(
        peers: &Peers,
        sandbox: &Sandbox,
        argv: &[String],
        opts: DriverOptions<'_>,
    ) -> Result<Driver, Value> {
        let mut cmd = Command::new(peers.python());
        cmd.arg(tests_dir().join("clients/driver.py"));
        if let Some(tee) = opts.tee {
            cmd.arg("--tee").arg(tee);
        }
        if opts.no_elicitation {
            cmd.arg("--no-elicitation");
        }
        let stderr = match opts.stderr {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("create the stderr file")),
            None => Stdio::inherit(),
        };
        if opts.clear_env {
            cmd.env_clear();
        } else {
            cmd.envs(sandbox.envs());
        }
        if let Some(cwd) = opts.cwd {
            cmd.current_dir(cwd);
        }
        cmd.arg("--")
            .args(argv)
            .envs(opts.env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = cmd.spawn().expect("spawn the Python mcp client");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut driver = Driver {
            child,
            stdin,
            lines: rx,
            initialize: Value::Null,
        };
        let first = driver.read_line("initialize");
        if first["ok"] != true {
            let error = first["initialize_error"].clone();
            assert!(
                error.is_object(),
                "the client failed before initialize answered: {first}"
            );
            driver.wait_exit();
            return Err(error);
        }
        driver.initialize = first["initialize"].clone();
        Ok(driver)
    }

    fn read_line(&mut self, what: &str) -> Value {
        let line = self.lines.recv_timeout(STEP_TIMEOUT).unwrap_or_else(|_| {
            let _ = self.child.kill();
            panic!("the mcp client gave no answer to {what} within {STEP_TIMEOUT:?}")
        });
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("client printed non-JSON {line:?}: {e}"))
    }

    fn read_answer(&mut self, what: &str) -> Value {
        let v = self.read_line(what);
        assert_eq!(v["ok"], true, "client command {what} failed: {v}");
        v
    }

    /// Sends one command and returns its answer (panics when `ok` is false).
    pub fn send(&mut self, cmd: Value) -> Value {
        let stdin = self.stdin.as_mut().expect("client stdin open");
        writeln!(stdin, "{cmd}").expect("write to client");
        stdin.flush().expect("flush client stdin");
        self.read_answer(&cmd.to_string())
    }

    /// Sends one command without waiting; [`Driver::finish`] reads its answer
    /// (e.g. a call that waits for a person in the dashboard).
    pub fn begin(&mut self, cmd: Value) {
        let stdin = self.stdin.as_mut().expect("client stdin open");
        writeln!(stdin, "{cmd}").expect("write to client");
        stdin.flush().expect("flush client stdin");
    }

    /// The answer to the command sent with [`Driver::begin`].
    pub fn finish(&mut self, what: &str) -> Value {
        self.read_answer(what)
    }

    pub fn list_tools(&mut self) -> Vec<Value> {
        let v = self.send(serde_json::json!({"op": "list_tools"}));
        v["tools"].as_array().cloned().unwrap_or_default()
    }

    pub fn call(&mut self, name: &str, args: Value) -> Value {
        let v = self.send(serde_json::json!({"op": "call", "name": name, "args": args}));
        v["result"].clone()
    }

    /// Whether `method` arrived (since the last wait for it) within `secs`.
    pub fn wait_notification(&mut self, method: &str, secs: f64) -> bool {
        let v = self.send(serde_json::json!({
            "op": "wait_notification", "method": method, "timeout": secs
        }));
        v["seen"] == true
    }

    /// Ends the session and waits for the client (and the server it ran).
    pub fn quit(mut self) {
        let _ = self.send(serde_json::json!({"op": "quit"}));
        self.wait_exit();
    }

    fn wait_exit(&mut self) {
        drop(self.stdin.take());
        let child = &mut self.child;
        wait_until("the mcp client exits", Duration::from_secs(30), || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The JSON lines of a wire log written by `tests/clients/tee.py`.
pub fn read_frames(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read wire log {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("wire log line is not JSON ({e}): {l:?}"))
        })
        .collect()
}

/// Text of every `content[].text` item of a tool result, joined.
pub fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

/// Sends signal `name` (e.g. `"TERM"`) to `pid` with the `kill` command
/// (`unsafe` is denied workspace-wide, so no `libc::kill`).
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// A child process killed (and reaped) when the test ends, pass or panic.
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// wrap with piped stdio around `argv` (from [`Sandbox::wrap_argv`]); stderr
/// is discarded so a leaked process can never hold the test runner's output.
pub fn spawn_wrap(sb: &Sandbox, argv: &[String]) -> Reaped {
    Reaped(
        Command::new(&argv[0])
            .args(&argv[1..])
            .envs(sb.envs())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn gatehouse wrap"),
    )
}

/// A raw `initialize` request, one line.
pub const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"0"}}}"#;

/// Polls `done` every 25 ms; fails the test after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

//! End-to-end test of the real `gatehouse-app` binary under Xvfb with a
//! private session bus (`scripts/tray-e2e.sh` sets both up):
//!
//! - the window is driven through tauri-driver + WebKitWebDriver (fantoccini);
//! - this test plays the desktop's tray host (`org.kde.StatusNotifierWatcher`)
//!   and opens/clicks the tray menu over `com.canonical.dbusmenu`, exactly as
//!   a panel does;
//! - it plays the notification daemon (`org.freedesktop.Notifications`),
//!   receives the notification naming the server, and clicks it;
//! - it quits through the tray menu and checks that no process is left.
//!
//! Skipped unless `GATEHOUSE_TRAY_E2E=1`. Screenshots go to
//! `artifacts/screenshots/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use zbus::zvariant::{OwnedValue, Structure, Value};

const APP: &str = env!("CARGO_BIN_EXE_gatehouse-app");
const STEP: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- bus fakes

#[derive(Default)]
struct Seen {
    /// (service bus name, object path) of registered tray items
    items: Vec<(String, String)>,
    /// (id, summary, body) of notifications
    notes: Vec<(u32, String, String)>,
}

struct Watcher(Arc<Mutex<Seen>>);

#[zbus::interface(name = "org.kde.StatusNotifierWatcher")]
impl Watcher {
    fn register_status_notifier_item(
        &self,
        service: &str,
        #[zbus(header)] hdr: zbus::message::Header<'_>,
    ) {
        let sender = hdr.sender().map(|s| s.to_string()).unwrap_or_default();
        // libayatana passes its object path; others pass a bus name
        let item = if service.starts_with('/') {
            (sender, service.to_string())
        } else {
            (service.to_string(), "/StatusNotifierItem".to_string())
        };
        self.0.lock().unwrap().items.push(item);
    }

    fn register_status_notifier_host(&self, _service: &str) {}

    #[zbus(property)]
    fn registered_status_notifier_items(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap();
        seen.items.iter().map(|(s, p)| format!("{s}{p}")).collect()
    }

    #[zbus(property)]
    fn is_status_notifier_host_registered(&self) -> bool {
        true
    }

    #[zbus(property)]
    fn protocol_version(&self) -> i32 {
        0
    }
}

struct Notifications(Arc<Mutex<Seen>>);

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Notifications {
    fn get_capabilities(&self) -> Vec<String> {
        vec!["body".into(), "actions".into()]
    }

    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        _app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        _actions: Vec<String>,
        _hints: HashMap<String, OwnedValue>,
        _expire_timeout: i32,
    ) -> u32 {
        let mut seen = self.0.lock().unwrap();
        let id = u32::try_from(seen.notes.len()).unwrap() + 1;
        seen.notes.push((id, summary, body));
        id
    }

    fn close_notification(&self, _id: u32) {}

    fn get_server_information(&self) -> (String, String, String, String) {
        (
            "gatehouse-e2e".into(),
            "gatehouse".into(),
            "1".into(),
            "1.2".into(),
        )
    }
}

// ---------------------------------------------------------------- helpers

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("artifacts/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Stops tauri-driver with SIGTERM (it then stops WebKitWebDriver; SIGKILL
/// would orphan it and keep the test's pipes open).
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// Pids of running processes whose executable is `exe`.
fn processes_of(exe: &Path) -> Vec<u32> {
    let want = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(target) = std::fs::read_link(entry.path().join("exe")) {
            if target == want {
                out.push(pid);
            }
        }
    }
    out
}

/// One tray menu entry as dbusmenu exports it.
#[derive(Debug, Clone)]
struct Entry {
    id: i32,
    label: String,
    toggle: Option<i32>,
}

fn walk(v: &Value<'_>, out: &mut Vec<Entry>) {
    match v {
        Value::Value(inner) => walk(inner, out),
        Value::Structure(s) => {
            let f = s.fields();
            let (Some(Value::I32(id)), Some(Value::Dict(props)), Some(Value::Array(children))) =
                (f.first(), f.get(1), f.get(2))
            else {
                return;
            };
            let mut entry = Entry {
                id: *id,
                label: String::new(),
                toggle: None,
            };
            for (k, val) in props.iter() {
                let (Value::Str(k), Value::Value(val)) = (k, val) else {
                    continue;
                };
                match (k.as_str(), val.as_ref()) {
                    ("label", Value::Str(s)) => entry.label = s.as_str().replace('_', ""),
                    ("toggle-state", Value::I32(t)) => entry.toggle = Some(*t),
                    _ => {}
                }
            }
            out.push(entry);
            for child in children.inner() {
                walk(child, out);
            }
        }
        _ => {}
    }
}

struct TrayMenu<'a> {
    proxy: zbus::blocking::Proxy<'a>,
}

impl TrayMenu<'_> {
    fn open(conn: &zbus::blocking::Connection, service: &str, item_path: &str) -> Self {
        let item = zbus::blocking::Proxy::new(
            conn,
            service.to_string(),
            item_path.to_string(),
            "org.kde.StatusNotifierItem",
        )
        .unwrap();
        let menu: zbus::zvariant::OwnedObjectPath =
            item.get_property("Menu").expect("tray item exports a Menu");
        let proxy =
            zbus::blocking::Proxy::new(conn, service.to_string(), menu, "com.canonical.dbusmenu")
                .unwrap();
        TrayMenu { proxy }
    }

    fn entries(&self) -> Vec<Entry> {
        let reply = self
            .proxy
            .call_method("GetLayout", &(0i32, -1i32, Vec::<String>::new()))
            .expect("GetLayout");
        let body = reply.body();
        let layout: Structure<'_> = body.deserialize().expect("layout (u(ia{sv}av))");
        let mut out = Vec::new();
        if let Some(root) = layout.fields().get(1) {
            walk(root, &mut out);
        }
        out
    }

    fn find(&self, label: &str) -> Option<Entry> {
        self.entries().into_iter().find(|e| e.label == label)
    }

    /// Clicks `label` until `done` holds: a click can land on a layout the
    /// app replaced a moment before (it redraws the menu as state changes),
    /// which a panel would answer by the person clicking again.
    fn click_until(&self, label: &str, mut done: impl FnMut(&Self) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < STEP, "clicking {label:?} had no effect");
            self.click(label);
            let wait = Instant::now();
            while !done(self) && wait.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn starts_with(&self, prefix: &str) -> Option<Entry> {
        self.entries()
            .into_iter()
            .find(|e| e.label.starts_with(prefix))
    }

    fn click(&self, label: &str) {
        let entry = wait_for(&format!("tray entry {label:?}"), STEP, || self.find(label));
        let data = Value::I32(0);
        self.proxy
            .call_method("Event", &(entry.id, "clicked", &data, 0u32))
            .expect("dbusmenu Event");
    }
}

/// The MCP server entries of a client config (`mcpServers`).
fn servers_in(config: &Path) -> serde_json::Map<String, serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(config).unwrap())
        .unwrap_or_else(|e| panic!("{} is JSON: {e}", config.display()));
    v["mcpServers"].as_object().cloned().unwrap_or_default()
}

/// Every entry of the config runs `launcher wrap … -- <original>`.
fn all_wrapped(config: &Path, launcher: &Path) -> bool {
    let servers = servers_in(config);
    !servers.is_empty()
        && servers
            .values()
            .all(|e| e["command"] == launcher.display().to_string() && e["args"][0] == "wrap")
}

/// A protected entry started the way its client starts it, spoken to over
/// stdio as a client does (newline-delimited JSON-RPC).
struct Wrapped {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: i64,
}

impl Wrapped {
    fn start(entry: &serde_json::Value, env: &[(&str, &Path)]) -> Wrapped {
        let mut cmd = Command::new(entry["command"].as_str().unwrap());
        cmd.args(
            entry["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap()),
        )
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("the protected entry starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut w = Wrapped {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        let init = w.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tray-e2e", "version": "1"}}),
        );
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        w.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let list = w.request("tools/list", json!({}));
        assert!(list["result"]["tools"].is_array(), "{list}");
        w
    }

    fn send(&mut self, msg: serde_json::Value) {
        use std::io::Write;
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and returns its answer (notifications are skipped).
    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(
                n > 0,
                "the wrapped server closed stdout before answering {method}"
            );
            let msg: serde_json::Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// A `tools/call` of the fixture server's echo tool.
    fn echo(&mut self, text: &str) -> serde_json::Value {
        let r = self.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": text}}),
        );
        r["result"].clone()
    }

    fn quit(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

async fn text_of(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Waits until WebKit has painted the current DOM (two animation frames),
/// so a screenshot shows what the page says rather than a stale frame.
async fn painted(c: &Client) {
    let done = c
        .execute_async(
            "const cb = arguments[arguments.length - 1];\n\
             requestAnimationFrame(() => requestAnimationFrame(() => cb(true)));",
            vec![],
        )
        .await
        .expect("requestAnimationFrame in the page");
    assert_eq!(done, json!(true));
}

/// Screenshot of the X display (what a person would see) and, for
/// comparison, WebDriver's own snapshot of the page (`*-webdriver.png`).
async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "WebDriver returned a PNG");
    let stem = name.trim_end_matches(".png");
    std::fs::write(artifacts().join(format!("{stem}-webdriver.png")), png).unwrap();
    let status = Command::new("import")
        .args(["-window", "root"])
        .arg(artifacts().join(name))
        .status()
        .expect("ImageMagick import on PATH");
    assert!(status.success(), "X screenshot");
}

// ---------------------------------------------------------------- the test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tray_app_end_to_end() {
    if std::env::var("GATEHOUSE_TRAY_E2E").as_deref() != Ok("1") {
        eprintln!("skipped: set GATEHOUSE_TRAY_E2E=1 (scripts/tray-e2e.sh does)");
        return;
    }
    for var in ["DISPLAY", "DBUS_SESSION_BUS_ADDRESS"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} unset: run under xvfb-run and dbus-run-session (scripts/tray-e2e.sh)"
        );
    }

    // the desktop: tray host and notification daemon on the private session bus
    let seen = Arc::new(Mutex::new(Seen::default()));
    let conn = zbus::blocking::connection::Builder::session()
        .unwrap()
        .name("org.kde.StatusNotifierWatcher")
        .unwrap()
        .name("org.freedesktop.Notifications")
        .unwrap()
        .serve_at("/StatusNotifierWatcher", Watcher(seen.clone()))
        .unwrap()
        .serve_at(
            "/org/freedesktop/Notifications",
            Notifications(seen.clone()),
        )
        .unwrap()
        .build()
        .expect("own the watcher and notification names (is another desktop on this bus?)");

    // a private Gatehouse home, and a user home with two AI clients whose
    // configs launch a stdlib MCP server (Cursor: two entries, Claude
    // Desktop: one); a policy rule blocks echoing an SSH key path
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let user = tmp.path().join("user");
    let xdg = tmp.path().join("xdg");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("policy.toml"),
        "[[rules]]\nid = \"no-ssh\"\ntool_name = \"echo\"\nargument_patterns = [\"**/.ssh/**\"]\ndecision = \"block\"\nreason = \"SSH keys are off limits\"\n",
    )
    .unwrap();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/raw_server.py");
    let entry = |_: &str| json!({"command": "python3", "args": [server.display().to_string()]});
    let cursor_config = user.join(".cursor/mcp.json");
    let claude_config = xdg.join("config/Claude/claude_desktop_config.json");
    for (config, names) in [
        (&cursor_config, &["notes", "evil\u{202E}-notes"][..]),
        (&claude_config, &["files"][..]),
    ] {
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        let servers: serde_json::Map<String, serde_json::Value> =
            names.iter().map(|n| (n.to_string(), entry(n))).collect();
        std::fs::write(
            config,
            serde_json::to_vec_pretty(&json!({ "mcpServers": servers })).unwrap(),
        )
        .unwrap();
    }
    let cursor_before = std::fs::read(&cursor_config).unwrap();
    let claude_before = std::fs::read(&claude_config).unwrap();

    let port = free_port();
    let native = free_port();
    let driver = Driver(
        Command::new("tauri-driver")
            .args([
                "--port",
                &port.to_string(),
                "--native-port",
                &native.to_string(),
            ])
            .env("GATEHOUSE_HOME", &home)
            .env("HOME", &user)
            .env("XDG_DATA_HOME", xdg.join("data"))
            .env("XDG_CONFIG_HOME", xdg.join("config"))
            .env("GATEHOUSE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tauri-driver on PATH (cargo install tauri-driver --locked)"),
    );
    // tauri-driver listens at once but forwards to WebKitWebDriver, which it
    // starts beside itself: a session asked for before that one listens
    // gets its connection closed.
    for (what, port) in [("tauri-driver", port), ("WebKitWebDriver", native)] {
        wait_for(&format!("{what} to listen"), STEP, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
    }

    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("wry"));
    caps.insert("tauri:options".into(), json!({ "application": APP }));
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("WebDriver session (WebKitWebDriver installed? webkit2gtk-driver)");
    let started = Instant::now();

    // 1. the status page renders through IPC
    let title = client.title().await.unwrap();
    assert_eq!(title, "Gatehouse");
    let start = Instant::now();
    let summary = loop {
        let s = text_of(&client, "#summary").await;
        if s != "Loading…" || start.elapsed() > STEP {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(summary, "Gatehouse — protected", "status command answered");
    painted(&client).await;
    screenshot(&client, "tray-status.png").await;

    // the stable launcher was written and points at the CLI beside the app
    let launcher = xdg.join("data/gatehouse/bin/gatehouse");
    let script = std::fs::read_to_string(&launcher).expect("launcher installed");
    let cli = Path::new(APP).with_file_name("gatehouse");
    assert!(
        script.contains(&format!("GATEHOUSE_CLI='{}'", cli.display())),
        "launcher targets {}: {script}",
        cli.display()
    );

    // 2. protect Cursor from the window: its real config is rewritten to run
    //    every entry through the stable launcher
    client
        .find(Locator::Css("#client-cursor"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for("Cursor protected via the window", STEP, || {
        all_wrapped(&cursor_config, &launcher).then_some(())
    });

    // 3. open the tray menu as a panel does, and protect Claude Desktop from it
    let (service, path) = wait_for("the tray icon to register with the watcher", STEP, || {
        seen.lock().unwrap().items.first().cloned()
    });
    let menu = TrayMenu::open(&conn, &service, &path);
    let labels: Vec<String> = menu.entries().into_iter().map(|e| e.label).collect();
    for want in [
        "Open dashboard",
        "Protect",
        "Protect all",
        "Pause protection (audit only)",
        "For 1 h (default)",
        "Start at login",
        "Quit Gatehouse",
    ] {
        assert!(
            labels.iter().any(|l| l == want),
            "tray menu lacks {want:?}: {labels:?}"
        );
    }
    let cursor = wait_for("Cursor checked in the tray", STEP, || {
        menu.find("Cursor (2 servers)")
            .filter(|e| e.toggle == Some(1))
    });
    assert_eq!(cursor.toggle, Some(1), "window and tray agree");
    assert!(
        !all_wrapped(&claude_config, &launcher),
        "Claude Desktop not yet protected"
    );
    menu.click_until("Claude Desktop (1 server)", |_| {
        all_wrapped(&claude_config, &launcher)
    });

    // 4. Cursor starts a protected entry (launcher -> gatehouse wrap -> the
    //    server) and the model asks it to echo an SSH key path: the wrap
    //    blocks the call and records it; the app notifies, naming the
    //    server (its bidi override stripped)
    let wrap_env = [("HOME", user.as_path()), ("GATEHOUSE_HOME", home.as_path())];
    let evil = servers_in(&cursor_config)["evil\u{202E}-notes"].clone();
    let mut wrapped = Wrapped::start(&evil, &wrap_env);
    let r = wrapped.echo("/home/u/.ssh/id_ed25519");
    assert_eq!(r["isError"], true, "the policy blocks it: {r}");
    let (note_id, summary, body) = wait_for("a notification", STEP, || {
        seen.lock().unwrap().notes.first().cloned()
    });
    assert_eq!(
        summary, "Gatehouse blocked evil-notes",
        "names the server, no bidi"
    );
    assert!(
        body.starts_with("high · rules.no-ssh") && body.ends_with("tool echo"),
        "{body}"
    );
    let menu_after = wait_for("attention shown in the tray menu", STEP, || {
        menu.find("Open dashboard (1 need attention)")
    });
    assert!(menu_after.id > 0);

    // pause from the tray: the running wrap follows it (the same call passes,
    // recorded as audit), and Resume from the tray enforces again
    menu.click_until("For 1 h (default)", |m| {
        m.starts_with("Resume protection").is_some()
    });
    let start = Instant::now();
    while wrapped.echo("/home/u/.ssh/id_ed25519")["isError"] == true {
        if start.elapsed() > STEP {
            let db = Command::new("sqlite3")
                .arg(home.join("gatehouse.db"))
                .arg("select key, substr(value,1,60) from meta; select id, time_ms, event_type, action, reason from events order by id desc limit 8;")
                .output()
                .unwrap();
            panic!(
                "wrap did not follow the pause at {}: {}\n{}\nnotes {:?}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis(),
                String::from_utf8_lossy(&db.stdout),
                String::from_utf8_lossy(&db.stderr),
                seen.lock().unwrap().notes
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let resume = menu.starts_with("Resume protection").unwrap();
    menu.click_until(&resume.label, |m| m.find("For 1 h (default)").is_some());
    wait_for("the running wrap to enforce again", STEP, || {
        (wrapped.echo("/home/u/.ssh/id_ed25519")["isError"] == true).then_some(())
    });
    wrapped.quit();

    // 5. clicking the notification opens the signed-in dashboard at the item
    conn.emit_signal(
        None::<&str>,
        "/org/freedesktop/Notifications",
        "org.freedesktop.Notifications",
        "ActionInvoked",
        &(note_id, "default"),
    )
    .unwrap();
    let start = Instant::now();
    let url = loop {
        let url = client.current_url().await.unwrap();
        if url.scheme() == "http" || start.elapsed() > STEP {
            break url;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        url.host_str(),
        Some("127.0.0.1"),
        "dashboard on loopback: {url}"
    );
    // the one-time link signed the window in: the dashboard shows the block
    // the wrap process recorded, naming its server; the token is gone from
    // the address bar
    let start = Instant::now();
    let main = loop {
        let text = client
            .find(Locator::Css("#main"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap_or_default();
        if text.contains("SSH keys are off limits") || start.elapsed() > STEP {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        main.contains("SSH keys are off limits") && main.contains("notes"),
        "signed-in dashboard lists the block: {main}"
    );
    let nav = text_of(&client, "#nav").await;
    assert!(nav.contains("Sign out"), "signed in: {nav}");
    let url = client.current_url().await.unwrap();
    assert!(
        url.fragment().is_none() && url.path() != "/signin",
        "sign-in token dropped from the address bar: {url}"
    );
    painted(&client).await;
    screenshot(&client, "tray-dashboard.png").await;

    // 6. Uninstall from the tray: the page offers to unprotect every client
    //    first; accepted, both configs are restored byte for byte and the
    //    launcher (now unused) is removed
    menu.click("Uninstall Gatehouse…");
    let start = Instant::now();
    let offer = loop {
        match client.find(Locator::Css("#uninstall-unprotect")).await {
            Ok(e) => break e,
            Err(e) => assert!(start.elapsed() < STEP, "no uninstall offer: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        offer.prop("checked").await.unwrap().as_deref(),
        Some("true"),
        "unprotecting first is the default"
    );
    client
        .find(Locator::Css("#uninstall-go"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let start = Instant::now();
    let said = loop {
        let t = text_of(&client, "#uninstall-result").await;
        if !t.is_empty() || start.elapsed() > STEP {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        said.contains("Every client is restored") && said.contains("apt remove"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&cursor_config).unwrap(),
        cursor_before,
        "Cursor restored"
    );
    assert_eq!(
        std::fs::read(&claude_config).unwrap(),
        claude_before,
        "Claude Desktop restored"
    );
    assert!(!launcher.exists(), "the unused launcher is removed");
    painted(&client).await;
    screenshot(&client, "tray-uninstall.png").await;

    // 7. Quit from the tray: the app exits cleanly and nothing is left
    menu.click("Quit Gatehouse");
    wait_for("the app to exit", STEP, || {
        processes_of(Path::new(APP)).is_empty().then_some(())
    });
    assert!(
        !home.join("control.json").exists(),
        "clean exit removes control.json (the control plane shut down in order)"
    );
    let _ = client.close().await;
    drop(driver);

    assert!(
        processes_of(Path::new(APP)).is_empty(),
        "no gatehouse-app process left"
    );
    eprintln!("tray e2e took {:?}", started.elapsed());
}

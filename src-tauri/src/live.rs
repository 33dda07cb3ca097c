//! Starting the real thing: resolve `GATEHOUSE_HOME`, install the stable
//! launcher, become (or find) the one control plane of this user, and build
//! the [`Backend`] the shell talks to.
//!
//! Sources of each part of the backend:
//! - dashboard URL: the in-process control plane (`gatehouse-server`), or the
//!   one already running for this home (`gatehouse up`), through a one-time
//!   sign-in link;
//! - clients and notices: a fixture directory when `GATEHOUSE_APP_FIXTURE`
//!   is set (end-to-end tests and demos), see [`FixtureSource`].

use std::any::Any;
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gatehouse_server::control::{self, Acquired};
use gatehouse_server::{ControlInfo, ServerConfig, ServerHandle};
use gatehouse_store::{
    Action, ConsentKind, ConsentState, EventFilter, Severity as StoreSeverity, Store, StoreOptions,
};

use crate::backend::{Backend, BackendError, Poll};
use crate::launcher;
use crate::menu::ClientItem;
use crate::notify::{Notice, NoticeKind};
use crate::state::Protection;

/// Environment variable naming a fixture directory (see [`FixtureSource`]).
pub const FIXTURE_ENV: &str = "GATEHOUSE_APP_FIXTURE";

/// Why the app cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot use the fixture directory {path}: {reason}")]
    Fixture { path: PathBuf, reason: String },
    #[error("cannot take the control-plane lock in {home}: {reason}")]
    Control { home: PathBuf, reason: String },
    #[error("cannot start the control plane: {0}")]
    Serve(String),
}

/// What [`start`] hands to the shell.
pub struct Started {
    pub backend: Arc<dyn Backend>,
    /// Dropped at exit, in order (server handle, then the control lock).
    pub keep: Vec<Box<dyn Any + Send>>,
}

/// Starts everything the shell needs.
pub fn start() -> Result<Started, StartError> {
    let home = gatehouse_store::home::resolve(None);
    let launcher = install_launcher();
    let mut keep: Vec<Box<dyn Any + Send>> = Vec::new();
    let mut store: Option<Store> = None;
    let control = match control::acquire(&home).map_err(|e| StartError::Control {
        home: home.clone(),
        reason: e.to_string(),
    })? {
        Acquired::Mine(mut lock) => {
            let (handle, opened, watcher) = tauri::async_runtime::block_on(async {
                // opens (and migrates) the shared database, loads the install
                // key and enables client discovery for the dashboard
                let mut config = ServerConfig::open(home.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                let store = config.store.clone();
                // Protect from the dashboard writes the stable launcher into
                // wrapped entries, and moves secrets into the keyring.
                config.gatehouse_exe = launcher;
                config.vault = gatehouse_server::probe_keyring().await;
                // The watcher (auto-protect) uses the same keyring and binary.
                let watch = gatehouse_server::config_watch::WatchSetup {
                    gatehouse_exe: config.gatehouse_exe.clone(),
                    vault: config.vault.clone(),
                    ..Default::default()
                };
                let handle = gatehouse_server::serve(config)
                    .await
                    .map_err(|e| e.to_string())?;
                // Self-heal: wrapped entries whose gatehouse binary is gone
                // point at the launcher.
                if let Some(exe) = watch.gatehouse_exe.clone() {
                    tauri::async_runtime::spawn(gatehouse_server::api::clients::repair_all(
                        store.clone(),
                        home.clone(),
                        exe,
                    ));
                }
                // The config watcher runs only in the one control plane.
                let watcher = gatehouse_server::config_watch::start(&home, store.clone(), watch)
                    .map_err(|e| tracing::warn!(error = %e, "config watcher not started"))
                    .ok()
                    .flatten();
                Ok::<_, String>((handle, store, watcher))
            })
            .map_err(StartError::Serve)?;
            if let Some(watcher) = watcher {
                keep.push(Box::new(watcher));
            }
            store = Some(opened);
            lock.publish(&handle.control_info())
                .map_err(|e| StartError::Serve(e.to_string()))?;
            tracing::info!(url = %handle.base_url(), "control plane listening");
            let handle = Arc::new(handle);
            keep.push(Box::new(handle.clone()));
            keep.push(Box::new(lock));
            ControlPlane::Own(handle)
        }
        Acquired::Running(info) => {
            tracing::info!("using the control plane already running for this home");
            ControlPlane::Other {
                home: home.clone(),
                info: Mutex::new(info),
            }
        }
    };
    let fixture = match std::env::var_os(FIXTURE_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => Some(FixtureSource::open(PathBuf::from(dir))?),
        None => None,
    };
    let store = match store {
        Some(s) => Some(s),
        None => block(Store::open(&home, StoreOptions::control_plane()))
            .map_err(|e| tracing::warn!(error = %e, "database unavailable; no notifications"))
            .ok(),
    };
    let events = match store {
        Some(store) => Some(StoreSource::new(store)?),
        None => None,
    };
    let backend = LiveBackend {
        control,
        fixture,
        events,
        protection: Mutex::new(Protection::Active),
    };
    Ok(Started {
        backend: Arc::new(backend),
        keep,
    })
}

/// Installs the stable `gatehouse` launcher; returns its path (what wrapped
/// entries run).
fn install_launcher() -> Option<PathBuf> {
    let os = launcher::Os::current();
    let env = launcher::Env::from_process();
    let (Some(dir), Ok(exe)) = (launcher::launcher_dir(os, &env), std::env::current_exe()) else {
        tracing::warn!("no launcher directory (HOME unset?); wrapped configs keep their old paths");
        return None;
    };
    let target = launcher::stable_target(os, &exe, &env);
    match launcher::install(&dir, os, &target) {
        Ok((path, what)) => {
            tracing::info!(path = %path.display(), ?what, "launcher");
            Some(path)
        }
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "launcher not installed");
            None
        }
    }
}

enum ControlPlane {
    /// Hosted in this process.
    Own(Arc<ServerHandle>),
    /// Another process (e.g. `gatehouse up`) is the control plane.
    Other {
        home: PathBuf,
        info: Mutex<Option<ControlInfo>>,
    },
}

impl ControlPlane {
    fn signin_url(&self) -> Result<String, BackendError> {
        match self {
            ControlPlane::Own(handle) => Ok(handle.signin_url()),
            ControlPlane::Other { home, info } => {
                let mut info = info.lock().unwrap_or_else(|e| e.into_inner());
                if info.is_none() {
                    *info = control::read_control(home).ok();
                }
                let current = info.as_ref().ok_or_else(|| {
                    BackendError::ControlPlane("control.json not readable".into())
                })?;
                control::request_signin_url(current).map_err(|e| {
                    *info = None; // re-read next time: it may have restarted
                    BackendError::ControlPlane(e.to_string())
                })
            }
        }
    }
}

/// Appends the route to a sign-in link (`/signin#t=…`) as `&next=`; a plain
/// `/` needs nothing.
pub fn signin_with_route(signin: &str, route: &str) -> String {
    if route == "/" || route.is_empty() {
        signin.to_string()
    } else {
        let sep = if signin.contains('#') { '&' } else { '#' };
        format!("{signin}{sep}next={}", percent_encode(route))
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct LiveBackend {
    control: ControlPlane,
    fixture: Option<FixtureSource>,
    events: Option<StoreSource>,
    protection: Mutex<Protection>,
}

impl Backend for LiveBackend {
    fn clients(&self) -> Result<Vec<ClientItem>, BackendError> {
        match &self.fixture {
            Some(f) => f.clients(),
            None => Ok(Vec::new()),
        }
    }

    fn set_client_protected(&self, id: &str, protected: bool) -> Result<(), BackendError> {
        match &self.fixture {
            Some(f) => f.set_client_protected(id, protected),
            None => Err(BackendError::UnknownClient(id.to_string())),
        }
    }

    fn protection(&self) -> Result<Protection, BackendError> {
        Ok(*self.protection.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn set_protection(&self, protection: Protection) -> Result<(), BackendError> {
        *self.protection.lock().unwrap_or_else(|e| e.into_inner()) = protection;
        Ok(())
    }

    fn poll(&self, now_ms: i64) -> Result<Poll, BackendError> {
        let mut poll = match &self.events {
            Some(e) => e.poll(now_ms)?,
            None => Poll::default(),
        };
        if let Some(f) = &self.fixture {
            let extra = f.poll()?;
            poll.notices.extend(extra.notices);
            poll.attention += extra.attention;
        }
        Ok(poll)
    }

    fn dashboard_url(&self, route: &str) -> Result<String, BackendError> {
        Ok(signin_with_route(&self.control.signin_url()?, route))
    }
}

/// Runs a store future from sync code, inside or outside a Tokio runtime.
fn block<F: std::future::Future>(f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => tokio::task::block_in_place(|| handle.block_on(f)),
        Err(_) => tauri::async_runtime::block_on(f),
    }
}

/// How long a high/critical block counts towards "attention".
pub const RECENT_BLOCK_MS: i64 = 60 * 60_000;

/// Notices from the shared database: high/critical blocks and new pending
/// consent requests since the app started (cursor on ids, so nothing from
/// before the start and nothing twice).
struct StoreSource {
    store: Store,
    cursor: Mutex<(i64, i64)>,
}

impl StoreSource {
    fn new(store: Store) -> Result<Self, StartError> {
        let last_event =
            block(store.latest_event_id()).map_err(|e| StartError::Serve(e.to_string()))?;
        let last_consent = block(store.list_consents(None, u32::MAX))
            .map_err(|e| StartError::Serve(e.to_string()))?
            .iter()
            .map(|c| c.id)
            .max()
            .unwrap_or(0);
        Ok(StoreSource {
            store,
            cursor: Mutex::new((last_event, last_consent)),
        })
    }

    fn poll(&self, now_ms: i64) -> Result<Poll, BackendError> {
        block(self.poll_async(now_ms)).map_err(|e| BackendError::Store(e.to_string()))
    }

    async fn server_name(&self, id: Option<&str>) -> String {
        let Some(id) = id else {
            return String::new();
        };
        match self.store.get_server(id).await {
            Ok(Some(s)) => s
                .display_name
                .or(s.entry_name)
                .unwrap_or_else(|| id.to_string()),
            _ => id.to_string(),
        }
    }

    async fn poll_async(&self, now_ms: i64) -> Result<Poll, gatehouse_store::StoreError> {
        let (after_event, after_consent) = *self.cursor.lock().unwrap_or_else(|e| e.into_inner());
        let blocks = |after_id, since_ms| EventFilter {
            min_severity: Some(StoreSeverity::High),
            action: Some(Action::Block),
            after_id,
            since_ms,
            limit: EventFilter::MAX_LIMIT,
            ..EventFilter::default()
        };
        let fresh = self
            .store
            .query_events(&blocks(Some(after_event), None))
            .await?;
        let recent = self
            .store
            .query_events(&blocks(None, Some(now_ms - RECENT_BLOCK_MS)))
            .await?
            .len();
        let pending = self
            .store
            .list_consents(Some(ConsentState::Pending), EventFilter::MAX_LIMIT)
            .await?;
        let mut notices = Vec::new();
        let mut last_event = after_event;
        for e in &fresh {
            last_event = last_event.max(e.id);
            let mut detail = format!(
                "{} · {}",
                e.severity.as_str(),
                e.rule.as_deref().unwrap_or(&e.event_type)
            );
            if let Some(tool) = &e.tool {
                detail.push_str(&format!(" · tool {tool}"));
            }
            notices.push(Notice {
                kind: NoticeKind::Block,
                server: self.server_name(e.server_id.as_deref()).await,
                detail,
                // the dashboard has no page per event: its events list,
                // filtered to this server's high/critical blocks
                route: match e.server_id.as_deref() {
                    Some(id) => format!(
                        "/events?server={}&severity=high&action=block",
                        percent_encode(id)
                    ),
                    None => NoticeKind::Block.list_route().to_string(),
                },
            });
        }
        let mut last_consent = after_consent;
        for c in pending.iter().filter(|c| c.id > after_consent) {
            last_consent = last_consent.max(c.id);
            let kind = match c.kind {
                ConsentKind::ChangedTool | ConsentKind::ShadowTie => NoticeKind::ToolChanged,
                ConsentKind::QuarantinedTool => NoticeKind::ToolQuarantined,
                ConsentKind::Elicitation => NoticeKind::InputRequest,
            };
            notices.push(Notice {
                kind,
                server: self.server_name(Some(&c.server_id)).await,
                detail: c
                    .tool
                    .as_deref()
                    .map(|t| format!("tool {t}"))
                    .unwrap_or_default(),
                // the consent inbox (one page, no per-request route)
                route: kind.list_route().to_string(),
            });
        }
        *self.cursor.lock().unwrap_or_else(|e| e.into_inner()) = (last_event, last_consent);
        let attention = u32::try_from(recent + pending.len()).unwrap_or(u32::MAX);
        Ok(Poll { notices, attention })
    }
}

/// A directory standing in for the client-config and event sources:
/// `clients.json` (a JSON array of [`ClientItem`]; protect/unprotect
/// rewrite it) and `notices.jsonl` (one notice per line, appended by
/// whoever plays the wrapped servers; read incrementally).
pub struct FixtureSource {
    dir: PathBuf,
    read: Mutex<NoticeReader>,
}

#[derive(Default)]
struct NoticeReader {
    offset: u64,
    attention: u32,
}

/// One line of `notices.jsonl`.
#[derive(serde::Deserialize)]
struct NoticeLine {
    kind: String,
    server: String,
    #[serde(default)]
    detail: String,
    #[serde(default)]
    route: String,
}

impl FixtureSource {
    pub fn open(dir: PathBuf) -> Result<Self, StartError> {
        let source = FixtureSource {
            dir,
            read: Mutex::new(NoticeReader::default()),
        };
        source.clients().map_err(|e| StartError::Fixture {
            path: source.dir.clone(),
            reason: e.to_string(),
        })?;
        Ok(source)
    }

    fn clients_path(&self) -> PathBuf {
        self.dir.join("clients.json")
    }

    fn clients(&self) -> Result<Vec<ClientItem>, BackendError> {
        let bytes = std::fs::read(self.clients_path())
            .map_err(|e| BackendError::Store(format!("clients.json: {e}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| BackendError::Store(format!("clients.json: {e}")))
    }

    fn set_client_protected(&self, id: &str, protected: bool) -> Result<(), BackendError> {
        let mut clients = self.clients()?;
        let client = clients
            .iter_mut()
            .find(|c| c.id == id)
            .ok_or_else(|| BackendError::UnknownClient(id.to_string()))?;
        client.protected = protected;
        let body = serde_json::to_vec_pretty(&clients).map_err(|e| BackendError::Clients {
            client: id.to_string(),
            reason: e.to_string(),
        })?;
        write_atomic(&self.clients_path(), &body).map_err(|e| BackendError::Clients {
            client: id.to_string(),
            reason: e.to_string(),
        })
    }

    fn poll(&self) -> Result<Poll, BackendError> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.dir.join("notices.jsonl");
        let mut notices = Vec::new();
        match std::fs::File::open(&path) {
            Ok(mut file) => {
                file.seek(std::io::SeekFrom::Start(read.offset))
                    .map_err(|e| BackendError::Store(e.to_string()))?;
                let mut reader = std::io::BufReader::new(file);
                let mut line = String::new();
                loop {
                    line.clear();
                    let n = reader
                        .read_line(&mut line)
                        .map_err(|e| BackendError::Store(e.to_string()))?;
                    if n == 0 || !line.ends_with('\n') {
                        break; // end, or a line still being written
                    }
                    read.offset += n as u64;
                    match parse_notice(&line) {
                        Some(notice) => notices.push(notice),
                        None => tracing::warn!("ignored a malformed fixture notice"),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BackendError::Store(e.to_string())),
        }
        read.attention += u32::try_from(notices.len()).unwrap_or(u32::MAX);
        Ok(Poll {
            notices,
            attention: read.attention,
        })
    }
}

fn parse_notice(line: &str) -> Option<Notice> {
    let raw: NoticeLine = serde_json::from_str(line).ok()?;
    let kind = match raw.kind.as_str() {
        "block" => NoticeKind::Block,
        "tool_changed" => NoticeKind::ToolChanged,
        "tool_quarantined" => NoticeKind::ToolQuarantined,
        "input_request" => NoticeKind::InputRequest,
        _ => return None,
    };
    Some(Notice {
        kind,
        server: raw.server,
        detail: raw.detail,
        route: raw.route,
    })
}

fn write_atomic(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signin_routes() {
        let check = |signin: &str, route: &str, expect: &str| {
            assert_eq!(
                signin_with_route(signin, route),
                expect,
                "{signin} + {route}"
            );
        };
        check(
            "http://127.0.0.1:9/signin#t=abc",
            "/",
            "http://127.0.0.1:9/signin#t=abc",
        );
        check(
            "http://127.0.0.1:9/signin#t=abc",
            "/events?severity=high",
            "http://127.0.0.1:9/signin#t=abc&next=/events%3Fseverity%3Dhigh",
        );
        check(
            "http://h/signin",
            "/consent",
            "http://h/signin#next=/consent",
        );
        check(
            "http://h/signin",
            "/events?server=a%26b",
            "http://h/signin#next=/events%3Fserver%3Da%2526b",
        );
    }

    /// What a wrap process records reaches the tray as notices with the
    /// server's name and a route the dashboard has; nothing twice, nothing
    /// from before the start.
    #[test]
    fn store_source_notices_and_routes() {
        use gatehouse_store::{NewConsent, NewEvent, NewServer};
        let dir = tempfile::tempdir().unwrap();
        let now = 1_700_000_000_000;
        let store =
            tauri::async_runtime::block_on(Store::open(dir.path(), StoreOptions::control_plane()))
                .unwrap();
        let block_event = |server: &str, severity| {
            let mut e = NewEvent::new(now, "mcp_tool_blocked", Action::Block, severity, "r");
            e.server_id = Some(server.to_string());
            e.rule = Some("rule.x".into());
            e
        };
        tauri::async_runtime::block_on(async {
            store
                .register_protected_server(
                    &NewServer {
                        id: "s&1".into(),
                        display_name: "github".into(),
                        client: "cursor".into(),
                        config_path: "/tmp/mcp.json".into(),
                        scope: "user".into(),
                        entry_name: "gh".into(),
                        command_hash: "0".repeat(64),
                        argv_json: "[]".into(),
                        cwd: None,
                    },
                    now,
                )
                .await
                .unwrap();
            // before the app started: counted, not notified
            store
                .insert_event(&block_event("s&1", StoreSeverity::Critical))
                .await
                .unwrap();
        });
        let source = StoreSource::new(store.clone()).unwrap();
        let first = source.poll(now).unwrap();
        assert!(first.notices.is_empty(), "{:?}", first.notices);
        assert_eq!(
            first.attention, 1,
            "a recent critical block needs attention"
        );

        tauri::async_runtime::block_on(async {
            store
                .insert_event(&block_event("s&1", StoreSeverity::Medium))
                .await
                .unwrap();
            store
                .insert_event(&block_event("s&1", StoreSeverity::High))
                .await
                .unwrap();
            store
                .create_consent(&NewConsent {
                    kind: ConsentKind::ChangedTool,
                    server_id: "s&1".into(),
                    tool: Some("search".into()),
                    payload_json: "{}".into(),
                    created_ms: now,
                    expires_ms: None,
                    requester_key: None,
                })
                .await
                .unwrap();
        });
        let poll = source.poll(now).unwrap();
        let got: Vec<(NoticeKind, &str, &str, &str)> = poll
            .notices
            .iter()
            .map(|n| {
                (
                    n.kind,
                    n.server.as_str(),
                    n.detail.as_str(),
                    n.route.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    NoticeKind::Block,
                    "github",
                    "high · rule.x",
                    "/events?server=s%261&severity=high&action=block"
                ),
                (NoticeKind::ToolChanged, "github", "tool search", "/consent"),
            ],
            "medium blocks do not notify; the server id is query-encoded"
        );
        assert_eq!(poll.attention, 3, "two recent blocks + one pending consent");
        assert!(
            source.poll(now).unwrap().notices.is_empty(),
            "nothing twice"
        );
        assert_eq!(
            source.poll(now + RECENT_BLOCK_MS + 1).unwrap().attention,
            1,
            "old blocks stop counting; the pending consent still does"
        );
    }

    #[test]
    fn fixture_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("clients.json"),
            r#"[{"id":"cursor","name":"Cursor","protected":false,"servers":1}]"#,
        )
        .unwrap();
        let f = FixtureSource::open(dir.path().to_path_buf()).unwrap();
        f.set_client_protected("cursor", true).unwrap();
        assert!(
            f.clients().unwrap()[0].protected,
            "written back to clients.json"
        );
        assert!(matches!(
            f.set_client_protected("zed", true),
            Err(BackendError::UnknownClient(_))
        ));

        assert_eq!(f.poll().unwrap(), Poll::default(), "no notices file yet");
        let notices = dir.path().join("notices.jsonl");
        std::fs::write(
            &notices,
            "{\"kind\":\"block\",\"server\":\"github\",\"detail\":\"d\",\"route\":\"/events/1\"}\nnot json\n{\"kind\":\"input_request\",\"server\":\"jira\"}\n{\"kind\":\"block\",\"ser",
        )
        .unwrap();
        let poll = f.poll().unwrap();
        let servers: Vec<&str> = poll.notices.iter().map(|n| n.server.as_str()).collect();
        assert_eq!(
            servers,
            ["github", "jira"],
            "malformed skipped, partial line waits"
        );
        assert_eq!(poll.attention, 2);
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&notices)
            .unwrap();
        file.write_all(b"ver\":\"slack\"}\n").unwrap();
        let poll = f.poll().unwrap();
        assert_eq!(poll.notices.len(), 1, "the completed line is read once");
        assert_eq!(poll.notices[0].server, "slack");
        assert_eq!(f.poll().unwrap().notices.len(), 0);
    }
}

//! Starting the real thing: resolve `GATEHOUSE_HOME`, install the stable
//! launcher, become (or find) the one control plane of this user, and build
//! the [`Backend`] the shell talks to.
//!
//! Sources of each part of the backend:
//! - dashboard URL: the in-process control plane (`gatehouse-server`), or the
//!   one already running for this home (`gatehouse up`), through a one-time
//!   sign-in link;
//! - clients: the AI client configs under the user's home, found and changed
//!   through `gatehouse-clients` (the same code as `gatehouse protect`);
//! - notices and attention: the shared database ([`StoreSource`]);
//! - the pause: the MAC'd pause row every `gatehouse wrap` follows
//!   (`gatehouse_server::protection`).

use std::any::Any;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gatehouse_server::api::clients::ClientChanger;
use gatehouse_server::control::{self, Acquired};
use gatehouse_server::protection::ProtectionState;
use gatehouse_server::{ControlInfo, ServerConfig, ServerHandle};
use gatehouse_store::{
    Action, ConsentKind, ConsentState, EventFilter, MacKey, Severity as StoreSeverity, Store,
    StoreOptions,
};

use crate::backend::{Backend, BackendError, Poll};
use crate::launcher;
use crate::menu::ClientItem;
use crate::notify::{Notice, NoticeKind};
use crate::state::Protection;

/// Why the app cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
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
    // Protect from the dashboard and the tray moves secrets into the keyring.
    let keyring = block(gatehouse_server::probe_keyring());
    let mut keep: Vec<Box<dyn Any + Send>> = Vec::new();
    let mut store: Option<Store> = None;
    let control = match control::acquire(&home).map_err(|e| StartError::Control {
        home: home.clone(),
        reason: e.to_string(),
    })? {
        Acquired::Mine(mut lock) => {
            // Connections another local user holds open meet the server's
            // own cap long before the app runs out of descriptors.
            #[cfg(unix)]
            if let Err(e) = gatehouse_server::raise_nofile_limit() {
                tracing::warn!(error = %e, "could not raise the open-file limit");
            }
            let (handle, opened, watcher) = tauri::async_runtime::block_on(async {
                // opens (and migrates) the shared database, loads the install
                // key and enables client discovery for the dashboard
                let mut config = ServerConfig::open(home.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                let store = config.store.clone();
                // Protect from the dashboard writes the stable launcher into
                // wrapped entries, and moves secrets into the keyring.
                config.gatehouse_exe = launcher.clone();
                config.vault = keyring.clone();
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
                // Retention and the size cap, hourly (throttle shared with
                // every wrap of this database).
                tauri::async_runtime::spawn(gatehouse_proxy::maintenance::run_hourly(
                    store.clone(),
                    home.clone(),
                ));
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
    let store = match store {
        Some(s) => Some(s),
        None => block(Store::open(&home, StoreOptions::control_plane()))
            .map_err(|e| tracing::warn!(error = %e, "database unavailable; no notifications"))
            .ok(),
    };
    let events = match &store {
        Some(store) => Some(StoreSource::new(store.clone())?),
        None => None,
    };
    let dirs = gatehouse_clients::HomeDirs::from_env();
    let changer = match (&store, launcher.clone()) {
        (Some(store), Some(exe)) => Some(ClientChanger {
            store: store.clone(),
            home: home.clone(),
            exe,
            // Without a keyring, entries without secrets still protect; an
            // entry with a plain-text secret fails with the keyring's error.
            vault: keyring.unwrap_or_else(|| Arc::new(gatehouse_server::keyring())),
            dirs: dirs.clone(),
        }),
        _ => None,
    };
    let mac_key = gatehouse_server::control::install_key(&home)
        .map_err(|e| tracing::warn!(error = %e, "no install key; pause unavailable"))
        .ok();
    let backend = LiveBackend {
        control,
        launcher,
        dirs,
        changer,
        pause: store.zip(mac_key),
        events,
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
    /// The stable launcher protected entries run, when installed.
    launcher: Option<PathBuf>,
    /// Where the AI clients' configs are.
    dirs: gatehouse_clients::HomeDirs,
    /// `None` without a database or a launcher to point entries at.
    changer: Option<ClientChanger>,
    /// The database and the install's MAC key, for the pause row.
    pause: Option<(Store, MacKey)>,
    events: Option<StoreSource>,
}

impl LiveBackend {
    /// The database and key the pause row needs.
    fn pause_row(&self) -> Result<(&Store, &MacKey), BackendError> {
        self.pause
            .as_ref()
            .map(|(store, key)| (store, key))
            .ok_or_else(|| BackendError::Store("no database: nothing to pause".into()))
    }
}

impl Backend for LiveBackend {
    fn clients(&self) -> Result<Vec<ClientItem>, BackendError> {
        Ok(gatehouse_clients::detect(&self.dirs, &[])
            .iter()
            .map(|c| ClientItem {
                id: c.key.to_string(),
                name: c.name.to_string(),
                protected: c.is_protected(),
                servers: c.server_count(),
                wrapped: c.protected_count(),
            })
            .collect())
    }

    fn set_client_protected(&self, id: &str, protected: bool) -> Result<(), BackendError> {
        let failed = |reason: String| BackendError::Clients {
            client: id.to_string(),
            reason,
        };
        let changer = self.changer.as_ref().ok_or_else(|| {
            failed("the database or the gatehouse launcher is unavailable".into())
        })?;
        let report =
            block(changer.change(id, !protected, gatehouse_store::now_ms(), "the tray", None))
                .map_err(|e| match e {
                    gatehouse_server::error::ApiError::NotFound(_) => {
                        BackendError::UnknownClient(id.to_string())
                    }
                    e => failed(e.to_string()),
                })?;
        match report.first_error() {
            Some(reason) => Err(failed(reason)),
            None => Ok(()),
        }
    }

    fn protection(&self) -> Result<Protection, BackendError> {
        // Without a database no wrap process can be paused.
        let Some((store, key)) = &self.pause else {
            return Ok(Protection::Active);
        };
        let now = gatehouse_store::now_ms();
        match block(gatehouse_server::protection::state(store, key, now)) {
            Ok(ProtectionState::Paused { until_ms }) => Ok(Protection::Paused { until_ms }),
            Ok(ProtectionState::Active) => Ok(Protection::Active),
            Err(e) => Err(BackendError::Store(e.to_string())),
        }
    }

    fn pause(&self, now_ms: i64, minutes: u32) -> Result<(), BackendError> {
        let (store, key) = self.pause_row()?;
        block(gatehouse_server::protection::pause(
            store, key, minutes, now_ms, "the tray",
        ))
        .map(|_| ())
        .map_err(|e| BackendError::Store(e.to_string()))
    }

    fn resume(&self, now_ms: i64) -> Result<(), BackendError> {
        let (store, _) = self.pause_row()?;
        block(gatehouse_server::protection::resume(
            store, now_ms, "the tray",
        ))
        .map(|_| ())
        .map_err(|e| BackendError::Store(e.to_string()))
    }

    fn poll(&self, now_ms: i64) -> Result<Poll, BackendError> {
        match &self.events {
            Some(e) => e.poll(now_ms),
            None => Ok(Poll::default()),
        }
    }

    fn dashboard_url(&self, route: &str) -> Result<String, BackendError> {
        Ok(signin_with_route(&self.control.signin_url()?, route))
    }

    fn remove_launcher(&self) -> Result<bool, BackendError> {
        match &self.launcher {
            Some(path) => launcher::remove(path).map_err(|e| BackendError::Clients {
                client: "launcher".into(),
                reason: format!("could not remove {}: {e}", path.display()),
            }),
            None => Ok(false),
        }
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
                ConsentKind::HeldLaunch | ConsentKind::HeldPackage => NoticeKind::ServerHeld,
            };
            notices.push(Notice {
                kind,
                server: self.server_name(Some(&c.server_id)).await,
                detail: match c.kind {
                    ConsentKind::HeldLaunch => "its launch changed".to_string(),
                    ConsentKind::HeldPackage => "its package looks like a typosquat".to_string(),
                    _ => c
                        .tool
                        .as_deref()
                        .map(|t| format!("tool {t}"))
                        .unwrap_or_default(),
                },
                // the consent inbox (one page, no per-request route)
                route: kind.list_route().to_string(),
            });
        }
        *self.cursor.lock().unwrap_or_else(|e| e.into_inner()) = (last_event, last_consent);
        let attention = u32::try_from(recent + pending.len()).unwrap_or(u32::MAX);
        Ok(Poll { notices, attention })
    }
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
}

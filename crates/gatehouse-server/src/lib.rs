//! gatehouse-server: the control plane — an axum server on loopback that
//! serves the JSON API under `/api/` and the embedded dashboard (`ui/`)
//! over the shared database. Key types: [`ServerConfig`], [`serve`] →
//! [`ServerHandle`], [`router`] (for in-process tests), [`auth::Auth`]
//! (sign-in links, sessions, stream tickets, CLI challenges),
//! [`control`] (the one-per-user lock and `control.json`), and
//! [`error::ApiError`] (stable codes, safe messages).
//!
//! **Invariant:** nothing here trusts ambient credentials — every API call
//! but sign-in, health and the CLI challenge needs a bearer session token,
//! every request must name a loopback Host, every state change must come
//! from this server's own Origin, and nothing a server supplied is ever
//! sent as HTML: the API returns JSON and the UI renders it as text.

pub mod api;
pub mod assets;
pub mod auth;
pub mod config_watch;
pub mod control;
pub mod error;
pub mod guard;
pub mod protection;
pub mod seal;
pub mod stream;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request};
use axum::response::Response;
use axum::Router;
use gatehouse_store::{Action, MacKey, NewEvent, Severity, Store};
use gatehouse_vault::Vault;
use tokio::sync::{broadcast, oneshot, watch};

pub use auth::{Auth, Clock, SystemClock};
pub use control::{ControlInfo, ControlLock};
pub use error::ApiError;

/// Largest request body the API accepts (policy files are the biggest).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How to start a control plane.
#[derive(Clone)]
pub struct ServerConfig {
    /// `GATEHOUSE_HOME` (database, policy, control files).
    pub home: PathBuf,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Origins besides the loopback ones allowed to change state (e.g. the tray app's webview).
    pub extra_origins: Vec<String>,
    /// Clock for token lifetimes and recorded times (tests inject their own).
    pub clock: Arc<dyn Clock>,
    /// The shared database.
    pub store: Store,
    /// Per-install key for the MACs on pins and modes (from the keyring).
    pub mac_key: MacKey,
    /// Server secrets; `None` when no keyring is reachable.
    pub vault: Option<Arc<dyn Vault>>,
    /// How often the event tail polls the database.
    pub poll_interval: std::time::Duration,
    /// Where to discover AI clients' configs; `None` hides the Clients list.
    pub client_dirs: Option<gatehouse_clients::HomeDirs>,
    /// The `gatehouse` binary protected entries launch (`gatehouse wrap`);
    /// `None` leaves protect/unprotect to the CLI.
    pub gatehouse_exe: Option<PathBuf>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("home", &self.home)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// Defaults: any free port, system clock, no vault, 250 ms polling.
    pub fn new(home: PathBuf, store: Store, mac_key: MacKey) -> Self {
        ServerConfig {
            home,
            port: 0,
            extra_origins: Vec::new(),
            clock: Arc::new(SystemClock),
            store,
            mac_key,
            vault: None,
            poll_interval: std::time::Duration::from_millis(250),
            client_dirs: None,
            gatehouse_exe: None,
        }
    }
}

impl ServerConfig {
    /// The usual configuration for `home`: opens (and migrates) the shared
    /// database with the control-plane profile and loads the per-install
    /// MAC key (creating it on first use). No vault: set
    /// [`ServerConfig::vault`] when a keyring is reachable.
    pub async fn open(home: PathBuf) -> Result<Self, ServeError> {
        let store = Store::open(&home, gatehouse_store::StoreOptions::control_plane())
            .await
            .map_err(|e| ServeError::Store(e.to_string()))?;
        let mac_key = control::install_key(&home).map_err(|e| ServeError::Store(e.to_string()))?;
        let mut config = ServerConfig::new(home, store, mac_key);
        config.client_dirs = Some(gatehouse_clients::HomeDirs::from_env());
        Ok(config)
    }
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The database or install key could not be opened.
    #[error("cannot open Gatehouse state: {0}")]
    Store(String),
    /// Could not bind 127.0.0.1:port.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// Requested port.
        port: u16,
        /// OS error.
        source: std::io::Error,
    },
}

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// What [`AppState`] holds.
pub struct Inner {
    /// Credentials.
    pub auth: Auth,
    /// Host/Origin rules.
    pub allowed: Arc<guard::Allowed>,
    /// `GATEHOUSE_HOME`.
    pub home: PathBuf,
    /// Flips to true on shutdown so streams end.
    pub shutdown: watch::Receiver<bool>,
    /// The shared database.
    pub store: Store,
    /// MAC key for trust rows.
    pub mac_key: MacKey,
    /// Server secrets, when a keyring is reachable.
    pub vault: Option<Arc<dyn Vault>>,
    /// New events as JSON, fed by [`stream::tail_events`].
    pub events: broadcast::Sender<Arc<serde_json::Value>>,
    /// Clock.
    pub clock: Arc<dyn Clock>,
    /// Where AI clients' configs are discovered.
    pub client_dirs: Option<gatehouse_clients::HomeDirs>,
    /// The binary protected entries launch.
    pub gatehouse_exe: Option<PathBuf>,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// Builds state for a server reachable on `port`.
    pub fn new(
        config: &ServerConfig,
        port: u16,
        cli_secret: String,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        AppState(Arc::new(Inner {
            auth: Auth::new(config.clock.clone(), cli_secret),
            allowed: Arc::new(guard::Allowed::for_port(port, &config.extra_origins)),
            home: config.home.clone(),
            shutdown,
            store: config.store.clone(),
            mac_key: config.mac_key.clone(),
            vault: config.vault.clone(),
            events: broadcast::channel(1024).0,
            clock: config.clock.clone(),
            client_dirs: config.client_dirs.clone(),
            gatehouse_exe: config.gatehouse_exe.clone(),
        }))
    }

    /// Current time (ms since epoch) from the configured clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Records something a person did in the dashboard as an event
    /// (best effort: a busy database must not fail the action itself).
    pub(crate) async fn record(
        &self,
        event_type: &str,
        server_id: Option<&str>,
        tool: Option<&str>,
        reason: &str,
        session: &str,
    ) {
        let mut ev = NewEvent::new(
            self.now_ms(),
            event_type,
            Action::Audit,
            Severity::Info,
            reason,
        );
        ev.server_id = server_id.map(str::to_owned);
        ev.tool = tool.map(str::to_owned);
        ev.rule = Some("control_plane".to_owned());
        ev.session = Some(format!("ui:{session}"));
        if let Err(e) = self.store.insert_event(&ev).await {
            tracing::warn!(error = %e, event_type, "could not record control-plane event");
        }
    }

    /// Records a sign-in as an event (never includes the token).
    pub(crate) async fn record_signin(&self, session: &auth::SessionInfo) {
        self.record(
            api::event_types::UI_SIGNIN,
            None,
            None,
            "dashboard sign-in",
            &session.id,
        )
        .await;
    }
}

/// The OS keyring as the control plane uses it: every call answers within 2 s.
pub fn keyring() -> gatehouse_vault::KeyringVault {
    gatehouse_vault::KeyringVault::new().with_timeout(std::time::Duration::from_secs(2))
}

/// The OS keyring for the dashboard's Secrets page and protect, when it
/// answers within 2 s; `None` (said on stderr) otherwise. Why it did not
/// answer is kept for the API's answers ([`keyring_probe_failure`]).
pub async fn probe_keyring() -> Option<Arc<dyn gatehouse_vault::Vault>> {
    let probe = tokio::task::spawn_blocking(|| {
        let vault = keyring();
        vault.probe().map(|_| vault)
    });
    let failure = match probe.await {
        Ok(Ok(vault)) => return Some(Arc::new(vault)),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "the keyring probe failed".to_owned(),
    };
    eprintln!("gatehouse: secrets are unavailable in the dashboard: {failure}");
    if let Ok(mut last) = PROBE_FAILURE.lock() {
        *last = Some(failure);
    }
    None
}

/// Why this process's last [`probe_keyring`] found no keyring (names and
/// reasons only: `VaultError` messages never carry values).
static PROBE_FAILURE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Why the control plane has no keyring, for API errors: the start-up
/// probe's failure when there was one.
pub(crate) fn keyring_probe_failure() -> String {
    let why = PROBE_FAILURE.lock().ok().and_then(|g| g.clone());
    match why {
        Some(why) => format!(
            "it did not answer when the control plane started ({why}); unlock or start it, then restart the control plane"
        ),
        None => "the control plane was started without one".to_owned(),
    }
}

/// `/signin#t=<token>`: the token rides in the fragment, which browsers
/// never send to servers or in `Referer`.
pub fn signin_path(token: &str) -> String {
    format!("/signin#t={token}")
}

/// The whole application: API, dashboard files, guard and headers.
pub fn router(state: AppState) -> Router {
    let allowed = state.allowed.clone();
    api::routes()
        .fallback(static_file)
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(error::rejections_as_api_errors))
        .layer(axum::middleware::from_fn_with_state(
            allowed,
            guard::check_request,
        ))
        .layer(axum::middleware::from_fn(guard::security_headers))
}

async fn static_file(req: Request) -> Response {
    let path = req.uri().path();
    if path.starts_with("/api/")
        || !matches!(
            *req.method(),
            axum::http::Method::GET | axum::http::Method::HEAD
        )
    {
        return ApiError::NotFound("route").into_response_safe();
    }
    assets::serve(path.trim_start_matches('/'))
}

impl ApiError {
    fn into_response_safe(self) -> Response {
        axum::response::IntoResponse::into_response(self)
    }
}

/// A running control plane.
pub struct ServerHandle {
    addr: SocketAddr,
    state: AppState,
    cli_secret: String,
    stop: Option<oneshot::Sender<()>>,
    shutdown_tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// The bound port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// A fresh one-time sign-in URL (valid 60 s).
    pub fn signin_url(&self) -> String {
        format!(
            "{}{}",
            self.base_url(),
            signin_path(&self.state.auth.mint_signin())
        )
    }

    /// What `control.json` should say about this instance.
    pub fn control_info(&self) -> ControlInfo {
        ControlInfo {
            version: 1,
            pid: std::process::id(),
            port: self.port(),
            cli_secret: self.cli_secret.clone(),
        }
    }

    /// The handlers' state (for in-process hosts such as the tray app).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Stops accepting connections, ends streams and waits for the server task.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }

    /// Waits until the server stops (it only stops through [`Self::shutdown`] or an I/O error).
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }
}

/// Binds 127.0.0.1 (never another interface) and serves the control plane.
pub async fn serve(config: ServerConfig) -> Result<ServerHandle, ServeError> {
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, config.port)))
            .await
            .map_err(|source| ServeError::Bind {
                port: config.port,
                source,
            })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        port: config.port,
        source,
    })?;
    let cli_secret = auth::random_token();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let state = AppState::new(&config, addr.port(), cli_secret.clone(), shutdown_rx);
    tokio::spawn(stream::tail_events(state.clone(), config.poll_interval));
    tokio::spawn(protection::end_pauses(state.clone()));
    let app = router(state.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "control plane server stopped");
        }
    });
    Ok(ServerHandle {
        addr,
        state,
        cli_secret,
        stop: Some(stop),
        shutdown_tx,
        task,
    })
}

//! gatehouse-server: the control plane — an axum server on loopback that
//! serves the JSON API under `/api/` and the embedded dashboard (`ui/`)
//! over the shared database. Key types: [`ServerConfig`], [`serve`] →
//! [`ServerHandle`], [`router`] (for in-process tests), [`auth::Auth`]
//! (sign-in links, sessions, stream tickets, CLI challenges),
//! [`control`] (the one-per-user lock and `control.json`), and
//! [`error::ApiError`] (stable codes, safe messages). Connections are
//! bounded ([`ConnectionLimits`]): headers must arrive within a timeout,
//! idle keep-alive connections close after the same time, and past a cap
//! a new connection is closed at once, so another local user holding
//! sockets cannot exhaust the process.
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
pub mod peer;
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

/// Default [`ConnectionLimits::header_read_timeout`].
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a request's body may take to arrive, once its header has.
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Default [`ConnectionLimits::max_connections`].
pub const MAX_CONNECTIONS: usize = 256;

/// How many connections the control plane serves and for how long it waits
/// on them.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A connection must deliver a request's whole header within this time,
    /// from its start and again after every response (so an idle
    /// keep-alive connection closes after it too); else it is closed.
    /// Streaming a response (the event streams) is not bounded by it.
    pub header_read_timeout: std::time::Duration,
    /// Connections served at once, event streams included; one more is
    /// closed as soon as it is accepted.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

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
    /// Header timeout and connection cap.
    pub limits: ConnectionLimits,
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
            limits: ConnectionLimits::default(),
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
            BODY_READ_TIMEOUT,
            guard::body_in_time,
        ))
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
    let task = tokio::spawn(serve_connections(listener, app, config.limits, stopped));
    Ok(ServerHandle {
        addr,
        state,
        cli_secret,
        stop: Some(stop),
        shutdown_tx,
        task,
    })
}

/// The accept loop: every connection is HTTP/1 with a header-read timeout
/// (hyper's, on tokio's timer) and holds one of `max_connections` slots
/// until it closes; without a free slot a new connection is dropped at
/// once. `stopped` ends accepting; open connections then finish their
/// current request (streams end through [`Inner::shutdown`]).
async fn serve_connections(
    mut listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnectionLimits,
    mut stopped: oneshot::Receiver<()>,
) {
    use axum::serve::Listener;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    // Owner checks run beside the accept loop, a few at a time: reading
    // `/proc/net/tcp` for one connection must not hold the next in line.
    let checks = Arc::new(tokio::sync::Semaphore::new(PEER_CHECKS));
    let (draining_tx, draining) = watch::channel(false);
    let refusals = Arc::new(Refusals::default());
    loop {
        // axum's `Listener` retries failed accepts itself (and pauses on EMFILE).
        let (stream, peer) = tokio::select! {
            conn = Listener::accept(&mut listener) => conn,
            _ = &mut stopped => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let mut draining = draining.clone();
        let (slots, checks, refusals) = (slots.clone(), checks.clone(), refusals.clone());
        let max_connections = limits.max_connections;
        tokio::spawn(async move {
            // Another local user never takes a slot (nor reaches the API).
            if let Ok(local) = stream.local_addr() {
                let Ok(_checking) = checks.acquire_owned().await else {
                    return;
                };
                let other = tokio::task::spawn_blocking(move || peer::is_other_user(local, peer))
                    .await
                    .unwrap_or(true);
                if other {
                    tracing::debug!(%peer, "control plane: refused another user's connection");
                    return;
                }
            }
            let Ok(_slot) = slots.try_acquire_owned() else {
                drop(stream);
                refusals.note(max_connections);
                return;
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "control plane connection ended");
                    }
                    return;
                }
                _ = draining.wait_for(|d| *d) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = draining_tx.send(true);
    // Wait for every connection to give its slot back.
    let all = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// Owner checks of new connections run at once, at most.
const PEER_CHECKS: usize = 16;

/// Connections refused for want of a slot, reported one line a minute at
/// most: the flood itself must not fill the log.
#[derive(Default)]
struct Refusals {
    since_warning: std::sync::atomic::AtomicU64,
    last_warning: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Refusals {
    fn note(&self, max: usize) {
        use std::sync::atomic::Ordering;
        self.since_warning.fetch_add(1, Ordering::Relaxed);
        let Ok(mut last) = self.last_warning.lock() else {
            return;
        };
        if last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60)) {
            tracing::warn!(
                max,
                refused = self.since_warning.swap(0, Ordering::Relaxed),
                "control plane: too many open connections; refusing new ones"
            );
            *last = Some(std::time::Instant::now());
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit (on
/// macOS at most `OPEN_MAX`, 10240), so descriptors run out only long
/// after [`MAX_CONNECTIONS`] connections.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn raise_nofile_limit() -> std::io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut want = lim.rlim_max;
    if cfg!(target_os = "macos") {
        want = want.min(10240);
    }
    if lim.rlim_cur >= want {
        return Ok(());
    }
    lim.rlim_cur = want;
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

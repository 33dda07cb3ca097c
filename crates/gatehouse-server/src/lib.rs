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
pub mod control;
pub mod error;
pub mod guard;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request};
use axum::response::Response;
use axum::Router;
use tokio::sync::{oneshot, watch};

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
    /// Clock for token lifetimes (tests inject their own).
    pub clock: Arc<dyn Clock>,
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
    /// Defaults: any free port, system clock.
    pub fn new(home: PathBuf) -> Self {
        ServerConfig {
            home,
            port: 0,
            extra_origins: Vec::new(),
            clock: Arc::new(SystemClock),
        }
    }
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
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
        }))
    }

    /// Records a sign-in as an event (best effort; never includes the token).
    pub(crate) async fn record_signin(&self, session: &auth::SessionInfo) {
        tracing::info!(session = %session.id, "dashboard sign-in");
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

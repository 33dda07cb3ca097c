//! The seam between the tray shell and the shared crates: everything the
//! tray, its commands and its notifier need, behind one trait. The live
//! implementation ([`crate::live::LiveBackend`]) calls `gatehouse-clients`,
//! `gatehouse-store` and `gatehouse-server`; [`MemoryBackend`] serves the
//! command tests and the scripted end-to-end fixture.

use std::sync::Mutex;

use crate::menu::ClientItem;
use crate::notify::Notice;
use crate::state::Protection;

/// Why a backend call failed. Messages are safe to show: no paths with
/// secrets, no server-supplied text, no secret values.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("unknown AI client {0:?}")]
    UnknownClient(String),
    #[error("could not change the configuration of {client}: {reason}")]
    Clients { client: String, reason: String },
    #[error("the Gatehouse database is unavailable: {0}")]
    Store(String),
    #[error("the control plane is not running: {0}")]
    ControlPlane(String),
}

impl BackendError {
    /// Stable machine-readable code (sent to the webview with the message).
    pub fn code(&self) -> &'static str {
        match self {
            BackendError::UnknownClient(_) => "unknown_client",
            BackendError::Clients { .. } => "clients",
            BackendError::Store(_) => "store",
            BackendError::ControlPlane(_) => "control_plane",
        }
    }
}

/// What changed since the last poll.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Poll {
    /// New high/critical blocks and consent requests, oldest first.
    pub notices: Vec<Notice>,
    /// Pending consent requests plus recent high/critical blocks.
    pub attention: u32,
}

/// Everything the shell does to the outside world, except showing windows.
pub trait Backend: Send + Sync + 'static {
    /// Detected AI clients and whether each is protected.
    fn clients(&self) -> Result<Vec<ClientItem>, BackendError>;
    /// Protects (wraps) or unprotects (restores) one client's MCP servers.
    fn set_client_protected(&self, id: &str, protected: bool) -> Result<(), BackendError>;
    /// The stored protection mode (may be a pause that is already over).
    fn protection(&self) -> Result<Protection, BackendError>;
    /// Pauses protection for every wrap process: audit only for `minutes`
    /// from `now_ms`, then it resumes by itself.
    fn pause(&self, now_ms: i64, minutes: u32) -> Result<(), BackendError>;
    /// Ends a pause now.
    fn resume(&self, now_ms: i64) -> Result<(), BackendError>;
    /// New notices since the previous call, and the attention count.
    fn poll(&self, now_ms: i64) -> Result<Poll, BackendError>;
    /// A URL that shows `route` in the dashboard, signed in (one-time link).
    fn dashboard_url(&self, route: &str) -> Result<String, BackendError>;
    /// Removes the stable launcher wrapped entries run (uninstall, once no
    /// entry points at it); false when there was none.
    fn remove_launcher(&self) -> Result<bool, BackendError>;
}

/// In-memory backend: a fixed list of clients, a queue of notices to hand
/// out, and a dashboard URL. Used by tests and by `--fixture` runs.
#[derive(Debug)]
pub struct MemoryBackend {
    inner: Mutex<Memory>,
}

#[derive(Debug)]
struct Memory {
    clients: Vec<ClientItem>,
    protection: Protection,
    queued: Vec<Notice>,
    attention: u32,
    dashboard: String,
    launcher: bool,
}

impl MemoryBackend {
    pub fn new(clients: Vec<ClientItem>, dashboard: impl Into<String>) -> Self {
        MemoryBackend {
            inner: Mutex::new(Memory {
                clients,
                protection: Protection::Active,
                queued: Vec::new(),
                attention: 0,
                dashboard: dashboard.into(),
                launcher: true,
            }),
        }
    }

    /// Queues a notice for the next [`Backend::poll`] and counts it as
    /// needing attention.
    pub fn push_notice(&self, notice: Notice) {
        let mut m = self.lock();
        m.queued.push(notice);
        m.attention += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for MemoryBackend {
    fn clients(&self) -> Result<Vec<ClientItem>, BackendError> {
        Ok(self.lock().clients.clone())
    }

    fn set_client_protected(&self, id: &str, protected: bool) -> Result<(), BackendError> {
        let mut m = self.lock();
        let client = m
            .clients
            .iter_mut()
            .find(|c| c.id == id)
            .ok_or_else(|| BackendError::UnknownClient(id.to_string()))?;
        client.protected = protected;
        client.wrapped = if protected { client.servers } else { 0 };
        Ok(())
    }

    fn protection(&self) -> Result<Protection, BackendError> {
        Ok(self.lock().protection)
    }

    fn pause(&self, now_ms: i64, minutes: u32) -> Result<(), BackendError> {
        self.lock().protection = Protection::paused_for(now_ms, minutes);
        Ok(())
    }

    fn resume(&self, _now_ms: i64) -> Result<(), BackendError> {
        self.lock().protection = Protection::Active;
        Ok(())
    }

    fn poll(&self, _now_ms: i64) -> Result<Poll, BackendError> {
        let mut m = self.lock();
        Ok(Poll {
            notices: std::mem::take(&mut m.queued),
            attention: m.attention,
        })
    }

    fn dashboard_url(&self, route: &str) -> Result<String, BackendError> {
        let m = self.lock();
        Ok(format!("{}{}", m.dashboard.trim_end_matches('/'), route))
    }

    fn remove_launcher(&self) -> Result<bool, BackendError> {
        Ok(std::mem::take(&mut self.lock().launcher))
    }
}

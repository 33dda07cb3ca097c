//! `gatehouse-app`: the desktop tray app. A Tauri v2 shell that hosts the
//! control plane in-process, shows protection state in the tray (protected /
//! attention with a count / paused), protects AI clients in a click, pauses
//! protection (audit-only, resumes by itself), notifies about high/critical
//! blocks and consent requests, and keeps a stable launcher for wrapped
//! configs. Key types: [`Shell`] (the app's state, display-free),
//! [`backend::Backend`] (the seam to the shared crates),
//! [`menu::MenuAction`], [`notify::Coalescer`], [`launcher::Target`].
//!
//! **Invariant:** the logic modules (`state`, `menu`, `notify`, `launcher`,
//! `backend`, [`Shell`]) never touch Tauri, so they are tested without a
//! display; the Tauri glue (`app`, `commands`) only translates, and the
//! dashboard webview (the control plane's loopback origin) gets no Tauri
//! capability at all.

pub mod app;
pub mod backend;
pub mod commands;
pub mod launcher;
pub mod live;
pub mod menu;
pub mod notify;
pub mod state;

use std::sync::{Arc, Mutex, MutexGuard};

use backend::{Backend, BackendError};
use menu::{ClientItem, MenuInput, MenuNode};
use notify::{Coalescer, Rendered};
use state::{Protection, TrayStatus};

pub use app::run;

/// Milliseconds since the Unix epoch, injectable for tests.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    })
}

/// What the tray and the status page show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub clients: Vec<ClientItem>,
    pub protection: Protection,
    pub attention: u32,
    pub autostart: bool,
}

/// What [`Shell::uninstall`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Uninstalled {
    /// Server entries still running behind `gatehouse wrap`.
    pub still_wrapped: usize,
    pub launcher_removed: bool,
}

/// Result of one [`Shell::tick`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// Notifications to show now.
    pub notify: Vec<Rendered>,
    /// The tray must be redrawn.
    pub changed: bool,
}

/// The app's state, shared by the tray, the commands and the poller.
pub struct Shell {
    backend: Arc<dyn Backend>,
    clock: Clock,
    snapshot: Mutex<Snapshot>,
    coalescer: Mutex<Coalescer>,
    /// Minutes left of a pause at the last tick (the menu label shows them).
    last_minutes: Mutex<Option<i64>>,
}

impl Shell {
    pub fn new(backend: Arc<dyn Backend>, clock: Clock) -> Self {
        Shell {
            backend,
            clock,
            snapshot: Mutex::new(Snapshot {
                clients: Vec::new(),
                protection: Protection::Active,
                attention: 0,
                autostart: false,
            }),
            coalescer: Mutex::new(Coalescer::default()),
            last_minutes: Mutex::new(None),
        }
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    pub fn snapshot(&self) -> Snapshot {
        lock(&self.snapshot).clone()
    }

    /// Reloads clients and protection mode from the backend.
    pub fn refresh(&self) -> Result<(), BackendError> {
        let clients = self.backend.clients()?;
        let protection = self.backend.protection()?;
        let mut s = lock(&self.snapshot);
        s.clients = clients;
        s.protection = protection;
        Ok(())
    }

    /// Pauses protection for `minutes` (audit only; resumes by itself).
    pub fn pause(&self, minutes: u32) -> Result<(), BackendError> {
        let now = self.now_ms();
        self.backend.pause(now, minutes)?;
        lock(&self.snapshot).protection = Protection::paused_for(now, minutes);
        Ok(())
    }

    /// Ends a pause now.
    pub fn resume(&self) -> Result<(), BackendError> {
        self.backend.resume(self.now_ms())?;
        lock(&self.snapshot).protection = Protection::Active;
        Ok(())
    }

    pub fn set_client_protected(&self, id: &str, protected: bool) -> Result<(), BackendError> {
        self.backend.set_client_protected(id, protected)?;
        self.refresh()
    }

    /// Protects every client that is not yet protected; stops at the first
    /// failure (the others keep their state) and reports it.
    pub fn protect_all(&self) -> Result<(), BackendError> {
        let clients = self.backend.clients()?;
        let result = clients
            .iter()
            .filter(|c| !c.protected)
            .try_for_each(|c| self.backend.set_client_protected(&c.id, true));
        self.refresh()?;
        result
    }

    /// Uninstall, the part that needs the app: with `unprotect`, restores
    /// every client that has wrapped entries (stopping at the first failure,
    /// which is reported and leaves everything else in place); then removes
    /// the stable launcher, but only when no entry points at it any more
    /// (otherwise those servers keep working through it after the app is
    /// gone).
    pub fn uninstall(&self, unprotect: bool) -> Result<Uninstalled, BackendError> {
        if unprotect {
            for c in self.backend.clients()?.iter().filter(|c| c.wrapped > 0) {
                self.backend.set_client_protected(&c.id, false)?;
            }
        }
        self.refresh()?;
        let still_wrapped: usize = lock(&self.snapshot).clients.iter().map(|c| c.wrapped).sum();
        let launcher_removed = still_wrapped == 0 && self.backend.remove_launcher()?;
        Ok(Uninstalled {
            still_wrapped,
            launcher_removed,
        })
    }

    /// Flips the protection of one client as shown in the menu.
    pub fn toggle_client(&self, id: &str) -> Result<(), BackendError> {
        let current = lock(&self.snapshot)
            .clients
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.protected)
            .ok_or_else(|| BackendError::UnknownClient(id.to_string()))?;
        self.set_client_protected(id, !current)
    }

    pub fn set_autostart(&self, on: bool) {
        lock(&self.snapshot).autostart = on;
    }

    pub fn tray_status(&self) -> TrayStatus {
        let s = lock(&self.snapshot);
        TrayStatus {
            protection: s.protection,
            attention: s.attention,
        }
    }

    /// The tray menu for the current state.
    pub fn menu(&self) -> Vec<MenuNode> {
        let s = lock(&self.snapshot);
        menu::build(&MenuInput {
            clients: &s.clients,
            protection: s.protection,
            now_ms: self.now_ms(),
            autostart: s.autostart,
            attention: s.attention,
        })
    }

    /// One poll: new notices go through the rate limiter, an expired pause
    /// is cleared in the backend, and `changed` says whether the tray needs
    /// redrawing.
    pub fn tick(&self) -> Result<Tick, BackendError> {
        let now = self.now_ms();
        let poll = self.backend.poll(now)?;
        let mut tick = Tick::default();
        {
            let mut c = lock(&self.coalescer);
            for notice in poll.notices {
                tick.notify.extend(c.offer(notice, now));
            }
            tick.notify.extend(c.due(now));
        }
        // The pause may also be set elsewhere (dashboard, `gatehouse pause`);
        // an expired one needs no clearing: wraps follow its deadline.
        let protection = self.backend.protection()?.at(now);
        let mut s = lock(&self.snapshot);
        if s.attention != poll.attention {
            s.attention = poll.attention;
            tick.changed = true;
        }
        if s.protection.at(now) != protection {
            tick.changed = true;
        }
        s.protection = protection;
        let minutes = s.protection.minutes_left(now);
        let mut last = lock(&self.last_minutes);
        if *last != minutes {
            *last = minutes;
            tick.changed = true;
        }
        Ok(tick)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryBackend;
    use crate::notify::{Notice, NoticeKind};
    use std::sync::atomic::{AtomicI64, Ordering};

    const T0: i64 = 1_700_000_000_000;

    fn fixture() -> (Shell, Arc<MemoryBackend>, Arc<AtomicI64>) {
        let backend = Arc::new(MemoryBackend::new(
            vec![
                ClientItem {
                    id: "cursor".into(),
                    name: "Cursor".into(),
                    protected: false,
                    servers: 2,
                    wrapped: 0,
                },
                ClientItem {
                    id: "vscode".into(),
                    name: "VS Code".into(),
                    protected: false,
                    servers: 1,
                    wrapped: 0,
                },
            ],
            "http://127.0.0.1:1",
        ));
        let now = Arc::new(AtomicI64::new(T0));
        let clock_now = now.clone();
        let shell = Shell::new(
            backend.clone(),
            Arc::new(move || clock_now.load(Ordering::SeqCst)),
        );
        shell.refresh().unwrap();
        (shell, backend, now)
    }

    fn block(server: &str) -> Notice {
        Notice {
            kind: NoticeKind::Block,
            server: server.into(),
            detail: "critical · secret egress".into(),
            route: "/events/1".into(),
        }
    }

    #[test]
    fn toggle_and_protect_all_reach_the_backend() {
        let (shell, backend, _) = fixture();
        shell.toggle_client("cursor").unwrap();
        let protected = |b: &MemoryBackend| -> Vec<bool> {
            b.clients().unwrap().iter().map(|c| c.protected).collect()
        };
        assert_eq!(protected(&backend), [true, false]);
        shell.toggle_client("cursor").unwrap();
        assert_eq!(
            protected(&backend),
            [false, false],
            "second click unprotects"
        );
        shell.protect_all().unwrap();
        assert_eq!(protected(&backend), [true, true]);
        assert_eq!(
            shell
                .snapshot()
                .clients
                .iter()
                .filter(|c| c.protected)
                .count(),
            2,
            "the snapshot follows the backend"
        );
        assert!(matches!(
            shell.toggle_client("nope"),
            Err(BackendError::UnknownClient(_))
        ));
    }

    #[test]
    fn tick_notifies_coalesces_and_counts() {
        let (shell, backend, now) = fixture();
        backend.push_notice(block("github"));
        let tick = shell.tick().unwrap();
        assert_eq!(tick.notify.len(), 1);
        assert_eq!(tick.notify[0].summary, "Gatehouse blocked github");
        assert!(tick.changed, "attention went 0 → 1");
        assert_eq!(
            state::look(shell.tray_status(), shell.now_ms()),
            state::TrayLook::Attention(1)
        );

        backend.push_notice(block("slack"));
        backend.push_notice(block("jira"));
        now.fetch_add(2_000, Ordering::SeqCst);
        assert!(
            shell.tick().unwrap().notify.is_empty(),
            "inside the 10 s window"
        );
        now.fetch_add(8_000, Ordering::SeqCst);
        let tick = shell.tick().unwrap();
        assert_eq!(tick.notify.len(), 1);
        assert_eq!(tick.notify[0].summary, "Gatehouse blocked slack");
        assert!(
            tick.notify[0].body.ends_with("+1 more"),
            "{:?}",
            tick.notify[0]
        );
    }

    #[test]
    fn pause_resumes_by_itself() {
        let (shell, backend, now) = fixture();
        shell.pause(state::DEFAULT_PAUSE_MIN).unwrap();
        shell.tick().unwrap();
        assert!(matches!(
            backend.protection().unwrap(),
            Protection::Paused { .. }
        ));
        now.store(T0 + 30 * 60_000, Ordering::SeqCst);
        assert!(shell.tick().unwrap().changed, "menu label counts down");
        assert!(
            !shell.tick().unwrap().changed,
            "same minute, nothing to redraw"
        );
        now.store(T0 + 60 * 60_000, Ordering::SeqCst);
        let tick = shell.tick().unwrap();
        assert!(tick.changed);
        assert_eq!(shell.snapshot().protection, Protection::Active);
        assert!(menu::action_ids(&shell.menu()).contains(&"pause:60".to_string()));
    }

    #[test]
    fn a_pause_set_elsewhere_shows_at_the_next_tick() {
        let (shell, backend, _) = fixture();
        shell.tick().unwrap();
        // e.g. `gatehouse pause` or the dashboard
        backend.pause(T0, 15).unwrap();
        assert!(shell.tick().unwrap().changed, "redrawn");
        assert_eq!(
            shell.tray_status().protection,
            Protection::paused_for(T0, 15)
        );
        backend.resume(T0).unwrap();
        assert!(shell.tick().unwrap().changed, "resumed elsewhere");
        assert_eq!(shell.tray_status().protection, Protection::Active);
    }
}

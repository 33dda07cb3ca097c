//! Config watcher, hosted by the control plane only (DESIGN §2).
//!
//! Watches the parent directories of config files (editors and clients
//! replace files by rename, which a watch on the file itself would miss),
//! debounces save bursts, ignores Gatehouse's own writes by content hash,
//! and limits re-protects per file per hour so Gatehouse never fights a
//! client that rewrites its own config. [`WatchState`] holds the decisions
//! and takes time as a parameter; [`ConfigWatcher`] is the thin `notify`
//! glue around it; [`review_change`] is what the control plane runs for a
//! changed file.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};

use crate::discover::ConfigFile;
use crate::fsutil::{resolve_target, sha256};
use crate::protect::{Options, Protector};
use crate::ClientError;

/// Tuning of the watcher.
#[derive(Debug, Clone)]
pub struct WatchPolicy {
    /// Quiet time after the last event before a file is looked at.
    pub debounce: Duration,
    /// Re-protects allowed per file within [`WatchPolicy::window`].
    pub max_reprotects: usize,
    /// The rate-limit window (one hour).
    pub window: Duration,
}

impl Default for WatchPolicy {
    fn default() -> Self {
        Self {
            debounce: Duration::from_millis(300),
            max_reprotects: 3,
            window: Duration::from_secs(3600),
        }
    }
}

/// Debounce, own-write and rate-limit bookkeeping. Pure: time is passed in.
#[derive(Debug, Default)]
pub struct WatchState {
    policy: WatchPolicy,
    pending: HashMap<PathBuf, Instant>,
    own_writes: HashMap<PathBuf, VecDeque<String>>,
    reprotects: HashMap<PathBuf, VecDeque<Instant>>,
}

const OWN_WRITES_KEPT: usize = 8;

impl WatchState {
    /// Empty state with `policy`.
    pub fn new(policy: WatchPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// A filesystem event touched `path` at `now`.
    pub fn on_event(&mut self, path: &Path, now: Instant) {
        self.pending
            .insert(path.to_path_buf(), now + self.policy.debounce);
    }

    /// Paths whose debounce has elapsed at `now` (each reported once per burst).
    pub fn due(&mut self, now: Instant) -> Vec<PathBuf> {
        let mut ready: Vec<PathBuf> = self
            .pending
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(p, _)| p.clone())
            .collect();
        ready.sort();
        for p in &ready {
            self.pending.remove(p);
        }
        ready
    }

    /// Remembers that Gatehouse wrote `text` to `path`.
    pub fn note_own_write(&mut self, path: &Path, text: &str) {
        let q = self.own_writes.entry(path.to_path_buf()).or_default();
        q.push_back(sha256(text));
        while q.len() > OWN_WRITES_KEPT {
            q.pop_front();
        }
    }

    /// Whether `text` is something Gatehouse itself wrote to `path`.
    pub fn is_own_write(&self, path: &Path, text: &str) -> bool {
        let h = sha256(text);
        self.own_writes.get(path).is_some_and(|q| q.contains(&h))
    }

    /// Takes one re-protect from the file's hourly budget; `false` when spent.
    pub fn allow_reprotect(&mut self, path: &Path, now: Instant) -> bool {
        let window = self.policy.window;
        let q = self.reprotects.entry(path.to_path_buf()).or_default();
        while q.front().is_some_and(|t| now.duration_since(*t) >= window) {
            q.pop_front();
        }
        if q.len() >= self.policy.max_reprotects {
            return false;
        }
        q.push_back(now);
        true
    }
}

/// Shared access to the watcher's state from its handler.
#[derive(Debug, Clone)]
pub struct WatchHandle(Arc<Mutex<WatchState>>);

impl WatchHandle {
    /// A handle on fresh state (for reviewing changes outside a
    /// [`ConfigWatcher`], e.g. in tests).
    pub fn new(policy: WatchPolicy) -> Self {
        Self(Arc::new(Mutex::new(WatchState::new(policy))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`WatchState::note_own_write`].
    pub fn note_own_write(&self, path: &Path, text: &str) {
        self.lock().note_own_write(&resolve_target(path), text);
    }

    /// See [`WatchState::allow_reprotect`].
    pub fn allow_reprotect(&self, path: &Path) -> bool {
        self.lock()
            .allow_reprotect(&resolve_target(path), Instant::now())
    }
}

/// Watches config files; calls `handler` on its own thread for each file
/// that changed (debounced, not by Gatehouse). Stops when dropped.
pub struct ConfigWatcher {
    _watcher: notify::RecommendedWatcher,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    handle: WatchHandle,
}

impl std::fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWatcher").finish_non_exhaustive()
    }
}

impl ConfigWatcher {
    /// Starts watching `files` (their resolved targets' parent directories).
    pub fn start(
        files: &[PathBuf],
        policy: WatchPolicy,
        mut handler: impl FnMut(&Path, &WatchHandle) + Send + 'static,
    ) -> Result<Self, ClientError> {
        let targets: Vec<PathBuf> = files.iter().map(|f| resolve_target(f)).collect();
        let handle = WatchHandle::new(policy);
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let wanted = targets.clone();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res {
                // Reads (ours included: reviewing a file opens it) are not
                // changes; reacting to them would review forever.
                if matches!(event.kind, notify::EventKind::Access(_)) {
                    return;
                }
                for p in event.paths {
                    if wanted.contains(&p) {
                        let _ = tx.send(p);
                    } else if let Some(t) = wanted
                        .iter()
                        .find(|w| w.file_name() == p.file_name() && w.parent() == p.parent())
                    {
                        let _ = tx.send(t.clone());
                    }
                }
            }
        })
        .map_err(|e| ClientError::State(format!("cannot start the config watcher: {e}")))?;
        let mut dirs: Vec<&Path> = targets.iter().filter_map(|t| t.parent()).collect();
        dirs.sort();
        dirs.dedup();
        for d in dirs {
            watcher
                .watch(d, RecursiveMode::NonRecursive)
                .map_err(|e| ClientError::State(format!("cannot watch {}: {e}", d.display())))?;
        }
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let h = handle.clone();
        let thread = std::thread::Builder::new()
            .name("gatehouse-config-watch".into())
            .spawn(move || loop {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(path) => h.lock().on_event(&path, Instant::now()),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                if stop_rx.try_recv().is_ok() {
                    return;
                }
                let due = h.lock().due(Instant::now());
                for path in due {
                    let Ok(text) = std::fs::read_to_string(&path) else {
                        continue;
                    };
                    if h.lock().is_own_write(&path, &text) {
                        continue;
                    }
                    handler(&path, &h);
                }
            })
            .map_err(|e| ClientError::State(format!("cannot start the watcher thread: {e}")))?;
        Ok(Self {
            _watcher: watcher,
            stop: Some(stop_tx),
            thread: Some(thread),
            handle,
        })
    }

    /// The state handle (to note writes made outside the handler).
    pub fn handle(&self) -> &WatchHandle {
        &self.handle
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a changed file shows, for events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A wrappable server that is not protected (`unprotected_server_added`).
    UnprotectedServerAdded { entry: String },
    /// A server Gatehouse had wrapped is no longer wrapped (`protection_removed`).
    ProtectionRemoved { server_id: String },
    /// The file no longer parses (left alone).
    Unparseable { message: String },
    /// Gatehouse re-protected the file.
    Reprotected { entries: Vec<String> },
    /// A re-protect was due but the hourly budget for this file is spent.
    RateLimited,
    /// A re-protect was due but failed (no keyring, client running, …);
    /// the file was left as it is. The message names no secret value.
    ReprotectFailed { message: String },
}

/// Reviews a changed config: reports added unprotected servers and removed
/// wrappings (`protected_ids`: the ids recorded for this file), and, when
/// `auto_protect` is on and the budget allows, protects it again. An entry
/// whose wrapping was removed is unwrapped again in the file, so it counts
/// as unprotected and is re-protected too (under its recorded id when its
/// launch command is unchanged). A failed protect is a
/// [`Finding::ReprotectFailed`], not an error.
pub fn review_change(
    protector: &Protector<'_>,
    file: &ConfigFile,
    protected_ids: &[String],
    auto_protect: bool,
    handle: &WatchHandle,
) -> Result<Vec<Finding>, ClientError> {
    let text = std::fs::read_to_string(&file.path).map_err(|source| ClientError::Io {
        path: file.path.clone(),
        source,
    })?;
    let doc = match file.parse(&text) {
        Ok(d) => d,
        Err(e) => {
            return Ok(vec![Finding::Unparseable {
                message: format!("{}:{}:{}: {}", file.path.display(), e.line, e.col, e.msg),
            }])
        }
    };
    let entries = doc.entries(
        file.client.servers_key,
        file.client.per_project_sections && file.project.is_none(),
    );
    let mut findings: Vec<Finding> = entries
        .iter()
        .filter(|e| e.wrapped.is_none() && e.blocker().is_none())
        .map(|e| Finding::UnprotectedServerAdded {
            entry: e.name.clone(),
        })
        .collect();
    let present: Vec<&str> = entries
        .iter()
        .filter_map(|e| e.wrapped.as_ref().map(|w| w.server_id.as_str()))
        .collect();
    findings.extend(
        protected_ids
            .iter()
            .filter(|id| !present.contains(&id.as_str()))
            .map(|id| Finding::ProtectionRemoved {
                server_id: id.clone(),
            }),
    );
    let needs = findings
        .iter()
        .any(|f| matches!(f, Finding::UnprotectedServerAdded { .. }));
    if auto_protect && needs {
        if handle.allow_reprotect(&file.path) {
            match protector.auto_protect_file(file, &Options::default()) {
                Ok(report) if report.changed => {
                    let written =
                        std::fs::read_to_string(&file.path).map_err(|source| ClientError::Io {
                            path: file.path.clone(),
                            source,
                        })?;
                    handle.note_own_write(&file.path, &written);
                    findings.push(Finding::Reprotected {
                        entries: report.entries,
                    });
                }
                Ok(_) => {}
                Err(e) => findings.push(Finding::ReprotectFailed {
                    message: e.to_string(),
                }),
            }
        } else {
            findings.push(Finding::RateLimited);
        }
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_are_debounced_into_one() {
        let mut s = WatchState::new(WatchPolicy::default());
        let t0 = Instant::now();
        let p = Path::new("/c/mcp.json");
        for ms in [0, 50, 100, 250] {
            s.on_event(p, t0 + Duration::from_millis(ms));
        }
        assert!(
            s.due(t0 + Duration::from_millis(500)).is_empty(),
            "still inside the quiet period after the last event"
        );
        assert_eq!(
            s.due(t0 + Duration::from_millis(551)),
            vec![p.to_path_buf()],
            "one report after the burst"
        );
        assert!(
            s.due(t0 + Duration::from_secs(5)).is_empty(),
            "reported once"
        );
    }

    #[test]
    fn own_writes_are_recognised_by_content() {
        let mut s = WatchState::new(WatchPolicy::default());
        let p = Path::new("/c/mcp.json");
        s.note_own_write(p, "ours");
        assert!(s.is_own_write(p, "ours"));
        assert!(
            !s.is_own_write(p, "theirs"),
            "a client's rewrite is not ours"
        );
        assert!(!s.is_own_write(Path::new("/other"), "ours"), "per file");
    }

    #[test]
    fn reprotects_are_rate_limited_per_file_per_hour() {
        let mut s = WatchState::new(WatchPolicy::default());
        let t0 = Instant::now();
        let p = Path::new("/c/mcp.json");
        let allowed: Vec<bool> = (0..5)
            .map(|i| s.allow_reprotect(p, t0 + Duration::from_secs(i * 60)))
            .collect();
        assert_eq!(allowed, [true, true, true, false, false], "three per hour");
        assert!(
            s.allow_reprotect(Path::new("/other"), t0),
            "budgets are per file"
        );
        assert!(
            s.allow_reprotect(p, t0 + Duration::from_secs(3601)),
            "the budget refills after an hour"
        );
    }
}

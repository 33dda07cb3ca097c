//! The config watcher, hosted by the control plane only (DESIGN §2):
//! watches every client config file and records what changed in them as
//! events — `unprotected_server_added` for a server a client or the person
//! added, `protection_removed` when Gatehouse's wrapping of an entry is
//! gone, `client_config_unparseable` for a file that no longer parses.
//! Decisions (debounce, own writes, re-protect budget) live in
//! `gatehouse_clients::watch`; this module connects them to the store, the
//! keyring and the `gatehouse` binary.
//!
//! Auto-protect (`gatehouse protect CLIENT --watch`, recorded per client in
//! `clients/state.json`): for those clients' files the watcher protects an
//! added or unwrapped server itself (`client_reprotected`), within the
//! per-file hourly budget (`reprotect_rate_limited` once spent), so a client
//! that writes its own version back can never start a rewrite war. Secrets
//! move only into the OS keyring found at start; without one a protect that
//! would move a secret fails (`auto_protect_failed`) and nothing is written.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gatehouse_clients::discover::{all_projects, config_files, ConfigFile};
use gatehouse_clients::fsutil::resolve_target;
use gatehouse_clients::protect::{new_server_id, SystemProbe};
use gatehouse_clients::state::{file_key, StateDir};
use gatehouse_clients::watch::{review_change, ConfigWatcher, Finding, WatchPolicy};
use gatehouse_clients::{HomeDirs, Protector, CLIENTS};
use gatehouse_store::{now_ms, Action, NewEvent, Severity, Store};
use gatehouse_vault::{Secret, Vault, VaultError};

use crate::api::clients::StoreRegistry;

/// What the watcher needs besides the home and the store.
#[derive(Clone, Default)]
pub struct WatchSetup {
    /// Project directories to watch besides the ones clients record.
    pub projects: Vec<PathBuf>,
    /// The `gatehouse` binary wrapped entries launch (`gatehouse up` passes
    /// its own path). Without it auto-protect is off.
    pub gatehouse_exe: Option<PathBuf>,
    /// The OS keyring, when it answered at start. Without it auto-protect
    /// still wraps entries that carry no secret, and moves none.
    pub vault: Option<Arc<dyn Vault>>,
    /// Debounce and re-protect budget.
    pub policy: WatchPolicy,
}

impl std::fmt::Debug for WatchSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchSetup")
            .field("projects", &self.projects)
            .field("gatehouse_exe", &self.gatehouse_exe)
            .field("vault", &self.vault.is_some())
            .finish_non_exhaustive()
    }
}

/// The vault of a control plane that found no keyring: every call fails,
/// so a protect that would move a secret writes nothing (never plain text).
struct NoKeyring;

impl NoKeyring {
    fn err() -> VaultError {
        VaultError::Unavailable(
            "the control plane found no OS keyring when it started, so auto-protect moves no secret \
             (restart `gatehouse up` once the keyring is unlocked, or run `gatehouse protect`)"
                .into(),
        )
    }
}

impl Vault for NoKeyring {
    fn get(&self, _: &str, _: &str) -> Result<Option<Secret<String>>, VaultError> {
        Err(Self::err())
    }
    fn set(&self, _: &str, _: &str, _: Secret<String>) -> Result<(), VaultError> {
        Err(Self::err())
    }
    fn delete(&self, _: &str, _: &str) -> Result<bool, VaultError> {
        Err(Self::err())
    }
    fn list(&self, _: &str) -> Result<Vec<String>, VaultError> {
        Err(Self::err())
    }
}

/// The files to watch: every config detected now, plus every user config
/// path a client could create later whose directory already exists (its
/// directory is watched anyway, so a file that appears there is seen).
fn watched_files(dirs: &HomeDirs, projects: &[PathBuf]) -> Vec<ConfigFile> {
    let mut files: Vec<ConfigFile> = CLIENTS
        .iter()
        .flat_map(|c| config_files(c, dirs, projects))
        .collect();
    for client in CLIENTS {
        for path in (client.user_files)(dirs) {
            let known = files
                .iter()
                .any(|f| resolve_target(&f.path) == resolve_target(&path));
            if known || path.exists() {
                continue;
            }
            // Named through its real directory, as the watch reports it.
            let real = path
                .parent()
                .and_then(|d| std::fs::canonicalize(d).ok())
                .filter(|d| d.is_dir())
                .zip(path.file_name())
                .map(|(d, name)| d.join(name));
            if let Some(path) = real {
                files.push(ConfigFile {
                    client,
                    path,
                    project: None,
                });
            }
        }
    }
    files
}

/// Starts watching the config files of the person running the control
/// plane (see [`watched_files`]). `None` when there is nothing to watch.
pub fn start(
    home: &Path,
    store: Store,
    setup: WatchSetup,
) -> Result<Option<ConfigWatcher>, gatehouse_clients::ClientError> {
    let dirs = HomeDirs::from_env();
    let projects = all_projects(&dirs, &setup.projects);
    let files = watched_files(&dirs, &projects);
    if files.is_empty() {
        return Ok(None);
    }
    let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    let runtime = tokio::runtime::Handle::current();
    let home = std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
    let WatchSetup {
        gatehouse_exe,
        vault,
        policy,
        ..
    } = setup;
    let auto_on = !StateDir { home: home.clone() }
        .load()
        .unwrap_or_default()
        .auto_protect
        .is_empty();
    if auto_on && vault.is_none() {
        eprintln!(
            "gatehouse: no OS keyring: auto-protect wraps only servers without secrets until restarted"
        );
    }
    let vault: Arc<dyn Vault> = vault.unwrap_or_else(|| Arc::new(NoKeyring));
    let watcher = ConfigWatcher::start(&paths, policy, move |path, handle| {
        let Some(file) = files.iter().find(|f| resolve_target(&f.path) == path) else {
            return;
        };
        let state = StateDir { home: home.clone() }.load().unwrap_or_default();
        let key = file_key(&file.path);
        let protected: Vec<String> = state
            .servers
            .iter()
            .filter(|r| file_key(Path::new(&r.config_path)) == key)
            .map(|r| r.id.clone())
            .collect();
        let auto = state.auto_protects(file.client.key) && gatehouse_exe.is_some();
        let registry = StoreRegistry::new(store.clone(), runtime.clone(), now_ms(), &home);
        let protector = Protector {
            gatehouse_home: home.clone(),
            exe: gatehouse_exe.clone().unwrap_or_default(),
            vault: vault.as_ref(),
            registry: &registry,
            processes: &SystemProbe,
            ids: Mutex::new(Box::new(new_server_id)),
            stamp: (now_ms() / 1000).to_string(),
        };
        let events: Vec<NewEvent> = match review_change(&protector, file, &protected, auto, handle)
        {
            Ok(findings) => {
                // An entry auto-protect wrapped is not reported as unprotected.
                let wrapped: Vec<&String> = findings
                    .iter()
                    .filter_map(|f| match f {
                        Finding::Reprotected { entries } => Some(entries),
                        _ => None,
                    })
                    .flatten()
                    .collect();
                findings
                    .iter()
                    .filter(|f| {
                        !matches!(f, Finding::UnprotectedServerAdded { entry } if wrapped.contains(&entry))
                    })
                    .filter_map(|f| event(file, f))
                    .collect()
            }
            Err(err) => vec![base(
                "client_config_unreadable",
                Severity::Medium,
                format!("{}: {err}", file.path.display()),
                file,
            )],
        };
        if events.is_empty() {
            return;
        }
        if let Err(err) = runtime.block_on(store.insert_events(&events)) {
            eprintln!("gatehouse: config watcher could not record events: {err}");
        }
    })?;
    Ok(Some(watcher))
}

fn base(kind: &str, severity: Severity, reason: String, file: &ConfigFile) -> NewEvent {
    NewEvent {
        time_ms: now_ms(),
        event_type: kind.into(),
        server_id: None,
        tool: None,
        action: Action::Alert,
        rule: Some(format!("clients.{kind}")),
        severity,
        reason,
        evidence_json: Some(
            serde_json::json!({
                "client": file.client.key,
                "file": file.path.display().to_string(),
            })
            .to_string(),
        ),
        session: None,
    }
}

fn event(file: &ConfigFile, finding: &Finding) -> Option<NewEvent> {
    let shown = file.path.display();
    let client = file.client.name;
    Some(match finding {
        Finding::UnprotectedServerAdded { entry } => {
            let mut e = base(
                "unprotected_server_added",
                Severity::Medium,
                format!(
                    "{client}'s {shown} has a server {entry:?} that runs without Gatehouse; \
                     protect it with `gatehouse protect {}`",
                    file.client.key
                ),
                file,
            );
            e.evidence_json = Some(
                serde_json::json!({"client": file.client.key, "file": shown.to_string(), "entry": entry})
                    .to_string(),
            );
            e
        }
        Finding::ProtectionRemoved { server_id } => {
            let mut e = base(
                "protection_removed",
                Severity::High,
                format!("Gatehouse's wrapping of server {server_id} was removed from {shown}"),
                file,
            );
            e.server_id = Some(server_id.clone());
            e
        }
        Finding::Unparseable { message } => base(
            "client_config_unparseable",
            Severity::Medium,
            message.clone(),
            file,
        ),
        Finding::Reprotected { entries } => {
            let mut e = base(
                "client_reprotected",
                Severity::Info,
                format!(
                    "auto-protect wrapped {} in {client}'s {shown}",
                    entries.join(", ")
                ),
                file,
            );
            e.action = Action::Allow;
            e.evidence_json = Some(
                serde_json::json!({"client": file.client.key, "file": shown.to_string(), "entries": entries})
                    .to_string(),
            );
            e
        }
        Finding::ReprotectFailed { message } => base(
            "auto_protect_failed",
            Severity::High,
            format!("auto-protect left {client}'s {shown} as it is: {message}"),
            file,
        ),
        Finding::RateLimited => base(
            "reprotect_rate_limited",
            Severity::Medium,
            format!(
                "{shown} keeps changing back; Gatehouse stopped re-protecting it for this hour \
                 (a client that rewrites its own config wins; quit it, then run `gatehouse protect {}`)",
                file.client.key
            ),
            file,
        ),
    })
}

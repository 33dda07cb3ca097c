//! AI clients: discovery, and protect / unprotect through the public API of
//! `gatehouse-clients` (the same span edits, backups and keyring moves as
//! `gatehouse protect` / `unprotect`). Needs the client directories, the
//! `gatehouse` binary wrapped entries launch, and a keyring; without them
//! the change routes answer `501 unavailable`.

use std::path::PathBuf;
use std::sync::Mutex;

use axum::extract::{Path, State};
use axum::Json;
use gatehouse_clients::discover::{all_projects, config_files};
use gatehouse_clients::protect::{new_server_id, SystemProbe};
use gatehouse_clients::{ClientError, Options, ProtectedServer, Protector, ServerRegistry};
use gatehouse_store::{NewServer, Store};
use serde_json::{json, Value};

use super::auth::Authed;
use super::event_types;
use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// `GET /api/clients` — AI clients found on this computer, their config
/// files and servers (secret names only), via gatehouse-clients.
pub(crate) async fn list(State(state): State<AppState>, _who: Authed) -> ApiResult<Json<Value>> {
    let Some(dirs) = state.client_dirs.clone() else {
        return Ok(Json(json!({ "available": false, "items": [] })));
    };
    let home = state.home.clone();
    let (found, auto) = tokio::task::spawn_blocking(move || {
        let auto = gatehouse_clients::state::StateDir { home }
            .load()
            .map(|s| s.auto_protect)
            .unwrap_or_default();
        (gatehouse_clients::detect(&dirs, &[]), auto)
    })
    .await
    .map_err(|_| ApiError::internal("client discovery failed"))?;
    let items: Vec<Value> = found
        .iter()
        .map(|c| {
            json!({
                "id": c.key,
                "name": c.name,
                "files": c.files,
                "blockers": c.blockers,
                "reload": c.reload,
                "servers": c.server_count(),
                "protected_servers": c.protected_count(),
                "protected": c.is_protected(),
                "auto_protect": auto.contains(c.key),
            })
        })
        .collect();
    Ok(Json(
        json!({ "available": true, "items": items, "can_change": can_change(&state) }),
    ))
}

fn can_change(state: &AppState) -> bool {
    state.client_dirs.is_some() && state.gatehouse_exe.is_some() && state.vault.is_some()
}

/// `POST /api/clients/{id}/protect`
pub(crate) async fn protect(
    State(state): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    change(state, who, id, false).await
}

/// `POST /api/clients/{id}/unprotect`
pub(crate) async fn unprotect(
    State(state): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    change(state, who, id, true).await
}

/// Identities (and fingerprints of moved secrets) go to the store, where
/// `gatehouse wrap` reads them. Used by the API, the config watcher and
/// `gatehouse protect`, always from a thread outside the runtime.
pub struct StoreRegistry {
    store: Store,
    runtime: tokio::runtime::Handle,
    now_ms: i64,
    /// The install's fingerprint key (None: the install key is unreadable,
    /// so nothing is published and wrap publishes at its start instead).
    guard_key: Option<gatehouse_vault::GuardKey>,
}

impl StoreRegistry {
    pub fn new(
        store: Store,
        runtime: tokio::runtime::Handle,
        now_ms: i64,
        home: &std::path::Path,
    ) -> Self {
        let guard_key = gatehouse_store::home::install_key(home)
            .ok()
            .map(|k| gatehouse_vault::GuardKey::for_install(&k));
        StoreRegistry {
            store,
            runtime,
            now_ms,
            guard_key,
        }
    }
}

impl ServerRegistry for StoreRegistry {
    fn publish_secrets(
        &self,
        server_id: &str,
        secrets: &[(&str, &gatehouse_vault::Secret<String>)],
    ) -> Result<(), ClientError> {
        let Some(key) = &self.guard_key else {
            return Ok(());
        };
        let items = gatehouse_vault::publishable(key, server_id, secrets);
        let refs: Vec<(&str, &str)> = items
            .iter()
            .map(|(n, f)| (n.as_str(), f.as_str()))
            .collect();
        self.runtime
            .block_on(
                self.store
                    .replace_fingerprints(server_id, &refs, self.now_ms),
            )
            .map_err(|e| ClientError::State(format!("publishing fingerprints of {server_id}: {e}")))
    }

    fn register(&self, s: &ProtectedServer) -> Result<(), ClientError> {
        let server = NewServer {
            id: s.id.clone(),
            display_name: s.entry_name.clone(),
            client: s.client.clone(),
            config_path: s.config_path.clone(),
            scope: s.scope.clone(),
            entry_name: s.entry_name.clone(),
            command_hash: s.launch_hash.clone(),
            argv_json: serde_json::to_string(&s.argv)
                .map_err(|e| ClientError::State(e.to_string()))?,
            cwd: s.cwd.clone(),
        };
        self.runtime
            .block_on(self.store.register_protected_server(&server, self.now_ms))
            .map_err(|e| ClientError::State(format!("recording server {}: {e}", s.id)))
    }
}

async fn change(state: AppState, who: Authed, id: String, undo: bool) -> ApiResult<Json<Value>> {
    if state.vault.is_none() && state.client_dirs.is_some() && state.gatehouse_exe.is_some() {
        return Err(ApiError::KeyringUnavailable(crate::keyring_probe_failure()));
    }
    let (Some(dirs), Some(exe), Some(vault)) = (
        state.client_dirs.clone(),
        state.gatehouse_exe.clone(),
        state.vault.clone(),
    ) else {
        return Err(ApiError::Unavailable(
            "protecting clients from here (no keyring or no gatehouse binary; use `gatehouse protect` / `gatehouse unprotect`)",
        ));
    };
    let changer = ClientChanger {
        store: state.store.clone(),
        home: state.home.clone(),
        exe,
        vault,
        dirs,
    };
    let report = changer
        .change(
            &id,
            undo,
            state.now_ms(),
            "the dashboard",
            Some(&who.session_id),
        )
        .await?;
    Ok(Json(report.to_json()))
}

/// Protect / unprotect outside a request (the tray menu) and behind the API:
/// the same span edits, backups and keyring moves as the CLI.
#[derive(Clone)]
pub struct ClientChanger {
    pub store: Store,
    pub home: PathBuf,
    /// The `gatehouse` binary (or stable launcher) wrapped entries run.
    pub exe: PathBuf,
    pub vault: std::sync::Arc<dyn gatehouse_vault::Vault>,
    pub dirs: gatehouse_clients::HomeDirs,
}

/// What one protect / unprotect of a client did, file by file.
#[derive(Debug, Clone)]
pub struct ChangeReport {
    pub client: &'static str,
    /// One JSON object per config file: path, changed, entries, skipped,
    /// notes, error (which names files and positions, never values).
    pub files: Vec<Value>,
    /// Every file was handled without an error.
    pub ok: bool,
}

impl ChangeReport {
    pub fn to_json(&self) -> Value {
        json!({ "client": self.client, "ok": self.ok, "files": self.files })
    }

    /// The first file error, for a one-line message.
    pub fn first_error(&self) -> Option<String> {
        self.files
            .iter()
            .find_map(|f| f["error"].as_str().map(str::to_owned))
    }
}

impl ClientChanger {
    /// Protects (`undo` = false) or restores (`undo` = true) every config
    /// file of client `id`, and records a `client_protected` /
    /// `client_unprotected` event naming `by` (e.g. "the tray").
    pub async fn change(
        &self,
        id: &str,
        undo: bool,
        now_ms: i64,
        by: &str,
        ui_session: Option<&str>,
    ) -> Result<ChangeReport, ApiError> {
        let spec = gatehouse_clients::client(id).ok_or(ApiError::NotFound("client"))?;
        let home: PathBuf = std::path::absolute(&self.home).unwrap_or_else(|_| self.home.clone());
        let registry = StoreRegistry::new(
            self.store.clone(),
            tokio::runtime::Handle::current(),
            now_ms,
            &home,
        );
        let stamp = (now_ms / 1000).to_string();
        let (exe, vault, dirs) = (self.exe.clone(), self.vault.clone(), self.dirs.clone());
        let files = tokio::task::spawn_blocking(move || {
            let state = gatehouse_clients::state::StateDir { home: home.clone() };
            if undo {
                // as `gatehouse unprotect`: the watcher must not wrap it again
                if let Err(e) = state.set_auto_protect(&[spec.key], false) {
                    tracing::warn!(error = %e, client = spec.key, "auto-protect left on");
                }
            }
            let protector = Protector {
                gatehouse_home: home,
                exe,
                vault: vault.as_ref(),
                registry: &registry,
                processes: &SystemProbe,
                ids: Mutex::new(Box::new(new_server_id)),
                stamp,
            };
            // Git-tracked project files need the CLI's explicit `--yes`.
            // A running Claude Code is changed through its own CLI when present;
            // otherwise refused at once (a click does not wait for a client to quit).
            let opts = Options {
                dry_run: false,
                yes: undo,
                repair: false,
                wait: std::time::Duration::ZERO,
                client_cli: spec
                    .own_cli
                    .and_then(gatehouse_clients::client_cli::find_on_path),
            };
            // An unprotect also finds project files no editor lists now.
            let protected = if undo {
                state.protected_projects(spec.key).unwrap_or_default()
            } else {
                Vec::new()
            };
            let projects = all_projects(&dirs, &protected);
            config_files(spec, &dirs, &projects)
                .iter()
                .map(|f| {
                    let result = if undo {
                        protector.unprotect_file(f, &opts)
                    } else {
                        protector.protect_file(f, &opts)
                    };
                    match result {
                        Ok(r) => json!({
                            "path": r.path,
                            "changed": r.changed,
                            "entries": r.entries,
                            "skipped": r.skipped.iter().map(|(name, why)| json!({"name": name, "why": why})).collect::<Vec<_>>(),
                            "notes": r.notes,
                            "error": null,
                        }),
                        // Errors name files and positions, never values.
                        Err(e) => json!({ "path": f.path, "changed": false, "entries": [], "skipped": [], "notes": [], "error": e.to_string() }),
                    }
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|_| ApiError::internal("protect task failed"))?;
        let changed: usize = files
            .iter()
            .filter_map(|f| f["entries"].as_array())
            .map(Vec::len)
            .sum();
        let ok = files.iter().all(|f| f["error"].is_null());
        let verb = if undo { "unprotected" } else { "protected" };
        let mut ev = gatehouse_store::NewEvent::new(
            now_ms,
            if undo {
                event_types::CLIENT_UNPROTECTED
            } else {
                event_types::CLIENT_PROTECTED
            },
            gatehouse_store::Action::Audit,
            gatehouse_store::Severity::Info,
            &format!(
                "{} {verb} from {by}: {changed} server entr{} in {} file(s){}",
                spec.name,
                if changed == 1 { "y" } else { "ies" },
                files.len(),
                if ok { "" } else { "; some files failed" }
            ),
        );
        ev.rule = Some("control_plane".to_owned());
        ev.session = ui_session.map(|s| format!("ui:{s}"));
        if let Err(e) = self.store.insert_event(&ev).await {
            tracing::warn!(error = %e, "could not record the client change");
        }
        Ok(ChangeReport {
            client: spec.key,
            files,
            ok,
        })
    }
}

/// Self-heal at start (issue 6; `gatehouse up` and the tray app): in every
/// detected client config, wrappers whose `gatehouse` binary is gone are
/// pointed at `exe`. Nothing new is wrapped; git-tracked project files and
/// running clients that rewrite their own file are left alone (reported on
/// stderr). Each changed file is a `client_config_repaired` event. Returns
/// the changed files.
pub async fn repair_all(store: Store, home: PathBuf, exe: PathBuf) -> Vec<PathBuf> {
    let registry = StoreRegistry::new(
        store.clone(),
        tokio::runtime::Handle::current(),
        gatehouse_store::now_ms(),
        &home,
    );
    let stamp = (gatehouse_store::now_ms() / 1000).to_string();
    let reports = tokio::task::spawn_blocking(move || {
        // Nothing moves into the keyring when only repairing.
        let vault = gatehouse_vault::MemoryVault::new();
        let protector = Protector {
            gatehouse_home: home,
            exe,
            vault: &vault,
            registry: &registry,
            processes: &SystemProbe,
            ids: Mutex::new(Box::new(new_server_id)),
            stamp,
        };
        let dirs = gatehouse_clients::HomeDirs::from_env();
        let projects = all_projects(&dirs, &[]);
        let mut changed = Vec::new();
        for client in gatehouse_clients::CLIENTS {
            for file in config_files(client, &dirs, &projects) {
                match protector.repair_file(&file, &Options::default()) {
                    Ok(r) if r.changed => changed.push((file.path.clone(), r.entries)),
                    Ok(_) => {}
                    Err(e) => eprintln!("gatehouse: not repaired: {e}"),
                }
            }
        }
        changed
    })
    .await
    .unwrap_or_default();
    let now = gatehouse_store::now_ms();
    let events: Vec<gatehouse_store::NewEvent> = reports
        .iter()
        .map(|(path, entries)| gatehouse_store::NewEvent {
            evidence_json: Some(
                json!({ "file": path.display().to_string(), "entries": entries }).to_string(),
            ),
            ..gatehouse_store::NewEvent::new(
                now,
                event_types::CLIENT_CONFIG_REPAIRED,
                gatehouse_store::Action::Allow,
                gatehouse_store::Severity::Info,
                &format!(
                    "{}: wrapped entries pointed at the current gatehouse binary (the old one is gone)",
                    path.display()
                ),
            )
        })
        .collect();
    if !events.is_empty() {
        if let Err(e) = store.insert_events(&events).await {
            eprintln!("gatehouse: could not record repairs: {e}");
        }
    }
    reports.into_iter().map(|(path, _)| path).collect()
}

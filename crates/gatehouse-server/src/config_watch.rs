//! The config watcher, hosted by the control plane only (DESIGN §2):
//! watches every detected client config file and records what changed in
//! them as events — `unprotected_server_added` for a server a client or the
//! person added, `protection_removed` when Gatehouse's wrapping of an entry
//! is gone, `client_config_unparseable` for a file that no longer parses.
//! Decisions (debounce, own writes, re-protect budget) live in
//! `gatehouse_clients::watch`; this module only connects them to the store.
//!
//! Auto-protect is not on here: nothing is rewritten, so a client that
//! writes its own version back can never start a rewrite war.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gatehouse_clients::discover::{all_projects, config_files, ConfigFile};
use gatehouse_clients::protect::{FixedProbe, NoRegistry, Protector};
use gatehouse_clients::state::StateDir;
use gatehouse_clients::watch::{review_change, ConfigWatcher, Finding, WatchPolicy};
use gatehouse_clients::{HomeDirs, CLIENTS};
use gatehouse_store::{Action, NewEvent, Severity, Store};
use gatehouse_vault::MemoryVault;

/// Starts watching the config files detected for the person running the
/// control plane (plus `projects`). `None` when there is nothing to watch.
pub fn start(
    home: &Path,
    store: Store,
    projects: &[PathBuf],
) -> Result<Option<ConfigWatcher>, gatehouse_clients::ClientError> {
    let dirs = HomeDirs::from_env();
    let projects = all_projects(&dirs, projects);
    let files: Vec<ConfigFile> = CLIENTS
        .iter()
        .flat_map(|c| config_files(c, &dirs, &projects))
        .collect();
    if files.is_empty() {
        return Ok(None);
    }
    let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    let runtime = tokio::runtime::Handle::current();
    let home = home.to_path_buf();
    let watcher = ConfigWatcher::start(&paths, WatchPolicy::default(), move |path, handle| {
        let Some(file) = files
            .iter()
            .find(|f| gatehouse_clients::fsutil::resolve_target(&f.path) == path)
        else {
            return;
        };
        let protected: Vec<String> = StateDir { home: home.clone() }
            .load()
            .map(|s| {
                s.servers
                    .into_iter()
                    .filter(|r| Path::new(&r.config_path) == file.path)
                    .map(|r| r.id)
                    .collect()
            })
            .unwrap_or_default();
        // Reporting only: this protector never writes (auto-protect off).
        let vault = MemoryVault::new();
        let probe = FixedProbe::default();
        let protector = Protector {
            gatehouse_home: home.clone(),
            exe: PathBuf::new(),
            vault: &vault,
            registry: &NoRegistry,
            processes: &probe,
            ids: Mutex::new(Box::new(gatehouse_clients::protect::new_server_id)),
            stamp: String::new(),
        };
        let events: Vec<NewEvent> = match review_change(&protector, file, &protected, false, handle)
        {
            Ok(findings) => findings.iter().filter_map(|f| event(file, f)).collect(),
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

fn now_ms() -> i64 {
    gatehouse_store::now_ms()
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
                "server_reprotected",
                Severity::Info,
                format!("re-protected {} in {shown}", entries.join(", ")),
                file,
            );
            e.action = Action::Allow;
            e
        }
        Finding::RateLimited => base(
            "reprotect_rate_limited",
            Severity::Medium,
            format!(
                "{shown} keeps changing back; Gatehouse stopped re-protecting it for this hour"
            ),
            file,
        ),
    })
}

//! The watcher with real filesystem events: a server added to a watched
//! file is protected within 2 s, and a client that keeps rewriting its file
//! back does not start a rewrite war.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_clients::discover::config_files;
use gatehouse_clients::protect::{FixedProbe, NoRegistry, Options, Protector};
use gatehouse_clients::state::StateDir;
use gatehouse_clients::watch::{review_change, ConfigWatcher, Finding, WatchHandle, WatchPolicy};
use gatehouse_clients::{client, HomeDirs, Os};
use gatehouse_vault::MemoryVault;

fn replace_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn added_server_is_protected_within_two_seconds_without_a_rewrite_war() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    auto_on(&root, true);
    let dirs = HomeDirs::fixture(&root, Os::Linux);
    let path = dirs.home.join(".cursor/mcp.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"server-a\" }\n  }\n}\n",
    )
    .unwrap();
    let vault: &'static MemoryVault = Box::leak(Box::new(MemoryVault::new()));
    let n = Arc::new(AtomicUsize::new(0));
    let make = {
        let root = root.clone();
        move || {
            let n = Arc::clone(&n);
            Protector {
                gatehouse_home: root.join("gh"),
                exe: PathBuf::from("/opt/gatehouse/bin/gatehouse"),
                vault,
                registry: &NoRegistry,
                processes: Box::leak(Box::new(FixedProbe::default())),
                ids: Mutex::new(Box::new(move || {
                    format!("srv_w{}", n.fetch_add(1, Ordering::SeqCst))
                })),
                stamp: "t".into(),
            }
        }
    };
    let file = config_files(client("cursor").unwrap(), &dirs, &[]).remove(0);
    make().protect_file(&file, &Options::default()).unwrap();

    let (tx, rx) = mpsc::channel::<Vec<Finding>>();
    let watcher = {
        let file = file.clone();
        let home = root.join("gh");
        let make = make.clone();
        ConfigWatcher::start(
            std::slice::from_ref(&path),
            WatchPolicy {
                debounce: Duration::from_millis(150),
                ..WatchPolicy::default()
            },
            move |_, handle| {
                let ids: Vec<String> = StateDir { home: home.clone() }
                    .load()
                    .unwrap()
                    .servers
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                let findings = review_change(&make(), &file, &ids, true, handle).unwrap();
                let _ = tx.send(findings);
            },
        )
        .unwrap()
    };
    std::thread::sleep(Duration::from_millis(200));

    // A person (or client) adds a server, saving by rename like editors do.
    let protected = std::fs::read_to_string(&path).unwrap();
    let start = Instant::now();
    replace_by_rename(
        &path,
        &protected.replace(
            "\"mcpServers\": {",
            "\"mcpServers\": {\n    \"b\": { \"command\": \"server-b\" },",
        ),
    );
    let findings = rx
        .recv_timeout(Duration::from_secs(2))
        .expect("the change is reviewed within 2 s");
    assert!(
        findings.contains(&Finding::UnprotectedServerAdded { entry: "b".into() }),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| matches!(f, Finding::Reprotected { .. })),
        "auto-protect wraps it: {findings:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
    let now = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        now.matches("\"wrap\"").count(),
        2,
        "both servers wrapped: {now}"
    );
    // Our own write must not come back as a change.
    assert!(
        rx.recv_timeout(Duration::from_millis(600)).is_err(),
        "Gatehouse's own write is ignored"
    );

    // A client that keeps writing its unwrapped version back: budget, then events only.
    let client_version = "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"server-a\" },\n    \"c\": { \"command\": \"server-c\" }\n  }\n}\n";
    let mut reprotects = 0;
    let mut limited = false;
    for _ in 0..5 {
        replace_by_rename(&path, client_version);
        let f = rx
            .recv_timeout(Duration::from_secs(2))
            .expect("each rewrite is reviewed");
        reprotects += f
            .iter()
            .filter(|x| matches!(x, Finding::Reprotected { .. }))
            .count();
        limited |= f.contains(&Finding::RateLimited);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        reprotects <= 2,
        "at most the remaining hourly budget is spent, got {reprotects}"
    );
    assert!(limited, "after the budget the watcher only reports");
    drop(watcher);
}

const TOKEN: &str = "ghp_WatchCanary0123456789abcdefABCDEFGHIJ";

/// A Cursor file with one server carrying a secret in its env.
/// Switches auto-protect on for Cursor, as `gatehouse protect --watch` does.
fn auto_on(root: &Path, on: bool) {
    StateDir {
        home: root.join("gh"),
    }
    .set_auto_protect(&["cursor"], on)
    .unwrap();
}

fn cursor_with_secret(root: &Path) -> (HomeDirs, PathBuf, String) {
    auto_on(root, true);
    let dirs = HomeDirs::fixture(root, Os::Linux);
    let path = dirs.home.join(".cursor/mcp.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = format!(
        "{{\n  \"mcpServers\": {{\n    \"gh\": {{ \"command\": \"server-gh\", \"env\": {{ \"GITHUB_TOKEN\": \"{TOKEN}\" }} }}\n  }}\n}}\n"
    );
    std::fs::write(&path, &text).unwrap();
    (dirs, path, text)
}

/// Ids unique across the protectors of a test run.
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

fn protector<'a>(root: &Path, vault: &'a dyn gatehouse_vault::Vault) -> Protector<'a> {
    Protector {
        gatehouse_home: root.join("gh"),
        exe: PathBuf::from("/opt/gatehouse/bin/gatehouse"),
        vault,
        registry: &NoRegistry,
        processes: Box::leak(Box::new(FixedProbe::default())),
        ids: Mutex::new(Box::new(|| {
            format!("srv_r{}", NEXT_ID.fetch_add(1, Ordering::SeqCst))
        })),
        stamp: "t".into(),
    }
}

fn recorded_ids(root: &Path) -> Vec<String> {
    StateDir {
        home: root.join("gh"),
    }
    .load()
    .unwrap()
    .servers
    .into_iter()
    .map(|s| s.id)
    .collect()
}

#[test]
fn a_removed_wrapping_is_reprotected_under_its_recorded_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (dirs, path, original) = cursor_with_secret(root);
    let vault = MemoryVault::new();
    let file = config_files(client("cursor").unwrap(), &dirs, &[]).remove(0);
    protector(root, &vault)
        .protect_file(&file, &Options::default())
        .unwrap();
    let protected = std::fs::read_to_string(&path).unwrap();
    let ids = recorded_ids(root);
    assert_eq!(ids.len(), 1);
    let id = ids[0].clone();

    // The client writes its own version (wrapping gone, secret back) over ours.
    std::fs::write(&path, &original).unwrap();
    let handle = WatchHandle::new(WatchPolicy::default());
    let findings = review_change(&protector(root, &vault), &file, &ids, true, &handle).unwrap();
    assert!(
        findings.contains(&Finding::ProtectionRemoved {
            server_id: id.clone()
        }),
        "the removal is reported: {findings:?}"
    );
    assert!(
        findings.contains(&Finding::Reprotected {
            entries: vec!["gh".into()]
        }),
        "and undone: {findings:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        protected,
        "the same id again, so the same bytes (pins and approvals stay with it)"
    );
    assert_eq!(recorded_ids(root), vec![id.clone()], "no second record");
    assert_eq!(
        gatehouse_vault::Vault::get(&vault, &id, "GITHUB_TOKEN")
            .unwrap()
            .map(|s| s.expose().clone())
            .as_deref(),
        Some(TOKEN)
    );

    // A different command under the same name is a different server.
    std::fs::write(&path, original.replace("server-gh", "other-gh")).unwrap();
    review_change(&protector(root, &vault), &file, &ids, true, &handle).unwrap();
    let now = std::fs::read_to_string(&path).unwrap();
    assert!(
        now.contains("\"wrap\"") && !now.contains(&format!("\"{id}\"")),
        "wrapped, with a fresh id for a changed launch command: {now}"
    );
}

/// A keyring that is not there.
struct NoKeyring;

impl gatehouse_vault::Vault for NoKeyring {
    fn get(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<gatehouse_vault::Secret<String>>, gatehouse_vault::VaultError> {
        Err(gatehouse_vault::VaultError::Unavailable("test".into()))
    }
    fn set(
        &self,
        _: &str,
        _: &str,
        _: gatehouse_vault::Secret<String>,
    ) -> Result<(), gatehouse_vault::VaultError> {
        Err(gatehouse_vault::VaultError::Unavailable("test".into()))
    }
    fn delete(&self, _: &str, _: &str) -> Result<bool, gatehouse_vault::VaultError> {
        Err(gatehouse_vault::VaultError::Unavailable("test".into()))
    }
    fn list(&self, _: &str) -> Result<Vec<String>, gatehouse_vault::VaultError> {
        Err(gatehouse_vault::VaultError::Unavailable("test".into()))
    }
}

#[test]
fn without_a_keyring_auto_protect_moves_no_secret_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (dirs, path, original) = cursor_with_secret(root);
    let file = config_files(client("cursor").unwrap(), &dirs, &[]).remove(0);
    let handle = WatchHandle::new(WatchPolicy::default());
    let findings = review_change(&protector(root, &NoKeyring), &file, &[], true, &handle).unwrap();
    let failed = findings
        .iter()
        .find_map(|f| match f {
            Finding::ReprotectFailed { message } => Some(message.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a failed protect is a finding: {findings:?}"));
    assert!(failed.contains("keyring"), "{failed}");
    assert!(!failed.contains(TOKEN), "no secret in the message");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        original,
        "nothing written (no plain-text fallback)"
    );
}

/// The switch is read again under the state lock: a change reviewed with
/// auto-protect on, after an unprotect turned it off, writes nothing.
#[test]
fn auto_protect_switched_off_meanwhile_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (dirs, path, original) = cursor_with_secret(root);
    auto_on(root, false);
    let file = config_files(client("cursor").unwrap(), &dirs, &[]).remove(0);
    let vault = MemoryVault::new();
    let handle = WatchHandle::new(WatchPolicy::default());
    let findings = review_change(&protector(root, &vault), &file, &[], true, &handle).unwrap();
    assert!(
        !findings
            .iter()
            .any(|f| matches!(f, Finding::Reprotected { .. })),
        "{findings:?}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
}

//! Launch pinning (DESIGN §6, `pinning.launch_pinning` and
//! `on_launch_change`): what a server's launch actually executes (the
//! resolved executable and its hash, the script of a known interpreter, the
//! `npx`/`uvx`/`pipx` package) is recorded per server id, and a change is an
//! `mcp_server_binary_mismatch` event. Under `on_launch_change = "hold"` a
//! changed launch also waits for approval (`launch_approvals`, MAC'd): it
//! runs without its secrets and with every tool withheld until
//! `gatehouse pins trust-launch --server ID` (or its `held_launch` request in
//! the dashboard's inbox) approves it; the approval takes
//! effect at the server's next start.
//!
//! This is distinct from identity (`check_identity`): a different *command*
//! for the same id is a different server (`server_identity_mismatch`, its
//! own pin namespace, never approvable here); a changed *binary, script or
//! package* behind the same command is the same server, changed.
//!
//! The executable is hashed before the spawn only when an earlier launch
//! exists to compare with; its hash is reused while the file's (device,
//! inode, size, mtime, ctime) stamp is unchanged, so an unchanged server
//! does not re-read a 100 MB runtime at every start.

use std::path::Path;

use gatehouse_engine::launch::launch_facts;
use gatehouse_engine::EngineEvent;
use gatehouse_store::{LaunchCheck, LaunchPin, MacKey, Store};
use sha2::{Digest, Sha256};
use tracing::debug;

use crate::ready::Gate;
use crate::wrap::{now_ms, Recorder};

/// What a held launch's blocked calls and stderr say.
pub fn held_reason(server_id: &str) -> String {
    format!(
        "the server's launch (executable, script or package) changed since it was approved; \
         it runs without its secrets and its tools are held until a person approves it in the \
         dashboard's inbox or with \
         `gatehouse pins trust-launch --server {server_id}` (then restart it)"
    )
}

/// The launch check's answer.
pub(crate) struct Checked {
    /// Why the launch is held (`hold` set and the launch changed since its
    /// approved fingerprint).
    pub held: Option<String>,
    /// Recording the launch, in the background: wrap awaits it before it
    /// closes the store on its way out.
    pub recording: tokio::task::JoinHandle<()>,
}

/// Records this launch and judges it. A first launch (nothing recorded
/// yet) is never held and is judged in the background, off the start-up
/// path; the record is written once `after` opens.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn check(
    store: &Store,
    key: &MacKey,
    server_id: &str,
    exe: &Path,
    argv: &[String],
    recorded: Option<&LaunchPin>,
    hold: bool,
    recorder: &Recorder,
    after: Gate,
) -> Checked {
    // An approval that cannot be read may exist: judged below, not taken
    // for a first launch.
    let known = hold
        && (recorded.is_some()
            || store
                .launch_approval(key, server_id)
                .await
                .map_or(true, |row| row.is_some()));
    if !known {
        let (store, key, server_id) = (store.clone(), key.clone(), server_id.to_string());
        let (exe, argv, recorder) = (exe.to_path_buf(), argv.to_vec(), recorder.clone());
        let recording = tokio::spawn(async move {
            after.wait().await;
            let (pin, unversioned) = launch_pin(&store, &server_id, &exe, &argv).await;
            let mut held = false;
            if hold {
                // First sight: this launch is the approved one.
                let judged =
                    judge(&store, &key, &server_id, &pin, recorded_fingerprint(None)).await;
                held = judged != Judged::Approved;
            }
            record(&store, &server_id, pin, unversioned, held, &recorder).await;
        });
        return Checked {
            held: None,
            recording,
        };
    }
    let (pin, unversioned) = launch_pin(store, server_id, exe, argv).await;
    let judged = judge(store, key, server_id, &pin, recorded_fingerprint(recorded)).await;
    let held = judged != Judged::Approved;
    if judged == Judged::Held {
        // The dashboard's inbox shows it; answering approves this fingerprint.
        let ask = gatehouse_store::NewConsent {
            kind: gatehouse_store::ConsentKind::HeldLaunch,
            server_id: server_id.to_string(),
            tool: None,
            payload_json: serde_json::json!({
                "fingerprint": pin.fingerprint(),
                "launch": pin_json(&pin),
            })
            .to_string(),
            created_ms: now_ms() as i64,
            expires_ms: None,
            requester_key: None,
        };
        if let Err(err) = store.ask_once(&ask).await {
            eprintln!("gatehouse: could not ask about the held launch: {err}");
        }
    }
    let recording = {
        let (store, server_id, recorder) = (store.clone(), server_id.to_string(), recorder.clone());
        tokio::spawn(async move {
            after.wait().await;
            record(&store, &server_id, pin, unversioned, held, &recorder).await;
        })
    };
    let held = match judged {
        Judged::Approved => None,
        Judged::Held => Some(held_reason(server_id)),
        Judged::Unchecked => Some(unchecked_reason()),
    };
    if let Some(reason) = &held {
        recorder.event(
            EngineEvent::new(
                "mcp_server_launch_held",
                gatehouse_engine::Severity::High,
                gatehouse_engine::Action::Hold,
                "launch.held",
            )
            .reason(reason.clone()),
        );
    }
    Checked { held, recording }
}

/// What a launch is, as shown to the person approving it (no secrets).
fn pin_json(pin: &LaunchPin) -> serde_json::Value {
    serde_json::json!({
        "exe_path": pin.exe_path,
        "exe_hash": pin.exe_hash,
        "script_hash": pin.script_hash,
        "package": pin.package_spec,
    })
}

fn recorded_fingerprint(recorded: Option<&LaunchPin>) -> Option<String> {
    recorded.map(LaunchPin::fingerprint)
}

/// What a blocked call and stderr say when the approval could not be read.
fn unchecked_reason() -> String {
    "the server's launch approval could not be read (database unavailable); it runs without \
     its secrets and its tools are held until it is restarted with the database answering"
        .into()
}

/// The launch check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    Approved,
    /// Changed since the approved launch: waits for a person.
    Held,
    /// Nothing could be read: held for this run (a changed launch must
    /// never get secrets because the database was busy).
    Unchecked,
}

/// Whether the launch is held. When the check cannot record (the database
/// busy past its budget) the approval row alone decides, as the check would
/// have; when that cannot be read either, it is held for this run.
async fn judge(
    store: &Store,
    key: &MacKey,
    server_id: &str,
    pin: &LaunchPin,
    baseline: Option<String>,
) -> Judged {
    let json = pin_json(pin).to_string();
    let fingerprint = pin.fingerprint();
    let err = match store
        .check_launch_approval(
            key,
            server_id,
            &fingerprint,
            &json,
            baseline.as_deref(),
            now_ms() as i64,
        )
        .await
    {
        Ok(LaunchCheck::Approved) => return Judged::Approved,
        Ok(LaunchCheck::Held { .. }) => return Judged::Held,
        Err(err) => err,
    };
    eprintln!("gatehouse: could not record the launch check: {err}");
    match store.launch_approval(key, server_id).await {
        Ok(row) => {
            let approved = match row {
                Some(row) => row.approved,
                None => Some(baseline.unwrap_or_else(|| fingerprint.clone())),
            };
            if approved.as_deref() == Some(fingerprint.as_str()) {
                Judged::Approved
            } else {
                Judged::Held
            }
        }
        Err(err) => {
            eprintln!("gatehouse: could not read the launch approval: {err}");
            Judged::Unchecked
        }
    }
}

/// Records the launch; a change from the previous one is an event (action
/// `hold` when it is held, else `alert`).
async fn record(
    store: &Store,
    server_id: &str,
    launch: LaunchPin,
    unversioned: Option<String>,
    held: bool,
    recorder: &Recorder,
) {
    if let Some(package) = unversioned {
        recorder.event(
            EngineEvent::new(
                "mcp_server_unpinned_package",
                gatehouse_engine::Severity::Low,
                gatehouse_engine::Action::Alert,
                "launch.unversioned",
            )
            .reason(format!(
                "package {package:?} names no version: whatever is latest will run"
            )),
        );
    }
    match store
        .record_launch(server_id, &launch, now_ms() as i64)
        .await
    {
        Ok(Some(previous)) if previous != launch => recorder.event(
            EngineEvent::new(
                "mcp_server_binary_mismatch",
                gatehouse_engine::Severity::High,
                if held {
                    gatehouse_engine::Action::Hold
                } else {
                    gatehouse_engine::Action::Alert
                },
                "launch.changed",
            )
            .reason("the server's executable, script or package changed since the last launch")
            .evidence(serde_json::json!({
                "exe_path": [previous.exe_path, launch.exe_path],
                "exe_hash": [previous.exe_hash, launch.exe_hash],
                "script_hash": [previous.script_hash, launch.script_hash],
                "package": [previous.package_spec, launch.package_spec],
            })),
        ),
        Ok(_) => {}
        Err(err) => debug!(%err, "launch pin not recorded"),
    }
}

/// What this launch executes; the second value names a package launched
/// without a version.
async fn launch_pin(
    store: &Store,
    server_id: &str,
    exe: &Path,
    argv: &[String],
) -> (LaunchPin, Option<String>) {
    let facts = launch_facts(argv);
    let exe_hash = cached_exe_hash(store, server_id, exe).await;
    let script_hash = match facts.script.clone() {
        Some(script) => tokio::task::spawn_blocking(move || hash_file(Path::new(&script)))
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let unversioned = facts
        .unversioned
        .then(|| facts.package.clone().unwrap_or_default());
    (
        LaunchPin {
            exe_path: exe.to_str().map(str::to_string),
            exe_hash,
            script_hash,
            package_spec: facts.package,
        },
        unversioned,
    )
}

/// The executable's hash, reused from the `meta` row of this server while
/// the file's stamp is unchanged.
async fn cached_exe_hash(store: &Store, server_id: &str, exe: &Path) -> Option<String> {
    let meta_key = format!("launch.exe_stamp.{server_id}");
    let stamp = file_stamp(exe);
    if let (Some(stamp), Ok(Some(cached))) = (&stamp, store.get_meta(&meta_key).await) {
        if let Some(hash) = cached.strip_prefix(&format!("{stamp}\t")) {
            if hash.starts_with("sha256:") && !hash.contains('\t') {
                return Some(hash.to_string());
            }
        }
    }
    let path = exe.to_path_buf();
    let hash = tokio::task::spawn_blocking(move || hash_file(&path))
        .await
        .ok()
        .flatten()?;
    // The stamp is taken again: a file replaced while it was read is not cached.
    if let Some(stamp) = stamp.filter(|s| file_stamp(exe).as_ref() == Some(s)) {
        let _ = store.set_meta(&meta_key, &format!("{stamp}\t{hash}")).await;
    }
    Some(hash)
}

/// (path, device, inode, size, mtime, ctime) of a file: any write, rename
/// over it or metadata change moves its ctime, which the owner cannot set.
fn file_stamp(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(format!(
            "{}|{}|{}|{}|{}.{}|{}.{}",
            path.display(),
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

fn hash_file(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Some(format!("sha256:{}", hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_store::StoreOptions;
    use std::time::Duration;

    fn pin(exe_hash: &str) -> LaunchPin {
        LaunchPin {
            exe_path: Some("/usr/bin/node".into()),
            exe_hash: Some(exe_hash.into()),
            script_hash: None,
            package_spec: None,
        }
    }

    /// Another process holding the write lock past the check's budget:
    /// the approved launch still runs, a changed one is still held.
    #[tokio::test]
    async fn a_busy_database_does_not_let_a_changed_launch_through() {
        let home = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            busy_timeout: Duration::from_millis(20),
            ..StoreOptions::default()
        };
        let store = Store::open(home.path(), options).await.unwrap();
        let key = MacKey::new([5; 32]);
        let (approved, changed) = (pin("sha256:aa"), pin("sha256:bb"));
        let judged = judge(&store, &key, "s", &approved, None).await;
        assert_eq!(judged, Judged::Approved, "first sight");

        let other = Store::open(home.path(), StoreOptions::default())
            .await
            .unwrap();
        let writing = other.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
        let fp = Some(approved.fingerprint());
        assert_eq!(
            judge(&store, &key, "s", &changed, fp.clone()).await,
            Judged::Held,
            "changed, and the change could not be recorded"
        );
        assert_eq!(
            judge(&store, &key, "s", &approved, fp.clone()).await,
            Judged::Approved
        );
        drop(writing);
        assert_eq!(judge(&store, &key, "s", &changed, fp).await, Judged::Held);
    }
}

//! What protect remembers under `$GATEHOUSE_HOME`: protected servers,
//! per-file backup references (`clients/state.json`, 0600) and backups
//! (`backups/*.json`) that hold keyring references instead of secret values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};

use crate::fsutil::write_private;
use crate::ClientError;

/// One wrapped entry, as recorded at protect time (DESIGN §2 identity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedServer {
    /// Opaque server id.
    pub id: String,
    /// Client key (`cursor`).
    pub client: String,
    /// Config file path as found (before symlink resolution).
    pub config_path: String,
    /// `user`, `project`, or `local:<project>`.
    pub scope: String,
    /// Entry name in the config.
    pub entry_name: String,
    /// `launch_command_hash(argv)`.
    pub launch_hash: String,
    /// [command, args…] with `{{vault:NAME}}` placeholders.
    pub argv: Vec<String>,
    /// Working directory the client starts the server in, when known.
    pub cwd: Option<String>,
    /// Vault names moved for this server.
    pub secret_names: Vec<String>,
    /// Names passed with `--pass-env`.
    pub pass_env: Vec<String>,
    /// Codex `env_vars` names Gatehouse added.
    pub added_env_vars: Vec<String>,
}

/// Where the backup of a protected file is, and whether the file can still
/// be restored byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    /// Client key.
    pub client: String,
    /// Backup file, relative to `$GATEHOUSE_HOME`.
    pub backup: String,
    /// Hash of the text Gatehouse wrote; `None` when a byte-for-byte restore
    /// would lose changes made between protects.
    pub protected_sha256: Option<String>,
}

/// `clients/state.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Format version.
    pub version: u32,
    /// By resolved config path.
    pub files: BTreeMap<String, FileState>,
    /// Every protected server.
    pub servers: Vec<ProtectedServer>,
    /// Client keys whose configs the control plane's watcher protects on
    /// its own (`gatehouse protect CLIENT --watch` turns it on,
    /// `gatehouse unprotect CLIENT` off).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub auto_protect: BTreeSet<String>,
}

impl State {
    /// Whether the watcher protects `client`'s configs on its own.
    pub fn auto_protects(&self, client: &str) -> bool {
        self.auto_protect.contains(client)
    }
}

/// One secret span removed from a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupSplice {
    /// Byte offset in `redacted` where the quoted value goes back.
    pub offset: usize,
    /// Whose vault holds the value.
    pub server_id: String,
    /// The value with `{{vault:NAME}}` placeholders.
    pub template: String,
    /// Quoting style (`json`, `toml-basic`, `toml-literal`).
    pub quote: String,
}

/// A config as it was before protect, minus its secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// Format version.
    pub version: u32,
    /// Client key.
    pub client: String,
    /// Config path.
    pub path: String,
    /// Hash of the original text.
    pub original_sha256: String,
    /// Hash of the text protect wrote.
    pub protected_sha256: String,
    /// The original text with secret spans cut out.
    pub redacted: String,
    /// Where to splice the secrets back.
    pub splices: Vec<BackupSplice>,
}

impl Backup {
    /// Rebuilds the original text given a function that expands a splice.
    pub fn restore(
        &self,
        mut expand: impl FnMut(&BackupSplice) -> Result<String, ClientError>,
    ) -> Result<String, ClientError> {
        let mut out = self.redacted.clone();
        let mut splices: Vec<&BackupSplice> = self.splices.iter().collect();
        splices.sort_by_key(|s| std::cmp::Reverse(s.offset));
        for s in splices {
            if s.offset > out.len() || !out.is_char_boundary(s.offset) {
                return Err(ClientError::State(
                    "backup splice offset out of range".into(),
                ));
            }
            out.insert_str(s.offset, &expand(s)?);
        }
        Ok(out)
    }
}

/// Held while a protect, unprotect or repair reads a config and changes it,
/// its backups and the state (CLI runs, the watcher, the API alike), so
/// runs take turns: a second run sees what the first wrote. An exclusive
/// lock on `clients/.lock`, released on drop (and by the OS when the
/// process dies).
#[derive(Debug)]
pub struct StateLock {
    _file: std::fs::File,
}

/// How long a run waits for another to finish before refusing.
const LOCK_WAIT: Duration = Duration::from_secs(120);
const LOCK_POLL: Duration = Duration::from_millis(20);

/// Paths under `$GATEHOUSE_HOME`.
#[derive(Debug, Clone)]
pub struct StateDir {
    /// `$GATEHOUSE_HOME`.
    pub home: PathBuf,
}

impl StateDir {
    fn state_path(&self) -> PathBuf {
        self.home.join("clients").join("state.json")
    }

    /// Takes the [`StateLock`], waiting up to two minutes for another run.
    /// Not reentrant: one holder per process at a time.
    pub fn lock(&self) -> Result<StateLock, ClientError> {
        let path = self.home.join("clients").join(".lock");
        let io = |source| ClientError::Io {
            path: path.clone(),
            source,
        };
        crate::fsutil::create_private_dir(&self.home.join("clients"))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let deadline = Instant::now() + LOCK_WAIT;
        while !file.try_lock_exclusive().map_err(io)? {
            if Instant::now() >= deadline {
                return Err(ClientError::Refused(format!(
                    "another Gatehouse protect/unprotect still holds {} after {}s; run again when it is done",
                    path.display(),
                    LOCK_WAIT.as_secs()
                )));
            }
            std::thread::sleep(LOCK_POLL);
        }
        Ok(StateLock { _file: file })
    }

    /// Reads the state (empty when absent).
    pub fn load(&self) -> Result<State, ClientError> {
        let path = self.state_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| ClientError::State(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State {
                version: 1,
                ..State::default()
            }),
            Err(source) => Err(ClientError::Io { path, source }),
        }
    }

    /// The project roots of `client`'s protected project files, whether or
    /// not an editor lists them now: an unprotect looks there too.
    pub fn protected_projects(&self, client: &str) -> Result<Vec<PathBuf>, ClientError> {
        let mut roots: Vec<PathBuf> = Vec::new();
        for server in self.load()?.servers {
            if let Some(root) = server.cwd.filter(|_| server.client == client) {
                let root = PathBuf::from(root);
                if !roots.contains(&root) {
                    roots.push(root);
                }
            }
        }
        Ok(roots)
    }

    /// The user (not project) config files of `client` that protect
    /// recorded, wherever they were found then (a `CODEX_HOME` set at
    /// protect and not at unprotect), each with its servers' records.
    pub fn protected_user_files(
        &self,
        client: &str,
    ) -> Result<Vec<(PathBuf, Vec<ProtectedServer>)>, ClientError> {
        let mut files: Vec<(PathBuf, Vec<ProtectedServer>)> = Vec::new();
        for server in self.load()?.servers {
            if server.client != client || server.cwd.is_some() {
                continue;
            }
            let path = PathBuf::from(&server.config_path);
            match files.iter_mut().find(|(p, _)| *p == path) {
                Some((_, servers)) => servers.push(server),
                None => files.push((path, vec![server])),
            }
        }
        Ok(files)
    }

    /// Writes the state (0600).
    pub fn save(&self, state: &State) -> Result<(), ClientError> {
        let text =
            serde_json::to_string_pretty(state).map_err(|e| ClientError::State(e.to_string()))?;
        write_private(&self.state_path(), &text)
    }

    /// Turns auto-protect on or off for `clients` (read, change, write).
    pub fn set_auto_protect(&self, clients: &[&str], on: bool) -> Result<(), ClientError> {
        let _lock = self.lock()?;
        let mut state = self.load()?;
        let before = state.auto_protect.clone();
        for c in clients {
            if on {
                state.auto_protect.insert((*c).to_owned());
            } else {
                state.auto_protect.remove(*c);
            }
        }
        if state.auto_protect == before {
            return Ok(());
        }
        self.save(&state)
    }

    /// Stores a backup; returns its path relative to the home.
    pub fn write_backup(&self, backup: &Backup, stamp: &str) -> Result<String, ClientError> {
        let short = backup
            .original_sha256
            .trim_start_matches("sha256:")
            .get(..12)
            .unwrap_or("x")
            .to_owned();
        // Never over another run's backup (same second, same original).
        let rel = (1..)
            .map(|n| match n {
                1 => format!("backups/{stamp}-{}-{short}.json", backup.client),
                n => format!("backups/{stamp}-{}-{short}-{n}.json", backup.client),
            })
            .find(|rel| !self.home.join(rel).exists())
            .unwrap_or_default();
        let text =
            serde_json::to_string_pretty(backup).map_err(|e| ClientError::State(e.to_string()))?;
        write_private(&self.home.join(&rel), &text)?;
        Ok(rel)
    }

    /// Removes a backup by relative path (gone already is fine).
    pub fn remove_backup(&self, rel: &str) -> Result<(), ClientError> {
        let path = self.home.join(rel);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(ClientError::Io { path, source: e })
            }
            _ => Ok(()),
        }
    }

    /// Removes every backup of the config at `path` (as found).
    pub fn remove_backups_of(&self, path: &Path) -> Result<(), ClientError> {
        let dir = self.home.join("backups");
        let key = file_key(path);
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let rel = format!("backups/{}", e.file_name().to_string_lossy());
            if self
                .read_backup(&rel)
                .is_ok_and(|b| file_key(Path::new(&b.path)) == key)
            {
                self.remove_backup(&rel)?;
            }
        }
        Ok(())
    }

    /// Reads a backup by relative path.
    pub fn read_backup(&self, rel: &str) -> Result<Backup, ClientError> {
        let path = self.home.join(rel);
        let text = std::fs::read_to_string(&path).map_err(|source| ClientError::Io {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text)
            .map_err(|e| ClientError::State(format!("{}: {e}", path.display())))
    }
}

/// Key for [`State::files`].
pub fn file_key(path: &Path) -> String {
    crate::fsutil::resolve_target(path)
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_protect_is_switched_per_client_and_old_state_files_load() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir {
            home: tmp.path().to_path_buf(),
        };
        dir.save(&State {
            version: 1,
            ..State::default()
        })
        .unwrap();
        let text = std::fs::read_to_string(tmp.path().join("clients/state.json")).unwrap();
        assert!(
            !text.contains("auto_protect"),
            "a state without the setting is written as before: {text}"
        );
        assert!(!dir.load().unwrap().auto_protects("cursor"));
        dir.set_auto_protect(&["cursor", "codex"], true).unwrap();
        dir.set_auto_protect(&["codex"], false).unwrap();
        let state = dir.load().unwrap();
        assert!(state.auto_protects("cursor"), "turned on");
        assert!(!state.auto_protects("codex"), "turned off again");
        assert!(!state.auto_protects("zed"), "only the clients named");
    }
}

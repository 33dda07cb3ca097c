//! Protect, unprotect and repair: the orchestration around [`ConfigDoc`]
//! edits — vault moves, backups, identity records, guards against clients
//! that own their file, git-tracked project files, atomic writes.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gatehouse_protocol::identity::launch_command_hash;
use gatehouse_vault::placeholder::find_placeholders;
use gatehouse_vault::{Secret, Vault};

use crate::client_cli::{entry_changes, ClaudeCli, CliFailure};
use crate::discover::ConfigFile;
use crate::doc::{requote, ConfigDoc, UnwrapPlan};
use crate::entry::{is_gatehouse_exe, plan_entry, EntryKind, EntryPlan, EntryView};
use crate::fsutil::{atomic_write, sha256, DirLock};
use crate::state::{file_key, Backup, BackupSplice, FileState, ProtectedServer, StateDir};
use crate::ClientError;

/// Records protected servers where wrap can find them (the store's
/// `register_protected_server`); the CLI supplies the store-backed one.
pub trait ServerRegistry {
    /// Records (or replaces) one server's identity.
    fn register(&self, server: &ProtectedServer) -> Result<(), ClientError>;

    /// Publishes keyed fingerprints of the secrets just moved for `server_id`
    /// (the secret egress guard), so they are guarded before that server
    /// first runs. Never stores the values.
    fn publish_secrets(
        &self,
        _server_id: &str,
        _secrets: &[(&str, &Secret<String>)],
    ) -> Result<(), ClientError> {
        Ok(())
    }
}

/// A registry that records nothing (the state file still does).
#[derive(Debug, Default)]
pub struct NoRegistry;

impl ServerRegistry for NoRegistry {
    fn register(&self, _: &ProtectedServer) -> Result<(), ClientError> {
        Ok(())
    }
}

/// Tells whether a client is running.
pub trait ProcessProbe {
    /// True when a process with one of `names` runs.
    fn running(&self, names: &[&str]) -> bool;
}

/// Scans `/proc` on Linux: `comm`, and the basenames of `argv[0]` and
/// `argv[1]` (for `node …/claude` style launches). Elsewhere: never running.
#[derive(Debug, Default)]
pub struct SystemProbe;

impl ProcessProbe for SystemProbe {
    fn running(&self, names: &[&str]) -> bool {
        if names.is_empty() || !cfg!(target_os = "linux") {
            return false;
        }
        let me = std::process::id().to_string();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return false;
        };
        dir.filter_map(|e| e.ok()).any(|e| {
            let pid = e.file_name();
            let pid = pid.to_string_lossy();
            if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me.as_str() {
                return false;
            }
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let argv: Vec<String> = cmdline
                .split(|&b| b == 0)
                .take(2)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_owned();
            names
                .iter()
                .any(|n| comm.trim() == *n || argv.iter().any(|a| base(a) == *n))
        })
    }
}

/// A fixed answer, for tests.
#[derive(Debug, Default)]
pub struct FixedProbe(pub Vec<String>);

impl ProcessProbe for FixedProbe {
    fn running(&self, names: &[&str]) -> bool {
        names.iter().any(|n| self.0.iter().any(|r| r == n))
    }
}

/// Options of `gatehouse protect` / `unprotect`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Print a diff, write nothing.
    pub dry_run: bool,
    /// Confirms rewriting git-tracked project files.
    pub yes: bool,
    /// Point wrapped entries at the current binary.
    pub repair: bool,
    /// How long to wait for a client that rewrites its own file (Claude
    /// Code, Claude Desktop) to quit before refusing (`--wait SECS`); zero
    /// refuses at once. Not used when `client_cli` is set.
    pub wait: Duration,
    /// The client's own CLI (`ClientSpec::own_cli`, resolved on `PATH` by
    /// the caller): while the client runs, its entries are changed through
    /// it instead of by writing the file.
    pub client_cli: Option<PathBuf>,
}

/// What a protect pass does: wrap (and with `repair`, repoint every
/// wrapper), or only self-heal wrappers whose binary is gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Protect,
    SelfHeal,
}

/// How a file whose client may be running gets written.
enum Route {
    /// Write the file (the client is not running).
    File,
    /// Through the client's own CLI.
    Cli(PathBuf),
    /// The client quit while we waited: read the file again and start over.
    Again,
}

/// How often `--wait` looks whether the client still runs.
const WAIT_POLL: Duration = Duration::from_millis(250);

/// `wait` from now (a year at most, so a huge `--wait` cannot overflow).
fn deadline(wait: Duration) -> Instant {
    Instant::now() + wait.min(Duration::from_secs(365 * 24 * 3600))
}

/// What happened to one file.
#[derive(Debug, Clone, Default)]
pub struct FileReport {
    /// Config path.
    pub path: PathBuf,
    /// Client key.
    pub client: String,
    /// The file was (or, in a dry run, would be) rewritten.
    pub changed: bool,
    /// Entries wrapped / unwrapped / repaired, by name.
    pub entries: Vec<String>,
    /// Entries left alone, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Unified diff with secrets redacted (dry run).
    pub diff: Option<String>,
    /// Things the person must know (restart the client, rotate a secret).
    pub notes: Vec<String>,
}

/// Protects and unprotects config files.
pub struct Protector<'a> {
    /// `$GATEHOUSE_HOME` (written into every wrapped entry as `--home`).
    pub gatehouse_home: PathBuf,
    /// Absolute path of the gatehouse binary.
    pub exe: PathBuf,
    /// Where secrets go.
    pub vault: &'a dyn Vault,
    /// Where identities go.
    pub registry: &'a dyn ServerRegistry,
    /// Which clients run.
    pub processes: &'a dyn ProcessProbe,
    /// Source of opaque server ids.
    pub ids: Mutex<Box<dyn FnMut() -> String + Send + 'a>>,
    /// Timestamp used in backup names (`YYYYmmddTHHMMSS` or any sortable text).
    pub stamp: String,
}

/// A fresh opaque server id: `srv_` + 16 base32 characters.
pub fn new_server_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos ^ u128::from(std::process::id())).to_le_bytes();
    }
    format!(
        "srv_{}",
        bytes
            .iter()
            .map(|b| ALPHABET[(b & 31) as usize] as char)
            .collect::<String>()
    )
}

fn read(path: &Path) -> Result<String, ClientError> {
    std::fs::read_to_string(path).map_err(|source| ClientError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse(file: &ConfigFile, text: &str) -> Result<ConfigDoc, ClientError> {
    file.parse(text).map_err(|e| ClientError::Parse {
        path: file.path.clone(),
        line: e.line,
        col: e.col,
        msg: e.msg,
    })
}

fn entries(file: &ConfigFile, doc: &ConfigDoc) -> Vec<EntryView> {
    doc.entries(
        file.client.servers_key,
        file.client.per_project_sections && file.project.is_none(),
    )
}

/// Unified diff of two texts, with every value in `secrets` replaced. The
/// texts are redacted before they are compared, so a value that spans
/// lines (a PEM key in a TOML `"""` string) is replaced whole; each line of
/// such a value is also replaced where it shows on its own (written with
/// other line breaks or escapes than the value's).
pub fn redacted_diff(path: &Path, old: &str, new: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().filter(|s| s.len() >= 4).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let redact = |text: &str| {
        secrets
            .iter()
            .fold(text.to_string(), |t, s| t.replace(s.as_str(), "<redacted>"))
    };
    let (old, new) = (redact(old), redact(new));
    let name = path.display().to_string();
    let mut out = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&name, &name)
        .to_string();
    let mut pieces: Vec<&str> = secrets
        .iter()
        .filter(|s| s.contains('\n'))
        .flat_map(|s| s.lines().map(str::trim))
        .filter(|line| line.len() >= 8)
        .collect();
    pieces.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for piece in pieces {
        out = out.replace(piece, "<redacted>");
    }
    out.split_inclusive('\n')
        .map(|line| redact_escaped(line, &secrets))
        .collect()
}

/// Quoted strings of one line written with escapes (`"ghp_\u0041…"`,
/// `"a\/b"`) that hold a secret once decoded: the text never shows it as
/// written, so the whole string is redacted.
fn redact_escaped(text: &str, secrets: &[&String]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // The closing quote: the first one no backslash escapes.
        let mut escaped = false;
        let close = after.char_indices().find_map(|(i, c)| match (escaped, c) {
            (false, '"') => Some(i),
            (false, '\\') => {
                escaped = true;
                None
            }
            _ => {
                escaped = false;
                None
            }
        });
        let Some(close) = close else {
            out.push_str(&rest[open..]);
            return out;
        };
        let literal = &rest[open..open + close + 2];
        let holds_secret = literal.contains('\\')
            && serde_json::from_str::<String>(literal)
                .is_ok_and(|v| secrets.iter().any(|s| v.contains(s.as_str())));
        out.push_str(if holds_secret {
            "\"<redacted>\""
        } else {
            literal
        });
        rest = &rest[open + close + 2..];
    }
    out.push_str(rest);
    out
}

/// Whether git tracks `path`.
pub fn git_tracked(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["ls-files", "--error-unmatch", "--"])
        .arg(name)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the committed version of `path` (HEAD) contains any of `secrets`.
fn committed_secret(path: &Path, secrets: &[&Secret<String>]) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let Ok(out) = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .arg("show")
        .arg(format!("HEAD:./{}", name.to_string_lossy()))
        .output()
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    out.status.success()
        && secrets
            .iter()
            .any(|s| !s.expose().is_empty() && text.contains(s.expose().as_str()))
}

impl Protector<'_> {
    fn state(&self) -> StateDir {
        StateDir {
            home: self.gatehouse_home.clone(),
        }
    }

    fn exe_str(&self) -> String {
        self.exe.to_string_lossy().into_owned()
    }

    fn owner_running(&self, file: &ConfigFile) -> bool {
        file.client.owns_file_while_running
            && file.project.is_none()
            && self.processes.running(file.client.process_names)
    }

    /// Decides how to change a file whose client may run: write it, go
    /// through the client's CLI, or wait (until `deadline`) for the client
    /// to quit; refuses when it still runs.
    fn route(
        &self,
        file: &ConfigFile,
        opts: &Options,
        deadline: Instant,
        verb: &str,
    ) -> Result<Route, ClientError> {
        if !self.owner_running(file) {
            return Ok(Route::File);
        }
        if let (Some(cli), Some(_)) = (&opts.client_cli, file.client.own_cli) {
            return Ok(Route::Cli(cli.clone()));
        }
        while Instant::now() < deadline {
            std::thread::sleep(WAIT_POLL.min(deadline.saturating_duration_since(Instant::now())));
            if !self.owner_running(file) {
                return Ok(Route::Again);
            }
        }
        let cli_hint = file.client.own_cli.map_or(String::new(), |c| {
            format!(", or put its `{c}` CLI on PATH so Gatehouse changes the entries through it")
        });
        let waited = if opts.wait.is_zero() {
            String::new()
        } else {
            format!(" (waited {}s)", opts.wait.as_secs())
        };
        Err(ClientError::Refused(format!(
            "{} is running{waited} and rewrites {} itself; quit it (all sessions) and run {verb} again, \
             or pass --wait SECS to wait for it{cli_hint}",
            file.client.name,
            file.path.display()
        )))
    }

    /// Applies the entry-level difference `old` → `new` through the
    /// client's CLI.
    fn through_cli(
        &self,
        file: &ConfigFile,
        cli: &Path,
        old: &str,
        new: &str,
    ) -> Result<Vec<String>, CliFailure> {
        let changes =
            entry_changes(&file.path, old, new, file.client.servers_key).map_err(|error| {
                CliFailure {
                    error,
                    rolled_back: true,
                }
            })?;
        let mut notes = ClaudeCli {
            exe: cli,
            config: &file.path,
            servers_key: file.client.servers_key,
        }
        .apply(&changes)?;
        notes.push(format!(
            "{} is running: the entries were changed through its own CLI (`{} mcp remove` / `add-json`, \
             the JSON on stdin); its sessions see them after a restart",
            file.client.name,
            file.client.own_cli.unwrap_or("?")
        ));
        Ok(notes)
    }

    /// Wraps every wrappable stdio entry of `file` (and with `repair`,
    /// repoints existing wrappers at the current binary).
    pub fn protect_file(
        &self,
        file: &ConfigFile,
        opts: &Options,
    ) -> Result<FileReport, ClientError> {
        let _lock = self.state().lock()?;
        self.protect_until(file, opts, deadline(opts.wait), Pass::Protect)
    }

    /// [`Protector::protect_file`] for auto-protect: the client's switch is
    /// read again under the state lock, so an unprotect that turned it off
    /// while this waited for the lock is not undone.
    pub fn auto_protect_file(
        &self,
        file: &ConfigFile,
        opts: &Options,
    ) -> Result<FileReport, ClientError> {
        let _lock = self.state().lock()?;
        if !self.state().load()?.auto_protects(file.client.key) {
            return Ok(FileReport {
                path: file.path.clone(),
                client: file.client.key.into(),
                ..FileReport::default()
            });
        }
        self.protect_until(file, opts, deadline(opts.wait), Pass::Protect)
    }

    /// Self-heal at start: wrappers whose binary no longer exists (moved,
    /// uninstalled) are pointed at the current one; nothing new is wrapped,
    /// and wrappers naming another existing binary are left alone (so two
    /// installs never flip entries back and forth).
    pub fn repair_file(
        &self,
        file: &ConfigFile,
        opts: &Options,
    ) -> Result<FileReport, ClientError> {
        let opts = Options {
            repair: true,
            ..opts.clone()
        };
        let _lock = self.state().lock()?;
        self.protect_until(file, &opts, deadline(opts.wait), Pass::SelfHeal)
    }

    fn protect_until(
        &self,
        file: &ConfigFile,
        opts: &Options,
        deadline: Instant,
        pass: Pass,
    ) -> Result<FileReport, ClientError> {
        let mut report = FileReport {
            path: file.path.clone(),
            client: file.client.key.into(),
            ..FileReport::default()
        };
        let original = read(&file.path)?;
        let mut text = original.clone();
        let mut doc = parse(file, &text)?;
        let exe = self.exe_str();
        let mut had_wrapped = false;
        // Repair first: point existing wrappers at this binary.
        let stale: Vec<EntryView> = entries(file, &doc)
            .into_iter()
            .filter(|e| e.wrapped.is_some())
            .collect();
        had_wrapped |= !stale.is_empty();
        if opts.repair {
            let to_fix: Vec<&EntryView> = stale
                .iter()
                .filter(|e| {
                    matches!(&e.kind, EntryKind::Stdio { command, .. }
                        if command != &exe
                            && is_gatehouse_exe(command)
                            && (pass == Pass::Protect || !Path::new(command).exists()))
                })
                .collect();
            if !to_fix.is_empty() {
                text = doc.repair(&to_fix, &exe);
                report
                    .entries
                    .extend(to_fix.iter().map(|e| format!("{} (repaired)", e.name)));
                doc = parse(file, &text)?;
            }
        }
        let views = entries(file, &doc);
        // An entry whose wrapping was removed (a client wrote its own
        // version back) gets its recorded identity again when its launch
        // command is the recorded one: pins and approvals stay.
        let recorded = self.state().load()?.servers;
        let key = file_key(&file.path);
        let present: Vec<&str> = views
            .iter()
            .filter_map(|v| v.wrapped.as_ref().map(|w| w.server_id.as_str()))
            .collect();
        let mut reusable: Vec<&ProtectedServer> = recorded
            .iter()
            .filter(|r| {
                file_key(Path::new(&r.config_path)) == key && !present.contains(&r.id.as_str())
            })
            .collect();
        let mut plans: Vec<(EntryView, EntryPlan)> = Vec::new();
        for v in &views {
            if v.wrapped.is_some() || pass == Pass::SelfHeal {
                continue;
            }
            if let Some(reason) = v.blocker() {
                report.skipped.push((v.name.clone(), reason));
                continue;
            }
            if v.env_file {
                report.notes.push(format!(
                    "{}: envFile is passed through as is; secrets in it are not moved",
                    v.name
                ));
            }
            let scope = v.scope_label(file.project.is_some());
            let again = reusable.iter().position(|r| {
                r.entry_name == v.name
                    && r.scope == scope
                    && plan_entry(v, &r.id, &self.gatehouse_home)
                        .is_some_and(|p| launch_command_hash(&p.argv) == r.launch_hash)
            });
            if let Some(at) = again {
                let id = reusable.remove(at).id.clone();
                if let Some(plan) = plan_entry(v, &id, &self.gatehouse_home) {
                    plans.push((v.clone(), plan));
                }
                continue;
            }
            let id = (self.ids.lock().unwrap_or_else(|p| p.into_inner()))();
            if let Some(plan) = plan_entry(v, &id, &self.gatehouse_home) {
                plans.push((v.clone(), plan));
            }
        }
        let refs: Vec<(&EntryView, &EntryPlan)> = plans.iter().map(|(v, p)| (v, p)).collect();
        let rewrite = doc.protect(&refs, &exe);
        let new_text = if plans.is_empty() {
            text.clone()
        } else {
            rewrite.text.clone()
        };
        if new_text == original {
            return Ok(report);
        }
        report.changed = true;
        report
            .entries
            .extend(plans.iter().map(|(v, _)| v.name.clone()));
        let secrets: Vec<&Secret<String>> = plans
            .iter()
            .flat_map(|(_, p)| p.env_moves.iter().chain(&p.arg_secrets).map(|(_, s)| s))
            .collect();
        // Every plain-text secret in the file, moved or not (a remote
        // entry's headers), so no diff line shows one.
        let secret_texts: Vec<String> = secrets
            .iter()
            .map(|s| s.expose().clone())
            .chain(views.iter().flat_map(EntryView::secret_values))
            .collect();
        let tracked = file.project.is_some() && git_tracked(&file.path);
        if tracked && committed_secret(&file.path, &secrets) {
            report.notes.push("a secret in this file was committed to git: rotate it — moving it to the keyring does not remove it from history".into());
        }
        if opts.dry_run {
            report.diff = Some(redacted_diff(
                &file.path,
                &original,
                &new_text,
                &secret_texts,
            ));
            if tracked && !opts.yes {
                report.notes.push(
                    "git-tracked project file: the real run needs --yes (teammates get the change)"
                        .into(),
                );
            }
            if let Err(refused) = refuse_hard_links(&file.path) {
                report
                    .notes
                    .push(format!("the real run is refused: {refused}"));
            }
            return Ok(report);
        }
        if tracked && !opts.yes {
            return Err(ClientError::Refused(format!(
                "{} is tracked by git: rewriting it changes it for everyone who pulls; rerun with --yes to confirm",
                file.path.display()
            )));
        }
        let cli = match self.route(file, opts, deadline, "protect")? {
            Route::File => None,
            Route::Cli(cli) => Some(cli),
            Route::Again => return self.protect_until(file, opts, deadline, pass),
        };
        if cli.is_none() {
            refuse_hard_links(&file.path)?;
        }
        // Secrets first: if the keyring is unavailable nothing is written.
        let mut stored: Vec<(&str, &str)> = Vec::new();
        for (_, plan) in &plans {
            for (name, value) in plan.env_moves.iter().chain(&plan.arg_secrets) {
                if let Err(e) = self.vault.set(&plan.id, name, value.clone()) {
                    for (id, n) in &stored {
                        let _ = self.vault.delete(id, n);
                    }
                    return Err(ClientError::Vault(e));
                }
                stored.push((&plan.id, name));
            }
        }
        // The backup the file's record names, and whether this run wrote it.
        let mut backup_rel = None;
        let mut backup_new = false;
        let written = (|| {
            let state = self.state().load()?;
            // A file protected before keeps its first backup, the one its
            // record names: a re-protect writes no copy of a later state
            // (which would outlive what the person changes in the file).
            let rel = match state.files.get(&file_key(&file.path)) {
                Some(previous) => previous.backup.clone(),
                None => {
                    // The splices are spans of `text` (after a repair, not `original`).
                    let backup = self.make_backup(file, &text, &new_text, &rewrite.splices);
                    backup_new = true;
                    self.state().write_backup(&backup, &self.stamp)?
                }
            };
            backup_rel = Some(rel.clone());
            if let Some(cli) = &cli {
                let notes = self.through_cli(file, cli, &original, &new_text)?;
                return Ok((state, rel, notes));
            }
            let _lock = file
                .client
                .lock_suffix
                .map(|s| DirLock::acquire(&file.path, s))
                .transpose()?;
            atomic_write(&file.path, &original, &new_text)?;
            Ok::<_, CliFailure>((state, rel, read_only_note(&file.path).into_iter().collect()))
        })();
        let (mut state, rel, cli_notes, unverified) = match written {
            Ok((state, rel, notes)) => (state, rel, notes, None),
            // The rename happened, then the file changed again (its client
            // wrote it): what was written is recorded all the same, so an
            // unprotect can still restore entries that stayed.
            Err(CliFailure {
                error: error @ ClientError::Verify { .. },
                ..
            }) => match backup_rel.clone() {
                Some(rel) => (self.state().load()?, rel, Vec::new(), Some(error)),
                None => return Err(error),
            },
            Err(CliFailure { error, rolled_back }) => {
                // Unless the CLI could not undo its steps, the file is
                // unchanged: take the moved secrets back out of the
                // keyring, and the backup that names them.
                if rolled_back {
                    for (id, n) in &stored {
                        let _ = self.vault.delete(id, n);
                    }
                    if let Some(rel) = backup_rel.as_ref().filter(|_| backup_new) {
                        let _ = self.state().remove_backup(rel);
                    }
                }
                return Err(error);
            }
        };
        report.notes.extend(cli_notes);
        let key = file_key(&file.path);
        let previous = state.files.get(&key).cloned();
        // Through the CLI the client rewrote the whole file: unprotect
        // restores the entries, not the bytes.
        let byte_restorable = !had_wrapped && previous.is_none() && cli.is_none();
        state.files.insert(
            key,
            FileState {
                client: file.client.key.into(),
                backup: previous.as_ref().map_or(rel.clone(), |p| p.backup.clone()),
                protected_sha256: byte_restorable.then(|| sha256(&new_text)),
            },
        );
        let mut records = Vec::with_capacity(plans.len());
        for (view, plan) in &plans {
            let added = rewrite
                .added_env_vars
                .iter()
                .find(|(n, _)| *n == view.name)
                .map(|(_, a)| a.clone())
                .unwrap_or_default();
            records.push(ProtectedServer {
                id: plan.id.clone(),
                client: file.client.key.into(),
                config_path: file.path.to_string_lossy().into_owned(),
                scope: view.scope_label(file.project.is_some()),
                entry_name: view.name.clone(),
                launch_hash: launch_command_hash(&plan.argv),
                argv: plan.argv.clone(),
                cwd: file
                    .project
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
                secret_names: plan.secret_names(),
                pass_env: plan.pass_env.clone(),
                added_env_vars: added,
            });
        }
        for record in &records {
            state.servers.retain(|s| s.id != record.id);
            state.servers.push(record.clone());
        }
        // The file is written: its record is saved before anything else
        // can fail, or an unprotect would not know these entries.
        self.state().save(&state)?;
        for ((_, plan), record) in plans.iter().zip(&records) {
            self.registry.register(record)?;
            let secrets: Vec<(&str, &Secret<String>)> = plan
                .env_moves
                .iter()
                .chain(&plan.arg_secrets)
                .map(|(name, value)| (name.as_str(), value))
                .collect();
            if !secrets.is_empty() {
                self.registry.publish_secrets(&plan.id, &secrets)?;
            }
        }
        if let Some(error) = unverified {
            return Err(error);
        }
        if file.client.key == "claude-desktop" && self.processes.running(file.client.process_names)
        {
            report.notes.push("Claude Desktop is running and may write its old config back: quit it fully, start it again, then run `gatehouse clients` to check".into());
        }
        report.notes.push(format!("reload: {}", file.client.reload));
        Ok(report)
    }

    fn make_backup(
        &self,
        file: &ConfigFile,
        original: &str,
        new_text: &str,
        splices: &[crate::doc::Splice],
    ) -> Backup {
        let mut redacted = String::with_capacity(original.len());
        let mut out = Vec::new();
        let mut last = 0;
        for s in splices {
            redacted.push_str(&original[last..s.span.start]);
            out.push(BackupSplice {
                offset: redacted.len(),
                server_id: s.owner.clone(),
                template: s.template.clone(),
                quote: s.quote.clone(),
            });
            last = s.span.end;
        }
        redacted.push_str(&original[last..]);
        Backup {
            version: 1,
            client: file.client.key.into(),
            path: file.path.to_string_lossy().into_owned(),
            original_sha256: sha256(original),
            protected_sha256: sha256(new_text),
            redacted,
            splices: out,
        }
    }

    fn expand(&self, server_id: &str, template: &str) -> Result<String, ClientError> {
        let names = find_placeholders(template);
        let mut out = String::new();
        let mut last = 0;
        for (range, name) in names {
            let value = self.vault.get(server_id, name)?.ok_or_else(|| {
                ClientError::Refused(format!(
                    "the keyring has no secret {name} for server {server_id}; cannot restore it"
                ))
            })?;
            out.push_str(&template[last..range.start]);
            out.push_str(value.expose());
            last = range.end;
        }
        out.push_str(&template[last..]);
        Ok(out)
    }

    /// Restores `file`: byte for byte when unchanged since protect, else by
    /// unwrapping Gatehouse's entries in place (keeping other edits).
    pub fn unprotect_file(
        &self,
        file: &ConfigFile,
        opts: &Options,
    ) -> Result<FileReport, ClientError> {
        let _lock = self.state().lock()?;
        self.unprotect_until(file, opts, deadline(opts.wait))
    }

    fn unprotect_until(
        &self,
        file: &ConfigFile,
        opts: &Options,
        deadline: Instant,
    ) -> Result<FileReport, ClientError> {
        let mut report = FileReport {
            path: file.path.clone(),
            client: file.client.key.into(),
            ..FileReport::default()
        };
        let current = read(&file.path)?;
        let mut state = self.state().load()?;
        let key = file_key(&file.path);
        let doc = parse(file, &current)?;
        let views = entries(file, &doc);
        let found = Restorable::find(file, &views, &state.servers);
        for e in &found.foreign {
            // Protected with another home: that home's records can undo it.
            let other_home = e
                .wrapped
                .as_ref()
                .and_then(|w| w.home.as_deref())
                .filter(|home| Path::new(home) != self.gatehouse_home)
                .map(|home| format!("; it names --home {home}: run unprotect with that home"))
                .unwrap_or_default();
            report.skipped.push((
                e.name.clone(),
                format!(
                    "a wrap entry Gatehouse did not write in this file; left as it is \
                     (no secrets are put into it){other_home}"
                ),
            ));
        }
        for (e, _) in &found.hand_unwrapped {
            report.notes.push(format!(
                "{}: its gatehouse wrapping was removed by hand; the secrets Gatehouse moved are put back into it",
                e.name
            ));
        }
        for (e, r) in &found.changed_inside {
            report.notes.push(format!(
                "{}: the command inside its gatehouse wrapping changed since it was protected; it \
                 is unwrapped with its {{{{vault:…}}}} placeholders left in, and the secrets \
                 Gatehouse moved ({}) are not put into a different program and stay in the \
                 keyring (`gatehouse vault list {}` names them)",
                e.name,
                r.secret_names.join(", "),
                r.id
            ));
        }
        for (e, r) in &found.changed_by_hand {
            report.notes.push(format!(
                "{}: its gatehouse wrapping was removed by hand and its command changed; the secrets \
                 Gatehouse moved ({}) are not put into a different program and stay in the keyring \
                 (`gatehouse vault list {}` names them)",
                e.name,
                r.secret_names.join(", "),
                r.id
            ));
        }
        if found.targets.is_empty()
            && found.gone.is_empty()
            && found.changed_by_hand.is_empty()
            && found.changed_inside.is_empty()
        {
            return Ok(report);
        }
        let ids: Vec<String> = found.targets.iter().map(|(_, id)| id.clone()).collect();
        let mut restored: Option<String> = None;
        if let Some(fs) = state.files.get(&key) {
            let unchanged = fs.protected_sha256.as_deref() == Some(sha256(&current).as_str());
            // A backup gone or unreadable costs the byte-for-byte restore,
            // never the unprotect: the entries are restored in place.
            let backup = if unchanged && !opts.dry_run {
                match self.state().read_backup(&fs.backup) {
                    Ok(backup) => Some(backup),
                    Err(err) => {
                        report.notes.push(format!(
                            "not restored byte for byte: its backup could not be read ({err}); \
                             the entries were restored in place, every value as before"
                        ));
                        None
                    }
                }
            } else {
                None
            };
            if let Some(backup) = backup {
                let candidate = backup
                    .restore(|s| Ok(requote(&s.quote, &self.expand(&s.server_id, &s.template)?)))?;
                if sha256(&candidate) == backup.original_sha256 {
                    restored = Some(candidate);
                } else {
                    report.notes.push(
                        "not restored byte for byte: a string that held a secret was written in a \
                         form Gatehouse does not write back (escapes such as \\u0041, or a quote or \
                         backslash in a multi-line string); the entries were restored in place, every \
                         value as before, that string in plain quotes"
                            .into(),
                    );
                }
            }
        }
        let new_text = match restored {
            Some(t) => t,
            None => {
                let fill = if opts.dry_run {
                    Secrets::Redacted
                } else {
                    Secrets::PutBack
                };
                let mut targets = Vec::new();
                for (e, id) in &found.targets {
                    targets.push((*e, self.unwrap_plan(e, id, &state.servers, fill)?));
                }
                for (e, r) in &found.changed_inside {
                    let plan = self.unwrap_plan(e, &r.id, &state.servers, Secrets::Withheld)?;
                    targets.push((*e, plan));
                }
                doc.unwrap(&targets)
            }
        };
        report.changed = new_text != current;
        report.entries = found
            .targets
            .iter()
            .map(|(e, _)| e.name.clone())
            .chain(found.changed_inside.iter().map(|(e, _)| e.name.clone()))
            .collect();
        report
            .notes
            .extend(found.gone.iter().filter_map(|r| stranded_note(r)));
        let gone_ids: Vec<String> = found
            .gone
            .iter()
            .chain(found.changed_by_hand.iter().map(|(_, r)| r))
            .chain(found.changed_inside.iter().map(|(_, r)| r))
            .map(|r| r.id.clone())
            .collect();
        if opts.dry_run {
            let secrets: Vec<String> = views.iter().flat_map(EntryView::secret_values).collect();
            report.diff = Some(redacted_diff(&file.path, &current, &new_text, &secrets));
            return Ok(report);
        }
        if report.changed {
            match self.route(file, opts, deadline, "unprotect")? {
                Route::File => {
                    report.notes.extend(read_only_note(&file.path));
                    let lock = file
                        .client
                        .lock_suffix
                        .map(|s| DirLock::acquire(&file.path, s))
                        .transpose()?;
                    atomic_write(&file.path, &current, &new_text)?;
                    drop(lock);
                }
                Route::Cli(cli) => {
                    let notes = self
                        .through_cli(file, &cli, &current, &new_text)
                        .map_err(|f| f.error)?;
                    report.notes.extend(notes);
                }
                Route::Again => return self.unprotect_until(file, opts, deadline),
            }
        }
        // The state first: whatever fails after it, no record names a
        // secret that is gone. The stranded secrets stay in the keyring
        // (named above); their records go with the file's protection.
        let moved: Vec<(String, Vec<String>)> = state
            .servers
            .iter()
            .filter(|s| ids.contains(&s.id))
            .map(|s| (s.id.clone(), s.secret_names.clone()))
            .collect();
        state
            .servers
            .retain(|s| !ids.contains(&s.id) && !gone_ids.contains(&s.id));
        state.files.remove(&key);
        self.state().save(&state)?;
        // Only what protect moved is put back and deleted: a secret a person
        // stored for the server (`vault set`) is theirs, and stays.
        for (id, names) in &moved {
            for name in names {
                let _ = self.vault.delete(id, name);
            }
            let kept: Vec<String> = self
                .vault
                .list(id)
                .unwrap_or_default()
                .into_iter()
                .filter(|n| !names.contains(n))
                .collect();
            if !kept.is_empty() {
                report.notes.push(format!(
                    "secrets stored for {id} by hand stay in the keyring ({}); \
                     `gatehouse vault rm {id} NAME` removes one",
                    kept.join(", ")
                ));
            }
        }
        // The restore is verified (atomic_write reads it back): the backups
        // of this file, which may hold secrets protect did not move (remote
        // headers), are no longer needed.
        if let Err(err) = self.state().remove_backups_of(&file.path) {
            report
                .notes
                .push(format!("its backup could not be removed: {err}"));
        }
        report.notes.push(format!("reload: {}", file.client.reload));
        Ok(report)
    }

    fn unwrap_plan(
        &self,
        e: &EntryView,
        id: &str,
        records: &[ProtectedServer],
        secrets: Secrets,
    ) -> Result<UnwrapPlan, ClientError> {
        let EntryKind::Stdio { command, args } = &e.kind else {
            return Err(ClientError::State("not a stdio entry".into()));
        };
        let expand = |t: &str| match secrets {
            Secrets::PutBack => self.expand(id, t).map(Some),
            Secrets::Redacted => Ok(Some(redact_placeholders(t))),
            Secrets::Withheld => Ok(None),
        };
        let first_original = e.wrapped.as_ref().map_or(0, |w| w.inner + 1);
        let mut plan = UnwrapPlan {
            command: e
                .wrapped
                .as_ref()
                .map_or(command, |w| &args[w.inner])
                .clone(),
            args: vec![],
            env: vec![],
            remove_env_vars: vec![],
        };
        for (i, a) in args.iter().enumerate().skip(first_original) {
            if !find_placeholders(a).is_empty() {
                plan.args.extend(expand(a)?.map(|a| (i, a)));
            }
        }
        for (name, value) in &e.env {
            if let Some(v) = value
                .as_deref()
                .filter(|v| !find_placeholders(v).is_empty())
            {
                plan.env.extend(expand(v)?.map(|v| (name.clone(), v)));
            }
        }
        if let Some(rec) = records.iter().find(|r| r.id == id) {
            plan.remove_env_vars = rec.added_env_vars.clone();
        }
        Ok(plan)
    }
}

/// What an unwrapped entry's `{{vault:NAME}}` placeholders become.
#[derive(Clone, Copy)]
enum Secrets {
    /// The secrets, from the keyring.
    PutBack,
    /// `<redacted>`: a dry run shows each restored value as changing,
    /// never the value.
    Redacted,
    /// Left as they are: the entry runs another program now.
    Withheld,
}

/// What unprotect finds in a file, against the state's records.
struct Restorable<'v, 's> {
    /// Entries to restore, with the server id whose secrets go back in.
    targets: Vec<(&'v EntryView, String)>,
    /// Of those, entries whose wrapping someone removed by hand (they
    /// still hold Gatehouse's `{{vault:NAME}}` placeholders).
    hand_unwrapped: Vec<(&'v EntryView, String)>,
    /// Wrap entries Gatehouse did not write in this file.
    foreign: Vec<&'v EntryView>,
    /// Records of this file whose entry is gone.
    gone: Vec<&'s ProtectedServer>,
    /// Entries unwrapped by hand whose command changed since: the secrets
    /// were moved for another program, so they are not put back.
    changed_by_hand: Vec<(&'v EntryView, &'s ProtectedServer)>,
    /// Gatehouse's wrap entries whose wrapped command changed since (an
    /// edit, a pulled commit): unwrapped with their placeholders left in,
    /// since the secrets were moved for another program.
    changed_inside: Vec<(&'v EntryView, &'s ProtectedServer)>,
}

impl<'v, 's> Restorable<'v, 's> {
    fn find(
        file: &ConfigFile,
        views: &'v [EntryView],
        records: &'s [ProtectedServer],
    ) -> Restorable<'v, 's> {
        // Only entries Gatehouse wrapped in this very file are unwrapped: a
        // wrap entry someone else wrote (a cloned repository claiming a
        // protected server's id) must never get that server's secrets
        // spliced into it.
        // The same file however its path is spelled (relative, `..`, a link).
        let key = file_key(&file.path);
        let here: Vec<&ProtectedServer> = records
            .iter()
            .filter(|r| file_key(Path::new(&r.config_path)) == key)
            .collect();
        let mut found = Restorable {
            targets: vec![],
            hand_unwrapped: vec![],
            foreign: vec![],
            gone: vec![],
            changed_by_hand: vec![],
            changed_inside: vec![],
        };
        for v in views {
            if let Some(w) = &v.wrapped {
                match here.iter().find(|r| r.id == w.server_id) {
                    Some(r) if runs_as_recorded(v, r) => {
                        found.targets.push((v, w.server_id.clone()))
                    }
                    Some(r) => found.changed_inside.push((v, r)),
                    None => found.foreign.push(v),
                }
            }
        }
        for r in &here {
            if found.targets.iter().any(|(_, id)| *id == r.id)
                || found.changed_inside.iter().any(|(_, c)| c.id == r.id)
            {
                continue;
            }
            let by_hand = views.iter().find(|v| {
                v.wrapped.is_none()
                    && v.name == r.entry_name
                    && v.scope_label(file.project.is_some()) == r.scope
                    && holds_placeholders_of(v, r)
            });
            match by_hand {
                Some(v) if runs_as_recorded(v, r) => {
                    found.targets.push((v, r.id.clone()));
                    found.hand_unwrapped.push((v, r.id.clone()));
                }
                Some(v) => found.changed_by_hand.push((v, r)),
                None => found.gone.push(r),
            }
        }
        found
    }
}

/// Whether an entry runs (or, wrapped, wraps) the command and arguments
/// Gatehouse wrapped for `record` (placeholders included): its secrets were
/// moved for that program.
fn runs_as_recorded(v: &EntryView, record: &ProtectedServer) -> bool {
    let EntryKind::Stdio { command, args } = &v.kind else {
        return false;
    };
    let argv = match &v.wrapped {
        Some(w) => (&args[w.inner], &args[w.inner + 1..]),
        None => (command, args.as_slice()),
    };
    record.argv.split_first() == Some(argv)
}

/// Whether an unwrapped entry still holds a `{{vault:NAME}}` placeholder
/// for one of the secrets Gatehouse moved for `record`.
fn holds_placeholders_of(v: &EntryView, record: &ProtectedServer) -> bool {
    let EntryKind::Stdio { args, .. } = &v.kind else {
        return false;
    };
    let env = v.env.iter().filter_map(|(_, value)| value.as_deref());
    args.iter().map(String::as_str).chain(env).any(|t| {
        find_placeholders(t)
            .iter()
            .any(|(_, name)| record.secret_names.iter().any(|n| n == name))
    })
}

/// Says which secrets of a server whose entry is gone stay in the keyring.
fn stranded_note(record: &ProtectedServer) -> Option<String> {
    if record.secret_names.is_empty() {
        return None;
    }
    Some(format!(
        "entry {:?} (server {}) is no longer in this file; its secrets {} stay in the keyring \
         (`gatehouse vault list {}` names them, `gatehouse vault rm {} NAME` removes one)",
        record.entry_name,
        record.id,
        record.secret_names.join(", "),
        record.id,
        record.id
    ))
}

/// `{{vault:NAME}}` placeholders replaced by `<redacted>`.
fn redact_placeholders(template: &str) -> String {
    let mut out = String::new();
    let mut last = 0;
    for (range, _) in find_placeholders(template) {
        out.push_str(&template[last..range.start]);
        out.push_str("<redacted>");
        last = range.end;
    }
    out.push_str(&template[last..]);
    out
}

/// A config with more than one hard link is not protected: the rewrite
/// (a new file renamed over it) would leave the other names holding the
/// old text and its secrets, and the client reading them unprotected.
fn refuse_hard_links(path: &Path) -> Result<(), ClientError> {
    let links = crate::fsutil::hard_links(path);
    if links > 1 {
        return Err(ClientError::Refused(format!(
            "{} has {links} hard links: a rewrite would leave the other names with the \
             old text and its secrets; make them symlinks, then protect again",
            crate::fsutil::resolve_target(path).display()
        )));
    }
    Ok(())
}

/// A warning when the config was read-only: Gatehouse replaces it anyway
/// (a rename needs only the directory to be writable) and keeps its mode.
fn read_only_note(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(crate::fsutil::resolve_target(path)).ok()?;
    meta.permissions().readonly().then(|| {
        format!(
            "{} was read-only; Gatehouse rewrote it anyway and kept it read-only \
             (if you made it read-only to keep it from changing, check it)",
            path.display()
        )
    })
}

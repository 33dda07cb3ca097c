//! Changing the config of a running client through the client's own CLI
//! instead of writing a file it rewrites itself: Claude Code keeps
//! `~/.claude.json` as live state and every session writes it, so while one
//! runs, protect/unprotect apply their entry changes with
//! `claude mcp remove NAME -s user|local` and
//! `claude mcp add-json NAME - -s user|local` (the JSON on **stdin**, never
//! on argv, where `ps` would show it; on unprotect it carries the restored
//! secrets).
//!
//! The changes are the entry-level difference between the text protect (or
//! unprotect) would have written and the current text; anything else that
//! differs refuses the CLI route. Local scope (`projects[P].mcpServers`) is
//! addressed by running the CLI in `P`: Claude Code keys a directory by the
//! root of its main git worktree (symlinks resolved), so a section whose key
//! is not what the CLI derives from it cannot be reached and is refused.
//! Every step is checked by re-reading the file; a failed step rolls the
//! earlier ones back.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ClientError;

/// How long one CLI call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The first executable `name` on `PATH` (`name.exe` too on Windows).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let names: Vec<String> = if cfg!(windows) {
        vec![
            format!("{name}.exe"),
            format!("{name}.cmd"),
            name.to_owned(),
        ]
    } else {
        vec![name.to_owned()]
    };
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(p) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// One server entry that differs: where, and its value before and after
/// (`None`: absent).
#[derive(Debug, Clone, PartialEq)]
pub struct EntryChange {
    /// Key path of its server map (`["mcpServers"]`, `["projects", P, "mcpServers"]`).
    pub container: Vec<String>,
    /// Entry name.
    pub name: String,
    /// Before.
    pub old: Option<Value>,
    /// After.
    pub new: Option<Value>,
}

fn containers(root: &Value, servers_key: &str) -> Vec<Vec<String>> {
    let mut out = vec![vec![servers_key.to_owned()]];
    if let Some(projects) = root.get("projects").and_then(Value::as_object) {
        for (p, section) in projects {
            if section.get(servers_key).is_some() {
                out.push(vec!["projects".into(), p.clone(), servers_key.to_owned()]);
            }
        }
    }
    out
}

fn at<'v>(root: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(root, |v, k| v.get(k))
}

fn entries(root: &Value, servers_key: &str) -> Vec<(Vec<String>, String, Value)> {
    let mut out = Vec::new();
    for c in containers(root, servers_key) {
        if let Some(map) = at(root, &c).and_then(Value::as_object) {
            for (name, v) in map {
                out.push((c.clone(), name.clone(), v.clone()));
            }
        }
    }
    out
}

fn entry<'v>(root: &'v Value, container: &[String], name: &str) -> Option<&'v Value> {
    at(root, container).and_then(|m| m.get(name))
}

fn set_entry(root: &mut Value, container: &[String], name: &str, value: Option<&Value>) -> bool {
    let mut cur = root;
    for k in container {
        let Some(obj) = cur.as_object_mut() else {
            return false;
        };
        cur = obj
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    let Some(map) = cur.as_object_mut() else {
        return false;
    };
    match value {
        Some(v) => {
            map.insert(name.to_owned(), v.clone());
        }
        None => {
            map.shift_remove(name);
        }
    }
    true
}

fn parse(path: &Path, text: &str) -> Result<Value, ClientError> {
    serde_json::from_str(text).map_err(|e| ClientError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        col: e.column(),
        msg: "not strict JSON, which Claude Code's CLI needs".into(),
    })
}

/// The server entries that differ between `old` and `new`. Refuses when
/// anything outside server entries differs: the CLI can only change entries.
pub fn entry_changes(
    path: &Path,
    old: &str,
    new: &str,
    servers_key: &str,
) -> Result<Vec<EntryChange>, ClientError> {
    let old_v = parse(path, old)?;
    let new_v = parse(path, new)?;
    let before = entries(&old_v, servers_key);
    let after = entries(&new_v, servers_key);
    let mut changes: Vec<EntryChange> = Vec::new();
    for (c, name, v) in &before {
        let n = entry(&new_v, c, name);
        if n != Some(v) {
            changes.push(EntryChange {
                container: c.clone(),
                name: name.clone(),
                old: Some(v.clone()),
                new: n.cloned(),
            });
        }
    }
    for (c, name, v) in &after {
        if entry(&old_v, c, name).is_none() {
            changes.push(EntryChange {
                container: c.clone(),
                name: name.clone(),
                old: None,
                new: Some(v.clone()),
            });
        }
    }
    let mut patched = old_v.clone();
    for ch in &changes {
        set_entry(&mut patched, &ch.container, &ch.name, ch.new.as_ref());
    }
    if patched != new_v {
        return Err(ClientError::Refused(format!(
            "{}: the change touches more than server entries, which the client's CLI cannot make; \
             quit the client and run again",
            path.display()
        )));
    }
    Ok(changes)
}

/// Claude Code's view of a stdio entry: `args` defaults to `[]` (its CLI
/// writes the default out).
fn normalized(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(obj) = v.as_object_mut() {
        if obj.contains_key("command") && !obj.contains_key("args") {
            obj.insert("args".into(), Value::Array(vec![]));
        }
    }
    v
}

/// Every string in `v` (keys and values), for redacting CLI output.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out);
        }),
        _ => {}
    }
}

/// The first line of a CLI's stderr, with every string of the entry we
/// passed cut out (on unprotect those include secret values).
fn safe_line(stderr: &[u8], passed: Option<&Value>) -> String {
    let text = String::from_utf8_lossy(stderr);
    let mut line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned();
    // Cut out first, shorten after: a secret across the cut is not matched.
    if let Some(v) = passed {
        let mut secrets = Vec::new();
        strings(v, &mut secrets);
        secrets.retain(|s| s.len() >= 4);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for s in secrets {
            line = line.replace(s.as_str(), "<redacted>");
        }
    }
    line.chars().take(200).collect()
}

/// The project key Claude Code derives from a directory: the root of its
/// main git worktree, else the directory itself, symlinks resolved.
pub fn claude_project_key(dir: &Path) -> Option<PathBuf> {
    let canon = std::fs::canonicalize(dir).ok()?;
    let out = Command::new("git")
        .arg("-C")
        .arg(&canon)
        .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let common = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            if common.file_name().is_some_and(|n| n == ".git") {
                common.parent().map(Path::to_path_buf)
            } else {
                None // a bare repository or a moved git dir: do not guess
            }
        }
        _ => Some(canon),
    }
}

/// Claude Code's `claude mcp`, acting on one `~/.claude.json`.
pub struct ClaudeCli<'a> {
    /// The `claude` executable.
    pub exe: &'a Path,
    /// The config file (`<home>/.claude.json`); the CLI runs with that home.
    pub config: &'a Path,
    /// Key of the server maps (`mcpServers`).
    pub servers_key: &'a str,
}

/// A failed CLI application: the error, and whether the file is back to
/// where it started (every applied step undone).
#[derive(Debug)]
pub struct CliFailure {
    /// What went wrong.
    pub error: ClientError,
    /// The entries are as before the call.
    pub rolled_back: bool,
}

/// An error before the CLI changed anything.
impl From<ClientError> for CliFailure {
    fn from(error: ClientError) -> Self {
        CliFailure {
            error,
            rolled_back: true,
        }
    }
}

impl ClaudeCli<'_> {
    fn home(&self) -> PathBuf {
        self.config
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }

    fn refused(&self, msg: String) -> ClientError {
        ClientError::Refused(format!("{}: {msg}", self.config.display()))
    }

    /// `-s` scope and working directory for an entry's container.
    fn target(&self, container: &[String]) -> Result<(&'static str, PathBuf), ClientError> {
        match container {
            [k] if k == self.servers_key => Ok(("user", self.home())),
            [p, dir, k] if p == "projects" && k == self.servers_key => {
                let dir = PathBuf::from(dir);
                if claude_project_key(&dir).as_deref() != Some(dir.as_path()) {
                    return Err(self.refused(format!(
                        "Claude Code's CLI cannot address the project section {:?} (it keys projects by their \
                         git root and needs the directory to exist); quit Claude Code and run again",
                        dir.display()
                    )));
                }
                Ok(("local", dir))
            }
            _ => Err(self.refused(format!(
                "no Claude Code CLI scope for {}",
                container.join(".")
            ))),
        }
    }

    fn run(&self, args: &[&str], cwd: &Path, stdin: Option<&Value>) -> Result<(), ClientError> {
        let what = format!("claude mcp {}", args.join(" "));
        let mut cmd = Command::new(self.exe);
        cmd.arg("mcp")
            .args(args)
            .current_dir(cwd)
            .env(
                if cfg!(windows) { "USERPROFILE" } else { "HOME" },
                self.home(),
            )
            .env_remove("CLAUDE_CONFIG_DIR")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| self.refused(format!("cannot run {}: {e}", self.exe.display())))?;
        if let (Some(v), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let json = serde_json::to_vec(v).unwrap_or_default();
            // A CLI that exits early closes the pipe; its status says why.
            let _ = pipe.write_all(&json);
        }
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if started.elapsed() < CALL_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(self.refused(format!(
                        "`{what}` did not finish within {}s",
                        CALL_TIMEOUT.as_secs()
                    )));
                }
                Err(e) => return Err(self.refused(format!("`{what}`: {e}"))),
            }
        };
        let mut stderr = Vec::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_end(&mut e, &mut stderr);
        }
        if status.success() {
            Ok(())
        } else {
            Err(self.refused(format!(
                "`{what}` failed ({status}): {}",
                safe_line(&stderr, stdin)
            )))
        }
    }

    fn current(&self) -> Result<Value, ClientError> {
        let text = std::fs::read_to_string(self.config).map_err(|source| ClientError::Io {
            path: self.config.to_path_buf(),
            source,
        })?;
        parse(self.config, &text)
    }

    /// Every entry except `(container, name)`: what a step must not touch.
    fn others(
        &self,
        root: &Value,
        container: &[String],
        name: &str,
    ) -> Vec<(Vec<String>, String, Value)> {
        entries(root, self.servers_key)
            .into_iter()
            .filter(|(c, n, _)| !(c == container && n == name))
            .collect()
    }

    /// Sets one entry (remove, then add-json) and checks the file after
    /// each step. Returns notes (fields the CLI normalised away).
    fn set(
        &self,
        container: &[String],
        name: &str,
        expect_now: Option<&Value>,
        value: Option<&Value>,
    ) -> Result<Vec<String>, ClientError> {
        let (scope, cwd) = self.target(container)?;
        let before = self.current()?;
        let now = entry(&before, container, name);
        if now.map(normalized) != expect_now.map(normalized) {
            return Err(ClientError::Concurrent {
                path: self.config.to_path_buf(),
            });
        }
        let others = self.others(&before, container, name);
        let unexpected = |what: &str| {
            self.refused(format!(
                "after `claude mcp {what}` for {name:?} another server entry differs; \
                 check with `claude mcp list`"
            ))
        };
        if now.is_some() {
            self.run(&["remove", name, "-s", scope], &cwd, None)?;
            let after = self.current()?;
            if entry(&after, container, name).is_some() {
                return Err(self.refused(format!(
                    "`claude mcp remove {name} -s {scope}` left the entry in place"
                )));
            }
            if self.others(&after, container, name) != others {
                return Err(unexpected("remove"));
            }
        }
        let mut notes = Vec::new();
        if let Some(v) = value {
            self.run(&["add-json", name, "-", "-s", scope], &cwd, Some(v))?;
            let after = self.current()?;
            let got = entry(&after, container, name).ok_or_else(|| {
                self.refused(format!(
                    "`claude mcp add-json {name} -s {scope}` did not add the entry"
                ))
            })?;
            if self.others(&after, container, name) != others {
                return Err(unexpected("add-json"));
            }
            let (got, want) = (normalized(got), normalized(v));
            if got != want {
                let launch = ["command", "args", "env", "type"];
                if launch.iter().any(|k| got.get(k) != want.get(k)) {
                    return Err(self.refused(format!(
                        "`claude mcp add-json {name}` stored a different launch command than given"
                    )));
                }
                let mut keys: Vec<String> = want
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, x)| got.get(k.as_str()) != Some(x))
                    .map(|(k, _)| k.clone())
                    .collect();
                keys.extend(
                    got.as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(k, _)| want.get(k.as_str()).is_none())
                        .map(|(k, _)| k.clone()),
                );
                notes.push(format!(
                    "{name}: Claude Code's CLI did not keep these fields as given: {}",
                    keys.join(", ")
                ));
            }
        }
        Ok(notes)
    }

    /// Applies `changes` one entry at a time; on failure undoes the applied
    /// ones (best effort) and says whether that worked.
    pub fn apply(&self, changes: &[EntryChange]) -> Result<Vec<String>, CliFailure> {
        // Refuse unreachable sections before changing anything.
        for ch in changes {
            self.target(&ch.container).map_err(|error| CliFailure {
                error,
                rolled_back: true,
            })?;
        }
        let mut notes = Vec::new();
        for (i, ch) in changes.iter().enumerate() {
            match self.set(&ch.container, &ch.name, ch.old.as_ref(), ch.new.as_ref()) {
                Ok(n) => notes.extend(n),
                Err(error) => {
                    let mut rolled_back = true;
                    for done in changes[..=i].iter().rev() {
                        let now = self
                            .current()
                            .ok()
                            .and_then(|r| entry(&r, &done.container, &done.name).cloned());
                        if now.as_ref().map(normalized) == done.old.as_ref().map(normalized) {
                            continue;
                        }
                        rolled_back &= self
                            .set(&done.container, &done.name, now.as_ref(), done.old.as_ref())
                            .is_ok();
                    }
                    return Err(CliFailure { error, rolled_back });
                }
            }
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(old: &str, new: &str, expect: &[(&str, &str, bool, bool)]) {
        let got = entry_changes(Path::new("/h/.claude.json"), old, new, "mcpServers").unwrap();
        let got: Vec<(String, String, bool, bool)> = got
            .iter()
            .map(|c| {
                (
                    c.container.join("."),
                    c.name.clone(),
                    c.old.is_some(),
                    c.new.is_some(),
                )
            })
            .collect();
        let expect: Vec<(String, String, bool, bool)> = expect
            .iter()
            .map(|(c, n, o, w)| (c.to_string(), n.to_string(), *o, *w))
            .collect();
        assert_eq!(got, expect, "entry-level difference of {old} → {new}");
    }

    #[test]
    fn entry_changes_find_user_and_local_entries() {
        check(
            r#"{"a":1,"mcpServers":{"x":{"command":"a"},"y":{"command":"b"}},"projects":{"/p":{"mcpServers":{"z":{"command":"c"}}}}}"#,
            r#"{"a":1,"mcpServers":{"x":{"command":"A"},"y":{"command":"b"}},"projects":{"/p":{"mcpServers":{"z":{"command":"C"},"n":{"command":"n"}}}}}"#,
            &[
                ("mcpServers", "x", true, true),
                ("projects./p.mcpServers", "z", true, true),
                ("projects./p.mcpServers", "n", false, true),
            ],
        );
        check(
            r#"{"mcpServers":{"x":{}}}"#,
            r#"{"mcpServers":{"x":{}}}"#,
            &[],
        );
    }

    #[test]
    fn entry_changes_refuse_edits_outside_entries() {
        let err = entry_changes(
            Path::new("/h/.claude.json"),
            r#"{"a":1,"mcpServers":{"x":{"command":"a"}}}"#,
            r#"{"a":2,"mcpServers":{"x":{"command":"b"}}}"#,
            "mcpServers",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("more than server entries"),
            "a change to a non-entry key cannot go through the CLI: {err}"
        );
    }

    #[test]
    fn stderr_is_cut_to_one_line_without_the_entry_strings() {
        let passed = serde_json::json!({"env": {"TOKEN": "ghp_SuperSecretValue123"}});
        let line = safe_line(
            b"\nInvalid: env.TOKEN ghp_SuperSecretValue123 rejected\nmore\n",
            Some(&passed),
        );
        assert_eq!(line, "Invalid: env.<redacted> <redacted> rejected");
        // A value across the 200th character is still cut out.
        let long = format!("{} ghp_SuperSecretValue123", "x".repeat(190));
        let line = safe_line(long.as_bytes(), Some(&passed));
        assert!(!line.contains("ghp_Super"), "{line}");
    }

    #[test]
    fn project_key_is_the_git_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            claude_project_key(&root),
            Some(root.clone()),
            "not a repository: itself"
        );
        let ok = Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["init", "-q"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("project_key_is_the_git_root: git not available; repository case skipped");
            return;
        }
        let sub = root.join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(
            claude_project_key(&sub),
            Some(root.clone()),
            "a subdirectory of a repository is keyed by the repository root"
        );
        assert_eq!(claude_project_key(&root.join("missing")), None);
    }
}

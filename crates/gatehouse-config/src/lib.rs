//! gatehouse-config owns `policy.toml`: the person's (and team's) policy,
//! parsed strictly into raw options (`raw`), validated into layers with
//! `file:line:column` diagnostics (`layer`, `diag`), merged so that a local
//! file may only tighten a team base (`policy::Policy::from_layers`), and
//! evaluated by pure functions the engine calls on every message
//! ([`Policy::server_decision`], [`Policy::tool_decision`],
//! [`Policy::tool_exposed`], [`Policy::server_settings`]). Key types:
//! [`Policy`], [`Decision`], [`ServerRef`], [`ServerSettings`],
//! [`LoadedPolicy`], [`PolicyError`]. [`seed_allowed_commands`] edits the
//! text of a local file for `gatehouse protect` (a commented seed of the
//! command allowlist).
//!
//! **Invariant:** parsing, validation, merging and evaluation are pure
//! functions over strings and values — the only I/O is [`load`] and
//! [`write_default_if_missing`]; this crate never depends on the store, the
//! vault or a clock, and no error message carries a value that could be a
//! secret.

mod diag;
mod layer;
mod matching;
mod policy;
mod raw;
mod render;
mod seed;

use std::io;
use std::path::{Path, PathBuf};

pub use diag::{Diagnostic, PolicyError};
pub use matching::glob_escape;
pub use policy::{
    AllowDecline, Burst, CrossServer, CustomPattern, Decision, Elicitation, EnvValue, FlowMode,
    FlowRule, Limits, ListMode, Mode, OnChange, OnLaunchChange, PinningSettings, Policy, RateLimit,
    RequestSettings, ResultAction, RuleDecision, SamplingContext, ScannerSettings, SensitiveFields,
    ServerRef, ServerSettings, Severity, ToolClass, ToolListSettings, Trust, Typosquat,
};
pub use render::generate_locked_policy;
pub use seed::{command_pattern, seed_allowed_commands, CommandSeed, SEED_MARKER};

/// File name of the local policy inside `GATEHOUSE_HOME`.
pub const POLICY_FILE: &str = "policy.toml";
/// Environment variable naming a team base policy file.
pub const BASE_ENV: &str = "GATEHOUSE_POLICY_BASE";

const DEFAULT_POLICY: &str = include_str!("default_policy.toml");

/// The commented default `policy.toml` written on first run. Every setting
/// is commented out, so a team base applies unchanged; uncommenting a line
/// sets the value shown, which is the built-in default.
pub fn default_policy_toml() -> &'static str {
    DEFAULT_POLICY
}

/// Which layer a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceRole {
    /// A team base (from `base = "…"` or `GATEHOUSE_POLICY_BASE`).
    Base,
    /// `$GATEHOUSE_HOME/policy.toml`.
    Local,
}

/// One policy file's text and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySource {
    /// Base or local.
    pub role: SourceRole,
    /// How diagnostics name it (a path, or a label such as `<last good>`).
    pub name: String,
    /// The file's text.
    pub text: String,
}

/// A merged, validated policy with the texts it came from (store them as
/// the "last good" policy) and the warnings about ignored local settings.
#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    /// The effective policy.
    pub policy: Policy,
    /// Sources, bases first, local last.
    pub sources: Vec<PolicySource>,
    /// Local settings ignored because they would loosen a base.
    pub warnings: Vec<Diagnostic>,
}

/// Validates and merges sources (bases first, local last). Pure: `base`
/// keys are not followed here (see [`load`]); a base that names a base is an
/// error, since chains would hide where a rule comes from.
pub fn compile(sources: Vec<PolicySource>) -> Result<LoadedPolicy, PolicyError> {
    let mut layers = Vec::with_capacity(sources.len());
    let mut errors = Vec::new();
    for source in &sources {
        match layer::parse_layer(&source.name, &source.text) {
            Ok(l) => {
                if source.role == SourceRole::Base && l.raw.base.is_some() {
                    let locator = diag::Locator::new(&source.text);
                    errors.push(locator.diagnostic(
                        &source.name,
                        &diag::KeyPath::default().key("base"),
                        true,
                        "a base policy cannot name another base".to_owned(),
                    ));
                }
                layers.push(l);
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(PolicyError::Invalid(errors));
    }
    let (policy, notes) = Policy::from_layers(&layers);
    let warnings = notes
        .into_iter()
        .map(|n| {
            let source = &sources[n.layer];
            diag::Locator::new(&source.text).diagnostic(&source.name, &n.path, false, n.message)
        })
        .collect();
    Ok(LoadedPolicy {
        policy,
        sources,
        warnings,
    })
}

/// Format version of [`LoadedPolicy::last_good_record`].
const LAST_GOOD_VERSION: u64 = 1;

impl LoadedPolicy {
    /// A lossless record of this policy for the database's "last good"
    /// slot: every source text with its role, so [`compile_last_good`]
    /// rebuilds exactly this policy. (`Policy::to_toml` is for people: with
    /// several layers it can show only one allowlist per key, so a policy
    /// read back from it can be looser than the one that was in force.)
    pub fn last_good_record(&self) -> String {
        let sources: Vec<serde_json::Value> = self
            .sources
            .iter()
            .map(|s| {
                serde_json::json!({
                    "role": match s.role { SourceRole::Base => "base", SourceRole::Local => "local" },
                    "name": s.name,
                    "text": s.text,
                })
            })
            .collect();
        serde_json::json!({ "v": LAST_GOOD_VERSION, "sources": sources }).to_string()
    }
}

/// Rebuilds the policy from a [`LoadedPolicy::last_good_record`]. A record
/// that is plain policy text (what earlier versions stored) is validated as
/// one file. The database is untrusted input: a malformed record is an
/// error, never a default.
pub fn compile_last_good(record: &str) -> Result<LoadedPolicy, PolicyError> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(record) else {
        return check_text("last good policy (database)", record);
    };
    let malformed = || {
        PolicyError::Invalid(vec![Diagnostic {
            file: "last good policy (database)".to_owned(),
            line: 0,
            column: 0,
            message: "not a last-good policy record".to_owned(),
        }])
    };
    if value["v"].as_u64() != Some(LAST_GOOD_VERSION) {
        return Err(malformed());
    }
    let mut sources = Vec::new();
    for s in value["sources"].as_array().ok_or_else(malformed)? {
        let role = match s["role"].as_str() {
            Some("base") => SourceRole::Base,
            Some("local") => SourceRole::Local,
            _ => return Err(malformed()),
        };
        sources.push(PolicySource {
            role,
            name: format!("{} (last good)", s["name"].as_str().ok_or_else(malformed)?),
            text: s["text"].as_str().ok_or_else(malformed)?.to_owned(),
        });
    }
    if sources.last().map(|s| s.role) != Some(SourceRole::Local) {
        return Err(malformed());
    }
    compile(sources)
}

/// Validates one text on its own (what `gatehouse policy check FILE` does).
/// [`check_text`] for a file's bytes: a file that is not UTF-8 is invalid,
/// its diagnostic at the first bad byte.
pub fn check_bytes(name: &str, bytes: &[u8]) -> Result<LoadedPolicy, PolicyError> {
    let text = utf8_text(Path::new(name), bytes.to_vec())?;
    check_text(name, &text)
}

pub fn check_text(name: &str, text: &str) -> Result<LoadedPolicy, PolicyError> {
    compile(vec![PolicySource {
        role: SourceRole::Local,
        name: name.to_owned(),
        text: text.to_owned(),
    }])
}

/// Reads `$home/policy.toml` (the built-in default text when missing) and
/// its bases: the `base` key (relative to `home`) and `$GATEHOUSE_POLICY_BASE`.
/// When both are set and differ, both apply. A named base that cannot be
/// read is an error, never silently skipped.
pub fn load(home: &Path) -> Result<LoadedPolicy, PolicyError> {
    let env_base = std::env::var_os(BASE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    load_with(home, env_base.as_deref())
}

/// [`load`] with the environment base passed in (for tests).
pub fn load_with(home: &Path, env_base: Option<&Path>) -> Result<LoadedPolicy, PolicyError> {
    load_local(&home.join(POLICY_FILE), Some(DEFAULT_POLICY), env_base)
}

/// Loads one policy file (which must exist) and the bases it names: its
/// `base` key (relative to the file's directory) and `env_base`. This is
/// what `gatehouse policy check FILE` validates.
pub fn load_file(path: &Path, env_base: Option<&Path>) -> Result<LoadedPolicy, PolicyError> {
    load_local(path, None, env_base)
}

/// Validates `bytes` as if they were the policy file at `path`, exactly as
/// [`load`] would read them there: its `base` key followed (relative to
/// `path`'s directory) and `$GATEHOUSE_POLICY_BASE`. The dashboard's editor
/// checks an edit with this before it is saved, so "valid" means what every
/// wrap will load. Diagnostics give files, positions and keys, never a
/// base file's contents.
pub fn check_as(path: &Path, bytes: &[u8]) -> Result<LoadedPolicy, PolicyError> {
    let env_base = std::env::var_os(BASE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    check_as_with(path, bytes, env_base.as_deref())
}

/// [`check_as`] with the environment base passed in (for tests).
pub fn check_as_with(
    path: &Path,
    bytes: &[u8],
    env_base: Option<&Path>,
) -> Result<LoadedPolicy, PolicyError> {
    let text = utf8_text(path, bytes.to_vec())?;
    compile_local(path, text, env_base)
}

fn load_local(
    local_path: &Path,
    if_missing: Option<&str>,
    env_base: Option<&Path>,
) -> Result<LoadedPolicy, PolicyError> {
    let local_text = match std::fs::read(local_path) {
        Ok(bytes) => utf8_text(local_path, bytes)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound && if_missing.is_some() => {
            if_missing.unwrap_or_default().to_owned()
        }
        Err(e) => {
            return Err(PolicyError::Io {
                path: local_path.to_path_buf(),
                source: e,
            })
        }
    };
    compile_local(local_path, local_text, env_base)
}

/// The local file's text with the bases it names (read from disk).
fn compile_local(
    local_path: &Path,
    local_text: String,
    env_base: Option<&Path>,
) -> Result<LoadedPolicy, PolicyError> {
    let local_name = local_path.display().to_string();
    let local_layer = layer::parse_layer(&local_name, &local_text).map_err(PolicyError::Invalid)?;
    let dir = local_path.parent().unwrap_or_else(|| Path::new("."));
    let mut base_paths: Vec<PathBuf> = Vec::new();
    if let Some(p) = env_base {
        base_paths.push(p.to_path_buf());
    }
    if let Some(b) = &local_layer.raw.base {
        let p = dir.join(b);
        if !base_paths.contains(&p) {
            base_paths.push(p);
        }
    }
    let mut sources = Vec::new();
    for path in base_paths {
        let bytes = std::fs::read(&path).map_err(|e| PolicyError::Io {
            path: path.clone(),
            source: e,
        })?;
        let text = utf8_text(&path, bytes)?;
        sources.push(PolicySource {
            role: SourceRole::Base,
            name: path.display().to_string(),
            text,
        });
    }
    sources.push(PolicySource {
        role: SourceRole::Local,
        name: local_name,
        text: local_text,
    });
    compile(sources)
}

/// A policy file's bytes as text; a file that is not UTF-8 is an invalid
/// policy whose diagnostic points at the first bad byte (line, column and
/// byte offset), never at the bytes themselves.
fn utf8_text(path: &Path, bytes: Vec<u8>) -> Result<String, PolicyError> {
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let valid = std::str::from_utf8(&e.as_bytes()[..offset]).unwrap_or_default();
        let (line, column) = diag::line_col(valid, offset);
        PolicyError::Invalid(vec![Diagnostic {
            file: path.display().to_string(),
            line,
            column,
            message: format!("not valid UTF-8 (byte offset {offset}); save the file as UTF-8"),
        }])
    })
}

/// Writes the commented default policy to `$home/policy.toml` (0600 on
/// Unix) unless a file is already there. Returns whether it wrote.
pub fn write_default_if_missing(home: &Path) -> io::Result<bool> {
    use std::io::Write as _;
    std::fs::create_dir_all(home)?;
    let path = home.join(POLICY_FILE);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(&path) {
        Ok(mut f) => {
            f.write_all(DEFAULT_POLICY.as_bytes())?;
            f.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

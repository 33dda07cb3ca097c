//! `gatehouse clients`, `protect`, `unprotect`: thin shells over
//! `gatehouse_clients`, with the OS keyring as vault and the store as the
//! identity registry.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::{bail, Context};
use gatehouse_clients::discover::{all_projects, config_files};
use gatehouse_clients::protect::{new_server_id, SystemProbe};
use gatehouse_clients::{detect, ClientSpec, FileReport, HomeDirs, Options, Protector, CLIENTS};
use gatehouse_vault::KeyringVault;

use super::store_access::JSON_VERSION;

#[derive(clap::Args)]
pub struct ClientsArgs {
    /// One JSON object per client per line (shape version `v`).
    #[arg(long)]
    json: bool,
    /// Also look at this project directory (repeatable).
    #[arg(long = "project", value_name = "DIR")]
    projects: Vec<PathBuf>,
    /// GATEHOUSE_HOME whose auto-protect settings to show.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ProtectArgs {
    /// Clients to protect (cursor, claude-desktop, claude-code, vscode, windsurf, gemini, codex, zed, cline).
    clients: Vec<String>,
    /// Every detected client.
    #[arg(long)]
    all: bool,
    /// Print a unified diff (secrets redacted) and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also protect this project's config files (repeatable).
    #[arg(long = "project", value_name = "DIR")]
    projects: Vec<PathBuf>,
    /// Confirm rewriting git-tracked project files.
    #[arg(long)]
    yes: bool,
    /// Point already wrapped entries at this gatehouse binary.
    #[arg(long)]
    repair: bool,
    /// While a client that rewrites its own config runs (Claude Code, Claude
    /// Desktop) and its own CLI is not on PATH: wait up to SECS for it to quit
    /// (0: refuse at once). Claude Code's `claude` CLI on PATH is used instead.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    wait: u64,
    /// Turn auto-protect on for these clients: while `gatehouse up` runs, a
    /// server added to (or unwrapped in) their configs is protected at once
    /// (at most 3 rewrites per file per hour). `unprotect` turns it off.
    #[arg(long)]
    watch: bool,
    /// GATEHOUSE_HOME to use (and to write into wrapped entries).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct UnprotectArgs {
    /// Clients to restore.
    clients: Vec<String>,
    /// Every client.
    #[arg(long)]
    all: bool,
    /// Print the diff and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also restore this project's config files (repeatable).
    #[arg(long = "project", value_name = "DIR")]
    projects: Vec<PathBuf>,
    /// While a client that rewrites its own config runs (Claude Code, Claude
    /// Desktop) and its own CLI is not on PATH: wait up to SECS for it to quit
    /// (0: refuse at once). Claude Code's `claude` CLI on PATH is used instead.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    wait: u64,
    /// GATEHOUSE_HOME to use.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

pub fn run_clients(args: ClientsArgs) -> anyhow::Result<ExitCode> {
    let dirs = HomeDirs::from_env();
    let found = detect(&dirs, &args.projects);
    let state = gatehouse_clients::state::StateDir {
        home: gatehouse_store::home::resolve(args.home.as_deref()),
    }
    .load()
    .unwrap_or_default();
    // A config that cannot be read or parsed is an error (exit 2), shown
    // beside everything that could be read.
    let unreadable = found
        .iter()
        .flat_map(|c| &c.files)
        .filter(|f| f.error.is_some())
        .count();
    let done = || {
        if unreadable == 0 {
            return ExitCode::SUCCESS;
        }
        eprintln!("gatehouse: error: {unreadable} config file(s) could not be read or parsed");
        ExitCode::from(2)
    };
    if args.json {
        for c in &found {
            let mut line = serde_json::Map::new();
            line.insert("v".into(), JSON_VERSION.into());
            if let serde_json::Value::Object(fields) = serde_json::to_value(c)? {
                line.extend(fields);
            }
            line.insert("auto_protect".into(), state.auto_protects(c.key).into());
            outln!("{}", serde_json::Value::Object(line));
        }
        return Ok(done());
    }
    if found.is_empty() {
        outln!("No AI client MCP configs found.");
    }
    for c in &found {
        let auto = if state.auto_protects(c.key) {
            "  [auto-protect on]"
        } else {
            ""
        };
        outln!("{} ({}){auto}", c.name, c.key);
        for b in &c.blockers {
            outln!("  ! {b}");
        }
        for f in &c.files {
            outln!("  {}", f.path.display());
            if let Some(e) = &f.error {
                outln!("    ! {e}");
            }
            for s in &f.servers {
                let state = match (&s.protected, &s.blocker) {
                    (Some(id), _) => format!("protected ({id})"),
                    (None, Some(b)) => format!("not protectable: {b}"),
                    (None, None) => "NOT protected".into(),
                };
                let secrets = match (s.secrets.is_empty(), &s.blocker) {
                    (true, _) => String::new(),
                    (false, None) => format!("  plain-text secrets: {}", s.secrets.join(", ")),
                    (false, Some(_)) => format!(
                        "  plain-text secrets: {} (not moved: protect leaves this entry as it is)",
                        s.secrets.join(", ")
                    ),
                };
                let env_file = if s.env_file {
                    "  (envFile not inspected)"
                } else {
                    ""
                };
                outln!(
                    "    {:<20} {:<9} {:<10} {state}{secrets}{env_file}",
                    s.name,
                    s.transport,
                    s.scope
                );
            }
        }
    }
    Ok(done())
}

fn select(names: &[String], all: bool) -> anyhow::Result<Vec<&'static ClientSpec>> {
    if all {
        return Ok(CLIENTS.iter().collect());
    }
    if names.is_empty() {
        bail!("name the clients to act on (see `gatehouse clients`) or pass --all");
    }
    names
        .iter()
        .map(|n| {
            gatehouse_clients::client(n)
                .with_context(|| format!("unknown client {n:?}; known: {}", known()))
        })
        .collect()
}

fn known() -> String {
    CLIENTS.iter().map(|c| c.key).collect::<Vec<_>>().join(", ")
}

fn stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{secs}")
}

fn print_report(r: &FileReport, verb: &str) {
    if !r.changed && r.entries.is_empty() && r.skipped.is_empty() && r.notes.is_empty() {
        outln!("  {}: nothing to do", r.path.display());
        return;
    }
    let what = if r.changed { verb } else { "unchanged" };
    outln!(
        "  {}: {what}{}",
        r.path.display(),
        if r.entries.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.entries.join(", "))
        }
    );
    for (name, why) in &r.skipped {
        outln!("    skipped {name}: {why}");
    }
    if let Some(diff) = &r.diff {
        out!("{diff}");
    }
    for n in &r.notes {
        outln!("    note: {n}");
    }
}

/// Turns auto-protect on or off for `clients` and says so.
fn set_auto_protect(home: &Path, clients: &[&'static ClientSpec], on: bool) -> anyhow::Result<()> {
    let keys: Vec<&str> = clients.iter().map(|c| c.key).collect();
    let dir = gatehouse_clients::state::StateDir {
        home: home.to_path_buf(),
    };
    let before = dir.load()?;
    dir.set_auto_protect(&keys, on)
        .context("recording the auto-protect setting")?;
    let changed: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| before.auto_protects(k) != on)
        .collect();
    if !changed.is_empty() {
        outln!(
            "auto-protect {} for {}{}",
            if on { "on" } else { "off" },
            changed.join(", "),
            if on {
                " (applied while `gatehouse up` runs)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Adds to `files` the user config files protect recorded for `client`
/// where discovery did not find them (another `CODEX_HOME` then), and says
/// which recorded ones are gone, with the servers whose secrets stay.
fn recorded_user_files(
    state: &gatehouse_clients::state::StateDir,
    client: &'static ClientSpec,
    files: &mut Vec<gatehouse_clients::discover::ConfigFile>,
) -> anyhow::Result<()> {
    use gatehouse_clients::state::file_key;
    for (path, servers) in state.protected_user_files(client.key)? {
        if files.iter().any(|f| file_key(&f.path) == file_key(&path)) {
            continue;
        }
        if path.is_file() {
            files.push(gatehouse_clients::discover::ConfigFile {
                client,
                path,
                project: None,
            });
            continue;
        }
        let ids: Vec<&str> = servers.iter().map(|s| s.id.as_str()).collect();
        outln!(
            "{} ({}): {} was protected and is gone; the secrets of its servers stay in the \
             keyring (`gatehouse vault list ID` names them: {})",
            client.name,
            client.key,
            path.display(),
            ids.join(", ")
        );
    }
    Ok(())
}

/// A client's user config paths, a dangling link said as such.
fn looked_for(client: &ClientSpec, dirs: &HomeDirs) -> String {
    (client.user_files)(dirs)
        .iter()
        .map(|p| {
            let dangling = p.symlink_metadata().is_ok() && p.metadata().is_err();
            if dangling {
                format!("{} (a link to nothing)", p.display())
            } else {
                p.display().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `named`: the clients were named on the command line (not `--all`), so
/// one without a config file is said, not skipped.
fn run_files(
    clients: &[&'static ClientSpec],
    named: bool,
    projects: &[PathBuf],
    home: Option<&Path>,
    opts: &Options,
    unprotect: bool,
    watch: bool,
) -> anyhow::Result<ExitCode> {
    let gatehouse_home = gatehouse_store::home::resolve(home);
    let gatehouse_home = std::path::absolute(&gatehouse_home).unwrap_or(gatehouse_home);
    gatehouse_store::home::ensure_private_dir(&gatehouse_home)
        .with_context(|| format!("creating {}", gatehouse_home.display()))?;
    if let Err(e) = gatehouse_vault::session_bus::remember(&gatehouse_home) {
        eprintln!("gatehouse: could not remember the session bus address: {e}");
    }
    let exe = std::env::current_exe().context("locating the gatehouse binary")?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let vault = KeyringVault::new();
    // Identity records (and secret fingerprints) go to the store, where
    // `gatehouse wrap` reads them.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let store = rt
        .block_on(gatehouse_store::Store::open(
            &gatehouse_home,
            gatehouse_store::StoreOptions::control_plane(),
        ))
        .with_context(|| {
            format!(
                "opening the Gatehouse database in {}",
                gatehouse_home.display()
            )
        })?;
    let registry = gatehouse_server::api::clients::StoreRegistry::new(
        store,
        rt.handle().clone(),
        gatehouse_store::now_ms(),
        &gatehouse_home,
    );
    let probe = SystemProbe;
    let protector = Protector {
        gatehouse_home: gatehouse_home.clone(),
        exe,
        vault: &vault,
        registry: &registry,
        processes: &probe,
        ids: Mutex::new(Box::new(new_server_id)),
        stamp: stamp(),
    };
    // Off before anything is unwrapped, so a running watcher does not
    // protect again what the person just restored.
    if unprotect && !opts.dry_run {
        set_auto_protect(&gatehouse_home, clients, false)?;
    }
    let dirs = HomeDirs::from_env();
    let state = gatehouse_clients::state::StateDir {
        home: gatehouse_home.clone(),
    };
    let mut failed = false;
    let mut found_any = false;
    for client in clients {
        let mut extra = projects.to_vec();
        if unprotect {
            extra.extend(state.protected_projects(client.key)?);
        }
        let mut files = config_files(client, &dirs, &all_projects(&dirs, &extra));
        if unprotect {
            recorded_user_files(&state, client, &mut files)?;
        }
        if files.is_empty() {
            if named {
                outln!(
                    "{} ({}): no config file found (looked for {})",
                    client.name,
                    client.key,
                    looked_for(client, &dirs)
                );
            }
            continue;
        }
        found_any = true;
        outln!("{} ({})", client.name, client.key);
        let opts = Options {
            client_cli: client
                .own_cli
                .and_then(gatehouse_clients::client_cli::find_on_path),
            ..opts.clone()
        };
        let opts = &opts;
        for f in &files {
            let result = if unprotect {
                protector.unprotect_file(f, opts)
            } else {
                protector.protect_file(f, opts)
            };
            match result {
                Ok(r) => print_report(
                    &r,
                    if opts.dry_run {
                        "would change"
                    } else if unprotect {
                        "restored"
                    } else {
                        "protected"
                    },
                ),
                Err(e) => {
                    failed = true;
                    outln!("  {}: error: {e}", f.path.display());
                }
            }
        }
    }
    if !found_any && !named {
        outln!("No AI client config file found; nothing to do (see `gatehouse clients`).");
    }
    if !unprotect && !opts.dry_run {
        seed_allowed_commands(&gatehouse_home);
        // On only after protect wrote its files, so the watcher never
        // races this command for them.
        if watch {
            set_auto_protect(&gatehouse_home, clients, true)?;
        }
    }
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Seeds the commented `server_policy.allowed_commands` in `policy.toml`
/// with the command of every protected server, so turning the command
/// allowlist on breaks nothing (docs/policy.md). An active list is left
/// alone; the protected commands it refuses are named. Failures are
/// reported, never fatal: the configs are already protected.
fn seed_allowed_commands(home: &Path) {
    let state_dir = gatehouse_clients::state::StateDir {
        home: home.to_path_buf(),
    };
    let state = match state_dir.load() {
        Ok(state) => state,
        Err(e) => {
            eprintln!("gatehouse: policy seed skipped: {e}");
            return;
        }
    };
    let commands: Vec<String> = state
        .servers
        .iter()
        .filter_map(|s| s.argv.first().cloned())
        .collect();
    if commands.is_empty() {
        return;
    }
    let path = home.join(gatehouse_config::POLICY_FILE);
    let result = gatehouse_config::write_default_if_missing(home)
        .map_err(|e| e.to_string())
        .and_then(|_| std::fs::read_to_string(&path).map_err(|e| e.to_string()))
        .and_then(|text| {
            let name = path.display().to_string();
            let seed = gatehouse_config::seed_allowed_commands(&name, &text, &commands)
                .map_err(|e| e.to_string())?;
            if let Some(new) = &seed.text {
                gatehouse_clients::fsutil::atomic_write(&path, &text, new)
                    .map_err(|e| e.to_string())?;
            }
            Ok(seed)
        });
    match result {
        Ok(seed) => {
            if seed.text.is_some() {
                outln!(
                    "policy: {} lists the commands of protected servers in a commented \
                     server_policy.allowed_commands ({}); uncomment it to allow only these",
                    path.display(),
                    seed.seeded.join(", ")
                );
            }
            for c in &seed.refused {
                outln!(
                    "policy: note: server_policy.allowed_commands does not allow `{c}`; \
                     wrap refuses the servers it launches until you add it"
                );
            }
        }
        Err(e) => eprintln!("gatehouse: policy seed skipped ({}): {e}", path.display()),
    }
}

pub fn run_protect(args: ProtectArgs) -> anyhow::Result<ExitCode> {
    let clients = select(&args.clients, args.all)?;
    let opts = Options {
        dry_run: args.dry_run,
        yes: args.yes,
        repair: args.repair,
        wait: std::time::Duration::from_secs(args.wait),
        client_cli: None,
    };
    run_files(
        &clients,
        !args.all,
        &args.projects,
        args.home.as_deref(),
        &opts,
        false,
        args.watch,
    )
}

pub fn run_unprotect(args: UnprotectArgs) -> anyhow::Result<ExitCode> {
    let clients = select(&args.clients, args.all)?;
    let opts = Options {
        dry_run: args.dry_run,
        yes: true,
        repair: false,
        wait: std::time::Duration::from_secs(args.wait),
        client_cli: None,
    };
    run_files(
        &clients,
        !args.all,
        &args.projects,
        args.home.as_deref(),
        &opts,
        true,
        false,
    )
}

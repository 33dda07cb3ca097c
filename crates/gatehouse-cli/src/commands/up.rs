//! `gatehouse up` (start the one control plane for this user) and
//! `gatehouse dashboard` (print a fresh sign-in URL for the running one).
//!
//! stdout gets exactly one line, `Dashboard: <sign-in URL>`; everything else
//! goes to stderr.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use gatehouse_server::control::{self, Acquired, ControlInfo};
use gatehouse_server::ServerConfig;
use gatehouse_store::home;

#[derive(clap::Args)]
pub struct UpArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Open the dashboard in the default browser.
    #[arg(long)]
    open: bool,
    /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data directory).
    #[arg(long)]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DashboardArgs {
    /// Gatehouse home (default: $GATEHOUSE_HOME, then the OS data directory).
    #[arg(long)]
    home: Option<PathBuf>,
    /// Open the URL in the default browser as well.
    #[arg(long)]
    open: bool,
}

/// Waits (≤ 5 s) for a control plane that holds the lock to publish its file.
fn wait_for_running(
    home: &std::path::Path,
    first: Option<ControlInfo>,
) -> anyhow::Result<ControlInfo> {
    if let Some(info) = first {
        return Ok(info);
    }
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(info) = control::read_control(home) {
            return Ok(info);
        }
    }
    bail!(
        "another control plane holds the lock in {} but has not said where it listens",
        home.display()
    )
}

/// Prints the sign-in link (stdout is the person's own terminal, never a
/// command line) and, with `--open`, opens it through a private redirect
/// page ([`crate::browser`]); returns that page.
fn announce(home: &Path, url: &str, open: bool) -> Option<PathBuf> {
    outln!("Dashboard: {url}");
    if open {
        crate::browser::open_signin(home, url)
    } else {
        None
    }
}

pub fn run_up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let home = home::resolve(args.home.as_deref());
    let mut lock = match control::acquire(&home)? {
        Acquired::Mine(lock) => lock,
        Acquired::Running(info) => {
            let info = wait_for_running(&home, info)?;
            let url = control::request_signin_url(&info)
                .context("asking the running control plane for a sign-in link")?;
            eprintln!(
                "gatehouse: a control plane is already running for {} (pid {})",
                home.display(),
                info.pid
            );
            announce(&home, &url, args.open);
            return Ok(ExitCode::SUCCESS);
        }
    };
    super::log_to_stderr();
    raise_fd_limit();
    // Redirect pages a crashed run left behind (their tokens have expired).
    crate::browser::sweep(
        &home.join(crate::browser::SIGNIN_DIR),
        std::time::SystemTime::now(),
    );
    if let Some(line) = policy_notice(&home) {
        eprintln!("{line}");
    }
    if let Err(e) = gatehouse_vault::session_bus::remember(&home) {
        eprintln!("gatehouse: could not remember the session bus address: {e}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut config = ServerConfig::open(home.clone()).await?;
        let store = config.store.clone();
        config.port = args.port;
        config.vault = gatehouse_server::probe_keyring().await;
        // Protect from the dashboard writes this binary into wrapped entries.
        config.gatehouse_exe = std::env::current_exe()
            .ok()
            .map(|exe| std::fs::canonicalize(&exe).unwrap_or(exe));
        // The watcher protects with the same keyring and binary.
        let watch = gatehouse_server::config_watch::WatchSetup {
            gatehouse_exe: config.gatehouse_exe.clone(),
            vault: config.vault.clone(),
            ..Default::default()
        };
        let mut handle = gatehouse_server::serve(config).await?;
        lock.publish(&handle.control_info())?;
        // Self-heal: wrapped entries whose gatehouse binary is gone point here.
        if let Some(exe) = watch.gatehouse_exe.clone() {
            tokio::spawn(gatehouse_server::api::clients::repair_all(
                store.clone(),
                home.clone(),
                exe,
            ));
        }
        // Retention and the size cap of the policy in force, hourly (the
        // throttle is shared with every wrap of this database).
        tokio::spawn(gatehouse_proxy::maintenance::run_hourly(
            store.clone(),
            home.clone(),
        ));
        // The config watcher runs only here, in the one control plane.
        let _watcher = match gatehouse_server::config_watch::start(&home, store.clone(), watch) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("gatehouse: config watcher not started: {e}");
                None
            }
        };
        eprintln!(
            "gatehouse: control plane for {} listening on {}",
            home.display(),
            handle.base_url()
        );
        let page = announce(&home, &handle.signin_url(), args.open);
        if let Some(page) = page.clone() {
            // The page is worth nothing once its token expired: remove it then.
            tokio::spawn(async move {
                tokio::time::sleep(crate::browser::STALE_AFTER).await;
                let _ = std::fs::remove_file(page);
            });
        }
        let outcome = tokio::select! {
            _ = shutdown_signal() => {
                eprintln!("gatehouse: stopping");
                Ok(())
            }
            _ = handle.wait() => Err(anyhow::anyhow!("the control plane stopped unexpectedly")),
        };
        if let Some(page) = page {
            let _ = std::fs::remove_file(page);
        }
        outcome?;
        handle.shutdown().await;
        store.close().await;
        drop(lock);
        Ok(ExitCode::SUCCESS)
    })
}

/// First run writes the commented default `policy.toml` (as wrap does);
/// an invalid policy is one console line naming `file:line:column`. The
/// wraps keep running on the last good policy and record `policy_invalid`.
fn policy_notice(home: &Path) -> Option<String> {
    if let Err(e) = gatehouse_config::write_default_if_missing(home) {
        return Some(format!(
            "gatehouse: could not write the default {}: {e}",
            home.join(gatehouse_config::POLICY_FILE).display()
        ));
    }
    let err = gatehouse_config::load(home).err()?;
    let what = match err.diagnostics() {
        [] => err.to_string(),
        [first] => first.to_string(),
        [first, rest @ ..] => format!(
            "{first} (and {} more: `gatehouse policy check`)",
            rest.len()
        ),
    };
    Some(format!(
        "gatehouse: policy is invalid, the last good policy stays in force: {what}"
    ))
}

/// The OS keyring, if it answers within two seconds; else secrets are unavailable.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub fn run_dashboard(args: DashboardArgs) -> anyhow::Result<ExitCode> {
    let home = home::resolve(args.home.as_deref());
    // A leftover control.json from a crashed run must not be trusted: only
    // a process holding the lock is a running control plane.
    let info = match control::acquire(&home)? {
        Acquired::Mine(lock) => {
            drop(lock);
            bail!(
                "no control plane is running for {} (start one with `gatehouse up`)",
                home.display()
            );
        }
        Acquired::Running(info) => wait_for_running(&home, info)?,
    };
    let url = control::request_signin_url(&info)
        .context("asking the running control plane for a sign-in link")?;
    // The page outlives this process: the browser reads it after we exit;
    // the next write or `gatehouse up` sweeps it once its token expired.
    announce(&home, &url, args.open);
    Ok(ExitCode::SUCCESS)
}

/// Raises the soft limit on open files to the hard limit, so connections
/// another local user holds open run into the server's own cap
/// ([`gatehouse_server::MAX_CONNECTIONS`]) long before the process runs
/// out of descriptors for its database and files.
fn raise_fd_limit() {
    #[cfg(unix)]
    if let Err(e) = gatehouse_server::raise_nofile_limit() {
        tracing::warn!(error = %e, "could not raise the open-file limit");
    }
}

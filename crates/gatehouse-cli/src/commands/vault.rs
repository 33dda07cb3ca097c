//! `gatehouse vault set|list|rm`: server secrets in the OS keyring. Values
//! come from stdin or a hidden prompt, never from argv (argv is visible to
//! every local process).

use std::io::{BufRead, IsTerminal, Read, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use gatehouse_vault::{KeyringVault, Secret, Vault};

#[derive(clap::Subcommand)]
pub enum VaultCommand {
    /// Store a secret for a server (value from stdin or a hidden prompt).
    Set {
        /// Opaque server id (see `gatehouse clients`).
        server: String,
        /// Secret name. A protected server (one `gatehouse protect` wrapped)
        /// gets every secret stored for it as an environment variable of this
        /// name; any other server only through its policy
        /// (`env = { NAME = "vault:NAME" }`, docs/policy.md). Names a loader,
        /// interpreter or shell reads (`LD_*`, `PYTHON*`, `NODE_OPTIONS`,
        /// `PATH`, …; docs/vault.md) are refused.
        name: String,
    },
    /// List secret names (never values), for one server or all protected servers.
    List {
        /// Opaque server id.
        server: Option<String>,
        /// GATEHOUSE_HOME (to find protected servers).
        #[arg(long, value_name = "DIR")]
        home: Option<std::path::PathBuf>,
    },
    /// Remove a secret.
    Rm {
        /// Opaque server id.
        server: String,
        /// Secret name.
        name: String,
    },
}

fn read_hidden(prompt: &str) -> anyhow::Result<String> {
    let mut stderr = std::io::stderr();
    write!(stderr, "{prompt}")?;
    stderr.flush()?;
    #[cfg(unix)]
    let echo_off = std::process::Command::new("stty")
        .arg("-echo")
        .stdin(std::process::Stdio::inherit())
        .status()
        .is_ok_and(|s| s.success());
    #[cfg(not(unix))]
    let echo_off = false;
    if !echo_off {
        bail!("cannot hide typed input on this terminal; pipe the value on stdin instead");
    }
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    #[cfg(unix)]
    let _ = std::process::Command::new("stty")
        .arg("echo")
        .stdin(std::process::Stdio::inherit())
        .status();
    writeln!(stderr)?;
    read?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

pub fn run(cmd: VaultCommand) -> anyhow::Result<ExitCode> {
    let vault = KeyringVault::new();
    match cmd {
        VaultCommand::Set { server, name } => {
            // Refused names (syntax, or a reserved one such as `LD_PRELOAD`)
            // fail before the value is asked for.
            gatehouse_vault::validate_new_name(&name)?;
            let value = if std::io::stdin().is_terminal() {
                read_hidden(&format!("value for {name} of {server}: "))?
            } else {
                let mut v = String::new();
                std::io::stdin()
                    .read_to_string(&mut v)
                    .context("reading the value from stdin")?;
                v.trim_end_matches(['\r', '\n']).to_owned()
            };
            if value.is_empty() {
                bail!("empty value; nothing stored");
            }
            vault.set(&server, &name, Secret::new(value))?;
            outln!("stored {name} for {server}");
        }
        VaultCommand::List { server, home } => {
            let servers = match server {
                Some(s) => vec![s],
                None => {
                    let home = gatehouse_store::home::resolve(home.as_deref());
                    let state = gatehouse_clients::state::StateDir { home }.load()?;
                    state.servers.into_iter().map(|s| s.id).collect()
                }
            };
            for s in servers {
                for name in vault.list(&s)? {
                    outln!("{s}\t{name}");
                }
            }
        }
        VaultCommand::Rm { server, name } => {
            if !vault.delete(&server, &name)? {
                bail!("no secret {name} for {server}");
            }
            outln!("removed {name} from {server}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `gatehouse policy check|show|init`: validate, print and create `policy.toml`.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_config::{LoadedPolicy, PolicyError};

#[derive(clap::Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file (default: the effective policy in GATEHOUSE_HOME,
    /// with its bases). Exit 0 when valid, 2 with `file:line:col` errors.
    Check {
        /// A policy file to check on its own (its `base`, if any, is followed).
        file: Option<PathBuf>,
        /// Gatehouse home directory (default: $GATEHOUSE_HOME or the per-OS data dir).
        #[arg(long)]
        home: Option<PathBuf>,
    },
    /// Print the effective policy: team base and local file merged, defaults filled in.
    Show {
        /// Gatehouse home directory (default: $GATEHOUSE_HOME or the per-OS data dir).
        #[arg(long)]
        home: Option<PathBuf>,
    },
    /// Print a locked-down policy generated from what was observed: servers
    /// and their approved tools (with content hashes) as allowlists,
    /// rejected or quarantined tools as comments for review.
    Generate {
        /// Only servers seen within this age: a whole number and a unit (e.g. `7d`, `12h`).
        #[arg(long)]
        since: Option<String>,
        /// Write it to this file instead of stdout (refuses to overwrite).
        #[arg(long)]
        output: Option<PathBuf>,
        /// Gatehouse home directory (default: $GATEHOUSE_HOME or the per-OS
        /// data dir); it must hold a database.
        #[arg(long)]
        home: Option<PathBuf>,
    },
    /// Write the commented default policy.toml if there is none.
    Init {
        /// Gatehouse home directory (default: $GATEHOUSE_HOME or the per-OS data dir).
        #[arg(long)]
        home: Option<PathBuf>,
    },
}

pub fn run(cmd: PolicyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCommand::Check { file, home } => {
            let result = match &file {
                Some(path) => gatehouse_config::load_file(path, None),
                None => gatehouse_config::load(&gatehouse_store::home::resolve(home.as_deref())),
            };
            match result {
                Ok(loaded) => {
                    print_warnings(&loaded);
                    let names: Vec<&str> = loaded.sources.iter().map(|s| s.name.as_str()).collect();
                    outln!("policy ok: {}", names.join(" + "));
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Ok(report(&e)),
            }
        }
        PolicyCommand::Show { home } => {
            let home = gatehouse_store::home::resolve(home.as_deref());
            match gatehouse_config::load(&home) {
                Ok(loaded) => {
                    print_warnings(&loaded);
                    for s in &loaded.sources {
                        outln!("# source: {}", s.name);
                    }
                    out!("{}", loaded.policy.to_toml());
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Ok(report(&e)),
            }
        }
        PolicyCommand::Generate {
            since,
            output,
            home,
        } => generate(since.as_deref(), output.as_deref(), home.as_deref()),
        PolicyCommand::Init { home } => {
            let home = gatehouse_store::home::resolve(home.as_deref());
            gatehouse_store::home::ensure_private_dir(&home)?;
            let path = home.join(gatehouse_config::POLICY_FILE);
            if gatehouse_config::write_default_if_missing(&home)? {
                outln!("wrote {}", path.display());
            } else {
                outln!("{} exists; left unchanged", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn generate(
    since: Option<&str>,
    output: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    use super::store_access;
    let since_ms = since
        .map(|t| store_access::parse_age(t).map(|age| gatehouse_store::now_ms() - age))
        .transpose()?;
    let home = store_access::existing_home(home)?;
    let mac_key = store_access::mac_key(&home)?;
    let text = store_access::runtime()?.block_on(async {
        let store = store_access::open(&home).await?;
        let text = gatehouse_server::api::policy::locked_policy(&store, &mac_key, since_ms).await?;
        anyhow::Ok(text)
    })?;
    // What it generates must itself be a valid policy.
    if let Err(e) = gatehouse_config::check_text("generated policy", &text) {
        anyhow::bail!("the generated policy does not validate (a bug): {e}");
    }
    match output {
        Some(path) => {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            std::io::Write::write_all(&mut file, text.as_bytes())?;
            outln!("wrote {}", path.display());
        }
        None => out!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn print_warnings(loaded: &LoadedPolicy) {
    for w in &loaded.warnings {
        eprintln!("{w} (warning)");
    }
}

fn report(e: &PolicyError) -> ExitCode {
    match e {
        PolicyError::Invalid(diags) => {
            for d in diags {
                eprintln!("{d}");
            }
            eprintln!("policy invalid: {} error(s)", diags.len());
        }
        PolicyError::Io { .. } => eprintln!("gatehouse: error: {e}"),
    }
    ExitCode::from(2)
}

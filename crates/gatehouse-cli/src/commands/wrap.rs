//! `gatehouse wrap`: what protected client configs launch.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use gatehouse_proxy::{run_wrap, WrapOptions};
use gatehouse_vault::KeyringVault;

#[derive(clap::Args)]
pub struct WrapArgs {
    /// Opaque server id assigned by `gatehouse protect`.
    #[arg(long = "server", value_name = "ID")]
    server: String,
    /// Gatehouse's state directory (default: GATEHOUSE_HOME or the per-OS data dir).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Environment variable names the server may see (comma-separated, repeatable).
    #[arg(long = "pass-env", value_name = "NAMES", value_delimiter = ',')]
    pass_env: Vec<String>,
    /// Seconds an input request waits for an answer in the dashboard inbox
    /// before it is declined (keep it under the client's request timeout).
    #[arg(long = "inbox-timeout", value_name = "SECS", default_value_t = gatehouse_proxy::DEFAULT_INBOX_TIMEOUT.as_secs())]
    inbox_timeout: u64,
    /// The server command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(args: WrapArgs) -> anyhow::Result<ExitCode> {
    // Before any thread starts (gatehouse_proxy::memory).
    gatehouse_proxy::memory::tune_allocator();
    super::log_to_stderr();
    // Clients with a minimal environment (Claude Desktop) pass no session
    // bus address; the keyring needs one (docs/vault.md).
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let home = gatehouse_store::home::resolve(args.home.as_deref());
        let uid = std::fs::metadata("/proc/self").ok().map(|m| m.uid());
        if let Some(address) = gatehouse_vault::session_bus::locate(&home, uid) {
            std::env::set_var("DBUS_SESSION_BUS_ADDRESS", address);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let options = WrapOptions {
        server_id: args.server,
        home: args.home,
        pass_env: args
            .pass_env
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect(),
        argv: args.command,
        vault: Some(Arc::new(KeyringVault::new())),
        inbox_timeout: std::time::Duration::from_secs(args.inbox_timeout.max(1)),
    };
    let code = runtime.block_on(run_wrap(options))?;
    // Exit right away: the child's code is ours.
    std::process::exit(code)
}

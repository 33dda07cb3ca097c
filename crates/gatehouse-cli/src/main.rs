//! The `gatehouse` command: one subcommand per module under `commands/`.
//!
//! Exit codes everywhere: 0 ok, 1 findings or blocks where that applies, 2 errors.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod browser;
mod commands;

#[derive(Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "Guards AI clients against malicious MCP servers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const WRAP_ABOUT: &str =
    "Run an MCP server behind Gatehouse (what protected client configs launch)";

/// `gatehouse wrap` runs at every MCP server launch: it parses only its own
/// arguments, without building the whole command tree (0.9 ms of its cold
/// start, issue 2); help, errors and `--version` read the same.
fn parse() -> Cli {
    #[derive(Parser)]
    #[command(name = "gatehouse", version)]
    struct WrapOnly {
        #[command(subcommand)]
        command: WrapCommand,
    }
    #[derive(Subcommand)]
    enum WrapCommand {
        #[command(about = WRAP_ABOUT)]
        Wrap(commands::wrap::WrapArgs),
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "wrap") {
        let WrapCommand::Wrap(args) = WrapOnly::parse().command;
        return Cli {
            command: Command::Wrap(args),
        };
    }
    Cli::parse()
}

#[derive(Subcommand)]
enum Command {
    #[command(about = WRAP_ABOUT)]
    Wrap(commands::wrap::WrapArgs),
    /// Recorded decisions and observations.
    Events(commands::events::EventsArgs),
    /// Tool calls and their verdicts.
    Calls(commands::events::CallsArgs),
    /// Known servers and their identities.
    Servers(commands::inventory::ServersArgs),
    /// Known tools and their pin state.
    Tools(commands::inventory::ToolsArgs),
    /// Inspect, trust and reset tool pins.
    #[command(subcommand)]
    Pins(commands::pins::PinsCommand),
    /// Scan tool definitions and results for hidden instructions.
    Scan(commands::scan::ScanArgs),
    /// Check, show and generate policy.
    #[command(subcommand)]
    Policy(commands::policy::PolicyCommand),
    /// Detected AI clients and their MCP servers (exit 2 when a config file
    /// cannot be read or parsed).
    Clients(commands::clients::ClientsArgs),
    /// Wrap AI clients' MCP servers with Gatehouse.
    Protect(commands::clients::ProtectArgs),
    /// Restore AI clients' MCP configs.
    Unprotect(commands::clients::UnprotectArgs),
    /// Pause protection: every wrapped server records but blocks nothing, until it ends by itself.
    Pause(commands::protection::PauseArgs),
    /// End a pause now.
    Resume(commands::protection::ResumeArgs),
    /// Server secrets in the OS keyring.
    #[command(subcommand)]
    Vault(commands::vault::VaultCommand),
    /// Start the control plane (API and dashboard).
    Up(commands::up::UpArgs),
    /// Print a fresh sign-in URL for the running control plane.
    Dashboard(commands::up::DashboardArgs),
}

fn main() -> ExitCode {
    let cli = parse();
    let result = match cli.command {
        Command::Wrap(args) => commands::wrap::run(args),
        Command::Events(args) => commands::events::run_events(args),
        Command::Calls(args) => commands::events::run_calls(args),
        Command::Servers(args) => commands::inventory::run_servers(args),
        Command::Tools(args) => commands::inventory::run_tools(args),
        Command::Pins(cmd) => commands::pins::run(cmd),
        Command::Scan(args) => commands::scan::run(args),
        Command::Policy(cmd) => commands::policy::run(cmd),
        Command::Clients(args) => commands::clients::run_clients(args),
        Command::Protect(args) => commands::clients::run_protect(args),
        Command::Unprotect(args) => commands::clients::run_unprotect(args),
        Command::Pause(args) => commands::protection::run_pause(args),
        Command::Resume(args) => commands::protection::run_resume(args),
        Command::Vault(cmd) => commands::vault::run(cmd),
        Command::Up(args) => commands::up::run_up(args),
        Command::Dashboard(args) => commands::up::run_dashboard(args),
    };
    match result {
        Ok(code) => code,
        // A reader that went away (`| head`) is not an error to report.
        Err(err) if commands::is_broken_pipe(&err) => ExitCode::from(commands::BROKEN_PIPE_EXIT),
        Err(err) => {
            eprintln!("gatehouse: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

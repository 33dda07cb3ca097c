use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum PolicyCommand {
    /// Not implemented yet.
    Todo,
}

pub fn run(_cmd: PolicyCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum VaultCommand {
    /// Not implemented yet.
    Todo,
}

pub fn run(_cmd: VaultCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

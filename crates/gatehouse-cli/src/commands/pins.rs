use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum PinsCommand {
    /// Not implemented yet.
    Todo,
}

pub fn run(_cmd: PinsCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

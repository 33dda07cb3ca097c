use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ServersArgs {}

pub fn run_servers(_args: ServersArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args)]
pub struct ToolsArgs {}

pub fn run_tools(_args: ToolsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

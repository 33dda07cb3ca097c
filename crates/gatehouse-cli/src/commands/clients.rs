use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ClientsArgs {}

pub fn run_clients(_args: ClientsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args)]
pub struct ProtectArgs {}

pub fn run_protect(_args: ProtectArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args)]
pub struct UnprotectArgs {}

pub fn run_unprotect(_args: UnprotectArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

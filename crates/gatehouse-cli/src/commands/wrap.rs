use std::process::ExitCode;

#[derive(clap::Args)]
pub struct WrapArgs {}

pub fn run(_args: WrapArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

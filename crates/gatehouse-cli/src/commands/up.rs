use std::process::ExitCode;

#[derive(clap::Args)]
pub struct UpArgs {}

pub fn run_up(_args: UpArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args)]
pub struct DashboardArgs {}

pub fn run_dashboard(_args: DashboardArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

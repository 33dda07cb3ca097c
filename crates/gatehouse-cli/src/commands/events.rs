use std::process::ExitCode;

#[derive(clap::Args)]
pub struct EventsArgs {}

pub fn run_events(_args: EventsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args)]
pub struct CallsArgs {}

pub fn run_calls(_args: CallsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}

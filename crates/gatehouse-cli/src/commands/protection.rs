//! `gatehouse pause [--for 1h]`, `gatehouse resume`: the global pause every
//! wrapped server follows within a quarter second (audit only: decisions
//! are recorded, nothing is blocked). The pause ends by itself.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use gatehouse_server::protection::{self, ProtectionState};

use super::store_access::{format_time, home_dir, mac_key, open, parse_age, runtime};

#[derive(Args)]
pub struct PauseArgs {
    /// How long, e.g. 30s, 15m, 1h, 4h (1s to 24h).
    #[arg(long = "for", default_value = "1h")]
    duration: String,
    #[arg(long)]
    home: Option<PathBuf>,
}

#[derive(Args)]
pub struct ResumeArgs {
    #[arg(long)]
    home: Option<PathBuf>,
}

pub fn run_pause(args: PauseArgs) -> anyhow::Result<ExitCode> {
    // Exactly as long as asked (the deadline is stored in ms); the range
    // (1 s to 24 h) is checked by `protection::pause_for`.
    let ms = parse_age(&args.duration)?;
    let home = home_dir(args.home.as_deref());
    let key = mac_key(&home)?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let now = gatehouse_store::now_ms();
        let pause = protection::pause_for(&store, &key, ms, now, "gatehouse pause").await?;
        outln!(
            "protection paused until {} (audit only: decisions are recorded, nothing is blocked); `gatehouse resume` ends it sooner",
            format_time(pause.until_ms)
        );
        Ok(ExitCode::SUCCESS)
    })
}

pub fn run_resume(args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let home = home_dir(args.home.as_deref());
    let key = mac_key(&home)?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let now = gatehouse_store::now_ms();
        let was_paused = matches!(
            protection::state(&store, &key, now).await?,
            ProtectionState::Paused { .. }
        );
        protection::resume(&store, now, "gatehouse resume").await?;
        outln!(
            "{}",
            if was_paused {
                "protection resumed"
            } else {
                "protection was not paused"
            }
        );
        Ok(ExitCode::SUCCESS)
    })
}

//! `gatehouse servers` and `gatehouse tools`.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::events::printable;
use super::store_access::{format_time, home_dir, mac_key, open, runtime, JSON_VERSION};

#[derive(clap::Args)]
pub struct ServersArgs {
    #[arg(long)]
    json: bool,
    #[arg(long)]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ToolsArgs {
    /// Only this server id.
    #[arg(long)]
    pub server: Option<String>,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub home: Option<PathBuf>,
}

pub fn run_servers(args: ServersArgs) -> anyhow::Result<ExitCode> {
    let home = home_dir(args.home.as_deref());
    let servers =
        runtime()?.block_on(async { anyhow::Ok(open(&home).await?.list_servers().await?) })?;
    if args.json {
        for s in &servers {
            outln!(
                "{}",
                json!({
                    "v": JSON_VERSION, "id": s.id, "name": s.display_name, "client": s.client,
                    "config_path": s.config_path, "scope": s.scope, "entry": s.entry_name,
                    "command_hash": s.command_hash, "first_seen_ms": s.first_seen_ms, "last_seen_ms": s.last_seen_ms,
                    "origin": format!("{:?}", s.origin).to_lowercase(),
                })
            );
        }
    } else if servers.is_empty() {
        outln!("No servers seen yet. Protect a client with `gatehouse protect`.");
    } else {
        outln!(
            "{:<24} {:<20} {:<14} {:<21} COMMAND HASH",
            "ID",
            "NAME",
            "CLIENT",
            "LAST SEEN"
        );
        for s in &servers {
            outln!(
                "{:<24} {:<20} {:<14} {:<21} {}",
                s.id,
                printable(s.display_name.as_deref().unwrap_or("-")),
                s.client.as_deref().unwrap_or("-"),
                format_time(s.last_seen_ms),
                &s.command_hash[..s.command_hash.len().min(19)]
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_tools(args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let home = home_dir(args.home.as_deref());
    let key = mac_key(&home)?;
    let pins =
        runtime()?.block_on(async { anyhow::Ok(open(&home).await?.all_pins(&key).await?) })?;
    let pins: Vec<_> = pins
        .into_iter()
        .filter(|p| args.server.as_deref().is_none_or(|s| s == p.server_id))
        .collect();
    if args.json {
        for p in &pins {
            outln!(
                "{}",
                json!({
                    "v": JSON_VERSION, "server": p.server_id, "tool": p.tool, "state": p.state.as_str(),
                    "approved_hash": p.approved_hash, "pending_hash": p.pending_hash, "mac_valid": p.mac_valid,
                })
            );
        }
    } else if pins.is_empty() {
        outln!("No tools seen yet.");
    } else {
        outln!("{:<24} {:<28} {:<12} HASH", "SERVER", "TOOL", "STATE");
        for p in &pins {
            let hash = p
                .pending_hash
                .as_deref()
                .or(p.approved_hash.as_deref())
                .unwrap_or("-");
            let state = if p.mac_valid {
                p.state.as_str()
            } else {
                "bad-mac"
            };
            outln!(
                "{:<24} {:<28} {:<12} {}",
                p.server_id,
                printable(&p.tool),
                state,
                hash
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `gatehouse servers` and `gatehouse tools`.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::events::{cell, SERVER_WIDTH, TOOL_WIDTH};
use super::store_access::{existing_home, format_time, mac_key, open, runtime, JSON_VERSION};

#[derive(clap::Args)]
pub struct ServersArgs {
    /// One JSON object per line (shape version `v`).
    #[arg(long)]
    json: bool,
    /// Gatehouse home to read (default: $GATEHOUSE_HOME, then the OS data
    /// directory); it must hold a database.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ToolsArgs {
    /// Only this server id (see `gatehouse servers`).
    #[arg(long, value_name = "ID")]
    pub server: Option<String>,
    /// One JSON object per line (shape version `v`).
    #[arg(long)]
    pub json: bool,
    /// Gatehouse home to read (default: $GATEHOUSE_HOME, then the OS data
    /// directory); it must hold a database.
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

/// Column widths of `gatehouse servers`, in characters.
const NAME_WIDTH: usize = 20;
const CLIENT_WIDTH: usize = 14;

pub fn run_servers(args: ServersArgs) -> anyhow::Result<ExitCode> {
    let home = existing_home(args.home.as_deref())?;
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
            "{} {} {} {:<21} COMMAND HASH",
            cell("ID", SERVER_WIDTH),
            cell("NAME", NAME_WIDTH),
            cell("CLIENT", CLIENT_WIDTH),
            "LAST SEEN"
        );
        for s in &servers {
            outln!(
                "{} {} {} {:<21} {}",
                cell(&s.id, SERVER_WIDTH),
                cell(s.display_name.as_deref().unwrap_or("-"), NAME_WIDTH),
                cell(s.client.as_deref().unwrap_or("-"), CLIENT_WIDTH),
                format_time(s.last_seen_ms),
                &s.command_hash[..s.command_hash.len().min(19)]
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_tools(args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let home = existing_home(args.home.as_deref())?;
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
        outln!(
            "{} {} {:<12} HASH",
            cell("SERVER", SERVER_WIDTH),
            cell("TOOL", TOOL_WIDTH),
            "STATE"
        );
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
                "{} {} {:<12} {}",
                cell(&p.server_id, SERVER_WIDTH),
                cell(&p.tool, TOOL_WIDTH),
                state,
                hash
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

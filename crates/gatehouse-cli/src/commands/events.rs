//! `gatehouse events` and `gatehouse calls`: recorded decisions.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_store::{Action, Event, EventFilter, Severity};
use serde_json::json;

use super::store_access::{format_time, home_dir, open, parse_age, runtime, JSON_VERSION};

#[derive(clap::Args)]
pub struct EventsArgs {
    /// Only this server id.
    #[arg(long)]
    server: Option<String>,
    /// Only this event type (e.g. mcp_tool_call_intercepted).
    #[arg(long = "type")]
    event_type: Option<String>,
    /// Only this severity or worse (info, low, medium, high, critical).
    #[arg(long)]
    severity: Option<String>,
    /// Only this action (allow, audit, alert, block, hold).
    #[arg(long)]
    action: Option<String>,
    /// Only events newer than this (30s, 15m, 1h, 7d).
    #[arg(long)]
    since: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// One JSON object per line (shape version `v`).
    #[arg(long)]
    json: bool,
    #[arg(long)]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct CallsArgs {
    /// Only calls with this action (allow, audit, block).
    #[arg(long)]
    action: Option<String>,
    #[arg(long)]
    server: Option<String>,
    #[arg(long)]
    since: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    home: Option<PathBuf>,
}

pub fn run_events(args: EventsArgs) -> anyhow::Result<ExitCode> {
    let filter = EventFilter {
        server_id: args.server,
        event_type: args.event_type,
        min_severity: args.severity.as_deref().map(parse_severity).transpose()?,
        action: args.action.as_deref().map(parse_action).transpose()?,
        since_ms: since(args.since.as_deref())?,
        limit: args.limit,
        ..EventFilter::default()
    };
    let events = query(args.home, &filter)?;
    print_events(&events, args.json);
    Ok(ExitCode::SUCCESS)
}

/// Calls are the call events: allowed, audited and intercepted calls.
pub fn run_calls(args: CallsArgs) -> anyhow::Result<ExitCode> {
    let action = args.action.as_deref().map(parse_action).transpose()?;
    let mut filter = EventFilter {
        server_id: args.server,
        action,
        since_ms: since(args.since.as_deref())?,
        limit: args.limit,
        ..EventFilter::default()
    };
    let mut events = Vec::new();
    for kind in [
        "mcp_tool_called",
        "mcp_tool_call_intercepted",
        "mcp_cross_server_blocked",
    ] {
        filter.event_type = Some(kind.to_string());
        events.extend(query(args.home.clone(), &filter)?);
    }
    events.sort_by_key(|e| std::cmp::Reverse(e.id));
    events.truncate(args.limit as usize);
    print_events(&events, args.json);
    let blocked = events.iter().any(|e| e.action == Action::Block);
    Ok(if blocked && action == Some(Action::Block) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn since(text: Option<&str>) -> anyhow::Result<Option<i64>> {
    Ok(match text {
        Some(t) => Some(gatehouse_store::now_ms() - parse_age(t)?),
        None => None,
    })
}

fn parse_severity(text: &str) -> anyhow::Result<Severity> {
    Severity::parse(text).ok_or_else(|| {
        anyhow::anyhow!("unknown severity {text:?} (info, low, medium, high, critical)")
    })
}

fn parse_action(text: &str) -> anyhow::Result<Action> {
    Action::parse(text).ok_or_else(|| {
        anyhow::anyhow!("unknown action {text:?} (allow, audit, alert, block, hold)")
    })
}

fn query(home: Option<PathBuf>, filter: &EventFilter) -> anyhow::Result<Vec<Event>> {
    let home = home_dir(home.as_deref());
    runtime()?.block_on(async {
        let store = open(&home).await?;
        Ok(store.query_events(filter).await?)
    })
}

fn print_events(events: &[Event], as_json: bool) {
    if as_json {
        for e in events {
            let evidence: serde_json::Value = e
                .evidence_json
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(serde_json::Value::Null);
            outln!(
                "{}",
                json!({
                    "v": JSON_VERSION,
                    "id": e.id,
                    "time_ms": e.time_ms,
                    "last_time_ms": e.last_time_ms,
                    "type": e.event_type,
                    "server": e.server_id,
                    "tool": e.tool,
                    "action": e.action.as_str(),
                    "rule": e.rule,
                    "severity": e.severity.as_str(),
                    "reason": e.reason,
                    "evidence": evidence,
                    "session": e.session,
                    "count": e.count,
                })
            );
        }
        return;
    }
    if events.is_empty() {
        outln!("No events recorded yet.");
        return;
    }
    outln!(
        "{:<21} {:<28} {:<8} {:<8} {:<16} {:<16} REASON",
        "TIME",
        "TYPE",
        "ACTION",
        "SEVERITY",
        "SERVER",
        "TOOL"
    );
    for e in events {
        let count = if e.count > 1 {
            format!(" (x{})", e.count)
        } else {
            String::new()
        };
        outln!(
            "{:<21} {:<28} {:<8} {:<8} {:<16} {:<16} {}{}",
            format_time(e.time_ms),
            e.event_type,
            e.action.as_str(),
            e.severity.as_str(),
            e.server_id.as_deref().unwrap_or("-"),
            e.tool.as_deref().unwrap_or("-"),
            printable(&e.reason),
            count
        );
    }
}

/// Server-supplied text made safe for a terminal: control characters shown.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                format!("<U+{:04X}>", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

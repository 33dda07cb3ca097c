//! `gatehouse events` and `gatehouse calls`: recorded decisions.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_store::{Action, Event, EventFilter, Severity};
use serde_json::json;

use super::store_access::{existing_home, format_time, open, parse_age, runtime, JSON_VERSION};

#[derive(clap::Args)]
pub struct EventsArgs {
    /// Only this server id (see `gatehouse servers`).
    #[arg(long, value_name = "ID")]
    server: Option<String>,
    /// Only this event type (e.g. mcp_tool_call_intercepted).
    #[arg(long = "type", value_name = "TYPE")]
    event_type: Option<String>,
    /// Only this severity or worse (info, low, medium, high, critical).
    #[arg(long)]
    severity: Option<String>,
    /// Only this action (allow, audit, alert, block, hold).
    #[arg(long)]
    action: Option<String>,
    /// Only events newer than this: a whole number and a unit (30s, 15m, 1h, 7d).
    #[arg(long, value_name = "AGE")]
    since: Option<String>,
    /// At most this many, newest first (1 to 10000).
    #[arg(long, default_value_t = 100, value_parser = limit())]
    limit: u32,
    /// One JSON object per line (shape version `v`).
    #[arg(long)]
    json: bool,
    /// Gatehouse home to read (default: $GATEHOUSE_HOME, then the OS data
    /// directory); it must hold a database.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct CallsArgs {
    /// Only calls with this action (allow, audit, block); exit 1 when
    /// `block` finds any.
    #[arg(long)]
    action: Option<String>,
    /// Only calls to this server id (see `gatehouse servers`).
    #[arg(long, value_name = "ID")]
    server: Option<String>,
    /// Only calls newer than this: a whole number and a unit (30s, 15m, 1h, 7d).
    #[arg(long, value_name = "AGE")]
    since: Option<String>,
    /// At most this many, newest first (1 to 10000).
    #[arg(long, default_value_t = 100, value_parser = limit())]
    limit: u32,
    /// One JSON object per line (shape version `v`).
    #[arg(long)]
    json: bool,
    /// Gatehouse home to read (default: $GATEHOUSE_HOME, then the OS data
    /// directory); it must hold a database.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
}

/// The event types `gatehouse calls` lists.
const CALL_TYPES: [&str; 3] = [
    "mcp_tool_called",
    "mcp_tool_call_intercepted",
    "mcp_cross_server_blocked",
];

/// `--limit`: at least one row (`0` is an error, not an empty listing), at
/// most what one query returns.
fn limit() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(EventFilter::MAX_LIMIT))
}

/// The filters given, as typed: `--type x`, `--since 1h`.
fn given(filters: &[(&str, &Option<String>)]) -> Vec<String> {
    filters
        .iter()
        .filter_map(|(flag, value)| value.as_ref().map(|v| format!("{flag} {v}")))
        .collect()
}

pub fn run_events(args: EventsArgs) -> anyhow::Result<ExitCode> {
    let filters = given(&[
        ("--server", &args.server),
        ("--type", &args.event_type),
        ("--severity", &args.severity),
        ("--action", &args.action),
        ("--since", &args.since),
    ]);
    let filter = EventFilter {
        server_id: args.server,
        event_type: args.event_type,
        min_severity: args.severity.as_deref().map(parse_severity).transpose()?,
        action: args.action.as_deref().map(parse_action).transpose()?,
        since_ms: since(args.since.as_deref())?,
        limit: args.limit,
        ..EventFilter::default()
    };
    let home = existing_home(args.home.as_deref())?;
    runtime()?.block_on(async {
        let store = open(&home).await?;
        let events = store.query_events(&filter).await?;
        if !events.is_empty() || args.json {
            print_events(&events, args.json);
        } else if filters.is_empty() || store.latest_event_id().await? == 0 {
            outln!("No events recorded yet.");
        } else {
            outln!("No events match the filters ({}).", filters.join(", "));
            let recorded = store.recorded_event_types().await?;
            if let Some(t) = &filter.event_type {
                if !recorded.contains(t) {
                    outln!("Recorded event types: {}", recorded.join(", "));
                }
            }
        }
        Ok(blocks_found(&events, filter.action))
    })
}

/// Exit 1 when `--action block` found blocks (as `grep` finds lines), else 0.
fn blocks_found(events: &[gatehouse_store::Event], asked: Option<Action>) -> ExitCode {
    let blocked = events.iter().any(|e| e.action == Action::Block);
    if blocked && asked == Some(Action::Block) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Calls are the call events: allowed, audited and intercepted calls.
pub fn run_calls(args: CallsArgs) -> anyhow::Result<ExitCode> {
    let filters = given(&[
        ("--action", &args.action),
        ("--server", &args.server),
        ("--since", &args.since),
    ]);
    let action = args.action.as_deref().map(parse_action).transpose()?;
    let mut filter = EventFilter {
        server_id: args.server,
        action,
        since_ms: since(args.since.as_deref())?,
        limit: args.limit,
        ..EventFilter::default()
    };
    let home = existing_home(args.home.as_deref())?;
    let events = runtime()?.block_on(async {
        let store = open(&home).await?;
        let mut events = Vec::new();
        for kind in CALL_TYPES {
            filter.event_type = Some(kind.to_string());
            events.extend(store.query_events(&filter).await?);
        }
        events.sort_by_key(|e| std::cmp::Reverse(e.id));
        events.truncate(args.limit as usize);
        if events.is_empty() && !args.json {
            let mut any = false;
            for kind in CALL_TYPES {
                let probe = EventFilter {
                    event_type: Some(kind.to_string()),
                    limit: 1,
                    ..EventFilter::default()
                };
                any |= !store.query_events(&probe).await?.is_empty();
            }
            if filters.is_empty() || !any {
                outln!("No calls recorded yet.");
            } else {
                outln!("No calls match the filters ({}).", filters.join(", "));
            }
        }
        anyhow::Ok(events)
    })?;
    if !events.is_empty() || args.json {
        print_events(&events, args.json);
    }
    Ok(blocks_found(&events, action))
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
    outln!(
        "{:<21} {} {:<8} {:<8} {} {} REASON",
        "TIME",
        cell("TYPE", TYPE_WIDTH),
        "ACTION",
        "SEVERITY",
        cell("SERVER", SERVER_WIDTH),
        cell("TOOL", TOOL_WIDTH),
    );
    for e in events {
        let count = if e.count > 1 {
            format!(" (x{})", e.count)
        } else {
            String::new()
        };
        outln!(
            "{:<21} {} {:<8} {:<8} {} {} {}{}",
            format_time(e.time_ms),
            cell(&e.event_type, TYPE_WIDTH),
            e.action.as_str(),
            e.severity.as_str(),
            cell(e.server_id.as_deref().unwrap_or("-"), SERVER_WIDTH),
            cell(e.tool.as_deref().unwrap_or("-"), TOOL_WIDTH),
            printable(&e.reason),
            count
        );
    }
}

/// Table widths, in characters (protect's server ids are `srv_` and 16 hex
/// digits; ids chosen by hand get room to spare).
const TYPE_WIDTH: usize = 28;
pub const SERVER_WIDTH: usize = 24;
pub const TOOL_WIDTH: usize = 28;

/// Server-supplied text as a table cell exactly `width` characters wide:
/// made printable, cut with `…` when longer, padded when shorter. Widths
/// count characters, so a double-width glyph (CJK, most emoji) still shifts
/// its row by a column; `--json` has every value whole.
pub fn cell(text: &str, width: usize) -> String {
    let text = printable(text);
    if text.chars().count() <= width {
        return format!("{text:<width$}");
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
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

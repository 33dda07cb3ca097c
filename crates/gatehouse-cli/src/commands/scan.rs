//! `gatehouse scan`: run the scanner offline over tool definitions or tool
//! results, or live against a server started over stdio. One verdict per
//! item; exit 0 clean, 1 high/critical findings, 2 errors (a CI gate).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gatehouse_scanner::{ListedKind, Report, Scanner, ScannerConfig};
use serde_json::{json, Value};

use super::store_access::JSON_VERSION;

#[derive(clap::Args)]
pub struct ScanArgs {
    /// Tool definitions to scan: a JSON array, JSON lines, or a tools/list
    /// result (`-` reads stdin).
    #[arg(long, value_name = "FILE|-", conflicts_with_all = ["results", "command"])]
    tools: Option<PathBuf>,
    /// Tool results to scan: CallToolResult objects or plain JSON strings,
    /// as a JSON array or JSON lines (`-` reads stdin).
    #[arg(long, value_name = "FILE|-", conflicts_with = "command")]
    results: Option<PathBuf>,
    /// One JSON object per verdict, one per line (shape version `v`).
    #[arg(long)]
    json: bool,
    /// Seconds to wait for each answer from a live server.
    #[arg(long, default_value_t = 20, value_name = "SECS")]
    timeout: u64,
    /// Server command to start over stdio and inspect (after `--`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(args: ScanArgs) -> anyhow::Result<ExitCode> {
    let scanner = Scanner::new(ScannerConfig {
        fingerprint_key: fingerprint_key(),
        ..Default::default()
    })?;
    let verdicts = if let Some(path) = &args.tools {
        let items = tool_items(read_items(path)?).with_context(|| path.display().to_string())?;
        scan_tools(&scanner, &items)
    } else if let Some(path) = &args.results {
        scan_results(&scanner, &read_items(path)?)
    } else if !args.command.is_empty() {
        scan_live(
            &scanner,
            &args.command,
            Duration::from_secs(args.timeout.max(1)),
        )?
    } else {
        bail!("nothing to scan: give --tools FILE, --results FILE or -- CMD [ARGS...]");
    };
    let mut out = std::io::stdout().lock();
    let mut flagged = false;
    for v in &verdicts {
        flagged |= v.report.is_flagged();
        if args.json {
            writeln!(out, "{}", v.to_json())?;
        } else {
            write_human(&mut out, v)?;
        }
    }
    if !args.json {
        let n = verdicts.iter().filter(|v| v.report.is_flagged()).count();
        writeln!(
            out,
            "{} item(s) scanned, {n} flagged (high or critical)",
            verdicts.len()
        )?;
    }
    Ok(if flagged {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Fingerprints only need to be stable within one run of the CLI; a per-run
/// key from process data keeps them from being a global dictionary.
fn fingerprint_key() -> Vec<u8> {
    let mut key = std::process::id().to_le_bytes().to_vec();
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        key.extend_from_slice(&t.as_nanos().to_le_bytes());
    }
    key
}

struct Verdict {
    kind: &'static str,
    index: usize,
    id: Option<String>,
    report: Report,
}

impl Verdict {
    fn to_json(&self) -> Value {
        json!({
            "v": JSON_VERSION,
            "kind": self.kind,
            "index": self.index,
            "id": self.id,
            "max_severity": self.report.max_severity().map(|s| s.as_str()),
            "flagged": self.report.is_flagged(),
            "findings": self.report.findings.iter().map(|f| json!({
                "rule_id": f.rule_id,
                "family": f.family.as_str(),
                "severity": f.severity.as_str(),
                "path": f.path,
                "context": f.context,
            })).collect::<Vec<_>>(),
        })
    }
}

fn write_human(out: &mut impl Write, v: &Verdict) -> std::io::Result<()> {
    let label = v.id.clone().unwrap_or_else(|| format!("#{}", v.index));
    match v.report.max_severity() {
        None => writeln!(out, "{} {label}: clean", v.kind),
        Some(max) => {
            let mark = if v.report.is_flagged() {
                "FLAGGED"
            } else {
                "note"
            };
            writeln!(out, "{} {label}: {mark} (max {max})", v.kind)?;
            for f in &v.report.findings {
                writeln!(
                    out,
                    "    [{}] {} ({}) at {}: {}",
                    f.severity, f.rule_id, f.family, f.path, f.context
                )?;
            }
            Ok(())
        }
    }
}

fn read_source(path: &PathBuf) -> anyhow::Result<String> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading stdin")?;
    } else {
        text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(text)
}

/// A JSON array, JSON lines, or a single object; errors name the input.
fn read_items(path: &PathBuf) -> anyhow::Result<Vec<Value>> {
    let text = read_source(path)?;
    parse_items(&text).with_context(|| {
        if path.as_os_str() == "-" {
            "stdin".to_string()
        } else {
            path.display().to_string()
        }
    })
}

fn parse_items(text: &str) -> anyhow::Result<Vec<Value>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(trimmed).context("input is not a JSON array")?;
        return Ok(v.as_array().cloned().unwrap_or_default());
    }
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("line {} is not JSON", n + 1))?;
        items.push(v);
    }
    // A single pretty-printed object spans many lines: accept it whole.
    if items.is_empty() && !trimmed.is_empty() {
        items.push(serde_json::from_str(trimmed).context("input is not JSON")?);
    }
    Ok(items)
}

fn item_id(v: &Value) -> Option<String> {
    v.get("id").and_then(|i| {
        i.as_str()
            .map(str::to_string)
            .or_else(|| i.as_i64().map(|n| n.to_string()))
    })
}

/// `--tools` items are objects (a definition, a `tools/list` result, a
/// JSON-RPC response or a labelled record): a string or a number is no tool
/// and must not be reported clean.
fn tool_items(items: Vec<Value>) -> anyhow::Result<Vec<Value>> {
    if let Some(n) = items.iter().position(|v| !v.is_object()) {
        bail!(
            "item #{n} is not a JSON object: --tools takes tool definitions, \
             tools/list results or JSON-RPC responses"
        );
    }
    Ok(items)
}

fn scan_tools(scanner: &Scanner, items: &[Value]) -> Vec<Verdict> {
    let mut tools: Vec<(Option<String>, &Value)> = Vec::new();
    for item in items {
        if let Some(list) = item.get("tools").and_then(Value::as_array) {
            tools.extend(
                list.iter()
                    .map(|t| (t.get("name").and_then(Value::as_str).map(str::to_string), t)),
            );
        } else if let Some(list) = item
            .get("result")
            .and_then(|r| r.get("tools"))
            .and_then(Value::as_array)
        {
            tools.extend(
                list.iter()
                    .map(|t| (t.get("name").and_then(Value::as_str).map(str::to_string), t)),
            );
        } else if let Some(tool) = item.get("tool").filter(|t| t.is_object()) {
            // A labelled record (`{"id": ..., "tool": {...}}`).
            tools.push((item_id(item), tool));
        } else {
            tools.push((
                item.get("name").and_then(Value::as_str).map(str::to_string),
                item,
            ));
        }
    }
    tools
        .into_iter()
        .enumerate()
        .map(|(index, (id, tool))| Verdict {
            kind: "tool",
            index,
            id,
            report: scanner.scan_tool(tool),
        })
        .collect()
}

fn scan_results(scanner: &Scanner, items: &[Value]) -> Vec<Verdict> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let (id, report) = match item {
                Value::String(s) => (None, scanner.scan_text("text", s)),
                Value::Object(m)
                    if m.contains_key("content") || m.contains_key("structuredContent") =>
                {
                    (item_id(item), scanner.scan_result("tools/call", item))
                }
                Value::Object(m) if m.get("result").is_some_and(|r| r.get("content").is_some()) => {
                    (
                        item_id(item),
                        scanner.scan_result("tools/call", &item["result"]),
                    )
                }
                Value::Object(m) if m.get("text").is_some_and(Value::is_string) => (
                    item_id(item),
                    scanner.scan_text("text", m["text"].as_str().unwrap_or_default()),
                ),
                other => (item_id(other), scanner.scan_result("tools/call", other)),
            };
            Verdict {
                kind: "result",
                index,
                id,
                report,
            }
        })
        .collect()
}

/// A server started over stdio with newline-delimited JSON-RPC.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    timeout: Duration,
    next_id: i64,
}

impl Peer {
    fn start(command: &[String], timeout: Duration) -> anyhow::Result<Peer> {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {:?}", command[0]))?;
        let stdin = child.stdin.take().context("server stdin")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Peer {
            child,
            stdin,
            lines,
            timeout,
            next_id: 1,
        })
    }

    fn send(&mut self, msg: &Value) -> anyhow::Result<()> {
        writeln!(self.stdin, "{msg}").context("writing to the server")?;
        self.stdin.flush().context("writing to the server")
    }

    fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(l) => l,
                Err(RecvTimeoutError::Timeout) => {
                    bail!("{method}: no answer within {:?}", self.timeout)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("{method}: the server closed its output")
                }
            };
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if msg.get("method").is_some() {
                // A request from the server: we support none of them.
                if let Some(rid) = msg.get("id") {
                    let err = json!({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not supported by gatehouse scan"}});
                    self.send(&err)?;
                }
                continue;
            }
            if msg.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(err) = msg.get("error") {
                bail!(
                    "{method} failed: {}",
                    err.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                );
            }
            return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// All pages of a list method.
    fn list_all(&mut self, method: &str, field: &str) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let result = self.request(method, params)?;
            items.extend(
                result
                    .get(field)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            );
            cursor = result
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(items)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scan_live(
    scanner: &Scanner,
    command: &[String],
    timeout: Duration,
) -> anyhow::Result<Vec<Verdict>> {
    let mut peer = Peer::start(command, timeout)?;
    let init = peer.request(
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "gatehouse-scan", "version": env!("CARGO_PKG_VERSION")},
        }),
    )?;
    peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    let mut verdicts = Vec::new();
    if let Some(text) = init.get("instructions").and_then(Value::as_str) {
        verdicts.push(Verdict {
            kind: "instructions",
            index: 0,
            id: None,
            report: scanner.scan_instructions(text),
        });
    }
    let caps = init.get("capabilities").cloned().unwrap_or(Value::Null);
    if caps.get("tools").is_some() {
        let tools = peer.list_all("tools/list", "tools")?;
        verdicts.extend(scan_tools(scanner, &[json!({ "tools": tools })]));
    }
    if caps.get("prompts").is_some() {
        for (index, p) in peer.list_all("prompts/list", "prompts")?.iter().enumerate() {
            let id = p.get("name").and_then(Value::as_str).map(str::to_string);
            verdicts.push(Verdict {
                kind: "prompt",
                index,
                id,
                report: scanner.scan_listed(ListedKind::Prompt, p),
            });
        }
    }
    if caps.get("resources").is_some() {
        for (index, r) in peer
            .list_all("resources/list", "resources")?
            .iter()
            .enumerate()
        {
            let id = r.get("uri").and_then(Value::as_str).map(str::to_string);
            verdicts.push(Verdict {
                kind: "resource",
                index,
                id,
                report: scanner.scan_listed(ListedKind::Resource, r),
            });
        }
    }
    drop(peer);
    Ok(verdicts)
}

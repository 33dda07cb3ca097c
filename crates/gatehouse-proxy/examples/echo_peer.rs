//! A tiny MCP server for the wrap benchmark (`benches/wrap.rs`): newline-
//! delimited JSON-RPC on stdio; answers `initialize`, `tools/list` (one tool,
//! `echo` or the name given as its argument), `tools/call` (returns
//! `arguments.payload` as text content) and
//! `ping`; ignores notifications. No scanning, no allocation beyond
//! serde_json, so the benchmark's direct run measures the pipe and the peer.

use std::io::{BufRead, BufWriter, Write};

use serde_json::{json, Value};

fn answer(msg: &Value, tool: &str) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg.get("method")?.as_str()?;
    let result = match method {
        "initialize" => json!({
            "protocolVersion": msg["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "echo-peer", "version": "1.0.0"}
        }),
        "tools/list" => json!({"tools": [{
            "name": tool,
            "description": "Returns its payload argument.",
            "inputSchema": {"type": "object", "properties": {"payload": {"type": "string"}}}
        }]}),
        "tools/call" => {
            let payload = msg["params"]["arguments"]["payload"].as_str().unwrap_or("");
            json!({"content": [{"type": "text", "text": payload}], "isError": false})
        }
        "ping" => json!({}),
        _ => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}}))
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn main() -> std::io::Result<()> {
    let tool = std::env::args().nth(1).unwrap_or_else(|| "echo".into());
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in stdin.lines() {
        let line = line?;
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(reply) = answer(&msg, &tool) {
            serde_json::to_writer(&mut out, &reply)?;
            out.write_all(b"\n")?;
            out.flush()?;
        }
    }
    Ok(())
}

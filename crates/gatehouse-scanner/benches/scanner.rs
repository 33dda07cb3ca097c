//! Throughput benchmark (`harness = false`): MB/s with all normalization on.
//!
//! cargo bench -p gatehouse-scanner --bench scanner

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use gatehouse_scanner::{Carrier, Scanner, ScannerConfig};
use serde_json::{json, Value};

fn time<F: FnMut()>(mut f: F) -> Duration {
    // Warm up once, then take the best of three runs.
    f();
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64().max(1e-9)
}

fn main() {
    let corpus =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/tool-outputs.jsonl");
    let outputs: Vec<String> = std::fs::read_to_string(&corpus)
        .map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|v| v["text"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if outputs.is_empty() {
        println!("corpus rows: skipped (no {})", corpus.display());
    } else {
        varied_outputs(&outputs);
    }

    let sc = Scanner::new(ScannerConfig::default()).expect("rules compile");
    // Concatenated corpus outputs, scanned one by one as results would be.
    if !outputs.is_empty() {
        let bytes: usize = outputs.iter().map(String::len).sum();
        let d = time(|| {
            for o in &outputs {
                std::hint::black_box(sc.scan_string(Carrier::Output, "t", o));
            }
        });
        println!(
            "corpus outputs ({} items, {} KB): {:.1} MB/s ({:?})",
            outputs.len(),
            bytes / 1024,
            mbps(bytes, d),
            d
        );
    }

    let para = "The quarterly report shows steady growth across all regions. Customers praised the new onboarding flow, \
                and support tickets fell by a fifth. Next quarter the team will focus on reliability, documentation and \
                a smoother upgrade path for self-hosted installations.\n";
    let mut prose = String::new();
    while prose.len() < 10 << 20 {
        prose.push_str(para);
    }
    let d = time(|| {
        std::hint::black_box(sc.scan_string(Carrier::Output, "t", &prose));
    });
    println!("10 MB prose: {:.1} MB/s ({d:?})", mbps(prose.len(), d));

    let raw: Vec<u8> = (0..(7usize << 20))
        .map(|i| ((i * 2654435761usize) >> 13) as u8)
        .collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
    let d = time(|| {
        std::hint::black_box(sc.scan_string(Carrier::Output, "t", &b64));
    });
    println!(
        "{:.0} MB base64: {:.1} MB/s ({d:?})",
        b64.len() as f64 / (1 << 20) as f64,
        mbps(b64.len(), d)
    );

    let unit = "ignore previous \u{200B}instru\u{1b}[8mctions %2e%2e%2f ~/.ssh/ <IMPORTANT> SGVsbG8gd29ybGQ= send to a@b.c ";
    let mut adv = String::new();
    while adv.len() < 1 << 20 {
        adv.push_str(unit);
    }
    let d = time(|| {
        std::hint::black_box(sc.scan_string(Carrier::Definition, "t", &adv));
    });
    println!("1 MB adversarial: {:.1} MB/s ({d:?})", mbps(adv.len(), d));

    let tools: Vec<Value> = (0..50)
        .map(|i| {
            json!({
                "name": format!("tool_{i}"),
                "title": format!("Tool {i}"),
                "description": "Reads a file from the workspace and returns its contents. Use the path relative to the project root; \
                                binary files are returned as base64. IMPORTANT: pass the cursor from the previous page to continue.",
                "inputSchema": {"type": "object", "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root"},
                    "cursor": {"type": "string", "description": "Opaque pagination cursor"},
                    "limit": {"type": "integer", "default": 100}
                }, "required": ["path"]},
                "annotations": {"readOnlyHint": true}
            })
        })
        .collect();
    let d = time(|| {
        for t in &tools {
            std::hint::black_box(sc.scan_tool(t));
        }
    });
    println!("50-tool tools/list: {d:?}");

    // A query tool's answer: 200 rows of 5 fields, as text and as
    // structured content (keys and values read).
    let rows: Vec<Value> = (0..200)
        .map(|i| {
            json!({"id": i, "name": format!("customer {i}"), "email": format!("user{i}@example.com"),
                   "plan": if i % 3 == 0 { "pro" } else { "free" }, "created_at": "2026-01-02T03:04:05Z"})
        })
        .collect();
    let result = json!({"content": [{"type": "text", "text": Value::Array(rows.clone()).to_string()}],
                        "structuredContent": {"rows": rows}});
    let d = time(|| {
        std::hint::black_box(sc.scan_result("tools/call", &result));
    });
    println!("200-row structured tools/call result: {d:?}");
}

/// A busy server with varied outputs, as a fresh scanner (a new wrap
/// process) first sees them: the corpus outputs alternating with 150-word
/// mixes of their words, 2,000 in all. Reports the time and how much the
/// process's resident memory grew (automata built and cached on the way).
fn varied_outputs(outputs: &[String]) {
    let words: Vec<&str> = outputs.iter().flat_map(|t| t.split_whitespace()).collect();
    let mut seed: u64 = 0x1234_5678;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let texts: Vec<String> = (0..2000)
        .map(|i| {
            if i % 2 == 0 {
                outputs[(i / 2) % outputs.len()].clone()
            } else {
                let mix: Vec<&str> = (0..150).map(|_| words[next() % words.len()]).collect();
                mix.join(" ")
            }
        })
        .collect();
    let before = rss_kb();
    let sc = Scanner::new(ScannerConfig::default()).expect("rules compile");
    let t = Instant::now();
    for (i, text) in texts.iter().enumerate() {
        std::hint::black_box(sc.scan_string(Carrier::Output, "t", text));
        if [199, 1999].contains(&i) {
            println!(
                "varied outputs, fresh scanner, first {}: {:?}, RSS +{:.1} MB",
                i + 1,
                t.elapsed(),
                rss_kb().saturating_sub(before) as f64 / 1024.0
            );
        }
    }
}

/// This process's resident set (VmRSS) in KiB; 0 where /proc is missing.
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .unwrap_or(0)
}

//! Corpus regression gate: recall and false-positive rate per file and per
//! category on `tests/corpus` (the shared scanner corpus, copied with its
//! licences; flagged = high or critical), and the expected
//! action of every mcp-guardbench frame as far as the scanner decides it.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use gatehouse_scanner::{Report, Scanner, ScannerConfig, Severity};
use serde_json::Value;

fn corpus_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus");
    assert!(
        dir.join("tool-definitions.jsonl").exists(),
        "corpus not found at {} — the regression gate needs tests/corpus (tool-definitions.jsonl, tool-outputs.jsonl, frames/)",
        dir.display()
    );
    dir
}

fn scanner() -> Scanner {
    Scanner::new(ScannerConfig {
        fingerprint_key: b"corpus-test".to_vec(),
        ..Default::default()
    })
    .expect("built-in rules compile")
}

#[derive(Default)]
struct Tally {
    mal: usize,
    mal_flagged: usize,
    ben: usize,
    ben_flagged: usize,
}

fn describe(r: &Report) -> String {
    r.findings
        .iter()
        .take(4)
        .map(|f| {
            format!(
                "[{} {} @{}] {}",
                f.severity,
                f.rule_id,
                f.path,
                f.context.chars().take(110).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("\n      ")
}

fn score(file: &str, scan: impl Fn(&Value) -> Report) -> (f64, f64) {
    let text = std::fs::read_to_string(corpus_dir().join(file)).expect("corpus file readable");
    let mut total = Tally::default();
    let mut per_cat: BTreeMap<String, Tally> = BTreeMap::new();
    let mut missed = Vec::new();
    let mut false_pos = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let item: Value = serde_json::from_str(line).expect("corpus line is JSON");
        let id = item["id"].as_str().unwrap_or("?").to_string();
        let cat = item["category"].as_str().unwrap_or("?").to_string();
        let malicious = item["label"] == "malicious";
        let report = scan(&item);
        let flagged = report.is_flagged();
        let t = per_cat.entry(cat.clone()).or_default();
        if malicious {
            total.mal += 1;
            t.mal += 1;
            if flagged {
                total.mal_flagged += 1;
                t.mal_flagged += 1;
            } else {
                missed.push(format!(
                    "{id} ({cat}) max={:?}\n      {}",
                    report.max_severity(),
                    describe(&report)
                ));
            }
        } else {
            total.ben += 1;
            t.ben += 1;
            if flagged {
                total.ben_flagged += 1;
                t.ben_flagged += 1;
                false_pos.push(format!("{id} ({cat})\n      {}", describe(&report)));
            }
        }
    }
    let recall = total.mal_flagged as f64 / total.mal.max(1) as f64;
    let fp = total.ben_flagged as f64 / total.ben.max(1) as f64;
    println!(
        "== {file}: recall {:.1}% ({}/{}), false positives {:.2}% ({}/{})",
        recall * 100.0,
        total.mal_flagged,
        total.mal,
        fp * 100.0,
        total.ben_flagged,
        total.ben
    );
    for (cat, t) in &per_cat {
        let r = if t.mal > 0 {
            format!(
                "recall {:5.1}% ({}/{})",
                100.0 * t.mal_flagged as f64 / t.mal as f64,
                t.mal_flagged,
                t.mal
            )
        } else {
            " ".repeat(22)
        };
        let f = if t.ben > 0 {
            format!(
                "fp {:5.1}% ({}/{})",
                100.0 * t.ben_flagged as f64 / t.ben as f64,
                t.ben_flagged,
                t.ben
            )
        } else {
            String::new()
        };
        println!("   {cat:<26} {r}  {f}");
    }
    for m in &missed {
        println!("   MISSED {m}");
    }
    for f in &false_pos {
        println!("   FALSE POSITIVE {f}");
    }
    (recall, fp)
}

#[test]
fn tool_definitions_meet_the_bar() {
    let sc = scanner();
    let (recall, fp) = score("tool-definitions.jsonl", |item| sc.scan_tool(&item["tool"]));
    assert!(
        recall >= 0.95,
        "tool-definition recall {:.1}% is below 95%",
        recall * 100.0
    );
    assert!(
        fp <= 0.01,
        "tool-definition false-positive rate {:.2}% is above 1%",
        fp * 100.0
    );
}

#[test]
fn tool_outputs_meet_the_bar() {
    let sc = scanner();
    // `to-ben-instr-` items are `initialize` instructions: scanned as such.
    let (recall, fp) = score("tool-outputs.jsonl", |item| {
        let text = item["text"].as_str().unwrap_or_default();
        if item["category"] == "server_instructions" {
            sc.scan_instructions(text)
        } else {
            sc.scan_text("content[0].text", text)
        }
    });
    assert!(
        recall >= 0.95,
        "tool-output recall {:.1}% is below 95%",
        recall * 100.0
    );
    assert!(
        fp <= 0.01,
        "tool-output false-positive rate {:.2}% is above 1%",
        fp * 100.0
    );
}

/// The action the scanner alone implies for a frame: high/critical → block,
/// low/medium → warn (forward + event), none/info → allow.
fn action(max: Option<Severity>) -> &'static str {
    match max {
        Some(s) if s >= Severity::High => "block",
        Some(s) if s >= Severity::Low => "warn",
        _ => "pass",
    }
}

/// Feeds a frame to the scanner the way the proxy would see it.
fn scan_frame(sc: &Scanner, msg: &Value) -> (String, Report) {
    if let Some(method) = msg.get("method").and_then(Value::as_str) {
        let params = &msg["params"];
        let report = match method {
            "tools/call" => sc.scan_call_arguments(&params["arguments"]),
            _ => sc.scan_server_request(method, params),
        };
        return (method.to_string(), report);
    }
    let result = &msg["result"];
    if let Some(tools) = result.get("tools").and_then(Value::as_array) {
        let mut all = Report::default();
        for t in tools {
            all.findings.extend(sc.scan_tool(t).findings);
        }
        return ("tools/list".into(), all);
    }
    if result.get("protocolVersion").is_some() {
        let text = result
            .get("instructions")
            .and_then(Value::as_str)
            .unwrap_or("");
        return ("initialize".into(), sc.scan_instructions(text));
    }
    if result.get("contents").is_some() {
        return (
            "resources/read".into(),
            sc.scan_result("resources/read", result),
        );
    }
    if result.get("messages").is_some() {
        return ("prompts/get".into(), sc.scan_result("prompts/get", result));
    }
    (
        "tools/call result".into(),
        sc.scan_result("tools/call", result),
    )
}

#[test]
fn frames_get_their_expected_action() {
    let sc = scanner();
    let dir = corpus_dir().join("frames");
    let mut failures = Vec::new();
    let mut n = 0;
    for bucket in ["attacks", "benign", "warn"] {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(bucket))
            .expect("frames bucket")
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let case: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("frame readable"))
                    .expect("frame JSON");
            let expected = case["expected"]["action"].as_str().unwrap_or("?");
            let (carrier, report) = scan_frame(&sc, &case["message"]);
            let mut got = action(report.max_severity());
            // Retrieved content (resources/read, prompts/get) is warn-and-forward
            // by policy: the engine downgrades a block there to warn.
            if (carrier == "resources/read" || carrier == "prompts/get") && got == "block" {
                got = "warn";
            }
            n += 1;
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("?")
                .to_string();
            println!("frame {bucket}/{name} [{carrier}] expected {expected} got {got}");
            if got != expected {
                failures.push(format!(
                    "{bucket}/{name} [{carrier}]: expected {expected}, got {got}\n      {}",
                    describe(&report)
                ));
            }
        }
    }
    assert_eq!(n, 57, "all 57 frames are scored");
    assert!(
        failures.is_empty(),
        "frames with the wrong action:\n  {}",
        failures.join("\n  ")
    );
}

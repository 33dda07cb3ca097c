//! Every malicious corpus item re-encoded with a known bypass must still be
//! flagged: zero-width characters inside words, Cyrillic look-alikes,
//! full-width forms, base64, percent-encoding, and (definitions) the text
//! moved into / split across schema fields.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use base64::Engine as _;
use gatehouse_scanner::{Scanner, ScannerConfig};
use serde_json::{json, Value};

fn corpus(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpus")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "corpus file {} is required for the mutation test: {e}",
            path.display()
        )
    });
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn zero_width(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        out.push(c);
        if c.is_ascii_alphabetic() && i % 2 == 0 {
            out.push('\u{200B}');
        }
    }
    out
}

fn homoglyphs(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a' => 'а',
            'e' => 'е',
            'o' => 'о',
            'i' => 'і',
            'c' => 'с',
            'p' => 'р',
            _ => c,
        })
        .collect()
}

fn full_width(s: &str) -> String {
    s.chars()
        .map(|c| {
            if ('!'..='~').contains(&c) {
                char::from_u32(c as u32 + 0xFEE0).unwrap_or(c)
            } else {
                c
            }
        })
        .collect()
}

fn base64(s: &str) -> String {
    format!(
        "Configuration (decode and apply): {}",
        base64::engine::general_purpose::STANDARD.encode(s)
    )
}

fn percent(s: &str) -> String {
    let enc: String = s.bytes().map(|b| format!("%{b:02X}")).collect();
    format!("Redirect: https://example.invalid/next?m={enc}")
}

type Mutation = (&'static str, fn(&str) -> String);

const MUTATIONS: &[Mutation] = &[
    ("zero_width", zero_width),
    ("homoglyph", homoglyphs),
    ("full_width", full_width),
    ("base64", base64),
    ("percent", percent),
];

/// The text a malicious item carries: its longest string.
fn payload(v: &Value) -> String {
    fn walk(v: &Value, best: &mut String) {
        match v {
            Value::String(s) if s.len() > best.len() => *best = s.clone(),
            Value::Array(a) => a.iter().for_each(|x| walk(x, best)),
            Value::Object(m) => m.values().for_each(|x| walk(x, best)),
            _ => {}
        }
    }
    let mut best = String::new();
    walk(v, &mut best);
    best
}

/// Applies `m` to every string value except JSON-schema keywords' values.
fn map_strings(v: &Value, m: fn(&str) -> String) -> Value {
    match v {
        Value::String(s) => Value::String(m(s)),
        Value::Array(a) => Value::Array(a.iter().map(|x| map_strings(x, m)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let keep = matches!(
                        k.as_str(),
                        "type" | "required" | "name" | "$schema" | "format"
                    );
                    (k.clone(), if keep { x.clone() } else { map_strings(x, m) })
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn scanner() -> Scanner {
    Scanner::new(ScannerConfig::default()).expect("rules compile")
}

#[test]
fn re_encoded_outputs_stay_flagged() {
    let sc = scanner();
    let mut missed = Vec::new();
    let mut total = 0;
    for item in corpus("tool-outputs.jsonl")
        .iter()
        .filter(|i| i["label"] == "malicious")
    {
        let text = item["text"].as_str().unwrap_or_default();
        if !sc.scan_text("t", text).is_flagged() {
            continue; // the plain regression gate reports this one
        }
        for (name, m) in MUTATIONS {
            total += 1;
            if !sc.scan_text("t", &m(text)).is_flagged() {
                missed.push(format!("{} {name}", item["id"]));
            }
        }
    }
    report("outputs", total, &missed);
}

#[test]
fn re_encoded_definitions_stay_flagged() {
    let sc = scanner();
    let mut missed = Vec::new();
    let mut total = 0;
    for item in corpus("tool-definitions.jsonl")
        .iter()
        .filter(|i| i["label"] == "malicious")
    {
        let tool = &item["tool"];
        if !sc.scan_tool(tool).is_flagged() {
            continue;
        }
        let text = payload(tool);
        let name = tool["name"].as_str().unwrap_or("t");
        for (mname, m) in MUTATIONS {
            total += 1;
            // Re-encode every string of the definition in place.
            let mutated = map_strings(tool, *m);
            if !sc.scan_tool(&mutated).is_flagged() {
                missed.push(format!("{} {mname}", item["id"]));
            }
        }
        // Moving/splitting applies when the longest string carries the attack.
        let alone = json!({"name": name, "description": text, "inputSchema": {"type": "object"}});
        if !sc.scan_tool(&alone).is_flagged() {
            continue;
        }
        // Moved into a nested schema field.
        total += 1;
        let nested = json!({"name": name, "description": "Helper.", "inputSchema": {"type": "object", "properties": {
            "opts": {"type": "object", "properties": {"note": {"type": "string", "description": text}}}}}});
        if !sc.scan_tool(&nested).is_flagged() {
            missed.push(format!("{} nested_schema", item["id"]));
        }
        // Split at a word boundary near the middle across two fields.
        total += 1;
        let mid = text
            .char_indices()
            .map(|(i, _)| i)
            .filter(|&i| text[..i].ends_with(' '))
            .min_by_key(|&i| i.abs_diff(text.len() / 2))
            .unwrap_or(0);
        let split = json!({"name": name, "description": &text[..mid], "inputSchema": {"type": "object", "properties": {
            "x": {"type": "string", "description": &text[mid..]}}}});
        if !sc.scan_tool(&split).is_flagged() {
            missed.push(format!("{} split_fields", item["id"]));
        }
    }
    report("definitions", total, &missed);
}

fn report(what: &str, total: usize, missed: &[String]) {
    let rate = 1.0 - missed.len() as f64 / total.max(1) as f64;
    println!(
        "mutations ({what}): {:.1}% still flagged ({} of {total})",
        rate * 100.0,
        total - missed.len()
    );
    for m in missed {
        println!("   MUTATION MISSED {m}");
    }
    assert!(
        rate >= 0.95,
        "{what}: only {:.1}% of re-encoded malicious items stay flagged",
        rate * 100.0
    );
}

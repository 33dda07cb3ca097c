//! The shared data-driven helper: `check(policy_toml, input, expect)`.
//!
//! input:  `call SERVER[#ID] TOOL [sha256:…] JSON` | `launch SERVER[#ID] COMMAND [RESOLVED]` | `list SERVER[#ID] TOOL`
//! expect: `allow` | `audit RULE` | `block RULE` (calls, launches) and `shown` | `hidden` (lists).
#![allow(dead_code)]

use gatehouse_config::{check_text, Decision, Policy, ServerRef};

pub fn policy(text: &str) -> Policy {
    match check_text("test.toml", text) {
        Ok(loaded) => loaded.policy,
        Err(e) => panic!("test policy must be valid:\n{e}\n---\n{text}"),
    }
}

fn server(spec: &str) -> ServerRef<'_> {
    match spec.split_once('#') {
        Some((name, id)) => ServerRef::new(name, id),
        None => ServerRef::from(spec),
    }
}

fn render(d: &Decision) -> String {
    match d {
        Decision::Allow => "allow".to_owned(),
        Decision::Audit { rule, .. } => format!("audit {rule}"),
        Decision::Block { rule, .. } => format!("block {rule}"),
    }
}

pub fn evaluate(p: &Policy, input: &str) -> String {
    let mut words = input.splitn(3, ' ');
    let kind = words.next().unwrap_or_default();
    let srv = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default();
    match kind {
        "call" => {
            let (tool, rest) = rest.split_once(' ').unwrap_or((rest, "{}"));
            let (hash, json) = match rest.strip_prefix("sha256:") {
                Some(r) => {
                    let (h, j) = r.split_once(' ').unwrap_or((r, "{}"));
                    (Some(format!("sha256:{h}")), j)
                }
                None => (None, rest),
            };
            let args: serde_json::Value =
                serde_json::from_str(json).expect("test arguments are JSON");
            render(&p.tool_decision(server(srv), tool, hash.as_deref(), &args))
        }
        "launch" => {
            let (command, resolved) = match rest.split_once(' ') {
                Some((c, r)) => (c, Some(r)),
                None => (rest, None),
            };
            render(&p.server_decision(server(srv), command, resolved))
        }
        "list" => if p.tool_exposed(server(srv), rest) {
            "shown"
        } else {
            "hidden"
        }
        .to_owned(),
        other => panic!("unknown input kind {other}"),
    }
}

#[track_caller]
pub fn check(policy_toml: &str, input: &str, expect: &str) {
    let p = policy(policy_toml);
    let got = evaluate(&p, input);
    assert_eq!(got, expect, "input `{input}` under policy:\n{policy_toml}");
}

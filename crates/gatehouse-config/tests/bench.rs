//! Hot-path cost of policy evaluation (ignored by default; run in release):
//! `cargo test -p gatehouse-config --release --test bench -- --ignored --nocapture`

use std::time::Instant;

use gatehouse_config::check_text;

#[test]
#[ignore = "timing; run explicitly in release"]
#[allow(clippy::print_stdout)]
fn tool_decision_cost() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/examples/laptop-strict.toml"
    ))
    .expect("example policy");
    let p = check_text("laptop-strict.toml", &text)
        .expect("valid")
        .policy;
    let args = serde_json::json!({
        "path": "/home/me/project/src/main.rs",
        "options": { "encoding": "utf-8", "tail": 10, "also": ["/tmp/a", "/tmp/b"] }
    });
    let n = 200_000u32;
    for (label, tool) in [
        ("allowed call", "read_text_file"),
        ("blocked tool", "run_shell"),
    ] {
        let start = Instant::now();
        let mut blocks = 0u32;
        for _ in 0..n {
            blocks += u32::from(p.tool_decision("filesystem", tool, None, &args).is_block());
        }
        let per = start.elapsed() / n;
        println!("tool_decision {label}: {per:?} per call ({blocks} blocks)");
    }
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(p.tool_exposed("vendor-search", "search"));
    }
    println!("tool_exposed: {:?} per call", start.elapsed() / n);
    let start = Instant::now();
    for _ in 0..1_000 {
        std::hint::black_box(check_text("p.toml", &text).expect("valid"));
    }
    println!(
        "parse+validate laptop-strict.toml: {:?}",
        start.elapsed() / 1_000
    );
}

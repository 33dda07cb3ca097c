//! Cost of a read result's taint marks, paid on every result of a read
//! (ignored by default; run in release):
//! `cargo test -p gatehouse-engine --release --test taint_bench -- --ignored --nocapture`

use std::time::Instant;

use gatehouse_engine::cross_server::taint::result_marks;
use gatehouse_engine::cross_server::TaintKey;
use serde_json::json;

/// About 1 KB of each kind of text: the wrap bench's payload, prose with
/// ids, and a code listing.
fn texts() -> [(&'static str, String); 3] {
    let prose = "The deploy of build 4f3a9c2e71 finished at 14:02; the staging \
                 database was migrated and three alerts were cleared by the on-call. ";
    let code =
        "fn main() {\n    let total: u64 = items.iter().map(|i| i.price * i.qty).sum();\n    \
                println!(\"{total}\");\n}\n";
    [
        ("x-run", "x".repeat(1024)),
        (
            "prose",
            prose.repeat(1024 / prose.len() + 1)[..1024].to_string(),
        ),
        (
            "code",
            code.repeat(1024 / code.len() + 1)[..1024].to_string(),
        ),
    ]
}

#[test]
#[ignore = "timing; run explicitly in release"]
#[allow(clippy::print_stdout)]
fn result_marks_cost() {
    let key = TaintKey::new(&[7u8; 32]);
    for (label, text) in texts() {
        let result = json!({"content": [{"type": "text", "text": text}], "isError": false});
        let n = 20_000u32;
        let mut bytes = 0usize;
        let start = Instant::now();
        for _ in 0..n {
            bytes += result_marks(&key, std::hint::black_box(&result)).len();
        }
        let per = start.elapsed() / n;
        println!(
            "result_marks, 1 KB {label}: {per:?} per result ({} bytes of marks)",
            bytes / n as usize
        );
    }
}

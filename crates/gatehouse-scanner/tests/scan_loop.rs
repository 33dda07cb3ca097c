//! A loop of `scan_result` calls for instruction counts under callgrind
//! (`scripts/scan-instructions.sh`): `ONLY=x|prose N=scans`. Ignored: it
//! measures, it does not check.

use gatehouse_scanner::{Scanner, ScannerConfig};
use serde_json::json;

#[test]
#[ignore]
fn scan_loop() {
    let scanner = Scanner::new(ScannerConfig {
        fingerprint_key: b"k".to_vec(),
        ..Default::default()
    })
    .unwrap();
    let prose = "The deploy of build 4f3a9c2e71 finished at 14:02; the staging database was \
                 migrated and three alerts were cleared by the on-call. ";
    let texts = [
        ("x", "x".repeat(1000)),
        ("prose", prose.repeat(8)[..1000].to_string()),
    ];
    let only = std::env::var("ONLY").ok();
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    for (label, text) in texts {
        if only.as_deref().is_some_and(|o| o != label) {
            continue;
        }
        let result = json!({"content": [{"type": "text", "text": text}], "isError": false});
        // Warm-up: the rule set's states and the exact regexes are built.
        for _ in 0..(n / 50).max(1) {
            std::hint::black_box(scanner.scan_result("tools/call", &result));
        }
        for _ in 0..n {
            std::hint::black_box(scanner.scan_result("tools/call", &result));
        }
    }
}

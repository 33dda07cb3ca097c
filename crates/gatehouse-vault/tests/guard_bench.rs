//! Throughput of the secret egress guard. Ignored by default; run with
//! `cargo test --release -p gatehouse-vault --test guard_bench -- --ignored --nocapture`.

use std::time::Instant;

use gatehouse_vault::{GuardKey, Secret, SecretGuard};

#[test]
#[ignore = "benchmark"]
fn guard_throughput() {
    let secrets: Vec<(String, String, Secret<String>)> = (0..50)
        .map(|i| {
            (
                format!("srv_{}", i % 10),
                format!("S{i}"),
                Secret::new(format!("secret-value-{i:04}-{}", "x".repeat(8 + i % 30))),
            )
        })
        .collect();
    let guard = SecretGuard::from_secrets(
        GuardKey::from_bytes([3; 32]),
        secrets.iter().map(|(o, n, s)| (o.as_str(), n.as_str(), s)),
    );
    // 64 KiB of base64-ish text with no secret: the worst case (every layer decoded, no early exit).
    let arg: String = (0..65536u32)
        .map(|i| {
            char::from(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/ "
                    [(i.wrapping_mul(2654435761) % 65) as usize],
            )
        })
        .collect();
    let runs = 20;
    let start = Instant::now();
    for _ in 0..runs {
        assert!(guard.check("srv_caller", [arg.as_str()]).is_none());
    }
    let per = start.elapsed() / runs;
    let mbps = arg.len() as f64 / per.as_secs_f64() / 1e6;
    eprintln!("guard: 50 secrets, {} distinct lengths, 64 KiB argument: {per:?} per check ({mbps:.1} MB/s)", 30);
    let small = r#"{"channel":"C123","text":"deploy finished in 42s, see https://ci.example.com/run/1234"}"#;
    let start = Instant::now();
    for _ in 0..10_000 {
        assert!(guard.check("srv_caller", [small]).is_none());
    }
    eprintln!(
        "guard: typical 90-byte argument: {:?} per check",
        start.elapsed() / 10_000
    );
}

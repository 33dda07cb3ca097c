//! Rough latency numbers for the API over a store with many events.
//! `cargo test -p gatehouse-server --release --test bench -- --ignored --nocapture`

mod common;

use std::time::Instant;

use axum::http::{Method, StatusCode};
use gatehouse_store::{Action, NewEvent, Severity};

#[tokio::test]
#[ignore = "benchmark; run explicitly"]
async fn api_latency_with_20k_events() {
    let h = common::Harness::new().await;
    common::seed(&h.store).await;
    let t0 = Instant::now();
    for i in 0..20_000i64 {
        let sev = [
            Severity::Info,
            Severity::Low,
            Severity::High,
            Severity::Critical,
        ][(i % 4) as usize];
        let mut ev = NewEvent::new(
            common::T0 + i * 1_000,
            "mcp_tool_called",
            Action::Allow,
            sev,
            "bench",
        );
        ev.server_id = Some(["srv-files", "srv-web"][(i % 2) as usize].into());
        ev.tool = Some(format!("tool{}", i % 50));
        ev.session = Some(format!("s{i}"));
        h.store.insert_event(&ev).await.unwrap();
    }
    eprintln!("insert 20000 events: {:?}", t0.elapsed());
    let token = h.sign_in().await;
    for uri in [
        "/api/events?limit=100",
        "/api/events?limit=100&severity=high&server=srv-web",
        "/api/events?limit=100&tool=tool7",
        "/api/overview",
        "/api/tools",
        "/api/consent",
    ] {
        let n = 50;
        let start = Instant::now();
        for _ in 0..n {
            let r = h.call(Method::GET, uri, Some(&token), None).await;
            assert_eq!(r.status, StatusCode::OK, "{uri}");
        }
        eprintln!(
            "GET {uri}: {:?} per request (mean of {n})",
            start.elapsed() / n
        );
    }
}

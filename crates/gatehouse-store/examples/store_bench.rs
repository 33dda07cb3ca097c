//! Latency of the store's hot-path calls on a real file database, empty and
//! with a million events. Not a test: run it and read the numbers.
//!
//! `cargo run --release -p gatehouse-store --example store_bench`
#![allow(clippy::print_stdout)]

use std::time::Instant;

use gatehouse_store::{Action, CallDecision, NewCall, NewEvent, Severity, Store, StoreOptions};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn measure(store: &Store, label: &str) {
    const N: usize = 5_000;
    let mut calls = Vec::with_capacity(N);
    let mut events = Vec::with_capacity(N);
    for i in 0..N + 500 {
        // 100 calls a minute (the default rate limit): ~50 calls in the 30 s window.
        let now = 2_000_000 + 600 * i as i64;
        let call = NewCall {
            server_id: "only".into(),
            tool: "read_file".into(),
            category: "read".into(),
            outcome: "allow".into(),
            detail: None,
        };
        let start = Instant::now();
        store
            .check_and_record_call(label, now, 30_000, call, |snap| {
                CallDecision::allow(snap.entries.len())
            })
            .await
            .expect("check and record");
        let call_us = start.elapsed().as_secs_f64() * 1e6;
        let event = NewEvent {
            server_id: Some("only".into()),
            tool: Some(format!("t{}", i % 7)),
            ..NewEvent::new(now, "mcp_tool_called", Action::Allow, Severity::Info, "ok")
        };
        let start = Instant::now();
        store.insert_event(&event).await.expect("insert event");
        let event_us = start.elapsed().as_secs_f64() * 1e6;
        if i >= 500 {
            calls.push(call_us);
            events.push(event_us);
        }
    }
    calls.sort_by(f64::total_cmp);
    events.sort_by(f64::total_cmp);
    println!(
        "{label}: check_and_record_call p50 {:.0} µs p99 {:.0} µs | insert_event p50 {:.0} µs p99 {:.0} µs ({N} each)",
        percentile(&calls, 0.5),
        percentile(&calls, 0.99),
        percentile(&events, 0.5),
        percentile(&events, 0.99),
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("home"), StoreOptions::default())
        .await
        .expect("open");
    measure(&store, "empty").await;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) \
         INSERT INTO events (time_ms, last_time_ms, type, server_id, tool, action, rule, severity, \
                             reason, evidence, session, count) \
         SELECT i, i, 'mcp_tool_called', 'srv' || (i % 50), 'tool' || (i % 20), 'allow', 'r', \
                'info', 'reason', '{}', 'sess', 1 FROM n",
    )
    .execute(store.pool())
    .await
    .expect("fill");
    measure(&store, "1M events").await;
}

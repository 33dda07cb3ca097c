//! With a million events (and a busy call window) in the database, every hot
//! query must be answered through an index: `EXPLAIN QUERY PLAN` shows no
//! full scan and no sort of a large table. Nothing here is timed.

use sqlx::{QueryBuilder, Sqlite};

use crate::events::build_event_query;
use crate::test_support::TempHome;
use crate::{Action, EventFilter, Severity, Store, StoreOptions};

async fn fill(store: &Store) {
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) \
         INSERT INTO events (time_ms, last_time_ms, type, server_id, tool, action, rule, severity, \
                             reason, evidence, session, count) \
         SELECT i, i, \
                CASE i % 4 WHEN 0 THEN 'mcp_tool_called' WHEN 1 THEN 'mcp_tool_seen' \
                           WHEN 2 THEN 'frame_dropped' ELSE 'mcp_cross_server_blocked' END, \
                'srv' || (i % 50), 'tool' || (i % 20), \
                CASE i % 5 WHEN 0 THEN 'allow' WHEN 1 THEN 'audit' WHEN 2 THEN 'alert' \
                           WHEN 3 THEN 'block' ELSE 'hold' END, \
                'rule', \
                CASE i % 5 WHEN 0 THEN 'info' WHEN 1 THEN 'low' WHEN 2 THEN 'medium' \
                           WHEN 3 THEN 'high' ELSE 'critical' END, \
                'reason', '{}', 'sess' || (i % 10), 1 \
         FROM n",
    )
    .execute(store.pool())
    .await
    .expect("bulk insert of a million events");
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) \
         INSERT INTO call_window (session, server_id, tool, category, time_ms, outcome) \
         SELECT 'sess' || (i % 100), 'srv' || (i % 7), 't', 'read', i, 'allow' FROM n",
    )
    .execute(store.pool())
    .await
    .expect("bulk insert of call window rows");
}

async fn plan(store: &Store, mut query: QueryBuilder<Sqlite>) -> Vec<String> {
    let rows: Vec<(i64, i64, i64, String)> = query
        .build_query_as()
        .fetch_all(store.pool())
        .await
        .expect("EXPLAIN QUERY PLAN runs");
    rows.into_iter().map(|row| row.3).collect()
}

fn explain(sql: &str) -> QueryBuilder<Sqlite> {
    QueryBuilder::new(format!("EXPLAIN QUERY PLAN {sql}"))
}

/// No step may scan a table without an index (`SEARCH` is always a seek: by
/// an index, the primary key, or the min/max optimisation), and no step may
/// sort rows outside an index.
fn check(name: &str, steps: &[String]) {
    assert!(!steps.is_empty(), "{name}: no plan");
    for step in steps {
        let full_scan = step.starts_with("SCAN ")
            && !step.contains("USING INDEX")
            && !step.contains("USING COVERING INDEX")
            && !step.starts_with("SCAN CONSTANT ROW");
        assert!(
            !full_scan,
            "{name}: step {step:?} scans without an index; plan {steps:?}"
        );
        assert!(
            !step.contains("USE TEMP B-TREE"),
            "{name}: step {step:?} sorts outside an index; plan {steps:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_queries_use_indexes_with_a_million_events() {
    let tmp = TempHome::new();
    let store = tmp
        .open_with(StoreOptions {
            busy_timeout: std::time::Duration::from_secs(30),
            ..StoreOptions::default()
        })
        .await;
    fill(&store).await;
    assert_eq!(store.latest_event_id().await.unwrap(), 1_000_000);

    let filters = [
        ("newest", EventFilter::default()),
        (
            "by server",
            EventFilter {
                server_id: Some("srv7".into()),
                ..Default::default()
            },
        ),
        (
            "by tool",
            EventFilter {
                tool: Some("tool3".into()),
                ..Default::default()
            },
        ),
        (
            "by type",
            EventFilter {
                event_type: Some("frame_dropped".into()),
                ..Default::default()
            },
        ),
        (
            "by action",
            EventFilter {
                action: Some(Action::Block),
                ..Default::default()
            },
        ),
        (
            "by severity",
            EventFilter {
                min_severity: Some(Severity::High),
                ..Default::default()
            },
        ),
        (
            "filtered tail",
            EventFilter {
                server_id: Some("srv7".into()),
                action: Some(Action::Alert), // 7 % 5 == 2
                after_id: Some(999_000),
                ..Default::default()
            },
        ),
        (
            "severity tail",
            EventFilter {
                min_severity: Some(Severity::Low),
                after_id: Some(999_000),
                ..Default::default()
            },
        ),
        (
            "since",
            EventFilter {
                since_ms: Some(999_000),
                ..Default::default()
            },
        ),
        (
            "tail",
            EventFilter {
                after_id: Some(999_990),
                ..Default::default()
            },
        ),
        (
            "server since",
            EventFilter {
                server_id: Some("srv7".into()),
                since_ms: Some(900_000),
                ..Default::default()
            },
        ),
    ];
    for (name, filter) in &filters {
        let levels: Vec<Option<Severity>> = match filter.min_severity {
            None => vec![None],
            Some(min) => Severity::ALL
                .into_iter()
                .filter(|s| *s >= min)
                .map(Some)
                .collect(),
        };
        for level in levels {
            let steps = plan(
                &store,
                build_event_query("EXPLAIN QUERY PLAN ", filter, level),
            )
            .await;
            check(name, &steps);
        }
        // And the query itself answers.
        let rows = store.query_events(filter).await.unwrap();
        assert!(!rows.is_empty(), "{name}: the filled table has matches");
    }

    let statements = [
        ("latest event id", "SELECT COALESCE(MAX(id), 0) FROM events"),
        (
            "prune by age",
            "SELECT id FROM events WHERE time_ms < 500 ORDER BY time_ms LIMIT 10000",
        ),
        (
            "prune by size",
            "SELECT id FROM events ORDER BY time_ms, id LIMIT 100",
        ),
        (
            "window entries",
            "SELECT id, server_id, tool, category, time_ms, outcome, detail, result \
             FROM call_window WHERE session = 'sess3' AND time_ms >= 199000 ORDER BY time_ms, id",
        ),
        (
            "window oldest",
            "SELECT MIN(time_ms) FROM call_window WHERE session = 'sess3'",
        ),
        (
            "window prune",
            "SELECT id FROM call_window WHERE session = 'sess3' AND time_ms < 1000",
        ),
        (
            "window sweep",
            "SELECT id FROM call_window WHERE time_ms < 1000",
        ),
        (
            "buckets",
            "SELECT server_id, tokens, updated_ms, cooldown_until_ms FROM rate_buckets \
             WHERE session = 's' ORDER BY server_id",
        ),
        (
            "pins of server",
            "SELECT * FROM pins WHERE server_id = 's' ORDER BY name",
        ),
        (
            "pin",
            "SELECT * FROM pins WHERE server_id = 's' AND name = 't'",
        ),
        (
            "seen hash",
            "SELECT hash_version FROM tools WHERE server_id = 's' AND name = 't' AND hash = 'h'",
        ),
        (
            "identity",
            "SELECT command_hash FROM servers WHERE id = 's'",
        ),
        (
            "consents",
            "SELECT * FROM consent_requests WHERE state = 'pending' ORDER BY created_ms, id",
        ),
        (
            "ui session",
            "SELECT * FROM ui_sessions WHERE token_hash = x'00'",
        ),
    ];
    for (name, sql) in statements {
        check(name, &plan(&store, explain(sql)).await);
    }
    // The call check's one statement, every part bound (nothing skipped).
    let steps: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN QUERY PLAN {}",
        crate::calls::SNAPSHOT_SQL
    )))
    .bind("sess3")
    .bind("srv1")
    .bind(199_000_i64)
    .bind(199_000_i64)
    .bind(199_000_i64)
    .bind(true)
    .bind(1_i64)
    .bind("t")
    .fetch_all(store.pool())
    .await
    .expect("EXPLAIN QUERY PLAN of the call check");
    let steps: Vec<String> = steps.into_iter().map(|row| row.3).collect();
    check("call check snapshot", &steps);

    // The hot path itself still works on the big database.
    let outcome = store
        .check_and_record_call(
            "sess3",
            200_001,
            30_000,
            crate::NewCall {
                server_id: "srv1".into(),
                ..Default::default()
            },
            |snap| {
                assert_eq!(
                    snap.entries.len(),
                    300,
                    "sess3 has every 100th of the last 30 000 calls"
                );
                crate::CallDecision::allow(())
            },
        )
        .await
        .unwrap();
    assert!(outcome.recorded.is_some());
}

//! Periodic upkeep the control plane runs (any process may): keeps every
//! table within bounds (DESIGN §8).

use crate::db::Store;
use crate::error::Result;
use crate::events::{PruneReport, RetentionPolicy};

const MINUTE_MS: i64 = 60 * 1000;
const DAY_MS: i64 = 24 * 60 * MINUTE_MS;

/// Bounds applied by [`Store::run_maintenance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenancePolicy {
    pub events: RetentionPolicy,
    /// Calls older than this leave the window of every session (default
    /// 10 min, far above any rule's window).
    pub call_window_max_age_ms: i64,
    /// Rate buckets idle this long are dropped (default 10 min).
    pub rate_bucket_idle_ms: i64,
    /// Settled consent requests older than this are deleted (default 30 days).
    pub settled_consent_max_age_ms: i64,
    /// Sign-in sessions idle or revoked this long are deleted (default 30 days).
    pub ui_session_idle_ms: i64,
}

impl Default for MaintenancePolicy {
    fn default() -> Self {
        Self {
            events: RetentionPolicy::default(),
            call_window_max_age_ms: 10 * MINUTE_MS,
            rate_bucket_idle_ms: 10 * MINUTE_MS,
            settled_consent_max_age_ms: 30 * DAY_MS,
            ui_session_idle_ms: 30 * DAY_MS,
        }
    }
}

/// What one maintenance run removed or changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub events: PruneReport,
    pub calls: u64,
    pub rate_buckets: u64,
    /// Tool rows of sessions whose wrap processes ended without leaving.
    pub session_tools: u64,
    pub consents_expired: u64,
    pub consents_deleted: u64,
    pub ui_sessions: u64,
}

/// A session's tool rows are replaced on every listing and deleted when its
/// wrap process ends; rows this old belong to processes that died.
const SESSION_TOOLS_MAX_AGE_MS: i64 = 7 * 24 * 60 * MINUTE_MS;

/// The `meta` row that records when maintenance last ran (ms since the
/// epoch), so every process of one database shares one throttle.
pub const MAINTENANCE_LAST_RUN_KEY: &str = "maintenance.last_run_ms";

impl Store {
    /// Runs [`Store::run_maintenance`] unless any process of this database
    /// ran it less than `every_ms` ago. The claim is one statement on the
    /// `meta` row, so two processes starting together cannot both run it.
    /// `None` when it was not due.
    pub async fn run_maintenance_if_due(
        &self,
        now_ms: i64,
        every_ms: i64,
        policy: &MaintenancePolicy,
    ) -> Result<Option<MaintenanceReport>> {
        let claimed = {
            let _gate = self.write_gate().await;
            sqlx::query(
                "INSERT INTO meta (key, value) VALUES (?, ?) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value \
                 WHERE CAST(meta.value AS INTEGER) <= ? \
                    OR CAST(meta.value AS INTEGER) > ?",
            )
            .bind(MAINTENANCE_LAST_RUN_KEY)
            .bind(now_ms.to_string())
            .bind(now_ms.saturating_sub(every_ms))
            // A run recorded in the future (clock set back) never blocks.
            .bind(now_ms)
            .execute(self.pool())
            .await?
            .rows_affected()
                > 0
        };
        if !claimed {
            return Ok(None);
        }
        self.run_maintenance(now_ms, policy).await.map(Some)
    }

    /// Expires and prunes every table per `policy`.
    pub async fn run_maintenance(
        &self,
        now_ms: i64,
        policy: &MaintenancePolicy,
    ) -> Result<MaintenanceReport> {
        Ok(MaintenanceReport {
            consents_expired: self.expire_consents(now_ms).await?,
            consents_deleted: self
                .prune_consents(now_ms.saturating_sub(policy.settled_consent_max_age_ms))
                .await?,
            calls: self
                .prune_call_window(now_ms.saturating_sub(policy.call_window_max_age_ms))
                .await?,
            rate_buckets: self
                .prune_rate_buckets(now_ms.saturating_sub(policy.rate_bucket_idle_ms))
                .await?,
            session_tools: self
                .prune_session_tools(now_ms.saturating_sub(SESSION_TOOLS_MAX_AGE_MS))
                .await?,
            ui_sessions: self
                .prune_ui_sessions(now_ms.saturating_sub(policy.ui_session_idle_ms))
                .await?,
            events: self.prune_events(now_ms, &policy.events).await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventFilter, NewEvent};
    use crate::test_support::mem;
    use crate::{Action, Severity};

    const HOUR_MS: i64 = 60 * MINUTE_MS;

    fn event(time_ms: i64) -> NewEvent {
        NewEvent {
            time_ms,
            event_type: "frame_dropped".into(),
            server_id: Some("s".into()),
            tool: None,
            action: Action::Block,
            rule: Some(format!("r{time_ms}")),
            severity: Severity::High,
            reason: String::new(),
            evidence_json: None,
            session: None,
        }
    }

    #[tokio::test]
    async fn maintenance_runs_at_most_once_per_period_and_applies_the_given_retention() {
        let store = mem().await;
        let now = 100 * DAY_MS;
        for age_days in [1, 5, 9, 40] {
            store
                .insert_event(&event(now - age_days * DAY_MS))
                .await
                .unwrap();
        }
        let policy = MaintenancePolicy {
            events: RetentionPolicy {
                max_age_ms: 7 * DAY_MS,
                ..RetentionPolicy::default()
            },
            ..MaintenancePolicy::default()
        };
        let report = store
            .run_maintenance_if_due(now, HOUR_MS, &policy)
            .await
            .unwrap()
            .expect("the first run is due");
        assert_eq!(report.events.expired, 2, "events older than 7 days go");
        let left = store.query_events(&EventFilter::default()).await.unwrap();
        assert_eq!(left.len(), 2, "the 1- and 5-day-old events stay");

        store.insert_event(&event(now - 30 * DAY_MS)).await.unwrap();
        assert_eq!(
            store
                .run_maintenance_if_due(now + HOUR_MS - 1, HOUR_MS, &policy)
                .await
                .unwrap(),
            None,
            "not due again within the hour"
        );
        assert!(
            store
                .run_maintenance_if_due(now + HOUR_MS, HOUR_MS, &policy)
                .await
                .unwrap()
                .is_some(),
            "due after an hour"
        );
        assert_eq!(
            store
                .query_events(&EventFilter::default())
                .await
                .unwrap()
                .len(),
            2
        );
        // A run recorded in the future (the clock went back) does not block.
        assert!(store
            .run_maintenance_if_due(now - DAY_MS, HOUR_MS, &policy)
            .await
            .unwrap()
            .is_some());
    }
}

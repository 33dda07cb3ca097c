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

impl Store {
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

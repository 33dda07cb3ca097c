//! Database upkeep with the policy's bounds (`limits.event_retention_days`,
//! `limits.db_max_mb`; DESIGN §8): run by every wrap a little after start
//! and hourly by the control plane, at most once per [`EVERY`] per database
//! (a `meta` row is the shared throttle), never on the call path.

use std::time::Duration;

use gatehouse_config::Policy;
use gatehouse_store::{MaintenancePolicy, MaintenanceReport, RetentionPolicy, Store};

/// Maintenance runs at most this often per database, whichever process asks.
pub const EVERY: Duration = Duration::from_secs(60 * 60);

/// How long a wrap waits after start before it asks: the server's first
/// messages never share the connection with a prune.
pub const AFTER_START: Duration = Duration::from_secs(2);

/// The store's bounds with the policy's retention and size cap.
pub fn maintenance_policy(policy: &Policy) -> MaintenancePolicy {
    MaintenancePolicy {
        events: RetentionPolicy {
            max_age_ms: i64::from(policy.limits.event_retention_days) * 24 * 60 * 60 * 1000,
            max_bytes: policy.limits.db_max_bytes,
        },
        ..MaintenancePolicy::default()
    }
}

/// Runs maintenance with `policy`'s bounds unless some process of this
/// database ran it within [`EVERY`]. Errors are only worth a log line: the
/// next due run tries again.
pub async fn maintain_if_due(store: &Store, policy: &Policy) -> Option<MaintenanceReport> {
    let now = gatehouse_store::now_ms();
    match store
        .run_maintenance_if_due(now, EVERY.as_millis() as i64, &maintenance_policy(policy))
        .await
    {
        Ok(report) => report,
        // The process is exiting; the next due run tries again.
        Err(gatehouse_store::StoreError::Closed) => None,
        Err(err) => {
            tracing::warn!(%err, "database maintenance failed");
            None
        }
    }
}

/// The control plane's upkeep (`gatehouse up` and the tray app): checks
/// every quarter of [`EVERY`] with the policy in force, forever.
pub async fn run_hourly(store: Store, home: std::path::PathBuf) {
    loop {
        if let Ok(loaded) = gatehouse_config::load(&home) {
            maintain_if_due(&store, &loaded.policy).await;
        }
        tokio::time::sleep(EVERY / 4).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_limits_become_the_store_bounds() {
        let policy = gatehouse_config::check_text(
            "p",
            "[limits]\nevent_retention_days = 3\ndb_max_mb = 16\n",
        )
        .unwrap()
        .policy;
        let m = maintenance_policy(&policy);
        assert_eq!(m.events.max_age_ms, 3 * 24 * 60 * 60 * 1000);
        assert_eq!(m.events.max_bytes, 16 * 1024 * 1024);
        assert_eq!(
            m.call_window_max_age_ms,
            MaintenancePolicy::default().call_window_max_age_ms,
            "other bounds keep their defaults"
        );
    }
}

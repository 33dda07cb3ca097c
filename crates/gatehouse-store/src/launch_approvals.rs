//! `launch_approvals`: for `pinning.on_launch_change = "hold"`, the launch
//! fingerprint approved for each server (the first one seen, or one a
//! person approved) and a changed one waiting for approval. Rows are MAC'd:
//! a row whose MAC does not verify approves nothing.

use sha2::{Digest, Sha256};
use sqlx::SqliteConnection;

use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::mac::{self, Field, MacKey};
use crate::servers::LaunchPin;

const DOMAIN: &str = "launch_approvals.v1";

impl LaunchPin {
    /// A stable fingerprint of everything the pin records (path, hashes,
    /// package): `sha256:` and 64 hex digits.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            &self.exe_path,
            &self.exe_hash,
            &self.script_hash,
            &self.package_spec,
        ] {
            match part {
                None => h.update(b"n"),
                Some(s) => {
                    h.update(b"s");
                    h.update((s.len() as u64).to_be_bytes());
                    h.update(s.as_bytes());
                }
            }
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    }
}

/// One server's launch approval row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchApproval {
    pub server_id: String,
    /// The approved fingerprint; `None` when nothing is approved (or the
    /// row's MAC does not verify).
    pub approved: Option<String>,
    /// A changed fingerprint waiting for a person.
    pub pending: Option<String>,
    /// What the pending launch is (JSON: path, hashes, package).
    pub pending_json: Option<String>,
    pub updated_ms: i64,
    pub mac_valid: bool,
}

/// What [`Store::check_launch_approval`] decided for a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchCheck {
    /// The fingerprint is the approved one (or the first one seen).
    Approved,
    /// A changed launch: it waits for approval.
    Held {
        /// The approved fingerprint it differs from (`None`: none valid).
        approved: Option<String>,
    },
}

#[derive(sqlx::FromRow)]
struct Row {
    server_id: String,
    approved: String,
    pending: Option<String>,
    pending_json: Option<String>,
    updated_ms: i64,
    mac: Vec<u8>,
}

fn fields<'a>(
    server_id: &'a str,
    approved: &'a str,
    pending: Option<&'a str>,
    pending_json: Option<&'a str>,
    updated_ms: i64,
) -> [Field<'a>; 5] {
    [
        Field::Str(server_id),
        Field::Str(approved),
        Field::OptStr(pending),
        Field::OptStr(pending_json),
        Field::Int(updated_ms),
    ]
}

async fn read(
    key: &MacKey,
    conn: &mut SqliteConnection,
    server_id: &str,
) -> Result<Option<LaunchApproval>> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT server_id, approved, pending, pending_json, updated_ms, mac \
         FROM launch_approvals WHERE server_id = ?",
    )
    .bind(server_id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| {
        let mac_valid = mac::verify(
            key,
            DOMAIN,
            &fields(
                &r.server_id,
                &r.approved,
                r.pending.as_deref(),
                r.pending_json.as_deref(),
                r.updated_ms,
            ),
            &r.mac,
        );
        LaunchApproval {
            approved: (mac_valid && !r.approved.is_empty()).then_some(r.approved),
            server_id: r.server_id,
            pending: r.pending,
            pending_json: r.pending_json,
            updated_ms: r.updated_ms,
            mac_valid,
        }
    }))
}

async fn write(
    key: &MacKey,
    conn: &mut SqliteConnection,
    server_id: &str,
    approved: &str,
    pending: Option<&str>,
    pending_json: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    let tag = mac::compute(
        key,
        DOMAIN,
        &fields(server_id, approved, pending, pending_json, now_ms),
    );
    sqlx::query(
        "INSERT INTO launch_approvals (server_id, approved, pending, pending_json, updated_ms, mac) \
         VALUES (?, ?, ?, ?, ?, ?) \
         ON CONFLICT (server_id) DO UPDATE SET approved = excluded.approved, \
           pending = excluded.pending, pending_json = excluded.pending_json, \
           updated_ms = excluded.updated_ms, mac = excluded.mac",
    )
    .bind(server_id)
    .bind(approved)
    .bind(pending)
    .bind(pending_json)
    .bind(now_ms)
    .bind(tag)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

impl Store {
    /// Judges a launch of `server_id` with fingerprint `fingerprint` in one
    /// `BEGIN IMMEDIATE` transaction. Without a row, `baseline` (the
    /// fingerprint of the launch recorded before approvals existed, if any)
    /// is approved, and so is `fingerprint` when there is no baseline (first
    /// sight). A launch that differs from the approved one is recorded as
    /// pending (with `launch_json` for the person) and held.
    pub async fn check_launch_approval(
        &self,
        key: &MacKey,
        server_id: &str,
        fingerprint: &str,
        launch_json: &str,
        baseline: Option<&str>,
        now_ms: i64,
    ) -> Result<LaunchCheck> {
        // The common case, this very launch approved and nothing waiting,
        // is one read: no write lock on wrap's start-up path.
        if let Some(row) = self.launch_approval(key, server_id).await? {
            if row.approved.as_deref() == Some(fingerprint) && row.pending.is_none() {
                return Ok(LaunchCheck::Approved);
            }
        }
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let row = read(key, &mut tx, server_id).await?;
        let approved = match &row {
            Some(r) => r.approved.clone(),
            None => Some(baseline.unwrap_or(fingerprint).to_string()),
        };
        let check = if approved.as_deref() == Some(fingerprint) {
            // Approved; a stale pending change (changed back) is cleared.
            if row.as_ref().is_none_or(|r| r.pending.is_some()) {
                write(key, &mut tx, server_id, fingerprint, None, None, now_ms).await?;
            }
            LaunchCheck::Approved
        } else {
            let unchanged = row
                .as_ref()
                .is_some_and(|r| r.mac_valid && r.pending.as_deref() == Some(fingerprint));
            if !unchanged {
                write(
                    key,
                    &mut tx,
                    server_id,
                    approved.as_deref().unwrap_or(""),
                    Some(fingerprint),
                    Some(launch_json),
                    now_ms,
                )
                .await?;
            }
            LaunchCheck::Held { approved }
        };
        tx.commit().await?;
        Ok(check)
    }

    /// The launch approval row of `server_id`, MAC checked.
    pub async fn launch_approval(
        &self,
        key: &MacKey,
        server_id: &str,
    ) -> Result<Option<LaunchApproval>> {
        let mut conn = self.pool().acquire().await?;
        read(key, &mut conn, server_id).await
    }

    /// Approves the launch waiting for `server_id`: exactly `fingerprint`
    /// when given (a person approves what they were shown), else whatever
    /// waits. Returns the approved fingerprint; [`StoreError::NotFound`]
    /// when nothing waits, [`StoreError::Invalid`] when `fingerprint` is not
    /// the one waiting.
    pub async fn approve_launch(
        &self,
        key: &MacKey,
        server_id: &str,
        fingerprint: Option<&str>,
        now_ms: i64,
    ) -> Result<String> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let row = read(key, &mut tx, server_id).await?;
        let pending = row.and_then(|r| r.pending).ok_or(StoreError::NotFound {
            what: "launch waiting for approval",
        })?;
        if fingerprint.is_some_and(|f| f != pending) {
            return Err(StoreError::Invalid(
                "that fingerprint is not the launch waiting for approval",
            ));
        }
        write(key, &mut tx, server_id, &pending, None, None, now_ms).await?;
        tx.commit().await?;
        Ok(pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::mem;

    fn key() -> MacKey {
        MacKey::new([3; 32])
    }

    fn pin(exe_hash: &str) -> LaunchPin {
        LaunchPin {
            exe_path: Some("/usr/bin/node".into()),
            exe_hash: Some(exe_hash.into()),
            script_hash: None,
            package_spec: None,
        }
    }

    /// Fingerprints of two different launches of one server.
    fn two_launches() -> (String, String) {
        (
            pin("sha256:aa").fingerprint(),
            pin("sha256:bb").fingerprint(),
        )
    }

    #[tokio::test]
    async fn first_sight_is_approved_a_change_is_held_until_approved() {
        let store = mem().await;
        let (a, b) = two_launches();
        assert_ne!(a, b);
        let check = |fp: String| {
            let store = store.clone();
            async move {
                store
                    .check_launch_approval(&key(), "s", &fp, "{}", None, 1)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(check(a.clone()).await, LaunchCheck::Approved, "first sight");
        assert_eq!(check(a.clone()).await, LaunchCheck::Approved, "unchanged");
        assert_eq!(
            check(b.clone()).await,
            LaunchCheck::Held {
                approved: Some(a.clone())
            }
        );
        assert_eq!(
            check(b.clone()).await,
            LaunchCheck::Held {
                approved: Some(a.clone())
            },
            "held on every launch until a person approves"
        );
        let row = store.launch_approval(&key(), "s").await.unwrap().unwrap();
        assert_eq!(row.pending.as_deref(), Some(b.as_str()));
        assert!(row.mac_valid);

        assert!(
            matches!(
                store.approve_launch(&key(), "s", Some(&a), 2).await,
                Err(StoreError::Invalid(_))
            ),
            "only the launch waiting can be approved"
        );
        assert_eq!(store.approve_launch(&key(), "s", None, 2).await.unwrap(), b);
        assert_eq!(check(b.clone()).await, LaunchCheck::Approved, "approved");
        assert!(
            matches!(
                store.approve_launch(&key(), "s", None, 3).await,
                Err(StoreError::NotFound { .. })
            ),
            "nothing waits any more"
        );
    }

    #[tokio::test]
    async fn a_launch_changed_back_clears_what_waited() {
        let store = mem().await;
        let (a, b) = two_launches();
        let key = key();
        for (fp, held) in [(&a, false), (&b, true), (&a, false)] {
            let check = store
                .check_launch_approval(&key, "s", fp, "{}", None, 1)
                .await
                .unwrap();
            assert_eq!(matches!(check, LaunchCheck::Held { .. }), held, "{fp}");
        }
        let row = store.launch_approval(&key, "s").await.unwrap().unwrap();
        assert_eq!(
            row.pending, None,
            "the approved launch is back: nothing waits"
        );
        assert_eq!(row.approved.as_deref(), Some(a.as_str()));
    }

    #[tokio::test]
    async fn a_recorded_launch_from_before_approvals_is_the_baseline() {
        let store = mem().await;
        let (a, b) = two_launches();
        assert_eq!(
            store
                .check_launch_approval(&key(), "s", &b, "{}", Some(&a), 1)
                .await
                .unwrap(),
            LaunchCheck::Held {
                approved: Some(a.clone())
            }
        );
    }

    #[tokio::test]
    async fn a_row_with_a_bad_mac_approves_nothing() {
        let store = mem().await;
        let a = pin("sha256:aa").fingerprint();
        store
            .check_launch_approval(&key(), "s", &a, "{}", None, 1)
            .await
            .unwrap();
        // Same-user code approves another binary without the key.
        let b = pin("sha256:evil").fingerprint();
        sqlx::query("UPDATE launch_approvals SET approved = ? WHERE server_id = 's'")
            .bind(&b)
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(
            store
                .check_launch_approval(&key(), "s", &b, "{}", None, 2)
                .await
                .unwrap(),
            LaunchCheck::Held { approved: None },
            "a forged approval is not trusted"
        );
        assert!(
            store
                .check_launch_approval(&MacKey::new([4; 32]), "s", &b, "{}", None, 3)
                .await
                .unwrap()
                != LaunchCheck::Approved,
            "another install's key approves nothing"
        );
    }
}

//! `package_approvals`: packages a person approved to run although they
//! look like a typosquat of another (`cross_server.typosquat.packages`).
//! One row per (server, package spec); a row whose MAC does not verify
//! approves nothing.

use crate::db::Store;
use crate::error::Result;
use crate::mac::{self, Field, MacKey};

const DOMAIN: &str = "gatehouse.package_approvals.v1";

fn fields<'a>(server_id: &'a str, package: &'a str, approved_ms: i64) -> [Field<'a>; 3] {
    [
        Field::Str(server_id),
        Field::Str(package),
        Field::Int(approved_ms),
    ]
}

impl Store {
    /// Approves `package` for `server_id`.
    pub async fn approve_package(
        &self,
        key: &MacKey,
        server_id: &str,
        package: &str,
        now_ms: i64,
    ) -> Result<()> {
        let tag = mac::compute(key, DOMAIN, &fields(server_id, package, now_ms));
        sqlx::query(
            "INSERT INTO package_approvals (server_id, package, approved_ms, mac) \
             VALUES (?, ?, ?, ?) ON CONFLICT (server_id, package) DO UPDATE SET \
             approved_ms = excluded.approved_ms, mac = excluded.mac",
        )
        .bind(server_id)
        .bind(package)
        .bind(now_ms)
        .bind(tag)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Whether a person approved `package` for `server_id` (and the row
    /// verifies under `key`).
    pub async fn package_approved(
        &self,
        key: &MacKey,
        server_id: &str,
        package: &str,
    ) -> Result<bool> {
        let row: Option<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT approved_ms, mac FROM package_approvals WHERE server_id = ? AND package = ?",
        )
        .bind(server_id)
        .bind(package)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.is_some_and(|(approved_ms, tag)| {
            mac::verify(key, DOMAIN, &fields(server_id, package, approved_ms), &tag)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{key, mem};

    #[tokio::test]
    async fn approvals_are_per_server_and_package_and_verified() {
        let store = mem().await;
        let key = key();
        assert!(!store
            .package_approved(&key, "s", "mcp-server-fetchh")
            .await
            .unwrap());
        store
            .approve_package(&key, "s", "mcp-server-fetchh", 10)
            .await
            .unwrap();
        assert!(store
            .package_approved(&key, "s", "mcp-server-fetchh")
            .await
            .unwrap());
        assert!(
            !store
                .package_approved(&key, "t", "mcp-server-fetchh")
                .await
                .unwrap(),
            "another server is not approved"
        );
        assert!(
            !store
                .package_approved(&key, "s", "mcp-server-fetchh@2")
                .await
                .unwrap(),
            "another spec is not approved"
        );
        // someone with file access repoints the approval at another package
        sqlx::query("UPDATE package_approvals SET package = 'evil-pkg'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(!store.package_approved(&key, "s", "evil-pkg").await.unwrap());
        store.approve_package(&key, "s", "p", 10).await.unwrap();
        assert!(
            !store
                .package_approved(&MacKey::new([5; 32]), "s", "p")
                .await
                .unwrap(),
            "another install's key verifies nothing"
        );
    }
}

//! `secret_fingerprints`: keyed fingerprints of each protected server's vault
//! secrets, published by that server's wrap process and read by every other
//! one for the secret egress guard. The store treats them as opaque text;
//! it never sees a secret and never computes or checks a fingerprint.

use crate::db::Store;
use crate::error::Result;

/// One published fingerprint (`fingerprint` is opaque to the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFingerprint {
    pub server_id: String,
    pub name: String,
    pub fingerprint: String,
}

/// Rows are parsed as untrusted input: bounded sizes only.
const MAX_FIELD: usize = 512;

impl Store {
    /// Replaces `server_id`'s fingerprints with `items` (name, fingerprint)
    /// in one transaction; an empty `items` removes them.
    pub async fn replace_fingerprints(
        &self,
        server_id: &str,
        items: &[(&str, &str)],
        now_ms: i64,
    ) -> Result<()> {
        let _gate = self.write_gate().await;
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("DELETE FROM secret_fingerprints WHERE server_id = ?")
            .bind(server_id)
            .execute(&mut *tx)
            .await?;
        for (name, fingerprint) in items {
            sqlx::query(
                "INSERT OR REPLACE INTO secret_fingerprints \
                 (server_id, name, fingerprint, updated_ms) VALUES (?, ?, ?, ?)",
            )
            .bind(server_id)
            .bind(name)
            .bind(fingerprint)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A value that changes whenever any server's fingerprints change
    /// (row count and newest update), so readers reload only then.
    pub async fn fingerprints_generation(&self) -> Result<(i64, i64)> {
        let row: (i64, i64) = sqlx::query_as(
            "SELECT count(*), coalesce(max(updated_ms), 0) FROM secret_fingerprints",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(row)
    }

    /// Every published fingerprint, ordered by server and name, with their
    /// generation ([`Store::fingerprints_generation`]) from the same read.
    pub async fn list_fingerprints(&self) -> Result<((i64, i64), Vec<StoredFingerprint>)> {
        let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
            "SELECT server_id, name, fingerprint, updated_ms FROM secret_fingerprints \
             ORDER BY server_id, name",
        )
        .fetch_all(self.pool())
        .await?;
        let newest = rows.iter().map(|r| r.3).max().unwrap_or(0);
        let generation = (rows.len() as i64, newest);
        let fingerprints = rows
            .into_iter()
            .filter_map(|(server_id, name, fingerprint, _)| {
                // One row written wrong (the table is STRICT: only too
                // long) must not take the others out of the guard.
                if [&server_id, &name, &fingerprint]
                    .iter()
                    .any(|f| f.len() > MAX_FIELD)
                {
                    tracing::warn!(
                        table = "secret_fingerprints",
                        "a row with a field too long is skipped"
                    );
                    return None;
                }
                Some(StoredFingerprint {
                    server_id,
                    name,
                    fingerprint,
                })
            })
            .collect();
        Ok((generation, fingerprints))
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::mem;

    #[tokio::test]
    async fn publish_replace_and_read_back() {
        let store = mem().await;
        assert_eq!(store.fingerprints_generation().await.unwrap(), (0, 0));
        store
            .replace_fingerprints("srv_a", &[("TOKEN", "v1:a"), ("KEY", "v1:b")], 10)
            .await
            .unwrap();
        store
            .replace_fingerprints("srv_b", &[("PW", "v1:c")], 11)
            .await
            .unwrap();
        let gen = store.fingerprints_generation().await.unwrap();
        assert_eq!(gen, (3, 11));
        let (listed, all) = store.list_fingerprints().await.unwrap();
        assert_eq!(listed, gen, "the list's generation is the same");
        let names: Vec<_> = all
            .iter()
            .map(|f| {
                (
                    f.server_id.as_str(),
                    f.name.as_str(),
                    f.fingerprint.as_str(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("srv_a", "KEY", "v1:b"),
                ("srv_a", "TOKEN", "v1:a"),
                ("srv_b", "PW", "v1:c")
            ]
        );
        // A restart with a rotated secret replaces the server's rows only.
        store
            .replace_fingerprints("srv_a", &[("TOKEN", "v1:z")], 12)
            .await
            .unwrap();
        assert_eq!(store.fingerprints_generation().await.unwrap(), (2, 12));
        store.replace_fingerprints("srv_b", &[], 13).await.unwrap();
        let (listed, all) = store.list_fingerprints().await.unwrap();
        assert_eq!(listed, (1, 12));
        assert_eq!(all.len(), 1, "empty items remove the server's rows");
        assert_eq!(all[0].fingerprint, "v1:z");
    }

    /// A row written wrong by another process is skipped; the others stay
    /// in the guard's list.
    #[tokio::test]
    async fn a_row_written_wrong_does_not_hide_the_others() {
        let store = mem().await;
        store
            .replace_fingerprints("srv_a", &[("TOKEN", "v1:a")], 10)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO secret_fingerprints (server_id, name, fingerprint, updated_ms) \
             VALUES ('srv_x', 'LONG', printf('%.600c', 'x'), 11)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let (generation, all) = store.list_fingerprints().await.unwrap();
        let listed: Vec<_> = all.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(listed, ["TOKEN"]);
        assert_eq!(generation, (2, 11), "the generation counts every row");
    }
}

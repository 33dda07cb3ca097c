//! `meta`: small key/value settings (last good policy text, install id, …).
//! Values are text; nothing secret belongs here.

use crate::db::Store;
use crate::error::Result;

impl Store {
    /// The value stored under `key`.
    pub async fn get_meta(&self, key: &str) -> Result<Option<String>> {
        let value = sqlx::query_scalar("SELECT value FROM meta WHERE key = ?")
            .bind(key)
            .fetch_optional(self.pool())
            .await?;
        Ok(value)
    }

    /// Stores `value` under `key`, replacing any previous value.
    pub async fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES (?, ?) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Stores `value` under `key` only if the key is absent; returns the value
    /// now stored (e.g. the first process to create an install id wins).
    pub async fn init_meta(&self, key: &str, value: &str) -> Result<String> {
        sqlx::query("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING")
            .bind(key)
            .bind(value)
            .execute(self.pool())
            .await?;
        let stored = sqlx::query_scalar("SELECT value FROM meta WHERE key = ?")
            .bind(key)
            .fetch_one(self.pool())
            .await?;
        Ok(stored)
    }

    /// Removes `key`; true if it existed.
    pub async fn delete_meta(&self, key: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM meta WHERE key = ?")
            .bind(key)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::mem;

    #[tokio::test]
    async fn meta_round_trip() {
        let store = mem().await;
        assert_eq!(store.get_meta("policy").await.unwrap(), None);
        store.set_meta("policy", "a").await.unwrap();
        store.set_meta("policy", "b").await.unwrap();
        assert_eq!(
            store.get_meta("policy").await.unwrap().as_deref(),
            Some("b"),
            "set replaces"
        );
        assert_eq!(
            store.init_meta("install_id", "first").await.unwrap(),
            "first"
        );
        assert_eq!(
            store.init_meta("install_id", "second").await.unwrap(),
            "first",
            "init keeps the first value"
        );
        assert!(store.delete_meta("policy").await.unwrap());
        assert!(!store.delete_meta("policy").await.unwrap(), "already gone");
        assert_eq!(store.get_meta("policy").await.unwrap(), None);
    }
}

//! `server_modes`: a server's mode (normal, paused = audit only, restricted).
//! Rows carry a MAC: a forged "paused" would switch protection off.

use crate::db::Store;
use crate::error::{corrupt, Result};
use crate::mac::{self, Field, MacKey};

const DOMAIN: &str = "gatehouse.server_modes.v1";

/// Mode of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerMode {
    /// Full protection.
    Normal,
    /// Audit only: record, never block.
    Paused,
    /// Trust level that only filters tools.
    Restricted,
}

impl ServerMode {
    /// Stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerMode::Normal => "normal",
            ServerMode::Paused => "paused",
            ServerMode::Restricted => "restricted",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "normal" => Some(ServerMode::Normal),
            "paused" => Some(ServerMode::Paused),
            "restricted" => Some(ServerMode::Restricted),
            _ => None,
        }
    }
}

/// A mode row as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeRecord {
    pub server_id: String,
    /// What the row claims.
    pub mode: ServerMode,
    pub set_ms: i64,
    /// False when the MAC does not verify under the caller's key: the claim
    /// must be ignored and the tampering reported.
    pub mac_valid: bool,
}

impl ModeRecord {
    /// The mode to act on: `None` when the row's MAC is bad (it claims nothing).
    pub fn effective(&self) -> Option<ServerMode> {
        self.mac_valid.then_some(self.mode)
    }
}

#[derive(sqlx::FromRow)]
struct ModeRow {
    server_id: String,
    mode: String,
    set_ms: i64,
    mac: Vec<u8>,
}

fn fields<'a>(server_id: &'a str, mode: &'a str, set_ms: i64) -> [Field<'a>; 3] {
    [Field::Str(server_id), Field::Str(mode), Field::Int(set_ms)]
}

fn parse(key: &MacKey, row: ModeRow) -> Result<ModeRecord> {
    let mode =
        ServerMode::parse(&row.mode).ok_or_else(|| corrupt("server_modes", "unknown mode"))?;
    let mac_valid = mac::verify(
        key,
        DOMAIN,
        &fields(&row.server_id, &row.mode, row.set_ms),
        &row.mac,
    );
    Ok(ModeRecord {
        server_id: row.server_id,
        mode,
        set_ms: row.set_ms,
        mac_valid,
    })
}

impl Store {
    /// Sets a server's mode, MAC'd with `key`.
    pub async fn set_server_mode(
        &self,
        key: &MacKey,
        server_id: &str,
        mode: ServerMode,
        now_ms: i64,
    ) -> Result<()> {
        let tag = mac::compute(key, DOMAIN, &fields(server_id, mode.as_str(), now_ms));
        sqlx::query(
            "INSERT INTO server_modes (server_id, mode, set_ms, mac) VALUES (?, ?, ?, ?) \
             ON CONFLICT (server_id) DO UPDATE SET mode = excluded.mode, \
                 set_ms = excluded.set_ms, mac = excluded.mac",
        )
        .bind(server_id)
        .bind(mode.as_str())
        .bind(now_ms)
        .bind(tag)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// A server's mode row, `None` when never set (normal).
    pub async fn get_server_mode(
        &self,
        key: &MacKey,
        server_id: &str,
    ) -> Result<Option<ModeRecord>> {
        let row: Option<ModeRow> = sqlx::query_as(
            "SELECT server_id, mode, set_ms, mac FROM server_modes WHERE server_id = ?",
        )
        .bind(server_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| parse(key, row)).transpose()
    }

    /// Every mode row.
    pub async fn list_server_modes(&self, key: &MacKey) -> Result<Vec<ModeRecord>> {
        let rows: Vec<ModeRow> = sqlx::query_as(
            "SELECT server_id, mode, set_ms, mac FROM server_modes ORDER BY server_id",
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(|row| parse(key, row)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{key, mem};

    #[tokio::test]
    async fn modes_round_trip_and_tamper() {
        let store = mem().await;
        let key = key();
        assert_eq!(store.get_server_mode(&key, "s").await.unwrap(), None);
        store
            .set_server_mode(&key, "s", ServerMode::Restricted, 10)
            .await
            .unwrap();
        store
            .set_server_mode(&key, "t", ServerMode::Normal, 10)
            .await
            .unwrap();
        let record = store.get_server_mode(&key, "s").await.unwrap().unwrap();
        assert_eq!(record.effective(), Some(ServerMode::Restricted));
        // Someone with file access flips "restricted" to "paused".
        sqlx::query("UPDATE server_modes SET mode = 'paused' WHERE server_id = 's'")
            .execute(store.pool())
            .await
            .unwrap();
        let record = store.get_server_mode(&key, "s").await.unwrap().unwrap();
        assert!(!record.mac_valid, "an edited mode must fail its MAC");
        assert_eq!(
            record.effective(),
            None,
            "a forged pause must not take effect"
        );
        let other = MacKey::new([1; 32]);
        let all = store.list_server_modes(&other).await.unwrap();
        assert!(
            all.iter().all(|r| !r.mac_valid),
            "another install's key verifies nothing"
        );
        sqlx::query("UPDATE server_modes SET mode = 'asleep'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(
            store.list_server_modes(&key).await.is_err(),
            "unknown mode is a corrupt row"
        );
    }
}

//! `tools`: every distinct tool definition ever seen, kept for diffs and for
//! "approve exactly the hash you were shown". Rows are only added.

use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::util::{check_json, non_negative};

/// A tool definition as seen on the wire, hashed by the engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenTool {
    pub server_id: String,
    pub name: String,
    /// Hash of the canonical form (the engine's, e.g. JCS + SHA-256, hex).
    pub hash: String,
    /// Version of the canonical form that produced `hash`.
    pub hash_version: i64,
    /// The whole definition as JSON text.
    pub definition_json: String,
}

/// A stored tool definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDefinition {
    pub server_id: String,
    pub name: String,
    pub hash: String,
    pub hash_version: i64,
    pub definition_json: String,
    pub first_seen_ms: i64,
}

#[derive(sqlx::FromRow)]
struct ToolRow {
    server_id: String,
    name: String,
    hash: String,
    hash_version: i64,
    definition: String,
    first_seen_ms: i64,
}

impl TryFrom<ToolRow> for ToolDefinition {
    type Error = StoreError;

    fn try_from(row: ToolRow) -> Result<Self> {
        check_json("tools", "definition", &row.definition)?;
        Ok(ToolDefinition {
            server_id: row.server_id,
            name: row.name,
            hash: row.hash,
            hash_version: non_negative("tools", "hash_version", row.hash_version)?,
            definition_json: row.definition,
            first_seen_ms: row.first_seen_ms,
        })
    }
}

macro_rules! tool_columns {
    () => {
        "server_id, name, hash, hash_version, definition, first_seen_ms"
    };
}

pub(crate) fn validate_seen(tool: &SeenTool) -> Result<()> {
    if tool.server_id.is_empty() || tool.name.is_empty() || tool.hash.is_empty() {
        return Err(StoreError::Invalid(
            "tool needs a server id, a name and a hash",
        ));
    }
    if tool.hash_version < 0 {
        return Err(StoreError::Invalid("hash version must not be negative"));
    }
    check_json("tools", "definition", &tool.definition_json)
        .map_err(|_| StoreError::Invalid("tool definition is not valid JSON"))
}

impl Store {
    /// Stores a definition unless that exact (server, name, hash) is known;
    /// true when it was new.
    pub async fn record_tool_definition(&self, tool: &SeenTool, now_ms: i64) -> Result<bool> {
        validate_seen(tool)?;
        let done = sqlx::query(
            "INSERT INTO tools (server_id, name, hash, hash_version, definition, first_seen_ms) \
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (server_id, name, hash) DO NOTHING",
        )
        .bind(&tool.server_id)
        .bind(&tool.name)
        .bind(&tool.hash)
        .bind(tool.hash_version)
        .bind(&tool.definition_json)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One stored definition.
    pub async fn tool_definition(
        &self,
        server_id: &str,
        name: &str,
        hash: &str,
    ) -> Result<Option<ToolDefinition>> {
        let row: Option<ToolRow> = sqlx::query_as(concat!(
            "SELECT ",
            tool_columns!(),
            " FROM tools WHERE server_id = ? AND name = ? AND hash = ?"
        ))
        .bind(server_id)
        .bind(name)
        .bind(hash)
        .fetch_optional(self.pool())
        .await?;
        row.map(ToolDefinition::try_from).transpose()
    }

    /// Every version of one tool, oldest first (for diffs).
    pub async fn tool_versions(&self, server_id: &str, name: &str) -> Result<Vec<ToolDefinition>> {
        let rows: Vec<ToolRow> = sqlx::query_as(concat!(
            "SELECT ",
            tool_columns!(),
            " FROM tools WHERE server_id = ? AND name = ? ORDER BY first_seen_ms, rowid"
        ))
        .bind(server_id)
        .bind(name)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(ToolDefinition::try_from).collect()
    }

    /// Every definition of every tool of a server, by name then age.
    pub async fn tools_of_server(&self, server_id: &str) -> Result<Vec<ToolDefinition>> {
        let rows: Vec<ToolRow> = sqlx::query_as(concat!(
            "SELECT ",
            tool_columns!(),
            " FROM tools WHERE server_id = ? ORDER BY name, first_seen_ms, rowid"
        ))
        .bind(server_id)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(ToolDefinition::try_from).collect()
    }

    /// True once any tool definition or pin was ever recorded. Pin resets do
    /// not clear it (definitions are never deleted).
    pub async fn has_ever_pinned(&self) -> Result<bool> {
        let seen: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM tools) OR EXISTS (SELECT 1 FROM pins)",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(seen)
    }

    /// True for a database that knows no server registered by `gatehouse
    /// protect` and has never seen a tool: if wrapped configs exist anyway,
    /// the database was lost or replaced, and nothing may be trusted at
    /// first sight (DESIGN §6).
    pub async fn database_is_fresh(&self) -> Result<bool> {
        let fresh: bool = sqlx::query_scalar(
            "SELECT NOT EXISTS (SELECT 1 FROM tools) AND NOT EXISTS (SELECT 1 FROM pins) \
                AND NOT EXISTS (SELECT 1 FROM servers WHERE origin = 'protect')",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(fresh)
    }
}

//! `servers`: Gatehouse-assigned server ids, their identity binding (the
//! hash of the launch command) and their launch pin.

use crate::db::Store;
use crate::error::{corrupt, Result};
use crate::util::check_json;

/// What `gatehouse protect` records for a wrapped config entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewServer {
    /// Opaque id protect assigned (written into the wrapped entry).
    pub id: String,
    pub display_name: String,
    pub client: String,
    pub config_path: String,
    pub scope: String,
    pub entry_name: String,
    /// Hash of the launch command (identity).
    pub command_hash: String,
    /// The launch argv as a JSON array.
    pub argv_json: String,
    pub cwd: Option<String>,
}

/// Who created a server row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOrigin {
    /// Registered by `gatehouse protect`.
    Protect,
    /// Bound by `gatehouse wrap` on first sight of an unknown id.
    Wrap,
}

impl ServerOrigin {
    fn as_str(self) -> &'static str {
        match self {
            ServerOrigin::Protect => "protect",
            ServerOrigin::Wrap => "wrap",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "protect" => Some(ServerOrigin::Protect),
            "wrap" => Some(ServerOrigin::Wrap),
            _ => None,
        }
    }
}

/// Launch pin: what was actually executed (change detection, DESIGN §6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchPin {
    /// Resolved absolute path of the executable.
    pub exe_path: Option<String>,
    /// Hash of that executable.
    pub exe_hash: Option<String>,
    /// Hash of the script for known interpreters (`node x.js`).
    pub script_hash: Option<String>,
    /// Package spec for `npx`/`uvx`/`pipx`.
    pub package_spec: Option<String>,
}

/// A server row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: String,
    pub origin: ServerOrigin,
    pub display_name: Option<String>,
    pub client: Option<String>,
    pub config_path: Option<String>,
    pub scope: Option<String>,
    pub entry_name: Option<String>,
    pub command_hash: String,
    pub argv_json: Option<String>,
    pub cwd: Option<String>,
    /// `None` until `record_launch` ran once.
    pub launch: Option<LaunchPin>,
    pub launch_recorded_ms: Option<i64>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

/// Result of [`Store::check_identity`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The id was unknown; it is now bound to this command hash.
    FirstSeen,
    /// The command hashes to the recorded value.
    Match,
    /// The id is bound to another command: no shared pins, no secrets.
    Mismatch { recorded_hash: String },
}

#[derive(sqlx::FromRow)]
struct ServerRow {
    id: String,
    origin: String,
    display_name: Option<String>,
    client: Option<String>,
    config_path: Option<String>,
    scope: Option<String>,
    entry_name: Option<String>,
    command_hash: String,
    argv_json: Option<String>,
    cwd: Option<String>,
    exe_path: Option<String>,
    exe_hash: Option<String>,
    script_hash: Option<String>,
    package_spec: Option<String>,
    launch_recorded_ms: Option<i64>,
    first_seen_ms: i64,
    last_seen_ms: i64,
}

macro_rules! server_columns {
    () => {
        "id, origin, display_name, client, config_path, scope, entry_name, command_hash, \
         argv_json, cwd, exe_path, exe_hash, script_hash, package_spec, launch_recorded_ms, \
         first_seen_ms, last_seen_ms"
    };
}

impl TryFrom<ServerRow> for Server {
    type Error = crate::StoreError;

    fn try_from(row: ServerRow) -> Result<Self> {
        let origin =
            ServerOrigin::parse(&row.origin).ok_or_else(|| corrupt("servers", "unknown origin"))?;
        if let Some(argv) = &row.argv_json {
            check_json("servers", "argv_json", argv)?;
        }
        let launch = row.launch_recorded_ms.map(|_| LaunchPin {
            exe_path: row.exe_path,
            exe_hash: row.exe_hash,
            script_hash: row.script_hash,
            package_spec: row.package_spec,
        });
        Ok(Server {
            id: row.id,
            origin,
            display_name: row.display_name,
            client: row.client,
            config_path: row.config_path,
            scope: row.scope,
            entry_name: row.entry_name,
            command_hash: row.command_hash,
            argv_json: row.argv_json,
            cwd: row.cwd,
            launch,
            launch_recorded_ms: row.launch_recorded_ms,
            first_seen_ms: row.first_seen_ms,
            last_seen_ms: row.last_seen_ms,
        })
    }
}

impl Store {
    /// Records (or re-records) a wrapped config entry. Re-protecting an id
    /// updates its registration and identity hash and keeps `first_seen_ms`.
    pub async fn register_protected_server(&self, server: &NewServer, now_ms: i64) -> Result<()> {
        if server.id.is_empty() || server.command_hash.is_empty() {
            return Err(crate::StoreError::Invalid(
                "server id and command hash are required",
            ));
        }
        check_json("servers", "argv_json", &server.argv_json)?;
        sqlx::query(
            "INSERT INTO servers (id, origin, display_name, client, config_path, scope, entry_name, \
                                  command_hash, argv_json, cwd, first_seen_ms, last_seen_ms) \
             VALUES (?, 'protect', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (id) DO UPDATE SET origin = 'protect', \
                 display_name = excluded.display_name, client = excluded.client, \
                 config_path = excluded.config_path, scope = excluded.scope, \
                 entry_name = excluded.entry_name, command_hash = excluded.command_hash, \
                 argv_json = excluded.argv_json, cwd = excluded.cwd, \
                 last_seen_ms = excluded.last_seen_ms",
        )
        .bind(&server.id)
        .bind(&server.display_name)
        .bind(&server.client)
        .bind(&server.config_path)
        .bind(&server.scope)
        .bind(&server.entry_name)
        .bind(&server.command_hash)
        .bind(&server.argv_json)
        .bind(&server.cwd)
        .bind(now_ms)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Binds `server_id` to `command_hash` if the id is unknown (atomically:
    /// of two processes racing, exactly one sees `FirstSeen`), otherwise
    /// compares. A match refreshes `last_seen_ms`.
    pub async fn check_identity(
        &self,
        server_id: &str,
        command_hash: &str,
        now_ms: i64,
    ) -> Result<Identity> {
        if server_id.is_empty() || command_hash.is_empty() {
            return Err(crate::StoreError::Invalid(
                "server id and command hash are required",
            ));
        }
        let inserted = sqlx::query(
            "INSERT INTO servers (id, origin, command_hash, first_seen_ms, last_seen_ms) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        )
        .bind(server_id)
        .bind(ServerOrigin::Wrap.as_str())
        .bind(command_hash)
        .bind(now_ms)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(Identity::FirstSeen);
        }
        // Refresh last_seen only when the hash matches; report what is recorded.
        let matched = sqlx::query(
            "UPDATE servers SET last_seen_ms = MAX(last_seen_ms, ?) WHERE id = ? AND command_hash = ?",
        )
        .bind(now_ms)
        .bind(server_id)
        .bind(command_hash)
        .execute(self.pool())
        .await?;
        if matched.rows_affected() == 1 {
            return Ok(Identity::Match);
        }
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT command_hash FROM servers WHERE id = ?")
                .bind(server_id)
                .fetch_optional(self.pool())
                .await?;
        match recorded {
            Some(recorded_hash) => Ok(Identity::Mismatch { recorded_hash }),
            // Deleted between our statements: treat as unknown, never as a match.
            None => Err(crate::StoreError::NotFound { what: "server" }),
        }
    }

    /// Records what was executed for `server_id` and returns the previous
    /// launch pin (`None` the first time) for the caller to compare. One
    /// `BEGIN IMMEDIATE` transaction, so two launches cannot both see the
    /// same "previous".
    pub async fn record_launch(
        &self,
        server_id: &str,
        launch: &LaunchPin,
        now_ms: i64,
    ) -> Result<Option<LaunchPin>> {
        let mut tx = self.pool().begin_with("BEGIN IMMEDIATE").await?;
        let row: Option<ServerRow> = sqlx::query_as(concat!(
            "SELECT ",
            server_columns!(),
            " FROM servers WHERE id = ?"
        ))
        .bind(server_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(crate::StoreError::NotFound { what: "server" });
        };
        let previous = Server::try_from(row)?.launch;
        sqlx::query(
            "UPDATE servers SET exe_path = ?, exe_hash = ?, script_hash = ?, package_spec = ?, \
                 launch_recorded_ms = ?, last_seen_ms = MAX(last_seen_ms, ?) WHERE id = ?",
        )
        .bind(&launch.exe_path)
        .bind(&launch.exe_hash)
        .bind(&launch.script_hash)
        .bind(&launch.package_spec)
        .bind(now_ms)
        .bind(now_ms)
        .bind(server_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(previous)
    }

    /// One server.
    pub async fn get_server(&self, server_id: &str) -> Result<Option<Server>> {
        let row: Option<ServerRow> = sqlx::query_as(concat!(
            "SELECT ",
            server_columns!(),
            " FROM servers WHERE id = ?"
        ))
        .bind(server_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(Server::try_from).transpose()
    }

    /// All servers, by id.
    pub async fn list_servers(&self) -> Result<Vec<Server>> {
        let rows: Vec<ServerRow> = sqlx::query_as(concat!(
            "SELECT ",
            server_columns!(),
            " FROM servers ORDER BY id"
        ))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(Server::try_from).collect()
    }

    /// Servers bound to `command_hash` (two entries with one launch command
    /// are the same server, not a shadow).
    pub async fn servers_with_command_hash(&self, command_hash: &str) -> Result<Vec<Server>> {
        let rows: Vec<ServerRow> = sqlx::query_as(concat!(
            "SELECT ",
            server_columns!(),
            " FROM servers WHERE command_hash = ? ORDER BY id"
        ))
        .bind(command_hash)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(Server::try_from).collect()
    }
}

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
        check_json("servers", "argv_json", &server.argv_json)
            .map_err(|_| crate::StoreError::Invalid("argv is not a JSON value"))?;
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
    /// of processes racing with different commands, exactly one binds the
    /// id and the others see `Mismatch`), otherwise compares. A known id is
    /// only read — no write, so no journal sync, on wrap's start-up path;
    /// [`Store::seen`] refreshes `last_seen_ms` afterwards.
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
        if let Some(recorded) = self.recorded_command(server_id).await? {
            return Ok(identity_of(recorded, command_hash));
        }
        let bound: Option<i64> = sqlx::query_scalar(
            "INSERT INTO servers (id, origin, command_hash, first_seen_ms, last_seen_ms) \
             VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (id) DO NOTHING RETURNING 1",
        )
        .bind(server_id)
        .bind(ServerOrigin::Wrap.as_str())
        .bind(command_hash)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?;
        if bound.is_some() {
            return Ok(Identity::FirstSeen);
        }
        // Another process bound it between our statements.
        match self.recorded_command(server_id).await? {
            Some(recorded) => Ok(identity_of(recorded, command_hash)),
            // ... and it was deleted since: unknown, never a match.
            None => Err(crate::StoreError::NotFound { what: "server" }),
        }
    }

    /// [`Store::check_identity`] together with the server's row, looked up
    /// in `known` (every server, from one [`Store::list_servers`] at wrap's
    /// start, which its typosquat checks read too): a known id costs no
    /// statement of its own.
    pub async fn identify(
        &self,
        known: &[Server],
        server_id: &str,
        command_hash: &str,
        now_ms: i64,
    ) -> Result<(Identity, Option<Server>)> {
        if let Some(server) = known.iter().find(|s| s.id == server_id) {
            let identity = identity_of(server.command_hash.clone(), command_hash);
            return Ok((identity, Some(server.clone())));
        }
        // Unknown, or not read (a row that does not read back fails the
        // whole list): the binding decides.
        let identity = self.check_identity(server_id, command_hash, now_ms).await?;
        Ok((identity, self.get_server(server_id).await.ok().flatten()))
    }

    /// Refreshes `last_seen_ms` of a server whose identity matched.
    pub async fn seen(&self, server_id: &str, now_ms: i64) -> Result<()> {
        sqlx::query("UPDATE servers SET last_seen_ms = MAX(last_seen_ms, ?) WHERE id = ?")
            .bind(now_ms)
            .bind(server_id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn recorded_command(&self, server_id: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT command_hash FROM servers WHERE id = ?")
                .bind(server_id)
                .fetch_optional(self.pool())
                .await?,
        )
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
        let _gate = self.write_gate().await;
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

/// A bound id's identity for `command_hash`.
fn identity_of(recorded_hash: String, command_hash: &str) -> Identity {
    if recorded_hash == command_hash {
        Identity::Match
    } else {
        Identity::Mismatch { recorded_hash }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{mem, patient, TempHome};
    use crate::StoreError;

    fn entry(id: &str, hash: &str) -> NewServer {
        NewServer {
            id: id.into(),
            display_name: "GitHub".into(),
            client: "cursor".into(),
            config_path: "/home/u/.cursor/mcp.json".into(),
            scope: "user".into(),
            entry_name: "github".into(),
            command_hash: hash.into(),
            argv_json: r#"["npx","-y","@modelcontextprotocol/server-github"]"#.into(),
            cwd: Some("/home/u".into()),
        }
    }

    #[tokio::test]
    async fn register_and_read_back() {
        let store = mem().await;
        store
            .register_protected_server(&entry("srv1", "h1"), 100)
            .await
            .unwrap();
        store
            .register_protected_server(&entry("srv2", "h1"), 110)
            .await
            .unwrap();
        let server = store.get_server("srv1").await.unwrap().expect("registered");
        assert_eq!(server.origin, ServerOrigin::Protect);
        assert_eq!(server.command_hash, "h1");
        assert_eq!(server.entry_name.as_deref(), Some("github"));
        assert_eq!(server.launch, None, "no launch recorded yet");
        assert_eq!((server.first_seen_ms, server.last_seen_ms), (100, 100));
        // Re-protecting keeps first_seen and takes the new hash.
        store
            .register_protected_server(&entry("srv1", "h2"), 200)
            .await
            .unwrap();
        let server = store.get_server("srv1").await.unwrap().unwrap();
        assert_eq!(
            (
                server.command_hash.as_str(),
                server.first_seen_ms,
                server.last_seen_ms
            ),
            ("h2", 100, 200)
        );
        let ids: Vec<_> = store
            .list_servers()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(ids, ["srv1", "srv2"]);
        let same: Vec<_> = store
            .servers_with_command_hash("h1")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(same, ["srv2"]);
        assert!(store.get_server("nope").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn register_refuses_bad_input() {
        let store = mem().await;
        let mut bad = entry("x", "h");
        bad.argv_json = "[not json".into();
        assert!(matches!(
            store.register_protected_server(&bad, 1).await,
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            store.register_protected_server(&entry("", "h"), 1).await,
            Err(StoreError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn identity_binds_on_first_sight() {
        let store = mem().await;
        let check = |id: &'static str, hash: &'static str, now: i64| {
            let store = store.clone();
            async move { store.check_identity(id, hash, now).await.unwrap() }
        };
        assert_eq!(check("a", "h1", 10).await, Identity::FirstSeen);
        assert_eq!(check("a", "h1", 20).await, Identity::Match);
        store.seen("a", 20).await.unwrap();
        assert_eq!(
            check("a", "evil", 30).await,
            Identity::Mismatch {
                recorded_hash: "h1".into()
            },
            "a different command must not share the id"
        );
        let server = store.get_server("a").await.unwrap().unwrap();
        assert_eq!(server.origin, ServerOrigin::Wrap);
        assert_eq!(
            server.last_seen_ms, 20,
            "a mismatch must not refresh last_seen"
        );
        // A protected server's registered hash is the binding.
        store
            .register_protected_server(&entry("p", "hp"), 1)
            .await
            .unwrap();
        assert_eq!(check("p", "hp", 5).await, Identity::Match);
        assert_eq!(
            check("p", "hx", 5).await,
            Identity::Mismatch {
                recorded_hash: "hp".into()
            }
        );
    }

    #[tokio::test]
    async fn identify_reads_a_known_id_once_and_binds_an_unknown_one() {
        let store = mem().await;
        let (first, row) = store.identify(&[], "a", "h1", 10).await.unwrap();
        assert_eq!(first, Identity::FirstSeen);
        assert_eq!(row.unwrap().first_seen_ms, 10, "the new row comes back");
        let known = store.list_servers().await.unwrap();
        let (again, row) = store.identify(&known, "a", "h1", 20).await.unwrap();
        assert_eq!(again, Identity::Match);
        assert_eq!(row.unwrap().last_seen_ms, 10, "a known id is only read");
        let (other, _) = store.identify(&known, "a", "evil", 30).await.unwrap();
        assert_eq!(
            other,
            Identity::Mismatch {
                recorded_hash: "h1".into()
            }
        );
        // Not among `known` (not read, or not yet): the binding still decides.
        let (unread, row) = store.identify(&[], "a", "evil", 35).await.unwrap();
        assert!(matches!(unread, Identity::Mismatch { .. }));
        assert_eq!(row.unwrap().id, "a");
        // A row that does not read back is still compared by its hash.
        sqlx::query("UPDATE servers SET origin = 'bogus' WHERE id = 'a'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(store.list_servers().await.is_err());
        let (broken, row) = store.identify(&[], "a", "evil", 40).await.unwrap();
        assert!(matches!(broken, Identity::Mismatch { .. }) && row.is_none());
    }

    #[tokio::test]
    async fn identity_race_has_one_winner() {
        let tmp = TempHome::new();
        for round in 0..10 {
            let id = format!("srv{round}");
            let mut tasks = Vec::new();
            for k in 0..6 {
                let store = tmp.open_with(patient()).await;
                let id = id.clone();
                tasks.push(tokio::spawn(async move {
                    let hash = format!("h{k}");
                    (
                        hash.clone(),
                        store.check_identity(&id, &hash, 1).await.unwrap(),
                    )
                }));
            }
            let mut results = Vec::new();
            for task in tasks {
                results.push(task.await.unwrap());
            }
            let winners: Vec<_> = results
                .iter()
                .filter(|(_, r)| *r == Identity::FirstSeen)
                .collect();
            assert_eq!(
                winners.len(),
                1,
                "round {round}: exactly one process binds the id"
            );
            let bound = winners[0].0.clone();
            for (hash, result) in &results {
                if *hash != bound {
                    assert_eq!(
                        *result,
                        Identity::Mismatch {
                            recorded_hash: bound.clone()
                        }
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn record_launch_returns_previous() {
        let store = mem().await;
        assert!(matches!(
            store.record_launch("ghost", &LaunchPin::default(), 1).await,
            Err(StoreError::NotFound { .. })
        ));
        store
            .register_protected_server(&entry("s", "h"), 1)
            .await
            .unwrap();
        let first = LaunchPin {
            exe_path: Some("/usr/bin/node".into()),
            exe_hash: Some("e1".into()),
            script_hash: Some("s1".into()),
            package_spec: Some("@scope/pkg@1.2.3".into()),
        };
        assert_eq!(
            store.record_launch("s", &first, 5).await.unwrap(),
            None,
            "first launch has no previous"
        );
        let second = LaunchPin {
            exe_hash: Some("e2".into()),
            ..first.clone()
        };
        assert_eq!(
            store.record_launch("s", &second, 6).await.unwrap(),
            Some(first)
        );
        let server = store.get_server("s").await.unwrap().unwrap();
        assert_eq!(server.launch, Some(second));
        assert_eq!(server.launch_recorded_ms, Some(6));
    }

    #[tokio::test]
    async fn corrupt_rows_are_errors() {
        let store = mem().await;
        store
            .register_protected_server(&entry("s", "h"), 1)
            .await
            .unwrap();
        sqlx::query("UPDATE servers SET origin = 'martian'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(
            store.get_server("s").await,
            Err(StoreError::CorruptRow {
                table: "servers",
                ..
            })
        ));
        sqlx::query("UPDATE servers SET origin = 'wrap', argv_json = '{'")
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(
            store.list_servers().await,
            Err(StoreError::CorruptRow { .. })
        ));
    }
}

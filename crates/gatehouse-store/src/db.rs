//! Opening the database: files and permissions, pragmas, the migration lock,
//! the schema-version check, and the pool.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fs4::fs_std::FileExt;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};

use crate::error::{Result, StoreError};
use crate::home;

/// The database file's name inside `GATEHOUSE_HOME`.
pub const DB_FILE: &str = "gatehouse.db";
/// The lock file held while migrating.
pub const LOCK_FILE: &str = "migrate.lock";

static MIGRATOR: Migrator = sqlx::migrate!();

/// The newest schema version this binary knows (the highest migration).
pub const SCHEMA_VERSION: i64 = 7;

/// How a [`Store`] connects. `Default` is the hot-path profile of
/// `gatehouse wrap`.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long one statement waits for another process's lock before the
    /// call fails with [`StoreError::Busy`] (default 50 ms).
    pub busy_timeout: Duration,
    /// How long a call waits for a free pooled connection (default 1 s;
    /// exceeded → [`StoreError::Busy`]).
    pub acquire_timeout: Duration,
    /// Pool size (default 4).
    pub max_connections: u32,
    /// How long opening waits for the migration lock and for migrations of
    /// another process (default 10 s).
    pub migrate_timeout: Duration,
    /// Identical events within this slot are counted on one row
    /// (default 1000 ms; 0 turns aggregation off).
    pub event_aggregation_ms: i64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_millis(50),
            acquire_timeout: Duration::from_secs(1),
            max_connections: 4,
            migrate_timeout: Duration::from_secs(10),
            event_aggregation_ms: 1000,
        }
    }
}

impl StoreOptions {
    /// The control plane's profile: longer waits, more connections; nothing
    /// it does is on a relay's hot path.
    pub fn control_plane() -> Self {
        Self {
            busy_timeout: Duration::from_secs(2),
            acquire_timeout: Duration::from_secs(5),
            max_connections: 8,
            ..Self::default()
        }
    }
}

/// Handle to the shared database. Cheap to clone; all clones share one pool.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    pool: SqlitePool,
    /// A connection that never writes, for `PRAGMA data_version` (whose value
    /// only changes between calls on one connection).
    poll: tokio::sync::Mutex<Option<SqliteConnection>>,
    poll_options: SqliteConnectOptions,
    options: StoreOptions,
    path: Option<PathBuf>,
    /// Write transactions of this process queue here rather than in
    /// SQLite's busy handler, whose sleeps (1 ms and up) the relay would
    /// otherwise pay whenever its own recorder is writing. Behind it, what
    /// the call checks have loaded (see [`Writer`]).
    write_gate: tokio::sync::Mutex<Writer>,
}

/// This process's writer state, behind the write gate.
#[derive(Default)]
pub(crate) struct Writer {
    /// By session: what this process has loaded of its call window.
    pub(crate) windows: std::collections::HashMap<String, crate::calls::LoadedWindow>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) `home/gatehouse.db`: makes `home` 0700 and
    /// the database files 0600, migrates under `home/migrate.lock`, refuses
    /// a newer schema with [`StoreError::NewerSchema`].
    pub async fn open(home_dir: &Path, options: StoreOptions) -> Result<Store> {
        home::ensure_private_dir(home_dir)?;
        let path = home_dir.join(DB_FILE);
        create_private_file(&path)?;

        let base = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Normal);

        let pooled = base.clone().busy_timeout(options.busy_timeout);
        let pool_options = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .min_connections(0)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false);
        // The common case (schema current, WAL on) is checked on the pool's
        // own connection: no second connection, whose close would checkpoint
        // and fsync on every start.
        let checked = async {
            let pool = pool_options.clone().connect_with(pooled.clone()).await?;
            let current = schema_is_current(&mut *pool.acquire().await?).await?;
            Ok::<_, StoreError>((pool, current))
        }
        .await;
        let pool = match checked {
            Ok((pool, true)) => pool,
            Ok((pool, false)) => {
                migrate(home_dir, &base, &options).await?;
                pool
            }
            // Another process is creating or migrating the database (until
            // it is in WAL even reading the schema waits for that): wait for
            // it as a migration would (`migrate_timeout`), not the 50 ms of
            // one statement.
            Err(StoreError::Busy) => {
                migrate(home_dir, &base, &options).await?;
                pool_options.connect_with(pooled.clone()).await?
            }
            Err(err) => return Err(err),
        };
        for suffix in ["", "-wal", "-shm"] {
            let file = sibling(&path, suffix);
            if file.exists() {
                home::make_private_file(&file)?;
            }
        }
        Ok(Store::from_parts(pool, pooled, options, Some(path)))
    }

    /// A private in-memory database, migrated; for tests.
    pub async fn open_in_memory() -> Result<Store> {
        Self::open_in_memory_with(StoreOptions::default()).await
    }

    /// [`Store::open_in_memory`] with explicit options.
    pub async fn open_in_memory_with(options: StoreOptions) -> Result<Store> {
        // A uniquely named shared-cache memory database: every connection of
        // this store (the pool's one and the poller) sees the same data.
        let connect = SqliteConnectOptions::from_str("sqlite::memory:")?
            .foreign_keys(true)
            .busy_timeout(options.busy_timeout);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Store::from_parts(pool, connect, options, None))
    }

    fn from_parts(
        pool: SqlitePool,
        poll_options: SqliteConnectOptions,
        options: StoreOptions,
        path: Option<PathBuf>,
    ) -> Store {
        Store {
            inner: Arc::new(Inner {
                pool,
                poll: tokio::sync::Mutex::new(None),
                poll_options,
                options,
                path,
                write_gate: tokio::sync::Mutex::new(Writer::default()),
            }),
        }
    }

    /// Held for the length of a write transaction (see `Inner::write_gate`).
    pub(crate) async fn write_gate(&self) -> tokio::sync::MutexGuard<'_, Writer> {
        self.inner.write_gate.lock().await
    }

    /// The pool, for the control plane's own read queries.
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.pool
    }

    /// The database file, `None` in memory.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    pub(crate) fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    /// SQLite's `PRAGMA data_version` on a connection reserved for polling:
    /// it changes whenever any process (or another connection of this store)
    /// commits. Compare successive values from one `Store`; the number itself
    /// means nothing across stores.
    pub async fn data_version(&self) -> Result<i64> {
        let mut guard = self.inner.poll.lock().await;
        let conn = match &mut *guard {
            Some(conn) => conn,
            slot => slot.insert(self.inner.poll_options.connect().await?),
        };
        let version: i64 = sqlx::query_scalar("PRAGMA data_version")
            .fetch_one(&mut *conn)
            .await?;
        Ok(version)
    }

    /// The schema version recorded in the database.
    pub async fn schema_version(&self) -> Result<i64> {
        let mut conn = self.inner.pool.acquire().await?;
        Ok(recorded_version(&mut conn).await?.unwrap_or(0))
    }

    /// Closes the pool and the polling connection.
    pub async fn close(&self) {
        if let Some(conn) = self.inner.poll.lock().await.take() {
            let _ = conn.close().await;
        }
        self.inner.pool.close().await;
    }
}

/// Highest successfully applied migration, `None` before the first.
async fn recorded_version(conn: &mut SqliteConnection) -> Result<Option<i64>> {
    let has_table: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !has_table {
        return Ok(None);
    }
    let version: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success = 1")
            .fetch_one(&mut *conn)
            .await?;
    Ok(version)
}

fn check_not_newer(found: Option<i64>) -> Result<()> {
    match found {
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        }),
        _ => Ok(()),
    }
}

/// Brings the schema up to date. The common case (already current, in WAL)
/// takes no lock; otherwise one process at a time migrates, under an
/// exclusive lock on `home/migrate.lock`.
async fn migrate(
    home_dir: &Path,
    base: &SqliteConnectOptions,
    options: &StoreOptions,
) -> Result<()> {
    // One connection, as a pool so the migrator's future stays `Send`.
    let single = SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(options.migrate_timeout)
        .connect_with(base.clone().busy_timeout(options.migrate_timeout))
        .await?;
    let result = migrate_with(home_dir, &single, options).await;
    single.close().await;
    result
}

/// Whether the schema is this version's and the journal is WAL; an error
/// when the schema is newer than this build knows.
async fn schema_is_current(conn: &mut sqlx::SqliteConnection) -> Result<bool> {
    // The common case (an existing database) in one statement; a database
    // without the migrations table fails it and takes the long way.
    let quick: std::result::Result<(Option<i64>, String), sqlx::Error> = sqlx::query_as(
        "SELECT (SELECT MAX(version) FROM _sqlx_migrations WHERE success = 1), \
                (SELECT journal_mode FROM pragma_journal_mode)",
    )
    .fetch_one(&mut *conn)
    .await;
    if let Ok((found, mode)) = quick {
        check_not_newer(found)?;
        return Ok(found == Some(SCHEMA_VERSION) && mode.eq_ignore_ascii_case("wal"));
    }
    let found = recorded_version(conn).await?;
    check_not_newer(found)?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await?;
    Ok(found == Some(SCHEMA_VERSION) && mode.eq_ignore_ascii_case("wal"))
}

async fn migrate_with(home_dir: &Path, single: &SqlitePool, options: &StoreOptions) -> Result<()> {
    if schema_is_current(&mut *single.acquire().await?).await? {
        return Ok(());
    }

    let _lock = lock_file(&home_dir.join(LOCK_FILE), options.migrate_timeout).await?;
    // Another process may have migrated while we waited for the lock.
    let found = {
        let mut conn = single.acquire().await?;
        let found = recorded_version(&mut conn).await?;
        check_not_newer(found)?;
        if found.is_none() {
            // Only effective before the first table exists.
            sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
                .execute(&mut *conn)
                .await?;
        }
        let _: String = sqlx::query_scalar("PRAGMA journal_mode = WAL")
            .fetch_one(&mut *conn)
            .await?;
        found
    };
    if found != Some(SCHEMA_VERSION) {
        MIGRATOR.run(single).await?;
    }
    Ok(())
}

/// An exclusive lock on `path`, held until the returned file drops.
async fn lock_file(path: &Path, timeout: Duration) -> Result<std::fs::File> {
    create_private_file(path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let deadline = Instant::now() + timeout;
    loop {
        if file.try_lock_exclusive()? {
            return Ok(file);
        }
        if Instant::now() >= deadline {
            return Err(StoreError::Busy);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Creates `path` as an empty 0600 file if it does not exist, so SQLite never
/// creates it with the umask's permissions (its -wal/-shm files copy the
/// main file's mode).
fn create_private_file(path: &Path) -> Result<()> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    match open.open(path) {
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err.into()),
    }
    home::make_private_file(path)?;
    Ok(())
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{mem, TempHome};
    use crate::{Action, NewEvent, Severity};

    #[cfg(unix)]
    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .expect("file exists")
            .permissions()
            .mode()
            & 0o777
    }

    fn event(time_ms: i64) -> NewEvent {
        NewEvent::new(
            time_ms,
            "frame_dropped",
            Action::Block,
            Severity::High,
            "test",
        )
    }

    #[tokio::test]
    async fn fresh_home_is_migrated_in_wal() {
        let tmp = TempHome::new();
        let store = tmp.open().await;
        assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
        let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(mode, "wal", "the shared database must run in WAL mode");
        let vacuum: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(
            vacuum, 2,
            "incremental auto_vacuum lets pruning shrink the file"
        );
        assert_eq!(store.path(), Some(tmp.home().join(DB_FILE).as_path()));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn home_and_files_are_private() {
        let tmp = TempHome::new();
        let store = tmp.open().await;
        store.insert_event(&event(1)).await.unwrap();
        let db = tmp.home().join(DB_FILE);
        assert_eq!(mode_of(&tmp.home()), 0o700, "home must be 0700");
        for suffix in ["", "-wal", "-shm"] {
            let file = sibling(&db, suffix);
            assert!(
                file.exists(),
                "{suffix} file should exist after a write in WAL mode"
            );
            assert_eq!(
                mode_of(&file),
                0o600,
                "database file {suffix:?} must be 0600"
            );
        }
        assert_eq!(
            mode_of(&tmp.home().join(LOCK_FILE)),
            0o600,
            "lock file must be 0600"
        );
    }

    #[tokio::test]
    async fn reopening_keeps_data() {
        let tmp = TempHome::new();
        let first = tmp.open().await;
        first.set_meta("install_id", "abc").await.unwrap();
        first.close().await;
        let second = tmp.open().await;
        assert_eq!(
            second.get_meta("install_id").await.unwrap().as_deref(),
            Some("abc")
        );
    }

    #[tokio::test]
    async fn newer_schema_is_refused() {
        let tmp = TempHome::new();
        let store = tmp.open().await;
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (999, 'from the future', 1, x'00', 0)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        store.close().await;
        let err = Store::open(&tmp.home(), StoreOptions::default())
            .await
            .expect_err("a schema from a newer binary must be refused");
        assert!(
            matches!(
                err,
                StoreError::NewerSchema {
                    found: 999,
                    supported: SCHEMA_VERSION
                }
            ),
            "expected NewerSchema, got {err:?}"
        );
    }

    #[tokio::test]
    async fn concurrent_first_opens_migrate_once() {
        for _round in 0..5 {
            let tmp = TempHome::new();
            let home = tmp.home();
            let mut tasks = Vec::new();
            for _ in 0..6 {
                let home = home.clone();
                tasks.push(tokio::spawn(async move {
                    Store::open(&home, crate::test_support::patient()).await
                }));
            }
            let mut stores = Vec::new();
            for task in tasks {
                stores.push(task.await.unwrap().expect("every concurrent open succeeds"));
            }
            let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
                .fetch_one(stores[0].pool())
                .await
                .unwrap();
            assert_eq!(
                applied,
                MIGRATOR.iter().count() as i64,
                "each migration applied once"
            );
        }
    }

    /// A start beside another process's first start waits for its schema
    /// under the migration budget, not the 50 ms of one statement: with
    /// several servers launched at once, the others used to relay without
    /// records.
    #[tokio::test]
    async fn an_open_waits_for_another_process_creating_the_database() {
        let tmp = TempHome::new();
        let home = tmp.home();
        let mut creating = tmp
            .other_process("BEGIN EXCLUSIVE; CREATE TABLE other_first (a)")
            .await;
        let opening = tokio::spawn({
            let home = home.clone();
            async move { Store::open(&home, StoreOptions::default()).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        sqlx::query("COMMIT").execute(&mut creating).await.unwrap();
        let store = opening
            .await
            .unwrap()
            .expect("the open waits for the other process");
        assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn futures_are_send() {
        // Compile-time: callers spawn these on a multi-threaded runtime.
        fn assert_send<T: Send>(_: &T) {}
        let home = PathBuf::from("/nonexistent");
        let open = Store::open(&home, StoreOptions::default());
        assert_send(&open);
        drop(open);
    }

    #[test]
    fn schema_version_matches_the_migrations() {
        let newest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        assert_eq!(
            newest, SCHEMA_VERSION,
            "bump SCHEMA_VERSION with every migration"
        );
    }

    #[test]
    fn migrations_only_add() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .lines()
                .map(|line| line.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n")
                .to_ascii_uppercase();
            // A trigger's body says what later writes do, not what the
            // migration does to existing rows.
            let code = without_trigger_bodies(&code);
            for banned in ["DROP ", "RENAME", "DELETE FROM", "UPDATE "] {
                assert!(
                    !code.contains(banned),
                    "{} uses {banned:?}: migrations may only add",
                    path.display()
                );
            }
        }
    }

    fn without_trigger_bodies(code: &str) -> String {
        let mut out = String::new();
        let mut rest = code;
        while let Some(at) = rest.find("CREATE TRIGGER") {
            out.push_str(&rest[..at]);
            let body = &rest[at..];
            let end = body.find("END;").map_or(body.len(), |e| e + 4);
            rest = &body[end..];
        }
        out.push_str(rest);
        out
    }

    #[tokio::test]
    async fn data_version_changes_when_another_store_commits() {
        let tmp = TempHome::new();
        let watcher = tmp.open().await;
        let writer = tmp.open().await;
        let before = watcher.data_version().await.unwrap();
        assert_eq!(
            watcher.data_version().await.unwrap(),
            before,
            "no commit, no change"
        );
        writer.insert_event(&event(5)).await.unwrap();
        let after = watcher.data_version().await.unwrap();
        assert_ne!(
            after, before,
            "a commit by another process must change data_version"
        );
        // The watcher's own pool counts as another connection too.
        watcher.set_meta("k", "v").await.unwrap();
        assert_ne!(watcher.data_version().await.unwrap(), after);
    }

    #[tokio::test]
    async fn data_version_works_in_memory() {
        let store = mem().await;
        let before = store.data_version().await.unwrap();
        store.set_meta("k", "v").await.unwrap();
        assert_ne!(
            store.data_version().await.unwrap(),
            before,
            "in-memory commits are seen"
        );
    }

    #[tokio::test]
    async fn a_closed_store_says_so() {
        let tmp = TempHome::new();
        let store = tmp.open().await;
        store.set_meta("k", "v").await.unwrap();
        store.close().await;
        let err = store.set_meta("k", "w").await.expect_err("closed");
        assert!(matches!(err, StoreError::Closed), "got {err:?}");
    }

    #[tokio::test]
    async fn busy_past_budget_is_a_typed_error() {
        let tmp = TempHome::new();
        let store = tmp.open().await; // 50 ms budget
        let mut holder = tmp.other_process("BEGIN IMMEDIATE").await;
        let err = store
            .insert_event(&event(1))
            .await
            .expect_err("writer lock is held");
        assert!(
            matches!(err, StoreError::Busy),
            "expected Busy, got {err:?}"
        );
        let err = store
            .check_and_record_call(
                "s",
                10,
                1000,
                crate::NewCall {
                    server_id: "a".into(),
                    ..Default::default()
                },
                |_| crate::CallDecision::allow(()),
            )
            .await
            .expect_err("check-and-record must not wait past the budget");
        assert!(
            matches!(err, StoreError::Busy),
            "expected Busy, got {err:?}"
        );
        sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
        // Reads are not blocked by a writer in WAL mode, and nothing was written.
        assert_eq!(store.latest_event_id().await.unwrap(), 0);
        assert!(store.window_entries("s", 0).await.unwrap().is_empty());
        store
            .insert_event(&event(2))
            .await
            .expect("lock released, write succeeds");
    }
}

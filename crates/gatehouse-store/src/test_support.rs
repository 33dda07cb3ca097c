//! Helpers for the store's own tests.

use std::path::PathBuf;

use crate::{MacKey, Store, StoreOptions};

/// A fixed MAC key for tests.
pub(crate) fn key() -> MacKey {
    MacKey::new([0x5a; 32])
}

/// A migrated in-memory store.
pub(crate) async fn mem() -> Store {
    Store::open_in_memory()
        .await
        .expect("in-memory store opens and migrates")
}

/// A temporary home directory (removed on drop) and a store opened in it.
pub(crate) struct TempHome {
    pub dir: tempfile::TempDir,
}

impl TempHome {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The home path (a child of the temp dir, so `open` creates it).
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub async fn open(&self) -> Store {
        self.open_with(StoreOptions::default()).await
    }

    pub async fn open_with(&self, options: StoreOptions) -> Store {
        Store::open(&self.home(), options)
            .await
            .expect("file store opens and migrates")
    }

    /// A connection of another process to this home's database (created
    /// when missing) that has run `sql`: a lock it now holds, say.
    pub async fn other_process(&self, sql: &'static str) -> sqlx::SqliteConnection {
        use sqlx::ConnectOptions;
        std::fs::create_dir_all(self.home()).expect("home");
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(self.home().join(crate::db::DB_FILE))
            .create_if_missing(true)
            .connect()
            .await
            .expect("a second connection");
        sqlx::raw_sql(sql)
            .execute(&mut conn)
            .await
            .expect("the other process's statements");
        conn
    }
}

/// Options with a generous busy wait, for tests that contend on purpose.
pub(crate) fn patient() -> StoreOptions {
    StoreOptions {
        busy_timeout: std::time::Duration::from_secs(20),
        acquire_timeout: std::time::Duration::from_secs(20),
        ..StoreOptions::default()
    }
}

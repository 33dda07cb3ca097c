//! The store's one error type. Messages name tables, columns and codes, never
//! row values: a value could be a secret or attacker-chosen text.

use std::io;

/// Every way a store call can fail.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database stayed locked by another process past the busy budget
    /// (`StoreOptions::busy_timeout`), or no pooled connection was free in
    /// time. The caller applies DESIGN §8 (fail open or closed); nothing was
    /// written.
    #[error("database busy past the time budget")]
    Busy,
    /// The database was migrated by a newer Gatehouse than this binary.
    #[error("database schema version {found} is newer than this binary supports ({supported})")]
    NewerSchema { found: i64, supported: i64 },
    /// A migration failed or the recorded migrations do not match this
    /// binary's (an applied migration was edited).
    #[error("database migration failed: {0}")]
    Migrate(String),
    /// A row read back did not parse: treated as untrusted input.
    #[error("corrupt row in {table}: {reason}")]
    CorruptRow { table: &'static str, reason: String },
    /// `approve_tool` for a hash that was never recorded for that tool.
    #[error("tool {tool:?} of server {server_id:?} was never seen with that hash")]
    UnknownToolHash { server_id: String, tool: String },
    /// An approval named a tool that was never seen on that server.
    #[error("tool {tool:?} was never seen on server {server_id:?}")]
    UnknownTool { server_id: String, tool: String },
    /// A person's approval named a hash other than the one waiting: the
    /// waiting definition stays waiting (`approve_waiting_tool`).
    #[error("tool {tool:?} of server {server_id:?} waits with another definition")]
    NotWaiting { server_id: String, tool: String },
    /// A write referred to a row that does not exist.
    #[error("no {what} with that id")]
    NotFound { what: &'static str },
    /// An argument the store refuses before touching the database.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Filesystem error on the home directory, database or lock file.
    #[error("store file error: {0}")]
    Io(#[from] io::Error),
    /// The store was closed: its process is on its way out, so a
    /// background task that still asks has nothing to report.
    #[error("the database is closed")]
    Closed,
    /// Any other database error.
    #[error("database error: {0}")]
    Database(sqlx::Error),
}

/// Result alias for store calls.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if is_busy(&err) {
            return StoreError::Busy;
        }
        if let sqlx::Error::PoolClosed = err {
            return StoreError::Closed;
        }
        if let sqlx::Error::ColumnDecode { index, source } = &err {
            // Decoding happens on rows read back; say which column, not the value.
            return StoreError::CorruptRow {
                table: "(query)",
                reason: format!("column {index} did not decode: {source}"),
            };
        }
        StoreError::Database(err)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        match err {
            sqlx::migrate::MigrateError::Execute(inner) if is_busy(&inner) => StoreError::Busy,
            other => StoreError::Migrate(other.to_string()),
        }
    }
}

/// SQLITE_BUSY (5) and SQLITE_LOCKED (6) in any extended form, or a pool
/// that could not hand out a connection in time.
pub(crate) fn is_busy(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i64>().ok())
            .is_some_and(|code| matches!(code & 0xff, 5 | 6)),
        _ => false,
    }
}

/// Shorthand for a corrupt-row error.
pub(crate) fn corrupt(table: &'static str, reason: impl Into<String>) -> StoreError {
    StoreError::CorruptRow {
        table,
        reason: reason.into(),
    }
}

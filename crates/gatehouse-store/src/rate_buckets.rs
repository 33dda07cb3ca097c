//! `rate_buckets`: per (client session, server) token bucket and burst
//! cool-down. Read and written only inside
//! [`Store::check_and_record_call`](crate::Store::check_and_record_call)'s
//! transaction, plus a sweep of idle rows.

use sqlx::SqliteConnection;

use crate::db::Store;
use crate::error::{corrupt, Result};

/// A bucket's state. The store keeps it; the engine's closure computes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    /// Tokens left (finite, ≥ 0).
    pub tokens: f64,
    /// When `tokens` was computed.
    pub updated_ms: i64,
    /// Calls are refused until this time (0 = no cool-down).
    pub cooldown_until_ms: i64,
}

#[derive(sqlx::FromRow)]
struct BucketRow {
    server_id: String,
    tokens: f64,
    updated_ms: i64,
    cooldown_until_ms: i64,
}

fn parse(row: BucketRow) -> Result<(String, BucketState)> {
    if !row.tokens.is_finite() || row.tokens < 0.0 {
        return Err(corrupt(
            "rate_buckets",
            "tokens not a finite non-negative number",
        ));
    }
    Ok((
        row.server_id,
        BucketState {
            tokens: row.tokens,
            updated_ms: row.updated_ms,
            cooldown_until_ms: row.cooldown_until_ms,
        },
    ))
}

/// A bucket from its columns (read as part of a larger statement).
pub(crate) fn parse_parts(
    server_id: String,
    tokens: f64,
    updated_ms: i64,
    cooldown_until_ms: i64,
) -> Result<(String, BucketState)> {
    parse(BucketRow {
        server_id,
        tokens,
        updated_ms,
        cooldown_until_ms,
    })
}

/// The bucket upsert, its tokens, update time and cool-down end bound at
/// the given parameter numbers (session ?1, server ?2).
macro_rules! store_bucket_sql {
    ($tokens:literal, $updated:literal, $cooldown:literal) => {
        concat!(
            "INSERT INTO rate_buckets ",
            "(session, server_id, tokens, updated_ms, cooldown_until_ms) ",
            "VALUES (?1, ?2, ?",
            $tokens,
            ", ?",
            $updated,
            ", ?",
            $cooldown,
            ") ON CONFLICT (session, server_id) DO UPDATE SET ",
            "tokens = excluded.tokens, updated_ms = excluded.updated_ms, ",
            "cooldown_until_ms = excluded.cooldown_until_ms"
        )
    };
}

/// Refuses a bucket that must never be stored.
pub(crate) fn check(state: &BucketState) -> Result<()> {
    if !state.tokens.is_finite() || state.tokens < 0.0 {
        return Err(crate::StoreError::Invalid(
            "bucket tokens must be finite and non-negative",
        ));
    }
    Ok(())
}

/// Writes one bucket.
pub(crate) async fn store(
    conn: &mut SqliteConnection,
    session: &str,
    server_id: &str,
    state: &BucketState,
) -> Result<()> {
    check(state)?;
    sqlx::query(store_bucket_sql!(3, 4, 5))
        .bind(session)
        .bind(server_id)
        .bind(state.tokens)
        .bind(state.updated_ms)
        .bind(state.cooldown_until_ms)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The bucket of (`session`, `server_id`), if one is stored.
pub(crate) async fn load(
    conn: &mut SqliteConnection,
    session: &str,
    server_id: &str,
) -> Result<Option<BucketState>> {
    let row: Option<BucketRow> = sqlx::query_as(
        "SELECT server_id, tokens, updated_ms, cooldown_until_ms FROM rate_buckets \
         WHERE session = ? AND server_id = ?",
    )
    .bind(session)
    .bind(server_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| parse(r).map(|(_, state)| state)).transpose()
}

/// [`store`] as one statement of the call check's decision batch, in that
/// batch's numbering (?8–?10).
pub(crate) const STORE_SQL: &str = concat!(store_bucket_sql!(8, 9, 10), "; ");

impl Store {
    /// Deletes buckets untouched since `before_ms` whose cool-down is over
    /// (a full bucket is the same as no row).
    pub async fn prune_rate_buckets(&self, before_ms: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM rate_buckets WHERE updated_ms < ?1 AND cooldown_until_ms < ?1",
        )
        .bind(before_ms)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }
}

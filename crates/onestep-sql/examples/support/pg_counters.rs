//! What a PostgreSQL drain cost the server, counted rather than timed: the transaction ids it
//! used (every transaction that wrote, each of which waits for its WAL flush at commit) and the
//! WAL bytes it wrote (the whole cluster's: other activity on the server counts too). Both are
//! read from the server's live positions (`pg_current_snapshot()`, `pg_current_wal_insert_lsn()`),
//! not from the statistics views, which sessions report up to seconds late. Unlike seconds, they
//! do not move with the machine's load, so two runs compare even on a noisy machine. Shared by
//! the burndown and ceiling examples (`#[path]`).

use serde_json::{Value, json};
use sqlx::Connection;

/// A snapshot of the counters.
#[derive(Debug, Clone)]
pub struct Counters {
    next_xid: i64,
    wal_lsn: String,
}

impl Counters {
    /// The counters now.
    pub async fn read(dsn: &str) -> Result<Self, sqlx::Error> {
        let mut conn = sqlx::PgConnection::connect(dsn).await?;
        let (next_xid, wal_lsn): (i64, String) = sqlx::query_as(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, \
             pg_current_wal_insert_lsn()::text",
        )
        .fetch_one(&mut conn)
        .await?;
        conn.close().await?;
        Ok(Self { next_xid, wal_lsn })
    }

    /// What happened between `self` and `later` for `n` executions, as JSON fields to
    /// [`merge`] into a run's line (`write_transactions_per_1000_executions`,
    /// `wal_bytes_per_execution`).
    pub async fn per_execution(
        &self,
        later: &Self,
        n: usize,
        dsn: &str,
    ) -> Result<Value, sqlx::Error> {
        let mut conn = sqlx::PgConnection::connect(dsn).await?;
        let wal_bytes: f64 =
            sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8")
                .bind(&later.wal_lsn)
                .bind(&self.wal_lsn)
                .fetch_one(&mut conn)
                .await?;
        conn.close().await?;
        let n = n.max(1) as f64;
        let per_1000 = (later.next_xid - self.next_xid) as f64 * 1000.0 / n;
        Ok(json!({
            "write_transactions_per_1000_executions": (per_1000 * 10.0).round() / 10.0,
            "wal_bytes_per_execution": (wal_bytes / n).round(),
        }))
    }
}

/// Adds the `counted` fields (from [`Counters::per_execution`]; nothing when it is not an
/// object) to the run's JSON `line`.
pub fn merge(line: &mut Value, counted: &Value) {
    if let (Some(line), Some(counted)) = (line.as_object_mut(), counted.as_object()) {
        line.extend(counted.clone());
    }
}

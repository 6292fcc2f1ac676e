//! Decoding rows into the core's types, once for every dialect: the dialect reads columns
//! ([`Dialect::text`], [`Dialect::id`], …), this module assembles rows from them.

use onestep_core::execution::stored::{AttemptRow, ClaimedRow, ExecutionRow};
use onestep_core::execution::{AttemptStatus, ExecutionStatus};
use serde_json::Value;
use sqlx::Transaction;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::dialect::{Candidate, Dialect, Row};
use crate::param::Param;

/// A stored status.
pub(crate) fn status(text: String) -> Result<ExecutionStatus, sqlx::Error> {
    text.parse()
        .map_err(|_| sqlx::Error::Decode(format!("unknown execution status {text:?}").into()))
}

/// A stored attempt status.
pub(crate) fn attempt_status(text: String) -> Result<AttemptStatus, sqlx::Error> {
    text.parse()
        .map_err(|_| sqlx::Error::Decode(format!("unknown attempt status {text:?}").into()))
}

/// A stored id: 32 hex digits, or the hyphenated form (MariaDB's UUID type).
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) fn id(text: &str) -> Result<Uuid, sqlx::Error> {
    Uuid::parse_str(text.trim())
        .map_err(|_| sqlx::Error::Decode(format!("invalid stored id {text:?}").into()))
}

/// `value`, or a decode error naming the NULL `column`.
pub(crate) fn required<T>(value: Option<T>, column: &str) -> Result<T, sqlx::Error> {
    value.ok_or_else(|| sqlx::Error::Decode(format!("column {column} is NULL").into()))
}

/// An execution row (all columns, in table order), through the dialect's column readers.
pub(crate) fn execution<D: Dialect>(row: &Row<D>) -> Result<ExecutionRow, sqlx::Error> {
    Ok(ExecutionRow {
        id: required(D::id(row, 0)?, "id")?,
        namespace: required(D::text(row, 1)?, "namespace")?,
        task_name: required(D::text(row, 2)?, "task_name")?,
        status: status(required(D::text(row, 3)?, "status")?)?,
        payload: required(D::json(row, 4)?, "payload")?,
        metadata: D::json(row, 5)?.unwrap_or(Value::Object(Default::default())),
        result: D::json(row, 6)?,
        error: D::json(row, 7)?,
        idempotency_key: D::text(row, 8)?,
        submission_digest: D::text(row, 9)?,
        attempts: required(D::int(row, 10)?, "attempts")?,
        available_at: required(D::time(row, 11)?, "available_at")?,
        lease_token: D::id(row, 12)?,
        lease_expires_at: D::time(row, 13)?,
        worker_id: D::text(row, 14)?,
        cancel_reason: D::text(row, 15)?,
        cancel_requested_at: D::time(row, 16)?,
        expires_at: D::time(row, 17)?,
        created_at: required(D::time(row, 18)?, "created_at")?,
        updated_at: required(D::time(row, 19)?, "updated_at")?,
        started_at: D::time(row, 20)?,
        finished_at: D::time(row, 21)?,
        version: required(D::bigint(row, 22)?, "version")?,
    })
}

/// A claimed row's [`sql::CLAIMED_COLUMNS`](crate::sql::CLAIMED_COLUMNS), in that order.
pub(crate) fn claimed<D: Dialect>(row: &Row<D>) -> Result<ClaimedRow, sqlx::Error> {
    Ok(ClaimedRow {
        id: required(D::id(row, 0)?, "id")?,
        namespace: required(D::text(row, 1)?, "namespace")?,
        task_name: required(D::text(row, 2)?, "task_name")?,
        payload: required(D::json(row, 3)?, "payload")?,
        metadata: D::json(row, 4)?.unwrap_or(Value::Null),
        attempts: required(D::int(row, 5)?, "attempts")?,
        available_at: required(D::time(row, 6)?, "available_at")?,
        created_at: required(D::time(row, 7)?, "created_at")?,
        lease_token: D::id(row, 8)?,
        updated_at: required(D::time(row, 9)?, "updated_at")?,
    })
}

/// `id, status` of an execution row (read by PostgreSQL's status-only completion).
#[cfg(feature = "postgres")]
pub(crate) fn id_and_status<D: Dialect>(
    row: &Row<D>,
) -> Result<(Uuid, ExecutionStatus), sqlx::Error> {
    Ok((
        required(D::id(row, 0)?, "id")?,
        status(required(D::text(row, 1)?, "status")?)?,
    ))
}

/// An attempt row (all columns, in table order).
pub(crate) fn attempt<D: Dialect>(row: &Row<D>) -> Result<AttemptRow, sqlx::Error> {
    Ok(AttemptRow {
        id: required(D::id(row, 0)?, "id")?,
        execution_id: required(D::id(row, 1)?, "execution_id")?,
        attempt_no: required(D::int(row, 2)?, "attempt_no")?,
        lease_token: required(D::id(row, 3)?, "lease_token")?,
        worker_id: required(D::text(row, 4)?, "worker_id")?,
        status: attempt_status(required(D::text(row, 5)?, "status")?)?,
        error: D::json(row, 6)?,
        started_at: required(D::time(row, 7)?, "started_at")?,
        heartbeat_at: required(D::time(row, 8)?, "heartbeat_at")?,
        finished_at: D::time(row, 9)?,
    })
}

/// Runs a query returning execution rows.
pub(crate) async fn executions<D: Dialect>(
    tx: &mut Transaction<'static, D::Db>,
    sql: &str,
    params: Vec<Param>,
) -> Result<Vec<ExecutionRow>, sqlx::Error> {
    rows::<D, _>(tx, sql, params, execution::<D>).await
}

/// Runs a query and decodes each row with `decode`.
pub(crate) async fn rows<D: Dialect, T>(
    tx: &mut Transaction<'static, D::Db>,
    sql: &str,
    params: Vec<Param>,
    decode: fn(&Row<D>) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    D::fetch(tx, sql, params)
        .await?
        .iter()
        .map(decode)
        .collect()
}

/// Runs a query returning attempt rows.
pub(crate) async fn attempts<D: Dialect>(
    tx: &mut Transaction<'static, D::Db>,
    sql: &str,
    params: Vec<Param>,
) -> Result<Vec<AttemptRow>, sqlx::Error> {
    D::fetch(tx, sql, params)
        .await?
        .iter()
        .map(attempt::<D>)
        .collect()
}

/// Runs a query returning `id, version, lease_token`.
pub(crate) async fn candidates<D: Dialect>(
    tx: &mut Transaction<'static, D::Db>,
    sql: &str,
    params: Vec<Param>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    D::fetch(tx, sql, params)
        .await?
        .iter()
        .map(|row| {
            Ok((
                required(D::id(row, 0)?, "id")?,
                required(D::bigint(row, 1)?, "version")?,
                D::id(row, 2)?,
            ))
        })
        .collect()
}

/// Runs a query returning `status, COUNT(*), MIN(created_at)` rows.
pub(crate) async fn status_counts<D: Dialect>(
    tx: &mut Transaction<'static, D::Db>,
    sql: &str,
    params: Vec<Param>,
) -> Result<Vec<(String, i64, Option<OffsetDateTime>)>, sqlx::Error> {
    D::fetch(tx, sql, params)
        .await?
        .iter()
        .map(|row| {
            Ok((
                required(D::text(row, 0)?, "status")?,
                required(D::bigint(row, 1)?, "count")?,
                D::time(row, 2)?,
            ))
        })
        .collect()
}

//! A row whose stored values cannot be decoded fails on its own and does not stop its task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionRequest, ExecutionStatus, LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::postgres::PostgresExecutionBackend;
use onestep_sql::sqlite::SqliteExecutionBackend;
use onestep_sql::{Dialect, SqlExecutionBackend};
use serde_json::json;
use uuid::Uuid;

#[tokio::test]
async fn an_undecodable_row_is_failed_and_the_rest_are_claimed() {
    undecodable_row_on_sqlite(Claim::Execution).await;
}

#[tokio::test]
async fn an_undecodable_row_is_failed_and_the_rest_are_claimed_to_run() {
    undecodable_row_on_sqlite(Claim::ToRun).await;
}

async fn undecodable_row_on_sqlite(by: Claim) {
    let dir = support::sqlite_dir();
    let dsn = format!(
        "sqlite://{}/poison-{}.db",
        dir.path().display(),
        uuid::Uuid::new_v4().simple()
    );
    let b = SqliteExecutionBackend::new(&dsn, support::live::fresh_options()).unwrap();
    let bad = b
        .submit(ExecutionRequest::new("live", "t", json!(1), SubmitOptions::default()).unwrap())
        .await
        .unwrap();
    let good = b
        .submit(ExecutionRequest::new("live", "t", json!(2), SubmitOptions::default()).unwrap())
        .await
        .unwrap();
    let pool = b.connector().pool().unwrap();
    let corrupt = format!(
        "UPDATE \"{}\" SET payload = ? WHERE id = ?",
        b.tables().executions
    );
    sqlx::query(&corrupt)
        .bind(r#"{"$onestep": {"type": "uuid", "value": "not-a-uuid"}}"#)
        .bind(bad.id.simple().to_string())
        .execute(&pool)
        .await
        .unwrap();
    claim_fails_only_the_bad_row(&b, bad.id, good.id, by).await;
}

/// PostgreSQL claims in one statement; a row that does not decode rolls it back, and the claim in
/// steps fails that row without starting it.
#[tokio::test]
async fn an_undecodable_row_is_failed_unstarted_and_the_rest_are_claimed_on_postgres() {
    undecodable_row_on_postgres(Claim::Execution).await;
}

/// The same through `claim_to_run`, whose one statement answers fewer columns.
#[tokio::test]
async fn an_undecodable_row_is_failed_unstarted_and_the_rest_are_claimed_to_run_on_postgres() {
    undecodable_row_on_postgres(Claim::ToRun).await;
}

async fn undecodable_row_on_postgres(by: Claim) {
    let b = PostgresExecutionBackend::new(&support::postgres_url(), support::live::fresh_options())
        .unwrap();
    let bad = b
        .submit(ExecutionRequest::new("live", "t", json!(1), SubmitOptions::default()).unwrap())
        .await
        .unwrap();
    let good = b
        .submit(ExecutionRequest::new("live", "t", json!(2), SubmitOptions::default()).unwrap())
        .await
        .unwrap();
    let pool = b.connector().pool().unwrap();
    let corrupt = format!(
        "UPDATE \"{}\" SET payload = $1::jsonb WHERE id = $2",
        b.tables().executions
    );
    sqlx::query(&corrupt)
        .bind(r#"{"$onestep": {"type": "uuid", "value": "not-a-uuid"}}"#)
        .bind(bad.id)
        .execute(&pool)
        .await
        .unwrap();
    claim_fails_only_the_bad_row(&b, bad.id, good.id, by).await;
    let started = format!(
        "SELECT e.attempts, e.version, e.started_at IS NULL, \
         (SELECT COUNT(*) FROM \"{}\" a WHERE a.execution_id = e.id) FROM \"{}\" e WHERE e.id = $1",
        b.tables().attempts,
        b.tables().executions
    );
    let (attempts, version, never_started, attempt_rows): (i32, i64, bool, i64) =
        sqlx::query_as(&started)
            .bind(bad.id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (attempts, version, never_started, attempt_rows),
        (0, 1, true, 0),
        "the bad row failed without an attempt"
    );
    let (attempts, version, never_started, attempt_rows): (i32, i64, bool, i64) =
        sqlx::query_as(&started)
            .bind(good.id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (attempts, version, never_started, attempt_rows),
        (1, 1, false, 1)
    );
}

/// Which claim a test sends: `claim` (whole executions) or `claim_to_run` (what a worker runs
/// them with; on PostgreSQL its own one-statement claim).
#[derive(Clone, Copy)]
enum Claim {
    Execution,
    ToRun,
}

async fn claim_fails_only_the_bad_row<D: Dialect>(
    b: &SqlExecutionBackend<D>,
    bad: Uuid,
    good: Uuid,
    by: Claim,
) {
    let tasks = ["t".to_string()];
    let claimed: Vec<Uuid> = match by {
        Claim::Execution => b
            .claim("live", &tasks, 10, Duration::from_secs(30), "w")
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.execution.id)
            .collect(),
        Claim::ToRun => b
            .claim_to_run("live", &tasks, 10, Duration::from_secs(30), "w")
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect(),
    };
    assert_eq!(claimed, vec![good]);
    let failed = b.stats(Some("live")).await.unwrap();
    assert_eq!(
        failed
            .iter()
            .find(|s| s.status == ExecutionStatus::Failed)
            .unwrap()
            .count,
        1
    );
    assert!(
        b.get("live", bad).await.is_err(),
        "reading it still reports the decode error"
    );
}

/// A status the state machine does not know (a table whose CHECK constraint was dropped) makes
/// `stats` fail naming the value, instead of leaving those rows out of every count.
#[tokio::test]
async fn stats_report_a_status_outside_the_state_machine() {
    let b = PostgresExecutionBackend::new(&support::postgres_url(), support::live::fresh_options())
        .unwrap();
    let stray = b
        .submit(ExecutionRequest::new("live", "t", json!(1), SubmitOptions::default()).unwrap())
        .await
        .unwrap();
    let pool = b.connector().pool().unwrap();
    let table = b.tables().executions.clone();
    let check: String = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass \
         AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%status%queued%'",
    )
    .bind(format!("\"{table}\""))
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "ALTER TABLE \"{table}\" DROP CONSTRAINT \"{check}\""
    ))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "UPDATE \"{table}\" SET status = 'paused' WHERE id = $1"
    ))
    .bind(stray.id)
    .execute(&pool)
    .await
    .unwrap();
    let err = b.stats(Some("live")).await.unwrap_err().to_string();
    assert!(
        err.contains(r#"column status holds "paused", which is not an execution status"#),
        "{err}"
    );
}

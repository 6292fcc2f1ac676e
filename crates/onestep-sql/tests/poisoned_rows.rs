//! A row whose stored values cannot be decoded fails on its own and does not stop its task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionRequest, ExecutionStatus, LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde_json::json;

#[tokio::test]
async fn an_undecodable_row_is_failed_and_the_rest_are_claimed() {
    let dsn = format!(
        "sqlite://{}/poison-{}.db",
        support::sqlite_dir().display(),
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
    let leases = b
        .claim("live", &["t".into()], 10, Duration::from_secs(30), "w")
        .await
        .unwrap();
    assert_eq!(
        leases.iter().map(|l| l.execution.id).collect::<Vec<_>>(),
        vec![good.id]
    );
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
        b.get("live", bad.id).await.is_err(),
        "reading it still reports the decode error"
    );
}

//! Live tests on PostgreSQL (spec §6.8): concurrency, leases on database time, DDL locking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionRequest, LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::postgres::{Postgres, PostgresExecutionBackend};
use support::live;

macro_rules! live_cases {
    ($($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $case() {
            live::$case::<Postgres>(&support::postgres_url()).await;
        }
    )*};
}

live_cases!(
    concurrent_auto_create_is_serialized,
    two_attempts_tables_can_share_one_executions_table,
    concurrent_submits_with_one_key_create_one_execution,
    concurrent_claimers_never_claim_a_row_twice,
    heartbeat_prevents_takeover,
    expired_lease_takeover_fences_the_old_worker,
    cancel_and_complete_race_has_one_terminal_winner,
    missing_tables_are_reported_by_name,
    a_rejected_completion_leaves_no_row_lock_behind,
);

#[tokio::test]
async fn dsn_passwords_never_appear_in_errors() {
    live::dsn_passwords_never_appear_in_errors::<Postgres>("postgres").await;
}

/// Leases end at database time + lease duration, whatever the worker's clock says.
#[tokio::test]
async fn lease_deadlines_use_database_time() {
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let r = ExecutionRequest::new(
        "live",
        "clock",
        serde_json::json!(1),
        SubmitOptions::default(),
    )
    .unwrap();
    b.submit(r).await.unwrap();
    let pool = b.connector().pool().unwrap();
    let lease = b
        .claim("live", &["clock".into()], 1, Duration::from_secs(30), "w")
        .await
        .unwrap()
        .remove(0);
    let db_now: time::OffsetDateTime = sqlx::query_scalar("SELECT CURRENT_TIMESTAMP")
        .fetch_one(&pool)
        .await
        .unwrap();
    let ahead = lease.lease_expires_at - db_now;
    assert!(
        ahead > time::Duration::seconds(28) && ahead <= time::Duration::seconds(30),
        "lease ends {ahead} after database now"
    );
}

/// A worker in another process (another backend, its own pool) wakes on NOTIFY when the API
/// submits, instead of waiting its poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_submit_wakes_an_idle_worker_of_another_backend() {
    use onestep_core::execution::{ExecutionSource, ExecutionSourceOptions, ExecutionStatus};
    use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
    let url = support::postgres_url();
    let options = live::fresh_options();
    let api = PostgresExecutionBackend::new(&url, options.clone()).unwrap();
    let worker_backend = PostgresExecutionBackend::new(&url, options).unwrap();
    api.open().await.unwrap();
    let mut o = ExecutionSourceOptions::new("live", "notify");
    o.poll_interval_s = 10.0;
    let source = ExecutionSource::new(worker_backend, o).unwrap();
    let app = OneStepApp::builder("notified")
        .task(
            Task::new("notify")
                .source(std::sync::Arc::new(source))
                .handler(|_ctx: TaskContext, _v: serde_json::Value| async {
                    Ok::<_, TaskError>(serde_json::json!("woken"))
                }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let serve = tokio::spawn(async move { app.serve().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let r = ExecutionRequest::new(
        "live",
        "notify",
        serde_json::json!(1),
        SubmitOptions::default(),
    )
    .unwrap();
    let e = api.submit(r).await.unwrap();
    loop {
        let now = api.get("live", e.id).await.unwrap().unwrap();
        if now.status == ExecutionStatus::Succeeded {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not woken: still {:?}",
            now.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "woken by NOTIFY, not the 10 s poll"
    );
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
}

/// Our sessions run with JIT off (it only costs time on queue statements).
#[tokio::test]
async fn sessions_run_without_jit() {
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let pool = b.connector().pool().unwrap();
    let jit: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jit, "off");
}

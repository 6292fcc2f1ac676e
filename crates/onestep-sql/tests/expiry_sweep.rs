//! The expiry sweep's own cadence: claims never pick expired work, the status flips on the next
//! sweep, and a sweep that finds a full batch runs again on the next pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use onestep_core::clock::ManualClock;
use onestep_core::execution::{
    ExecutionBackend, ExecutionRequest, ExecutionStatus, LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde_json::json;
use time::OffsetDateTime;

#[tokio::test]
async fn expired_work_is_not_claimed_while_the_sweep_is_not_due() {
    let dir = support::sqlite_dir();
    let dsn = format!(
        "sqlite://{}/expiry-{}.db",
        dir.path().display(),
        uuid::Uuid::new_v4().simple()
    );
    let start = OffsetDateTime::now_utc();
    let clock = ManualClock::new(start);
    let mut options = support::live::fresh_options();
    options.clock = Some(Arc::new(clock.clone()));
    options.maintenance_interval = Duration::ZERO;
    options.expiry_sweep_interval = Duration::from_secs(3600);
    options.reclaim_batch_size = 2;
    let b = SqliteExecutionBackend::new(&dsn, options).unwrap();
    let mut ids = Vec::new();
    for n in 0..5 {
        let opts = SubmitOptions::default().expires_at(start + Duration::from_secs(10));
        let r = ExecutionRequest::new("live", "t", json!(n), opts).unwrap();
        ids.push(b.submit(r).await.unwrap().id);
    }
    let status = |id| {
        let b = b.clone();
        async move { b.get("live", id).await.unwrap().unwrap().status }
    };
    // The first claim runs the (never yet run) sweep: nothing has expired.
    assert!(
        b.claim("live", &["other".into()], 1, Duration::from_secs(30), "w")
            .await
            .unwrap()
            .is_empty()
    );

    clock.advance(Duration::from_secs(11));
    // Past expires_at: not claimable, although the sweep is not due for an hour.
    let claimed = b
        .claim("live", &["t".into()], 10, Duration::from_secs(30), "w")
        .await
        .unwrap();
    assert!(claimed.is_empty(), "claimed expired work: {claimed:?}");
    let queued = count_with_status(&ids, &status, ExecutionStatus::Queued).await;
    assert_eq!(queued, 5, "the sweep ran before it was due");
}

/// How many of `ids` have `wanted` status.
async fn count_with_status<F, Fut>(ids: &[uuid::Uuid], status: &F, wanted: ExecutionStatus) -> usize
where
    F: Fn(uuid::Uuid) -> Fut,
    Fut: std::future::Future<Output = ExecutionStatus>,
{
    let mut n = 0;
    for id in ids {
        if status(*id).await == wanted {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn a_full_sweep_batch_sweeps_again_on_the_next_pass() {
    let dir = support::sqlite_dir();
    let dsn = format!(
        "sqlite://{}/expiry-{}.db",
        dir.path().display(),
        uuid::Uuid::new_v4().simple()
    );
    let start = OffsetDateTime::now_utc();
    let clock = ManualClock::new(start);
    let mut options = support::live::fresh_options();
    options.clock = Some(Arc::new(clock.clone()));
    options.maintenance_interval = Duration::ZERO;
    options.expiry_sweep_interval = Duration::from_secs(3600);
    options.reclaim_batch_size = 2;
    let b = SqliteExecutionBackend::new(&dsn, options).unwrap();
    let mut ids = Vec::new();
    for n in 0..5 {
        let opts = SubmitOptions::default().expires_at(start + Duration::from_secs(10));
        let r = ExecutionRequest::new("live", "t", json!(n), opts).unwrap();
        ids.push(b.submit(r).await.unwrap().id);
    }
    let status = |id| {
        let b = b.clone();
        async move { b.get("live", id).await.unwrap().unwrap().status }
    };
    clock.advance(Duration::from_secs(11));
    // First pass: the sweep is due (never run) and finds a full batch of 2, so the next pass
    // sweeps again (2 more, full again), and the third finds the last one, not a full batch.
    for expected in [2, 4, 5] {
        b.claim("live", &["t".into()], 10, Duration::from_secs(30), "w")
            .await
            .unwrap();
        let expired = count_with_status(&ids, &status, ExecutionStatus::Expired).await;
        assert_eq!(expired, expected);
    }
    // Not a full batch: the sweep now waits its interval.
    let late = ExecutionRequest::new(
        "live",
        "t",
        json!("late"),
        SubmitOptions::default().expires_at(start + Duration::from_secs(12)),
    )
    .unwrap();
    let late = b.submit(late).await.unwrap().id;
    clock.advance(Duration::from_secs(2));
    b.claim("live", &["t".into()], 10, Duration::from_secs(30), "w")
        .await
        .unwrap();
    assert_eq!(status(late).await, ExecutionStatus::Queued);
}

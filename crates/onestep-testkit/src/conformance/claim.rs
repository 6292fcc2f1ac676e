//! Claim and claim-time maintenance: order, delays, expiry, reclaiming expired leases.

use onestep_core::clock::Clock;
use onestep_core::execution::{
    ExecutionBackend, ExecutionCompletion, ExecutionError, ExecutionStatus, LeasedExecutionBackend,
    SubmitOptions,
};
use serde_json::json;

use super::*;

/// Delayed work is invisible to claims until its `available_at`.
pub async fn claim_skips_delayed_execution_until_available_at<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = b
        .submit(request(
            "t",
            json!(1),
            SubmitOptions::default().delay(secs(10.0)),
        ))
        .await
        .unwrap();
    assert_eq!(e.available_at, after(&setup, 10.0));
    assert!(claim(&b, "t", 5, 30.0).await.is_empty());
    setup.clock.advance(secs(9.999));
    assert!(claim(&b, "t", 5, 30.0).await.is_empty());
    setup.clock.advance(secs(0.001));
    assert_eq!(claim(&b, "t", 5, 30.0).await.len(), 1);
}

/// A claim starts attempt 1 under a new lease; the attempt id is not the execution id.
pub async fn claim_starts_a_running_attempt_with_envelope_attempts_zero<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!({"x": 1})).await;
    let lease = claim_one(&b, "t", 30.0).await;
    assert_eq!(lease.execution.id, e.id);
    assert_eq!(lease.execution.status, ExecutionStatus::Running);
    assert_eq!((lease.execution.attempts, lease.execution.version), (1, 1));
    assert_ne!(lease.attempt_id, e.id);
    assert_eq!(lease.lease_expires_at, after(&setup, 30.0));
    assert_eq!(lease.execution.started_at, Some(setup.clock.now()));
    assert_eq!(lease.execution.payload, json!({"x": 1}));
    assert!(
        claim(&b, "t", 5, 30.0).await.is_empty(),
        "a running execution is not claimed twice"
    );
}

/// Claims take the oldest `available_at` first, then `created_at`, and no more than the limit.
pub async fn claim_orders_by_available_at_then_created_at_and_respects_the_limit<
    F: BackendFactory,
>(
    f: &F,
) {
    let (b, setup) = backend(f).await;
    let late = b
        .submit(request(
            "t",
            json!("late"),
            SubmitOptions::default().delay(secs(5.0)),
        ))
        .await
        .unwrap();
    setup.clock.advance(secs(1.0));
    let first = submit(&b, "t", json!("first")).await;
    setup.clock.advance(secs(1.0));
    let second = submit(&b, "t", json!("second")).await;
    setup.clock.advance(secs(10.0));
    let leases = claim(&b, "t", 2, 30.0).await;
    assert_eq!(
        leases.iter().map(|l| l.execution.id).collect::<Vec<_>>(),
        vec![first.id, second.id]
    );
    let rest = claim(&b, "t", 2, 30.0).await;
    assert_eq!(
        rest.iter().map(|l| l.execution.id).collect::<Vec<_>>(),
        vec![late.id]
    );
    submit(&b, "other", json!(1)).await;
    assert!(
        claim(&b, "t", 5, 30.0).await.is_empty(),
        "claims only the named tasks"
    );
}

/// Claim arguments are checked before any I/O.
pub async fn claim_validates_its_arguments<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let t = vec!["t".to_string()];
    let err = |r: Result<Vec<_>, ExecutionError>| r.unwrap_err().to_string();
    assert_eq!(
        err(b.claim(NS, &[], 1, secs(1.0), "w").await),
        "task_names must contain at least one task name"
    );
    assert!(
        err(b
            .claim(NS, &["t".into(), "t".into()], 1, secs(1.0), "w")
            .await)
        .contains("twice")
    );
    assert_eq!(
        err(b.claim(NS, &t, 0, secs(1.0), "w").await),
        "limit must be >= 1, got 0"
    );
    assert_eq!(
        err(b.claim(NS, &t, 1, secs(0.0), "w").await),
        "lease_duration_s must be > 0, got 0"
    );
    assert_eq!(
        err(b.claim(NS, &t, 1, secs(1.0), "  ").await),
        "worker_id must be a non-empty string"
    );
}

/// Queued work whose `expires_at` has passed expires at the next claim instead of starting.
pub async fn claim_expires_queued_work_past_expires_at<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = b
        .submit(request(
            "t",
            json!(1),
            SubmitOptions::default().expires_at(after(&setup, 5.0)),
        ))
        .await
        .unwrap();
    setup.clock.advance(secs(5.0));
    assert!(claim(&b, "t", 5, 30.0).await.is_empty());
    let expired = b.get(NS, e.id).await.unwrap().unwrap();
    assert_eq!(expired.status, ExecutionStatus::Expired);
    assert_eq!(expired.finished_at, Some(setup.clock.now()));
    assert_eq!(expired.version, 1);
}

/// Work retrying after a handler failure also expires once past `expires_at`.
pub async fn claim_expires_handler_retrying_work_past_expires_at<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = b
        .submit(request(
            "t",
            json!(1),
            SubmitOptions::default().expires_at(after(&setup, 10.0)),
        ))
        .await
        .unwrap();
    let lease = claim_one(&b, "t", 30.0).await;
    complete(
        &b,
        &lease,
        ExecutionCompletion::Retrying {
            error: Some(detail("error", "E")),
            delay_s: Some(1.0),
        },
    )
    .await
    .unwrap();
    setup.clock.advance(secs(11.0));
    assert!(claim(&b, "t", 5, 30.0).await.is_empty());
    assert_eq!(
        b.get(NS, e.id).await.unwrap().unwrap().status,
        ExecutionStatus::Expired
    );
}

/// An expired running lease is reclaimed by the next claim as a new attempt with a new token; the
/// old worker's completion is rejected.
pub async fn expired_running_lease_is_reclaimed_as_a_new_attempt_and_fences_the_old_token<
    F: BackendFactory,
>(
    f: &F,
) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let old = claim_one(&b, "t", 30.0).await;
    setup.clock.advance(secs(31.0));
    let new = claim_one(&b, "t", 30.0).await;
    assert_eq!(new.execution.id, e.id);
    assert_eq!(new.execution.attempts, 2);
    assert_ne!(new.lease_token, old.lease_token);
    assert_eq!(new.execution.version, 3, "claim, reclaim, claim");
    let stale = complete(
        &b,
        &old,
        ExecutionCompletion::Succeeded {
            result: json!("zombie"),
        },
    )
    .await
    .unwrap_err();
    assert!(stale.is_lease_lost());
    let done = complete(
        &b,
        &new,
        ExecutionCompletion::Succeeded {
            result: json!("fresh"),
        },
    )
    .await
    .unwrap();
    assert_eq!(done.result, Some(json!("fresh")));
}

/// Work whose lease was lost is still reclaimed after its `expires_at`: it had started.
pub async fn lease_lost_work_is_reclaimed_even_after_its_expires_at<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = b
        .submit(request(
            "t",
            json!(1),
            SubmitOptions::default().expires_at(after(&setup, 10.0)),
        ))
        .await
        .unwrap();
    claim_one(&b, "t", 30.0).await;
    setup.clock.advance(secs(31.0));
    let again = claim_one(&b, "t", 30.0).await;
    assert_eq!((again.execution.id, again.execution.attempts), (e.id, 2));
    setup.clock.advance(secs(31.0));
    let third = claim_one(&b, "t", 30.0).await;
    assert_eq!(
        third.execution.attempts, 3,
        "a lease-lost retry never expires"
    );
}

/// Each claim reclaims at most `reclaim_batch_size` expired leases.
pub async fn claim_reclaims_stale_leases_in_bounded_batches<F: BackendFactory>(f: &F) {
    let (b, setup) = backend_with(
        f,
        Setup {
            reclaim_batch_size: 1,
            ..Setup::default()
        },
    )
    .await;
    submit(&b, "t", json!(1)).await;
    submit(&b, "t", json!(2)).await;
    assert_eq!(claim(&b, "t", 5, 30.0).await.len(), 2);
    setup.clock.advance(secs(31.0));
    assert_eq!(claim(&b, "u", 5, 30.0).await.len(), 0);
    let retrying = onestep_core::execution::ExecutionQuery {
        namespace: NS.into(),
        task_name: Some("t".into()),
        status: Some(ExecutionStatus::Retrying),
        limit: 10,
        cursor: None,
    };
    assert_eq!(
        b.list(&retrying).await.unwrap().items.len(),
        1,
        "one reclaim per claim call"
    );
    assert_eq!(
        claim(&b, "t", 5, 30.0).await.len(),
        2,
        "the second reclaim happens on the next claim"
    );
}

/// Maintenance is global: a claim for one namespace recovers expired leases in every namespace.
pub async fn claim_maintenance_spans_every_namespace<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let other = b
        .submit(
            onestep_core::execution::ExecutionRequest::new(
                "other-ns",
                "x",
                json!(1),
                SubmitOptions::default(),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    b.claim("other-ns", &["x".into()], 1, secs(30.0), "w")
        .await
        .unwrap();
    setup.clock.advance(secs(31.0));
    claim(&b, "t", 1, 30.0).await;
    assert_eq!(
        b.get("other-ns", other.id).await.unwrap().unwrap().status,
        ExecutionStatus::Retrying
    );
}

/// A cancel-requested execution whose worker's lease expired becomes cancelled at the next claim.
pub async fn expired_cancel_requested_lease_becomes_cancelled<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    claim_one(&b, "t", 30.0).await;
    b.request_cancel(NS, e.id, None).await.unwrap();
    setup.clock.advance(secs(30.0));
    assert!(claim(&b, "t", 5, 30.0).await.is_empty());
    let row = b.get(NS, e.id).await.unwrap().unwrap();
    assert_eq!(row.status, ExecutionStatus::Cancelled);
    assert_eq!(row.finished_at, Some(setup.clock.now()));
}

/// `claim_to_run` claims as `claim` does (oldest first, a running attempt under a new lease, a
/// running execution not claimed twice) and answers what the stored execution holds: tagged
/// payload values decoded, the metadata, the attempt count, the ready time; the lease fences
/// writes as a `claim`'s does.
pub async fn claim_to_run_answers_what_a_worker_runs_with<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let payload = json!({
        "when": {"$onestep": {"type": "datetime", "value": "2026-01-02T03:04:05.000006+08:00", "fold": 0}},
        "blob": {"$onestep": {"type": "bytes", "value": "AAEC/w=="}},
        "huge": 100000000000000000000000000001_u128,
    });
    let mut metadata = Map::new();
    metadata.insert("tenant".into(), json!("acme"));
    let first = b
        .submit(request(
            "t",
            payload.clone(),
            SubmitOptions::default().metadata(metadata.clone()),
        ))
        .await
        .unwrap();
    setup.clock.advance(secs(0.001));
    let second = submit(&b, "t", json!(2)).await;
    let claimed = claim_to_run(&b, "t", 5, 30.0).await;
    assert_eq!(
        claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![first.id, second.id],
        "oldest first"
    );
    let c = &claimed[0];
    let stored = b.get(NS, first.id).await.unwrap().unwrap();
    assert_eq!(stored.status, ExecutionStatus::Running);
    assert_eq!((c.namespace.as_str(), c.task_name.as_str()), (NS, "t"));
    assert_eq!(c.payload, payload);
    assert_eq!(c.payload, stored.payload);
    assert_eq!(c.metadata, metadata);
    assert_eq!(c.metadata, stored.metadata);
    assert_eq!((c.attempts, stored.attempts), (1, 1));
    assert_eq!(c.available_at, stored.available_at);
    assert_eq!(c.lease_expires_at, after(&setup, 30.0));
    assert_ne!(c.attempt_id, c.id);
    assert!(
        claim_to_run(&b, "t", 5, 30.0).await.is_empty(),
        "a running execution is not claimed twice"
    );
    // The lease is the claim's: a wrong token is refused, the right one retries the execution,
    // and the next claim counts a second attempt.
    let wrong = b
        .complete(
            c.id,
            c.attempt_id,
            uuid::Uuid::new_v4(),
            ExecutionCompletion::Succeeded { result: json!(1) },
        )
        .await;
    assert!(wrong.is_err(), "a token that is not the lease's is refused");
    let retry = ExecutionCompletion::Retrying {
        error: None,
        delay_s: Some(0.0),
    };
    b.complete(c.id, c.attempt_id, c.lease_token, retry)
        .await
        .unwrap();
    let again = claim_to_run(&b, "t", 5, 30.0).await;
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempts), (first.id, 2));
    assert_ne!(again[0].lease_token, c.lease_token);
}

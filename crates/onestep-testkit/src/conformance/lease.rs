//! Claim, heartbeat, complete and release (the worker side of the storage contract).

use onestep_core::clock::Clock;
use onestep_core::execution::stored::MAX_STORED_DEPTH;
use onestep_core::execution::{
    ExecutionBackend, ExecutionClient, ExecutionCompletion, ExecutionError, ExecutionLimits,
    ExecutionStatus, LeasedExecutionBackend, SubmitOptions,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::*;

fn after(setup: &Setup, s: f64) -> OffsetDateTime {
    setup.clock.now() + secs(s)
}

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

/// A heartbeat renews only the lease it names; a wrong token or attempt is a lost lease.
pub async fn heartbeat_extends_only_the_matching_lease<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    setup.clock.advance(secs(20.0));
    let beat = b
        .heartbeat(e.id, lease.attempt_id, lease.lease_token, secs(30.0))
        .await
        .unwrap();
    assert_eq!(beat.lease_expires_at, after(&setup, 30.0));
    assert!(!beat.cancel_requested);
    let wrong_token = b
        .heartbeat(e.id, lease.attempt_id, uuid::Uuid::new_v4(), secs(30.0))
        .await
        .unwrap_err();
    assert!(wrong_token.is_lease_lost(), "{wrong_token}");
    assert_eq!(
        wrong_token.to_string(),
        "execution lease is no longer valid"
    );
    let wrong_attempt = b
        .heartbeat(e.id, uuid::Uuid::new_v4(), lease.lease_token, secs(30.0))
        .await
        .unwrap_err();
    assert!(wrong_attempt.is_lease_lost());
    assert_eq!(
        b.get(NS, e.id).await.unwrap().unwrap().version,
        1,
        "heartbeats do not bump the version"
    );
    setup.clock.advance(secs(25.0));
    assert!(
        claim(&b, "t", 5, 30.0).await.is_empty(),
        "the renewed lease still holds"
    );
}

/// At exactly the lease's end, heartbeat, complete and release all fail and nothing changes.
pub async fn expired_lease_rejects_heartbeat_complete_and_release<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    setup.clock.advance(secs(30.0));
    let beat = b
        .heartbeat(e.id, lease.attempt_id, lease.lease_token, secs(30.0))
        .await
        .unwrap_err();
    assert!(beat.is_lease_lost());
    let done = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded { result: json!(1) },
    )
    .await
    .unwrap_err();
    assert!(done.is_lease_lost());
    let released = b
        .release(e.id, lease.attempt_id, lease.lease_token)
        .await
        .unwrap_err();
    assert!(released.is_lease_lost());
    let row = b.get(NS, e.id).await.unwrap().unwrap();
    assert_eq!((row.status, row.version), (ExecutionStatus::Running, 1));
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

/// A successful completion stores the result, clears the lease and finishes the execution.
pub async fn complete_success_updates_the_execution_and_its_attempt<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    setup.clock.advance(secs(2.0));
    let done = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!({"rows": [1, 2]}),
        },
    )
    .await
    .unwrap();
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert_eq!(done.result, Some(json!({"rows": [1, 2]})));
    assert_eq!(done.error, None);
    assert_eq!(done.finished_at, Some(setup.clock.now()));
    assert_eq!(done.version, 2);
    assert_eq!(b.get(NS, e.id).await.unwrap().unwrap(), done);
    let beat = b
        .heartbeat(e.id, lease.attempt_id, lease.lease_token, secs(30.0))
        .await
        .unwrap_err();
    assert!(beat.is_lease_lost(), "the lease is gone after completion");
}

/// A success arriving after a cancel request ends cancelled with no result and no error.
pub async fn cancel_request_wins_over_a_late_success<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    b.request_cancel(NS, e.id, Some("stop")).await.unwrap();
    let done = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!("ignored"),
        },
    )
    .await
    .unwrap();
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    assert_eq!((done.result, done.error), (None, None));
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    assert!(matches!(
        client.result::<Value>(e.id).await,
        Err(ExecutionError::Cancelled(_))
    ));
}

/// After a cancel request only success (converted) or cancelled completions are accepted.
pub async fn failure_or_retry_after_a_cancel_request_is_rejected_as_stale<F: BackendFactory>(
    f: &F,
) {
    let (b, setup) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    b.request_cancel(NS, e.id, None).await.unwrap();
    for completion in [
        ExecutionCompletion::Failed {
            error: Some(detail("error", "E")),
        },
        ExecutionCompletion::Retrying {
            error: None,
            delay_s: None,
        },
    ] {
        assert!(
            complete(&b, &lease, completion)
                .await
                .unwrap_err()
                .is_lease_lost()
        );
    }
    assert_eq!(
        complete(&b, &lease, ExecutionCompletion::Cancelled)
            .await
            .unwrap()
            .status,
        ExecutionStatus::Cancelled
    );
    setup.clock.advance(secs(60.0));
    assert_eq!(
        b.get(NS, e.id).await.unwrap().unwrap().status,
        ExecutionStatus::Cancelled
    );
}

/// Repeating a success with the same result (keys in any order) returns the stored snapshot; a
/// different result is a lost lease.
pub async fn terminal_success_replay_requires_an_identical_result<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    let done = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!({"a": 1, "b": 2}),
        },
    )
    .await
    .unwrap();
    let replay = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!({"b": 2, "a": 1}),
        },
    )
    .await
    .unwrap();
    assert_eq!(replay, done);
    let different = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!({"a": 2}),
        },
    )
    .await
    .unwrap_err();
    assert!(different.is_lease_lost());
}

/// Repeating a failure with the same error returns the stored snapshot; another error does not.
pub async fn terminal_failure_replay_requires_an_identical_error<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    let failed = complete(
        &b,
        &lease,
        ExecutionCompletion::Failed {
            error: Some(detail("error", "ValueError")),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        failed.error.as_ref().unwrap().stage.as_deref(),
        Some("handler")
    );
    let replay = complete(
        &b,
        &lease,
        ExecutionCompletion::Failed {
            error: Some(detail("error", "ValueError")),
        },
    )
    .await
    .unwrap();
    assert_eq!(replay, failed);
    let other = complete(
        &b,
        &lease,
        ExecutionCompletion::Failed {
            error: Some(detail("timeout", "TimeoutError")),
        },
    )
    .await;
    assert!(other.unwrap_err().is_lease_lost());
}

/// A retrying completion keeps the error, clears the lease and schedules `available_at`.
pub async fn retrying_completion_schedules_the_next_claim_and_clears_the_lease<
    F: BackendFactory,
>(
    f: &F,
) {
    let (b, setup) = backend(f).await;
    submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    setup.clock.advance(secs(5.0));
    let retrying = complete(
        &b,
        &lease,
        ExecutionCompletion::Retrying {
            error: Some(detail("error", "E")),
            delay_s: Some(60.0),
        },
    )
    .await
    .unwrap();
    assert_eq!(retrying.status, ExecutionStatus::Retrying);
    assert_eq!(retrying.available_at, after(&setup, 60.0));
    assert_eq!(retrying.version, 2);
    assert_eq!(retrying.finished_at, None);
    assert_eq!(retrying.error.as_ref().unwrap().exception_type, "E");
    assert!(
        complete(
            &b,
            &lease,
            ExecutionCompletion::Retrying {
                error: None,
                delay_s: None
            }
        )
        .await
        .unwrap_err()
        .is_lease_lost()
    );
    setup.clock.advance(secs(59.0));
    assert!(claim(&b, "t", 1, 30.0).await.is_empty());
    setup.clock.advance(secs(1.0));
    let next = claim_one(&b, "t", 30.0).await;
    assert_eq!(next.execution.attempts, 2);
    let done = complete(
        &b,
        &next,
        ExecutionCompletion::Succeeded { result: json!(1) },
    )
    .await
    .unwrap();
    assert_eq!(done.error, None, "success clears the last error");
}

/// A token that is not the current lease cannot complete in any way.
pub async fn stale_lease_cannot_complete_success_failure_or_retry<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    submit(&b, "t", json!(1)).await;
    let mut lease = claim_one(&b, "t", 30.0).await;
    lease.lease_token = uuid::Uuid::new_v4();
    for completion in [
        ExecutionCompletion::Succeeded { result: json!(1) },
        ExecutionCompletion::Failed { error: None },
        ExecutionCompletion::Retrying {
            error: None,
            delay_s: None,
        },
    ] {
        assert!(
            complete(&b, &lease, completion)
                .await
                .unwrap_err()
                .is_lease_lost()
        );
    }
    let missing = b
        .complete(
            uuid::Uuid::new_v4(),
            lease.attempt_id,
            lease.lease_token,
            ExecutionCompletion::Cancelled,
        )
        .await
        .unwrap_err();
    assert_eq!(missing.to_string(), "execution does not exist");
}

/// A result over the limit is rejected by `validate_result` and by `complete`, which writes
/// nothing; a later failure completion still succeeds.
pub async fn oversized_or_unencodable_results_are_rejected_without_writing<F: BackendFactory>(
    f: &F,
) {
    let limits = ExecutionLimits {
        max_result_bytes: 32,
        ..ExecutionLimits::default()
    };
    let (b, _) = backend_with(
        f,
        Setup {
            limits,
            ..Setup::default()
        },
    )
    .await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    let big = json!("z".repeat(64));
    assert!(matches!(
        b.validate_result(&big),
        Err(ExecutionError::Encoding(_))
    ));
    let err = complete(&b, &lease, ExecutionCompletion::Succeeded { result: big })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "execution result exceeds the configured limit"
    );
    let bad_tag = json!({"$onestep": {"type": "datetime", "value": "nope", "fold": 0}});
    assert!(b.validate_result(&bad_tag).is_err());
    assert_eq!(
        b.get(NS, e.id).await.unwrap().unwrap().status,
        ExecutionStatus::Running
    );
    let failed = complete(
        &b,
        &lease,
        ExecutionCompletion::Failed {
            error: Some(detail("error", "E")),
        },
    )
    .await
    .unwrap();
    assert_eq!(failed.status, ExecutionStatus::Failed);
}

/// A result holding U+0000 or nested deeper than `MAX_STORED_DEPTH` levels as stored, and an error
/// detail holding
/// U+0000, are invalid arguments on every backend and write nothing; the deepest storable result
/// is stored and reads back. Claims refuse a namespace or task name holding U+0000.
pub async fn complete_rejects_results_with_nul_or_nested_too_deep_without_writing<
    F: BackendFactory,
>(
    f: &F,
) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    for (result, message) in [
        (
            json!({"r": ["ok", "a\u{0}b"]}),
            "must not contain the NUL character (\\u0000); found at /r/1",
        ),
        (
            nested(MAX_STORED_DEPTH + 1),
            "is nested 32 levels deep as stored, more than 31",
        ),
    ] {
        assert_invalid(b.validate_result(&result).unwrap_err(), "result", message);
        let err = complete(&b, &lease, ExecutionCompletion::Succeeded { result })
            .await
            .unwrap_err();
        assert_invalid(err, "result", message);
    }
    let mut nul_detail = detail("error", "E");
    nul_detail.exception_type = "E\u{0}".into();
    for completion in [
        ExecutionCompletion::Failed {
            error: Some(nul_detail.clone()),
        },
        ExecutionCompletion::Retrying {
            error: Some(nul_detail.clone()),
            delay_s: None,
        },
    ] {
        let err = complete(&b, &lease, completion).await.unwrap_err();
        assert_invalid(err, "exception_type", NUL);
    }
    let running = b.get(NS, e.id).await.unwrap().unwrap();
    assert_eq!(
        (running.status, running.version, running.result),
        (ExecutionStatus::Running, 1, None)
    );
    assert_invalid(
        b.claim("n\u{0}", &["t".into()], 1, secs(30.0), "w")
            .await
            .unwrap_err(),
        "namespace",
        NUL,
    );
    assert_invalid(
        b.claim(NS, &["t\u{0}".into()], 1, secs(30.0), "w")
            .await
            .unwrap_err(),
        "task_names",
        NUL,
    );
    let done = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: nested(MAX_STORED_DEPTH),
        },
    )
    .await
    .unwrap();
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    assert_eq!(
        client.result::<Value>(e.id).await.unwrap(),
        nested(MAX_STORED_DEPTH)
    );
    assert_eq!(
        client.list(None, None, 10, None).await.unwrap().items.len(),
        1
    );
}

/// Releasing an unstarted claim returns it to the queue; the attempt counts as lease lost.
pub async fn release_returns_an_unstarted_claim_to_the_queue<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    let released = b
        .release(e.id, lease.attempt_id, lease.lease_token)
        .await
        .unwrap();
    assert_eq!(
        (released.status, released.attempts, released.version),
        (ExecutionStatus::Queued, 1, 2)
    );
    assert!(
        b.release(e.id, lease.attempt_id, lease.lease_token)
            .await
            .unwrap_err()
            .is_lease_lost()
    );
    let again = claim_one(&b, "t", 30.0).await;
    assert_eq!(again.execution.attempts, 2, "a release consumes an attempt");
    b.request_cancel(NS, e.id, None).await.unwrap();
    assert!(
        b.release(e.id, again.attempt_id, again.lease_token)
            .await
            .unwrap_err()
            .is_lease_lost()
    );
}

/// Version: 0 at submit, +1 per claim, completion, cancel, expiry, reclaim and release; heartbeats
/// do not count.
pub async fn version_counts_every_state_change_but_heartbeats<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    assert_eq!(e.version, 0);
    let lease = claim_one(&b, "t", 30.0).await;
    b.heartbeat(e.id, lease.attempt_id, lease.lease_token, secs(30.0))
        .await
        .unwrap();
    let retrying = complete(
        &b,
        &lease,
        ExecutionCompletion::Retrying {
            error: None,
            delay_s: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(retrying.version, 2);
    let lease = claim_one(&b, "t", 30.0).await;
    assert_eq!(lease.execution.version, 3);
    let requested = b.request_cancel(NS, e.id, None).await.unwrap().unwrap();
    assert_eq!(requested.version, 4);
    let done = complete(&b, &lease, ExecutionCompletion::Cancelled)
        .await
        .unwrap();
    assert_eq!(done.version, 5);
}

/// A batch of heartbeats is decided lease by lease: held leases are renewed (a cancel request
/// reported), a stale token, a finished execution and an unknown id are lost leases, and only
/// what was renewed changes.
pub async fn heartbeat_many_renews_each_held_lease_on_its_own<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    for n in 0..5 {
        submit(&b, "beats", json!(n)).await;
    }
    let leases = claim(&b, "beats", 5, 30.0).await;
    assert_eq!(leases.len(), 5);
    b.request_cancel(NS, leases[2].execution.id, None)
        .await
        .unwrap()
        .unwrap();
    complete(
        &b,
        &leases[3],
        ExecutionCompletion::Succeeded { result: json!(3) },
    )
    .await
    .unwrap();
    setup.clock.advance(secs(20.0));
    let ids =
        |l: &onestep_core::execution::ExecutionLease| (l.execution.id, l.attempt_id, l.lease_token);
    let unknown = (
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
    );
    let before: Vec<_> = {
        let mut rows = Vec::new();
        for l in &leases {
            rows.push(b.get(NS, l.execution.id).await.unwrap().unwrap());
        }
        rows
    };
    let results = b
        .heartbeat_many(
            &[
                ids(&leases[0]),
                (
                    leases[1].execution.id,
                    leases[1].attempt_id,
                    uuid::Uuid::new_v4(),
                ),
                ids(&leases[2]),
                ids(&leases[3]),
                unknown,
                ids(&leases[4]),
            ],
            secs(30.0),
        )
        .await
        .unwrap();
    assert_eq!(results.len(), 6);
    for i in [0, 2, 5] {
        let beat = results[i].as_ref().unwrap();
        assert_eq!(beat.lease_expires_at, after(&setup, 30.0), "lease {i}");
        assert_eq!(beat.cancel_requested, i == 2, "lease {i}");
    }
    for i in [1, 3, 4] {
        let err = results[i].as_ref().unwrap_err();
        assert!(err.is_lease_lost(), "lease {i}: {err}");
    }
    for (i, l) in leases.iter().enumerate() {
        let row = b.get(NS, l.execution.id).await.unwrap().unwrap();
        assert_eq!(
            row, before[i],
            "a heartbeat changes no visible field (lease {i})"
        );
    }
    // Past the first leases' end: only the one that was not renewed is claimable again.
    setup.clock.advance(secs(25.0));
    let reclaimed: Vec<_> = claim(&b, "beats", 5, 30.0)
        .await
        .into_iter()
        .map(|l| l.execution.id)
        .collect();
    assert_eq!(reclaimed, vec![leases[1].execution.id]);
}

/// A batch of completions is decided one by one: accepted ones are written, a stale token is a
/// lost lease, a repeated terminal completion is a replay, an unknown id does not exist.
pub async fn complete_many_fences_each_completion_on_its_own<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    for n in 0..6 {
        submit(&b, "batch", json!(n)).await;
    }
    let leases = claim(&b, "batch", 6, 30.0).await;
    assert_eq!(leases.len(), 6);
    let replayed = complete(
        &b,
        &leases[3],
        ExecutionCompletion::Succeeded {
            result: json!("done"),
        },
    )
    .await
    .unwrap();
    setup.clock.advance(secs(1.0));
    let item = |l: &onestep_core::execution::ExecutionLease, c| {
        (l.execution.id, l.attempt_id, l.lease_token, c)
    };
    let mut stale = leases[1].clone();
    stale.lease_token = uuid::Uuid::new_v4();
    let results = b
        .complete_many(vec![
            item(
                &leases[0],
                ExecutionCompletion::Succeeded {
                    result: json!({"n": 0}),
                },
            ),
            item(&stale, ExecutionCompletion::Succeeded { result: json!(1) }),
            item(
                &leases[2],
                ExecutionCompletion::Retrying {
                    error: Some(detail("error", "E")),
                    delay_s: Some(5.0),
                },
            ),
            item(
                &leases[3],
                ExecutionCompletion::Succeeded {
                    result: json!("done"),
                },
            ),
            item(
                &leases[4],
                ExecutionCompletion::Failed {
                    error: Some(detail("error", "ValueError")),
                },
            ),
            (
                uuid::Uuid::new_v4(),
                uuid::Uuid::new_v4(),
                uuid::Uuid::new_v4(),
                ExecutionCompletion::Cancelled,
            ),
            item(
                &leases[5],
                ExecutionCompletion::Succeeded {
                    result: json!(null),
                },
            ),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 7);
    // What the batch returns is what it stored, field by field (a JSON `null` result included).
    for (i, result) in results.iter().enumerate() {
        if let Ok(done) = result {
            let stored = b.get(NS, done.id).await.unwrap().unwrap();
            assert_eq!(
                &stored, done,
                "completion {i}: stored row differs from the returned one"
            );
        }
    }
    assert_eq!(
        results[6].as_ref().unwrap().result,
        Some(json!(null)),
        "a JSON null result is stored as JSON null"
    );
    let ok = results[0].as_ref().unwrap();
    assert_eq!(
        (ok.status, ok.result.clone(), ok.version),
        (ExecutionStatus::Succeeded, Some(json!({"n": 0})), 2)
    );
    assert!(results[1].as_ref().unwrap_err().is_lease_lost());
    let retrying = results[2].as_ref().unwrap();
    assert_eq!(retrying.status, ExecutionStatus::Retrying);
    assert_eq!(retrying.available_at, after(&setup, 5.0));
    assert_eq!(
        results[3].as_ref().unwrap(),
        &replayed,
        "a repeated terminal completion is a replay"
    );
    assert_eq!(
        results[4]
            .as_ref()
            .unwrap()
            .error
            .as_ref()
            .unwrap()
            .exception_type,
        "ValueError"
    );
    assert_eq!(
        results[5].as_ref().unwrap_err().to_string(),
        "execution does not exist"
    );
    assert_eq!(
        b.get(NS, leases[1].execution.id)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Running
    );
    assert_eq!(
        b.get(NS, leases[0].execution.id)
            .await
            .unwrap()
            .unwrap()
            .result,
        Some(json!({"n": 0}))
    );
    let again = complete(
        &b,
        &leases[0],
        ExecutionCompletion::Succeeded {
            result: json!({"n": 0}),
        },
    )
    .await
    .unwrap();
    assert_eq!(again.version, 2, "the batch wrote exactly once");
}

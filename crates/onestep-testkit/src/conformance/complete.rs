//! Completing an attempt: success, failure, retry, replays, cancel winning over a late success,
//! limits on results, batches fenced one by one.

use onestep_core::clock::Clock;
use onestep_core::execution::stored::MAX_STORED_DEPTH;
use onestep_core::execution::{
    ExecutionBackend, ExecutionClient, ExecutionCompletion, ExecutionError, ExecutionResult,
    ExecutionStatus, LeasedExecutionBackend,
};
use serde_json::{Value, json};

use super::*;

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
    let (b, _) = backend_with_result_limit(f, 32).await;
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
    let mut stale = leases[1].clone();
    stale.lease_token = uuid::Uuid::new_v4();
    let results = b
        .complete_many(vec![
            batch_item(
                &leases[0],
                ExecutionCompletion::Succeeded {
                    result: json!({"n": 0}),
                },
            ),
            batch_item(&stale, ExecutionCompletion::Succeeded { result: json!(1) }),
            batch_item(
                &leases[2],
                ExecutionCompletion::Retrying {
                    error: Some(detail("error", "E")),
                    delay_s: Some(5.0),
                },
            ),
            batch_item(
                &leases[3],
                ExecutionCompletion::Succeeded {
                    result: json!("done"),
                },
            ),
            batch_item(
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
            batch_item(
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

/// The leases of a mixed batch on `task`: one whose 1 s lease has ended, then `live` running
/// under 30 s leases, the second of which (`[1]`) has a cancel request; the clock is 2 s on.
async fn mixed_batch<B: LeasedExecutionBackend>(
    b: &B,
    setup: &Setup,
    task: &str,
    live: usize,
) -> (ExecutionLease, Vec<ExecutionLease>) {
    for n in 0..=live {
        submit(b, task, json!(n)).await;
    }
    let ending = claim_one(b, task, 1.0).await;
    let leases = claim(b, task, live, 30.0).await;
    assert_eq!(leases.len(), live);
    b.request_cancel(NS, leases[1].execution.id, Some("stop"))
        .await
        .unwrap();
    setup.clock.advance(secs(2.0));
    (ending, leases)
}

/// A batch mixing live leases with a cancel request and an ended lease answers each as a
/// single completion would: the live ones are written, the success after a cancel request
/// ends cancelled, the ended lease is lost and its execution untouched.
pub async fn complete_many_decides_cancels_and_ended_leases_on_their_own<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let (ending, leases) = mixed_batch(&b, &setup, "mixed", 3).await;
    let (live, cancelled, retried) = (&leases[0], &leases[1], &leases[2]);
    let success = || ExecutionCompletion::Succeeded {
        result: json!("ok"),
    };
    let results = b
        .complete_many(vec![
            batch_item(live, success()),
            batch_item(cancelled, success()),
            batch_item(&ending, success()),
            batch_item(
                retried,
                ExecutionCompletion::Retrying {
                    error: Some(detail("error", "E")),
                    delay_s: Some(5.0),
                },
            ),
        ])
        .await
        .unwrap();
    let done = results[0].as_ref().unwrap();
    assert_eq!(
        (done.status, done.result.clone(), done.finished_at),
        (
            ExecutionStatus::Succeeded,
            Some(json!("ok")),
            Some(setup.clock.now())
        )
    );
    let stopped = results[1].as_ref().unwrap();
    assert_eq!(
        (stopped.status, stopped.result.clone()),
        (ExecutionStatus::Cancelled, None)
    );
    assert!(results[2].as_ref().unwrap_err().is_lease_lost());
    let again = results[3].as_ref().unwrap();
    assert_eq!(
        (again.status, again.available_at, again.finished_at),
        (ExecutionStatus::Retrying, after(&setup, 5.0), None)
    );
    for result in results.iter().flatten() {
        assert_eq!(&b.get(NS, result.id).await.unwrap().unwrap(), result);
    }
    let untouched = b.get(NS, ending.execution.id).await.unwrap().unwrap();
    assert_eq!(
        (untouched.status, untouched.result),
        (ExecutionStatus::Running, None)
    );
}

/// A batch item that names another execution's attempt is a lost lease, through `complete_many`
/// and a worker's `complete_many_statuses` alike: its execution stays running, the other
/// execution's attempt is not finished (its own completion is still written), and the rest of
/// the batch is written.
pub async fn complete_many_refuses_an_attempt_of_another_execution<F: BackendFactory>(f: &F) {
    let (b, _setup) = backend(f).await;
    for n in 0..6 {
        submit(&b, "crossed", json!(n)).await;
    }
    let leases = claim(&b, "crossed", 6, 30.0).await;
    assert_eq!(leases.len(), 6);
    let success = || ExecutionCompletion::Succeeded {
        result: json!("ok"),
    };
    for (statuses, group) in [(false, &leases[..3]), (true, &leases[3..])] {
        let (live, crossed, other) = (&group[0], &group[1], &group[2]);
        let mut item = batch_item(crossed, success());
        item.1 = other.attempt_id;
        let batch = vec![batch_item(live, success()), item];
        let answers: Vec<ExecutionResult<ExecutionStatus>> = match statuses {
            true => b.complete_many_statuses(batch).await.unwrap(),
            false => (b.complete_many(batch).await.unwrap().into_iter())
                .map(|answer| answer.map(|execution| execution.status))
                .collect(),
        };
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0].as_ref().ok(), Some(&ExecutionStatus::Succeeded));
        assert!(
            answers[1].as_ref().is_err_and(|e| e.is_lease_lost()),
            "statuses {statuses}: {:?}",
            answers[1]
        );
        let untouched = b.get(NS, crossed.execution.id).await.unwrap().unwrap();
        assert_eq!(
            (untouched.status, untouched.result),
            (ExecutionStatus::Running, None),
            "statuses {statuses}"
        );
        for lease in [other, crossed] {
            let done = complete(&b, lease, success()).await.unwrap();
            assert_eq!(
                done.status,
                ExecutionStatus::Succeeded,
                "statuses {statuses}"
            );
        }
    }
}

/// `complete_many_statuses` decides a mixed batch as `complete_many` does and answers each with
/// the status it left: live success, failure and retry are written, a success after a cancel
/// request ends cancelled, an ended lease is lost and untouched, an invalid completion refused.
pub async fn complete_many_statuses_answers_the_status_each_completion_left<F: BackendFactory>(
    f: &F,
) {
    let (b, setup) = backend(f).await;
    let (ending, leases) = mixed_batch(&b, &setup, "statuses", 5).await;
    let (live, cancelled, failed, retried, invalid) =
        (&leases[0], &leases[1], &leases[2], &leases[3], &leases[4]);
    let success = || ExecutionCompletion::Succeeded {
        result: json!({"ok": true}),
    };
    let answers = b
        .complete_many_statuses(vec![
            batch_item(live, success()),
            batch_item(cancelled, success()),
            batch_item(&ending, success()),
            batch_item(
                failed,
                ExecutionCompletion::Failed {
                    error: Some(detail("error", "F")),
                },
            ),
            batch_item(
                retried,
                ExecutionCompletion::Retrying {
                    error: Some(detail("error", "E")),
                    delay_s: Some(5.0),
                },
            ),
            batch_item(
                invalid,
                ExecutionCompletion::Retrying {
                    error: None,
                    delay_s: Some(f64::NAN),
                },
            ),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 6);
    let expected = [
        (live, ExecutionStatus::Succeeded),
        (cancelled, ExecutionStatus::Cancelled),
        (failed, ExecutionStatus::Failed),
        (retried, ExecutionStatus::Retrying),
    ];
    for (index, (lease, status)) in [0, 1, 3, 4].into_iter().zip(expected) {
        assert_eq!(
            answers[index].as_ref().ok(),
            Some(&status),
            "answer {index}"
        );
        let stored = b.get(NS, lease.execution.id).await.unwrap().unwrap();
        assert_eq!(stored.status, status, "stored {index}");
        let beat = b
            .heartbeat(
                lease.execution.id,
                lease.attempt_id,
                lease.lease_token,
                secs(30.0),
            )
            .await;
        assert!(
            beat.is_err_and(|e| e.is_lease_lost()),
            "the lease is gone {index}"
        );
    }
    let stored = b.get(NS, live.execution.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.result, stored.finished_at),
        (Some(json!({"ok": true})), Some(setup.clock.now()))
    );
    let stored = b.get(NS, retried.execution.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.available_at, stored.finished_at),
        (after(&setup, 5.0), None)
    );
    assert!(answers[2].as_ref().unwrap_err().is_lease_lost());
    let untouched = b.get(NS, ending.execution.id).await.unwrap().unwrap();
    assert_eq!(
        (untouched.status, untouched.result),
        (ExecutionStatus::Running, None)
    );
    assert!(
        matches!(answers[5], Err(ExecutionError::InvalidArgument { .. })),
        "{:?}",
        answers[5]
    );
    let untouched = b.get(NS, invalid.execution.id).await.unwrap().unwrap();
    assert_eq!(untouched.status, ExecutionStatus::Running);
}

/// In a batch, a success whose result cannot be stored still loses to a cancel request (the
/// execution ends cancelled, as a single completion would end it), and is refused as too large
/// where its lease still runs.
pub async fn complete_many_lets_a_cancel_win_over_an_unstorable_result<F: BackendFactory>(f: &F) {
    let (b, _) = backend_with_result_limit(f, 32).await;
    for n in 0..2 {
        submit(&b, "big", json!(n)).await;
    }
    let leases = claim(&b, "big", 2, 30.0).await;
    assert_eq!(leases.len(), 2);
    b.request_cancel(NS, leases[0].execution.id, Some("stop"))
        .await
        .unwrap();
    let big = || ExecutionCompletion::Succeeded {
        result: json!("z".repeat(64)),
    };
    let results = b
        .complete_many(
            leases
                .iter()
                .map(|l| (l.execution.id, l.attempt_id, l.lease_token, big()))
                .collect(),
        )
        .await
        .unwrap();
    let cancelled = results[0].as_ref().unwrap();
    assert_eq!(
        (cancelled.status, cancelled.result.clone()),
        (ExecutionStatus::Cancelled, None)
    );
    assert_eq!(
        results[1].as_ref().unwrap_err().to_string(),
        "execution result exceeds the configured limit"
    );
    assert_eq!(
        b.get(NS, leases[1].execution.id)
            .await
            .unwrap()
            .unwrap()
            .status,
        ExecutionStatus::Running
    );
}

/// A batch of completions stores every result and error exactly as one completion would, through
/// `complete_many` and through a worker's `complete_many_statuses` alike: text beyond ASCII,
/// escapes, control characters, the largest integers, nesting, JSON `null`, a bare string; a
/// retry keeps its error and is due after its delay.
pub async fn complete_many_stores_every_json_value_exactly<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let rich = json!({
        "text": "é ü 中文 😀 \"quoted\" back\\slash\nline\ttab \u{1}\u{7f}",
        "big": u64::MAX,
        "neg": i64::MIN,
        "float": -0.25,
        "nested": [[["deep"]], {}, []],
        "null": null,
    });
    let mut failure = detail("error", "Fehler_ü_😀");
    failure.backend = Some("«quoted» \"twice\" \\ 😀".into());
    for statuses in [false, true] {
        let task = format!("values-{statuses}");
        for n in 0..4 {
            submit(&b, &task, json!(n)).await;
        }
        let leases = claim(&b, &task, 4, 30.0).await;
        assert_eq!(leases.len(), 4);
        let batch = vec![
            batch_item(
                &leases[0],
                ExecutionCompletion::Succeeded {
                    result: rich.clone(),
                },
            ),
            batch_item(
                &leases[1],
                ExecutionCompletion::Succeeded {
                    result: json!("bare string ☃"),
                },
            ),
            batch_item(
                &leases[2],
                ExecutionCompletion::Failed {
                    error: Some(failure.clone()),
                },
            ),
            batch_item(
                &leases[3],
                ExecutionCompletion::Retrying {
                    error: Some(failure.clone()),
                    delay_s: Some(1.5),
                },
            ),
        ];
        let answers: Vec<ExecutionStatus> = if statuses {
            b.complete_many_statuses(batch).await.unwrap()
        } else {
            let done = b.complete_many(batch).await.unwrap();
            done.into_iter().map(|d| d.map(|d| d.status)).collect()
        }
        .into_iter()
        .map(Result::unwrap)
        .collect();
        let expected = [
            (ExecutionStatus::Succeeded, Some(rich.clone()), None),
            (
                ExecutionStatus::Succeeded,
                Some(json!("bare string ☃")),
                None,
            ),
            (ExecutionStatus::Failed, None, Some(failure.clone())),
            (ExecutionStatus::Retrying, None, Some(failure.clone())),
        ];
        for (i, (status, result, error)) in expected.into_iter().enumerate() {
            let row = b.get(NS, leases[i].execution.id).await.unwrap().unwrap();
            assert_eq!(answers[i], status, "answer {i} (statuses: {statuses})");
            assert_eq!(
                (row.status, row.result, row.error),
                (status, result, error),
                "stored {i} (statuses: {statuses})"
            );
            let l = &leases[i];
            let beat = b
                .heartbeat(l.execution.id, l.attempt_id, l.lease_token, secs(30.0))
                .await;
            assert!(
                beat.is_err_and(|e| e.is_lease_lost()),
                "lease {i} ended (statuses: {statuses})"
            );
        }
        let retried = b.get(NS, leases[3].execution.id).await.unwrap().unwrap();
        assert_eq!(
            (retried.available_at, retried.finished_at),
            (after(&setup, 1.5), None),
            "statuses: {statuses}"
        );
    }
}

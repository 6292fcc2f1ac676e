//! Read, list and cancel, and the client over them (the API side after submit).

use onestep_core::execution::{
    ExecutionBackend, ExecutionClient, ExecutionCompletion, ExecutionError, ExecutionQuery,
    ExecutionStatus, SubmitOptions,
};
use serde_json::{Value, json};
use uuid::Uuid;

use onestep_core::clock::Clock;

use super::*;

/// Namespaces isolate executions.
pub async fn get_in_another_namespace_returns_none<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    assert!(b.get("elsewhere", e.id).await.unwrap().is_none());
    assert!(
        b.request_cancel("elsewhere", e.id, None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(b.get(NS, Uuid::new_v4()).await.unwrap().is_none());
}

/// Cancelling queued or retrying work cancels it at once.
pub async fn cancel_of_queued_and_retrying_work_is_immediate<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let queued = submit(&b, "q", json!(1)).await;
    let cancelled = b
        .request_cancel(NS, queued.id, Some("not needed"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert_eq!(cancelled.finished_at, Some(setup.clock.now()));
    assert_eq!(cancelled.cancel_requested_at, Some(setup.clock.now()));
    assert_eq!(cancelled.version, 1);

    let retrying = submit(&b, "r", json!(1)).await;
    let lease = claim_one(&b, "r", 30.0).await;
    complete(
        &b,
        &lease,
        ExecutionCompletion::Retrying {
            error: None,
            delay_s: Some(60.0),
        },
    )
    .await
    .unwrap();
    let cancelled = b
        .request_cancel(NS, retrying.id, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert!(claim(&b, "r", 5, 30.0).await.is_empty());
}

/// Cancelling running work asks the worker to stop; the lease is untouched.
pub async fn cancel_of_running_work_requests_cooperative_cancellation<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    let requested = b
        .request_cancel(NS, e.id, Some("user asked"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(requested.status, ExecutionStatus::CancelRequested);
    assert_eq!(requested.finished_at, None);
    let beat = b
        .heartbeat(e.id, lease.attempt_id, lease.lease_token, secs(30.0))
        .await
        .unwrap();
    assert!(beat.cancel_requested);
}

/// Cancelling finished (or already cancel-requested) work returns it unchanged.
pub async fn cancel_of_finished_work_changes_nothing<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let e = submit(&b, "t", json!(1)).await;
    let lease = claim_one(&b, "t", 30.0).await;
    complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded { result: json!(1) },
    )
    .await
    .unwrap();
    let first = b
        .request_cancel(NS, e.id, Some("late"))
        .await
        .unwrap()
        .unwrap();
    let second = b
        .request_cancel(NS, e.id, Some("later"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.status, ExecutionStatus::Succeeded);
    assert_eq!(first, second);

    let running = submit(&b, "u", json!(1)).await;
    claim_one(&b, "u", 30.0).await;
    let requested = b
        .request_cancel(NS, running.id, Some("first"))
        .await
        .unwrap()
        .unwrap();
    let repeated = b
        .request_cancel(NS, running.id, Some("second"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(requested, repeated, "a repeated cancel is idempotent");
}

/// Cancelling an unknown id returns `None`.
pub async fn cancel_of_a_missing_execution_returns_none<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    assert!(
        b.request_cancel(NS, Uuid::new_v4(), None)
            .await
            .unwrap()
            .is_none()
    );
}

/// Listing is newest first, filters by task and status, and pages with a keyset cursor without
/// duplicates or gaps.
pub async fn list_pages_newest_first_with_filters_and_a_keyset_cursor<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(submit(&b, "a", json!(n)).await.id);
        setup.clock.advance(secs(1.0));
    }
    submit(&b, "b", json!("other task")).await;
    let first = b
        .list(&ExecutionQuery {
            limit: 2,
            ..query(Some("a"), None, 2)
        })
        .await
        .unwrap();
    assert_eq!(
        first.items.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[2], ids[1]]
    );
    let cursor = first.next_cursor.clone().expect("a second page exists");
    let second = b
        .list(&ExecutionQuery {
            cursor: Some(cursor),
            ..query(Some("a"), None, 2)
        })
        .await
        .unwrap();
    assert_eq!(
        second.items.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    assert_eq!(second.next_cursor, None);
    let exact = b.list(&query(Some("a"), None, 3)).await.unwrap();
    assert_eq!((exact.items.len(), exact.next_cursor), (3, None));

    b.request_cancel(NS, ids[1], None).await.unwrap();
    let cancelled = b
        .list(&query(None, Some(ExecutionStatus::Cancelled), 50))
        .await
        .unwrap();
    assert_eq!(
        cancelled.items.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    assert_eq!(b.list(&query(None, None, 50)).await.unwrap().items.len(), 4);
}

/// A well-formed cursor with `v` other than 1 is "unknown cursor version".
pub async fn list_rejects_a_cursor_with_an_unknown_version<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let raw = r#"{"v":2,"created_at":"2026-01-01T00:00:00+00:00","id":"12345678-1234-5678-1234-567812345678"}"#;
    let cursor = base64url(raw.as_bytes());
    let err = b
        .list(&ExecutionQuery {
            cursor: Some(cursor),
            ..query(None, None, 10)
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown cursor version"), "{err}");
}

/// Malformed, padded, non-compact, non-object, boolean-version and over-long cursors are
/// "invalid execution cursor".
pub async fn list_rejects_malformed_and_non_canonical_cursors<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let canonical = r#"{"v":1,"created_at":"2026-01-01T00:00:00+00:00","id":"12345678-1234-5678-1234-567812345678"}"#;
    let mut padded = base64url(canonical.as_bytes());
    while !padded.len().is_multiple_of(4) {
        padded.push('=');
    }
    let cases = vec![
        "not-base64!".to_string(),
        padded,
        base64url(canonical.replace(",", ", ").as_bytes()),
        base64url(b"[]"),
        base64url(canonical.replace("\"v\":1", "\"v\":true").as_bytes()),
        "A".repeat(1025),
    ];
    for cursor in cases {
        let err = b
            .list(&ExecutionQuery {
                cursor: Some(cursor.clone()),
                ..query(None, None, 10)
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid execution cursor"),
            "{cursor:?}: {err}"
        );
    }
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// `result` never waits and reports each status with its own error.
pub async fn client_result_reports_each_status<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let queued = submit(&b, "q", json!(1)).await;
    assert!(matches!(
        client.result::<Value>(queued.id).await,
        Err(ExecutionError::NotReady(_))
    ));
    let running = submit(&b, "r", json!(1)).await;
    let lease = claim_one(&b, "r", 30.0).await;
    assert!(matches!(
        client.result::<Value>(running.id).await,
        Err(ExecutionError::NotReady(_))
    ));
    complete(
        &b,
        &lease,
        ExecutionCompletion::Failed {
            error: Some(detail("error", "ValueError")),
        },
    )
    .await
    .unwrap();
    match client.result::<Value>(running.id).await {
        Err(ExecutionError::Failed(e)) => assert_eq!(e.error.unwrap().exception_type, "ValueError"),
        other => panic!("expected Failed, got {other:?}"),
    }
    let cancelled = submit(&b, "c", json!(1)).await;
    client.cancel(cancelled.id, Some("  ")).await.unwrap();
    assert!(matches!(
        client.result::<Value>(cancelled.id).await,
        Err(ExecutionError::Cancelled(_))
    ));
    let succeeded = submit(&b, "s", json!(1)).await;
    let lease = claim_one(&b, "s", 30.0).await;
    complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!({"answer": 42}),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        client.result::<Value>(succeeded.id).await.unwrap(),
        json!({"answer": 42})
    );
    let err = client.result::<Vec<u8>>(succeeded.id).await.unwrap_err();
    assert!(matches!(err, ExecutionError::Encoding(_)));
    let terminal = client.wait(succeeded.id, secs(1.0)).await.unwrap();
    assert_eq!(terminal.status, ExecutionStatus::Succeeded);
}

/// The client rejects bad arguments before anything reaches the backend.
pub async fn client_validates_arguments_before_any_io<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    assert!(ExecutionClient::new(b.clone(), "  ").is_err());
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let err = client.list(None, None, 0, None).await.unwrap_err();
    assert_eq!(err.to_string(), "limit must be between 1 and 200, got 0");
    assert!(client.list(None, None, 201, None).await.is_err());
    let err = client
        .cancel(Uuid::new_v4(), Some(&"x".repeat(501)))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "reason must be at most 500 characters, got 501"
    );
    let err = client.get_str("not-a-uuid").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "execution_id must be a UUID, got \"not-a-uuid\""
    );
    let err = client
        .submit("", &json!(1), SubmitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "task_name must be a non-empty string");
    let err = client
        .submit(
            "t",
            &json!(1),
            SubmitOptions::default().delay_secs(f64::NAN),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("delay_s must be a finite number >= 0")
    );
    assert!(
        b.list(&query(None, None, 10))
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

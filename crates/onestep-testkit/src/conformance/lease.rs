//! Holding a lease: heartbeats one by one and in batches, fencing by token, release, versions.

use onestep_core::execution::{
    ExecutionBackend, ExecutionCompletion, ExecutionStatus, LeasedExecutionBackend,
};
use serde_json::json;

use super::*;

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

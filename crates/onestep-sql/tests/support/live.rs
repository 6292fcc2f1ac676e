//! Live tests shared by PostgreSQL and MySQL: what only a real server with concurrent sessions
//! shows. Time is the real clock (database time on PostgreSQL).

use std::collections::HashSet;
use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionCompletion, ExecutionRequest, ExecutionStatus,
    LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use serde_json::json;
use tokio::task::JoinSet;

/// Options with fresh random table names and the dialect's own clock.
pub fn fresh_options() -> BackendOptions {
    let store: String = format!("live{}", uuid::Uuid::new_v4().simple())
        .chars()
        .take(20)
        .collect();
    BackendOptions::default()
        .with_table(format!("{store}_executions"))
        .with_attempts_table(format!("{store}_attempts"))
}

fn request(task: &str, n: usize) -> ExecutionRequest {
    ExecutionRequest::new("live", task, json!({"n": n}), SubmitOptions::default()).unwrap()
}

async fn claim<D: Dialect>(
    b: &SqlExecutionBackend<D>,
    task: &str,
    limit: usize,
    lease: f64,
    worker: &str,
) -> Vec<onestep_core::execution::ExecutionLease> {
    b.claim(
        "live",
        &[task.to_string()],
        limit,
        Duration::from_secs_f64(lease),
        worker,
    )
    .await
    .unwrap()
}

/// Six backends opening the same tables at once all succeed (DDL is serialized).
pub async fn concurrent_auto_create_is_serialized<D: Dialect>(dsn: &str) {
    let options = fresh_options();
    let mut set = JoinSet::new();
    for _ in 0..6 {
        let b = SqlExecutionBackend::<D>::new(dsn, options.clone()).unwrap();
        set.spawn(async move { b.open().await });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap()
            .unwrap_or_else(|e| panic!("concurrent open failed: {e}"));
    }
}

/// One executions table can serve two attempts tables.
pub async fn two_attempts_tables_can_share_one_executions_table<D: Dialect>(dsn: &str) {
    let a = fresh_options();
    let mut b_opts = a.clone();
    b_opts.attempts_table = format!("{}_other", a.attempts_table);
    let first = SqlExecutionBackend::<D>::new(dsn, a).unwrap();
    let second = SqlExecutionBackend::<D>::new(dsn, b_opts).unwrap();
    let e = first.submit(request("t", 1)).await.unwrap();
    let lease = claim(&second, "t", 1, 30.0, "w").await.remove(0);
    assert_eq!(lease.execution.id, e.id);
    let done = second
        .complete(
            e.id,
            lease.attempt_id,
            lease.lease_token,
            ExecutionCompletion::Succeeded { result: json!(1) },
        )
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert_eq!(
        first.attempts(e.id).await.unwrap().len(),
        0,
        "the first attempts table saw nothing"
    );
    assert_eq!(second.attempts(e.id).await.unwrap().len(), 1);
}

/// Eight concurrent submits with one idempotency key create one execution.
pub async fn concurrent_submits_with_one_key_create_one_execution<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    b.open().await.unwrap();
    let mut set = JoinSet::new();
    for _ in 0..8 {
        let b = b.clone();
        set.spawn(async move {
            let r = ExecutionRequest::new(
                "live",
                "once",
                json!({"same": true}),
                SubmitOptions::default().idempotency_key("k"),
            )
            .unwrap();
            b.submit(r).await
        });
    }
    let mut ids = HashSet::new();
    while let Some(done) = set.join_next().await {
        ids.insert(done.unwrap().unwrap().id);
    }
    assert_eq!(ids.len(), 1, "every submit returned the same execution");
    let page = b
        .list(&onestep_core::execution::ExecutionQuery {
            namespace: "live".into(),
            task_name: None,
            status: None,
            limit: 50,
            cursor: None,
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
}

/// Four concurrent batch submits of overlapping keys (each batch its own mix of the same 200
/// keys plus 20 keyless requests) create one execution per key: every batch reports the same
/// execution for a key, whichever batch stored it, and nothing else is lost or duplicated.
pub async fn concurrent_batches_with_overlapping_keys_create_one_execution_per_key<D: Dialect>(
    dsn: &str,
) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    b.open().await.unwrap();
    let mut set = JoinSet::new();
    for batch in 0..4usize {
        let b = b.clone();
        set.spawn(async move {
            // Batches list the keys from different ends; the insert orders them by key, which
            // is what keeps these batches from deadlocking.
            let mut keys: Vec<usize> = (0..200).collect();
            if batch % 2 == 1 {
                keys.reverse();
            }
            let mut requests: Vec<ExecutionRequest> = keys
                .iter()
                .map(|k| {
                    let options = SubmitOptions::default().idempotency_key(format!("k{k}"));
                    ExecutionRequest::new("live", "many", json!({"k": k}), options).unwrap()
                })
                .collect();
            requests.extend((0..20).map(|n| request("many", 1_000 + n)));
            let results = b.submit_many(requests).await.unwrap();
            let mut by_key = std::collections::HashMap::new();
            for (k, r) in keys.iter().zip(&results) {
                by_key.insert(*k, r.as_ref().unwrap().id);
            }
            for r in &results[200..] {
                r.as_ref().unwrap();
            }
            by_key
        });
    }
    let mut seen: Option<std::collections::HashMap<usize, uuid::Uuid>> = None;
    while let Some(done) = set.join_next().await {
        let by_key = done.unwrap();
        match &seen {
            None => seen = Some(by_key),
            Some(first) => assert_eq!(first, &by_key, "every batch reports the same executions"),
        }
    }
    let stats = b.stats(Some("live")).await.unwrap();
    let total: usize = stats.iter().map(|s| s.count).sum();
    assert_eq!(
        total,
        200 + 4 * 20,
        "one execution per key plus every keyless request"
    );
}

/// `stats` counts each status of one namespace (every status listed, absent ones as zero) with
/// the oldest submission of each, in one pass; other namespaces stay out unless asked for.
pub async fn stats_count_each_status_with_its_oldest_submission<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    b.open().await.unwrap();
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(b.submit(request("s", n)).await.unwrap());
        // Distinct submission times, so "oldest" is well defined.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let other =
        ExecutionRequest::new("elsewhere", "s", json!(1), SubmitOptions::default()).unwrap();
    b.submit(other).await.unwrap();
    b.request_cancel("live", ids[1].id, None).await.unwrap();
    let claimed = claim(&b, "s", 1, 30.0, "w").await;
    assert_eq!(
        claimed[0].execution.id, ids[0].id,
        "the oldest is claimed first"
    );

    let stats = b.stats(Some("live")).await.unwrap();
    assert_eq!(
        stats.len(),
        ExecutionStatus::ALL.len(),
        "every status is listed"
    );
    let of = |status| stats.iter().find(|s| s.status == status).unwrap();
    assert_eq!(of(ExecutionStatus::Running).count, 1);
    assert_eq!(of(ExecutionStatus::Cancelled).count, 1);
    assert_eq!(of(ExecutionStatus::Queued).count, 2);
    assert_eq!(of(ExecutionStatus::Succeeded).count, 0);
    assert_eq!(of(ExecutionStatus::Succeeded).oldest_created_at, None);
    assert_eq!(
        of(ExecutionStatus::Queued).oldest_created_at,
        Some(ids[2].created_at),
        "the oldest queued submission"
    );
    assert_eq!(
        of(ExecutionStatus::Running).oldest_created_at,
        Some(ids[0].created_at)
    );
    let everywhere = b.stats(None).await.unwrap();
    let queued = everywhere
        .iter()
        .find(|s| s.status == ExecutionStatus::Queued)
        .unwrap();
    assert_eq!(
        queued.count, 3,
        "without a namespace every namespace counts"
    );
}

/// Eight workers claiming 300 rows concurrently never claim a row twice and miss none.
pub async fn concurrent_claimers_never_claim_a_row_twice<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    let requests = (0..300).map(|n| request("bulk", n)).collect();
    for r in b.submit_many(requests).await.unwrap() {
        r.unwrap();
    }
    let mut set = JoinSet::new();
    for w in 0..8 {
        let b = b.clone();
        set.spawn(async move {
            let mut mine = Vec::new();
            let mut empty = 0;
            while empty < 3 {
                let leases = claim(&b, "bulk", 10, 60.0, &format!("worker-{w}")).await;
                if leases.is_empty() {
                    empty += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                mine.extend(leases.into_iter().map(|l| l.execution.id));
            }
            mine
        });
    }
    let mut all = Vec::new();
    let mut busy_workers = 0;
    while let Some(done) = set.join_next().await {
        let mine = done.unwrap();
        busy_workers += usize::from(!mine.is_empty());
        all.extend(mine);
    }
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 300, "every row claimed exactly once");
    assert_eq!(unique.len(), 300);
    assert!(
        busy_workers >= 2,
        "SKIP LOCKED lets several workers claim at once"
    );
}

/// A worker that keeps heartbeating keeps its execution; another worker cannot take it over.
pub async fn heartbeat_prevents_takeover<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    let e = b.submit(request("hb", 1)).await.unwrap();
    let lease = claim(&b, "hb", 1, 1.0, "owner").await.remove(0);
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.heartbeat(
            e.id,
            lease.attempt_id,
            lease.lease_token,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
        assert!(claim(&b, "hb", 1, 1.0, "thief").await.is_empty());
    }
    let done = b
        .complete(
            e.id,
            lease.attempt_id,
            lease.lease_token,
            ExecutionCompletion::Succeeded {
                result: json!("mine"),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.attempts, 1);
}

/// A worker renews the leases of its running executions together, with one statement per
/// table, so the renewed attempts carry one heartbeat time (two when their starts straddled a
/// tick of the renewer).
pub async fn a_worker_renews_its_leases_together<D: Dialect>(dsn: &str) {
    use onestep_core::Source;
    use onestep_core::execution::{ExecutionSource, ExecutionSourceOptions};
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    for n in 0..8 {
        b.submit(request("beats", n)).await.unwrap();
    }
    let mut o = ExecutionSourceOptions::new("live", "beats");
    o.lease_duration = Duration::from_secs(3);
    o.heartbeat_interval = Duration::from_secs(1);
    o.batch_size = 8;
    let source = ExecutionSource::new(b.clone(), o).unwrap();
    let mut deliveries = source.fetch(8).await.unwrap();
    assert_eq!(deliveries.len(), 8);
    for d in &mut deliveries {
        d.start_processing().await.unwrap();
    }
    // The renewer ticks every half interval: these leases are renewed at ~1 s and ~2 s; read
    // them half-way, far from either renewal.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut beats = HashSet::new();
    let mut starts = Vec::new();
    let reading = std::time::Instant::now();
    for d in &mut deliveries {
        let id = d.as_managed().unwrap().execution_id();
        let attempts = b.attempts(id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert!(
            attempts[0].heartbeat_at > attempts[0].started_at,
            "attempt of {id} was never renewed"
        );
        beats.insert(attempts[0].heartbeat_at);
        starts.push(attempts[0].started_at);
    }
    // The renewer ticks every half interval and renews what is due within the next half, so
    // leases started a few milliseconds apart may straddle a tick and renew in two groups
    // (each on its own statement) — never one statement per lease. On a loaded machine the
    // eight starts can spread over more ticks, and the eight reads too (renewals go on while
    // they run); each tick either spans allows one more group.
    let span = *starts.iter().max().unwrap() - *starts.iter().min().unwrap();
    let read = reading.elapsed().as_secs_f64();
    let ticks = ((span.as_seconds_f64() + read) / 0.5).ceil() as usize;
    assert!(
        beats.len() <= 2 + ticks && beats.len() < 8,
        "8 leases started within {span} renewed by at most {} statements, got {} distinct \
         heartbeat times: {beats:?}",
        2 + ticks,
        beats.len()
    );
    for d in &mut deliveries {
        d.ack().await.unwrap();
    }
}

/// An expired lease is taken over by another worker; the old worker's completion is fenced.
pub async fn expired_lease_takeover_fences_the_old_worker<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    let e = b.submit(request("takeover", 1)).await.unwrap();
    let old = claim(&b, "takeover", 1, 0.2, "old").await.remove(0);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let new = claim(&b, "takeover", 1, 30.0, "new").await.remove(0);
    assert_eq!((new.execution.id, new.execution.attempts), (e.id, 2));
    let stale = b
        .complete(
            e.id,
            old.attempt_id,
            old.lease_token,
            ExecutionCompletion::Succeeded {
                result: json!("zombie"),
            },
        )
        .await;
    assert!(stale.unwrap_err().is_lease_lost());
    let done = b
        .complete(
            e.id,
            new.attempt_id,
            new.lease_token,
            ExecutionCompletion::Succeeded {
                result: json!("fresh"),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.result, Some(json!("fresh")));
    let attempts = b.attempts(e.id).await.unwrap();
    assert_eq!(
        attempts
            .iter()
            .map(|a| a.status.as_str())
            .collect::<Vec<_>>(),
        ["lease_lost", "succeeded"]
    );
}

/// A cancel racing a success always ends with exactly one terminal outcome; a cancelled
/// execution never keeps the result.
pub async fn cancel_and_complete_race_has_one_terminal_winner<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    for n in 0..20 {
        let e = b.submit(request("race", n)).await.unwrap();
        let lease = claim(&b, "race", 1, 30.0, "w").await.remove(0);
        let (b1, b2) = (b.clone(), b.clone());
        let cancel =
            tokio::spawn(async move { b1.request_cancel("live", e.id, Some("race")).await });
        let complete = tokio::spawn(async move {
            b2.complete(
                e.id,
                lease.attempt_id,
                lease.lease_token,
                ExecutionCompletion::Succeeded {
                    result: json!({"n": n}),
                },
            )
            .await
        });
        cancel.await.unwrap().unwrap();
        let completed = complete.await.unwrap().unwrap();
        let last = b.get("live", e.id).await.unwrap().unwrap();
        assert!(
            matches!(
                last.status,
                ExecutionStatus::Succeeded | ExecutionStatus::Cancelled
            ),
            "{:?}",
            last.status
        );
        assert_eq!(completed.status, last.status);
        if last.status == ExecutionStatus::Cancelled {
            assert_eq!(last.result, None);
            let attempts = b.attempts(e.id).await.unwrap();
            assert_eq!(attempts[0].status.as_str(), "cancelled");
        }
    }
}

/// With `auto_create` off, missing tables are reported by name.
pub async fn missing_tables_are_reported_by_name<D: Dialect>(dsn: &str) {
    let options = fresh_options().with_auto_create(false);
    let (e, a) = (options.table.clone(), options.attempts_table.clone());
    let b = SqlExecutionBackend::<D>::new(dsn, options).unwrap();
    let err = b.open().await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("missing execution tables: {e}, {a}")),
        "{err}"
    );
}

/// A password in the DSN appears in no error, log-facing message or debug output.
pub async fn dsn_passwords_never_appear_in_errors<D: Dialect>(scheme: &str) {
    let secret = "hunter2-very-secret";
    let dsn = format!("{scheme}://app:{secret}@127.0.0.1:1/nowhere");
    let b = SqlExecutionBackend::<D>::new(&dsn, fresh_options()).unwrap();
    let err = b.open().await.unwrap_err();
    for shown in [
        err.to_string(),
        format!("{err:?}"),
        format!("{b:?}"),
        format!("{:?}", b.connector()),
    ] {
        assert!(!shown.contains(secret), "secret leaked in {shown}");
    }
    assert!(
        err.is_retryable(),
        "a refused connection is retryable: {err}"
    );
}

/// A completion rejected as stale leaves no row lock behind: a claim on another connection right
/// after it still gets the row (a lazy rollback would keep the lock and SKIP LOCKED would skip it).
pub async fn a_rejected_completion_leaves_no_row_lock_behind<D: Dialect>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    for n in 0..5 {
        let e = b.submit(request("locks", n)).await.unwrap();
        let first = claim(&b, "locks", 1, 30.0, "w").await.remove(0);
        b.release(e.id, first.attempt_id, first.lease_token)
            .await
            .unwrap();
        let stale = b
            .complete(
                e.id,
                first.attempt_id,
                first.lease_token,
                ExecutionCompletion::Succeeded { result: json!(1) },
            )
            .await;
        assert!(stale.unwrap_err().is_lease_lost());
        let stale_release = b.release(e.id, first.attempt_id, first.lease_token).await;
        assert!(stale_release.unwrap_err().is_lease_lost());
        let again = claim(&b, "locks", 1, 30.0, "w").await;
        assert_eq!(
            again.len(),
            1,
            "round {n}: the row is claimable right after the rejected writes"
        );
        b.complete(
            e.id,
            again[0].attempt_id,
            again[0].lease_token,
            ExecutionCompletion::Succeeded { result: json!(n) },
        )
        .await
        .unwrap();
    }
}

/// A pooled connection whose session was killed while it sat idle is replaced before it is
/// handed out, so the next submit or read does not see it. (Connections used within the last 100 ms
/// are handed out without that ping; sqlx pings every connection as it is given back.)
/// `session_id` reads the asking session's id as a bigint; `kill` ends those sessions from
/// another connection, checking that each was there to end.
pub async fn a_connection_killed_while_idle_is_replaced_unseen<D: Dialect>(
    dsn: &str,
    session_id: &str,
    kill: impl AsyncFn(&str, Vec<i64>),
) {
    let b = SqlExecutionBackend::<D>::new(dsn, fresh_options()).unwrap();
    b.submit(request("idle", 0)).await.unwrap();
    let pool = b.connector().pool().unwrap();
    // The server sessions of every connection the pool holds idle.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut held = Vec::new();
    while pool.num_idle() > 0 {
        held.push(D::begin(&pool).await.unwrap());
    }
    let mut ids = Vec::new();
    for tx in &mut held {
        let rows = D::fetch(tx, session_id, Vec::new()).await.unwrap();
        ids.push(D::bigint(&rows[0], 0).unwrap().unwrap());
    }
    assert!(!ids.is_empty());
    for tx in held {
        tx.commit().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sessions = ids.len();
    kill(dsn, ids).await;
    // Idle past `PING_IF_IDLE_FOR` (100 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A submit and a read each time: a connector submits one by one on a connection of its
    // own (`solo.rs`), which the kill above did not end; a read takes a pooled one.
    for n in 1..=sessions + 1 {
        let submitted = b.submit(request("idle", n)).await.unwrap();
        assert!(b.get("live", submitted.id).await.unwrap().is_some());
    }
}

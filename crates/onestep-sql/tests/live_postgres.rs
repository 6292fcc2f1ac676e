//! Live tests on PostgreSQL (spec §6.8): concurrency, leases on database time, DDL locking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionCompletion, ExecutionRequest, LeasedExecutionBackend, SubmitOptions,
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
    concurrent_batches_with_overlapping_keys_create_one_execution_per_key,
    stats_count_each_status_with_its_oldest_submission,
    concurrent_claimers_never_claim_a_row_twice,
    heartbeat_prevents_takeover,
    a_worker_renews_its_leases_together,
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
    o.poll_interval = Duration::from_secs(10);
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

/// `Postgres::time` reads a binary `timestamptz` from its bytes: every instant reads as sqlx
/// reads it (the epoch's edges, before 1970, far years, microseconds, NULL), and `infinity`, which
/// sqlx's decoder panics on, is a decode error.
#[tokio::test]
async fn stored_instants_read_as_sqlx_reads_them() {
    use onestep_sql::Dialect as _;
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let pool = b.connector().pool().unwrap();
    let texts = [
        "2000-01-01 00:00:00+00",
        "1999-12-31 23:59:59.999999+00",
        "1970-01-01 00:00:00+00",
        "1969-07-20 20:17:40.123456+00",
        "2026-12-05 08:01:02.000001+02",
        "0001-01-01 00:00:00+00",
        "9999-12-31 23:59:59.999999+00",
    ];
    for text in texts {
        // Prepared (sqlx's default), so the value comes in the binary format.
        let row = sqlx::query("SELECT CAST($1 AS timestamptz), CAST(NULL AS timestamptz)")
            .bind(text)
            .fetch_one(&pool)
            .await
            .unwrap();
        let ours = Postgres::time(&row, 0).unwrap();
        let sqlx_reads: time::OffsetDateTime = sqlx::Row::try_get(&row, 0).unwrap();
        assert_eq!(ours, Some(sqlx_reads), "{text}");
        assert_eq!(Postgres::time(&row, 1).unwrap(), None);
    }
    let row = sqlx::query("SELECT CAST('infinity' AS timestamptz)")
        .fetch_one(&pool)
        .await
        .unwrap();
    let err = Postgres::time(&row, 0).unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");
}

/// The one-statement claim on database time (no maintenance pass, so `now` is not bound): the
/// lease it returns is the stored one, and the attempt row starts at the claim's time.
#[tokio::test]
async fn a_claim_on_database_time_stores_the_lease_it_returns() {
    claim_on_database_time(false).await;
}

/// The same through `claim_to_run`, whose statement answers fewer columns.
#[tokio::test]
async fn a_claim_to_run_on_database_time_stores_the_lease_it_returns() {
    claim_on_database_time(true).await;
}

async fn claim_on_database_time(to_run: bool) {
    use onestep_core::execution::ClaimedExecution;
    let url = support::postgres_url();
    let options = live::fresh_options().with_maintenance_interval(Duration::from_secs(3600));
    let b = PostgresExecutionBackend::new(&url, options).unwrap();
    assert!(b.claim_in_one_statement_sql(1).is_some());
    assert!(b.claim_to_run_in_one_statement_sql(1).is_some());
    for n in 0..3 {
        let r = ExecutionRequest::new(
            "live",
            "one",
            serde_json::json!(n),
            SubmitOptions::default(),
        )
        .unwrap();
        b.submit(r).await.unwrap();
    }
    let tasks = vec!["one".to_string()];
    let lease = Duration::from_millis(30_500);
    // The first claim runs maintenance (and binds the time it read); the second does not.
    // Each claimed execution with its `started_at` where the claim answers it.
    let claim = |limit: usize| {
        let (b, tasks) = (&b, &tasks);
        async move {
            let claimed: Vec<(ClaimedExecution, Option<time::OffsetDateTime>)> = if to_run {
                let claimed = b.claim_to_run("live", tasks, limit, lease, " w ").await;
                claimed.unwrap().into_iter().map(|c| (c, None)).collect()
            } else {
                let leases = b.claim("live", tasks, limit, lease, " w ").await.unwrap();
                leases
                    .into_iter()
                    .map(|l| {
                        let started = l.execution.started_at;
                        (ClaimedExecution::from(l), started)
                    })
                    .collect()
            };
            claimed
        }
    };
    let first = claim(1).await;
    let second = claim(5).await;
    assert_eq!((first.len(), second.len()), (1, 2));
    let pool = b.connector().pool().unwrap();
    for (lease, started_at) in first.iter().chain(&second) {
        let sql = format!(
            "SELECT e.lease_token, e.lease_expires_at, e.updated_at, e.worker_id, e.attempts, \
             a.id, a.attempt_no, a.lease_token, a.worker_id, a.status, a.started_at, a.heartbeat_at \
             FROM \"{}\" e JOIN \"{}\" a ON a.execution_id = e.id WHERE e.id = $1",
            b.tables().executions,
            b.tables().attempts
        );
        type Stored = (
            uuid::Uuid,
            time::OffsetDateTime,
            time::OffsetDateTime,
            String,
            i32,
            uuid::Uuid,
            i32,
            uuid::Uuid,
            String,
            String,
            time::OffsetDateTime,
            time::OffsetDateTime,
        );
        let s: Stored = sqlx::query_as(&sql)
            .bind(lease.id)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!((s.0, s.3.as_str(), s.4), (lease.lease_token, "w", 1));
        assert_eq!(
            s.1, lease.lease_expires_at,
            "the stored lease is the returned one"
        );
        assert_eq!(s.1 - s.2, time::Duration::milliseconds(30_500));
        assert_eq!(
            (s.5, s.6, s.7, s.8.as_str(), s.9.as_str()),
            (lease.attempt_id, 1, lease.lease_token, "w", "running")
        );
        assert_eq!(
            (s.10, s.11),
            (s.2, s.2),
            "the attempt starts at the claim's time"
        );
        assert_eq!(lease.attempts, 1);
        if let Some(started_at) = started_at {
            assert_eq!(*started_at, s.2);
        }
    }
    let order: Vec<i64> = first
        .iter()
        .chain(&second)
        .map(|(l, _)| l.payload.as_i64().unwrap())
        .collect();
    assert_eq!(order, vec![0, 1, 2], "claimed oldest first");
}

/// One execution row locked by another session holds up only its own lease renewal: the
/// worker's other running executions keep their leases (no other worker can claim them), and
/// the stuck one's handler is cancelled once its renewal finds the lease gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_row_holds_up_only_its_own_lease_renewal() {
    use onestep_core::Source;
    use onestep_core::execution::{ExecutionSource, ExecutionSourceOptions};
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        let r = ExecutionRequest::new(
            "live",
            "stuck",
            serde_json::json!(n),
            SubmitOptions::default(),
        )
        .unwrap();
        ids.push(b.submit(r).await.unwrap().id);
    }
    let mut o = ExecutionSourceOptions::new("live", "stuck");
    o.lease_duration = Duration::from_millis(1200);
    o.heartbeat_interval = Duration::from_millis(300);
    o.batch_size = 3;
    let source = ExecutionSource::new(b.clone(), o).unwrap();
    let mut deliveries = source.fetch(3).await.unwrap();
    assert_eq!(deliveries.len(), 3);
    for d in &mut deliveries {
        d.start_processing().await.unwrap();
    }
    let stuck_id = deliveries[0].as_managed().unwrap().execution_id();
    let pool = b.connector().pool().unwrap();
    let mut lock = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT id FROM \"{}\" WHERE id = $1 FOR UPDATE",
        b.tables().executions
    ))
    .bind(stuck_id)
    .execute(&mut *lock)
    .await
    .unwrap();
    // Well past the 1.2 s lease: only renewals keep the other two. (A claim here would block:
    // its lease maintenance waits for the locked, expired row, as the reference's does.)
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let recently = time::OffsetDateTime::now_utc() - time::Duration::milliseconds(900);
    for (i, d) in deliveries.iter_mut().enumerate() {
        let id = d.as_managed().unwrap().execution_id();
        let beat = b.attempts(id).await.unwrap()[0].heartbeat_at;
        if i == 0 {
            assert!(
                beat < recently,
                "the locked execution was renewed at {beat}"
            );
        } else {
            assert!(
                beat > recently,
                "execution {i} was last renewed at {beat}, held up by the locked row"
            );
        }
    }
    lock.rollback().await.unwrap();
    // The held-up renewal now runs, finds its lease expired, and cancels that handler only.
    let stuck_cancel = deliveries[0].as_managed().unwrap().cancellation();
    tokio::time::timeout(Duration::from_secs(10), stuck_cancel.cancelled())
        .await
        .expect("the stuck execution's handler is cancelled once its lease is found lost");
    for d in &mut deliveries[1..] {
        assert!(!d.as_managed().unwrap().cancellation().is_cancelled());
        d.ack().await.unwrap();
    }
}

/// A claim's lease maintenance skips an expired row another session holds locked instead of
/// waiting for it; the next claim after the lock is gone reclaims it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_do_not_wait_behind_a_row_locked_elsewhere() {
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let r = ExecutionRequest::new(
        "live",
        "locked",
        serde_json::json!(1),
        SubmitOptions::default(),
    )
    .unwrap();
    let e = b.submit(r).await.unwrap();
    let tasks = ["locked".to_string()];
    let first = b
        .claim("live", &tasks, 1, Duration::from_millis(200), "w1")
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pool = b.connector().pool().unwrap();
    let mut lock = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT id FROM \"{}\" WHERE id = $1 FOR UPDATE",
        b.tables().executions
    ))
    .bind(e.id)
    .execute(&mut *lock)
    .await
    .unwrap();
    let claimed = tokio::time::timeout(
        Duration::from_secs(5),
        b.claim("live", &tasks, 1, Duration::from_secs(30), "w2"),
    )
    .await
    .expect("a claim does not wait behind another session's row lock")
    .unwrap();
    assert!(claimed.is_empty(), "the locked row is left for later");
    lock.rollback().await.unwrap();
    // Maintenance runs at most every `maintenance_interval` (250 ms) per backend.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reclaimed = b
        .claim("live", &tasks, 1, Duration::from_secs(30), "w2")
        .await
        .unwrap();
    assert_eq!(
        reclaimed.len(),
        1,
        "the next claim reclaims the expired lease"
    );
    assert_eq!(
        (reclaimed[0].execution.id, reclaimed[0].execution.attempts),
        (e.id, 2)
    );
}

/// A submit is one statement that commits by itself: its times are the database's, its delay
/// and expiry are kept to the microsecond, what it returns is what is stored, a repeat of its
/// key answers with the stored row (or a conflict), and a key whose row was deleted is free
/// again.
#[tokio::test]
async fn a_submit_in_one_statement_stores_what_it_returns() {
    use onestep_core::execution::{ExecutionError, ExecutionStatus};
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let expires = time::macros::datetime!(2100-01-02 03:04:05.123456789 UTC);
    let request = |payload: serde_json::Value| {
        ExecutionRequest::new(
            "live",
            "one",
            payload,
            SubmitOptions::default()
                .idempotency_key("k")
                .delay_secs(2.0000015)
                .expires_at(expires),
        )
        .unwrap()
    };
    let pool = b.connector().pool().unwrap();
    let before: time::OffsetDateTime = sqlx::query_scalar("SELECT CURRENT_TIMESTAMP")
        .fetch_one(&pool)
        .await
        .unwrap();
    let submitted = b
        .submit(request(serde_json::json!({"n": 1})))
        .await
        .unwrap();
    let after: time::OffsetDateTime = sqlx::query_scalar("SELECT CURRENT_TIMESTAMP")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(submitted.status, ExecutionStatus::Queued);
    assert!(
        before <= submitted.created_at && submitted.created_at <= after,
        "created {} outside the database's {before}..{after}",
        submitted.created_at
    );
    assert_eq!(
        submitted.available_at - submitted.created_at,
        time::Duration::microseconds(2_000_001)
    );
    assert_eq!(
        submitted.expires_at,
        Some(time::macros::datetime!(2100-01-02 03:04:05.123456 UTC))
    );
    let stored = b.get("live", submitted.id).await.unwrap().unwrap();
    assert_eq!(stored, submitted);

    let repeated = b
        .submit(request(serde_json::json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(repeated, submitted);
    let conflict = b.submit(request(serde_json::json!({"n": 2}))).await;
    assert!(
        matches!(conflict, Err(ExecutionError::Conflict(_))),
        "{conflict:?}"
    );

    let executions = &b.tables().executions;
    sqlx::query(&format!("DELETE FROM \"{executions}\" WHERE id = $1"))
        .bind(submitted.id)
        .execute(&pool)
        .await
        .unwrap();
    let again = b
        .submit(request(serde_json::json!({"n": 2})))
        .await
        .unwrap();
    assert_ne!(again.id, submitted.id);
    assert_eq!(b.get("live", again.id).await.unwrap().unwrap(), again);
}

/// See [`live::a_connection_killed_while_idle_is_replaced_unseen`].
#[tokio::test]
async fn a_connection_killed_while_idle_is_replaced_unseen() {
    use sqlx::Connection;
    live::a_connection_killed_while_idle_is_replaced_unseen::<Postgres>(
        &support::postgres_url(),
        "SELECT CAST(pg_backend_pid() AS BIGINT)",
        async |url: &str, pids: Vec<i64>| {
            let mut admin = sqlx::PgConnection::connect(url).await.unwrap();
            for pid in pids {
                let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                    .bind(i32::try_from(pid).unwrap())
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
                assert!(killed, "session {pid}");
            }
        },
    )
    .await;
}

/// The sessions whose last statement was a one-statement submit into `executions`.
async fn inserting(admin: &mut sqlx::PgConnection, executions: &str) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
         AND query LIKE 'WITH t AS (SELECT CURRENT_TIMESTAMP AS now)%' \
         AND position($1 in query) > 0 ORDER BY pid",
    )
    .bind(executions)
    .fetch_all(admin)
    .await
    .unwrap()
}

/// One-by-one submits run on the connector's own connection (`solo.rs`), kept from one submit
/// to the next instead of going back through the pool: the same server session answers every
/// one. Killed while it sat idle, it is replaced before the next submit, which does not see it.
#[tokio::test]
async fn one_by_one_submits_keep_one_session_and_replace_it_once_killed() {
    use sqlx::Connection;
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let executions = b.tables().executions.clone();
    let submit = async |n: i64| {
        let r = ExecutionRequest::new(
            "live",
            "solo",
            serde_json::json!({"n": n}),
            SubmitOptions::default(),
        );
        b.submit(r.unwrap()).await.unwrap();
    };
    submit(0).await;
    let first = inserting(&mut admin, &executions).await;
    assert_eq!(first.len(), 1, "one session submitted: {first:?}");
    for n in 1..=20 {
        submit(n).await;
    }
    assert_eq!(
        inserting(&mut admin, &executions).await,
        first,
        "every submit on the same session"
    );

    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(first[0])
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(killed);
    // Ending a session is asynchronous: wait until it has left.
    for _ in 0..100 {
        if inserting(&mut admin, &executions).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Idle past `PING_IF_IDLE_FOR` (100 ms): tested before it is used again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    submit(21).await;
    let replaced = inserting(&mut admin, &executions).await;
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(replaced, first, "a new session");
    let stored: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{executions}\""))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(stored, 22);
}

/// When the connector's own connection cannot be opened (here: a role at its connection limit,
/// as a server at `max_connections` refuses one more), one-by-one submits use the pool instead
/// of failing.
#[tokio::test]
async fn a_submit_whose_own_connection_is_refused_uses_the_pool() {
    use onestep_sql::{PoolSettings, SqlConnector};
    use sqlx::Connection;
    let url = support::postgres_url();
    let options = live::fresh_options();
    let (executions, attempts) = (options.table.clone(), options.attempts_table.clone());
    let admin_backend = PostgresExecutionBackend::new(&url, options.clone()).unwrap();
    admin_backend.open().await.unwrap();
    let role = format!("solo_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    for statement in [
        format!("CREATE ROLE \"{role}\" LOGIN PASSWORD 'solo' CONNECTION LIMIT 1"),
        format!("GRANT SELECT, INSERT, UPDATE ON \"{executions}\", \"{attempts}\" TO \"{role}\""),
    ] {
        sqlx::query(&statement).execute(&mut admin).await.unwrap();
    }
    let as_role = support::privilege::rewrite(&url, Some((&role, "solo")), None, None);
    let connector = SqlConnector::<Postgres>::new(&as_role)
        .unwrap()
        .with_settings(PoolSettings {
            max_connections: 1,
            ..PoolSettings::default()
        })
        .unwrap();
    let b = PostgresExecutionBackend::from_connector(&connector, options.with_auto_create(false))
        .unwrap();
    let outcome = async {
        // The pool's one connection is the role's one session.
        b.open().await?;
        let mut ids = Vec::new();
        for n in 0..3 {
            let r = ExecutionRequest::new(
                "live",
                "refused",
                serde_json::json!({"n": n}),
                SubmitOptions::default(),
            )?;
            ids.push(b.submit(r).await?.id);
        }
        for id in ids {
            assert!(b.get("live", id).await?.is_some());
        }
        Ok::<_, onestep_core::execution::ExecutionError>(())
    }
    .await;
    connector.close().await;
    sqlx::query(&format!("DROP OWNED BY \"{role}\""))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(&format!("DROP ROLE \"{role}\""))
        .execute(&mut admin)
        .await
        .unwrap();
    outcome.unwrap();
}

/// Renewals, progress and completions of leases find each execution by its id, never through
/// the lease index, however many other executions run. The table's statistics are taken before
/// any execution runs, as on a large table analysed before a batch of long work started. With
/// the lease checks stated bare, PostgreSQL read every running execution's lease entry for the
/// progress report, the renewals and the completions here (and, with 10,000 running, a
/// completion of 125 leases read all 10,000).
#[tokio::test]
async fn writes_to_leases_never_read_the_lease_index() {
    const RUNNING: usize = 1_000;
    let url = support::postgres_url();
    let b = PostgresExecutionBackend::new(&url, live::fresh_options()).unwrap();
    b.open().await.unwrap();
    let pool = b.connector().pool().unwrap();
    let e = b.tables().executions.clone();
    // Statistics taken on history alone, and kept so: autovacuum must not analyse mid-test.
    for statement in [
        format!("ALTER TABLE \"{e}\" SET (autovacuum_enabled = off)"),
        format!(
            "INSERT INTO \"{e}\" (id, namespace, task_name, status, payload, available_at, \
             created_at, updated_at, finished_at) SELECT gen_random_uuid(), 'live', 'done', \
             'succeeded', '{{}}', now(), now(), now(), now() FROM generate_series(1, 500)"
        ),
        format!("ANALYZE \"{e}\""),
    ] {
        sqlx::query(&statement).execute(&pool).await.unwrap();
    }
    let requests = (0..RUNNING)
        .map(|n| {
            ExecutionRequest::new(
                "live",
                "long",
                serde_json::json!(n),
                SubmitOptions::default(),
            )
            .unwrap()
        })
        .collect();
    for submitted in b.submit_many(requests).await.unwrap() {
        submitted.unwrap();
    }
    let mut leases = Vec::new();
    while leases.len() < RUNNING {
        let claimed = b
            .claim(
                "live",
                &["long".into()],
                200,
                Duration::from_secs(3600),
                "w",
            )
            .await
            .unwrap();
        assert!(!claimed.is_empty(), "claimed {} of {RUNNING}", leases.len());
        leases.extend(claimed);
    }
    let counters = LeaseIndexCounters::new(&pool, &e).await;
    let key =
        |l: &onestep_core::execution::ExecutionLease| (l.execution.id, l.attempt_id, l.lease_token);
    let hour = Duration::from_secs(3600);

    let (id, attempt, token) = key(&leases[0]);
    let mut scans = Vec::new();
    let renewal = b.heartbeat(id, attempt, token, hour);
    scans.push(("a renewal", counters.during(1, renewal).await));
    let progress = serde_json::json!({"done": 1});
    let stored = b.report_progress(id, attempt, token, &progress);
    scans.push(("a progress report", counters.during(1, stored).await));
    let batch: Vec<_> = leases[..100].iter().map(key).collect();
    let renewals = b.heartbeat_many(&batch, hour);
    scans.push(("100 renewals", counters.during(100, renewals).await));
    let done = batch
        .iter()
        .map(|&(id, attempt, token)| {
            let completion = ExecutionCompletion::Succeeded {
                result: serde_json::json!(true),
            };
            (id, attempt, token, completion)
        })
        .collect();
    let completions = b.complete_many_statuses(done);
    scans.push(("100 completions", counters.during(100, completions).await));
    assert!(
        scans.iter().all(|(_, n)| *n == 0),
        "scans of the lease index: {scans:?}"
    );
}

/// The server's counters of one executions table and its lease index.
struct LeaseIndexCounters {
    pool: sqlx::PgPool,
    table: String,
    index: String,
}

impl LeaseIndexCounters {
    async fn new(pool: &sqlx::PgPool, table: &str) -> Self {
        let index: String = sqlx::query_scalar(
            "SELECT indexrelid::regclass::text FROM pg_index \
             WHERE indrelid = quote_ident($1)::regclass \
             AND pg_get_indexdef(indexrelid) LIKE '%(lease_expires_at, id)%'",
        )
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap();
        Self {
            pool: pool.clone(),
            table: table.to_string(),
            index,
        }
    }

    /// Rows updated in the table and scans of the lease index, as the server has them.
    async fn read(&self) -> (i64, i64) {
        sqlx::query_as(
            "SELECT t.n_tup_upd, i.idx_scan FROM pg_stat_user_tables t, pg_stat_user_indexes i \
             WHERE t.relid = quote_ident($1)::regclass AND i.indexrelid = $2::regclass",
        )
        .bind(&self.table)
        .bind(&self.index)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    /// The lease index's scans during `operation`, which updates at least `updates` rows of the
    /// table. A session reports its counters about a second after it goes idle: the earlier
    /// operations' are waited out first, and this one's until its updates show.
    async fn during<T, E: std::fmt::Debug>(
        &self,
        updates: i64,
        operation: impl std::future::Future<Output = Result<T, E>>,
    ) -> i64 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (updated, scans) = self.read().await;
        operation.await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (now_updated, now_scans) = self.read().await;
            if now_updated >= updated + updates {
                return now_scans - scans;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server reported {} of {updates} updates in 30 s",
                now_updated - updated
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

//! Least privilege and secrets on real servers (issue 8).
//!
//! A runtime role that may only `SELECT`, `INSERT` and `UPDATE` the two tables (plus `CONNECT` on
//! the database and `USAGE` on the schema on PostgreSQL) runs the whole life cycle with
//! `auto_create: false`; the GRANTs are the ones `docs/deployment-*.md` give. And a password in a
//! DSN never shows in an error (Display, Debug, `{:#?}`, source chain), a `Debug` print or a log
//! line at TRACE level, whatever fails.
//!
//! Each test creates its own role (and on PostgreSQL its own database, with every `PUBLIC`
//! privilege revoked so only the explicit GRANTs count) and drops them afterwards, also when the
//! test fails. The admin connection of `ONESTEP_POSTGRES_URL` needs `CREATEDB` and `CREATEROLE`;
//! that of `ONESTEP_MYSQL_URL` needs `CREATE USER` and `GRANT OPTION`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use onestep_core::execution::{
    AttemptStatus, ExecutionBackend, ExecutionClient, ExecutionCompletion, ExecutionError,
    ExecutionErrorDetail, ExecutionLease, ExecutionSource, ExecutionSourceOptions, ExecutionStatus,
    LeasedExecutionBackend, SubmitOptions,
};
use onestep_core::{ConnectorErrorKind, OneStepApp, Task, TaskContext, TaskError};
use onestep_sql::mysql::MySql;
use onestep_sql::postgres::Postgres;
use onestep_sql::{BackendOptions, Dialect, PoolSettings, SqlConnector, SqlExecutionBackend};
use serde_json::{Value, json};
use support::privilege::{Fixture, LEAK, PASSWORD, Server, Shown, capture, rewrite, shut};

/// The namespace of every execution here.
const NS: &str = "lp";

// --- Tests ----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_with_only_select_insert_update_runs_the_life_cycle_on_postgres() {
    role_runs_the_life_cycle::<Postgres>(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_with_only_select_insert_update_runs_the_life_cycle_on_mysql() {
    role_runs_the_life_cycle::<MySql>(Server::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dsn_password_never_shows_in_errors_debug_or_logs_on_postgres() {
    password_never_shows::<Postgres>(Server::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dsn_password_never_shows_in_errors_debug_or_logs_on_mysql() {
    password_never_shows::<MySql>(Server::MySql).await;
}

async fn role_runs_the_life_cycle<D: Dialect>(server: Server) {
    capture::install();
    let fixture = Fixture::new(server).await;
    let fx = fixture.clone();
    guarded(&fixture, async move {
        fx.create().await;
        let mut shown = Shown::default();
        life_cycle::<D>(&fx).await;
        role_failure_modes::<D>(&fx, &mut shown).await;
        shown.assert_no_leak();
        capture::assert_no_leak();
    })
    .await;
}

async fn password_never_shows<D: Dialect>(server: Server) {
    capture::install();
    let fixture = Fixture::new(server).await;
    let fx = fixture.clone();
    guarded(&fixture, async move {
        fx.create().await;
        let mut shown = Shown::default();
        connection_failures::<D>(&fx, &mut shown).await;
        malformed_dsns::<D>(&fx, &mut shown).await;
        operation_failures::<D>(&fx, &mut shown).await;
        shown.assert_no_leak();
        capture::assert_no_leak();
    })
    .await;
}

/// Runs `body`, then drops the fixture's role, tables and database whatever happened; a failed
/// body's panic is the one reported.
async fn guarded(fixture: &Fixture, body: impl Future<Output = ()> + Send + 'static) {
    let outcome = tokio::spawn(body).await;
    let dropped = fixture.drop_all().await;
    if let Err(panic) = outcome {
        if let Err(e) = dropped {
            eprintln!("dropping the test role and tables failed too: {e}");
        }
        std::panic::resume_unwind(panic.into_panic());
    }
    dropped.unwrap_or_else(|e| panic!("dropping the test role and tables failed: {e}"));
}

// --- The life cycle as the runtime role -----------------------------------------------------

/// Backend options for the fixture's tables: no DDL, maintenance on every claim.
fn runtime_options(fx: &Fixture) -> BackendOptions {
    BackendOptions::default()
        .with_table(fx.executions.clone())
        .with_attempts_table(fx.attempts.clone())
        .with_auto_create(false)
        .with_maintenance_interval(Duration::ZERO)
        .with_expiry_sweep_interval(Duration::ZERO)
}

async fn claim_one<D: Dialect>(
    b: &SqlExecutionBackend<D>,
    task: &str,
    lease: Duration,
) -> ExecutionLease {
    let mut leases = b
        .claim(NS, &[task.to_string()], 1, lease, "lp-worker")
        .await
        .unwrap_or_else(|e| panic!("claim of {task} as the runtime role failed: {e}"));
    assert_eq!(leases.len(), 1, "one {task} execution to claim");
    leases.remove(0)
}

async fn finish<D: Dialect>(
    b: &SqlExecutionBackend<D>,
    lease: &ExecutionLease,
    completion: ExecutionCompletion,
) -> onestep_core::execution::Execution {
    b.complete(
        lease.execution.id,
        lease.attempt_id,
        lease.lease_token,
        completion,
    )
    .await
    .unwrap_or_else(|e| panic!("completion as the runtime role failed: {e}"))
}

fn detail(exception_type: &str) -> Option<ExecutionErrorDetail> {
    Some(ExecutionErrorDetail::new("error", exception_type).unwrap())
}

/// Everything API and workers do, as the runtime role with `auto_create: false`.
async fn life_cycle<D: Dialect>(fx: &Fixture) {
    let b = SqlExecutionBackend::<D>::new(&fx.runtime_dsn(PASSWORD), runtime_options(fx)).unwrap();
    b.open()
        .await
        .unwrap_or_else(|e| panic!("open as the runtime role failed: {e}"));
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let mut submitted = 0;

    // Submit with an idempotency key: the same key returns the same execution, another payload
    // under it is a conflict.
    let keyed = SubmitOptions::default().idempotency_key("report-2026-11");
    let report = client
        .submit("report", &json!({"month": "2026-11"}), keyed.clone())
        .await
        .unwrap_or_else(|e| panic!("submit as the runtime role failed: {e}"));
    submitted += 1;
    let again = client
        .submit("report", &json!({"month": "2026-11"}), keyed.clone())
        .await
        .unwrap();
    assert_eq!(
        again.id, report.id,
        "the same key returns the same execution"
    );
    let conflict = client
        .submit("report", &json!({"month": "2026-12"}), keyed)
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, ExecutionError::Conflict(_)),
        "{conflict}"
    );

    // Claim, heartbeat, complete with success, read the result.
    let lease = claim_one(&b, "report", Duration::from_secs(30)).await;
    assert_eq!(lease.execution.id, report.id);
    let beat = b
        .heartbeat(
            report.id,
            lease.attempt_id,
            lease.lease_token,
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|e| panic!("heartbeat as the runtime role failed: {e}"));
    assert!(!beat.cancel_requested);
    let done = finish(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!({"rows": 3}),
        },
    )
    .await;
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let result: Value = client.result(report.id).await.unwrap();
    assert_eq!(result, json!({"rows": 3}));

    // A failure with a retry, then a final failure.
    let flaky = client
        .submit("flaky", &json!(1), SubmitOptions::default())
        .await
        .unwrap();
    submitted += 1;
    let first = claim_one(&b, "flaky", Duration::from_secs(30)).await;
    let retrying = finish(
        &b,
        &first,
        ExecutionCompletion::Retrying {
            error: detail("TimeoutError"),
            delay_s: Some(0.0),
        },
    )
    .await;
    assert_eq!(retrying.status, ExecutionStatus::Retrying);
    let second = claim_one(&b, "flaky", Duration::from_secs(30)).await;
    assert_eq!(second.execution.attempts, 2);
    let failed = finish(
        &b,
        &second,
        ExecutionCompletion::Failed {
            error: detail("ValueError"),
        },
    )
    .await;
    assert_eq!(failed.status, ExecutionStatus::Failed);
    assert!(matches!(
        client.result::<Value>(flaky.id).await,
        Err(ExecutionError::Failed(_))
    ));
    assert_eq!(b.attempts(flaky.id).await.unwrap().len(), 2);

    // Cancel: queued work at once, running work cooperatively.
    let later = client
        .submit(
            "later",
            &json!(1),
            SubmitOptions::default().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    submitted += 1;
    let cancelled = client.cancel(later.id, Some("not needed")).await.unwrap();
    assert_eq!(cancelled.unwrap().status, ExecutionStatus::Cancelled);
    let long = client
        .submit("long", &json!(1), SubmitOptions::default())
        .await
        .unwrap();
    submitted += 1;
    let running = claim_one(&b, "long", Duration::from_secs(30)).await;
    let requested = client.cancel(long.id, None).await.unwrap().unwrap();
    assert_eq!(requested.status, ExecutionStatus::CancelRequested);
    let beat = b
        .heartbeat(
            long.id,
            running.attempt_id,
            running.lease_token,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert!(beat.cancel_requested, "the heartbeat reports the cancel");
    let stopped = finish(&b, &running, ExecutionCompletion::Cancelled).await;
    assert_eq!(stopped.status, ExecutionStatus::Cancelled);

    // Release an unstarted claim; it is claimable again.
    let released = client
        .submit("released", &json!(1), SubmitOptions::default())
        .await
        .unwrap();
    submitted += 1;
    let taken = claim_one(&b, "released", Duration::from_secs(30)).await;
    b.release(released.id, taken.attempt_id, taken.lease_token)
        .await
        .unwrap_or_else(|e| panic!("release as the runtime role failed: {e}"));
    let retaken = claim_one(&b, "released", Duration::from_secs(30)).await;
    finish(
        &b,
        &retaken,
        ExecutionCompletion::Succeeded { result: json!(1) },
    )
    .await;

    // The lease-expiry sweep: a lapsed lease is taken over, the old worker is fenced.
    let crash = client
        .submit("crash", &json!(1), SubmitOptions::default())
        .await
        .unwrap();
    submitted += 1;
    let stale = claim_one(&b, "crash", Duration::from_millis(300)).await;
    // A cancel request whose lease lapses ends cancelled in the same sweep.
    let stuck = client
        .submit("stuck", &json!(1), SubmitOptions::default())
        .await
        .unwrap();
    submitted += 1;
    claim_one(&b, "stuck", Duration::from_millis(300)).await;
    client.cancel(stuck.id, None).await.unwrap();
    // Queued work past its `expires_at` is expired by the sweep.
    let expiring = client
        .submit(
            "expiring",
            &json!(1),
            SubmitOptions::default()
                .expires_at(time::OffsetDateTime::now_utc() + Duration::from_millis(300)),
        )
        .await
        .unwrap();
    submitted += 1;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let fresh = claim_one(&b, "crash", Duration::from_secs(30)).await;
    assert_eq!(
        (fresh.execution.id, fresh.execution.attempts),
        (crash.id, 2)
    );
    let fenced = b
        .complete(
            crash.id,
            stale.attempt_id,
            stale.lease_token,
            ExecutionCompletion::Succeeded { result: json!(0) },
        )
        .await
        .unwrap_err();
    assert!(fenced.is_lease_lost(), "{fenced}");
    finish(
        &b,
        &fresh,
        ExecutionCompletion::Succeeded { result: json!(2) },
    )
    .await;
    let statuses: Vec<AttemptStatus> = b
        .attempts(crash.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.status)
        .collect();
    assert_eq!(
        statuses,
        [AttemptStatus::LeaseLost, AttemptStatus::Succeeded]
    );
    let status = |id| {
        let client = client.clone();
        async move { client.get(id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(stuck.id).await, ExecutionStatus::Cancelled);
    assert_eq!(status(expiring.id).await, ExecutionStatus::Expired);

    // A batch submit with keys, twice: the second returns the same executions.
    let batch = || {
        (0..3).map(|n| {
            (
                "batch".to_string(),
                json!({"n": n}),
                SubmitOptions::default().idempotency_key(format!("batch-{n}")),
            )
        })
    };
    let ids: Vec<_> = client
        .submit_many(batch())
        .await
        .unwrap_or_else(|e| panic!("batched submit as the runtime role failed: {e}"))
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    submitted += ids.len();
    let again: Vec<_> = client
        .submit_many(batch())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().id)
        .collect();
    assert_eq!(ids, again);

    // A worker (source + app) runs one to success: batched completions, LISTEN on PostgreSQL.
    let worked = client
        .submit("work", &json!({"x": 20}), SubmitOptions::default())
        .await
        .unwrap();
    submitted += 1;
    run_worker(b.clone(), &client, worked.id).await;

    // Read back: pages with a cursor neither repeat nor miss, stats add up.
    let mut seen = std::collections::HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client
            .list(None, None, 2, cursor.as_deref())
            .await
            .unwrap_or_else(|e| panic!("list as the runtime role failed: {e}"));
        for item in &page.items {
            assert!(seen.insert(item.id), "{} listed twice", item.id);
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen.len(), submitted, "every execution listed once");
    let counted: usize = b
        .stats(Some(NS))
        .await
        .unwrap()
        .iter()
        .map(|s| s.count)
        .sum();
    assert_eq!(counted, submitted);
    shut(&b).await;
}

/// Runs execution `id` of task `work` with an `OneStepApp` worker until it succeeds.
async fn run_worker<D: Dialect>(
    backend: SqlExecutionBackend<D>,
    client: &ExecutionClient<SqlExecutionBackend<D>>,
    id: uuid::Uuid,
) {
    let mut options = ExecutionSourceOptions::new(NS, "work");
    options.poll_interval = Duration::from_millis(100);
    let source = ExecutionSource::new(backend, options).unwrap();
    let app = OneStepApp::builder("least-privilege")
        .task(Task::new("work").source(Arc::new(source)).handler(
            |_ctx: TaskContext, v: Value| async move {
                Ok::<_, TaskError>(json!({"doubled": v["x"].as_i64().unwrap_or(0) * 2}))
            },
        ))
        .build()
        .unwrap();
    let handle = app.handle();
    let serve = tokio::spawn(async move { app.serve().await });
    let done = client.wait(id, Duration::from_secs(20)).await;
    handle.request_shutdown();
    serve.await.unwrap().unwrap();
    let done = done.unwrap_or_else(|e| panic!("the worker did not finish: {e}"));
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.result, Some(json!({"doubled": 40})));
}

/// What the runtime role may not do fails with an error that says what and where.
async fn role_failure_modes<D: Dialect>(fx: &Fixture, shown: &mut Shown) {
    let dsn = fx.runtime_dsn(PASSWORD);
    // DDL: auto_create with the runtime role is refused, naming the table and the permission.
    let creating = runtime_options(fx).with_auto_create(true);
    let b = SqlExecutionBackend::<D>::new(&dsn, creating).unwrap();
    let err = b
        .open()
        .await
        .expect_err("auto_create needs DDL rights the runtime role does not have");
    shut(&b).await;
    shown.error("auto_create as the runtime role", &err);
    let text = err.to_string();
    assert_eq!(
        kind(&err),
        Some(ConnectorErrorKind::Misconfigured),
        "{text}"
    );
    assert!(
        text.contains(&fx.executions) && text.contains("auto_create"),
        "the error names the table and the option: {text}"
    );
    assert!(
        text.contains("permission denied") || text.contains("command denied"),
        "the error names the missing permission: {text}"
    );

    // Retention (`prune`, `onestep executions prune`) deletes: not granted, refused clearly. Its
    // dry run only reads.
    let b = SqlExecutionBackend::<D>::new(&dsn, runtime_options(fx)).unwrap();
    let later = time::OffsetDateTime::now_utc() + Duration::from_secs(86_400);
    let would = b.prune(None, later, 100, true).await.unwrap();
    assert!(would > 0, "terminal executions to prune");
    let err = b
        .prune(None, later, 100, false)
        .await
        .expect_err("prune deletes, which the runtime role may not");
    shown.error("prune as the runtime role", &err);
    let text = err.to_string();
    assert_eq!(
        kind(&err),
        Some(ConnectorErrorKind::Misconfigured),
        "{text}"
    );
    assert!(
        text.contains(&fx.attempts)
            && (text.contains("permission denied") || text.contains("DELETE command denied")),
        "the error names the table and the permission: {text}"
    );
    shut(&b).await;

    // Each grant is needed: without them the tables are invisible, and the error says so.
    let admin = fx.admin_in_database().await;
    let revoke = match fx.server {
        Server::Postgres => format!("REVOKE USAGE ON SCHEMA public FROM \"{}\"", fx.role),
        Server::MySql => format!(
            "REVOKE SELECT, INSERT, UPDATE ON `{}`.`{}` FROM '{}'@'%'",
            fx.database, fx.attempts, fx.role
        ),
    };
    admin.run(&revoke).await.unwrap();
    let b = SqlExecutionBackend::<D>::new(&dsn, runtime_options(fx)).unwrap();
    let err = b.open().await.expect_err("the tables are invisible");
    shut(&b).await;
    shown.error("revoked schema USAGE / table grants", &err);
    let text = err.to_string();
    let hint = match fx.server {
        Server::Postgres => "needs USAGE on their schema",
        Server::MySql => "needs SELECT, INSERT and UPDATE on them",
    };
    assert!(
        text.contains("missing execution tables") && text.contains(hint),
        "the error says what the role lacks: {text}"
    );
    if fx.server == Server::Postgres {
        admin
            .run(&format!(
                "REVOKE CONNECT ON DATABASE \"{}\" FROM \"{}\"",
                fx.database, fx.role
            ))
            .await
            .unwrap();
        let b = SqlExecutionBackend::<D>::new(&dsn, runtime_options(fx)).unwrap();
        let err = b.open().await.expect_err("CONNECT is needed");
        shut(&b).await;
        shown.error("revoked CONNECT", &err);
        assert!(
            err.to_string().contains(&format!(
                "permission denied for database \"{}\"",
                fx.database
            )),
            "{err}"
        );
    }
    admin.close().await;
}

fn kind(err: &ExecutionError) -> Option<ConnectorErrorKind> {
    match err {
        ExecutionError::Connector(c) => Some(c.kind),
        _ => None,
    }
}

// --- Failure paths with the password in the DSN ----------------------------------------------

/// A backend for `dsn` whose pool gives up after 2 s (a refused port is retried until then), and
/// what its Debug shows; `None` (the error recorded) when the DSN is rejected at construction.
fn short_backend<D: Dialect>(
    dsn: &str,
    fx: &Fixture,
    shown: &mut Shown,
    label: &str,
) -> Option<SqlExecutionBackend<D>> {
    let connector = match SqlConnector::<D>::new(dsn) {
        Ok(c) => c,
        Err(err) => {
            shown.error(label, &err);
            return None;
        }
    };
    let connector = connector
        .with_settings(PoolSettings {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(2),
        })
        .unwrap();
    shown.debug(label, &connector);
    shown.debug(label, connector.dsn());
    shown.text(label, connector.dsn().to_string());
    let b = SqlExecutionBackend::from_connector(&connector, runtime_options(fx)).unwrap();
    shown.debug(label, &b);
    shown.debug(label, &runtime_options(fx));
    // The owning constructor holds the same DSN: its Debug must hide it too.
    let owning = SqlExecutionBackend::<D>::new(dsn, runtime_options(fx)).unwrap();
    shown.debug(label, &owning);
    shown.debug(label, owning.connector());
    Some(b)
}

/// Opens `dsn`; when it fails (true), the error is recorded and must be of an `expected` kind.
async fn open_fails<D: Dialect>(
    fx: &Fixture,
    shown: &mut Shown,
    label: &str,
    dsn: &str,
    expected: &[ConnectorErrorKind],
) -> bool {
    let b = short_backend::<D>(dsn, fx, shown, label).expect("a well-formed DSN");
    let outcome = b.open().await;
    shut(&b).await;
    match outcome {
        Err(err) => {
            shown.error(label, &err);
            let got = kind(&err);
            assert!(
                got.is_some_and(|k| expected.contains(&k)),
                "{label}: expected one of {expected:?}, got {got:?}: {err}"
            );
            true
        }
        Ok(()) => false,
    }
}

async fn connection_failures<D: Dialect>(fx: &Fixture, shown: &mut Shown) {
    use ConnectorErrorKind::{Disconnected, Misconfigured};
    let wrong = format!("{PASSWORD}-wrong");
    let refused = open_fails::<D>(
        fx,
        shown,
        "wrong password",
        &rewrite(&fx.url, Some((&fx.role, &wrong)), None, None),
        &[Misconfigured],
    )
    .await;
    // A server that lets the role in without any password (PostgreSQL with `trust` for
    // 127.0.0.1 in pg_hba.conf; cargo xtask's throwaway servers use scram-sha-256) lets a wrong
    // one in too; every other server must refuse the wrong password.
    let asks_for_passwords = open_fails::<D>(
        fx,
        shown,
        "no password",
        &rewrite(&fx.url, Some((&fx.role, "")), None, None),
        &[Misconfigured],
    )
    .await;
    assert_eq!(
        refused,
        asks_for_passwords,
        "{:?}: a wrong password was {} although a missing one was {}",
        fx.server,
        if refused { "refused" } else { "accepted" },
        if asks_for_passwords {
            "refused"
        } else {
            "accepted"
        },
    );
    if !asks_for_passwords {
        assert_eq!(
            fx.server,
            Server::Postgres,
            "MariaDB let a role in without its password"
        );
    }
    let failed = open_fails::<D>(
        fx,
        shown,
        "unknown host",
        &rewrite(
            &fx.url,
            Some((&fx.role, PASSWORD)),
            Some("onestep-no-such-host.invalid:5432"),
            None,
        ),
        &[Disconnected],
    )
    .await;
    assert!(failed, "unknown host: the backend opened");
    let failed = open_fails::<D>(
        fx,
        shown,
        "refused port",
        &rewrite(
            &fx.url,
            Some((&fx.role, PASSWORD)),
            Some("127.0.0.1:1"),
            None,
        ),
        &[Disconnected],
    )
    .await;
    assert!(failed, "refused port: the backend opened");
    let failed = open_fails::<D>(
        fx,
        shown,
        "unknown database",
        &rewrite(
            &fx.url,
            Some((&fx.role, PASSWORD)),
            None,
            Some("onestep_no_such_db"),
        ),
        &[Misconfigured],
    )
    .await;
    assert!(failed, "unknown database: the backend opened");
    // A worker whose DSN fails: what the runtime reports must not show the password.
    let failing = rewrite(
        &fx.url,
        Some((&fx.role, PASSWORD)),
        None,
        Some("onestep_no_such_db"),
    );
    run_failing_worker::<D>(fx, shown, "worker with a failing DSN", &failing).await;

    // Connected, but no right to create tables.
    let dsn = fx.runtime_dsn(PASSWORD);
    let creating = runtime_options(fx).with_auto_create(true);
    let b = SqlExecutionBackend::<D>::new(&dsn, creating).unwrap();
    let err = b.open().await.expect_err("the runtime role cannot create");
    shut(&b).await;
    shown.error("permission denied (DDL)", &err);
}

/// Runs a worker on `dsn` for a while; what it returns and logs is recorded (logs by the capture).
async fn run_failing_worker<D: Dialect>(fx: &Fixture, shown: &mut Shown, label: &str, dsn: &str) {
    let mut options = ExecutionSourceOptions::new(NS, "t");
    options.poll_interval = Duration::from_millis(100);
    let b = SqlExecutionBackend::<D>::new(dsn, runtime_options(fx)).unwrap();
    let source = ExecutionSource::new(b.clone(), options).unwrap();
    let app = OneStepApp::builder("least-privilege-failing")
        .task(
            Task::new("t")
                .source(Arc::new(source))
                .handler(|_ctx: TaskContext, v: Value| async move { Ok::<_, TaskError>(v) }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let mut serve = tokio::spawn(async move { app.serve().await });
    // The app stops on its own at a misconfiguration; otherwise give it a few claims.
    let stopped = tokio::time::timeout(Duration::from_secs(1), &mut serve).await;
    handle.request_shutdown();
    let served = match stopped {
        Ok(joined) => joined.unwrap(),
        Err(_) => serve.await.unwrap(),
    };
    if let Err(err) = served {
        shown.error(label, &err);
    }
    shut(&b).await;
}

/// DSNs that are malformed around the password: an unencoded `#`, `/`, `?` or `@` in it, no
/// `//`, a bad port, the wrong scheme. Each fails (at construction or at open) without showing
/// the password.
async fn malformed_dsns<D: Dialect>(fx: &Fixture, shown: &mut Shown) {
    let scheme = fx.server.scheme();
    let other = match fx.server {
        Server::Postgres => "mysql",
        Server::MySql => "postgres",
    };
    let role = &fx.role;
    let cases = [
        format!("{scheme}://{role}:{PASSWORD}@127.0.0.1:notaport/db"),
        format!("{scheme}://{role}:{PASSWORD}#x@127.0.0.1/db"),
        format!("{scheme}://{role}:pw/{LEAK}@127.0.0.1/db"),
        format!("{scheme}://{role}:{PASSWORD}?x@127.0.0.1/db"),
        format!("{scheme}://{role}:{PASSWORD} space@127.0.0.1/db"),
        format!("{scheme}:{role}:{PASSWORD}@127.0.0.1/db"),
        format!("{scheme}:/{role}:{PASSWORD}@127.0.0.1/db"),
        format!("{scheme}://{role}:{PASSWORD}@[::1/db"),
        format!("{scheme}://{role}:{PASSWORD}@127.0.0.1/db?sslmode=bogus&ssl-mode=bogus"),
        format!("{other}://{role}:{PASSWORD}@127.0.0.1/db"),
        format!("{other}+driver:{role}:{PASSWORD}@127.0.0.1/db"),
        format!("oracle://{role}:{PASSWORD}@127.0.0.1/db"),
        format!("{role}:{PASSWORD}@127.0.0.1/db"),
        format!("{scheme}//{role}:{PASSWORD}@127.0.0.1/db"),
        PASSWORD.to_string(),
    ];
    for dsn in &cases {
        let label = format!(
            "malformed DSN #{}",
            cases.iter().position(|c| c == dsn).unwrap()
        );
        if dsn.contains(':') {
            // `redact` is for URLs; a bare value is for `Dsn::parse` not to echo.
            shown.text(&label, onestep_sql::dsn::redact(dsn));
        }
        match onestep_sql::dsn::Dsn::parse(dsn) {
            Ok(parsed) => {
                shown.debug(&label, &parsed);
                shown.text(&label, parsed.to_string());
                shown.text(&label, parsed.redacted());
            }
            Err(message) => shown.text(&label, message),
        }
        let Some(b) = short_backend::<D>(dsn, fx, shown, &label) else {
            continue;
        };
        let outcome = b.open().await;
        shut(&b).await;
        match outcome {
            Err(err) => shown.error(&label, &err),
            Ok(()) => panic!("{label}: a malformed DSN opened"),
        }
    }
}

/// Errors after a good connection: a privilege revoked under a running backend, connections
/// killed by the server.
async fn operation_failures<D: Dialect>(fx: &Fixture, shown: &mut Shown) {
    let dsn = fx.runtime_dsn(PASSWORD);
    let b = SqlExecutionBackend::<D>::new(&dsn, runtime_options(fx)).unwrap();
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let e = client
        .submit("t", &json!(1), SubmitOptions::default())
        .await
        .unwrap_or_else(|e| panic!("submit as the runtime role failed: {e}"));
    shown.debug("a working backend", &b);

    // The server ends the role's sessions; the pool reconnects (with the password).
    fx.kill_sessions().await;
    match client.get(e.id).await {
        Ok(found) => assert!(found.is_some()),
        Err(err) => shown.error("killed session", &err),
    }
    assert!(client.get(e.id).await.unwrap().is_some(), "reconnected");

    // A privilege revoked under the running backend.
    let admin = fx.admin_in_database().await;
    let revoke = match fx.server {
        Server::Postgres => format!(
            "REVOKE UPDATE ON TABLE \"{}\" FROM \"{}\"",
            fx.executions, fx.role
        ),
        Server::MySql => format!(
            "REVOKE UPDATE ON `{}`.`{}` FROM '{}'@'%'",
            fx.database, fx.executions, fx.role
        ),
    };
    admin.run(&revoke).await.unwrap();
    admin.close().await;
    let err = b
        .claim(NS, &["t".into()], 1, Duration::from_secs(30), "w")
        .await
        .expect_err("a claim needs UPDATE");
    shown.error("revoked UPDATE", &err);
    assert!(
        err.to_string().contains(&fx.executions),
        "the error names the table: {err}"
    );
    // A worker whose claims fail so: the runtime logs the failures.
    run_failing_worker::<D>(fx, shown, "worker without UPDATE", &dsn).await;
    shut(&b).await;
}

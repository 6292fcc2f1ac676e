//! The fault-suite worker of `cargo xtask chaos`: one binary whose subcommands prepare a run,
//! work it (possibly killed at any moment), inject faults, and verify the invariants of tracked
//! execution from the tables afterwards.
//!
//! The handler records its side effect in `<table>_effects` keyed by (execution_id, attempt_id)
//! *before* returning, so duplicated and lost work are counted from rows, not guessed.
//!
//! ```text
//! chaos prepare      --dsn URL --table T --n N         create the tables, submit N executions
//! chaos work         --dsn URL --table T [--concurrency C] [--work-ms MS] [--lease-s S]
//!                    [--heartbeat-s S] [--skew-ms MS] [--prefetch N|auto] [--until-done]
//! chaos wait         --dsn URL --table T --terminal K [--timeout-s S]
//! chaos cancel-storm --dsn URL --table T [--fraction F] [--seconds S]
//! chaos kill-storm   --dsn URL [--seconds S] [--every-ms MS]   pg_terminate_backend / KILL
//! chaos verify       --dsn URL --table T --n N [--allow-cancelled]   one JSON line; exit 1 on a violation
//! chaos drop         --dsn URL --table T
//! ```
//!
//! `T` is the executions table; the attempts table is `T_attempts` and the effects table
//! `T_effects`. Every subcommand prints one JSON line on success.

use std::sync::Arc;
use std::time::{Duration, Instant};

use onestep_core::clock::Clock;
use onestep_core::execution::stored::RESERVED_METADATA_KEY;
use onestep_core::execution::{
    ExecutionBackend, ExecutionRequest, ExecutionSource, ExecutionSourceOptions, Prefetch,
    SubmitOptions,
};
use onestep_core::retry::MaxAttempts;
use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_sql::param::Param;
use onestep_sql::{BackendOptions, Dialect, PoolSettings, SqlConnector, SqlExecutionBackend};
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const NAMESPACE: &str = "chaos";
const TASK: &str = "effect";

/// Parsed command line: the subcommand and its `--flag value` pairs.
struct Args {
    command: String,
    dsn: String,
    table: String,
    n: usize,
    concurrency: usize,
    work_ms: u64,
    lease_s: f64,
    heartbeat_s: f64,
    skew_ms: i64,
    /// The worker's prefetch buffer (`work`).
    prefetch: Prefetch,
    until_done: bool,
    terminal: usize,
    timeout_s: f64,
    fraction: f64,
    seconds: f64,
    every_ms: u64,
    allow_cancelled: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let command = it.next().ok_or(
        "a subcommand is required (prepare, work, wait, cancel-storm, kill-storm, verify, drop)",
    )?;
    let mut a = Args {
        command,
        dsn: String::new(),
        table: String::new(),
        n: 0,
        concurrency: 16,
        work_ms: 2,
        lease_s: 3.0,
        heartbeat_s: 1.0,
        skew_ms: 0,
        prefetch: Prefetch::Fixed(0),
        until_done: false,
        terminal: 0,
        timeout_s: 120.0,
        fraction: 0.5,
        seconds: 5.0,
        every_ms: 300,
        allow_cancelled: false,
    };
    fn num<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
        value
            .parse()
            .map_err(|e| format!("{flag}: expected a number, got {value:?} ({e})"))
    }
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--dsn" => a.dsn = it.next().ok_or("--dsn needs a value")?,
            "--table" => a.table = it.next().ok_or("--table needs a value")?,
            "--n" => a.n = num(&flag, it.next())?,
            "--concurrency" => a.concurrency = num(&flag, it.next())?,
            "--work-ms" => a.work_ms = num(&flag, it.next())?,
            "--lease-s" => a.lease_s = num(&flag, it.next())?,
            "--heartbeat-s" => a.heartbeat_s = num(&flag, it.next())?,
            "--skew-ms" => a.skew_ms = num(&flag, it.next())?,
            "--prefetch" => {
                let value = it.next().ok_or("--prefetch needs a value")?;
                a.prefetch = value.parse().map_err(|e| format!("--prefetch: {e}"))?;
            }
            "--terminal" => a.terminal = num(&flag, it.next())?,
            "--timeout-s" => a.timeout_s = num(&flag, it.next())?,
            "--fraction" => a.fraction = num(&flag, it.next())?,
            "--seconds" => a.seconds = num(&flag, it.next())?,
            "--every-ms" => a.every_ms = num(&flag, it.next())?,
            "--until-done" => a.until_done = true,
            "--allow-cancelled" => a.allow_cancelled = true,
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    if a.dsn.is_empty() {
        return Err("--dsn is required".into());
    }
    if a.table.is_empty() && a.command != "kill-storm" {
        return Err("--table is required".into());
    }
    Ok(a)
}

/// The process clock shifted by a fixed amount: a worker on a machine whose clock is off.
#[derive(Debug)]
struct SkewedClock(time::Duration);

impl Clock for SkewedClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc() + self.0
    }
}

fn backend_options(a: &Args) -> BackendOptions {
    let options =
        BackendOptions::default().with_tables(a.table.clone(), format!("{}_attempts", a.table));
    match a.skew_ms {
        0 => options,
        skew => options.with_clock(Arc::new(SkewedClock(time::Duration::milliseconds(skew)))),
    }
}

/// One statement in its own transaction.
async fn execute<D: Dialect>(
    pool: &sqlx::Pool<D::Db>,
    sql: &str,
    params: Vec<Param>,
) -> Result<u64, BoxError> {
    let mut tx = D::begin(pool).await?;
    let n = D::execute(&mut tx, &D::render(sql), params).await?;
    tx.commit().await?;
    Ok(n)
}

/// One `COUNT(*)`-like integer query in its own transaction.
async fn count<D: Dialect>(pool: &sqlx::Pool<D::Db>, sql: &str) -> Result<i64, BoxError> {
    let mut tx = D::begin(pool).await?;
    let rows = D::fetch(&mut tx, &D::render(sql), Vec::new()).await?;
    tx.commit().await?;
    let first = rows.first().ok_or("the count query returned no row")?;
    Ok(D::bigint(first, 0)?.unwrap_or(0))
}

struct Tables {
    executions: String,
    attempts: String,
    effects: String,
}

fn tables<D: Dialect>(a: &Args) -> Tables {
    Tables {
        executions: D::quote(&a.table),
        attempts: D::quote(&format!("{}_attempts", a.table)),
        effects: D::quote(&format!("{}_effects", a.table)),
    }
}

async fn prepare<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, backend_options(a))?;
    backend.open().await?;
    let pool = backend.connector().pool()?;
    let t = tables::<D>(a);
    // Same column types as the attempts table, whatever the dialect maps a UUID to.
    execute::<D>(
        &pool,
        &format!(
            "CREATE TABLE {} AS SELECT execution_id, id AS attempt_id FROM {} WHERE 1 = 0",
            t.effects, t.attempts
        ),
        Vec::new(),
    )
    .await?;
    let started = Instant::now();
    let ids: Vec<usize> = (0..a.n).collect();
    for chunk in ids.chunks(500) {
        let requests = chunk
            .iter()
            .map(|i| {
                ExecutionRequest::new(
                    NAMESPACE,
                    TASK,
                    json!({"i": i}),
                    SubmitOptions::default().idempotency_key(format!("chaos-{i}")),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        for r in backend.submit_many(requests).await? {
            r?;
        }
    }
    backend.connector().close().await;
    Ok(json!({"prepared": a.n, "submit_s": started.elapsed().as_secs_f64()}))
}

/// Executions in a terminal state.
async fn terminal<D: Dialect>(pool: &sqlx::Pool<D::Db>, t: &Tables) -> Result<i64, BoxError> {
    count::<D>(
        pool,
        &format!(
            "SELECT COUNT(*) FROM {} WHERE status IN ('succeeded', 'failed', 'cancelled', 'expired')",
            t.executions
        ),
    )
    .await
}

async fn work<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, backend_options(a))?;
    backend.open().await?;
    let pool = backend.connector().pool()?;
    let t = Arc::new(tables::<D>(a));
    let mut o = ExecutionSourceOptions::new(NAMESPACE, TASK);
    o.batch_size = a.concurrency.max(1);
    o.prefetch = a.prefetch;
    o.poll_interval = Duration::from_millis(50);
    o.lease_duration = Duration::from_secs_f64(a.lease_s);
    o.heartbeat_interval = Duration::from_secs_f64(a.heartbeat_s);
    let source = Arc::new(ExecutionSource::new(backend.clone(), o)?);
    let work = Duration::from_millis(a.work_ms);
    let insert = format!(
        "INSERT INTO {} (execution_id, attempt_id) VALUES (?, ?)",
        t.effects
    );
    let handler_pool = pool.clone();
    let app = OneStepApp::builder("chaos")
        .task(
            Task::new(TASK)
                .source(source)
                .concurrency(a.concurrency)
                // Every failure here is a fault we injected (a killed connection): retry it.
                .retry(MaxAttempts::new(50)?.with_delay(Duration::from_millis(20)))
                .handler(move |ctx: TaskContext, _payload: Value| {
                    let pool = handler_pool.clone();
                    let insert = insert.clone();
                    async move {
                        let (execution_id, attempt_id) = ids(&ctx)?;
                        let cancel = ctx.cancellation().clone();
                        tokio::select! {
                            () = cancel.cancelled() => {
                                return Err(TaskError::new("Cancelled", "stopped by the runtime"));
                            }
                            () = tokio::time::sleep(work) => {}
                        }
                        execute::<D>(
                            &pool,
                            &insert,
                            vec![Param::Id(execution_id), Param::Id(attempt_id)],
                        )
                        .await
                        .map_err(|e| TaskError::new("EffectFailed", e.to_string()))?;
                        Ok::<_, TaskError>(json!({"attempt_id": attempt_id.to_string()}))
                    }
                }),
        )
        .build()?;
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let started = Instant::now();
    if a.until_done {
        let total = count::<D>(&pool, &format!("SELECT COUNT(*) FROM {}", t.executions)).await?;
        loop {
            // The pool is shared with the worker: a killed connection fails one poll, not the run.
            match terminal::<D>(&pool, &t).await {
                Ok(done) if done >= total => break,
                Ok(_) => {}
                Err(e) => eprintln!("chaos work: progress query failed (will retry): {e}"),
            }
            if worker.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        handle.request_shutdown();
    }
    worker.await??;
    backend.connector().close().await;
    Ok(json!({"worked_s": started.elapsed().as_secs_f64()}))
}

/// The execution and attempt ids from the envelope metadata (`onestep.execution`).
fn ids(ctx: &TaskContext) -> Result<(Uuid, Uuid), TaskError> {
    let execution = ctx
        .meta()
        .get(RESERVED_METADATA_KEY)
        .ok_or_else(|| TaskError::new("MissingMetadata", "no onestep.execution in metadata"))?;
    let field = |name: &str| {
        execution
            .get(name)
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| {
                TaskError::new(
                    "MissingMetadata",
                    format!("onestep.execution.{name}: expected a UUID string"),
                )
            })
    };
    Ok((field("id")?, field("attempt_id")?))
}

async fn wait<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, backend_options(a))?;
    let pool = backend.connector().pool()?;
    let t = tables::<D>(a);
    let started = Instant::now();
    loop {
        let done = terminal::<D>(&pool, &t).await?;
        if done >= a.terminal as i64 {
            return Ok(json!({"terminal": done, "waited_s": started.elapsed().as_secs_f64()}));
        }
        if started.elapsed().as_secs_f64() > a.timeout_s {
            return Err(format!(
                "only {done} of {} executions terminal after {} s",
                a.terminal, a.timeout_s
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A pseudo-random number in `[0, 1)` (UUID v4 bits are random enough for fault timing).
fn random() -> f64 {
    (Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

async fn cancel_storm<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, backend_options(a))?;
    backend.open().await?;
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = backend
            .list(&onestep_core::execution::ExecutionQuery {
                namespace: NAMESPACE.into(),
                task_name: None,
                status: None,
                limit: 200,
                cursor: cursor.clone(),
            })
            .await?;
        ids.extend(page.items.iter().map(|e| e.id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    // A random subset, cancelled at random moments over the window.
    let mut chosen: Vec<(f64, Uuid)> = ids
        .into_iter()
        .filter(|_| random() < a.fraction)
        .map(|id| (random() * a.seconds, id))
        .collect();
    chosen.sort_by(|x, y| x.0.total_cmp(&y.0));
    let started = Instant::now();
    let (mut requested, mut refused) = (0, 0);
    for (at, id) in &chosen {
        let due = Duration::from_secs_f64(*at);
        if let Some(rest) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        match backend.request_cancel(NAMESPACE, *id, Some("chaos")).await {
            Ok(_) => requested += 1,
            // Already terminal: a cancel after the end changes nothing and says so.
            Err(_) => refused += 1,
        }
    }
    backend.connector().close().await;
    Ok(json!({"cancel_requested": requested, "cancel_refused": refused}))
}

async fn kill_storm<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    // One connection: the storm kills every session but the one asking, and a pool of several
    // would kill its own idle ones and then hand them out again.
    let connector = SqlConnector::<D>::new(&a.dsn)?.with_settings(PoolSettings {
        max_connections: 1,
        ..PoolSettings::default()
    })?;
    let pool = connector.pool()?;
    let started = Instant::now();
    let (mut rounds, mut killed) = (0u64, 0i64);
    while started.elapsed().as_secs_f64() < a.seconds {
        tokio::time::sleep(Duration::from_millis(a.every_ms)).await;
        rounds += 1;
        match D::NAME {
            "postgres" => {
                killed += count::<D>(
                    &pool,
                    "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                     AND backend_type = 'client backend') AS killed",
                )
                .await?;
            }
            "mysql" => {
                let mut after = 0i64;
                loop {
                    let next = count::<D>(
                        &pool,
                        &format!(
                            "SELECT COALESCE(MIN(id), 0) FROM information_schema.processlist \
                             WHERE db = DATABASE() AND id <> CONNECTION_ID() AND id > {after}"
                        ),
                    )
                    .await?;
                    if next == 0 {
                        break;
                    }
                    // The connection may have ended by itself in between.
                    if execute::<D>(&pool, &format!("KILL CONNECTION {next}"), Vec::new())
                        .await
                        .is_ok()
                    {
                        killed += 1;
                    }
                    after = next;
                }
            }
            other => return Err(format!("kill-storm: not supported on {other}").into()),
        }
    }
    connector.close().await;
    Ok(json!({"kill_rounds": rounds, "connections_killed": killed}))
}

async fn verify<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, backend_options(a))?;
    let pool = backend.connector().pool()?;
    let Tables {
        executions: e,
        attempts: at,
        effects: f,
    } = tables::<D>(a);
    let allowed = if a.allow_cancelled {
        "('succeeded', 'cancelled')"
    } else {
        "('succeeded')"
    };
    let q = |sql: String| {
        let pool = pool.clone();
        async move { count::<D>(&pool, &sql).await }
    };
    let total = q(format!("SELECT COUNT(*) FROM {e}")).await?;
    let succeeded = q(format!(
        "SELECT COUNT(*) FROM {e} WHERE status = 'succeeded'"
    ))
    .await?;
    let cancelled = q(format!(
        "SELECT COUNT(*) FROM {e} WHERE status = 'cancelled'"
    ))
    .await?;
    let attempts = q(format!("SELECT COUNT(*) FROM {at}")).await?;
    let reclaimed = q(format!(
        "SELECT COUNT(*) FROM {at} WHERE status IN ('lease_lost', 'retrying')"
    ))
    .await?;
    let effects = q(format!("SELECT COUNT(*) FROM {f}")).await?;
    let effect_executions = q(format!(
        "SELECT COUNT(*) FROM (SELECT DISTINCT execution_id FROM {f}) AS d"
    ))
    .await?;
    let violations = [
        (
            "not_terminal",
            q(format!(
                "SELECT COUNT(*) FROM {e} WHERE status NOT IN ('succeeded', 'failed', 'cancelled', 'expired')"
            ))
            .await?,
        ),
        (
            "unexpected_end_state",
            q(format!("SELECT COUNT(*) FROM {e} WHERE status NOT IN {allowed}")).await?,
        ),
        (
            "cancelled_with_result",
            q(format!(
                "SELECT COUNT(*) FROM {e} WHERE status = 'cancelled' AND result IS NOT NULL"
            ))
            .await?,
        ),
        (
            "succeeded_without_one_accepted_attempt",
            q(format!(
                "SELECT COUNT(*) FROM {e} x WHERE x.status = 'succeeded' AND \
                 (SELECT COUNT(*) FROM {at} y WHERE y.execution_id = x.id AND y.status = 'succeeded') <> 1"
            ))
            .await?,
        ),
        (
            "succeeded_without_effect_of_accepted_attempt",
            q(format!(
                "SELECT COUNT(*) FROM {at} y WHERE y.status = 'succeeded' AND NOT EXISTS \
                 (SELECT 1 FROM {f} z WHERE z.execution_id = y.execution_id AND z.attempt_id = y.id)"
            ))
            .await?,
        ),
        (
            "attempt_numbers_not_contiguous",
            q(format!(
                "SELECT COUNT(*) FROM {e} x WHERE x.attempts <> (SELECT COUNT(*) FROM {at} y WHERE y.execution_id = x.id) \
                 OR x.attempts <> COALESCE((SELECT MAX(attempt_no) FROM {at} y WHERE y.execution_id = x.id), 0) \
                 OR EXISTS (SELECT 1 FROM {at} y WHERE y.execution_id = x.id AND y.attempt_no < 1)"
            ))
            .await?,
        ),
        (
            "attempt_still_running",
            q(format!("SELECT COUNT(*) FROM {at} WHERE status = 'running'")).await?,
        ),
        (
            "overlapping_leases",
            q(format!(
                "SELECT COUNT(*) FROM {at} y JOIN {at} z ON z.execution_id = y.execution_id \
                 AND z.attempt_no = y.attempt_no + 1 WHERE y.finished_at IS NULL OR y.finished_at > z.started_at"
            ))
            .await?,
        ),
        (
            "effect_of_unknown_attempt",
            q(format!(
                "SELECT COUNT(*) FROM {f} z WHERE NOT EXISTS (SELECT 1 FROM {at} y WHERE y.id = z.attempt_id)"
            ))
            .await?,
        ),
        ("missing_executions", (a.n as i64 - total).max(0)),
        (
            "duplicates_exceed_reclaimed",
            ((effects - effect_executions) - reclaimed).max(0),
        ),
    ];
    let failed: Vec<&str> = violations
        .iter()
        .filter(|(_, n)| *n != 0)
        .map(|(name, _)| *name)
        .collect();
    let report = json!({
        "executions": total,
        "succeeded": succeeded,
        "cancelled": cancelled,
        "attempts": attempts,
        "reclaimed_attempts": reclaimed,
        "effects": effects,
        "duplicated_effects": effects - effect_executions,
        "lost": (a.n as i64 - succeeded - cancelled).max(0),
        "violations": violations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    });
    backend.connector().close().await;
    if failed.is_empty() {
        Ok(report)
    } else {
        Err(format!("invariants violated ({}): {report}", failed.join(", ")).into())
    }
}

async fn drop_tables<D: Dialect>(a: &Args) -> Result<Value, BoxError> {
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, backend_options(a))?;
    let pool = backend.connector().pool()?;
    let t = tables::<D>(a);
    for table in [&t.effects, &t.attempts, &t.executions] {
        execute::<D>(&pool, &format!("DROP TABLE IF EXISTS {table}"), Vec::new()).await?;
    }
    backend.connector().close().await;
    Ok(json!({"dropped": a.table}))
}

async fn dispatch<D: Dialect>(a: Args) -> Result<Value, BoxError> {
    match a.command.as_str() {
        "prepare" => prepare::<D>(&a).await,
        "work" => work::<D>(&a).await,
        "wait" => wait::<D>(&a).await,
        "cancel-storm" => cancel_storm::<D>(&a).await,
        "kill-storm" => kill_storm::<D>(&a).await,
        "verify" => verify::<D>(&a).await,
        "drop" => drop_tables::<D>(&a).await,
        other => Err(format!("unknown subcommand {other:?}").into()),
    }
}

#[tokio::main]
async fn main() {
    // `RUST_LOG=onestep_sql=debug` shows what the backend does; nothing is logged by default.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("chaos: {e}");
            std::process::exit(2);
        }
    };
    let command = a.command.clone();
    let scheme = a.dsn.split(':').next().unwrap_or_default().to_string();
    let out = match scheme.as_str() {
        "postgres" | "postgresql" => dispatch::<onestep_sql::postgres::Postgres>(a).await,
        "mysql" | "mariadb" => dispatch::<onestep_sql::mysql::MySql>(a).await,
        "sqlite" => dispatch::<onestep_sql::sqlite::Sqlite>(a).await,
        other => {
            eprintln!("chaos: unsupported scheme {other:?}");
            std::process::exit(2);
        }
    };
    match out {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("chaos {command}: {e}");
            std::process::exit(1);
        }
    }
}

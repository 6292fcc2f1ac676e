//! Burn-down benchmark: submit N executions (an idempotency key on each), then drain them with
//! one worker (no-op handler returning a small JSON result); prints one JSON line with submit/s,
//! drained/s and submit→running / submit→succeeded percentiles. The run's tables are dropped at
//! the end. `cargo xtask bench` runs it on every backend, beside the peers.
//!
//! `cargo run --release -p onestep-sql --example burndown -- --dsn URL [--n 20000]
//! [--concurrency 64] [--batch 100] [--prefetch 0|N|auto] [--submit-batch 0] [--metrics off|on]
//! [--workers 1] [--history 0] [--running 0]`
//! (`--submit-batch 0`: one by one; `--metrics on`: the exporter and a scrape every second;
//! `--workers K`: K worker apps drain side by side, each with its own pool and `--concurrency`).
//!
//! Steady mode (`--rate R [--seconds S]`): the worker starts first and goes idle, then R
//! executions per second are submitted (in 10 ms ticks) for S seconds; the submit→running
//! percentiles then measure wake-up latency, not backlog. They count from each submit's call,
//! so the time a submit waits to be written counts too, and `submit_ms` adds the submits' own
//! call→answer percentiles.
//!
//! A PostgreSQL burn-down also reports its drain's write transactions and WAL bytes per
//! execution (`support/pg_counters.rs`): counts that do not move with the machine's load.
//!
//! `--history N` first puts N finished executions of the same task (one attempt row each) in the
//! tables, to see whether the cost grows with history, and lets the server's upkeep catch up
//! with that fill (see `settle`) before the run starts. `--running N` then has N executions of
//! another task claimed under an hour's lease and left running through the drain (see
//! `hold_running`), to see whether the cost grows with long-running work.

#[path = "support/allocator.rs"]
mod allocator;
#[path = "support/pg_counters.rs"]
mod pg_counters;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onestep_core::execution::{
    ExecutionBackend, ExecutionError, ExecutionQuery, ExecutionRequest, ExecutionSource,
    ExecutionSourceOptions, LeasedExecutionBackend, Prefetch, SubmitOptions,
};
use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use serde_json::{Value, json};

struct Args {
    dsn: String,
    n: usize,
    concurrency: usize,
    batch: usize,
    /// Claimed executions the source may hold beyond free slots (`ExecutionSourceOptions::prefetch`:
    /// a count or `auto`).
    prefetch: Prefetch,
    submit_batch: usize,
    /// Steady mode: offered submits per second (0: burn-down).
    rate: usize,
    /// Steady mode: for how many seconds.
    seconds: usize,
    /// Finished executions of the same task put in the table before the run (cost vs history).
    history: usize,
    /// Executions of another task claimed, with an hour's lease, before the run and left
    /// running through it (cost vs long-running work).
    running: usize,
    /// Worker apps draining side by side in this process, each with its own pool and source
    /// (standing in for separate processes; they share one tokio runtime).
    workers: usize,
    /// `--metrics on`: the Prometheus exporter counts every task event and a scraper renders
    /// `/metrics`' text (backlog sample included) every second, as `onestep run
    /// --metrics-addr` under Prometheus does; `off` (the default): no exporter and the
    /// execution counters switched off.
    metrics: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        dsn: String::new(),
        n: 20_000,
        concurrency: 64,
        batch: 100,
        prefetch: Prefetch::Fixed(0),
        submit_batch: 0,
        rate: 0,
        seconds: 10,
        history: 0,
        running: 0,
        workers: 1,
        metrics: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dsn" => a.dsn = value()?,
            "--n" => a.n = value()?.parse().map_err(|e| format!("--n: {e}"))?,
            "--concurrency" => {
                a.concurrency = value()?
                    .parse()
                    .map_err(|e| format!("--concurrency: {e}"))?
            }
            "--batch" => a.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--workers" => {
                a.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?;
                if a.workers == 0 {
                    return Err("--workers must be at least 1".into());
                }
            }
            "--prefetch" => {
                a.prefetch = value()?.parse().map_err(|e| format!("--prefetch: {e}"))?
            }
            "--submit-batch" => {
                a.submit_batch = value()?
                    .parse()
                    .map_err(|e| format!("--submit-batch: {e}"))?
            }
            "--rate" => a.rate = value()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--history" => a.history = value()?.parse().map_err(|e| format!("--history: {e}"))?,
            "--running" => a.running = value()?.parse().map_err(|e| format!("--running: {e}"))?,
            "--metrics" => {
                a.metrics = match value()?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--metrics: expected on or off, got {other:?}")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.dsn.is_empty() {
        return Err("--dsn is required".into());
    }
    Ok(a)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Submits the requests `request` makes for `0..n` with `submit_many`, 1,000 at a time; any
/// request refused is an error.
async fn submit_in_chunks<D: Dialect>(
    backend: &SqlExecutionBackend<D>,
    n: usize,
    request: impl Fn(usize) -> Result<ExecutionRequest, ExecutionError>,
) -> Result<(), Box<dyn std::error::Error>> {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let requests = chunk
            .iter()
            .map(|&i| request(i))
            .collect::<Result<Vec<_>, _>>()?;
        for r in backend.submit_many(requests).await? {
            r?;
        }
    }
    Ok(())
}

/// Puts `n` finished (`succeeded`) executions of the benchmark's own task in the table: submitted
/// through the backend (so every index holds them as it would after real use), then finished by
/// one portable UPDATE (their payload stands in for the result).
async fn fill_history<D: Dialect>(
    backend: &SqlExecutionBackend<D>,
    options: &BackendOptions,
    ns: &str,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    submit_in_chunks(backend, n, |i| {
        ExecutionRequest::new(
            ns,
            "noop",
            json!({"h": i}),
            SubmitOptions::default().idempotency_key(format!("h{i}")),
        )
    })
    .await?;
    let pool = backend.connector().pool()?;
    let mut tx = D::begin(&pool).await?;
    D::execute(
        &mut tx,
        &format!(
            "UPDATE {} SET status = 'succeeded', result = payload, attempts = 1, \
             started_at = created_at, finished_at = created_at, version = version + 2",
            D::quote(&options.table)
        ),
        Vec::new(),
    )
    .await?;
    // One finished attempt per execution, as a real history has (its id and lease token reuse
    // the execution's id, which is unique in the attempts table too).
    D::execute(
        &mut tx,
        &format!(
            "INSERT INTO {} (id, execution_id, attempt_no, lease_token, worker_id, status, \
             error, started_at, heartbeat_at, finished_at) SELECT id, id, 1, id, 'history', \
             'succeeded', NULL, created_at, created_at, created_at FROM {}",
            D::quote(&options.attempts_table),
            D::quote(&options.table)
        ),
        Vec::new(),
    )
    .await?;
    tx.commit().await?;
    eprintln!(
        "burndown: {n} finished executions (one attempt each) put in the tables in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Submits `n` executions of a task the run does not drain and claims them all with an hour's
/// lease: long-running work held by a worker that is busy elsewhere. After the history's
/// `settle`, so the tables' statistics predate them, as a large table's do when a batch of long
/// work starts.
async fn hold_running<D: Dialect>(
    backend: &SqlExecutionBackend<D>,
    ns: &str,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    submit_in_chunks(backend, n, |i| {
        ExecutionRequest::new(ns, "long", json!({"l": i}), SubmitOptions::default())
    })
    .await?;
    let hour = Duration::from_secs(3600);
    let mut held = 0;
    while held < n {
        let claimed = backend
            .claim(ns, &["long".to_string()], 1000, hour, "holder")
            .await?;
        if claimed.is_empty() {
            return Err(format!("claimed {held} of {n} long-running executions").into());
        }
        held += claimed.len();
    }
    eprintln!(
        "burndown: {n} executions of another task running under an hour's lease ({:.1}s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Lets the server's own upkeep catch up with the fill, so the run measures a table that *holds*
/// a history rather than one that just finished 1,000,000 rows in one statement: PostgreSQL
/// vacuums and analyzes both tables (what autovacuum does some time after such an UPDATE);
/// MySQL/MariaDB analyze and wait until InnoDB's purge has worked off the UPDATE's undo
/// (history list length 0, at most 10 minutes; the length counts transactions, not rows, so the
/// fill's one 1,000,000-row UPDATE is a single entry until it is purged); SQLite analyzes and
/// checkpoints its write-ahead log.
async fn settle(dsn: &str, options: &BackendOptions) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let (e, a) = (&options.table, &options.attempts_table);
    if dsn.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(dsn).await?;
        for sql in [
            format!("VACUUM (ANALYZE) \"{e}\""),
            format!("VACUUM (ANALYZE) \"{a}\""),
        ] {
            sqlx::query(&sql).execute(&pool).await?;
        }
        pool.close().await;
    } else if dsn.starts_with("mysql") {
        let pool = sqlx::MySqlPool::connect(dsn).await?;
        sqlx::query(&format!("ANALYZE TABLE `{e}`, `{a}`"))
            .execute(&pool)
            .await?;
        loop {
            let pending: i64 = sqlx::query_scalar(
                "SELECT CAST(count AS SIGNED) FROM information_schema.innodb_metrics \
                 WHERE name = 'trx_rseg_history_len'",
            )
            .fetch_one(&pool)
            .await?;
            if pending == 0 || started.elapsed() > Duration::from_secs(600) {
                eprintln!("burndown: purge backlog {pending} undo records");
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        pool.close().await;
    } else {
        let pool = sqlx::SqlitePool::connect(dsn).await?;
        sqlx::query("ANALYZE").execute(&pool).await?;
        // The fill's UPDATE left its pages in the write-ahead log; copy them into the database
        // now, as a quiet moment's automatic checkpoint would, not during the drain.
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await?;
        pool.close().await;
    }
    eprintln!(
        "burndown: server upkeep after the fill took {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn run<D: Dialect>(a: Args) -> Result<Value, Box<dyn std::error::Error>> {
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let options = BackendOptions::default()
        .with_table(format!("bench{suffix}_executions"))
        .with_attempts_table(format!("bench{suffix}_attempts"));
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, options.clone())?;
    backend.open().await?;
    let ns = "bench";
    let steady = a.rate > 0;
    let mut a = a;
    if steady {
        a.n = a.rate * a.seconds;
    }
    let request = move |i: usize| {
        ExecutionRequest::new(
            ns,
            "noop",
            json!({"i": i}),
            SubmitOptions::default().idempotency_key(format!("k{i}")),
        )
    };

    if a.history > 0 {
        fill_history::<D>(&backend, &options, ns, a.history).await?;
        settle(&a.dsn, &options).await?;
    }
    if a.running > 0 {
        hold_running::<D>(&backend, ns, a.running).await?;
    }

    // Progress is counted in the handler, not read from the table: any table-wide status count
    // would also walk the history, and measure that instead of the drain.
    let handled_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let executions = onestep_core::metrics::execution::execution_metrics();
    executions.set_enabled(a.metrics);
    let mut apps = Vec::with_capacity(a.workers);
    let mut handles = Vec::with_capacity(a.workers);
    let mut scraper = None;
    for w in 0..a.workers {
        // Each worker has its own backend and pool, as a separate process would.
        let backend = match w {
            0 => backend.clone(),
            _ => {
                let b = SqlExecutionBackend::<D>::new(&a.dsn, options.clone())?;
                b.open().await?;
                b
            }
        };
        let mut o = ExecutionSourceOptions::new(ns, "noop");
        o.batch_size = a.batch;
        o.prefetch = a.prefetch;
        o.poll_interval = Duration::from_millis(50);
        o.lease_duration = Duration::from_secs(60);
        o.heartbeat_interval = Duration::from_secs(20);
        o.worker_id = format!("bench-{w}");
        let source = Arc::new(ExecutionSource::new(backend, o)?);
        let handled = handled_count.clone();
        let mut builder = OneStepApp::builder("bench");
        if a.metrics && w == 0 {
            let exporter = Arc::new(onestep_core::metrics::PrometheusExporter::default());
            let recorder = exporter.clone();
            builder = builder.on_event(move |event| recorder.record(event));
            scraper = Some(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    executions.sample_backlog().await;
                    let text = exporter.render() + &executions.render();
                    std::hint::black_box(text.len());
                }
            }));
        }
        let app = builder
            .task(
                Task::new("noop")
                    .source(source)
                    .concurrency(a.concurrency)
                    .handler(move |_ctx: TaskContext, _v: Value| {
                        handled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        async { Ok::<_, TaskError>(json!({"ok": true})) }
                    }),
            )
            .build()?;
        handles.push(app.handle());
        apps.push(app);
    }
    let mut workers = Vec::with_capacity(a.workers);
    if steady {
        // Start the workers first and let them go idle: pickups then measure wake-ups.
        workers.extend(
            apps.drain(..)
                .map(|app| tokio::spawn(async move { app.serve().await })),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let started = Instant::now();
    // Steady mode: when each submit was called, and how long it took to answer.
    let mut called: HashMap<uuid::Uuid, time::OffsetDateTime> = HashMap::new();
    let mut submit_took: Vec<f64> = Vec::new();
    if steady {
        // 10 ms ticks, rate/100 submits per tick (spread over the tick's remainder), so the
        // offered rate holds even when a single submit takes longer than 1/rate.
        let per_tick = a.rate.div_ceil(100);
        let mut submits = tokio::task::JoinSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut next = 0;
        while next < a.n {
            tick.tick().await;
            for _ in 0..per_tick.min(a.n - next) {
                let backend = backend.clone();
                let r = request(next)?;
                submits.spawn(async move {
                    let called_at = time::OffsetDateTime::now_utc();
                    let call = Instant::now();
                    let id = backend.submit(r).await?.id;
                    Ok::<_, ExecutionError>((id, called_at, call.elapsed()))
                });
                next += 1;
            }
        }
        while let Some(done) = submits.join_next().await {
            let (id, called_at, took) = done??;
            called.insert(id, called_at);
            submit_took.push(took.as_secs_f64() * 1000.0);
        }
    } else if a.submit_batch == 0 {
        for i in 0..a.n {
            backend.submit(request(i)?).await?;
        }
    } else {
        for chunk in (0..a.n).collect::<Vec<_>>().chunks(a.submit_batch) {
            let requests = chunk
                .iter()
                .map(|i| request(*i))
                .collect::<Result<Vec<_>, _>>()?;
            for r in backend.submit_many(requests).await? {
                r?;
            }
        }
    }
    let submit_s = started.elapsed().as_secs_f64();

    // On PostgreSQL, a burn-down also counts what its drain cost the server.
    let counting = !steady && D::NAME == "postgres";
    let before = match counting {
        true => Some(pg_counters::Counters::read(&a.dsn).await?),
        false => None,
    };
    let drain_started = Instant::now();
    workers.extend(
        apps.drain(..)
            .map(|app| tokio::spawn(async move { app.serve().await })),
    );
    while handled_count.load(std::sync::atomic::Ordering::Relaxed) < a.n {
        if workers.iter().any(|w| w.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A graceful shutdown flushes the batched completions: the drain ends when all are stored.
    for handle in &handles {
        handle.request_shutdown();
    }
    for worker in workers {
        worker.await??;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    let counted = match before {
        Some(before) => {
            let after = pg_counters::Counters::read(&a.dsn).await?;
            before.per_execution(&after, a.n, &a.dsn).await?
        }
        None => Value::Null,
    };

    // Latencies from the stored timestamps.
    let mut pickup = Vec::with_capacity(a.n);
    let mut finish = Vec::with_capacity(a.n);
    let mut cursor = None;
    loop {
        let q = ExecutionQuery {
            namespace: ns.into(),
            task_name: None,
            status: None,
            limit: 200,
            cursor: cursor.clone(),
        };
        let page = backend.list(&q).await?;
        for e in &page.items {
            if let (Some(s), Some(f), true) =
                (e.started_at, e.finished_at, e.payload.get("i").is_some())
            {
                // From the submit's call where it was timed (steady mode), so time a submit
                // spent waiting to be written counts; else from the stored submit time.
                let from = called.get(&e.id).copied().unwrap_or(e.created_at);
                pickup.push((s - from).as_seconds_f64() * 1000.0);
                finish.push((f - from).as_seconds_f64() * 1000.0);
            }
        }
        // Newest first: the run's own executions (payload `{"i": …}`) come before history.
        if pickup.len() >= a.n {
            break;
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    pickup.truncate(a.n);
    finish.truncate(a.n);
    pickup.sort_by(f64::total_cmp);
    finish.sort_by(f64::total_cmp);
    // Leave nothing behind: drop the run's tables (attempts first; they reference executions).
    let pool = backend.connector().pool()?;
    for table in [&options.attempts_table, &options.table] {
        let mut tx = D::begin(&pool).await?;
        D::execute(
            &mut tx,
            &format!("DROP TABLE {}", D::quote(table)),
            Vec::new(),
        )
        .await?;
        tx.commit().await?;
    }
    if let Some(scraper) = scraper {
        scraper.abort();
    }
    backend.connector().close().await;
    let mut line = json!({
        "backend": D::NAME,
        "n": a.n,
        "concurrency": a.concurrency,
        "workers": a.workers,
        "batch": a.batch,
        "prefetch": a.prefetch,
        "submit_batch": a.submit_batch,
        "mode": if steady { "steady" } else { "burn-down" },
        "history": a.history,
        "running": a.running,
        "rate": a.rate,
        "metrics": if a.metrics { "on" } else { "off" },
        "submit_per_s": (a.n as f64 / submit_s).round(),
        // Steady mode: completions per second over the whole offered period.
        "drain_per_s": if steady { (a.n as f64 / (submit_s + drain_s)).round() } else { (a.n as f64 / drain_s).round() },
        "pickup_ms": {"p50": percentile(&pickup, 0.5), "p95": percentile(&pickup, 0.95), "p99": percentile(&pickup, 0.99)},
        "succeed_ms": {"p50": percentile(&finish, 0.5), "p95": percentile(&finish, 0.95), "p99": percentile(&finish, 0.99)},
    });
    if steady {
        submit_took.sort_by(f64::total_cmp);
        line["submit_ms"] = json!({
            "p50": percentile(&submit_took, 0.5),
            "p95": percentile(&submit_took, 0.95),
            "p99": percentile(&submit_took, 0.99),
        });
    }
    pg_counters::merge(&mut line, &counted);
    Ok(line)
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("burndown: {e}");
            std::process::exit(2);
        }
    };
    let scheme = a.dsn.split(':').next().unwrap_or_default().to_string();
    let out = match scheme.as_str() {
        "postgres" | "postgresql" => run::<onestep_sql::postgres::Postgres>(a).await,
        "mysql" => run::<onestep_sql::mysql::MySql>(a).await,
        "sqlite" => run::<onestep_sql::sqlite::Sqlite>(a).await,
        other => {
            eprintln!("burndown: unsupported scheme {other}");
            std::process::exit(2);
        }
    };
    match out {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("burndown: {e}");
            std::process::exit(1);
        }
    }
}

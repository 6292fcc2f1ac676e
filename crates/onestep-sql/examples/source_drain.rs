//! Drain rate of the sources over a user's table, for `cargo xtask bench --peers` (beside the
//! same work done by the reference's connector, `bench/peers/py_source_bench.py`).
//!
//! ```text
//! source_drain --dsn URL --source table_queue|incremental|binlog [--n 5000] [--concurrency 32]
//! ```
//!
//! Creates a table of `n` rows (`id`, `status`, `payload`), drains it with one worker app and a
//! handler that does nothing, and prints one JSON line: `{"source", "backend", "n",
//! "drain_per_s", "seconds"}`. The table is dropped afterwards. `binlog` (a MySQL/MariaDB
//! server writing a row-format log) opens the source first, then writes the rows, and drains
//! their insert events.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onestep_core::state::{CursorStore, InMemoryCursorStore};
use onestep_core::{OneStepApp, Source, Task, TaskContext, TaskError};
use onestep_sql::incremental::{IncrementalOptions, IncrementalSource};
use onestep_sql::param::Param;
use onestep_sql::table_queue::{TableQueueOptions, TableQueueSource};
use onestep_sql::{Dialect, SqlConnector};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    dsn: String,
    source: String,
    n: usize,
    concurrency: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        dsn: String::new(),
        source: "table_queue".into(),
        n: 5000,
        concurrency: 32,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dsn" => a.dsn = value()?,
            "--source" => a.source = value()?,
            "--n" => a.n = value()?.parse().map_err(|e| format!("--n: {e}"))?,
            "--concurrency" => {
                a.concurrency = value()?
                    .parse()
                    .map_err(|e| format!("--concurrency: {e}"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.dsn.is_empty() {
        return Err("--dsn is required".into());
    }
    Ok(a)
}

async fn exec<D: Dialect>(connector: &SqlConnector<D>, sql: &str) -> Result<(), BoxError> {
    let pool = connector.pool()?;
    let mut tx = D::begin(&pool).await?;
    D::execute(&mut tx, &D::render(sql), Vec::<Param>::new()).await?;
    tx.commit().await?;
    Ok(())
}

fn columns(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

async fn run<D: Dialect>(a: Args) -> Result<Value, BoxError> {
    let connector = SqlConnector::<D>::new(&a.dsn)?;
    let table = format!("drain_{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    exec(
        &connector,
        &format!(
            "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(20) NOT NULL, \
             payload VARCHAR(200))"
        ),
    )
    .await?;
    // The binlog source reads from where the log ends when it opens: before the rows.
    let binlog = if a.source == "binlog" {
        Some(binlog_source(&a.dsn, &table).await?)
    } else {
        None
    };
    for chunk in (1..=a.n).collect::<Vec<_>>().chunks(1000) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| format!("({i}, 'new', 'order {i} of the benchmark')"))
            .collect();
        exec(
            &connector,
            &format!(
                "INSERT INTO {table} (id, status, payload) VALUES {}",
                values.join(", ")
            ),
        )
        .await?;
    }
    let source: Arc<dyn Source> = if let Some(binlog) = binlog {
        binlog
    } else if a.source == "incremental" {
        let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
        Arc::new(IncrementalSource::new(
            connector.clone(),
            IncrementalOptions::new(&table, "id", ["id"])
                .with_batch_size(1000)
                .with_poll_interval(Duration::from_millis(20)),
            store,
        )?)
    } else {
        Arc::new(TableQueueSource::new(
            connector.clone(),
            TableQueueOptions::new(&table, "id", "status = 'new'")
                .with_claim(columns(json!({"status": "working"})))
                .with_ack(columns(json!({"status": "done"})))
                .with_nack(columns(json!({"status": "new"})))
                .with_batch_size(100)
                .with_poll_interval(Duration::from_millis(20)),
        )?)
    };
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let handler = move |_ctx: TaskContext, _row: Value| {
        count.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, TaskError>(Value::Null) }
    };
    let app = OneStepApp::builder("source-drain")
        .task(
            Task::new("rows")
                .source(source)
                .concurrency(a.concurrency)
                .handler(handler),
        )
        .build()?;
    let handle = app.handle();
    let started = Instant::now();
    let worker = tokio::spawn(async move { app.serve().await });
    while handled.load(Ordering::Relaxed) < a.n {
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the drain did not finish within 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    handle.request_shutdown();
    worker.await??;
    exec(&connector, &format!("DROP TABLE {table}")).await?;
    Ok(json!({
        "source": a.source,
        "backend": D::NAME,
        "n": a.n,
        "concurrency": a.concurrency,
        "seconds": seconds,
        "drain_per_s": (a.n as f64 / seconds).round(),
    }))
}

/// A binlog source over the inserts of `table`, opened (its position at the log's end).
async fn binlog_source(dsn: &str, table: &str) -> Result<Arc<dyn Source>, BoxError> {
    use onestep_core::Resource;
    use onestep_sql::binlog::{BinlogOptions, BinlogSource, EventKind};
    let connector = SqlConnector::<onestep_sql::mysql::MySql>::new(dsn)?;
    let source = BinlogSource::new(
        connector,
        BinlogOptions::new(7500)
            .with_tables([table])
            .with_events([EventKind::Insert])
            .with_batch_size(100)
            .with_poll_interval(Duration::from_millis(20)),
        Arc::new(InMemoryCursorStore::default()),
    )?;
    source.open().await?;
    Ok(Arc::new(source))
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("source_drain: {e}");
            std::process::exit(2);
        }
    };
    let outcome = if a.dsn.starts_with("postgres") {
        run::<onestep_sql::postgres::Postgres>(a).await
    } else if a.dsn.starts_with("mysql") || a.dsn.starts_with("mariadb") {
        run::<onestep_sql::mysql::MySql>(a).await
    } else {
        run::<onestep_sql::sqlite::Sqlite>(a).await
    };
    match outcome {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("source_drain: {e}");
            std::process::exit(1);
        }
    }
}

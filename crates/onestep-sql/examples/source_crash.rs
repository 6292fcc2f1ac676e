//! The worker process of the source crash tests (`tests/source_crash.rs`): drains a table queue
//! or an incremental source over `--table` until it is killed, recording each handled row in
//! `<table>_effects` before the handler returns, so lost and duplicated work are counted from
//! rows.
//!
//! ```text
//! source_crash --dsn URL --table T --source table_queue|incremental|binlog [--work-ms MS]
//! ```
//!
//! The table is `T (id BIGINT PRIMARY KEY, status VARCHAR(20))`; the table queue claims
//! `status = 'new'` rows as `working` and acks them `done`; the incremental source reads in `id`
//! order with its cursor in `T_cursor`; the binlog source (MySQL only) reads the inserts into
//! `T` from the position saved in `T_cursor`, recording each row's event position with it.
//! Prints `ready` once the worker runs; logs to stderr as `RUST_LOG` says.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::retry::MaxAttempts;
use onestep_core::state::CursorStore;
use onestep_core::{OneStepApp, Source, Task, TaskContext, TaskError};
use onestep_sql::incremental::{IncrementalOptions, IncrementalSource};
use onestep_sql::param::Param;
use onestep_sql::state::{SqlCursorStore, StateTable};
use onestep_sql::table_queue::{TableQueueOptions, TableQueueSource};
use onestep_sql::{Dialect, SqlConnector};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    dsn: String,
    table: String,
    source: String,
    work_ms: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        dsn: String::new(),
        table: String::new(),
        source: String::new(),
        work_ms: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dsn" => a.dsn = value()?,
            "--table" => a.table = value()?,
            "--source" => a.source = value()?,
            "--work-ms" => a.work_ms = value()?.parse().map_err(|e| format!("--work-ms: {e}"))?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.dsn.is_empty() || a.table.is_empty() {
        return Err("--dsn and --table are required".into());
    }
    Ok(a)
}

fn columns(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

async fn run<D: Dialect>(a: Args) -> Result<(), BoxError> {
    let connector = SqlConnector::<D>::new(&a.dsn)?;
    let source: Arc<dyn Source> = match a.source.as_str() {
        "table_queue" => Arc::new(TableQueueSource::new(
            connector.clone(),
            TableQueueOptions::new(&a.table, "id", "status = 'new'")
                .with_claim(columns(json!({"status": "working"})))
                .with_ack(columns(json!({"status": "done"})))
                .with_nack(columns(json!({"status": "new"})))
                .with_batch_size(20)
                .with_poll_interval(Duration::from_millis(20)),
        )?),
        "incremental" => {
            let store: Arc<dyn CursorStore> = Arc::new(SqlCursorStore::new(
                connector.clone(),
                StateTable::cursor().with_table(format!("{}_cursor", a.table)),
            )?);
            Arc::new(IncrementalSource::new(
                connector.clone(),
                IncrementalOptions::new(&a.table, "id", ["id"])
                    .with_batch_size(20)
                    .with_poll_interval(Duration::from_millis(20)),
                store,
            )?)
        }
        "binlog" => binlog_source(&a)?,
        other => {
            return Err(format!(
                "--source must be table_queue, incremental or binlog, got {other:?}"
            )
            .into());
        }
    };
    let effects = D::render(&format!(
        "INSERT INTO {}_effects (id, pos) VALUES (?, ?)",
        a.table
    ));
    let work = Duration::from_millis(a.work_ms);
    let handler = move |_ctx: TaskContext, row: Value| {
        let connector = connector.clone();
        let effects = effects.clone();
        async move {
            // A table row, or a binlog change with the row under `values`.
            let id = row["id"]
                .as_i64()
                .or_else(|| row["values"]["id"].as_i64())
                .ok_or_else(|| TaskError::new("NoId", "a row without id"))?;
            let pos = row["binlog"]["pos"].as_i64().unwrap_or(0);
            tokio::time::sleep(work).await;
            let pool = connector
                .pool()
                .map_err(|e| TaskError::new("Pool", e.to_string()))?;
            let mut tx = D::begin(&pool)
                .await
                .map_err(|e| TaskError::new("Begin", e.to_string()))?;
            D::execute(
                &mut tx,
                &effects,
                vec![Param::BigInt(id), Param::BigInt(pos)],
            )
            .await
            .map_err(|e| TaskError::new("Effect", e.to_string()))?;
            tx.commit()
                .await
                .map_err(|e| TaskError::new("Commit", e.to_string()))?;
            Ok::<_, TaskError>(Value::Null)
        }
    };
    let app = OneStepApp::builder("source-crash")
        .task(
            Task::new("rows")
                .source(source)
                .concurrency(8)
                // A server outage (the chaos suite's restart) fails handlers for a while; they
                // are retried rather than given up (a failed row would block an ordered source).
                .retry(MaxAttempts::new(1000)?.with_delay(Duration::from_millis(200)))
                .handler(handler),
        )
        .build()?;
    println!("ready");
    app.run().await?;
    Ok(())
}

/// The binlog source of the crash tests: inserts into the table, position in `<table>_cursor`.
fn binlog_source(a: &Args) -> Result<Arc<dyn Source>, BoxError> {
    use onestep_sql::binlog::BinlogSource;
    let connector = SqlConnector::<onestep_sql::mysql::MySql>::new(&a.dsn)?;
    let store: Arc<dyn CursorStore> = Arc::new(SqlCursorStore::new(
        connector.clone(),
        StateTable::cursor().with_table(format!("{}_cursor", a.table)),
    )?);
    Ok(Arc::new(BinlogSource::new(
        connector,
        crash_binlog_options(&a.table),
        store,
    )?))
}

/// The options the crash test and this worker share (one position key).
fn crash_binlog_options(table: &str) -> onestep_sql::binlog::BinlogOptions {
    use onestep_sql::binlog::{BinlogOptions, EventKind};
    BinlogOptions::new(7400)
        .with_tables([table])
        .with_events([EventKind::Insert])
        .with_batch_size(20)
        .with_poll_interval(Duration::from_millis(20))
        .with_blocking(true)
}

#[tokio::main]
async fn main() {
    // `RUST_LOG` decides what reaches stderr (nothing unless set): the chaos suite keeps it, to
    // show what a stalled worker was doing.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("source_crash: {e}");
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
    if let Err(e) = outcome {
        eprintln!("source_crash: {e}");
        std::process::exit(1);
    }
}

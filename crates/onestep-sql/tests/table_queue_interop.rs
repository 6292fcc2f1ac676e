#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! A mixed fleet on one table queue: a worker of the real Python reference (`onestep-sql`
//! 0.7.1's table queue) and a Rust worker drain one table at the same time, on PostgreSQL,
//! MariaDB and SQLite. Every row is handled by exactly one of them and ends acked.
//!
//! Python runs `tests/python/interop.py table-queue-work` in the reference virtualenv, which the
//! test creates when it is missing (see `python_interop.rs`).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
use onestep_sql::table_queue::{TableQueueOptions, TableQueueSource};
use onestep_sql::{Dialect, SqlConnector};
use onestep_testkit::reference;
use serde_json::{Value, json};

const ROWS: i64 = 120;

fn helper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/interop.py")
}

fn columns(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().unwrap().clone()
}

/// Creates the table with [`ROWS`] new rows through `exec` (the dialect's raw statement).
async fn fill(exec: impl AsyncFn(String), table: &str) {
    exec(format!(
        "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(20) NOT NULL, \
         title VARCHAR(50))"
    ))
    .await;
    let values: Vec<String> = (1..=ROWS)
        .map(|i| format!("({i}, 'new', 't{i}')"))
        .collect();
    exec(format!(
        "INSERT INTO {table} (id, status, title) VALUES {}",
        values.join(", ")
    ))
    .await;
}

async fn shared_drain<D: Dialect>(
    connector: SqlConnector<D>,
    backend: &'static str,
    python_dsn: String,
    table: String,
    remaining: impl AsyncFn() -> i64,
) {
    let (claim, ack, nack) = (
        json!({"status": "working"}),
        json!({"status": "done"}),
        json!({"status": "new"}),
    );
    // Python first (it pays for its imports), in a thread: its helper call blocks.
    let python_args = json!({
        "backend": backend, "dsn": python_dsn, "table": table, "key": "id",
        "where": "status = 'new'", "claim": claim, "ack": ack, "nack": nack, "timeout_s": 60,
    });
    let python = std::thread::spawn(move || {
        reference::run_once(&helper_script(), "table-queue-work", &python_args)
    });

    let queue = TableQueueSource::new(
        connector,
        TableQueueOptions::new(&table, "id", "status = 'new'")
            .with_claim(columns(claim))
            .with_ack(columns(ack))
            .with_nack(columns(nack))
            .with_batch_size(5)
            .with_poll_interval(Duration::from_millis(50)),
    )
    .unwrap();
    let handled = Arc::new(Mutex::new(Vec::new()));
    let record = handled.clone();
    let handler = move |_ctx: TaskContext, row: Value| {
        let record = record.clone();
        async move {
            record.lock().unwrap().push(row["id"].as_i64().unwrap());
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, TaskError>(Value::Null)
        }
    };
    let app = OneStepApp::builder("rust-table-queue")
        .task(
            Task::new("rows")
                .source(queue)
                .concurrency(2)
                .handler(handler),
        )
        .build()
        .unwrap();
    // Start once Python has claimed its first rows, so both drain at the same time.
    let deadline = Instant::now() + Duration::from_secs(60);
    while remaining().await == ROWS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    while remaining().await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    let (answer, stderr) = python.join().unwrap();
    assert_eq!(answer["ok"], json!(true), "{answer} {stderr}");
    assert_eq!(answer["timed_out"], json!(false), "{answer} {stderr}");
    assert_eq!(remaining().await, 0, "rows left unacked on {backend}");

    let rust: Vec<i64> = handled.lock().unwrap().clone();
    let python: Vec<i64> = answer["handled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let all: Vec<i64> = rust.iter().chain(&python).copied().collect();
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(
        all.len(),
        unique.len(),
        "a row handled twice on {backend}: rust {rust:?} python {python:?}"
    );
    assert_eq!(
        unique,
        (1..=ROWS).collect(),
        "every row handled on {backend}"
    );
    assert!(
        !rust.is_empty() && !python.is_empty(),
        "both workers took rows on {backend}: rust {}, python {}",
        rust.len(),
        python.len()
    );
}

fn table_name() -> String {
    format!("tq_{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

fn python_dsn(url: &str, scheme: &str) -> String {
    let (_, rest) = url.split_once("://").expect("a URL");
    format!("{scheme}://{rest}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_python_and_rust_workers_share_a_table_queue() {
    let url = support::postgres_url();
    let connector = SqlConnector::<onestep_sql::postgres::Postgres>::new(&url).unwrap();
    let pool = connector.pool().unwrap();
    let table = table_name();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    fill(exec, &table).await;
    let count = format!("SELECT COUNT(*) FROM {table} WHERE status <> 'done'");
    let remaining = async || -> i64 { sqlx::query_scalar(&count).fetch_one(&pool).await.unwrap() };
    shared_drain(
        connector.clone(),
        "postgres",
        python_dsn(&url, "postgresql+psycopg"),
        table,
        remaining,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_python_and_rust_workers_share_a_table_queue() {
    let url = support::mysql_url();
    let connector = SqlConnector::<onestep_sql::mysql::MySql>::new(&url).unwrap();
    let pool = connector.pool().unwrap();
    let table = table_name();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    fill(exec, &table).await;
    let count = format!("SELECT COUNT(*) FROM {table} WHERE status <> 'done'");
    let remaining = async || -> i64 { sqlx::query_scalar(&count).fetch_one(&pool).await.unwrap() };
    shared_drain(
        connector.clone(),
        "mysql",
        python_dsn(&url, "mysql+asyncmy"),
        table,
        remaining,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_python_and_rust_workers_share_a_table_queue() {
    let dir = support::sqlite_dir();
    let path = dir.path().join("shared.db");
    let connector = SqlConnector::<onestep_sql::sqlite::Sqlite>::new(&format!(
        "sqlite://{}?mode=rwc",
        path.display()
    ))
    .unwrap();
    let pool = connector.pool().unwrap();
    let table = table_name();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    fill(exec, &table).await;
    let count = format!("SELECT COUNT(*) FROM {table} WHERE status <> 'done'");
    let remaining = async || -> i64 { sqlx::query_scalar(&count).fetch_one(&pool).await.unwrap() };
    shared_drain(
        connector.clone(),
        "sqlite",
        format!("sqlite+aiosqlite:///{}", path.display()),
        table,
        remaining,
    )
    .await;
}

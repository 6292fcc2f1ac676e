#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! An incremental source handed between the Python reference and this port through one cursor
//! store, on PostgreSQL, MariaDB and SQLite: Rust reads the first rows, Python reads on from
//! the cursor Rust saved (same default `state_key`), Rust reads on from Python's (a tagged
//! `datetime`), and no row is read twice or skipped.
//!
//! Python runs `tests/python/interop.py incremental-read` in the reference virtualenv, which the
//! test creates when it is missing (see `python_interop.rs`).

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use onestep_core::Source;
use onestep_core::state::CursorStore;
use onestep_sql::incremental::{IncrementalOptions, IncrementalSource};
use onestep_sql::state::{SqlCursorStore, StateTable};
use onestep_sql::{Dialect, SqlConnector};
use onestep_testkit::reference::PySession;
use serde_json::{Value, json};

fn helper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/interop.py")
}

/// Reads and acks with a Rust source until nothing is left; the keys read.
async fn rust_read<D: Dialect>(
    connector: &SqlConnector<D>,
    table: &str,
    cursor_table: &str,
    limit: Option<usize>,
) -> (Vec<i64>, String) {
    let store: Arc<dyn CursorStore> = Arc::new(
        SqlCursorStore::new(
            connector.clone(),
            StateTable::cursor().with_table(cursor_table),
        )
        .unwrap(),
    );
    let source = IncrementalSource::new(
        connector.clone(),
        IncrementalOptions::new(table, "id", ["changed_at"]).with_batch_size(3),
        store,
    )
    .unwrap();
    let mut read = Vec::new();
    loop {
        let batch = source.fetch(10).await.unwrap();
        if batch.is_empty() {
            break;
        }
        for mut delivery in batch {
            read.push(delivery.envelope().body["id"].as_i64().unwrap());
            delivery.ack().await.unwrap();
        }
        if limit.is_some_and(|n| read.len() >= n) {
            break;
        }
    }
    (read, source.state_key().to_owned())
}

async fn handed_over<D: Dialect>(
    connector: SqlConnector<D>,
    backend: &str,
    python_dsn: &str,
    exec: impl AsyncFn(String),
    timestamp: &str,
) {
    let table = format!("inc_{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let cursor_table = format!("{table}_cursor");
    exec(format!(
        "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, changed_at {timestamp} NOT NULL)"
    ))
    .await;
    let rows = |range: std::ops::RangeInclusive<i64>| {
        range
            .map(|i| format!("({i}, '2026-01-02 03:04:{:02}.{:06}')", i, i * 7))
            .collect::<Vec<_>>()
            .join(", ")
    };
    exec(format!(
        "INSERT INTO {table} (id, changed_at) VALUES {}",
        rows(1..=9)
    ))
    .await;
    // Rust creates the cursor table and reads the first wave.
    let (first, rust_key) = rust_read(&connector, &table, &cursor_table, Some(3)).await;
    assert_eq!(first, [1, 2, 3]);
    let mut session = PySession::start(&helper_script());
    let args = json!({"backend": backend, "dsn": python_dsn, "table": table, "key": "id",
                      "cursor": ["changed_at"], "cursor_table": cursor_table});
    let (answer, stderr) = session.call("incremental-read", &args);
    assert_eq!(answer["ok"], json!(true), "{answer} {stderr}");
    assert_eq!(
        answer["state_key"],
        json!(rust_key),
        "one default state_key on both sides"
    );
    assert_eq!(
        answer["read"],
        json!([4, 5, 6, 7, 8, 9]),
        "{answer} on {backend}"
    );
    // Python saved a datetime; Rust reads on from it: only the new rows.
    exec(format!(
        "INSERT INTO {table} (id, changed_at) VALUES {}",
        rows(10..=12)
    ))
    .await;
    let (after, _) = rust_read(&connector, &table, &cursor_table, None).await;
    assert_eq!(after, [10, 11, 12], "on {backend}");
    let (answer, stderr) = session.call("incremental-read", &args);
    assert_eq!(
        answer["read"],
        Value::Array(Vec::new()),
        "{answer} {stderr}"
    );
}

fn python_dsn(url: &str, scheme: &str) -> String {
    let (_, rest) = url.split_once("://").expect("a URL");
    format!("{scheme}://{rest}")
}

#[tokio::test]
async fn postgres_incremental_cursor_is_shared_with_python() {
    let url = support::postgres_url();
    let connector = SqlConnector::<onestep_sql::postgres::Postgres>::new(&url).unwrap();
    let pool = connector.pool().unwrap();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    let dsn = python_dsn(&url, "postgresql+psycopg");
    handed_over(
        connector.clone(),
        "postgres",
        &dsn,
        exec,
        "TIMESTAMP WITH TIME ZONE",
    )
    .await;
}

#[tokio::test]
async fn mysql_incremental_cursor_is_shared_with_python() {
    let url = support::mysql_url();
    let connector = SqlConnector::<onestep_sql::mysql::MySql>::new(&url).unwrap();
    let pool = connector.pool().unwrap();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    let dsn = python_dsn(&url, "mysql+asyncmy");
    handed_over(connector.clone(), "mysql", &dsn, exec, "DATETIME(6)").await;
}

#[tokio::test]
async fn sqlite_incremental_cursor_is_shared_with_python() {
    let dir = support::sqlite_dir();
    let path = dir.path().join("shared.db");
    let connector = SqlConnector::<onestep_sql::sqlite::Sqlite>::new(&format!(
        "sqlite://{}?mode=rwc",
        path.display()
    ))
    .unwrap();
    let pool = connector.pool().unwrap();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    let dsn = format!("sqlite+aiosqlite:///{}", path.display());
    handed_over(connector.clone(), "sqlite", &dsn, exec, "DATETIME").await;
}

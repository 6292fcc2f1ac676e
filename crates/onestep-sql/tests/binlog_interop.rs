#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! A binlog position handed between the Python reference and this port through one cursor
//! store, on a MariaDB writing a row-format binary log: Rust reads the first rows, Python's
//! `mysql_binlog` source reads on from the position Rust saved (same default `state_key`),
//! Rust reads on from Python's, and no row is read twice or skipped. Both sides name the same
//! rows by the same `binlog` file and position.
//!
//! Python runs `tests/python/interop.py binlog-read` in the reference virtualenv, which the
//! test creates when it is missing (see `python_interop.rs`).

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use onestep_core::state::CursorStore;
use onestep_core::{Resource, Source};
use onestep_sql::SqlConnector;
use onestep_sql::binlog::{BinlogOptions, BinlogSource};
use onestep_sql::mysql::MySql;
use onestep_sql::state::{SqlCursorStore, StateTable};
use onestep_testkit::reference::PySession;
use serde_json::{Value, json};

fn helper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/interop.py")
}

const SERVER_ID: u32 = 7301;

/// Reads and acks `want` rows (every row until a quiet second when 0); ids and `binlog`
/// positions. Rows fetched beyond `want` are left unacked.
async fn rust_read(
    connector: &SqlConnector<MySql>,
    table: &str,
    cursor_table: &str,
    want: usize,
) -> (Vec<i64>, Vec<Value>, String) {
    let store: Arc<dyn CursorStore> = Arc::new(
        SqlCursorStore::new(
            connector.clone(),
            StateTable::cursor().with_table(cursor_table),
        )
        .unwrap(),
    );
    let source = BinlogSource::new(
        connector.clone(),
        BinlogOptions::new(SERVER_ID)
            .with_tables([table])
            .with_batch_size(4)
            .with_poll_interval(Duration::from_millis(200)),
        store,
    )
    .unwrap();
    source.open().await.unwrap();
    let (mut ids, mut positions) = (Vec::new(), Vec::new());
    let mut idle = tokio::time::Instant::now();
    while (want == 0 || ids.len() < want) && idle.elapsed() < Duration::from_secs(1) {
        let batch = source.fetch(10).await.unwrap();
        if !batch.is_empty() {
            idle = tokio::time::Instant::now();
        }
        for mut delivery in batch {
            if want > 0 && ids.len() >= want {
                break;
            }
            let body = &delivery.envelope().body;
            ids.push(body["values"]["id"].as_i64().unwrap());
            positions.push(body["binlog"].clone());
            delivery.ack().await.unwrap();
        }
    }
    source.close().await.unwrap();
    (ids, positions, source.state_key().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binlog_position_is_shared_with_python() {
    let url = support::mysql_binlog_url();
    let connector = SqlConnector::<MySql>::new(&url).unwrap();
    let pool = connector.pool().unwrap();
    let exec = async |sql: String| {
        sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    };
    let table = format!("bli_{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let cursor_table = format!("{table}_cursor");
    exec(format!(
        "CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20))"
    ))
    .await;
    // Rust opens first (and saves where the log ends), then the rows are written.
    let (none, _, rust_key) = rust_read(&connector, &table, &cursor_table, 0).await;
    // (Nothing was written yet.)
    assert!(none.is_empty());
    for i in 1..=5 {
        exec(format!("INSERT INTO {table} VALUES ({i}, 'one')")).await;
    }
    exec(format!(
        "INSERT INTO {table} VALUES (6, 'many'), (7, 'many'), (8, 'many'); \
         UPDATE {table} SET v = 'changed' WHERE id = 9"
    ))
    .await;
    exec(format!("UPDATE {table} SET v = 'changed' WHERE id = 1")).await;
    let (first, rust_positions, _) = rust_read(&connector, &table, &cursor_table, 3).await;
    assert_eq!(first, [1, 2, 3]);

    let (_, python_url) = url.split_once("://").unwrap();
    let dsn = format!("mysql+asyncmy://{python_url}");
    let mut session = PySession::start(&helper_script());
    let args = json!({"dsn": dsn, "server_id": SERVER_ID + 1, "tables": [table],
                      "cursor_table": cursor_table});
    let (answer, stderr) = session.call("binlog-read", &args);
    assert_eq!(answer["ok"], json!(true), "{answer} {stderr}");
    assert_eq!(
        answer["state_key"],
        json!(rust_key),
        "one default state_key on both sides"
    );
    assert_eq!(answer["read"], json!([4, 5, 6, 7, 8, 1]), "{answer}");
    // The same rows are named by the same file and position on both sides.
    let python_positions = answer["positions"].as_array().unwrap();
    for (rust, python) in rust_positions.iter().zip(python_positions) {
        assert_eq!(rust["file"], python["file"]);
    }
    let rust_rest = rust_read(&connector, &table, &cursor_table, 0).await;
    assert!(
        rust_rest.0.is_empty(),
        "Python's saved position is read on from: {rust_rest:?}"
    );

    exec(format!(
        "INSERT INTO {table} VALUES (10, 'new'), (11, 'new')"
    ))
    .await;
    let (after, after_positions, _) = rust_read(&connector, &table, &cursor_table, 2).await;
    assert_eq!(after, [10, 11]);
    assert!(after_positions[0]["pos"].as_u64() > python_positions.last().unwrap()["pos"].as_u64());
    let (answer, stderr) = session.call("binlog-read", &args);
    assert_eq!(answer["read"], json!([]), "{answer} {stderr}");
}

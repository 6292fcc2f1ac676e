//! Group commit of submits on SQLite: the submits that wait while another is being written go in
//! together, in one transaction; and when the task writing them is stopped with its runtime, the
//! submits it had not taken yet are written by their own callers, not lost or left waiting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use onestep_core::execution::{ExecutionBackend, ExecutionQuery, ExecutionRequest, SubmitOptions};
use onestep_sql::dsn::Dsn;
use onestep_sql::sqlite::{Sqlite, SqliteExecutionBackend};
use onestep_sql::{Dialect, PoolSettings};
use serde_json::json;

fn request(i: usize) -> ExecutionRequest {
    ExecutionRequest::new("group", "t", json!({"i": i}), SubmitOptions::default()).unwrap()
}

fn backend(dir: &tempfile::TempDir) -> (SqliteExecutionBackend, String) {
    let dsn = format!("sqlite://{}/group.db?mode=rwc", dir.path().display());
    let b = SqliteExecutionBackend::new(&dsn, support::live::fresh_options()).unwrap();
    (b, dsn)
}

async fn stored(b: &SqliteExecutionBackend) -> Vec<serde_json::Value> {
    let q = ExecutionQuery {
        namespace: "group".into(),
        task_name: None,
        status: None,
        limit: 200,
        cursor: None,
    };
    let page = b.list(&q).await.unwrap();
    page.items.into_iter().map(|e| e.payload).collect()
}

/// Submits made at once share transactions: a transaction reads the time once, so rows written
/// together carry one `created_at`, where one transaction each would give every row its own.
#[tokio::test]
async fn submits_made_at_once_are_written_together() {
    let dir = support::sqlite_dir();
    let (b, _) = backend(&dir);
    b.submit(request(0)).await.unwrap(); // creates the tables

    let mut calls = tokio::task::JoinSet::new();
    for i in 1..=60 {
        let b = b.clone();
        calls.spawn(async move { b.submit(request(i)).await.unwrap() });
    }
    let mut times = HashSet::new();
    let mut ids = HashSet::new();
    while let Some(e) = calls.join_next().await {
        let e = e.unwrap();
        times.insert(e.created_at);
        ids.insert(e.id);
    }
    assert_eq!(ids.len(), 60);
    assert!(
        times.len() <= 10,
        "60 submits made at once were written in {} transactions",
        times.len()
    );
    assert_eq!(stored(&b).await.len(), 61);
}

/// The writer runs in the runtime of the submit that started it. When that runtime shuts down
/// while the writer waits for the database, a submit waiting behind it (from another runtime)
/// is handed back and written by its own caller.
#[test]
fn a_submit_waiting_behind_a_stopped_writer_is_written_by_its_caller() {
    let dir = support::sqlite_dir();
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (b, dsn) = main.block_on(async {
        let (b, dsn) = backend(&dir);
        b.submit(request(0)).await.unwrap(); // creates the tables, opens the connection
        (b, dsn)
    });

    // Another process takes the database's write lock.
    let (other, lock) = main.block_on(async {
        let settings = PoolSettings {
            max_connections: 1,
            acquire_timeout: Duration::from_secs(5),
        };
        let other = Sqlite::connect_lazy(&Dsn::parse(&dsn).unwrap(), &settings).unwrap();
        let lock = Sqlite::begin(&other).await.unwrap();
        (other, lock)
    });

    // A submit in a second runtime starts the writer, which waits for the lock.
    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let first = b.clone();
    let _abandoned = second.spawn(async move { first.submit(request(1)).await });
    std::thread::sleep(Duration::from_millis(300));

    // A submit from the main runtime waits behind it; then the second runtime shuts down.
    let waiting = b.clone();
    let behind = main.spawn(async move { waiting.submit(request(2)).await });
    std::thread::sleep(Duration::from_millis(300));
    second.shutdown_background();

    // The lock goes; the waiting submit is written by its own caller.
    main.block_on(async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        lock.rollback().await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(20), behind)
            .await
            .expect("the submit waiting behind the stopped writer was never answered")
            .unwrap()
            .unwrap();
        assert_eq!(answer.payload, json!({"i": 2}));
        let mut payloads = stored(&b).await;
        payloads.sort_by_key(|p| p["i"].as_u64());
        // The stopped writer's own submit never reached the database.
        assert_eq!(payloads, vec![json!({"i": 0}), json!({"i": 2})]);
        other.close().await;
    });
}

//! A transaction start cancelled at any point must not leave a pooled SQLite connection inside
//! `BEGIN IMMEDIATE`: idle in the pool, such a connection holds the database's write lock, so
//! every other writer (in any process) fails with "database is locked" until it is used again.
//! Found by `cargo xtask chaos` (two workers with skewed clocks stalled for minutes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use onestep_sql::dsn::Dsn;
use onestep_sql::sqlite::Sqlite;
use onestep_sql::{Dialect, PoolSettings};

fn pool(path: &std::path::Path) -> sqlx::Pool<sqlx::Sqlite> {
    let dsn = Dsn::parse(&format!("sqlite://{}?mode=rwc", path.display())).unwrap();
    let settings = PoolSettings {
        max_connections: 4,
        acquire_timeout: Duration::from_secs(5),
    };
    Sqlite::connect_lazy(&dsn, &settings).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_begin_leaves_no_transaction_open() {
    let dir = tempfile::Builder::new()
        .prefix("onestep-begin-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("db.sqlite");
    let first = pool(&path);
    let mut tx = Sqlite::begin(&first).await.unwrap();
    Sqlite::execute(&mut tx, "CREATE TABLE t (x INTEGER)", Vec::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // Cancel begins at every point of their life, from before BEGIN to after it returned.
    for i in 0..400u64 {
        let _ =
            tokio::time::timeout(Duration::from_micros(i % 80 * 5), Sqlite::begin(&first)).await;
    }
    // Let begins that outlived their caller finish and roll back.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Another pool (another process) can write while the first pool sits idle...
    let second = pool(&path);
    let mut tx = tokio::time::timeout(Duration::from_secs(20), Sqlite::begin(&second))
        .await
        .expect("the second pool waited 20 s for the write lock")
        .expect("the second pool could not start a write transaction");
    Sqlite::execute(&mut tx, "INSERT INTO t (x) VALUES (1)", Vec::new())
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // ...and every connection of the first pool can start a transaction again.
    for _ in 0..8 {
        let tx = Sqlite::begin(&first).await.unwrap();
        tx.commit().await.unwrap();
    }
    first.close().await;
    second.close().await;
}

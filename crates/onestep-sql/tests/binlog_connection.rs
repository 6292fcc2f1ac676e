#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The `mysql_binlog` source when the server cuts its replication connection: the next fetches
//! fail (a retryable error), then reading goes on where it stopped, with nothing lost or read
//! twice. Alone in its test binary, because it kills every dump connection on the server.

mod support;

use std::sync::Arc;
use std::time::Duration;

use onestep_core::state::{CursorStore, InMemoryCursorStore};
use onestep_core::{Resource, Source};
use onestep_sql::SqlConnector;
use onestep_sql::binlog::{BinlogOptions, BinlogSource};
use onestep_sql::mysql::MySql;

fn connector() -> SqlConnector<MySql> {
    SqlConnector::new(&support::mysql_binlog_url()).unwrap()
}

async fn exec(connector: &SqlConnector<MySql>, sql: &str) {
    let pool = connector.pool().unwrap();
    sqlx::raw_sql(sql).execute(&pool).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_replication_connection_reads_on_without_loss_or_repeat() {
    let c = connector();
    let t = format!(
        "bl_drop_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    exec(&c, &format!("CREATE TABLE {t} (id INT PRIMARY KEY)")).await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let s = BinlogSource::new(
        c.clone(),
        BinlogOptions::new(4242)
            .with_tables([t.clone()])
            .with_poll_interval(Duration::from_millis(200)),
        store,
    )
    .unwrap();
    s.open().await.unwrap();
    exec(&c, &format!("INSERT INTO {t} VALUES (1), (2), (3)")).await;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        for mut d in s.fetch(10).await.unwrap() {
            seen.push(d.envelope().body["values"]["id"].as_i64().unwrap());
            d.ack().await.unwrap();
        }
    }
    // Cut this source's dump connection on the server.
    let pool = c.pool().unwrap();
    let dumps: Vec<(u64,)> = sqlx::query_as(
        "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(!dumps.is_empty(), "a dump connection is open");
    for (id,) in &dumps {
        let _ = sqlx::raw_sql(&format!("KILL {id}")).execute(&pool).await;
    }
    // Gone from the server before the next rows are written.
    for _ in 0..100 {
        let left: Vec<(u64,)> = sqlx::query_as(
            "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if left.iter().all(|id| !dumps.contains(id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    exec(&c, &format!("INSERT INTO {t} VALUES (4), (5)")).await;
    let mut errors = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 5 && tokio::time::Instant::now() < deadline {
        match s.fetch(10).await {
            Ok(batch) => {
                for mut d in batch {
                    seen.push(d.envelope().body["values"]["id"].as_i64().unwrap());
                    d.ack().await.unwrap();
                }
            }
            Err(err) => {
                assert!(err.to_string().contains("mysql"), "{err}");
                if errors < 3 {
                    eprintln!("fetch failed: {err:?}");
                }
                errors += 1;
            }
        }
    }
    assert_eq!(seen, [1, 2, 3, 4, 5], "after {errors} failed fetches");
    assert!(errors >= 1, "the cut connection was noticed and replaced");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The `mysql_binlog` source on a real MariaDB writing a row-format binary log
//! (`ONESTEP_MYSQL_BINLOG_URL`, which `cargo xtask test` provides): payloads and value types,
//! filters, restarts from the saved position, statements spanning several rows events, a
//! dropped replication connection, retry and fail, and the connector conformance kit.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::state::{CursorStore, InMemoryCursorStore};
use onestep_core::{Envelope, FailureInfo, FailureKind, Resource, Source, Stage, TaskError};
use onestep_sql::SqlConnector;
use onestep_sql::binlog::{BinlogOptions, BinlogSource, EventKind};
use onestep_sql::mysql::MySql;
use onestep_testkit::connector::SourceFactory;
use serde_json::{Value, json};

fn connector() -> SqlConnector<MySql> {
    SqlConnector::new(&support::mysql_binlog_url()).unwrap()
}

async fn exec(connector: &SqlConnector<MySql>, sql: &str) {
    let pool = connector.pool().unwrap();
    sqlx::raw_sql(sql).execute(&pool).await.unwrap_or_else(|e| {
        panic!("{sql}: {e}");
    });
}

fn table_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// A unique replication id per source, so parallel tests never share one.
fn server_id() -> u32 {
    1000 + (uuid::Uuid::new_v4().as_u128() % 1_000_000_000) as u32
}

fn source(table: &str, store: Arc<dyn CursorStore>) -> BinlogSource {
    BinlogSource::new(
        connector(),
        BinlogOptions::new(server_id())
            .with_tables([table])
            .with_batch_size(50)
            .with_poll_interval(Duration::from_millis(200)),
        store,
    )
    .unwrap()
}

/// Fetches until nothing comes for `quiet`; acks everything when `ack`.
async fn drain(source: &BinlogSource, quiet: Duration, ack: bool) -> Vec<Value> {
    let mut bodies = Vec::new();
    let mut idle = tokio::time::Instant::now();
    while idle.elapsed() < quiet {
        let batch = source.fetch(50).await.unwrap();
        if batch.is_empty() {
            continue;
        }
        idle = tokio::time::Instant::now();
        for mut delivery in batch {
            bodies.push(delivery.envelope().body.clone());
            if ack {
                delivery.ack().await.unwrap();
            }
        }
    }
    bodies
}

fn ids(bodies: &[Value]) -> Vec<i64> {
    bodies
        .iter()
        .map(|b| b["values"]["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_updates_and_deletes_arrive_as_the_reference_shapes_them() {
    let c = connector();
    let t = table_name("bl_types");
    exec(
        &c,
        &format!(
            "CREATE TABLE {t} (id INT PRIMARY KEY, big BIGINT UNSIGNED, name VARCHAR(40), \
             price DECIMAL(20,6), ratio DOUBLE, born DATE, seen DATETIME(3), at TIMESTAMP NULL, \
             span TIME, state ENUM('new','paid'), tags SET('a','b','c'), raw VARBINARY(8), \
             note TEXT)"
        ),
    )
    .await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let s = source(&t, store.clone());
    s.open().await.unwrap();
    exec(
        &c,
        &format!(
            "SET time_zone = '+00:00'; INSERT INTO {t} VALUES (1, 18446744073709551615, 'café', \
             12345678901234.000001, 0.25, '2026-01-02', '2026-01-02 03:04:05.678', \
             '2026-01-02 03:04:05', '-26:03:04', 'paid', 'a,c', X'00FF', NULL); \
             UPDATE {t} SET name = 'tea', state = 'new' WHERE id = 1; DELETE FROM {t} WHERE id = 1;"
        ),
    )
    .await;
    let bodies = drain(&s, Duration::from_millis(800), true).await;
    assert_eq!(bodies.len(), 3, "{bodies:#?}");
    let insert = &bodies[0];
    let database = insert["schema"].as_str().unwrap();
    assert!(!database.is_empty());
    assert_eq!(insert["table"], json!(t));
    assert_eq!(insert["event"], json!("insert"));
    let keys: Vec<&str> = insert
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["schema", "table", "event", "binlog", "values"]);
    let binlog = &insert["binlog"];
    assert!(
        binlog["file"].as_str().unwrap().starts_with("mysql-bin") || binlog["file"].is_string()
    );
    assert!(binlog["pos"].as_u64().unwrap() > 4);
    assert!(binlog["timestamp"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(
        insert["values"],
        json!({
            "id": 1, "big": 18446744073709551615u64, "name": "café",
            "price": serde_json::from_str::<Value>("12345678901234.000001").unwrap(),
            "ratio": 0.25, "born": "2026-01-02", "seen": "2026-01-02 03:04:05.678",
            "at": "2026-01-02 03:04:05", "span": "-26:03:04", "state": "paid", "tags": "a,c",
            "raw": onestep_core::execution::codec::bytes_tag(&[0, 255]), "note": null,
        })
    );
    let update = &bodies[1];
    assert_eq!(update["event"], json!("update"));
    let keys: Vec<&str> = update
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "schema",
            "table",
            "event",
            "binlog",
            "before_values",
            "values"
        ]
    );
    assert_eq!(update["before_values"]["name"], json!("café"));
    assert_eq!(update["values"]["name"], json!("tea"));
    assert_eq!(update["values"]["state"], json!("new"));
    let delete = &bodies[2];
    assert_eq!(delete["event"], json!("delete"));
    assert_eq!(delete["values"]["name"], json!("tea"));
    // The position saved is at or after the last event's (its commit follows), as
    // `{"file", "pos"}`.
    let saved = store.load(s.state_key()).await.unwrap().unwrap();
    let keys: Vec<&str> = saved
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["file", "pos"]);
    assert_eq!(saved["file"], delete["binlog"]["file"]);
    assert!(
        saved["pos"].as_u64() >= delete["binlog"]["pos"].as_u64(),
        "{saved}"
    );
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_carry_the_reference_metadata_and_filters_hold() {
    let c = connector();
    let t = table_name("bl_filter");
    let other = table_name("bl_other");
    exec(&c, &format!("CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")).await;
    exec(&c, &format!("CREATE TABLE {other} (id INT PRIMARY KEY)")).await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let s = BinlogSource::new(
        connector(),
        BinlogOptions::new(server_id())
            .with_tables([t.clone()])
            .with_events([EventKind::Update])
            .with_poll_interval(Duration::from_millis(200)),
        store.clone(),
    )
    .unwrap();
    assert_eq!(
        s.state_key(),
        format!("binlog:schemas=*:tables={t}:events=update")
    );
    s.open().await.unwrap();
    exec(
        &c,
        &format!(
            "INSERT INTO {t} VALUES (1, 1); INSERT INTO {other} VALUES (1); \
             UPDATE {t} SET v = 2 WHERE id = 1; DELETE FROM {t};"
        ),
    )
    .await;
    let batch = s.fetch(10).await.unwrap();
    assert_eq!(batch.len(), 1, "only the update of {t}");
    let envelope = batch[0].envelope();
    assert_eq!(envelope.body["event"], json!("update"));
    assert_eq!(
        Value::Object(envelope.meta.clone()),
        json!({"source": "mysql_binlog", "binlog": envelope.body["binlog"]})
    );
    drop(batch);
    // Other tables' changes alone still move the saved position on.
    let before = store.load(s.state_key()).await.unwrap().unwrap();
    exec(&c, &format!("INSERT INTO {other} VALUES (2), (3)")).await;
    let mut moved = false;
    for _ in 0..20 {
        assert!(s.fetch(10).await.unwrap().is_empty());
        if store.load(s.state_key()).await.unwrap().unwrap() != before {
            moved = true;
            break;
        }
    }
    // The unacked update holds the position back: nothing passes an outstanding row.
    assert!(!moved, "the position passed an unacked row");
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_on_from_the_saved_position_even_inside_a_long_statement() {
    let c = connector();
    let t = table_name("bl_restart");
    exec(
        &c,
        &format!("CREATE TABLE {t} (id INT PRIMARY KEY, pad VARCHAR(200))"),
    )
    .await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let first = source(&t, store.clone());
    first.open().await.unwrap();
    // One statement of 600 rows of ~200 bytes: many rows events, one statement end.
    let values: Vec<String> = (1..=600)
        .map(|i| format!("({i}, REPEAT('x', 190))"))
        .collect();
    exec(&c, &format!("INSERT INTO {t} VALUES {}", values.join(", "))).await;
    exec(&c, &format!("INSERT INTO {t} VALUES (601, 'after')")).await;
    // Ack 130 rows (past the first rows events, inside the statement), then stop.
    let mut acked = Vec::new();
    while acked.len() < 130 {
        for mut d in first.fetch(50).await.unwrap() {
            if acked.len() < 130 {
                acked.push(d.envelope().body["values"]["id"].as_i64().unwrap());
                d.ack().await.unwrap();
            }
        }
    }
    first.close().await.unwrap();
    drop(first);
    let second = source(&t, store.clone());
    let rest = ids(&drain(&second, Duration::from_millis(800), true).await);
    let mut all: Vec<i64> = acked.iter().chain(&rest).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all,
        (1..=601).collect::<Vec<_>>(),
        "no row lost across the restart"
    );
    assert!(
        rest.len() <= 601,
        "at most the statement's rows come again: {} delivered",
        rest.len()
    );
    // After everything is acked, a third reader finds nothing new.
    let third = source(&t, store);
    assert!(
        drain(&third, Duration::from_millis(500), true)
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_position_inside_a_statement_is_read_from_its_file_start() {
    // The reference saves the end of the last acked rows event, even inside a statement; the
    // next rows event's table map is then behind the position.
    let c = connector();
    let t = table_name("bl_mid");
    exec(
        &c,
        &format!("CREATE TABLE {t} (id INT PRIMARY KEY, pad VARCHAR(200))"),
    )
    .await;
    let probe_store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let probe = source(&t, probe_store);
    probe.open().await.unwrap();
    let values: Vec<String> = (1..=400)
        .map(|i| format!("({i}, REPEAT('y', 190))"))
        .collect();
    exec(&c, &format!("INSERT INTO {t} VALUES {}", values.join(", "))).await;
    let bodies = drain(&probe, Duration::from_millis(800), false).await;
    assert_eq!(bodies.len(), 400);
    // Where the first rows event ends, as the reference would have saved it.
    let first_event = bodies[0]["binlog"].clone();
    let in_first = bodies.iter().filter(|b| b["binlog"] == first_event).count();
    assert!(in_first < 400, "the statement spans several events");
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let s = source(&t, store.clone());
    store
        .save(
            s.state_key(),
            json!({"file": first_event["file"], "pos": first_event["pos"]}),
        )
        .await
        .unwrap();
    let rest = ids(&drain(&s, Duration::from_millis(800), true).await);
    assert_eq!(
        rest,
        ((in_first as i64 + 1)..=400).collect::<Vec<_>>(),
        "exactly the rows after the saved event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_row_comes_first_and_a_failed_row_blocks_the_source() {
    let c = connector();
    let t = table_name("bl_retry");
    exec(&c, &format!("CREATE TABLE {t} (id INT PRIMARY KEY)")).await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let s = source(&t, store.clone());
    s.open().await.unwrap();
    let start = store.load(s.state_key()).await.unwrap().unwrap();
    exec(
        &c,
        &format!("INSERT INTO {t} VALUES (1); INSERT INTO {t} VALUES (2)"),
    )
    .await;
    let mut batch = Vec::new();
    while batch.len() < 2 {
        batch.extend(s.fetch(10).await.unwrap());
    }
    let mut second = batch.pop().unwrap();
    let mut first = batch.pop().unwrap();
    second.ack().await.unwrap();
    first.retry(Some(Duration::from_millis(50))).await.unwrap();
    // Row 2 is acked, but row 1 is outstanding: the position stays.
    assert_eq!(store.load(s.state_key()).await.unwrap().unwrap(), start);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let mut again = s.fetch(10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].envelope().body["values"]["id"], json!(1));
    assert_eq!(again[0].envelope().attempts, 1);
    let failure = FailureInfo::from_error(
        FailureKind::Error,
        Stage::Handler,
        &TaskError::new("RuntimeError", "boom"),
    );
    again[0].fail(&failure).await.unwrap();
    let Err(err) = s.fetch(10).await else {
        panic!("a failed row must block the source");
    };
    assert!(
        err.to_string().contains("blocked") || format!("{err:?}").contains("blocked"),
        "{err:?}"
    );
    assert_eq!(store.load(s.state_key()).await.unwrap().unwrap(), start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_row_logging_is_a_clear_error() {
    // The plain test server (`ONESTEP_MYSQL_URL`) logs no rows on our machines; when it does,
    // this case has nothing to show.
    let plain = SqlConnector::<MySql>::new(&support::mysql_url()).unwrap();
    let pool = plain.pool().unwrap();
    let (log_bin,): (i64,) = sqlx::query_as("SELECT @@log_bin + 0")
        .fetch_one(&pool)
        .await
        .unwrap();
    let s = BinlogSource::new(
        plain,
        BinlogOptions::new(server_id()),
        Arc::new(InMemoryCursorStore::default()),
    )
    .unwrap();
    let opened = s.open().await;
    if log_bin == 0 {
        let err = opened.expect_err("no binary log");
        let text = format!("{err:?}");
        assert!(
            text.contains("log_bin") || text.contains("binary log"),
            "{text}"
        );
    } else {
        opened.unwrap();
    }
}

/// Fresh tables for the conformance kit; the consumers are handles to one source.
struct Binlogs;

#[async_trait]
impl SourceFactory for Binlogs {
    type Source = BinlogSource;

    async fn create(&self, messages: usize, consumers: usize) -> Vec<BinlogSource> {
        let c = connector();
        let t = table_name("bl_kit");
        exec(&c, &format!("CREATE TABLE {t} (id INT PRIMARY KEY)")).await;
        let s = source(&t, Arc::new(InMemoryCursorStore::default()));
        // The position is taken when the source opens: before the rows are written.
        s.open().await.unwrap();
        let values: Vec<String> = (1..=messages).map(|i| format!("({i})")).collect();
        if !values.is_empty() {
            exec(&c, &format!("INSERT INTO {t} VALUES {}", values.join(", "))).await;
        }
        vec![s; consumers]
    }

    fn id(&self, envelope: &Envelope) -> String {
        envelope.body["values"]["id"].to_string()
    }
}

onestep_testkit::connector_conformance!(Binlogs);

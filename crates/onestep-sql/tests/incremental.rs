#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `*_incremental` on real PostgreSQL, MariaDB and SQLite: rows in cursor order, the position
//! committed in waves, nothing skipped or read twice across a restart, retries first, a failure
//! blocking the source, and a timestamp cursor saved as the reference tags it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use onestep_core::state::{CursorStore, InMemoryCursorStore};
use onestep_core::{Delivery, FailureInfo, FailureKind, Resource, Source, Stage, TaskError};
use onestep_sql::incremental::{IncrementalOptions, IncrementalSource};
use onestep_sql::state::{SqlCursorStore, StateTable};
use onestep_sql::{Dialect, SqlConnector};
use serde_json::json;

use support::raw::Raw;

/// A timestamp column type of each dialect, for the timestamp cursor case.
trait Timestamp: Raw {
    const TIMESTAMP: &'static str;
}

fn table_name() -> String {
    format!("inc_{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// A table of `rows` rows whose `seq` (the cursor) runs backwards from the key, so the cursor
/// order is not the key order.
async fn create<D: Raw>(connector: &SqlConnector<D>, table: &str, rows: i64) {
    D::exec(
        connector,
        &format!(
            "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, seq BIGINT NOT NULL, kind \
             VARCHAR(10) NOT NULL)"
        ),
    )
    .await;
    insert(connector, table, 1..=rows).await;
}

async fn insert<D: Raw>(
    connector: &SqlConnector<D>,
    table: &str,
    ids: std::ops::RangeInclusive<i64>,
) {
    let values: Vec<String> = ids
        .map(|i| {
            let kind = if i % 3 == 0 { "skip" } else { "take" };
            format!("({i}, {}, '{kind}')", 1000 - i)
        })
        .collect();
    D::exec(
        connector,
        &format!(
            "INSERT INTO {table} (id, seq, kind) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
}

fn source<D: Dialect>(
    connector: &SqlConnector<D>,
    table: &str,
    store: &Arc<dyn CursorStore>,
) -> IncrementalSource<D> {
    IncrementalSource::new(
        connector.clone(),
        IncrementalOptions::new(table, "id", ["seq"])
            .with_batch_size(4)
            .with_poll_interval(Duration::from_millis(20)),
        store.clone(),
    )
    .unwrap()
}

fn ids(batch: &[Box<dyn Delivery>]) -> Vec<i64> {
    batch
        .iter()
        .map(|d| d.envelope().body["id"].as_i64().unwrap())
        .collect()
}

async fn ack_all(batch: Vec<Box<dyn Delivery>>) {
    for mut d in batch {
        d.ack().await.unwrap();
    }
}

async fn reads_in_cursor_order_and_commits_in_waves<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 10).await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let first = source(&connector, &table, &store);
    first.open().await.unwrap();
    let key = first.state_key().to_owned();
    assert_eq!(key, format!("{table}:seq,id:key=id:where=-"));

    let mut batch = first.fetch(10).await.unwrap();
    // seq runs backwards: the highest ids come first; at most batch_size (4).
    assert_eq!(ids(&batch), [10, 9, 8, 7]);
    assert_eq!(batch[0].envelope().meta["table"], json!(table));
    // Acks out of order commit nothing until the oldest is acked.
    for d in &mut batch[1..] {
        d.ack().await.unwrap();
    }
    assert_eq!(store.load(&key).await.unwrap(), None);
    batch[0].ack().await.unwrap();
    assert_eq!(store.load(&key).await.unwrap(), Some(json!([993, 7])));

    // Fetch on while the next batch is outstanding; ack 6 and 5 but not 4.
    let mut next = first.fetch(10).await.unwrap();
    assert_eq!(ids(&next), [6, 5, 4, 3]);
    next[0].ack().await.unwrap();
    next[1].ack().await.unwrap();
    next[3].ack().await.unwrap();
    assert_eq!(store.load(&key).await.unwrap(), Some(json!([995, 5])));

    // A restart reads on from the committed cursor: 4 and 3 again (never acked as a prefix),
    // nothing before them, nothing skipped.
    let restarted = source(&connector, &table, &store);
    restarted.open().await.unwrap();
    let again = restarted.fetch(10).await.unwrap();
    assert_eq!(ids(&again), [4, 3, 2, 1]);
    ack_all(again).await;
    assert!(restarted.fetch(10).await.unwrap().is_empty());
    // New rows with a higher cursor are read; older ones inserted late are not (keyset).
    insert(&connector, &table, 11..=12).await;
    assert!(
        restarted.fetch(10).await.unwrap().is_empty(),
        "seq 988, 989 < 999"
    );
    D::exec(
        &connector,
        &format!("INSERT INTO {table} (id, seq, kind) VALUES (20, 2000, 'take')"),
    )
    .await;
    assert_eq!(ids(&restarted.fetch(10).await.unwrap()), [20]);
}

async fn retries_come_first_and_failures_block<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 6).await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let s = source(&connector, &table, &store);
    let mut batch = s.fetch(2).await.unwrap();
    assert_eq!(ids(&batch), [6, 5]);
    batch[0]
        .retry(Some(Duration::from_millis(150)))
        .await
        .unwrap();
    batch[1].ack().await.unwrap();
    // While the retry waits, nothing newer is read.
    assert!(s.fetch(10).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = s.fetch(10).await.unwrap();
    assert_eq!(ids(&again), [6]);
    assert_eq!(again[0].envelope().attempts, 1);
    again[0].ack().await.unwrap();
    assert_eq!(ids(&s.fetch(10).await.unwrap()), [4, 3, 2, 1]);

    let blocked_table = table_name();
    create(&connector, &blocked_table, 3).await;
    let b = source(&connector, &blocked_table, &store);
    let mut batch = b.fetch(1).await.unwrap();
    batch[0]
        .fail(&FailureInfo::from_error(
            FailureKind::Error,
            Stage::Handler,
            &TaskError::new("Broken", "bad row"),
        ))
        .await
        .unwrap();
    let err = match b.fetch(10).await {
        Err(err) => err,
        Ok(got) => panic!("a blocked source fetched {:?}", ids(&got)),
    };
    assert!(
        format!("{err:?}").contains("blocked at a failed cursor row"),
        "{err:?}"
    );
}

/// A row whose ack failed (its cursor could not be saved) and that a later row's ack then
/// committed past is done: a late retry of it is not recorded, so fetching reads on (a retry
/// recorded for it waited for a delivery that never came and held every fetch back).
async fn a_row_committed_past_leaves_no_retry_behind<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 6).await;
    let flaky = Arc::new(onestep_testkit::state::FlakyCursorStore::default());
    let store: Arc<dyn CursorStore> = flaky.clone();
    let s = source(&connector, &table, &store);
    let mut batch = s.fetch(2).await.unwrap();
    assert_eq!(ids(&batch), [6, 5]);
    flaky.set_down(true);
    assert!(batch[0].ack().await.is_err(), "the save failed");
    flaky.set_down(false);
    batch[1].ack().await.unwrap();
    batch[0].retry(None).await.unwrap();
    assert_eq!(ids(&s.fetch(10).await.unwrap()), [4, 3, 2, 1]);
}

async fn where_filters_and_a_sql_store_survives_a_restart<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 9).await;
    let store: Arc<dyn CursorStore> = Arc::new(
        SqlCursorStore::new(
            connector.clone(),
            StateTable::cursor().with_table(format!("{table}_c")),
        )
        .unwrap(),
    );
    let options = || {
        IncrementalOptions::new(&table, "id", ["seq"])
            .with_where("kind = 'take'")
            .with_batch_size(3)
    };
    let s = IncrementalSource::new(connector.clone(), options(), store.clone()).unwrap();
    assert_eq!(
        s.state_key(),
        format!("{table}:seq,id:key=id:where=kind = 'take'")
    );
    let batch = s.fetch(10).await.unwrap();
    assert_eq!(ids(&batch), [8, 7, 5]);
    ack_all(batch).await;
    let restarted = IncrementalSource::new(connector.clone(), options(), store).unwrap();
    assert_eq!(ids(&restarted.fetch(10).await.unwrap()), [4, 2, 1]);
}

async fn a_timestamp_cursor_is_saved_as_the_reference_tags_it<D: Timestamp>(
    connector: SqlConnector<D>,
) {
    let table = table_name();
    D::exec(
        &connector,
        &format!(
            "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, changed_at {} NOT NULL)",
            D::TIMESTAMP
        ),
    )
    .await;
    D::exec(
        &connector,
        &format!(
            "INSERT INTO {table} (id, changed_at) VALUES (1, '2026-01-02 03:04:05.000006'), \
             (2, '2026-01-02 03:04:06'), (3, '2026-01-03 00:00:00')"
        ),
    )
    .await;
    let store: Arc<dyn CursorStore> = Arc::new(InMemoryCursorStore::default());
    let options = || IncrementalOptions::new(&table, "id", ["changed_at"]).with_batch_size(2);
    let s = IncrementalSource::new(connector.clone(), options(), store.clone()).unwrap();
    let batch = s.fetch(10).await.unwrap();
    assert_eq!(ids(&batch), [1, 2]);
    ack_all(batch).await;
    let saved = store.load(s.state_key()).await.unwrap().unwrap();
    assert_eq!(
        saved[0]["__onestep_cursor_type__"],
        json!("datetime"),
        "{saved}"
    );
    assert_eq!(saved[1], json!(2));
    let restarted = IncrementalSource::new(connector, options(), store).unwrap();
    assert_eq!(ids(&restarted.fetch(10).await.unwrap()), [3]);
}

macro_rules! suite {
    ($module:ident, $dialect:ty, $connector:expr) => {
        mod $module {
            use super::*;

            fn connected() -> (SqlConnector<$dialect>, Option<tempfile::TempDir>) {
                $connector
            }

            #[tokio::test]
            async fn cursor_order_and_waves() {
                let (connector, _dir) = connected();
                reads_in_cursor_order_and_commits_in_waves(connector).await;
            }

            #[tokio::test]
            async fn retries_and_failures() {
                let (connector, _dir) = connected();
                retries_come_first_and_failures_block(connector).await;
            }

            #[tokio::test]
            async fn committed_rows_leave_no_retry() {
                let (connector, _dir) = connected();
                a_row_committed_past_leaves_no_retry_behind(connector).await;
            }

            #[tokio::test]
            async fn where_and_sql_store() {
                let (connector, _dir) = connected();
                where_filters_and_a_sql_store_survives_a_restart(connector).await;
            }

            #[tokio::test]
            async fn timestamp_cursor() {
                let (connector, _dir) = connected();
                a_timestamp_cursor_is_saved_as_the_reference_tags_it(connector).await;
            }
        }
    };
}

impl Timestamp for onestep_sql::postgres::Postgres {
    const TIMESTAMP: &'static str = "TIMESTAMP WITH TIME ZONE";
}

impl Timestamp for onestep_sql::mysql::MySql {
    const TIMESTAMP: &'static str = "DATETIME(6)";
}

impl Timestamp for onestep_sql::sqlite::Sqlite {
    const TIMESTAMP: &'static str = "DATETIME";
}

suite!(
    postgres,
    onestep_sql::postgres::Postgres,
    (SqlConnector::new(&support::postgres_url()).unwrap(), None)
);
suite!(
    mysql,
    onestep_sql::mysql::MySql,
    (SqlConnector::new(&support::mysql_url()).unwrap(), None)
);

fn sqlite_connector() -> (
    SqlConnector<onestep_sql::sqlite::Sqlite>,
    Option<tempfile::TempDir>,
) {
    support::sqlite_connected("incremental.db")
}

suite!(sqlite, onestep_sql::sqlite::Sqlite, sqlite_connector());

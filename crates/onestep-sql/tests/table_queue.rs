#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `*_table_queue` on real PostgreSQL, MariaDB and SQLite: claims in key order with the claim
//! values written, ack / retry / fail / release write their columns, concurrent workers never
//! take one row twice, and a worker app drains the table.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use onestep_core::{
    FailureInfo, FailureKind, OneStepApp, Source, Stage, Task, TaskContext, TaskError,
};
use onestep_sql::SqlConnector;
use onestep_sql::table_queue::{TableQueueOptions, TableQueueSource};
use serde_json::{Map, Value, json};

fn table_name() -> String {
    format!("jobs_{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

fn map(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn options(table: &str) -> TableQueueOptions {
    TableQueueOptions::new(table, "id", "status = 'pending'")
        .with_claim(map(json!({"status": "running", "claims": 1})))
        .with_ack(map(json!({"status": "done"})))
        .with_nack(map(json!({"status": "pending"})))
        .with_batch_size(10)
        .with_poll_interval(Duration::from_millis(20))
}

use support::raw::Raw;

async fn create<D: Raw>(connector: &SqlConnector<D>, table: &str, rows: i64) {
    D::exec(
        connector,
        &format!(
            "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(20) NOT NULL, \
             claims INTEGER NOT NULL, note TEXT)"
        ),
    )
    .await;
    let values: Vec<String> = (1..=rows)
        .map(|i| format!("({i}, 'pending', 0, 'row {i}')"))
        .collect();
    D::exec(
        connector,
        &format!(
            "INSERT INTO {table} (id, status, claims, note) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
}

async fn statuses<D: Raw>(connector: &SqlConnector<D>, table: &str) -> Vec<(i64, String)> {
    D::pairs(
        connector,
        &format!("SELECT id, status FROM {table} ORDER BY id"),
    )
    .await
}

async fn claims_ack_retry_fail_and_release<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 6).await;
    let queue = TableQueueSource::new(connector.clone(), options(&table)).unwrap();
    onestep_core::Resource::open(&queue).await.unwrap();
    let mut batch = queue.fetch(5).await.unwrap();
    let ids: Vec<i64> = batch
        .iter()
        .map(|d| d.envelope().body["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let first = batch[0].envelope();
    assert_eq!(first.body["status"], json!("running"), "{}", first.body);
    assert_eq!(first.body["claims"], json!(1));
    assert_eq!(first.body["note"], json!("row 1"));
    assert_eq!(first.meta["table"], json!(table));

    batch[0].ack().await.unwrap();
    batch[1]
        .retry(Some(Duration::from_millis(10)))
        .await
        .unwrap();
    batch[2]
        .fail(&FailureInfo::from_error(
            FailureKind::Error,
            Stage::Handler,
            &TaskError::new("Boom", "boom"),
        ))
        .await
        .unwrap();
    batch[3].release_unstarted().await.unwrap();
    let statuses = statuses(&connector, &table).await;
    assert_eq!(
        statuses,
        [
            (1, "done".into()),
            (2, "pending".into()),
            (3, "pending".into()),
            (4, "pending".into()),
            (5, "running".into()),
            (6, "pending".into()),
        ]
    );
    // The next claim takes the pending rows, 2 first.
    let next = queue.fetch(10).await.unwrap();
    let ids: Vec<i64> = next
        .iter()
        .map(|d| d.envelope().body["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [2, 3, 4, 6]);
}

async fn concurrent_workers_never_share_a_row<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 300).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let workers = (0..4).map(|_| {
        let queue = TableQueueSource::new(connector.clone(), options(&table)).unwrap();
        let seen = seen.clone();
        tokio::spawn(async move {
            loop {
                let batch = queue.fetch(7).await.unwrap();
                if batch.is_empty() {
                    break;
                }
                for mut delivery in batch {
                    seen.lock()
                        .unwrap()
                        .push(delivery.envelope().body["id"].as_i64().unwrap());
                    delivery.ack().await.unwrap();
                }
            }
        })
    });
    for worker in workers {
        worker.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(seen.len(), 300, "each row delivered once");
    assert_eq!(unique.len(), 300);
    assert!(
        statuses(&connector, &table)
            .await
            .iter()
            .all(|(_, s)| s == "done")
    );
}

async fn a_worker_app_drains_the_table<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 40).await;
    // A failed row is parked as `failed` (a nack back to `pending` would put it first in key
    // order again, ahead of every other row, as in the reference).
    let queue = TableQueueSource::new(
        connector.clone(),
        options(&table).with_nack(map(json!({"status": "failed"}))),
    )
    .unwrap();
    let handled = Arc::new(Mutex::new(HashSet::new()));
    let record = handled.clone();
    let handler = move |_ctx: TaskContext, row: Value| {
        let record = record.clone();
        async move {
            let id = row["id"].as_i64().unwrap();
            assert_eq!(
                row["status"],
                json!("running"),
                "the body is the claimed row"
            );
            if id % 2 == 0 {
                return Err(TaskError::new("Rejected", "even rows fail"));
            }
            record.lock().unwrap().insert(id);
            Ok::<_, TaskError>(Value::Null)
        }
    };
    let app = OneStepApp::builder("tq")
        .task(
            Task::new("rows")
                .source(queue)
                .concurrency(4)
                .retry(onestep_core::MaxAttempts::new(1).unwrap())
                .handler(handler),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let finished =
        |statuses: &[(i64, String)]| statuses.iter().all(|(_, s)| s == "done" || s == "failed");
    while !finished(&statuses(&connector, &table).await) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    let statuses = statuses(&connector, &table).await;
    let done = statuses.iter().filter(|(_, s)| s == "done").count();
    let failed = statuses.iter().filter(|(_, s)| s == "failed").count();
    assert_eq!(done, 20, "{statuses:?}");
    assert_eq!(failed, 20, "{statuses:?}");
    assert_eq!(handled.lock().unwrap().len(), 20);
}

async fn bad_options_name_their_field<D: Raw>(connector: SqlConnector<D>) {
    let table = table_name();
    create(&connector, &table, 1).await;
    let cases = [
        (
            options("bad name"),
            "table must be a non-empty SQL identifier",
        ),
        (
            options(&table).with_batch_size(0),
            "batch_size must be >= 1, got 0",
        ),
        (
            TableQueueOptions::new(&table, "id", "  "),
            "where must be a non-empty SQL condition",
        ),
        (
            options(&table).with_claim(map(json!({"st-atus": 1}))),
            "claim.st-atus must be a non-empty SQL identifier",
        ),
    ];
    for (options, expected) in cases {
        let err = TableQueueSource::new(connector.clone(), options).unwrap_err();
        assert!(err.to_string().starts_with(expected), "{err}");
    }
    // Columns are checked against the table when the source opens.
    let missing = TableQueueSource::new(
        connector.clone(),
        options(&table).with_ack(map(json!({"state": "done"}))),
    )
    .unwrap();
    let err = onestep_core::Resource::open(&missing).await.unwrap_err();
    assert!(
        err.to_string().starts_with("ack.state names no column of"),
        "{err}"
    );
    let absent = TableQueueSource::new(connector, options("no_such_table")).unwrap();
    let err = onestep_core::Resource::open(&absent).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("table names no table the connection can see"),
        "{err}"
    );
}

macro_rules! suite {
    ($module:ident, $dialect:ty, $connector:expr) => {
        mod $module {
            use super::*;

            fn connected() -> (SqlConnector<$dialect>, Option<tempfile::TempDir>) {
                $connector
            }

            #[tokio::test]
            async fn claims_ack_retry_fail_release() {
                let (connector, _dir) = connected();
                claims_ack_retry_fail_and_release(connector).await;
            }

            #[tokio::test]
            async fn concurrent_workers() {
                let (connector, _dir) = connected();
                concurrent_workers_never_share_a_row(connector).await;
            }

            #[tokio::test]
            async fn worker_app() {
                let (connector, _dir) = connected();
                a_worker_app_drains_the_table(connector).await;
            }

            #[tokio::test]
            async fn bad_options() {
                let (connector, _dir) = connected();
                bad_options_name_their_field(connector).await;
            }
        }
    };
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
    support::sqlite_connected("queue.db")
}

suite!(sqlite, onestep_sql::sqlite::Sqlite, sqlite_connector());

/// Table queues of dialect `D` over fresh tables, for the connector conformance kit.
struct TableQueues<D: Raw> {
    connector: fn() -> (SqlConnector<D>, Option<tempfile::TempDir>),
    dirs: Mutex<Vec<tempfile::TempDir>>,
}

#[async_trait::async_trait]
impl<D: Raw> onestep_testkit::connector::SourceFactory for TableQueues<D> {
    type Source = TableQueueSource<D>;

    async fn create(&self, messages: usize, consumers: usize) -> Vec<TableQueueSource<D>> {
        let (connector, dir) = (self.connector)();
        self.dirs.lock().unwrap().extend(dir);
        let table = table_name();
        create(&connector, &table, i64::try_from(messages).unwrap()).await;
        (0..consumers)
            .map(|_| {
                TableQueueSource::new(connector.clone(), options(&table).with_batch_size(7))
                    .unwrap()
            })
            .collect()
    }

    fn id(&self, envelope: &onestep_core::Envelope) -> String {
        envelope.body["id"].to_string()
    }
}

mod postgres_conformance {
    use super::*;
    onestep_testkit::connector_conformance!(TableQueues::<onestep_sql::postgres::Postgres> {
        connector: || (SqlConnector::new(&support::postgres_url()).unwrap(), None),
        dirs: Mutex::default(),
    });
}

mod mysql_conformance {
    use super::*;
    onestep_testkit::connector_conformance!(TableQueues::<onestep_sql::mysql::MySql> {
        connector: || (SqlConnector::new(&support::mysql_url()).unwrap(), None),
        dirs: Mutex::default(),
    });
}

mod sqlite_conformance {
    use super::*;
    onestep_testkit::connector_conformance!(TableQueues::<onestep_sql::sqlite::Sqlite> {
        connector: sqlite_connector,
        dirs: Mutex::default(),
    });
}

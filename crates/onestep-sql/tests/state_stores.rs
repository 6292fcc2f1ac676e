#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `SqlStateStore` and `SqlCursorStore` on real PostgreSQL, MariaDB and SQLite: the reference's
//! table, values spelled as Python's `json.dumps` writes them, upserts that race safely, keys
//! and names checked before any I/O.

mod support;

use std::sync::Arc;

use onestep_core::Error;
use onestep_core::state::{CursorStore, StateStore};
use onestep_sql::state::{SqlCursorStore, SqlStateStore, StateTable};
use onestep_sql::{Dialect, SqlConnector};
use serde_json::{Value, json};

fn table_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// Values that must come back exactly as written: integers beyond 64 bits, floats as spelled,
/// key order, non-ASCII text, control characters, nesting.
fn awkward_value() -> Value {
    serde_json::from_str(
        r#"{"z": 100000000000000000000, "a": [1.0, 1e-05, -0.0, 2.5], "text": "é☃\n\u0001", "nested": {"b": null, "a": true}}"#,
    )
    .unwrap()
}

/// The reference's spelling of [`awkward_value`]: `json.dumps(value, ensure_ascii=False)`.
const AWKWARD_TEXT: &str = "{\"z\": 100000000000000000000, \"a\": [1.0, 1e-05, -0.0, 2.5], \"text\": \"é☃\\n\\u0001\", \"nested\": {\"b\": null, \"a\": true}}";

async fn round_trips<D: Dialect>(connector: SqlConnector<D>) -> String {
    let table = table_name("state");
    let store = SqlStateStore::new(connector, StateTable::state().with_table(&table)).unwrap();
    assert_eq!(store.load("missing").await.unwrap(), None);
    store.save("k", awkward_value()).await.unwrap();
    let loaded = store.load("k").await.unwrap().unwrap();
    assert_eq!(
        serde_json::to_string(&loaded).unwrap(),
        serde_json::to_string(&awkward_value()).unwrap()
    );
    store.save("k", json!({"replaced": 1})).await.unwrap();
    assert_eq!(store.load("k").await.unwrap(), Some(json!({"replaced": 1})));
    store.save("k", awkward_value()).await.unwrap();
    store.save("other", json!([1, 2])).await.unwrap();
    store.delete("other").await.unwrap();
    store.delete("other").await.unwrap();
    assert_eq!(store.load("other").await.unwrap(), None);
    table
}

async fn concurrent_first_saves_of_one_key_all_succeed<D: Dialect>(connector: SqlConnector<D>) {
    let table = StateTable::state().with_table(table_name("race"));
    let store = Arc::new(SqlStateStore::new(connector, table).unwrap());
    // Create the table first: the race under test is the upsert's, not the DDL's.
    store.create_table().await.unwrap();
    let saves = (0..16).map(|i| {
        let store = store.clone();
        tokio::spawn(async move { store.save("same", json!(i)).await })
    });
    for save in saves {
        save.await.unwrap().unwrap();
    }
    let last = store.load("same").await.unwrap().unwrap();
    assert!((0..16).any(|i| last == json!(i)), "{last}");
}

async fn bad_keys_and_names_are_refused_before_any_io<D: Dialect>(connector: SqlConnector<D>) {
    let store = SqlStateStore::new(
        connector.clone(),
        StateTable::state().with_table(table_name("keys")),
    )
    .unwrap();
    let long = "k".repeat(256);
    for (key, expected) in [
        (long.as_str(), "key must be at most 255 characters, got 256"),
        ("a\0b", "key must not contain NUL characters"),
    ] {
        let err = store.save(key, json!(1)).await.unwrap_err();
        assert_eq!(err.to_string(), expected);
        let err = store.load(key).await.unwrap_err();
        assert_eq!(err.to_string(), expected);
    }
    assert!(store.save(&"k".repeat(255), json!(1)).await.is_ok());

    let cases = [
        (
            StateTable::state().with_table("bad name"),
            "table must be a non-empty SQL identifier ([A-Za-z_][A-Za-z0-9_]*)",
        ),
        (
            StateTable::state().with_value_column("x;drop"),
            "value_column must be a non-empty SQL identifier ([A-Za-z_][A-Za-z0-9_]*)",
        ),
        (
            StateTable::state().with_updated_at_column("STATE_KEY"),
            "updated_at_column must name another column than key_column (\"STATE_KEY\")",
        ),
        (
            StateTable::state().with_key_column("k".repeat(65)),
            "key_column must be at most ",
        ),
    ];
    for (table, expected) in cases {
        let err = SqlStateStore::new(connector.clone(), table).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(err.to_string().starts_with(expected), "{err}");
    }
}

async fn without_auto_create_a_missing_table_is_a_permanent_connector_error<D: Dialect>(
    connector: SqlConnector<D>,
) {
    let table = StateTable::state()
        .with_table(table_name("absent"))
        .with_auto_create(false);
    let store = SqlStateStore::new(connector, table).unwrap();
    let err = store.load("k").await.unwrap_err();
    let Error::Connector(err) = err else {
        panic!("{err:?}")
    };
    assert!(!err.kind.is_retryable(), "{err}");
    // `create_table` makes it whatever `auto_create` says (what `onestep init-db` calls).
    store.create_table().await.unwrap();
    assert_eq!(store.load("k").await.unwrap(), None);
}

async fn cursors_keep_the_reference_datetime_component<D: Dialect>(connector: SqlConnector<D>) {
    let store = SqlCursorStore::new(
        connector,
        StateTable::cursor().with_table(table_name("cursor")),
    )
    .unwrap();
    let cursor = json!([
        {"__onestep_cursor_type__": "datetime", "value": "2026-01-02T03:04:05.000006+00:00"},
        42
    ]);
    store.save("orders", cursor.clone()).await.unwrap();
    assert_eq!(store.load("orders").await.unwrap(), Some(cursor));
}

macro_rules! suite {
    ($module:ident, $dialect:ty, $connector:expr, $raw:path) => {
        mod $module {
            use super::*;

            /// The connector, and the directory to remove afterwards (SQLite).
            fn connected() -> (SqlConnector<$dialect>, Option<tempfile::TempDir>) {
                $connector
            }

            #[tokio::test]
            async fn values_round_trip_in_python_spelling() {
                let (connector, _dir) = connected();
                let table = round_trips(connector.clone()).await;
                let text = $raw(&connector, &table, "k").await;
                assert_eq!(text, AWKWARD_TEXT);
            }

            #[tokio::test]
            async fn concurrent_first_saves_succeed() {
                let (connector, _dir) = connected();
                concurrent_first_saves_of_one_key_all_succeed(connector).await;
            }

            #[tokio::test]
            async fn bad_input_is_refused() {
                let (connector, _dir) = connected();
                bad_keys_and_names_are_refused_before_any_io(connector).await;
            }

            #[tokio::test]
            async fn missing_table_without_auto_create() {
                let (connector, _dir) = connected();
                without_auto_create_a_missing_table_is_a_permanent_connector_error(connector).await;
            }

            #[tokio::test]
            async fn cursors_round_trip() {
                let (connector, _dir) = connected();
                cursors_keep_the_reference_datetime_component(connector).await;
            }
        }
    };
}

async fn raw_postgres(
    connector: &SqlConnector<onestep_sql::postgres::Postgres>,
    table: &str,
    key: &str,
) -> String {
    let pool = connector.pool().unwrap();
    sqlx::query_scalar(&format!(
        "SELECT state_value FROM \"{table}\" WHERE state_key = $1"
    ))
    .bind(key)
    .fetch_one(&pool)
    .await
    .unwrap()
}

async fn raw_mysql(
    connector: &SqlConnector<onestep_sql::mysql::MySql>,
    table: &str,
    key: &str,
) -> String {
    let pool = connector.pool().unwrap();
    sqlx::query_scalar(&format!(
        "SELECT state_value FROM `{table}` WHERE state_key = ?"
    ))
    .bind(key)
    .fetch_one(&pool)
    .await
    .unwrap()
}

async fn raw_sqlite(
    connector: &SqlConnector<onestep_sql::sqlite::Sqlite>,
    table: &str,
    key: &str,
) -> String {
    let pool = connector.pool().unwrap();
    sqlx::query_scalar(&format!(
        "SELECT state_value FROM \"{table}\" WHERE state_key = ?"
    ))
    .bind(key)
    .fetch_one(&pool)
    .await
    .unwrap()
}

suite!(
    postgres,
    onestep_sql::postgres::Postgres,
    (SqlConnector::new(&support::postgres_url()).unwrap(), None),
    raw_postgres
);
suite!(
    mysql,
    onestep_sql::mysql::MySql,
    (SqlConnector::new(&support::mysql_url()).unwrap(), None),
    raw_mysql
);

fn sqlite_connector() -> (
    SqlConnector<onestep_sql::sqlite::Sqlite>,
    Option<tempfile::TempDir>,
) {
    support::sqlite_connected("state.db")
}

suite!(
    sqlite,
    onestep_sql::sqlite::Sqlite,
    sqlite_connector(),
    raw_sqlite
);

/// Runs one app over `store` that counts `deliveries` messages in `ctx.state()`, until all are
/// handled, then stops it: what one process lifetime of a worker does.
async fn count_in_one_process(store: Arc<dyn StateStore>, deliveries: usize) -> Value {
    use onestep_core::{MemoryQueue, OneStepApp, Sink, Task, TaskContext, TaskError};
    let queue = MemoryQueue::new("ticks", 100).unwrap();
    for i in 0..deliveries {
        queue.publish(json!(i), Default::default()).await.unwrap();
    }
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let handler = move |ctx: TaskContext, _: Value| {
        let done = done_tx.clone();
        async move {
            let state = ctx.state();
            let count = state
                .load("count")
                .await?
                .and_then(|v| v.as_u64())
                .unwrap_or(0);
            state.save("count", json!(count + 1)).await?;
            let _ = done.send(());
            Ok::<_, TaskError>(Value::Null)
        }
    };
    let app = OneStepApp::builder("counter")
        .state(store.clone())
        .task(
            Task::new("tick")
                .source(queue)
                .concurrency(1)
                .handler(handler),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let worker = tokio::spawn(async move { app.serve().await });
    for _ in 0..deliveries {
        tokio::time::timeout(std::time::Duration::from_secs(10), done_rx.recv())
            .await
            .expect("a delivery within 10 s")
            .unwrap();
    }
    handle.request_shutdown();
    worker.await.unwrap().unwrap();
    store.load("counter:tick:count").await.unwrap().unwrap()
}

/// `ctx.state()` over a SQL store outlives the process: a second app over a new store object on
/// the same table (a restarted worker) continues the count, under the reference's key
/// `<app>:<task>:<key>`.
async fn task_state_survives_a_restart<D: Dialect>(connector: SqlConnector<D>) {
    let table = StateTable::state().with_table(table_name("durable"));
    let first: Arc<dyn StateStore> =
        Arc::new(SqlStateStore::new(connector.clone(), table.clone()).unwrap());
    assert_eq!(count_in_one_process(first, 3).await, json!(3));
    let restarted: Arc<dyn StateStore> = Arc::new(SqlStateStore::new(connector, table).unwrap());
    assert_eq!(count_in_one_process(restarted, 2).await, json!(5));
}

#[tokio::test]
async fn postgres_task_state_survives_a_restart() {
    task_state_survives_a_restart(
        SqlConnector::<onestep_sql::postgres::Postgres>::new(&support::postgres_url()).unwrap(),
    )
    .await;
}

#[tokio::test]
async fn sqlite_task_state_survives_a_restart() {
    let (connector, _dir) = sqlite_connector();
    task_state_survives_a_restart(connector).await;
}

#[tokio::test]
async fn mysql_task_state_survives_a_restart() {
    task_state_survives_a_restart(
        SqlConnector::<onestep_sql::mysql::MySql>::new(&support::mysql_url()).unwrap(),
    )
    .await;
}

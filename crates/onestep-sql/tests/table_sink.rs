#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `*_table_sink` on real PostgreSQL, MariaDB and SQLite: insert, upsert and update with the
//! column policies and expressions, lists of rows in one transaction, JSON values as text, and
//! bad rows refused before anything is written.

mod support;

use onestep_core::{Envelope, Resource, Sink};
use onestep_sql::SqlConnector;
use onestep_sql::table_sink::{ColumnPolicy, SinkMode, TableSink, TableSinkOptions};
use serde_json::{Value, json};
use support::raw::Raw;

fn table_name() -> String {
    format!("sink_{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

async fn create<D: Raw>(connector: &SqlConnector<D>) -> String {
    let table = table_name();
    D::exec(
        connector,
        &format!(
            "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(50), score \
             INTEGER, note VARCHAR(50), tags TEXT)"
        ),
    )
    .await;
    table
}

/// Every row as `id|name|score|note|tags` (empty for NULL).
async fn rows<D: Raw>(connector: &SqlConnector<D>, table: &str) -> Vec<String> {
    let mysql = D::NAME == "mysql";
    let score = if mysql {
        "CAST(score AS CHAR)"
    } else {
        "CAST(score AS VARCHAR(10))"
    };
    let parts = [
        "COALESCE(name, '')".to_owned(),
        format!("COALESCE({score}, '')"),
        "COALESCE(note, '')".to_owned(),
        "COALESCE(tags, '')".to_owned(),
    ];
    let joined = if mysql {
        format!("CAST(CONCAT_WS('|', {}) AS CHAR)", parts.join(", "))
    } else {
        parts.join(" || '|' || ")
    };
    D::pairs(
        connector,
        &format!("SELECT id, {joined} FROM {table} ORDER BY id"),
    )
    .await
    .into_iter()
    .map(|(id, rest)| format!("{id}|{rest}"))
    .collect()
}

async fn send<D: Raw>(sink: &TableSink<D>, body: Value) -> onestep_core::Result<()> {
    sink.send(Envelope::new(body)).await
}

async fn insert_upsert_and_update<D: Raw>(connector: SqlConnector<D>) {
    let table = create(&connector).await;
    let insert = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Insert),
    )
    .unwrap();
    insert.open().await.unwrap();
    send(
        &insert,
        json!({"id": 1, "name": "a", "score": 1, "tags": ["x", "é"]}),
    )
    .await
    .unwrap();
    send(
        &insert,
        json!([{"id": 2, "name": "b", "note": "keep"}, {"id": 3, "name": "c"}]),
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&connector, &table).await,
        ["1|a|1||[\"x\", \"é\"]", "2|b||keep|", "3|c|||"]
    );

    let upsert = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Upsert)
            .with_keys(["id"])
            .with_update_columns(vec![
                ("name".into(), ColumnPolicy::Overwrite),
                ("note".into(), ColumnPolicy::SkipNull),
                ("score".into(), ColumnPolicy::Backfill),
            ]),
    )
    .unwrap();
    send(
        &upsert,
        json!([
            {"id": 1, "name": "a2", "score": 50, "note": null},
            {"id": 2, "name": "b2", "score": 7, "note": null},
            {"id": 4, "name": "d", "score": 4}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&connector, &table).await,
        [
            "1|a2|1||[\"x\", \"é\"]", // score kept (backfill), note untouched
            "2|b2|7|keep|",           // score was null: backfilled; note kept (skip_null)
            "3|c|||",
            "4|d|4||"
        ]
    );

    let update = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Update)
            .with_keys(["id"])
            .with_update_expr(vec![("score".into(), "99".into())]),
    )
    .unwrap();
    send(&update, json!({"id": 3, "name": "c2"})).await.unwrap();
    send(&update, json!({"id": 40, "name": "nobody"}))
        .await
        .unwrap();
    assert_eq!(
        rows(&connector, &table).await,
        [
            "1|a2|1||[\"x\", \"é\"]",
            "2|b2|7|keep|",
            "3|c2|99||",
            "4|d|4||"
        ]
    );
}

async fn bad_rows_write_nothing<D: Raw>(connector: SqlConnector<D>) {
    let table = create(&connector).await;
    let insert = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Insert),
    )
    .unwrap();
    let cases = [
        (json!({"id": 1, "nope": 2}), "body.nope names no column of"),
        (
            json!([{"id": 1, "name": "ok"}, {"id": 2, "nope": 2}]),
            "body[1].nope names no column of",
        ),
        (
            json!([{"id": 1}, 5]),
            "body[1] must be a row (a mapping of column: value), got",
        ),
        (
            json!("text"),
            "body must be a row (a mapping of column: value) or a list of rows",
        ),
    ];
    for (body, expected) in cases {
        let err = send(&insert, body).await.unwrap_err();
        assert!(err.to_string().starts_with(expected), "{err}");
    }
    assert!(rows(&connector, &table).await.is_empty(), "nothing written");
    // A failure inside the transaction rolls back the rows before it.
    let err = send(
        &insert,
        json!([{"id": 1, "name": "a"}, {"id": 1, "name": "dup"}]),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, onestep_core::Error::Connector(_)), "{err:?}");
    assert!(rows(&connector, &table).await.is_empty(), "all or nothing");

    let update = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Update).with_keys(["id"]),
    )
    .unwrap();
    let err = send(&update, json!({"name": "x"})).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("body lacks the key column \"id\" (update mode)"),
        "{err}"
    );
    for (options, expected) in [
        (
            TableSinkOptions::new(&table, SinkMode::Upsert),
            "keys are required in upsert mode",
        ),
        (
            TableSinkOptions::new(&table, SinkMode::Insert)
                .with_update_expr(vec![("score".into(), "1".into())]),
            "update_expr only applies to upsert or update mode",
        ),
        (
            TableSinkOptions::new(&table, SinkMode::Update)
                .with_keys(["id"])
                .with_update_columns(Vec::new()),
            "update_columns is empty: update mode then requires update_expr",
        ),
        (
            TableSinkOptions::new("bad name", SinkMode::Insert),
            "table must be a non-empty SQL identifier",
        ),
    ] {
        let err = TableSink::new(connector.clone(), options).unwrap_err();
        assert!(err.to_string().starts_with(expected), "{err}");
    }
    let missing = TableSink::new(
        connector,
        TableSinkOptions::new(&table, SinkMode::Upsert).with_keys(["uid"]),
    )
    .unwrap();
    let err = missing.open().await.unwrap_err();
    assert!(
        err.to_string().starts_with("keys[0] names no column of"),
        "{err}"
    );
}

/// A list body larger than `batch_size`, in several multi-row statements of one transaction;
/// an upsert body repeating a key (the later row wins, as row by row); rows of two shapes.
async fn list_bodies_in_multi_row_statements<D: Raw>(connector: SqlConnector<D>) {
    let table = create(&connector).await;
    let insert = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Insert).with_batch_size(300),
    )
    .unwrap();
    let body: Vec<Value> = (1..=1000)
        .map(|i| {
            if i % 250 == 0 {
                json!({"id": i, "name": format!("n{i}")})
            } else {
                json!({"id": i, "name": format!("n{i}"), "score": i})
            }
        })
        .collect();
    send(&insert, Value::Array(body)).await.unwrap();
    let written = rows(&connector, &table).await;
    assert_eq!(written.len(), 1000);
    assert_eq!(written[0], "1|n1|1||");
    assert_eq!(written[249], "250|n250|||");
    // A failing row anywhere rolls the whole body back, across statements.
    let mut clash: Vec<Value> = (1001..=1700)
        .map(|i| json!({"id": i, "name": "x"}))
        .collect();
    clash.push(json!({"id": 5, "name": "duplicate"}));
    assert!(send(&insert, Value::Array(clash)).await.is_err());
    assert_eq!(rows(&connector, &table).await.len(), 1000);

    let upsert = TableSink::new(
        connector.clone(),
        TableSinkOptions::new(&table, SinkMode::Upsert)
            .with_keys(["id"])
            .with_batch_size(50),
    )
    .unwrap();
    let repeated = json!([
        {"id": 1, "name": "first", "score": 10},
        {"id": 2, "name": "two", "score": 20},
        {"id": 1, "name": "second", "score": 11},
        {"id": 2000, "name": "new", "score": 1},
    ]);
    send(&upsert, repeated).await.unwrap();
    let written = rows(&connector, &table).await;
    assert_eq!(written[0], "1|second|11||");
    assert_eq!(written[1], "2|two|20||");
    assert_eq!(written.last().unwrap(), "2000|new|1||");
}

macro_rules! suite {
    ($module:ident, $dialect:ty, $connector:expr) => {
        mod $module {
            use super::*;

            fn connected() -> (SqlConnector<$dialect>, Option<tempfile::TempDir>) {
                $connector
            }

            #[tokio::test]
            async fn modes_and_policies() {
                let (connector, _dir) = connected();
                insert_upsert_and_update(connector).await;
            }

            #[tokio::test]
            async fn multi_row_statements() {
                let (connector, _dir) = connected();
                list_bodies_in_multi_row_statements(connector).await;
            }

            #[tokio::test]
            async fn bad_rows() {
                let (connector, _dir) = connected();
                bad_rows_write_nothing(connector).await;
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
    support::sqlite_connected("sink.db")
}

suite!(sqlite, onestep_sql::sqlite::Sqlite, sqlite_connector());

/// MySQL/MariaDB: an upsert on keys no unique index covers would insert duplicates there; the
/// sink refuses it when it opens, a plain (non-unique) index on the keys included.
#[tokio::test]
async fn mysql_upsert_keys_need_a_unique_index() {
    let connector = SqlConnector::<onestep_sql::mysql::MySql>::new(&support::mysql_url()).unwrap();
    let table = create(&connector).await;
    let upsert = |keys: &[&str]| {
        TableSink::new(
            connector.clone(),
            TableSinkOptions::new(&table, SinkMode::Upsert).with_keys(keys.iter().copied()),
        )
        .unwrap()
    };
    let err = upsert(&["name"]).open().await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("keys must be the columns of the primary key or of a unique index of")
            && err.to_string().contains("PRIMARY (id)"),
        "{err}"
    );
    assert!(rows(&connector, &table).await.is_empty());
    // A plain index on the keys is no unique index: `ON DUPLICATE KEY UPDATE` ignores it.
    <onestep_sql::mysql::MySql as Raw>::exec(
        &connector,
        &format!("CREATE INDEX ix_{table} ON {table} (name)"),
    )
    .await;
    let err = upsert(&["name"]).open().await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("keys must be the columns of the primary key or of a unique index of"),
        "{err}"
    );
    upsert(&["id"]).open().await.unwrap();
    <onestep_sql::mysql::MySql as Raw>::exec(
        &connector,
        &format!("CREATE UNIQUE INDEX uq_{table} ON {table} (name, note)"),
    )
    .await;
    upsert(&["note", "name"]).open().await.unwrap();
}

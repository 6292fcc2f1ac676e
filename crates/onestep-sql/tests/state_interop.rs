#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! State and cursor stores shared with the real Python reference (`onestep-sql` 0.7.1's
//! `SQLAlchemyStateStore` / `SQLAlchemyCursorStore`) on PostgreSQL, MariaDB and SQLite.
//!
//! Python runs through `tests/python/interop.py` in the reference virtualenv that the test
//! creates when it is missing (see `python_interop.rs`). For each database:
//! 1. Python creates the table and saves awkward values; Rust (with `auto_create = false`) reads
//!    them, saves them again, and Python reads back exactly what it wrote.
//! 2. Rust creates the table and saves; Python (with `auto_create = false`) reads the values.
//! 3. A cursor whose list holds a `datetime` (which the reference tags) survives a Rust save.

mod support;

use std::path::{Path, PathBuf};

use onestep_core::state::{CursorStore, StateStore};
use onestep_sql::state::{SqlCursorStore, SqlStateStore, StateTable};
use onestep_sql::{Dialect, SqlConnector};
use onestep_testkit::reference::PySession;
use serde_json::{Value, json};

fn helper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/interop.py")
}

fn table_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// Values as Python's `json.dumps(value, ensure_ascii=False)` writes them.
const PYTHON_TEXTS: [&str; 5] = [
    r#"{"z": 100000000000000000000, "a": [1.0, 1e-05, -0.0, 2.5, 1e+16], "s": "é☃\n\u0001"}"#,
    r#"[1, [2, [3, {}]], "x", null, true, false]"#,
    r#""just text""#,
    "3.141592653589793",
    r#"{"b": 1, "a": 2, "c": {"y": [], "x": {}}}"#,
];

struct Side<D: Dialect> {
    connector: SqlConnector<D>,
    python_dsn: String,
    backend: &'static str,
}

fn call(session: &mut PySession, command: &str, args: Value) -> Value {
    let (answer, stderr) = session.call(command, &args);
    assert_eq!(
        answer["ok"],
        json!(true),
        "{command} {args}: {answer} {stderr}"
    );
    answer
}

async fn python_values_survive_a_rust_save<D: Dialect>(side: &Side<D>, session: &mut PySession) {
    let table = table_name("pystate");
    let args = |key: &str| json!({"backend": side.backend, "dsn": side.python_dsn, "table": table, "key": key});
    for (i, text) in PYTHON_TEXTS.iter().enumerate() {
        let mut save = args(&format!("k{i}"));
        save["value"] = serde_json::from_str(text).unwrap();
        call(session, "state-save", save);
    }
    let store = SqlStateStore::new(
        side.connector.clone(),
        StateTable::state()
            .with_table(&table)
            .with_auto_create(false),
    )
    .unwrap();
    for (i, text) in PYTHON_TEXTS.iter().enumerate() {
        let key = format!("k{i}");
        let value = store.load(&key).await.unwrap().expect("saved by Python");
        store.save(&key, value).await.unwrap();
        let loaded = call(session, "state-load", args(&key));
        assert_eq!(loaded["text"], json!(text), "{key} on {}", side.backend);
    }
}

async fn rust_tables_and_values_serve_python<D: Dialect>(side: &Side<D>, session: &mut PySession) {
    let table = table_name("rsstate");
    let store = SqlStateStore::new(
        side.connector.clone(),
        StateTable::state()
            .with_table(&table)
            .with_key_column("k")
            .with_value_column("v")
            .with_updated_at_column("at"),
    )
    .unwrap();
    for (i, text) in PYTHON_TEXTS.iter().enumerate() {
        store
            .save(&format!("k{i}"), serde_json::from_str(text).unwrap())
            .await
            .unwrap();
    }
    for (i, text) in PYTHON_TEXTS.iter().enumerate() {
        let loaded = call(
            session,
            "state-load",
            json!({"backend": side.backend, "dsn": side.python_dsn, "table": table,
                   "key_column": "k", "value_column": "v", "updated_at_column": "at",
                   "auto_create": false, "key": format!("k{i}")}),
        );
        assert_eq!(loaded["text"], json!(text), "k{i} on {}", side.backend);
    }
    store.delete("k0").await.unwrap();
    let gone = call(
        session,
        "state-load",
        json!({"backend": side.backend, "dsn": side.python_dsn, "table": table,
               "key_column": "k", "value_column": "v", "updated_at_column": "at",
               "auto_create": false, "key": "k0"}),
    );
    assert_eq!(gone["found"], json!(false));
}

async fn a_python_datetime_cursor_survives_a_rust_save<D: Dialect>(
    side: &Side<D>,
    session: &mut PySession,
) {
    let table = table_name("pycursor");
    let args = json!({"backend": side.backend, "dsn": side.python_dsn, "table": table,
                      "kind": "cursor", "key": "orders"});
    let mut save = args.clone();
    save["value"] = json!([{"datetime": "2026-01-02T03:04:05.000006+00:00"}, 42]);
    save["datetimes"] = json!(true);
    call(session, "state-save", save);
    let store = SqlCursorStore::new(
        side.connector.clone(),
        StateTable::cursor().with_table(&table),
    )
    .unwrap();
    let cursor = store.load("orders").await.unwrap().unwrap();
    assert_eq!(
        cursor,
        json!([{"__onestep_cursor_type__": "datetime", "value": "2026-01-02T03:04:05.000006+00:00"}, 42])
    );
    store.save("orders", cursor).await.unwrap();
    let loaded = call(session, "state-load", args);
    assert_eq!(
        loaded["text"],
        json!(r#"[{"datetime": "2026-01-02T03:04:05.000006+00:00"}, 42]"#)
    );
}

async fn all<D: Dialect>(side: Side<D>) {
    let mut session = PySession::start(&helper_script());
    python_values_survive_a_rust_save(&side, &mut session).await;
    rust_tables_and_values_serve_python(&side, &mut session).await;
    a_python_datetime_cursor_survives_a_rust_save(&side, &mut session).await;
}

fn python_dsn(url: &str, scheme: &str) -> String {
    let (_, rest) = url.split_once("://").expect("a URL");
    format!("{scheme}://{rest}")
}

#[tokio::test]
async fn postgres_state_is_shared_with_python() {
    let url = support::postgres_url();
    all(Side::<onestep_sql::postgres::Postgres> {
        connector: SqlConnector::new(&url).unwrap(),
        python_dsn: python_dsn(&url, "postgresql+psycopg"),
        backend: "postgres",
    })
    .await;
}

#[tokio::test]
async fn mysql_state_is_shared_with_python() {
    let url = support::mysql_url();
    all(Side::<onestep_sql::mysql::MySql> {
        connector: SqlConnector::new(&url).unwrap(),
        python_dsn: python_dsn(&url, "mysql+asyncmy"),
        backend: "mysql",
    })
    .await;
}

#[tokio::test]
async fn sqlite_state_is_shared_with_python() {
    let dir = support::sqlite_dir();
    let path = dir.path().join("shared.db");
    all(Side::<onestep_sql::sqlite::Sqlite> {
        connector: SqlConnector::new(&format!("sqlite://{}?mode=rwc", path.display())).unwrap(),
        python_dsn: format!("sqlite+aiosqlite:///{}", path.display()),
        backend: "sqlite",
    })
    .await;
}

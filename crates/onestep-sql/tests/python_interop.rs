#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! A mixed fleet: the real Python reference (`onestep` 1.15.0 + `onestep-sql` 0.7.1) and this
//! port share one database, on PostgreSQL and on MySQL/MariaDB.
//!
//! Python is driven through `tests/python/interop.py` (one subcommand per call, JSON in, one JSON
//! line out) from the virtualenv `<workspace>/.venv-ref` (or `$ONESTEP_REFERENCE_VENV`), which
//! these tests create and fill from PyPI when it is missing or does not hold the reference
//! (python3 with the `venv` module must be installed: a test fails, never skips, without it). Servers come from `ONESTEP_POSTGRES_URL` /
//! `ONESTEP_MYSQL_URL` or the local defaults, as in the other live tests; every test uses fresh
//! random table names.
//!
//! Scenarios, each on both databases:
//! 1. Python submits, a Rust worker executes (tables opened with `auto_create = false`), Python
//!    reads the results and the error detail.
//! 2. Rust submits, a Python worker executes, Rust reads the results and the error detail.
//! 3. The same idempotency key with the same content from both sides is one execution; different
//!    content (or the same instant in another offset) is a conflict on both sides.
//! 4. List cursors page across sides without duplicates or gaps, and are byte-identical.
//! 5. Tables created by one side are used by the other with `auto_create = false`, and both
//!    sides create the same schema.
//! 6. An execution running on one side's worker is cancelled from the other side.
//!
//! Two more pin fixes found by this suite: the stored error detail carries the reference's
//! `sinks_succeeded` / `sinks_remaining`, and valid but non-canonical scalar tags are re-encoded
//! (and hashed) the way Python writes them.

mod support;

use std::collections::HashSet;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use onestep_core::execution::codec::decode_value;
use onestep_core::execution::{
    Execution, ExecutionBackend, ExecutionClient, ExecutionCompletion, ExecutionError,
    ExecutionSource, ExecutionSourceOptions, ExecutionStatus, LeasedExecutionBackend,
    SubmitOptions,
};
use onestep_core::{AppHandle, OneStepApp, Task, TaskContext, TaskError};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use onestep_testkit::reference::{self, PySession};
use serde_json::{Map, Value, json};
use time::macros::datetime;
use uuid::Uuid;

const NS: &str = "interop";

fn helper_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/interop.py")
}

/// Runs one helper command in its own process; its JSON line and its standard error.
fn run_python(command: &str, args: &Value) -> (Value, String) {
    reference::run_once(&helper_script(), command, args)
}

// ---------------------------------------------------------------------------------------------
// Databases
// ---------------------------------------------------------------------------------------------

/// What differs between the two databases.
trait Db: Dialect {
    /// The helper's `backend` argument.
    const PY_BACKEND: &'static str;
    /// The SQLAlchemy driver of the Python side.
    const PY_SCHEME: &'static str;
    /// The server URL (Rust spelling).
    fn url() -> String;
    /// The table's shape as comparable lines: columns in order, then constraints and indexes.
    async fn table_shape(url: &str, table: &str) -> Vec<String>;
    /// Drops tables (best effort).
    async fn drop_tables(url: &str, tables: &[&str]);
    /// The stored `error` JSON of the one execution of `task`, and of its attempt.
    async fn raw_errors(url: &str, tables: (&str, &str), task: &str) -> (Value, Value);
}

fn parse_stored(text: Option<String>) -> Value {
    text.map_or(Value::Null, |t| {
        serde_json::from_str(&t).expect("stored JSON")
    })
}

/// name, data type, nullable, default, maximum length
type PgColumn = (String, String, String, Option<String>, Option<i32>);

impl Db for onestep_sql::postgres::Postgres {
    const PY_BACKEND: &'static str = "postgres";
    const PY_SCHEME: &'static str = "postgresql+psycopg";

    fn url() -> String {
        support::postgres_url()
    }

    async fn table_shape(url: &str, table: &str) -> Vec<String> {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let columns: Vec<PgColumn> = sqlx::query_as(
            "SELECT column_name::text, data_type::text, is_nullable::text, column_default::text, \
             character_maximum_length::int4 FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(&pool)
        .await
        .unwrap();
        let constraints: Vec<(String, String)> = sqlx::query_as(
            "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint \
             WHERE conrelid = to_regclass($1) ORDER BY conname",
        )
        .bind(table)
        .fetch_all(&pool)
        .await
        .unwrap();
        let indexes: Vec<(String, String)> = sqlx::query_as(
            "SELECT indexname::text, indexdef FROM pg_indexes \
             WHERE schemaname = current_schema() AND tablename = $1 ORDER BY indexname",
        )
        .bind(table)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        columns
            .into_iter()
            .map(|c| format!("column {c:?}"))
            .chain(constraints.into_iter().map(|c| format!("constraint {c:?}")))
            .chain(indexes.into_iter().map(|i| format!("index {i:?}")))
            .collect()
    }

    async fn raw_errors(url: &str, (e, a): (&str, &str), task: &str) -> (Value, Value) {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let (execution, attempt): (Option<String>, Option<String>) = sqlx::query_as(&format!(
            "SELECT e.error::text, a.error::text FROM \"{e}\" e \
             JOIN \"{a}\" a ON a.execution_id = e.id WHERE e.task_name = $1"
        ))
        .bind(task)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        (parse_stored(execution), parse_stored(attempt))
    }

    async fn drop_tables(url: &str, tables: &[&str]) {
        if let Ok(pool) = sqlx::PgPool::connect(url).await {
            for table in tables {
                let _ = sqlx::query(&format!("DROP TABLE IF EXISTS \"{table}\" CASCADE"))
                    .execute(&pool)
                    .await;
            }
            pool.close().await;
        }
    }
}

impl Db for onestep_sql::mysql::MySql {
    const PY_BACKEND: &'static str = "mysql";
    const PY_SCHEME: &'static str = "mysql+asyncmy";

    fn url() -> String {
        support::mysql_url()
    }

    async fn table_shape(url: &str, table: &str) -> Vec<String> {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        let (_, ddl): (String, String) = sqlx::query_as(&format!("SHOW CREATE TABLE `{table}`"))
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        // Columns in order; keys and constraints as a set (their order follows creation order).
        let lines: Vec<String> = ddl
            .lines()
            .map(|l| l.trim().trim_end_matches(',').to_string())
            .collect();
        let (columns, mut rest): (Vec<String>, Vec<String>) =
            lines.into_iter().partition(|l| l.starts_with('`'));
        rest.sort();
        columns.into_iter().chain(rest).collect()
    }

    async fn raw_errors(url: &str, (e, a): (&str, &str), task: &str) -> (Value, Value) {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        let (execution, attempt): (Option<String>, Option<String>) = sqlx::query_as(&format!(
            "SELECT CAST(e.error AS CHAR), CAST(a.error AS CHAR) FROM `{e}` e \
             JOIN `{a}` a ON a.execution_id = e.id WHERE e.task_name = ?"
        ))
        .bind(task)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        (parse_stored(execution), parse_stored(attempt))
    }

    async fn drop_tables(url: &str, tables: &[&str]) {
        if let Ok(pool) = sqlx::MySqlPool::connect(url).await {
            for table in tables {
                let _ = sqlx::query(&format!("DROP TABLE IF EXISTS `{table}`"))
                    .execute(&pool)
                    .await;
            }
            pool.close().await;
        }
    }
}

/// The SQLAlchemy spelling of a server URL: `postgres://…` → `postgresql+psycopg://…`,
/// `mysql://…` → `mysql+asyncmy://…`.
fn sqlalchemy_dsn<D: Db>(url: &str) -> String {
    let (_, rest) = url
        .split_once("://")
        .unwrap_or_else(|| panic!("{url:?} is not a URL"));
    format!("{}://{rest}", D::PY_SCHEME)
}

/// One test's tables, seen from both sides.
struct Case<D: Db> {
    url: String,
    options: BackendOptions,
    session: Arc<Mutex<PySession>>,
    _dialect: PhantomData<D>,
}

impl<D: Db> Case<D> {
    fn new() -> Self {
        Self {
            url: D::url(),
            options: support::live::fresh_options(),
            // Starts importing while the test sets up its Rust side.
            session: Arc::new(Mutex::new(PySession::start(&helper_script()))),
            _dialect: PhantomData,
        }
    }

    /// The store prefix of the table names (`live…`).
    fn store(&self) -> &str {
        self.options
            .table
            .strip_suffix("_executions")
            .expect("fresh_options names tables <store>_executions")
    }

    fn backend(&self, auto_create: bool) -> SqlExecutionBackend<D> {
        let options = self.options.clone().with_auto_create(auto_create);
        SqlExecutionBackend::<D>::new(&self.url, options).unwrap()
    }

    fn client(&self, auto_create: bool) -> ExecutionClient<SqlExecutionBackend<D>> {
        ExecutionClient::new(self.backend(auto_create), NS).unwrap()
    }

    fn py_args(&self, extra: Value) -> Value {
        let mut args = json!({
            "backend": D::PY_BACKEND,
            "dsn": sqlalchemy_dsn::<D>(&self.url),
            "table": self.options.table,
            "attempts_table": self.options.attempts_table,
            "namespace": NS,
        });
        let map = args.as_object_mut().unwrap();
        for (k, v) in extra.as_object().expect("helper args are an object") {
            map.insert(k.clone(), v.clone());
        }
        args
    }

    /// Runs a helper command in its own process, in the background.
    fn py_spawn(&self, command: &str, extra: Value) -> tokio::task::JoinHandle<(Value, String)> {
        let args = self.py_args(extra);
        let command = command.to_string();
        tokio::task::spawn_blocking(move || run_python(&command, &args))
    }

    /// Runs a helper command in the test's session; its output and the session's stderr.
    async fn py_call(&self, command: &str, extra: Value) -> (Value, String) {
        let args = self.py_args(extra);
        let command = command.to_string();
        let session = self.session.clone();
        tokio::task::spawn_blocking(move || session.lock().unwrap().call(&command, &args))
            .await
            .unwrap()
    }

    /// Runs a helper command; its output whether it succeeded or not.
    async fn py(&self, command: &str, extra: Value) -> Value {
        self.py_call(command, extra).await.0
    }

    /// Runs a helper command that must succeed.
    async fn py_ok(&self, command: &str, extra: Value) -> Value {
        let (out, stderr) = self.py_call(command, extra.clone()).await;
        assert_eq!(
            out["ok"], true,
            "Python `{command}` {extra} failed: {out}\nstderr: {stderr}"
        );
        out
    }

    /// Python submits; the helper's whole output (which may be an error).
    async fn py_try_submit(&self, task: &str, payload: Value, extra: Value) -> Value {
        let mut args = json!({"task": task, "payload": payload});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        self.py("submit", args).await
    }

    /// Python submits; the execution as Python returned it.
    async fn py_submit(&self, task: &str, payload: Value, extra: Value) -> Value {
        let out = self.py_try_submit(task, payload, extra).await;
        assert_eq!(out["ok"], true, "Python submit failed: {out}");
        out["execution"].clone()
    }

    async fn cleanup(self) {
        let (e, a) = (&self.options.table, &self.options.attempts_table);
        D::drop_tables(&self.url, &[a, e]).await;
    }
}

fn id_of(execution: &Value) -> Uuid {
    Uuid::parse_str(execution["id"].as_str().expect("an id string")).unwrap()
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn datetime_tag(value: &str) -> Value {
    json!({"$onestep": {"type": "datetime", "value": value, "fold": 0}})
}

/// What both workers store when their handler fails with `ValueError`.
fn handler_value_error() -> Value {
    json!({
        "kind": "error",
        "exception_type": "ValueError",
        "stage": "handler",
        "backend": null,
        "operation": null,
        "connector_kind": null,
    })
}

/// An error detail as the reference reads it (`dataclasses.asdict`): 1.15.0 added
/// `sinks_succeeded` and `sinks_remaining`, null unless a sink failed.
fn python_view(error: Value) -> Value {
    let mut error = object(error);
    for key in ["sinks_succeeded", "sinks_remaining"] {
        error.entry(key).or_insert(Value::Null);
    }
    Value::Object(error)
}

async fn wait_for<B: ExecutionBackend>(
    backend: &B,
    id: Uuid,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Execution) -> bool,
) -> Execution {
    let deadline = Instant::now() + timeout;
    loop {
        let e = backend
            .get(NS, id)
            .await
            .unwrap()
            .expect("the execution exists");
        if pred(&e) {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last state {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The Rust worker
// ---------------------------------------------------------------------------------------------

/// A Rust `OneStepApp` serving one task from an `ExecutionSource`, with the same handler as the
/// Python helper's worker (but `"worker": "rust"`). Records what its handler saw.
struct RustWorker {
    handle: AppHandle,
    serve: tokio::task::JoinHandle<onestep_core::Result<()>>,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl RustWorker {
    fn start<D: Db>(case: &Case<D>, task: &str, auto_create: bool) -> Self {
        let mut options = ExecutionSourceOptions::new(NS, task);
        options.poll_interval = Duration::from_millis(50);
        options.lease_duration = Duration::from_secs(3);
        options.heartbeat_interval = Duration::from_millis(200);
        options.worker_id = "rust-interop-worker".into();
        let source = ExecutionSource::new(case.backend(auto_create), options).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = OneStepApp::builder("rust-interop")
            .task(Task::new(task).source(Arc::new(source)).handler(
                move |ctx: TaskContext, input: Value| {
                    let record = record.clone();
                    async move {
                        record
                            .lock()
                            .unwrap()
                            .push(json!({"meta": ctx.meta(), "input": input}));
                        if let Some(s) = input["sleep_s"].as_f64() {
                            tokio::time::sleep(Duration::from_secs_f64(s)).await;
                        }
                        if input["fail"] == true {
                            return Err(TaskError::new(
                                "ValueError",
                                "rust handler failed on purpose",
                            ));
                        }
                        let n = input["n"].as_i64().expect("an integer n");
                        Ok(json!({
                            "doubled": n * 2,
                            "worker": "rust",
                            "echo": input.get("echo").cloned().unwrap_or(Value::Null),
                        }))
                    }
                },
            ))
            .build()
            .unwrap();
        let handle = app.handle();
        let serve = tokio::spawn(async move { app.serve().await });
        Self {
            handle,
            serve,
            seen,
        }
    }

    async fn stop(self) -> Vec<Value> {
        self.handle.request_shutdown();
        tokio::time::timeout(Duration::from_secs(20), self.serve)
            .await
            .expect("the Rust worker stops within 20 s")
            .expect("the Rust worker does not panic")
            .expect("the Rust worker stops cleanly");
        self.seen.lock().unwrap().clone()
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Python submits, Rust works, Python reads
// ---------------------------------------------------------------------------------------------

async fn python_submits_rust_worker_executes_python_reads<D: Db>() {
    let case = Case::<D>::new();
    let echo = json!({
        "at": datetime_tag("2026-11-05T10:30:00.123456+08:00"),
        "id": {"$onestep": {"type": "uuid", "value": "6f1c1d2e-0a4b-4c5d-9e8f-7a6b5c4d3e2f"}},
        "amount": {"$onestep": {"type": "decimal", "value": "12.50"}},
        "raw": {"$onestep": {"type": "bytes", "value": "aGVsbG8="}},
        "text": "naïve ☕ 😀",
    });
    let metadata = json!({"origin": "python", "trace": {"$onestep": {"type": "uuid", "value": "0b7e9f52-1111-4a8b-9c3d-2e5f6a7b8c9d"}}});
    // Python creates the tables (auto_create defaults to true there).
    let ok = case
        .py_submit(
            "double",
            json!({"n": 21, "echo": echo}),
            json!({"metadata": metadata}),
        )
        .await;
    let bad = case
        .py_submit("double", json!({"n": 1, "fail": true}), json!({}))
        .await;
    assert_eq!(ok["status"], "queued");

    let worker = RustWorker::start(&case, "double", false);
    let watcher = case.backend(false);
    for id in [id_of(&ok), id_of(&bad)] {
        wait_for(
            &watcher,
            id,
            "a terminal status",
            Duration::from_secs(20),
            Execution::is_terminal,
        )
        .await;
    }
    let seen = worker.stop().await;

    // The Rust handler got the payload in the Rust view (tags verbatim) and the metadata.
    let first = seen
        .iter()
        .find(|s| s["input"]["n"] == 21)
        .expect("the Rust handler ran the Python submission");
    assert_eq!(first["input"]["echo"], echo);
    assert_eq!(first["meta"]["origin"], "python");
    assert_eq!(first["meta"]["trace"], metadata["trace"]);
    assert_eq!(
        first["meta"]["onestep.execution"]["id"], ok["id"],
        "the execution id in the worker metadata"
    );

    // Python reads the Rust worker's result and error.
    let result = case.py_ok("result", json!({"id": ok["id"]})).await;
    assert_eq!(
        result["result"],
        json!({"doubled": 42, "worker": "rust", "echo": echo})
    );
    let done = &case.py_ok("get", json!({"id": ok["id"]})).await["execution"];
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["version"], 2);
    assert_eq!(done["error"], Value::Null);
    assert!(done["started_at"].is_string() && done["finished_at"].is_string());

    let failed = case.py("result", json!({"id": bad["id"]})).await;
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["error"], "ExecutionFailed", "{failed}");
    assert_eq!(failed["execution"]["status"], "failed");
    assert_eq!(
        failed["execution"]["error"],
        python_view(handler_value_error())
    );
    case.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 2. Rust submits, Python works, Rust reads
// ---------------------------------------------------------------------------------------------

async fn rust_submits_python_worker_executes_rust_reads<D: Db>() {
    let case = Case::<D>::new();
    let client = case.client(true);
    let echo = datetime_tag("2026-11-05T10:30:00.123456+08:00");
    let metadata = object(json!({"origin": "rust"}));
    let ok = client
        .submit(
            "double",
            &json!({"n": 21, "echo": echo}),
            SubmitOptions::default().metadata(metadata),
        )
        .await
        .unwrap();
    let unicode = client
        .submit(
            "double",
            &json!({"n": 2, "echo": "ünïcödé ☕ 😀"}),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let bad = client
        .submit(
            "double",
            &json!({"n": 3, "fail": true}),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let ids = [ok.id, unicode.id, bad.id];

    let work = case
        .py_ok(
            "work",
            json!({"task": "double", "ids": ids.map(|id| id.to_string()), "timeout_s": 20}),
        )
        .await;
    assert_eq!(work["timed_out"], false, "{work}");
    let handled: HashSet<&str> = work["handled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(handled.len(), 3, "the Python worker ran all three: {work}");

    assert_eq!(
        client.result::<Value>(ok.id).await.unwrap(),
        json!({"doubled": 42, "worker": "python", "echo": echo})
    );
    assert_eq!(
        client.result::<Value>(unicode.id).await.unwrap(),
        json!({"doubled": 4, "worker": "python", "echo": "ünïcödé ☕ 😀"})
    );
    let done = client.get(ok.id).await.unwrap().unwrap();
    assert_eq!((done.attempts, done.version), (1, 2));
    assert!(done.started_at.is_some() && done.finished_at.is_some());
    match client.result::<Value>(bad.id).await {
        Err(ExecutionError::Failed(e)) => {
            let error = e.error.unwrap();
            assert_eq!(
                (error.kind.as_str(), error.exception_type.as_str()),
                ("error", "ValueError")
            );
            assert_eq!(error.stage.as_deref(), Some("handler"));
            assert_eq!(
                (&error.backend, &error.operation, &error.connector_kind),
                (&None, &None, &None)
            );
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    case.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 3. Idempotency across sides
// ---------------------------------------------------------------------------------------------

/// A payload whose digest depends on Python's float repr, key order and ASCII escaping.
fn idempotent_payload(n: i64) -> Value {
    json!({
        "n": n,
        "price": 12.5,
        "whole": 12.0,
        "ratio": 0.30000000000000004,
        "tiny": 1e-7,
        "big": 1e22,
        "negative_zero": -0.0,
        "max_u64": u64::MAX,
        "min_i64": i64::MIN,
        "name": "café ☕ 日本 😀",
        "ключ": "значение",
        "Zebra": [1, 2.5, "x", null, true],
        "when": datetime_tag("2026-11-05T10:30:00.123456+08:00"),
    })
}

fn idempotent_metadata() -> Value {
    json!({"origin": "interop", "émoji": "😀", "labels": ["a", "b"]})
}

const EXPIRES_AT: &str = "2031-02-03T04:05:06.789+08:00";

fn rust_idempotent_options(key: &str) -> SubmitOptions {
    SubmitOptions::default()
        .idempotency_key(key)
        .metadata(object(idempotent_metadata()))
        .delay_secs(30.0)
        .expires_at(datetime!(2031-02-03 04:05:06.789 +08:00))
}

fn python_idempotent_args(key: &str, expires_at: &str) -> Value {
    // delay_s 30 (an int) hashes as 30.0, like Rust's f64.
    json!({"idempotency_key": key, "metadata": idempotent_metadata(), "delay_s": 30, "expires_at": expires_at})
}

async fn idempotency_keys_are_shared<D: Db>() {
    let case = Case::<D>::new();
    let client = case.client(true);
    client.open().await.unwrap();

    // Python first, then Rust.
    let from_python = case
        .py_submit(
            "idem",
            idempotent_payload(1),
            python_idempotent_args("python-first", EXPIRES_AT),
        )
        .await;
    let from_rust = client
        .submit(
            "idem",
            &idempotent_payload(1),
            rust_idempotent_options("python-first"),
        )
        .await
        .unwrap();
    assert_eq!(
        from_rust.id,
        id_of(&from_python),
        "Rust resubmitting Python's submission gets Python's execution"
    );
    // As Python reads it back: PostgreSQL's jsonb turns the float 1e22 into an integer and -0.0
    // into 0.0 for both sides.
    assert_eq!(
        from_rust.payload,
        decode_value(&from_python["payload"]).unwrap()
    );
    assert_eq!(
        from_rust.expires_at,
        Some(datetime!(2031-02-03 04:05:06.789 +08:00))
    );
    assert_eq!(
        from_rust.available_at - from_rust.created_at,
        time::Duration::seconds(30),
        "Python's delay as Rust reads it"
    );

    // Rust first, then Python.
    let first = client
        .submit(
            "idem",
            &idempotent_payload(2),
            rust_idempotent_options("rust-first"),
        )
        .await
        .unwrap();
    let again = case
        .py_submit(
            "idem",
            idempotent_payload(2),
            python_idempotent_args("rust-first", EXPIRES_AT),
        )
        .await;
    assert_eq!(
        id_of(&again),
        first.id,
        "Python resubmitting Rust's submission gets Rust's execution"
    );
    // Both sides read what the database stored (jsonb turns the float 1e22 into an integer).
    let stored = client.get(first.id).await.unwrap().unwrap();
    assert_eq!(decode_value(&again["payload"]).unwrap(), stored.payload);
    assert_eq!(
        decode_value(&again["metadata"]).unwrap(),
        Value::Object(stored.metadata.clone())
    );
    assert_eq!(again["expires_at"], "2031-02-02T20:05:06.789000+00:00");
    let at = |field: &str| {
        time::OffsetDateTime::parse(
            again[field].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert_eq!(
        at("available_at") - at("created_at"),
        time::Duration::seconds(30),
        "Rust's delay as Python reads it"
    );

    // Different content is a conflict on either side.
    match client
        .submit(
            "idem",
            &idempotent_payload(99),
            rust_idempotent_options("python-first"),
        )
        .await
    {
        Err(ExecutionError::Conflict(_)) => {}
        other => panic!("expected Conflict for a different payload, got {other:?}"),
    }
    let conflict = case
        .py_try_submit(
            "idem",
            idempotent_payload(99),
            python_idempotent_args("rust-first", EXPIRES_AT),
        )
        .await;
    assert_eq!(conflict["error"], "ExecutionConflict", "{conflict}");

    // The same instant in another offset is a different submission (the digest hashes the
    // offset), on either side.
    let utc = rust_idempotent_options("python-first");
    let mut utc = utc;
    utc.expires_at = utc.expires_at.map(|t| t.to_offset(time::UtcOffset::UTC));
    match client.submit("idem", &idempotent_payload(1), utc).await {
        Err(ExecutionError::Conflict(_)) => {}
        other => panic!("expected Conflict for another offset, got {other:?}"),
    }
    let conflict = case
        .py_try_submit(
            "idem",
            idempotent_payload(2),
            python_idempotent_args("rust-first", "2031-02-02T20:05:06.789+00:00"),
        )
        .await;
    assert_eq!(conflict["error"], "ExecutionConflict", "{conflict}");

    let page = client.list(None, None, 50, None).await.unwrap();
    assert_eq!(page.items.len(), 2, "one execution per key");
    case.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 4. Cursors across sides
// ---------------------------------------------------------------------------------------------

fn ids_of(page: &Value) -> Vec<Uuid> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(id_of)
        .collect()
}

async fn list_cursors_page_across_sides<D: Db>() {
    let case = Case::<D>::new();
    let client = case.client(true);
    // Five executions from both sides, all in one namespace and task.
    let mut submitted = Vec::new();
    for n in 0..3 {
        let e = client
            .submit(
                "page",
                &json!({"n": n}),
                SubmitOptions::default().delay(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        submitted.push(e.id);
    }
    for n in 3..5 {
        submitted.push(id_of(
            &case
                .py_submit("page", json!({"n": n}), json!({"delay_s": 60}))
                .await,
        ));
    }
    let everything: Vec<Uuid> = client
        .list(Some("page"), None, 50, None)
        .await
        .unwrap()
        .items
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(
        everything.iter().collect::<HashSet<_>>(),
        submitted.iter().collect::<HashSet<_>>()
    );

    // Python page 1 → Rust page 2 with Python's cursor → Python page 3 with Rust's cursor.
    let p1 = case
        .py_ok("list", json!({"task": "page", "limit": 2}))
        .await;
    let c1 = p1["next_cursor"]
        .as_str()
        .expect("a cursor after page 1")
        .to_string();
    let p2 = client.list(Some("page"), None, 2, Some(&c1)).await.unwrap();
    let c2 = p2.next_cursor.clone().expect("a cursor after page 2");
    let p3 = case
        .py_ok("list", json!({"task": "page", "limit": 2, "cursor": c2}))
        .await;
    assert_eq!(p3["next_cursor"], Value::Null, "page 3 is the last");

    let mut paged = ids_of(&p1);
    paged.extend(p2.items.iter().map(|e| e.id));
    paged.extend(ids_of(&p3));
    assert_eq!(
        paged, everything,
        "three mixed pages are the full list, in order"
    );

    // The cursors themselves are byte-identical on both sides.
    let rust_p1 = client.list(Some("page"), None, 2, None).await.unwrap();
    assert_eq!(rust_p1.next_cursor.as_deref(), Some(c1.as_str()));
    let python_p2 = case
        .py_ok("list", json!({"task": "page", "limit": 2, "cursor": c1}))
        .await;
    assert_eq!(python_p2["next_cursor"], json!(c2));
    assert_eq!(
        ids_of(&python_p2),
        p2.items.iter().map(|e| e.id).collect::<Vec<_>>()
    );
    case.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 5. Tables created by either side
// ---------------------------------------------------------------------------------------------

async fn tables_created_by_either_side_are_accepted<D: Db>() {
    // Python creates, Rust uses with auto_create = false.
    let by_python = Case::<D>::new();
    by_python.py_ok("create-tables", json!({})).await;
    let backend = by_python.backend(false);
    backend.open().await.unwrap();
    let client = ExecutionClient::new(backend.clone(), NS).unwrap();
    let e = client
        .submit("tables", &json!({"n": 1}), SubmitOptions::default())
        .await
        .unwrap();
    let lease = backend
        .claim(
            NS,
            &["tables".to_string()],
            1,
            Duration::from_secs(30),
            "rust-claimer",
        )
        .await
        .unwrap()
        .pop()
        .expect("Rust claims from Python's tables");
    assert_eq!(lease.execution.id, e.id);
    let result = json!({"from": "rust", "at": datetime_tag("2026-01-01T00:00:00+00:00")});
    let done = backend
        .complete(
            e.id,
            lease.attempt_id,
            lease.lease_token,
            ExecutionCompletion::Succeeded {
                result: result.clone(),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let read = by_python
        .py_ok("result", json!({"id": e.id.to_string()}))
        .await;
    assert_eq!(read["result"], result);

    // Rust creates, Python uses with auto_create = False (client and worker).
    let by_rust = Case::<D>::new();
    let backend = by_rust.backend(true);
    backend.open().await.unwrap();
    let submitted = by_rust
        .py_submit("tables", json!({"n": 4}), json!({"auto_create": false}))
        .await;
    let work = by_rust
        .py_ok(
            "work",
            json!({"task": "tables", "ids": [submitted["id"]], "auto_create": false}),
        )
        .await;
    assert_eq!(
        work["statuses"][submitted["id"].as_str().unwrap()],
        "succeeded",
        "{work}"
    );
    let client = ExecutionClient::new(backend, NS).unwrap();
    assert_eq!(
        client.result::<Value>(id_of(&submitted)).await.unwrap(),
        json!({"doubled": 8, "worker": "python", "echo": null})
    );

    // Both sides create the same schema (names normalized to the store prefix).
    for (p, r) in [
        (&by_python.options.table, &by_rust.options.table),
        (
            &by_python.options.attempts_table,
            &by_rust.options.attempts_table,
        ),
    ] {
        let normalize = |lines: Vec<String>, store: &str| -> Vec<String> {
            lines
                .into_iter()
                .map(|l| l.replace(store, "STORE"))
                .collect()
        };
        let python_shape = normalize(D::table_shape(&by_python.url, p).await, by_python.store());
        let rust_shape = normalize(D::table_shape(&by_rust.url, r).await, by_rust.store());
        // Our additions: the nullable progress column (every dialect), and on MySQL/MariaDB
        // the generated claim column and its two indexes (additive, ignored by the reference;
        // docs/compatibility.md). Nothing else may differ.
        let (progress, rust_shape): (Vec<String>, Vec<String>) = rust_shape
            .into_iter()
            .partition(|l| l.contains(onestep_sql::PROGRESS_COLUMN));
        if p == &by_python.options.table {
            assert_eq!(progress.len(), 1, "the progress column: {progress:#?}");
            assert!(
                !progress[0].to_lowercase().contains("not null"),
                "the progress column is nullable: {}",
                progress[0]
            );
        } else {
            assert!(progress.is_empty(), "{progress:#?}");
        }
        let (additive, rust_shape): (Vec<String>, Vec<String>) = rust_shape
            .into_iter()
            .partition(|l| l.contains("onestep_claim_task"));
        assert!(
            additive.is_empty()
                || (additive.len() == 3
                    && additive.iter().any(|l| l.contains("GENERATED ALWAYS"))
                    && additive.iter().any(|l| l.contains("_claimable`"))
                    && additive.iter().any(|l| l.contains("_expirable`"))),
            "unexpected additive schema: {additive:#?}"
        );
        let only_python: Vec<_> = python_shape
            .iter()
            .filter(|l| !rust_shape.contains(l))
            .collect();
        let only_rust: Vec<_> = rust_shape
            .iter()
            .filter(|l| !python_shape.contains(l))
            .collect();
        assert!(
            python_shape == rust_shape,
            "{p} (Python) and {r} (Rust) differ:\nonly Python: {only_python:#?}\nonly Rust: \
             {only_rust:#?}\nPython: {python_shape:#?}\nRust: {rust_shape:#?}"
        );
    }
    by_python.cleanup().await;
    by_rust.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 6. Cancelling a running execution from the other side
// ---------------------------------------------------------------------------------------------

async fn rust_cancels_an_execution_running_on_a_python_worker<D: Db>() {
    let case = Case::<D>::new();
    let submitted = case
        .py_submit("slow", json!({"n": 1, "sleep_s": 60}), json!({}))
        .await;
    let id = id_of(&submitted);
    let worker = case.py_spawn(
        "work",
        json!({"task": "slow", "ids": [id.to_string()], "timeout_s": 30,
               "lease_duration_s": 3.0, "heartbeat_interval_s": 0.2}),
    );
    let client = case.client(false);
    wait_for(
        client.backend(),
        id,
        "the Python worker to start it",
        Duration::from_secs(20),
        |e| e.status == ExecutionStatus::Running,
    )
    .await;
    let requested = client
        .cancel(id, Some("cancelled from rust"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(requested.status, ExecutionStatus::CancelRequested);
    let (work, stderr) = worker.await.unwrap();
    assert_eq!(work["ok"], true, "{work}\n{stderr}");
    assert_eq!(work["statuses"][id.to_string()], "cancelled", "{work}");
    match client.result::<Value>(id).await {
        Err(ExecutionError::Cancelled(e)) => assert!(e.cancel_requested_at.is_some()),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    let read = case.py("result", json!({"id": id.to_string()})).await;
    assert_eq!(read["error"], "ExecutionCancelled", "{read}");
    case.cleanup().await;
}

async fn python_cancels_an_execution_running_on_a_rust_worker<D: Db>() {
    let case = Case::<D>::new();
    let client = case.client(true);
    let e = client
        .submit(
            "slow",
            &json!({"n": 1, "sleep_s": 60}),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let worker = RustWorker::start(&case, "slow", false);
    wait_for(
        client.backend(),
        e.id,
        "the Rust worker to start it",
        Duration::from_secs(20),
        |e| e.status == ExecutionStatus::Running,
    )
    .await;
    let requested = case
        .py_ok(
            "cancel",
            json!({"id": e.id.to_string(), "reason": "cancelled from python"}),
        )
        .await;
    assert_eq!(requested["execution"]["status"], "cancel_requested");
    let done = wait_for(
        client.backend(),
        e.id,
        "the Rust worker to stop it",
        Duration::from_secs(20),
        Execution::is_terminal,
    )
    .await;
    worker.stop().await;
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    let read = case.py("result", json!({"id": e.id.to_string()})).await;
    assert_eq!(read["error"], "ExecutionCancelled", "{read}");
    case.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// 7. The stored error detail
// ---------------------------------------------------------------------------------------------

async fn error_details_are_stored_and_read_like_the_reference<D: Db>() {
    let case = Case::<D>::new();
    let client = case.client(true);
    let tables = (
        case.options.table.as_str(),
        case.options.attempts_table.as_str(),
    );
    // A handler failure, once from each worker.
    let on_rust = client
        .submit(
            "fail-rust",
            &json!({"n": 1, "fail": true}),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let on_python = client
        .submit(
            "fail-python",
            &json!({"n": 1, "fail": true}),
            SubmitOptions::default(),
        )
        .await
        .unwrap();
    let worker = RustWorker::start(&case, "fail-rust", false);
    wait_for(
        client.backend(),
        on_rust.id,
        "the Rust worker",
        Duration::from_secs(20),
        Execution::is_terminal,
    )
    .await;
    worker.stop().await;
    let work = case
        .py_ok(
            "work",
            json!({"task": "fail-python", "ids": [on_python.id.to_string()]}),
        )
        .await;
    assert_eq!(
        work["statuses"][on_python.id.to_string()],
        "failed",
        "{work}"
    );
    let python = D::raw_errors(&case.url, tables, "fail-python").await;
    let rust = D::raw_errors(&case.url, tables, "fail-rust").await;
    assert_eq!(
        python.0,
        python_view(handler_value_error()),
        "what the reference stores"
    );
    let mut gaps = Vec::new();
    if rust != python {
        gaps.push(format!(
            "the Rust worker stores (execution, attempt) errors {rust:?}; the reference stores \
             {python:?}"
        ));
    }

    // A sink-stage failure recorded by the reference keeps its sink window when Rust reads it.
    client
        .submit("sink-python", &json!({"n": 1}), SubmitOptions::default())
        .await
        .unwrap();
    let error = json!({
        "kind": "error", "exception_type": "SinkError", "stage": "sink",
        "sinks_succeeded": "audit", "sinks_remaining": "mail,webhook",
    });
    let failed = case
        .py_ok(
            "complete",
            json!({"task": "sink-python", "status": "failed", "error": error}),
        )
        .await;
    let read = client
        .get(id_of(&failed["execution"]))
        .await
        .unwrap()
        .unwrap();
    let stored = D::raw_errors(&case.url, tables, "sink-python").await.0;
    let seen = serde_json::to_value(read.error.unwrap()).unwrap();
    if seen != stored {
        gaps.push(format!(
            "Rust reads the reference's stored error {stored:?} as {seen:?}"
        ));
    }
    assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    case.cleanup().await;
}

/// Scalar tags Python accepts but writes differently: the same value submitted from Python
/// (where it is a `UUID`, `datetime` or `Decimal` object) must hash the same.
async fn non_canonical_scalar_tags_hash_like_the_reference<D: Db>() {
    let case = Case::<D>::new();
    let client = case.client(true);
    let mut gaps = Vec::new();
    for (i, (tag, canonical)) in [
        (
            json!({"$onestep": {"type": "uuid", "value": "6F1C1D2E-0A4B-4C5D-9E8F-7A6B5C4D3E2F"}}),
            json!({"$onestep": {"type": "uuid", "value": "6f1c1d2e-0a4b-4c5d-9e8f-7a6b5c4d3e2f"}}),
        ),
        (
            datetime_tag("2026-11-05 10:30:00.000+08:00"),
            datetime_tag("2026-11-05T10:30:00+08:00"),
        ),
        (
            json!({"$onestep": {"type": "decimal", "value": "1e2"}}),
            json!({"$onestep": {"type": "decimal", "value": "1E+2"}}),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("tag-{i}");
        let rust = client
            .submit(
                "tags",
                &json!({"v": tag}),
                SubmitOptions::default().idempotency_key(&key),
            )
            .await
            .unwrap();
        let python = case
            .py_try_submit("tags", json!({"v": tag}), json!({"idempotency_key": key}))
            .await;
        if python["ok"] != true || id_of(&python["execution"]) != rust.id {
            gaps.push(format!(
                "{tag}: Rust stored {} (Python stores {canonical}); Python's resubmission: {}",
                rust.payload["v"], python
            ));
        }
    }
    assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    case.cleanup().await;
}

// ---------------------------------------------------------------------------------------------
// The tests, per database
// ---------------------------------------------------------------------------------------------

macro_rules! interop_tests {
    ($module:ident, $dialect:ty) => {
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn python_submits_rust_worker_executes_python_reads() {
                super::python_submits_rust_worker_executes_python_reads::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rust_submits_python_worker_executes_rust_reads() {
                super::rust_submits_python_worker_executes_rust_reads::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn idempotency_keys_are_shared() {
                super::idempotency_keys_are_shared::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn list_cursors_page_across_sides() {
                super::list_cursors_page_across_sides::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tables_created_by_either_side_are_accepted() {
                super::tables_created_by_either_side_are_accepted::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rust_cancels_an_execution_running_on_a_python_worker() {
                super::rust_cancels_an_execution_running_on_a_python_worker::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn python_cancels_an_execution_running_on_a_rust_worker() {
                super::python_cancels_an_execution_running_on_a_rust_worker::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn error_details_are_stored_and_read_like_the_reference() {
                super::error_details_are_stored_and_read_like_the_reference::<$dialect>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn non_canonical_scalar_tags_hash_like_the_reference() {
                super::non_canonical_scalar_tags_hash_like_the_reference::<$dialect>().await;
            }
        }
    };
}

interop_tests!(postgres, onestep_sql::postgres::Postgres);
interop_tests!(mariadb, onestep_sql::mysql::MySql);

//! The PostgreSQL seed document's worker, unchanged: its YAML (`tests/python/seed/worker.yaml`)
//! and its Python handler module (`app/handlers.py`) pass `onestep check --strict` and run on
//! `onestep run`, draining executions the reference's Python `ExecutionClient` submitted, and
//! the Python API reads the results back. The worker's Python is the interpreter on PATH, with
//! no onestep package installed; the API is the reference virtualenv.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use onestep_testkit::reference::run_once;
use serde_json::{Value, json};
use sqlx::Connection;

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/seed")
}

fn postgres_url() -> String {
    std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A database of its own, dropped at the end: the seed's YAML names fixed tables.
struct Database {
    name: String,
}

impl Database {
    async fn create() -> Self {
        let name = format!("seed_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut admin = sqlx::PgConnection::connect(&postgres_url()).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        Self { name }
    }

    /// The DSN as the seed writes it (an SQLAlchemy URL), for both sides.
    fn dsn(&self) -> String {
        let url = postgres_url();
        let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
        format!(
            "{}/{}",
            base.replacen("postgres://", "postgresql+psycopg://", 1),
            self.name
        )
    }

    async fn drop_it(self) {
        let mut admin = sqlx::PgConnection::connect(&postgres_url()).await.unwrap();
        let _ = sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut admin)
        .await;
    }
}

fn api(command: &str, args: Value) -> Value {
    let (out, stderr) = run_once(&seed_dir().join("api.py"), command, &args);
    assert!(out.is_object(), "api.py {command}: {out}\n{stderr}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seed_worker_yaml_and_its_python_handler_run_unchanged() {
    let db = Database::create().await;
    let dsn = db.dsn();
    api("create_tables", json!({"dsn": dsn}));
    let ids = api("submit", json!({"dsn": dsn, "count": 12}))["ids"].clone();

    let onestep = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_onestep"));
        c.args(args)
            .current_dir(seed_dir())
            .env("POSTGRES_EXECUTION_DSN", &dsn)
            .env("HOSTNAME", "seed-worker-1")
            .env_remove("ONESTEP_PYTHON");
        c
    };
    let check = onestep(&["check", "--strict", "worker.yaml"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout).to_string();
    assert_eq!(
        check.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(said.contains("app.handlers:run_agent (python)"), "{said}");

    let mut worker = onestep(&["run", "worker.yaml"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let read = api("wait", json!({"dsn": dsn, "ids": ids, "timeout_s": 60}));
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || worker.wait())
        .await
        .unwrap()
        .unwrap();
    db.drop_it().await;

    let executions = read["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 12);
    for (i, e) in executions.iter().enumerate() {
        assert_eq!(e["status"], "succeeded", "{e}");
        assert_eq!(e["attempts"], 1, "{e}");
        assert_eq!(
            e["result"],
            json!({
                "execution_id": e["id"],
                "output": {"document_id": format!("doc-{i}"), "summary": "..."}
            })
        );
    }
    assert_eq!(
        status.code(),
        Some(0),
        "the worker stops cleanly on SIGTERM"
    );
}

#[test]
fn check_reports_a_python_import_error_at_the_handler_line() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("worker.yaml");
    std::fs::write(
        dir.path().join("jobs.py"),
        "import not_installed_anywhere\n",
    )
    .unwrap();
    std::fs::write(
        &yaml,
        "apiVersion: onestep/v1alpha1\nkind: App\napp: {name: w}\nresources:\n  q: {type: memory, maxsize: 1}\ntasks:\n  - name: t\n    source: q\n    handler:\n      ref: jobs:run\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["check", "--strict", yaml.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("worker.yaml:10:7: tasks[0].handler.ref"),
        "{err}"
    );
    assert!(err.contains("ModuleNotFoundError"), "{err}");

    let run = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", yaml.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr).to_string();
    assert_ne!(run.status.code(), Some(0), "{err}");
    assert!(err.contains("ModuleNotFoundError"), "{err}");
}

#[test]
fn a_ref_that_is_neither_rust_nor_python_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("worker.yaml");
    std::fs::write(
        &yaml,
        "apiVersion: onestep/v1alpha1\nkind: App\napp: {name: w}\nresources:\n  q: {type: memory, maxsize: 1}\ntasks:\n  - name: t\n    source: q\n    handler: not a ref\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["check", yaml.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("nor a Python ref 'package.module:attr'"),
        "{err}"
    );
}

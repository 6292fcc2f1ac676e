//! A Python API and Rust processes on one database lose nothing, checked with many generated
//! values (hypothesis, seeded and bounded) on PostgreSQL and on MariaDB:
//!
//! 1. The reference's client submits 600 payloads and metadata holding every tag of its codec
//!    (`datetime`, `uuid`, `bytes`, `decimal`, `tuple`, `set`, `frozenset`, `namedtuple`, `enum`,
//!    `mapping`) and integers beyond 64 bits, nested; a Rust worker (`onestep run` with the
//!    built-in `onestep:echo`) returns each payload; the reference reads every result back equal
//!    to the payload as it reads it, with the same types all the way down (a tuple is no list, a
//!    set no frozenset, `1` no `1.0`, dict keys in the same order).
//! 2. A Rust client that reads those executions and submits their payload and metadata again
//!    under the same idempotency keys gets the same executions: the digests match.
//! 3. Generated JSON documents (numbers in every spelling, integers beyond 64 bits, objects that
//!    look like tags) submitted through the reference's client and as raw text to `onestep serve`
//!    with one idempotency key are one execution, whichever side goes first; a different document
//!    under a used key is a conflict on both sides.
//!
//! The Python side is `tests/python/roundtrip.py`, run by the reference virtualenv (see
//! `onestep_testkit::reference`). Servers come from `ONESTEP_POSTGRES_URL` / `ONESTEP_MYSQL_URL`
//! or the local defaults; each test uses fresh tables.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onestep_core::execution::{ExecutionClient, ExecutionError, ExecutionStatus, SubmitOptions};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use onestep_testkit::reference::PySession;
use serde_json::{Value, json};

/// Values generated per database: the issue asks for at least 500 per run.
const VALUES: u64 = 600;
/// JSON documents sent through both APIs per database.
const DOCUMENTS: u64 = 250;
/// Every tag the reference's codec writes, and big integers.
const TAGS: [&str; 11] = [
    "datetime",
    "uuid",
    "bytes",
    "decimal",
    "tuple",
    "set",
    "frozenset",
    "namedtuple",
    "enum",
    "mapping",
    "int beyond 64 bits",
];

#[derive(Clone, Copy, Debug)]
enum Db {
    Postgres,
    MariaDb,
}

impl Db {
    fn url(self) -> String {
        match self {
            Db::Postgres => std::env::var("ONESTEP_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
            Db::MariaDb => std::env::var("ONESTEP_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
        }
    }

    /// The reference's backend name, and SQLAlchemy's spelling of the URL.
    fn python(self) -> (&'static str, String) {
        let url = self.url();
        let rest = url.split_once("://").expect("a URL").1.to_owned();
        match self {
            Db::Postgres => ("postgres", format!("postgresql+psycopg://{rest}")),
            Db::MariaDb => ("mysql", format!("mysql+asyncmy://{rest}")),
        }
    }

    /// The YAML resource types of the connector and the execution source.
    fn yaml_types(self) -> (&'static str, &'static str) {
        match self {
            Db::Postgres => ("postgres", "postgres_execution_source"),
            Db::MariaDb => ("mysql", "mysql_execution_source"),
        }
    }
}

/// One test's tables and namespace, and the Python session that works on them.
struct Case {
    db: Db,
    table: String,
    attempts_table: String,
    namespace: String,
    python: PySession,
    dir: tempfile::TempDir,
}

const TASK: &str = "echo";

impl Case {
    fn new(db: Db) -> Self {
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
        Self {
            db,
            table: format!("rt{suffix}_executions"),
            attempts_table: format!("rt{suffix}_attempts"),
            namespace: format!("rt-{suffix}"),
            python: PySession::start(&script()),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Calls the helper; panics with its message and standard error when it failed.
    fn py(&mut self, command: &str, extra: Value) -> Value {
        let (backend, dsn) = self.db.python();
        let mut args = json!({
            "backend": backend,
            "dsn": dsn,
            "table": self.table,
            "attempts_table": self.attempts_table,
            "namespace": self.namespace,
            "task": TASK,
        });
        for (key, value) in extra.as_object().unwrap() {
            args[key] = value.clone();
        }
        let (answer, stderr) = self.python.call(command, &args);
        assert_eq!(
            answer["ok"], true,
            "roundtrip.py {command} failed: {answer}\n{stderr}"
        );
        answer
    }

    fn options(&self) -> BackendOptions {
        BackendOptions::default()
            .with_table(self.table.clone())
            .with_attempts_table(self.attempts_table.clone())
            .with_auto_create(false)
    }

    /// `onestep run` with `onestep:echo` on this case's tables.
    fn start_worker(&self) -> Child {
        let (connector, source) = self.db.yaml_types();
        let yaml = format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: roundtrip, shutdown_timeout_s: 10}}\n\
             resources:\n  db: {{type: {connector}, dsn: \"{url}\"}}\n  jobs:\n    type: {source}\n    \
             connector: db\n    namespace: {namespace}\n    task_names: [{TASK}]\n    table: {table}\n    \
             attempts_table: {attempts}\n    auto_create: false\n    batch_size: 100\n    \
             poll_interval_s: 0.1\ntasks:\n  - {{name: {TASK}, source: jobs, handler: onestep:echo, \
             concurrency: 32}}\n",
            url = self.db.url(),
            namespace = self.namespace,
            table = self.table,
            attempts = self.attempts_table,
        );
        let path = self.dir.path().join("worker.yaml");
        std::fs::write(&path, yaml).unwrap();
        Command::new(env!("CARGO_BIN_EXE_onestep"))
            .arg("run")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("worker.log")).unwrap())
            .spawn()
            .unwrap()
    }

    fn worker_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("worker.log")).unwrap_or_default()
    }

    /// `onestep serve` on this case's tables; its base URL.
    fn start_api(&self) -> (Child, String) {
        let mut api = Command::new(env!("CARGO_BIN_EXE_onestep"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--namespace",
                &self.namespace,
            ])
            .args(["--allow-task", TASK])
            .args([
                "--table",
                &self.table,
                "--attempts-table",
                &self.attempts_table,
            ])
            .env("ONESTEP_DSN", self.db.url())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.dir.path().join("api.log")).unwrap())
            .spawn()
            .unwrap();
        let mut printed = String::new();
        let mut lines = BufReader::new(api.stdout.take().unwrap()).lines();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                panic!(
                    "onestep serve printed no address: {printed:?}; log: {}",
                    std::fs::read_to_string(self.dir.path().join("api.log")).unwrap_or_default()
                );
            };
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                let url = url.trim_end_matches("/v1/executions").to_owned();
                // Keep reading, so the server never writes into a closed pipe.
                std::thread::spawn(move || lines.for_each(drop));
                break url;
            }
            printed.push_str(&line);
        };
        (api, url)
    }

    async fn drop_tables(&self) {
        let url = self.db.url();
        let statements = [
            format!("DROP TABLE IF EXISTS {}", self.attempts_table),
            format!("DROP TABLE IF EXISTS {}", self.table),
        ];
        match self.db {
            Db::Postgres => {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                for statement in &statements {
                    let _ = sqlx::query(statement).execute(&pool).await;
                }
            }
            Db::MariaDb => {
                let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
                for statement in &statements {
                    let _ = sqlx::query(statement).execute(&pool).await;
                }
            }
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/roundtrip.py")
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

async fn roundtrip<D: Dialect>(db: Db) {
    let mut case = Case::new(db);
    case.py("create-tables", json!({}));

    // 1. Python submits, the Rust worker echoes, Python reads back.
    let submitted = case.py(
        "submit-generated",
        json!({"count": VALUES, "seed": 20261201}),
    );
    let ids: Vec<String> = serde_json::from_value(submitted["ids"].clone()).unwrap();
    let skipped = submitted["skipped"].as_array().unwrap();
    assert!(
        ids.len() as u64 >= 500 && skipped.len() <= 5,
        "{} values submitted, {} skipped: {skipped:?}",
        ids.len(),
        skipped.len()
    );
    for tag in TAGS {
        let seen = submitted["tags"][tag].as_u64().unwrap_or(0);
        assert!(
            seen >= 20,
            "only {seen} generated values hold a {tag}: {}",
            submitted["tags"]
        );
    }
    let worker = case.start_worker();
    let client = ExecutionClient::new(
        SqlExecutionBackend::<D>::new(&db.url(), case.options()).unwrap(),
        &case.namespace,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    for id in &ids {
        let id = id.parse().unwrap();
        let left = deadline.saturating_duration_since(Instant::now());
        let done = client.wait(id, left).await.unwrap_or_else(|e| {
            panic!(
                "execution {id} did not finish: {e}\nworker log:\n{}",
                case.worker_log()
            )
        });
        assert_eq!(
            done.status,
            ExecutionStatus::Succeeded,
            "{done:?}\nworker log:\n{}",
            case.worker_log()
        );
    }
    stop(worker);
    let checked = case.py("check-echoed", json!({"ids": ids}));
    assert_eq!(
        checked["count"], 0,
        "results Python reads back differ from the payloads it reads: {}",
        checked["mismatches"]
    );

    // 2. A Rust re-submit of what it read keeps the digest exactly when the reference's own
    // re-submit of what it reads does (PostgreSQL's jsonb stores a float such as 1e200 as a
    // number Python reads back as an integer, so both sides then see other content).
    let python = case.py("resubmit-read", json!({"ids": ids}));
    let python: Vec<String> = serde_json::from_value(python["outcomes"].clone()).unwrap();
    let mut rust = Vec::with_capacity(ids.len());
    for (index, id) in ids.iter().enumerate() {
        let id = id.parse().unwrap();
        let read = client.get(id).await.unwrap().unwrap();
        let options = SubmitOptions::default()
            .idempotency_key(format!("p-{index}"))
            .metadata(read.metadata.clone());
        rust.push(match client.submit(TASK, &read.payload, options).await {
            Ok(again) if again.id == id => "same".to_owned(),
            Ok(again) => format!("other {}", again.id),
            Err(ExecutionError::Conflict(_)) => "conflict".to_owned(),
            Err(e) => panic!("re-submitting {id} as read ({}): {e}", read.payload),
        });
    }
    let disagree: Vec<String> = ids
        .iter()
        .zip(rust.iter().zip(&python))
        .filter(|(_, (r, p))| r != p)
        .map(|(id, (r, p))| format!("{id}: Rust {r}, Python {p}"))
        .collect();
    assert!(disagree.is_empty(), "re-submits disagree: {disagree:#?}");
    let same = rust.iter().filter(|o| *o == "same").count();
    // Hypothesis likes floats beyond 1e16, which jsonb turns into integers: a third of them.
    assert!(
        same * 2 >= ids.len(),
        "only {same} of {} re-submits found their execution",
        ids.len()
    );
    println!(
        "{db:?}: {same} of {} re-submits kept their digest on both sides",
        ids.len()
    );

    // 3. The same JSON through the Python client and `onestep serve` is one execution.
    let (api, url) = case.start_api();
    let http = case.py(
        "http-json",
        json!({"count": DOCUMENTS, "seed": 20261202, "url": format!("{url}/v1/executions")}),
    );
    stop(api);
    assert_eq!(
        http["count"], 0,
        "the Python client and the HTTP API disagree: {}",
        http["mismatches"]
    );
    assert_eq!(http["checked"], DOCUMENTS);
    assert_eq!(
        http["conflicts"], DOCUMENTS,
        "every different document under a used key conflicts"
    );
    case.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_values_survive_rust_processes_on_postgres() {
    roundtrip::<onestep_sql::postgres::Postgres>(Db::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_values_survive_rust_processes_on_mariadb() {
    roundtrip::<onestep_sql::mysql::MySql>(Db::MariaDb).await;
}

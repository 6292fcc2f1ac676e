//! Hostile HTTP input against a real `onestep serve` process, on SQLite and on PostgreSQL
//! (`ONESTEP_POSTGRES_URL`, else `postgres://postgres@127.0.0.1:5432/test`; a server that does not
//! answer fails the test). Every hostile request must get a 4xx whose JSON `detail` names the
//! field and what was expected, and must write nothing: the row counts seen through the API and
//! directly in the tables stay the same, and the server answers normally afterwards.
//!
//! Then the security promises through the API: the task allowlist, the reserved metadata key,
//! and namespace isolation between two API processes sharing one table.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

#[path = "http_hostile/corpus.rs"]
mod corpus;
#[path = "http_hostile/route.rs"]
mod route;
#[path = "http_hostile/slow.rs"]
mod slow;
#[path = "http_hostile/wire.rs"]
mod wire;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use onestep_core::execution::{ExecutionCompletion, LeasedExecutionBackend};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use serde_json::{Value, json};

use corpus::{Case, SQL, SQL_TASK};
use wire::{call, cancel_bytes, exchange, get, http, submit_json};

fn postgres_url() -> String {
    std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A database and a pair of fresh tables, created with `onestep init-db`.
struct Store {
    dsn: String,
    table: String,
    attempts: String,
    _dir: Option<tempfile::TempDir>,
}

impl Store {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let dsn = format!("sqlite://{}/api.db", dir.path().display());
        Self::create(dsn, Some(dir))
    }

    fn postgres() -> Self {
        Self::create(postgres_url(), None)
    }

    fn create(dsn: String, dir: Option<tempfile::TempDir>) -> Self {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..10];
        let store = Self {
            dsn,
            table: format!("hostile{suffix}_executions"),
            attempts: format!("hostile{suffix}_attempts"),
            _dir: dir,
        };
        let o = Command::new(env!("CARGO_BIN_EXE_onestep"))
            .args(["init-db", "--dsn", &store.dsn, "--table", &store.table])
            .args(["--attempts-table", &store.attempts])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "cannot create the execution tables: {}\nFor PostgreSQL, start a server (`cargo xtask \
             test` starts a throwaway one) or point ONESTEP_POSTGRES_URL at one.",
            output_text(&o)
        );
        store
    }

    fn backend<D: Dialect>(&self) -> SqlExecutionBackend<D> {
        let options = BackendOptions::default()
            .with_table(self.table.clone())
            .with_attempts_table(self.attempts.clone())
            .with_auto_create(false);
        SqlExecutionBackend::<D>::new(&self.dsn, options).unwrap()
    }

    /// Every execution row, read directly from the table, sorted, and the number of attempt rows.
    async fn rows(&self) -> (Vec<Row>, i64) {
        let select = format!(
            "SELECT namespace, task_name, status, idempotency_key, cancel_reason, version \
             FROM {} ORDER BY namespace, task_name, idempotency_key",
            self.table
        );
        let count = format!("SELECT COUNT(*) FROM {}", self.attempts);
        if self.dsn.starts_with("sqlite") {
            let pool = sqlx::SqlitePool::connect(&self.dsn).await.unwrap();
            let rows = sqlx::query_as(&select).fetch_all(&pool).await.unwrap();
            let attempts = sqlx::query_scalar(&count).fetch_one(&pool).await.unwrap();
            pool.close().await;
            (rows, attempts)
        } else {
            let pool = sqlx::PgPool::connect(&self.dsn).await.unwrap();
            let rows = sqlx::query_as(&select).fetch_all(&pool).await.unwrap();
            let attempts = sqlx::query_scalar(&count).fetch_one(&pool).await.unwrap();
            pool.close().await;
            (rows, attempts)
        }
    }

    /// Drops the PostgreSQL tables (a SQLite store goes with its directory).
    async fn drop_tables(&self) {
        if !self.dsn.starts_with("sqlite") {
            let pool = sqlx::PgPool::connect(&self.dsn).await.unwrap();
            for t in [&self.attempts, &self.table] {
                sqlx::query(&format!("DROP TABLE {t}"))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            pool.close().await;
        }
    }
}

/// `(namespace, task_name, status, idempotency_key, cancel_reason, version)`.
type Row = (String, String, String, Option<String>, Option<String>, i64);

/// A running `onestep serve`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(store: &Store, namespace: &str, allow: &[&str]) -> Self {
        Self::start_with(store, namespace, allow, &[])
    }

    /// [`Server::start`] with more `onestep serve` arguments.
    fn start_with(store: &Store, namespace: &str, allow: &[&str], extra: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_onestep"));
        cmd.args(["serve", "--dsn", &store.dsn, "--namespace", namespace])
            .args(extra)
            .args(["--listen", "127.0.0.1:0", "--table", &store.table])
            .args(["--attempts-table", &store.attempts])
            .env_remove("ONESTEP_API_TOKEN")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for task in allow {
            cmd.args(["--allow-task", task]);
        }
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let (log_out, log_err) = (log.clone(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("serving http://") {
                    let _ = tx.send(rest.split('/').next().unwrap_or_default().to_string());
                }
                log_out.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let mut err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            log_err.lock().unwrap().push_str(&text);
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => Self { child, addr, log },
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().unwrap();
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "onestep serve did not start ({status}):\n{}",
                    log.lock().unwrap()
                );
            }
        }
    }

    /// Asserts the process is still running and never panicked.
    fn assert_alive(&mut self) {
        let status = self.child.try_wait().unwrap();
        let log = self.log.lock().unwrap().clone();
        assert!(status.is_none(), "the server exited ({status:?}):\n{log}");
        assert!(!log.contains("panicked"), "the server panicked:\n{log}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends the corpus; returns the failures and the count per status.
async fn run_corpus(addr: &str, cases: Vec<Case>) -> (Vec<String>, BTreeMap<u16, usize>) {
    let mut failures = Vec::new();
    let mut statuses = BTreeMap::new();
    for c in cases {
        let a = exchange(addr, &c.raw, &c.how).await;
        *statuses.entry(a.status).or_insert(0) += 1;
        let detail = a.detail();
        let problem = if a.status != c.status {
            Some(format!("status {} (wanted {})", a.status, c.status))
        } else if !(400..500).contains(&a.status) {
            Some("not a 4xx".to_string())
        } else if !a.content_type.starts_with("application/json") {
            Some(format!("Content-Type {:?}", a.content_type))
        } else if !detail.contains(&c.detail) {
            Some(format!("detail does not contain {:?}", c.detail))
        } else if detail.chars().count() > 400 {
            Some("the detail is longer than 400 characters".to_string())
        } else {
            None
        };
        if let Some(problem) = problem {
            let text: String = a.text.chars().take(300).collect();
            failures.push(format!("{}: {problem}; answer: {text}", c.what));
        }
    }
    (failures, statuses)
}

async fn list_all(addr: &str) -> Vec<Value> {
    let a = call(addr, &get("/v1/executions?limit=200")).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.body["next_cursor"].is_null(), "fits one page: {a:?}");
    a.body["items"].as_array().unwrap().clone()
}

async fn submit_ok(addr: &str, key: &str, body: &Value) -> Value {
    let a = call(addr, &submit_json(key, body)).await;
    assert_eq!(a.status, 202, "{a:?}");
    a.body
}

async fn hostile_requests_get_a_clear_4xx_and_write_nothing(store: Store) {
    let mut server = Server::start(&store, "hostile", &["hello", SQL_TASK]);
    let addr = server.addr.clone();

    let victim = submit_ok(
        &addr,
        "victim",
        &json!({"task_name": "hello", "payload": {"n": 0}}),
    )
    .await;
    let victim_id = victim["id"].as_str().unwrap().to_string();
    // As GET shows it (with `progress`, which the submit answer does not carry).
    let victim = call(&addr, &get(&format!("/v1/executions/{victim_id}")))
        .await
        .body;
    let before = store.rows().await;
    assert_eq!(before.0.len(), 1);

    let mut cases = corpus::submit_cases(&victim_id, &store.table);
    cases.extend(route::route_cases(&victim_id));
    let total = cases.len();
    let (failures, statuses) = run_corpus(&addr, cases).await;
    eprintln!(
        "{}: {total} hostile requests, statuses {statuses:?}",
        store.dsn.split(':').next().unwrap()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} hostile requests were answered wrongly:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total >= 190, "the corpus has {total} requests");
    server.assert_alive();

    // Nothing was written or changed, seen through the API and in the tables.
    assert_eq!(
        store.rows().await,
        before,
        "the tables are unchanged after the corpus"
    );
    let items = list_all(&addr).await;
    assert_eq!(items.len(), 1, "{items:?}");
    let now = call(&addr, &get(&format!("/v1/executions/{victim_id}"))).await;
    assert_eq!(
        now.body, victim,
        "the victim of the hostile cancels is untouched"
    );

    // The server still works normally, and hostile but valid values are stored literally.
    let health = call(&addr, &get("/healthz")).await;
    assert_eq!(health.status, 200, "{health:?}");
    let normal = call(
        &addr,
        &http(
            "POST",
            "/v1/executions",
            &[
                ("Content-Type", "application/json; charset=utf-8"),
                ("Idempotency-Key", "after-the-corpus"),
            ],
            Some(br#"{"task_name": "hello", "payload": {"n": 2}}"#),
        ),
    )
    .await;
    assert_eq!(
        (normal.status, normal.body["status"].as_str()),
        (202, Some("queued")),
        "{normal:?}"
    );
    let no_type = call(
        &addr,
        &http(
            "POST",
            "/v1/executions",
            &[("Idempotency-Key", "no-content-type")],
            Some(br#"{"task_name": "hello", "payload": null}"#),
        ),
    )
    .await;
    assert_eq!(
        no_type.status, 202,
        "no Content-Type is read as JSON: {no_type:?}"
    );
    let literal = submit_ok(
        &addr,
        SQL,
        &json!({"task_name": SQL_TASK, "payload": {"q": SQL},
                "metadata": {SQL: SQL, "tenant": "x' OR '1'='1"},
                "expires_at": "2999-01-01T00:00:00+14:00"}),
    )
    .await;
    assert_eq!(literal["task_name"], SQL_TASK);
    assert_eq!(
        literal["metadata"],
        json!({SQL: SQL, "tenant": "x' OR '1'='1"})
    );
    let cancelled = call(
        &addr,
        &cancel_bytes(
            &victim_id,
            "application/vnd.onestep+json",
            json!({ "reason": SQL }).to_string().as_bytes(),
        ),
    )
    .await;
    assert_eq!(
        (cancelled.status, cancelled.body["status"].as_str()),
        (200, Some("cancelled")),
        "{cancelled:?}"
    );
    let listed = call(
        &addr,
        &get("/v1/executions?task_name=hello%27%29%3B%20DROP%20TABLE%20onestep_executions%3B%20--"),
    )
    .await;
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.body["items"][0]["id"], literal["id"]);

    let (rows, attempts) = store.rows().await;
    assert_eq!(attempts, 0);
    let ns = "hostile".to_string();
    assert_eq!(
        rows,
        vec![
            (
                ns.clone(),
                "hello".into(),
                "queued".into(),
                Some("after-the-corpus".into()),
                None,
                0
            ),
            (
                ns.clone(),
                "hello".into(),
                "queued".into(),
                Some("no-content-type".into()),
                None,
                0
            ),
            (
                ns.clone(),
                "hello".into(),
                "cancelled".into(),
                Some("victim".into()),
                Some(SQL.into()),
                1
            ),
            (
                ns,
                SQL_TASK.into(),
                "queued".into(),
                Some(SQL.into()),
                None,
                0
            ),
        ]
    );
    assert_eq!(list_all(&addr).await.len(), 4);
    server.assert_alive();
    drop(server);
    store.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_a_clear_4xx_and_write_nothing_on_sqlite() {
    Box::pin(hostile_requests_get_a_clear_4xx_and_write_nothing(
        Store::sqlite(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_a_clear_4xx_and_write_nothing_on_postgres() {
    Box::pin(hostile_requests_get_a_clear_4xx_and_write_nothing(
        Store::postgres(),
    ))
    .await;
}

/// Namespace B's name is itself an SQL fragment: it is only ever a bound value.
const NS_A: &str = "tenant-a";
const NS_B: &str = "tenant-b'); DELETE FROM onestep_executions; --";

async fn security_holds_through_the_api<D: Dialect>(store: Store) {
    let mut a = Server::start(&store, NS_A, &["hello"]);
    let mut b = Server::start(&store, NS_B, &["hello", "report"]);

    // The allowlist: another task name is refused before anything is stored.
    for (server, task, accepted) in [
        (&a, "report", "hello"),
        (&a, "onestep:exec", "hello"),
        (&b, "other", "hello, report"),
    ] {
        let r = call(
            &server.addr,
            &submit_json("allow", &json!({"task_name": task, "payload": {}})),
        )
        .await;
        assert_eq!(
            (r.status, r.detail().to_string()),
            (
                422,
                format!("unsupported task_name {task:?}; accepted: {accepted}")
            ),
            "{task}: {r:?}"
        );
    }
    // The reserved metadata key cannot be set by the caller, whatever its value.
    for value in [json!({"id": uuid::Uuid::new_v4()}), json!(null), json!("x")] {
        let r = call(
            &a.addr,
            &submit_json(
                "reserved",
                &json!({"task_name": "hello", "payload": {}, "metadata": {"onestep.execution": value}}),
            ),
        )
        .await;
        assert_eq!(
            (r.status, r.detail()),
            (422, "metadata key 'onestep.execution' is reserved"),
            "{r:?}"
        );
    }
    assert_eq!(store.rows().await, (vec![], 0), "nothing was written");

    // B's executions: one queued, one succeeded with a result.
    let b_queued = submit_ok(
        &b.addr,
        "shared-key",
        &json!({"task_name": "hello", "payload": {"secret": "b"}}),
    )
    .await;
    let b_done = submit_ok(
        &b.addr,
        "report-1",
        &json!({"task_name": "report", "payload": {}}),
    )
    .await;
    let backend = store.backend::<D>();
    let leases = backend
        .claim(
            NS_B,
            &["report".to_string()],
            1,
            Duration::from_secs(30),
            "test",
        )
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    let lease = &leases[0];
    backend
        .complete(
            lease.execution.id,
            lease.attempt_id,
            lease.lease_token,
            ExecutionCompletion::Succeeded {
                result: json!({"secret": "b's result"}),
            },
        )
        .await
        .unwrap();
    let a_own = submit_ok(
        &a.addr,
        "shared-key",
        &json!({"task_name": "hello", "payload": {"secret": "a"}}),
    )
    .await;
    assert_ne!(a_own["id"], b_queued["id"], "the same key in A is A's own");
    assert_eq!(a_own["namespace"], NS_A);
    let tables_before = store.rows().await;
    let b_view = |id: &Value| {
        let id = id.as_str().unwrap().to_string();
        let addr = b.addr.clone();
        async move { call(&addr, &get(&format!("/v1/executions/{id}"))).await }
    };
    let b_before = (b_view(&b_queued["id"]).await, b_view(&b_done["id"]).await);
    let b_result = call(
        &b.addr,
        &get(&format!(
            "/v1/executions/{}/result",
            b_done["id"].as_str().unwrap()
        )),
    )
    .await;
    assert_eq!(
        (b_result.status, &b_result.body),
        (200, &json!({"result": {"secret": "b's result"}})),
        "B reads its own result"
    );

    // A client of A can neither read, list, cancel nor get the result of B's executions.
    for target in [&b_queued, &b_done] {
        let id = target["id"].as_str().unwrap();
        let r = call(&a.addr, &get(&format!("/v1/executions/{id}"))).await;
        assert_eq!(
            (r.status, r.detail()),
            (404, "execution not found"),
            "{r:?}"
        );
        let r = call(&a.addr, &get(&format!("/v1/executions/{id}/result"))).await;
        assert_eq!(
            (r.status, r.detail().to_string()),
            (404, format!("execution {id} was not found")),
            "{r:?}"
        );
        for body in [&b"{}"[..], br#"{"reason": "from A"}"#, b""] {
            let r = call(&a.addr, &cancel_bytes(id, "application/json", body)).await;
            assert_eq!(
                (r.status, r.detail()),
                (404, "execution not found"),
                "{r:?}"
            );
        }
    }
    let listed = list_all(&a.addr).await;
    assert_eq!(
        listed.iter().map(|e| &e["id"]).collect::<Vec<_>>(),
        [&a_own["id"]],
        "A lists only its own"
    );
    for query in [
        "task_name=report",
        "task_name=hello&status=queued",
        "status=succeeded",
    ] {
        let r = call(&a.addr, &get(&format!("/v1/executions?{query}"))).await;
        assert!(
            r.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["namespace"] == NS_A),
            "{query}: {r:?}"
        );
    }
    // A cursor made by B's listing shows A nothing of B's.
    let page = call(&b.addr, &get("/v1/executions?limit=1")).await;
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let r = call(&a.addr, &get(&format!("/v1/executions?cursor={cursor}"))).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["namespace"] == NS_A),
        "{r:?}"
    );
    // And the other way round.
    let a_id = a_own["id"].as_str().unwrap();
    for path in [
        format!("/v1/executions/{a_id}"),
        format!("/v1/executions/{a_id}/result"),
    ] {
        assert_eq!(call(&b.addr, &get(&path)).await.status, 404, "{path}");
    }
    let r = call(&b.addr, &cancel_bytes(a_id, "application/json", b"{}")).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(
        list_all(&b.addr)
            .await
            .iter()
            .all(|e| e["namespace"] == NS_B)
    );

    // Nothing changed.
    assert_eq!(
        (
            b_view(&b_queued["id"]).await.body,
            b_view(&b_done["id"]).await.body
        ),
        (b_before.0.body, b_before.1.body),
        "B's executions are unchanged"
    );
    assert_eq!(
        store.rows().await,
        tables_before,
        "the tables are unchanged"
    );
    let (rows, _) = store.rows().await;
    let per_namespace = |ns: &str| rows.iter().filter(|r| r.0 == ns).count();
    assert_eq!((per_namespace(NS_A), per_namespace(NS_B)), (1, 2));
    a.assert_alive();
    b.assert_alive();
    drop((a, b));
    store.drop_tables().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_reserved_metadata_and_namespace_isolation_hold_on_sqlite() {
    Box::pin(security_holds_through_the_api::<onestep_sql::sqlite::Sqlite>(Store::sqlite())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_reserved_metadata_and_namespace_isolation_hold_on_postgres() {
    Box::pin(security_holds_through_the_api::<
        onestep_sql::postgres::Postgres,
    >(Store::postgres()))
    .await;
}

#[test]
fn serve_refuses_an_sql_table_name_at_start_up() {
    let store = Store::sqlite();
    for table in [
        format!("{}; DROP TABLE {}", store.table, store.table),
        "x\" ; DROP TABLE onestep_executions; --".to_string(),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_onestep"))
            .args(["serve", "--dsn", &store.dsn, "--namespace", "n"])
            .args([
                "--listen",
                "127.0.0.1:0",
                "--table",
                &table,
                "--auto-create",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", output_text(&o));
        assert!(
            output_text(&o).contains("onestep serve: executions_table must be")
                && output_text(&o).contains("SQL identifier"),
            "{}",
            output_text(&o)
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(
        rt.block_on(store.rows()),
        (vec![], 0),
        "the real tables are still there"
    );
}

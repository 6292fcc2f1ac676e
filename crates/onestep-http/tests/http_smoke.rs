//! The seed documents' minimum smoke test through the HTTP API, on SQLite and PostgreSQL, with
//! workers running in this process; plus hostile requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use onestep_core::execution::{
    ExecutionClient, ExecutionLimits, ExecutionSource, ExecutionSourceOptions,
    LeasedExecutionBackend,
};
use onestep_core::{AppHandle, OneStepApp, Task, TaskContext, TaskError};
use onestep_http::ExecutionApi;
use onestep_http::client::{Reply, request};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use serde_json::{Value, json};

const NS: &str = "smoke";

fn options() -> BackendOptions {
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
    BackendOptions::default()
        .with_table(format!("http{suffix}_executions"))
        .with_attempts_table(format!("http{suffix}_attempts"))
        .with_limits(ExecutionLimits {
            max_result_bytes: 1024,
            ..ExecutionLimits::default()
        })
}

/// The API on a free port; returns its address.
async fn start_api<B: onestep_core::execution::ExecutionBackend + Clone + 'static>(
    backend: B,
) -> String {
    let router = ExecutionApi::new(ExecutionClient::new(backend, NS).unwrap())
        .allow_tasks(["smoke", "restart"])
        .metadata_injector(["tenant"], |headers, _| {
            let mut m = serde_json::Map::new();
            if let Some(t) = headers.get("x-tenant").and_then(|v| v.to_str().ok()) {
                m.insert("tenant".into(), t.into());
            }
            m
        })
        .router();
    serve_router(router).await
}

/// Serves `router` on a free local port until the test ends; returns its address.
async fn serve_router(router: axum::Router) -> String {
    let listener = onestep_http::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(onestep_http::serve(
        listener,
        router,
        std::future::pending(),
    ));
    addr
}

fn source<B: LeasedExecutionBackend + Clone + 'static>(
    b: &B,
    task: &str,
) -> Arc<ExecutionSource<B>> {
    let mut o = ExecutionSourceOptions::new(NS, task);
    o.poll_interval = Duration::from_millis(50);
    o.lease_duration = Duration::from_secs(3);
    o.heartbeat_interval = Duration::from_millis(200);
    Arc::new(ExecutionSource::new(b.clone(), o).unwrap())
}

async fn smoke_handler(_ctx: TaskContext, input: Value) -> Result<Value, TaskError> {
    match input["mode"].as_str() {
        Some("sleep") => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(json!("woke up"))
        }
        Some("big") => Ok(json!("x".repeat(4096))),
        _ => Ok(json!({"ok": true, "echo": input})),
    }
}

fn worker<B: LeasedExecutionBackend + Clone + 'static>(
    b: &B,
    name: &str,
) -> (AppHandle, tokio::task::JoinHandle<onestep_core::Result<()>>) {
    let app = OneStepApp::builder(name)
        .shutdown_timeout(Some(Duration::from_millis(200)))
        .task(
            Task::new("smoke")
                .source(source(b, "smoke"))
                .concurrency(4)
                .handler(smoke_handler),
        )
        .task(Task::new("restart").source(source(b, "restart")).handler(
            |ctx: TaskContext, _v: Value| async move {
                if ctx.attempts() == 0 {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok::<_, TaskError>(json!({"attempt": ctx.attempts() + 1}))
            },
        ))
        .build()
        .unwrap();
    let handle = app.handle();
    (handle, tokio::spawn(async move { app.serve().await }))
}

async fn submit(addr: &str, key: &str, body: Value) -> Reply {
    request(
        addr,
        "POST",
        "/v1/executions",
        &[("Idempotency-Key", key), ("X-Tenant", "acme")],
        Some(&body),
    )
    .await
    .unwrap()
}

async fn get(addr: &str, path: &str) -> Reply {
    request(addr, "GET", path, &[], None).await.unwrap()
}

async fn until_status(addr: &str, id: &str, wanted: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(addr, &format!("/v1/executions/{id}")).await;
        assert_eq!(r.status, 200, "{r:?}");
        if r.body["status"] == wanted {
            return r.body;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never became {wanted}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn smoke<D: Dialect>(dsn: &str) {
    let backend = SqlExecutionBackend::<D>::new(dsn, options()).unwrap();
    let addr = start_api(backend.clone()).await;
    let (worker_a, serve_a) = worker(&backend, "worker-a");

    // 1. queued -> running -> succeeded, result readable.
    let r = submit(&addr, "k-ok", json!({"task_name": "smoke", "payload": {"mode": "ok", "n": 1}, "metadata": {"tenant": "forged"}})).await;
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(r.body["status"], "queued");
    assert_eq!(
        r.body["metadata"]["tenant"], "acme",
        "server-side metadata wins over the body"
    );
    let id = r.body["id"].as_str().unwrap().to_string();
    until_status(&addr, &id, "succeeded").await;
    let result = get(&addr, &format!("/v1/executions/{id}/result")).await;
    assert_eq!(
        (result.status, result.body["result"]["ok"].clone()),
        (200, json!(true))
    );

    // 2. The same key and body returns the same id.
    let again = submit(&addr, "k-ok", json!({"task_name": "smoke", "payload": {"mode": "ok", "n": 1}, "metadata": {"tenant": "forged"}})).await;
    assert_eq!(
        (again.status, again.body["id"].as_str().unwrap()),
        (202, id.as_str())
    );

    // 3. The same key with another payload is a conflict.
    let conflict = submit(
        &addr,
        "k-ok",
        json!({"task_name": "smoke", "payload": {"mode": "ok", "n": 2}}),
    )
    .await;
    assert_eq!(conflict.status, 409);
    assert_eq!(
        conflict.body["detail"],
        "idempotency key was already used with a different submission"
    );

    // 4. A long task cancelled while running ends cancelled; its result is 409.
    let long = submit(
        &addr,
        "k-long",
        json!({"task_name": "smoke", "payload": {"mode": "sleep"}}),
    )
    .await;
    let long_id = long.body["id"].as_str().unwrap().to_string();
    until_status(&addr, &long_id, "running").await;
    let cancelled = request(
        &addr,
        "POST",
        &format!("/v1/executions/{long_id}/cancel"),
        &[],
        Some(&json!({"reason": "smoke test"})),
    )
    .await
    .unwrap();
    assert_eq!(
        (cancelled.status, cancelled.body["status"].clone()),
        (200, json!("cancel_requested"))
    );
    until_status(&addr, &long_id, "cancelled").await;
    assert_eq!(
        get(&addr, &format!("/v1/executions/{long_id}/result"))
            .await
            .status,
        409
    );

    // 5. A worker restart mid-task: the execution is retried by another worker as attempt 2.
    let restart = submit(
        &addr,
        "k-restart",
        json!({"task_name": "restart", "payload": {}}),
    )
    .await;
    let restart_id = restart.body["id"].as_str().unwrap().to_string();
    until_status(&addr, &restart_id, "running").await;
    worker_a.request_shutdown();
    serve_a.await.unwrap().unwrap();
    let after = get(&addr, &format!("/v1/executions/{restart_id}")).await;
    // A graceful shutdown hands the attempt back: `retrying` when the handler had started,
    // `queued` when the claim was still waiting for its handler (released unstarted; the
    // attempt counts all the same). A row left `running` would wait for its lease: that was
    // the SQLite cancelled-begin bug, fixed since.
    let status = after.body["status"].as_str().unwrap_or_default();
    assert!(
        status == "retrying" || status == "queued",
        "after worker A stopped: {status}"
    );
    let (worker_b, serve_b) = worker(&backend, "worker-b");
    let done = until_status(&addr, &restart_id, "succeeded").await;
    assert_eq!(done["attempts"], 2);
    assert_eq!(
        get(&addr, &format!("/v1/executions/{restart_id}/result"))
            .await
            .body["result"],
        json!({"attempt": 2})
    );

    // 6. Two pages without duplicates or gaps.
    let mut seen = Vec::new();
    let first = get(&addr, "/v1/executions?limit=2").await;
    assert_eq!(first.status, 200);
    seen.extend(
        first.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_string()),
    );
    let cursor = first.body["next_cursor"]
        .as_str()
        .expect("a second page")
        .to_string();
    let second = get(&addr, &format!("/v1/executions?limit=2&cursor={cursor}")).await;
    seen.extend(
        second.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_string()),
    );
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        (seen.len(), unique.len()),
        (3, 3),
        "three executions over two pages"
    );
    assert!(second.body["next_cursor"].is_null());

    // 7. An oversized result is reported as failed (stage result_validation), not success.
    let big = submit(
        &addr,
        "k-big",
        json!({"task_name": "smoke", "payload": {"mode": "big"}}),
    )
    .await;
    let big_id = big.body["id"].as_str().unwrap().to_string();
    let failed = until_status(&addr, &big_id, "failed").await;
    assert_eq!(failed["error"]["stage"], "result_validation");
    let r = get(&addr, &format!("/v1/executions/{big_id}/result")).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["detail"], format!("execution {big_id} failed"));

    worker_b.request_shutdown();
    serve_b.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_smoke_test_passes_on_sqlite() {
    let dir = tempfile::Builder::new()
        .prefix("onestep-http-")
        .tempdir()
        .unwrap();
    smoke::<onestep_sql::sqlite::Sqlite>(&format!("sqlite://{}/smoke.db", dir.path().display()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_smoke_test_passes_on_postgres() {
    let url = std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    smoke::<onestep_sql::postgres::Postgres>(&url).await;
}

#[tokio::test]
async fn hostile_requests_get_a_clear_4xx_and_write_nothing() {
    let backend = onestep_core::execution::MemoryExecutionBackend::new();
    let addr = start_api(backend.clone()).await;
    let valid = json!({"task_name": "smoke", "payload": {}});
    /// (what, headers, body, expected status, expected detail)
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, Option<Value>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "missing key",
            vec![],
            Some(valid.clone()),
            422,
            "Idempotency-Key is required",
        ),
        (
            "long key",
            vec![("Idempotency-Key", "k".repeat(10_000))],
            Some(valid.clone()),
            422,
            "1..255 characters",
        ),
        (
            "naive datetime",
            vec![("Idempotency-Key", "a".into())],
            Some(json!({"task_name": "smoke", "payload": {}, "expires_at": "2030-01-01T00:00:00"})),
            422,
            "expires_at must include a timezone",
        ),
        (
            "unknown task",
            vec![("Idempotency-Key", "b".into())],
            Some(json!({"task_name": "drop table", "payload": {}})),
            422,
            "unsupported task_name",
        ),
        (
            "unknown field",
            vec![("Idempotency-Key", "c".into())],
            Some(json!({"task_name": "smoke", "payload": {}, "priority": 1})),
            422,
            "unknown field \"priority\"",
        ),
        (
            "no payload",
            vec![("Idempotency-Key", "d".into())],
            Some(json!({"task_name": "smoke"})),
            422,
            "payload is required",
        ),
        (
            "reserved metadata",
            vec![("Idempotency-Key", "e".into())],
            Some(
                json!({"task_name": "smoke", "payload": {}, "metadata": {"onestep.execution": 1}}),
            ),
            422,
            "is reserved",
        ),
        (
            "negative delay",
            vec![("Idempotency-Key", "f".into())],
            Some(json!({"task_name": "smoke", "payload": {}, "delay_s": -1})),
            422,
            "delay_s",
        ),
    ];
    for (name, headers, body, status, detail) in cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = request(&addr, "POST", "/v1/executions", &headers, body.as_ref())
            .await
            .unwrap();
        assert_eq!(r.status, status, "{name}: {r:?}");
        assert!(
            r.body["detail"]
                .as_str()
                .unwrap_or_default()
                .contains(detail),
            "{name}: {r:?}"
        );
    }
    let too_big = json!({"task_name": "smoke", "payload": "x".repeat(2 * 1024 * 1024)});
    let r = request(
        &addr,
        "POST",
        "/v1/executions",
        &[("Idempotency-Key", "g")],
        Some(&too_big),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    let r = raw(&addr, b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIdempotency-Key: h\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n\xff\xfe{}").await;
    assert!(r.starts_with("HTTP/1.1 400"), "invalid UTF-8: {r}");
    let r = raw(&addr, b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIdempotency-Key: i\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"a\": NaN").await;
    assert!(r.starts_with("HTTP/1.1 400"), "NaN literal: {r}");
    assert_eq!(
        get(&addr, "/v1/executions?cursor=not-a-cursor")
            .await
            .status,
        422
    );
    assert_eq!(get(&addr, "/v1/executions?limit=500").await.status, 422);
    assert_eq!(get(&addr, "/v1/executions?status=done").await.status, 422);
    assert_eq!(get(&addr, "/v1/executions/not-a-uuid").await.status, 422);
    assert_eq!(
        get(&addr, &format!("/v1/executions/{}", uuid::Uuid::new_v4()))
            .await
            .status,
        404
    );
    assert_eq!(
        get(
            &addr,
            &format!("/v1/executions/{}/result", uuid::Uuid::new_v4())
        )
        .await
        .status,
        404
    );
    let page = get(&addr, "/v1/executions").await;
    assert_eq!(page.body["items"], json!([]), "nothing was written");
    let wrong_method = request(&addr, "DELETE", "/v1/executions", &[], None)
        .await
        .unwrap();
    assert_eq!(wrong_method.status, 405);
    assert!(
        wrong_method.body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("method not allowed")
    );
    let bad_cursor = get(&addr, "/v1/executions?cursor=xyz").await;
    assert_eq!(
        bad_cursor.body["detail"],
        "cursor is rejected: invalid execution cursor"
    );
    assert_eq!(get(&addr, "/healthz").await.status, 200);
    assert_eq!(get(&addr, "/openapi.json").await.body["openapi"], "3.1.0");
}

/// A client that stops sending mid-body gets a 408 once the body timeout passes, and nothing
/// is written.
#[tokio::test]
async fn a_body_that_stalls_gets_408_and_writes_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = onestep_core::execution::MemoryExecutionBackend::new();
    let router = ExecutionApi::new(ExecutionClient::new(backend, NS).unwrap())
        .body_timeout(Duration::from_millis(200))
        .router();
    let addr = serve_router(router).await;
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Idempotency-Key: k\r\nContent-Length: 100\r\n\r\n{\"task_name\": ",
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the server answers and closes the connection")
        .unwrap();
    let reply = String::from_utf8_lossy(&out);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(
        reply.contains("the request body did not arrive within 0.2 s"),
        "{reply}"
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    let page = get(&addr, "/v1/executions").await;
    assert_eq!(page.body["items"], json!([]), "nothing was written");
}

async fn raw(addr: &str, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn a_bearer_token_guards_the_api_but_not_health() {
    let client =
        ExecutionClient::new(onestep_core::execution::MemoryExecutionBackend::new(), NS).unwrap();
    let router = ExecutionApi::new(client).bearer_token("s3cret").router();
    let addr = serve_router(router).await;
    assert_eq!(get(&addr, "/v1/executions").await.status, 401);
    let wrong = request(
        &addr,
        "GET",
        "/v1/executions",
        &[("Authorization", "Bearer nope")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(wrong.status, 401);
    let right = request(
        &addr,
        "GET",
        "/v1/executions",
        &[("Authorization", "Bearer s3cret")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(right.status, 200);
    assert_eq!(get(&addr, "/healthz").await.status, 200);
    // A wrong method on a guarded route: 401 without the token (nothing about the routes
    // leaks), 405 with it.
    for (method, path) in [
        ("DELETE", "/v1/executions"),
        ("PUT", "/v1/executions/0b8b4cbe-9b4f-4f5b-9d8a-0a0b0c0d0e0f"),
    ] {
        let anonymous = request(&addr, method, path, &[], None).await.unwrap();
        assert_eq!(anonymous.status, 401, "{method} {path}: {anonymous:?}");
        let with = request(
            &addr,
            method,
            path,
            &[("Authorization", "Bearer s3cret")],
            None,
        )
        .await
        .unwrap();
        assert_eq!(with.status, 405, "{method} {path}: {with:?}");
    }
}

/// How a repeated key compares submissions (the reference's digest): a `delay_s` left out and
/// `null` are the same, `0` is another submission; an `expires_at` is compared as written, so
/// the same instant in another offset is another submission too.
#[tokio::test]
async fn repeated_keys_compare_delay_and_expiry_as_the_reference_does() {
    let addr = start_api(onestep_core::execution::MemoryExecutionBackend::new()).await;
    let first = submit(&addr, "delay", json!({"task_name": "smoke", "payload": 1})).await;
    assert_eq!(first.status, 202, "{first:?}");
    let null = submit(
        &addr,
        "delay",
        json!({"task_name": "smoke", "payload": 1, "delay_s": null}),
    )
    .await;
    assert_eq!((null.status, &null.body["id"]), (202, &first.body["id"]));
    let zero = submit(
        &addr,
        "delay",
        json!({"task_name": "smoke", "payload": 1, "delay_s": 0}),
    )
    .await;
    assert_eq!(zero.status, 409, "{zero:?}");

    let at = |expires: &str| json!({"task_name": "smoke", "payload": 1, "expires_at": expires});
    let plus = submit(&addr, "expiry", at("2031-02-03T04:05:06+08:00")).await;
    assert_eq!(plus.status, 202, "{plus:?}");
    let same = submit(&addr, "expiry", at("2031-02-03T04:05:06+08:00")).await;
    assert_eq!((same.status, &same.body["id"]), (202, &plus.body["id"]));
    let utc = submit(&addr, "expiry", at("2031-02-02T20:05:06Z")).await;
    assert_eq!(utc.status, 409, "the same instant in UTC: {utc:?}");

    // Integers beyond 64 bits are compared exactly: two that one float cannot tell apart are
    // two submissions; 1E2 and 100.0 are one number, as Python reads them.
    let raw = |key: &str, payload: &str| {
        let body = format!(r#"{{"task_name": "smoke", "payload": {payload}}}"#);
        let addr = addr.clone();
        let key = key.to_owned();
        async move {
            let bytes = format!(
                "POST /v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                 Content-Type: application/json\r\nIdempotency-Key: {key}\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            raw(&addr, bytes.as_bytes()).await
        }
    };
    let big = raw("big", "100000000000000000000").await;
    assert!(big.starts_with("HTTP/1.1 202"), "{big}");
    let bigger = raw("big", "100000000000000000001").await;
    assert!(bigger.starts_with("HTTP/1.1 409"), "{bigger}");
    let float = raw("float", "[1E2]").await;
    assert!(float.starts_with("HTTP/1.1 202"), "{float}");
    let same_float = raw("float", "[100.0]").await;
    assert!(same_float.starts_with("HTTP/1.1 202"), "{same_float}");
    let id = |answer: &str| {
        answer
            .split("\"id\":\"")
            .nth(1)
            .map(|rest| rest[..36].to_owned())
    };
    assert_eq!(id(&float), id(&same_float));
}

#[tokio::test]
async fn server_owned_metadata_cannot_be_forged_by_leaving_out_the_header() {
    let backend = onestep_core::execution::MemoryExecutionBackend::new();
    let addr = start_api(backend.clone()).await;
    let body = json!({"task_name": "smoke", "payload": {}, "metadata": {"tenant": "victim", "note": "kept"}});
    let r = request(
        &addr,
        "POST",
        "/v1/executions",
        &[("Idempotency-Key", "forge")],
        Some(&body),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 202);
    assert!(
        r.body["metadata"].get("tenant").is_none(),
        "an owned key the injector did not set is removed: {r:?}"
    );
    assert_eq!(r.body["metadata"]["note"], "kept");
    let unauthorized = raw(
        &addr,
        b"GET /v1/executions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        !unauthorized.contains("WWW-Authenticate"),
        "no auth configured here"
    );
}

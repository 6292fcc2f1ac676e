#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `http_sink` and `http_fetcher` against a real HTTP server (axum, in the test) that records
//! every request: rendering of URL, headers, query and body; GET's envelope as query; statuses
//! and timeouts classified; secrets kept out of errors; a task whose sink fails twice succeeds
//! under its retry policy; and the reference's own HttpSink sends the same bytes for the same
//! settings (run in the reference virtualenv, created when missing).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::routing::any;
use onestep_core::{
    ConnectorErrorKind, Envelope, Error, MaxAttempts, MemoryQueue, OneStepApp, Sink, Task,
    TaskContext, TaskError,
};
use onestep_http::outbound::{HttpFetcher, HttpSink, RequestSpec};
use serde_json::{Map, Value, json};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// A server that answers `statuses` in turn (then 200), with `reply` as the body, after
/// `delay`, and records what it got.
#[derive(Clone)]
struct Server {
    seen: Arc<Mutex<Vec<Seen>>>,
    statuses: Arc<Mutex<Vec<u16>>>,
    reply: Arc<Mutex<(String, Duration)>>,
}

impl Server {
    async fn start() -> (Self, String) {
        let server = Self {
            seen: Arc::default(),
            statuses: Arc::default(),
            reply: Arc::new(Mutex::new((String::new(), Duration::ZERO))),
        };
        let app = Router::new()
            .fallback(any(record))
            .with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (server, base)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn answer(&self, statuses: &[u16], body: &str, delay: Duration) {
        *self.statuses.lock().unwrap() = statuses.to_vec();
        *self.reply.lock().unwrap() = (body.to_owned(), delay);
    }
}

async fn record(
    State(s): State<Server>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    s.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query,
        headers,
        body: body.to_vec(),
    });
    let status = {
        let mut statuses = s.statuses.lock().unwrap();
        if statuses.is_empty() {
            200
        } else {
            statuses.remove(0)
        }
    };
    let (reply, delay) = s.reply.lock().unwrap().clone();
    tokio::time::sleep(delay).await;
    (StatusCode::from_u16(status).unwrap(), reply)
}

fn envelope() -> Envelope {
    let mut e = Envelope::new(json!({"id": 7, "user": {"name": "Zoë"}, "tags": ["a", "b"]}));
    e.meta.insert("trace".into(), json!("t-1"));
    e.attempts = 1;
    e
}

fn map(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn connector_kind(err: &Error) -> ConnectorErrorKind {
    match err {
        Error::Connector(c) => c.kind,
        other => panic!("not a connector error: {other}"),
    }
}

#[tokio::test]
async fn a_post_renders_every_field_and_sends_python_json() {
    let (server, base) = Server::start().await;
    let mut spec = RequestSpec::new(format!("{base}/users/{{{{ body.id }}}}"), "post");
    spec.headers = vec![
        ("Authorization".into(), json!("Bearer s3cret")),
        ("X-Trace".into(), json!("{{ meta.trace }}")),
        ("X-Attempt".into(), json!("{{ attempts }}")),
    ];
    spec.params =
        map(json!({"name": "{{ body.user.name }}", "tag": "{{ body.tags }}", "fixed": "a b"}));
    spec.body = Some(json!({"user": "{{ body.user }}", "note": "id={{ body.id }}", "n": 1.0}));
    let sink = HttpSink::new("users", spec).unwrap();
    sink.send(envelope()).await.unwrap();
    let seen = &server.seen()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/users/7");
    assert_eq!(
        seen.query.as_deref(),
        Some("name=Zo%C3%AB&tag=a&tag=b&fixed=a+b")
    );
    assert_eq!(seen.headers["authorization"], "Bearer s3cret");
    assert_eq!(seen.headers["x-trace"], "t-1");
    assert_eq!(seen.headers["x-attempt"], "1");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(
        String::from_utf8(seen.body.clone()).unwrap(),
        r#"{"user": {"name": "Zo\u00eb"}, "note": "id=7", "n": 1.0}"#
    );
    // Without a body template, the envelope's body is sent.
    let plain = HttpSink::new("plain", RequestSpec::new(format!("{base}/in"), "PUT")).unwrap();
    plain.send(envelope()).await.unwrap();
    let seen = &server.seen()[1];
    assert_eq!(seen.method, "PUT");
    assert_eq!(
        String::from_utf8(seen.body.clone()).unwrap(),
        r#"{"id": 7, "user": {"name": "Zo\u00eb"}, "tags": ["a", "b"]}"#
    );
}

#[tokio::test]
async fn a_get_sends_the_envelope_as_query_parameters_and_no_body() {
    let (server, base) = Server::start().await;
    let mut spec = RequestSpec::new(format!("{base}/search?x=1"), "GET");
    spec.params = map(json!({"limit": 5}));
    let sink = HttpSink::new("search", spec).unwrap();
    sink.send(Envelope::new(json!({"q": "rust", "ok": true})))
        .await
        .unwrap();
    let seen = &server.seen()[0];
    assert_eq!(seen.query.as_deref(), Some("x=1&limit=5&q=rust&ok=True"));
    assert!(seen.body.is_empty());
    assert!(!seen.headers.contains_key("content-type"));
    let err = sink.send(Envelope::new(json!([1, 2]))).await.unwrap_err();
    assert_eq!(
        connector_kind(&err),
        ConnectorErrorKind::Misconfigured,
        "{err}"
    );
}

#[tokio::test]
async fn statuses_timeouts_and_missing_variables_are_classified_without_secrets() {
    let (server, base) = Server::start().await;
    let mut spec = RequestSpec::new(
        format!(
            "http://user:pw-secret@{}/hook?token=q-secret",
            base.trim_start_matches("http://")
        ),
        "POST",
    );
    spec.headers = vec![("Authorization".into(), json!("Bearer h-secret"))];
    spec.timeout = Duration::from_millis(300);
    let sink = HttpSink::new("hook", spec.clone()).unwrap();
    for (status, kind) in [
        (503, ConnectorErrorKind::Transient),
        (429, ConnectorErrorKind::Throttled),
        (404, ConnectorErrorKind::Permanent),
    ] {
        server.answer(&[status], "", Duration::ZERO);
        let err = sink.send(envelope()).await.unwrap_err();
        assert_eq!(connector_kind(&err), kind, "{status}: {err}");
        assert!(err.to_string().contains(&status.to_string()), "{err}");
    }
    server.answer(&[], "", Duration::from_secs(2));
    let err = sink.send(envelope()).await.unwrap_err();
    assert_eq!(
        connector_kind(&err),
        ConnectorErrorKind::Disconnected,
        "{err}"
    );
    let shown = format!("{err} {:?} {sink:?}", std::error::Error::source(&err));
    for secret in ["pw-secret", "q-secret", "h-secret"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    let mut custom = spec.clone();
    custom.success_statuses = vec![418];
    custom.timeout = Duration::from_secs(5);
    server.answer(&[418], "", Duration::ZERO);
    HttpSink::new("teapot", custom)
        .unwrap()
        .send(envelope())
        .await
        .unwrap();

    let mut templated = RequestSpec::new(format!("{base}/x"), "POST");
    templated.body = Some(json!("{{ body.missing }}"));
    let err = HttpSink::new("t", templated)
        .unwrap()
        .send(envelope())
        .await
        .unwrap_err();
    assert_eq!(connector_kind(&err), ConnectorErrorKind::Misconfigured);
    assert!(format!("{err:?}").contains("body.missing"), "{err:?}");

    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = HttpSink::new(
        "closed",
        RequestSpec::new(format!("http://127.0.0.1:{port}/"), "POST"),
    )
    .unwrap();
    let err = closed.send(envelope()).await.unwrap_err();
    assert_eq!(
        connector_kind(&err),
        ConnectorErrorKind::Disconnected,
        "{err}"
    );
}

#[tokio::test]
async fn a_failing_sink_is_retried_by_the_task_s_policy() {
    let (server, base) = Server::start().await;
    // The runtime tries a retryable send twice per attempt; four 503s fail the first
    // attempt's two and the second attempt's two, the third attempt gets through.
    server.answer(&[503, 503, 503, 503], "", Duration::ZERO);
    let sink = HttpSink::new("out", RequestSpec::new(format!("{base}/out"), "POST")).unwrap();
    let queue = Arc::new(MemoryQueue::new("q", 10).unwrap());
    queue.publish(json!({"n": 1}), Map::new()).await.unwrap();
    let app = OneStepApp::builder("http-retry")
        .task(
            Task::new("t")
                .source(queue.clone())
                .emit(sink)
                .retry(MaxAttempts::new(3).unwrap())
                .handler(|_ctx: TaskContext, v: Value| async move { Ok::<_, TaskError>(v) }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let run = tokio::spawn(async move { app.serve().await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server.seen().len() < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} requests",
            server.seen().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.request_shutdown();
    run.await.unwrap().unwrap();
    let seen = server.seen();
    assert_eq!(
        seen.len(),
        5,
        "two sends per attempt, the third attempt succeeds"
    );
    assert!(seen.iter().all(|s| s.body == br#"{"n": 1}"#));
}

#[tokio::test]
async fn a_fetcher_returns_json_and_rows() {
    let (server, base) = Server::start().await;
    let mut spec = RequestSpec::new(format!("{base}/items"), "GET");
    spec.params = map(json!({"page": 1, "size": 10}));
    spec.headers = vec![("X-Key".into(), json!("k"))];
    let fetcher = HttpFetcher::new("items", spec)
        .unwrap()
        .with_rows(|v| Ok(v["items"].clone()));
    server.answer(&[], r#"{"items": [{"id": 1}, {"id": 2}]}"#, Duration::ZERO);
    let got = fetcher
        .fetch(
            Some(&map(json!({"page": 2}))),
            Some(&json!({"ignored": "GET has no body"})),
        )
        .await
        .unwrap();
    assert_eq!(got["items"][1]["id"], json!(2));
    let seen = &server.seen()[0];
    assert_eq!(seen.query.as_deref(), Some("page=2&size=10"));
    assert_eq!(seen.headers["accept"], "application/json");
    assert!(seen.body.is_empty());
    let rows = fetcher.fetch_rows(None, None).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], json!(1));

    server.answer(&[204], "", Duration::ZERO);
    assert_eq!(fetcher.fetch(None, None).await.unwrap(), Value::Null);
    server.answer(&[], "<html>", Duration::ZERO);
    let err = fetcher.fetch(None, None).await.unwrap_err();
    assert_eq!(connector_kind(&err), ConnectorErrorKind::Permanent);
    server.answer(&[], r#"{"items": [1]}"#, Duration::ZERO);
    let err = fetcher.fetch_rows(None, None).await.unwrap_err();
    assert!(
        format!("{err:?}").contains("item 0 must be a mapping"),
        "{err:?}"
    );
    let plain = HttpFetcher::new("plain", RequestSpec::new(format!("{base}/p"), "POST")).unwrap();
    server.answer(&[], "[]", Duration::ZERO);
    let err = plain.fetch_rows(None, None).await.unwrap_err();
    assert_eq!(connector_kind(&err), ConnectorErrorKind::Misconfigured);
    plain.fetch(None, Some(&json!({"q": 1}))).await.unwrap();
    let seen = server.seen();
    let last = seen.last().unwrap();
    assert_eq!(last.body, br#"{"q": 1}"#);
    assert_eq!(last.headers["content-type"], "application/json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_sends_the_same_request() {
    let (server, base) = Server::start().await;
    let spec = json!({
        "url": format!("{base}/orders/{{{{ body.id }}}}"),
        "method": "PATCH",
        "headers": {"X-Trace": "{{ meta.trace }}", "X-Attempts": "{{ attempts }}"},
        "params": {"who": "{{ body.user.name }}", "flag": true},
        "body": {"order": "{{ body }}", "label": "#{{ body.id }} {{ body.tags }}", "x": 0.1},
    });
    let e = envelope();
    let wire = json!({"body": e.body, "meta": e.meta, "attempts": e.attempts});
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/http_sink_parity.py");
    let out = std::process::Command::new(onestep_testkit::reference::python())
        .arg(script)
        .arg(spec.to_string())
        .arg(wire.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");

    let mut ours = RequestSpec::new(spec["url"].as_str().unwrap(), "PATCH");
    ours.headers = spec["headers"]
        .as_object()
        .unwrap()
        .clone()
        .into_iter()
        .collect();
    ours.params = spec["params"].as_object().unwrap().clone();
    ours.body = Some(spec["body"].clone());
    HttpSink::new("parity", ours)
        .unwrap()
        .send(e)
        .await
        .unwrap();
    let seen = server.seen();
    let (python, rust) = (&seen[0], &seen[1]);
    assert_eq!(python.method, rust.method);
    assert_eq!(python.path, rust.path);
    assert_eq!(python.query, rust.query);
    assert_eq!(
        String::from_utf8_lossy(&python.body),
        String::from_utf8_lossy(&rust.body)
    );
    for header in ["x-trace", "x-attempts", "content-type"] {
        assert_eq!(
            python.headers.get(header),
            rust.headers.get(header),
            "{header}"
        );
    }
}

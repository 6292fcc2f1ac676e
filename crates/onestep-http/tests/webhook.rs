//! The webhook source end to end: a real listener, real TCP clients and a real app consuming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onestep_core::{
    AppHandle, Envelope, MaxAttempts, OneStepApp, Resource, Source, Task, TaskContext, TaskError,
};
use onestep_http::client::request;
use onestep_http::webhook::{
    BearerAuth, Parser, WebhookOptions, WebhookResponse, WebhookServers, WebhookSource,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinHandle;

/// Options on a free port with a short poll interval.
fn options(path: &str) -> WebhookOptions {
    let mut o = WebhookOptions::new(path);
    o.port = 0;
    o.poll_interval = Duration::from_millis(20);
    o
}

async fn opened(options: WebhookOptions) -> Arc<WebhookSource> {
    opened_on(&WebhookServers::new(), options).await
}

/// An open source on `servers`, sharing their listeners.
async fn opened_on(servers: &WebhookServers, options: WebhookOptions) -> Arc<WebhookSource> {
    let source = Arc::new(servers.source(options).unwrap());
    source.open().await.unwrap();
    source
}

/// An app with one task per source whose handler forwards every envelope it gets.
fn consume(
    sources: &[Arc<WebhookSource>],
) -> (
    AppHandle,
    JoinHandle<onestep_core::Result<()>>,
    UnboundedReceiver<Envelope>,
) {
    let (tx, rx) = unbounded_channel();
    let mut builder =
        OneStepApp::builder("webhooks").shutdown_timeout(Some(Duration::from_millis(500)));
    for (i, source) in sources.iter().enumerate() {
        let tx = tx.clone();
        builder = builder.task(
            Task::new(format!("hook{i}"))
                .source(source.clone())
                .handler(move |ctx: TaskContext, _event: Value| {
                    let tx = tx.clone();
                    async move {
                        tx.send(ctx.envelope().clone()).unwrap();
                        Ok::<_, TaskError>(())
                    }
                }),
        );
    }
    let app = builder.build().unwrap();
    let handle = app.handle();
    (handle, tokio::spawn(async move { app.serve().await }), rx)
}

async fn stop(app: AppHandle, serve: JoinHandle<onestep_core::Result<()>>) {
    app.request_shutdown();
    serve.await.unwrap().unwrap();
}

/// Waits until the app has opened `source`; returns its address.
async fn address(source: &WebhookSource) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(addr) = source.local_addr() {
            return addr;
        }
        assert!(Instant::now() < deadline, "the app never opened the source");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn next(rx: &mut UnboundedReceiver<Envelope>) -> Envelope {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no delivery within 10 s")
        .expect("the app stopped")
}

/// A raw HTTP exchange: status, headers (lowercase names) and body text.
#[derive(Debug)]
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Sends `bytes` as they are and reads the answer until the server closes.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("no answer within 10 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw {
        status,
        headers,
        body: body.to_string(),
    }
}

/// One request with a `Content-Length` body.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Raw {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    exchange(addr, &bytes).await
}

#[tokio::test]
async fn json_body_reaches_the_handler_with_request_details_and_source_meta() {
    let source = Arc::new(WebhookSource::new(options("/hooks/orders/")).unwrap());
    let (app, serve, mut rx) = consume(std::slice::from_ref(&source));
    let addr = address(&source).await;
    assert_eq!(source.url().unwrap(), format!("http://{addr}/hooks/orders"));

    let reply = request(
        &addr.to_string(),
        "POST",
        "/hooks/orders?tag=a&many=1&many=2&blank=",
        &[("X-Signature", "abc")],
        Some(&json!({"order": 42, "items": ["a", "b"]})),
    )
    .await
    .unwrap();
    assert_eq!((reply.status, reply.body), (202, json!({"accepted": true})));

    let envelope = next(&mut rx).await;
    assert_eq!(envelope.attempts, 0);
    assert_eq!(
        Value::Object(envelope.meta),
        json!({"source": "webhook:/hooks/orders"})
    );
    let event = envelope.body;
    assert_eq!(event["body"], json!({"order": 42, "items": ["a", "b"]}));
    assert_eq!(event["method"], "POST");
    assert_eq!(event["path"], "/hooks/orders");
    assert_eq!(
        event["query"],
        json!({"tag": "a", "many": ["1", "2"], "blank": ""})
    );
    assert_eq!(event["headers"]["x-signature"], "abc");
    assert_eq!(event["headers"]["content-type"], "application/json");
    assert_eq!(event["client"]["host"], "127.0.0.1");
    assert!(event["client"]["port"].as_u64().unwrap() > 0);
    let received_at = event["received_at"].as_str().unwrap();
    assert!(received_at.ends_with("+00:00"), "{received_at}");
    time::OffsetDateTime::parse(received_at, &time::format_description::well_known::Rfc3339)
        .unwrap();

    stop(app, serve).await;
    assert_eq!(source.local_addr(), None, "closed by the app");
}

/// (path, request headers, request body, expected event body).
type ParseCase = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [u8],
    Value,
);

#[tokio::test]
async fn form_text_and_raw_bodies_are_parsed_by_content_type_or_by_the_chosen_parser() {
    let servers = WebhookServers::new();
    let auto = opened_on(&servers, options("/auto")).await;
    let port = auto.local_addr().unwrap().port();
    let shared = |path: &str, parser: Parser| {
        let mut o = options(path);
        o.port = port;
        o.parser = parser;
        o
    };
    let form = opened_on(&servers, shared("/form", Parser::Form)).await;
    let text = opened_on(&servers, shared("/text", Parser::Text)).await;
    let raw = opened_on(&servers, shared("/raw", Parser::Raw)).await;
    let (app, serve, mut rx) = consume(&[auto.clone(), form.clone(), text.clone(), raw.clone()]);
    let addr = auto.local_addr().unwrap();
    const FORM_TYPE: &[(&str, &str)] = &[("Content-Type", "application/x-www-form-urlencoded")];

    let cases: [ParseCase; 8] = [
        (
            "/auto",
            FORM_TYPE,
            b"a=1&b=2&b=3&c=x+y%21",
            json!({"a": "1", "b": ["2", "3"], "c": "x y!"}),
        ),
        (
            "/auto",
            &[("Content-Type", "text/plain; charset=utf-8")],
            b"hello \xff",
            json!("hello \u{fffd}"),
        ),
        (
            "/auto",
            &[("Content-Type", "application/vnd.api+json")],
            br#"{"x": 1}"#,
            json!({"x": 1}),
        ),
        (
            "/auto",
            &[("Content-Type", "application/octet-stream")],
            b"plain",
            json!("plain"),
        ),
        (
            "/auto",
            &[("Content-Type", "application/octet-stream")],
            b"\x00\xff\x10",
            json!({"$onestep": {"type": "bytes", "value": "AP8Q"}}),
        ),
        (
            "/form",
            &[("Content-Type", "application/json")],
            b"k=v",
            json!({"k": "v"}),
        ),
        (
            "/text",
            &[("Content-Type", "application/json")],
            br#"{"not": "parsed"}"#,
            json!(r#"{"not": "parsed"}"#),
        ),
        (
            "/raw",
            &[("Content-Type", "text/plain")],
            b"hi",
            json!({"$onestep": {"type": "bytes", "value": "aGk="}}),
        ),
    ];
    for (path, headers, body, expected) in cases {
        let answer = send(addr, "POST", path, headers, body).await;
        assert_eq!(answer.status, 202, "{path}: {answer:?}");
        let envelope = next(&mut rx).await;
        assert_eq!(envelope.body["body"], expected, "{path} {headers:?}");
        assert_eq!(envelope.meta["source"], format!("webhook:{path}"));
    }

    let empty = send(addr, "POST", "/auto", &[], b"").await;
    assert_eq!(empty.status, 202);
    assert_eq!(
        next(&mut rx).await.body["body"],
        Value::Null,
        "an empty body is null"
    );

    let not_utf8 = send(addr, "POST", "/form", FORM_TYPE, b"a=\xff").await;
    assert_eq!(
        (not_utf8.status, not_utf8.json()["error"].clone()),
        (400, json!("invalid_form"))
    );
    stop(app, serve).await;
}

#[tokio::test]
async fn bearer_auth_rejects_missing_or_wrong_tokens_with_a_challenge() {
    let mut o = options("/secure");
    o.auth = Some(BearerAuth {
        realm: "github".into(),
        ..BearerAuth::new("s3cret")
    });
    let source = Arc::new(WebhookSource::new(o).unwrap());
    let (app, serve, mut rx) = consume(std::slice::from_ref(&source));
    let addr = address(&source).await;

    for presented in [
        None,
        Some("Bearer nope"),
        Some("Basic s3cret"),
        Some("Bearer"),
        Some("s3cret"),
    ] {
        let headers: Vec<(&str, &str)> = presented
            .map(|p| ("Authorization", p))
            .into_iter()
            .collect();
        let answer = send(addr, "POST", "/secure", &headers, b"").await;
        assert_eq!(answer.status, 401, "{presented:?}");
        assert_eq!(
            answer.header("www-authenticate"),
            Some(r#"Bearer realm="github""#)
        );
        assert_eq!(answer.json()["error"], "unauthorized");
        assert_eq!(answer.json()["detail"], "missing or invalid Bearer token");
    }

    let ok = request(
        &addr.to_string(),
        "POST",
        "/secure",
        &[("Authorization", "bearer s3cret")],
        Some(&json!({"ok": true})),
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 202, "the scheme is case-insensitive");
    let event = next(&mut rx).await.body;
    assert_eq!(event["body"], json!({"ok": true}));
    assert_eq!(
        event["headers"]["authorization"], "[redacted]",
        "the token does not travel with the message"
    );
    assert!(rx.try_recv().is_err(), "rejected requests were not queued");
    stop(app, serve).await;
}

#[tokio::test]
async fn wrong_method_is_405_with_allow_and_unknown_path_is_404() {
    let mut o = options("/hooks");
    o.methods = vec!["post".into(), "PUT".into()];
    let source = opened(o).await;
    assert_eq!(source.options().methods, ["POST", "PUT"]);
    let addr = source.local_addr().unwrap();

    let wrong = send(addr, "GET", "/hooks", &[], b"").await;
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.header("allow"), Some("POST, PUT"));
    assert_eq!(wrong.json()["error"], "method_not_allowed");

    let missing = send(addr, "POST", "/elsewhere", &[], b"").await;
    assert_eq!(
        (missing.status, missing.json()["error"].clone()),
        (404, json!("not_found"))
    );

    let trailing = send(addr, "PUT", "/hooks/", &[], b"x").await;
    assert_eq!(
        trailing.status, 202,
        "a trailing slash reaches the same route"
    );
    assert_eq!(source.len(), 1);
    source.close().await.unwrap();
}

#[tokio::test]
async fn bodies_over_max_body_bytes_are_413_declared_or_streamed() {
    let mut o = options("/small");
    o.max_body_bytes = 16;
    let source = opened(o).await;
    let addr = source.local_addr().unwrap();

    let declared = exchange(
        addr,
        b"POST /small HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 17\r\n\r\n",
    )
    .await;
    assert_eq!(
        declared.status, 413,
        "rejected from the header, before any body byte"
    );
    assert_eq!(declared.json()["error"], "payload_too_large");
    assert_eq!(declared.json()["detail"], "request body exceeds 16 bytes");

    let chunked = exchange(
        addr,
        b"POST /small HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n\
          a\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(chunked.status, 413, "{chunked:?}");

    let fits = send(addr, "POST", "/small", &[], b"0123456789abcdef").await;
    assert_eq!(fits.status, 202, "exactly max_body_bytes is accepted");
    assert_eq!(source.len(), 1);
    source.close().await.unwrap();
}

#[tokio::test]
async fn malformed_json_is_400_with_parser_json_or_a_json_content_type() {
    let servers = WebhookServers::new();
    let strict = {
        let mut o = options("/strict");
        o.parser = Parser::Json;
        opened_on(&servers, o).await
    };
    let addr = strict.local_addr().unwrap();
    let bad = send(
        addr,
        "POST",
        "/strict",
        &[("Content-Type", "text/plain")],
        br#"{"a":"#,
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "invalid_json");
    assert!(
        bad.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("malformed JSON body")
    );
    let good = send(
        addr,
        "POST",
        "/strict",
        &[("Content-Type", "text/plain")],
        b"[1, 2]",
    )
    .await;
    assert_eq!(good.status, 202, "parser json ignores the content type");

    let mut o = options("/auto");
    o.port = addr.port();
    let auto = opened_on(&servers, o).await;
    let bad = send(
        addr,
        "POST",
        "/auto",
        &[("Content-Type", "application/json")],
        b"nope",
    )
    .await;
    assert_eq!(
        (bad.status, bad.json()["error"].clone()),
        (400, json!("invalid_json"))
    );

    assert_eq!(
        (strict.len(), auto.len()),
        (1, 0),
        "only the good request was queued"
    );
    let fetched = strict.fetch(10).await.unwrap();
    assert_eq!(fetched[0].envelope().body["body"], json!([1, 2]));
    auto.close().await.unwrap();
    strict.close().await.unwrap();
}

#[tokio::test]
async fn a_full_queue_answers_503_until_a_fetch_makes_room() {
    let mut o = options("/busy");
    o.queue_maxsize = 2;
    let source = opened(o).await;
    let addr = source.local_addr().unwrap();

    for n in 0..2 {
        assert_eq!(
            send(addr, "POST", "/busy", &[], format!("{n}").as_bytes())
                .await
                .status,
            202
        );
    }
    let full = send(addr, "POST", "/busy", &[], b"2").await;
    assert_eq!(full.status, 503);
    assert_eq!(full.header("retry-after"), Some("1"));
    assert_eq!(full.json()["error"], "queue_full");
    assert_eq!(source.len(), 2);

    let mut first = source.fetch(1).await.unwrap().pop().unwrap();
    assert_eq!(first.envelope().body["body"], "0");
    assert_eq!(send(addr, "POST", "/busy", &[], b"3").await.status, 202);

    first.retry(None).await.unwrap();
    assert_eq!(source.len(), 3, "a retry is queued even over the limit");
    assert_eq!(send(addr, "POST", "/busy", &[], b"4").await.status, 503);

    let bodies: Vec<Value> = source
        .fetch(10)
        .await
        .unwrap()
        .iter()
        .map(|d| d.envelope().body["body"].clone())
        .collect();
    assert_eq!(bodies, [json!("1"), json!("3"), json!("0")]);
    source.close().await.unwrap();
}

#[tokio::test]
async fn two_sources_share_one_port_with_different_paths() {
    let servers = WebhookServers::new();
    let first = opened_on(&servers, options("/a")).await;
    let addr = first.local_addr().unwrap();
    let mut o = options("/b");
    o.port = addr.port();
    o.name = Some("hook-b".into());
    let second = Arc::new(servers.source(o).unwrap());
    let (app, serve, mut rx) = consume(&[first.clone(), second.clone()]);
    assert_eq!(
        address(&second).await,
        addr,
        "the second source joined the listener"
    );

    assert_eq!(send(addr, "POST", "/a", &[], b"for a").await.status, 202);
    assert_eq!(send(addr, "POST", "/b", &[], b"for b").await.status, 202);
    let mut got: Vec<(Value, Value)> = Vec::new();
    for _ in 0..2 {
        let e = next(&mut rx).await;
        got.push((e.meta["source"].clone(), e.body["body"].clone()));
    }
    got.sort_by_key(|(s, _)| s.to_string());
    assert_eq!(
        got,
        [
            (json!("hook-b"), json!("for b")),
            (json!("webhook:/a"), json!("for a"))
        ]
    );

    stop(app, serve).await;
    tokio::net::TcpListener::bind(addr)
        .await
        .expect("the port is free once both sources closed");
}

#[tokio::test]
async fn closing_one_source_keeps_the_server_for_the_others_and_the_last_frees_the_port() {
    let servers = WebhookServers::new();
    let first = opened_on(&servers, options("/one")).await;
    let addr = first.local_addr().unwrap();
    let mut o = options("/two");
    o.port = addr.port();
    let second = opened_on(&servers, o).await;

    first.close().await.unwrap();
    assert_eq!(first.local_addr(), None);
    assert_eq!(send(addr, "POST", "/one", &[], b"").await.status, 404);
    assert_eq!(send(addr, "POST", "/two", &[], b"").await.status, 202);

    second.close().await.unwrap();
    second.close().await.unwrap(); // closing twice is harmless
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the last close releases the port");
    drop(listener);

    // The port can be served again, by a source naming it explicitly.
    let mut o = options("/again");
    o.port = addr.port();
    let again = opened(o).await;
    assert_eq!(again.local_addr(), Some(addr));
    assert_eq!(send(addr, "POST", "/again", &[], b"").await.status, 202);
    again.close().await.unwrap();
}

#[tokio::test]
async fn a_second_source_for_the_same_path_and_method_fails_to_open() {
    let servers = WebhookServers::new();
    let first = opened_on(&servers, options("/dup")).await;
    let port = first.local_addr().unwrap().port();
    let mut o = options("/dup");
    o.port = port;
    o.name = Some("intruder".into());
    let clash = servers.source(o).unwrap();
    let err = clash.open().await.unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "duplicate webhook route for POST /dup on 127.0.0.1:{port}"
        )),
        "{err}"
    );
    assert_eq!(clash.local_addr(), None);

    let mut o = options("/dup");
    o.port = port;
    o.methods = vec!["PUT".into()];
    let put = opened_on(&servers, o).await;
    let addr = put.local_addr().unwrap();
    assert_eq!(send(addr, "PUT", "/dup", &[], b"").await.status, 202);
    assert_eq!(
        send(addr, "GET", "/dup", &[], b"").await.header("allow"),
        Some("POST, PUT")
    );
    assert_eq!((first.len(), put.len()), (0, 1));
    first.close().await.unwrap();
    put.close().await.unwrap();
}

#[tokio::test]
async fn a_taken_port_fails_open_with_a_connector_error() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut o = options("/x");
    o.port = taken.local_addr().unwrap().port();
    let err = WebhookSource::new(o).unwrap().open().await.unwrap_err();
    assert!(
        matches!(&err, onestep_core::Error::Connector(c) if !c.is_retryable()),
        "{err:?}"
    );
    assert!(err.to_string().contains("is already in use"), "{err}");
}

#[tokio::test]
async fn sources_built_apart_do_not_share_a_port_and_say_how_to() {
    let first = opened(options("/a")).await;
    let mut o = options("/b");
    o.port = first.local_addr().unwrap().port();
    let err = WebhookSource::new(o).unwrap().open().await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("is already in use"), "{text}");
    assert!(text.contains("built from one WebhookServers"), "{text}");
    first.close().await.unwrap();
}

#[tokio::test]
async fn the_listener_answers_a_slow_request_head_408_within_its_limits() {
    let limits = onestep_http::server::ServerLimits::default()
        .header_timeout(Duration::from_millis(300))
        .unwrap();
    let servers = WebhookServers::with_limits(limits);
    let source = opened_on(&servers, options("/slow")).await;
    let addr = source.local_addr().unwrap();
    let answer = exchange(addr, b"POST /slow HTTP/1.1\r\nhost: x\r\n").await;
    assert_eq!(answer.status, 408, "{}", answer.body);
    assert_eq!(servers.counters().header_timeouts(), 1);
    assert_eq!(send(addr, "POST", "/slow", &[], b"{}").await.status, 202);
    assert_eq!(source.len(), 1, "the slow head queued nothing");
    source.close().await.unwrap();
}

#[tokio::test]
async fn a_custom_response_is_sent_for_accepted_requests() {
    let mut o = options("/custom");
    o.response = WebhookResponse {
        status_code: 200,
        body: json!("ok"),
        headers: [("X-Hook".to_string(), "yes".to_string())].into(),
    };
    let source = opened(o).await;
    let answer = send(source.local_addr().unwrap(), "POST", "/custom", &[], b"{}").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "ok");
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(answer.header("x-hook"), Some("yes"));
    source.close().await.unwrap();
}

#[tokio::test]
async fn retry_requeues_after_its_delay_and_release_requeues_unchanged() {
    let source = opened(options("/retry")).await;
    let addr = source.local_addr().unwrap();
    assert_eq!(send(addr, "POST", "/retry", &[], b"job").await.status, 202);

    let mut delivery = source.fetch(1).await.unwrap().pop().unwrap();
    let started = Instant::now();
    delivery
        .retry(Some(Duration::from_millis(300)))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "retry does not hold the slot"
    );
    assert_eq!(source.len(), 1);
    assert!(
        source.fetch(1).await.unwrap().is_empty(),
        "not due before its delay"
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let mut again = source.fetch(1).await.unwrap().pop().unwrap();
    assert_eq!(again.envelope().attempts, 1);
    assert_eq!(again.envelope().body["body"], "job");

    again.release_unstarted().await.unwrap();
    let mut released = source.fetch(1).await.unwrap().pop().unwrap();
    assert_eq!(
        released.envelope().attempts,
        1,
        "a release is not an attempt"
    );
    released.ack().await.unwrap();
    assert!(source.is_empty(), "ack drops the message");
    source.close().await.unwrap();
}

#[tokio::test]
async fn a_failed_attempt_is_retried_by_the_app_after_its_delay() {
    let source = Arc::new(WebhookSource::new(options("/flaky")).unwrap());
    let (tx, mut rx) = unbounded_channel();
    let app = OneStepApp::builder("flaky")
        .task(
            Task::new("flaky")
                .source(source.clone())
                .retry(
                    MaxAttempts::new(2)
                        .unwrap()
                        .with_delay(Duration::from_millis(100)),
                )
                .handler(move |ctx: TaskContext, _event: Value| {
                    let tx = tx.clone();
                    async move {
                        tx.send(ctx.attempts()).unwrap();
                        if ctx.attempts() == 0 {
                            return Err(TaskError::msg("first attempt fails"));
                        }
                        Ok(())
                    }
                }),
        )
        .build()
        .unwrap();
    let handle = app.handle();
    let serve = tokio::spawn(async move { app.serve().await });
    let addr = address(&source).await;
    assert_eq!(send(addr, "POST", "/flaky", &[], b"x").await.status, 202);
    assert_eq!(next_attempt(&mut rx).await, 0);
    assert_eq!(next_attempt(&mut rx).await, 1);
    stop(handle, serve).await;
}

async fn next_attempt(rx: &mut UnboundedReceiver<u32>) -> u32 {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no attempt within 10 s")
        .expect("the app stopped")
}

/// Makes valid options invalid.
type Change = Box<dyn Fn(&mut WebhookOptions)>;

#[test]
fn invalid_options_fail_at_construction_with_the_field_named() {
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|o| o.path = "hooks".into()),
            r#"path must start with '/', got "hooks""#,
        ),
        (Box::new(|o| o.methods.clear()), "methods must not be empty"),
        (
            Box::new(|o| o.methods = vec!["POST".into(), "FETCH".into()]),
            r#"methods[1] must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, got "FETCH""#,
        ),
        (Box::new(|o| o.host = " ".into()), "host must not be empty"),
        (
            Box::new(|o| o.max_body_bytes = 0),
            "max_body_bytes must be >= 1, got 0",
        ),
        (
            Box::new(|o| o.queue_maxsize = 0),
            "queue_maxsize must be >= 1, got 0",
        ),
        (
            Box::new(|o| o.batch_size = 0),
            "batch_size must be >= 1, got 0",
        ),
        (
            Box::new(|o| o.poll_interval = Duration::ZERO),
            "poll_interval must be longer than 0 s and at most 86400 s, got 0 s",
        ),
        (
            Box::new(|o| o.read_timeout = Duration::from_secs(86_401)),
            "read_timeout must be longer than 0 s and at most 86400 s, got 86401 s",
        ),
        (
            Box::new(|o| o.auth = Some(BearerAuth::new(""))),
            "auth.token must not be empty",
        ),
        (
            Box::new(|o| {
                o.auth = Some(BearerAuth {
                    realm: "a\"b".into(),
                    ..BearerAuth::new("t")
                })
            }),
            r#"auth.realm must be visible ASCII without quotes or backslashes, got "a\"b""#,
        ),
        (
            Box::new(|o| o.response.status_code = 42),
            "response.status_code must be between 200 and 599, got 42",
        ),
        (
            Box::new(|o| {
                o.response.headers.insert("bad name".into(), "x".into());
            }),
            r#"response.headers["bad name"] is not a valid header name"#,
        ),
    ];
    for (change, message) in cases {
        let mut o = WebhookOptions::new("/ok");
        change(&mut o);
        let err = WebhookSource::new(o).err().expect(message);
        assert_eq!(err.to_string(), message);
    }
    assert_eq!(
        WebhookOptions::new("/ok")
            .validate("resources.hooks.")
            .map_err(|e| e.to_string()),
        Ok(())
    );
    let mut o = WebhookOptions::new("/ok");
    o.batch_size = 0;
    assert_eq!(
        o.validate("resources.hooks.").unwrap_err().to_string(),
        "resources.hooks.batch_size must be >= 1, got 0"
    );
    assert_eq!(
        "bytes".parse::<Parser>().unwrap_err().to_string(),
        r#"parser must be one of auto, form, json, raw, text, got "bytes""#
    );
    assert_eq!("form".parse::<Parser>().unwrap(), Parser::Form);
}

#[test]
fn defaults_follow_the_reference_and_paths_are_normalised() {
    let source = WebhookSource::new(WebhookOptions::new("/github/")).unwrap();
    assert_eq!(source.name(), "webhook:/github");
    let o = source.options();
    assert_eq!(
        (o.path.as_str(), o.methods.clone()),
        ("/github", vec!["POST".to_string()])
    );
    assert_eq!(
        (o.host.as_str(), o.port, o.parser),
        ("127.0.0.1", 8080, Parser::Auto)
    );
    assert_eq!(
        (
            o.max_body_bytes,
            o.read_timeout,
            o.queue_maxsize,
            o.batch_size,
            o.poll_interval
        ),
        (
            1024 * 1024,
            Duration::from_secs(5),
            1000,
            100,
            Duration::from_millis(100)
        )
    );
    assert_eq!(o.response, WebhookResponse::default());
    assert_eq!(
        (o.response.status_code, o.response.body.clone()),
        (202, json!({"accepted": true}))
    );
    assert_eq!(source.batch_size(), 100);
    assert_eq!(source.poll_interval(), Duration::from_millis(100));
    assert_eq!(source.local_addr(), None);
    assert_eq!(source.describe()["type"], "webhook");
    assert!(
        !format!("{:?}", BearerAuth::new("s3cret")).contains("s3cret"),
        "Debug hides the token"
    );
}

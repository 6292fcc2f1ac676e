//! Clients that hold connections instead of sending requests: thousands of slow or silent
//! connections (loopback only, bounded), idle keep-alive connections, more connections than the
//! limit, more requests than the in-flight limit. The server keeps answering everybody else,
//! closes what the limits say, logs it, and its memory goes back down.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{call, get, submit_json};
use super::{Server, Store};

/// Slow connections opened at once: far beyond what a server without limits survives for long,
/// well within the test machine's open-file limit.
const SLOW: usize = 2000;

/// The resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Reads until the server closes the connection (or `within` passes); what it sent.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(received)
}

/// The status and the JSON body of a raw answer.
fn status_and_detail(raw: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let detail = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (status, head.to_ascii_lowercase(), detail)
}

async fn healthy(addr: &str) -> (u16, Duration) {
    let started = Instant::now();
    let answer = call(addr, &get("/healthz")).await;
    (answer.status, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_slow_connections_leave_the_api_answering_and_are_closed_in_time() {
    let store = Store::sqlite();
    let mut server = Server::start_with(
        &store,
        "slow",
        &["hello"],
        &["--header-timeout-s", "2", "--idle-timeout-s", "2"],
    );
    let addr = server.addr.clone();
    for i in 0..20 {
        assert_eq!(healthy(&addr).await.0, 200);
        let body = serde_json::json!({"task_name": "hello", "payload": {"warm": i}});
        assert_eq!(
            call(&addr, &submit_json(&format!("warm-{i}"), &body))
                .await
                .status,
            202
        );
    }
    let baseline = rss_kib(server.child.id());

    // Half send the start of a head and stop; half send nothing at all.
    let mut slow = Vec::with_capacity(SLOW);
    for i in 0..SLOW {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 0 {
            stream
                .write_all(b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: app")
                .await
                .unwrap();
        }
        slow.push(stream);
    }
    let (status, took) = healthy(&addr).await;
    assert_eq!(
        status, 200,
        "/healthz while {SLOW} slow connections are held"
    );
    let body = serde_json::json!({"task_name": "hello", "payload": {"during": true}});
    let submit = call(&addr, &submit_json("during-the-flood", &body)).await;
    assert_eq!(
        submit.status, 202,
        "a submit while they are held: {submit:?}"
    );
    let peak = rss_kib(server.child.id());
    println!("/healthz answered in {took:?} with {SLOW} slow connections held");

    // Every one of them is answered 408 and closed once the header timeout passes.
    let mut timed_out = 0;
    for stream in &mut slow {
        let raw = read_until_closed(stream, Duration::from_secs(10))
            .await
            .expect("the server closes a slow connection");
        let (status, head, detail) = status_and_detail(&raw);
        assert_eq!(status, 408, "{}", String::from_utf8_lossy(&raw));
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(detail.contains("did not arrive within 2 s"), "{detail}");
        timed_out += 1;
    }
    drop(slow);
    assert_eq!(timed_out, SLOW);
    // The allocator hands freed memory back within seconds (jemalloc's decay); wait up to 20 s
    // for the footprint to come back within 8 MiB of where it was.
    let closed = Instant::now();
    let mut after = rss_kib(server.child.id());
    while after > baseline + 8 * 1024 && closed.elapsed() < Duration::from_secs(20) {
        assert_eq!(healthy(&addr).await.0, 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = rss_kib(server.child.id());
    }
    println!(
        "server RSS: {baseline} KiB before, {peak} KiB with {SLOW} slow connections, {after} KiB \
         {:?} after they closed",
        closed.elapsed()
    );
    assert!(
        after <= baseline + 8 * 1024,
        "memory returns near its baseline: {baseline} KiB before, {peak} KiB at the peak, \
         {after} KiB 20 s after"
    );

    // A kept-alive connection that sends nothing more is closed after the idle timeout.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let rest = read_until_closed(&mut idle, Duration::from_secs(10))
        .await
        .expect("closed after the idle timeout");
    assert!(rest.is_empty(), "an idle close sends nothing: {rest:?}");

    assert_eq!(healthy(&addr).await.0, 200);
    server.assert_alive();
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("whose request head did not arrive in time (--header-timeout-s)"),
        "the timeouts are logged:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_get_503_with_retry_after() {
    let store = Store::sqlite();
    let mut server = Server::start_with(
        &store,
        "limits",
        &["hello"],
        &["--max-connections", "100", "--header-timeout-s", "3"],
    );
    let addr = server.addr.clone();
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Give the server time to take all hundred before the next ones arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut refused = 0;
    for _ in 0..20 {
        let mut extra = TcpStream::connect(&addr).await.unwrap();
        let raw = read_until_closed(&mut extra, Duration::from_secs(5))
            .await
            .expect("an extra connection is answered and closed");
        let (status, head, detail) = status_and_detail(&raw);
        assert_eq!(status, 503, "{}", String::from_utf8_lossy(&raw));
        assert!(head.contains("retry-after: 1"), "{head}");
        assert!(detail.contains("limit of 100 connections"), "{detail}");
        refused += 1;
    }
    assert_eq!(refused, 20);
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        healthy(&addr).await.0,
        200,
        "answers again once they are gone"
    );
    server.assert_alive();
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("connection limit reached"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_in_flight_limit_get_503_with_retry_after() {
    let store = Store::sqlite();
    let mut server = Server::start_with(&store, "busy", &["hello"], &["--max-in-flight", "1"]);
    let addr = server.addr.clone();
    // A submit whose body stops half way holds the one slot (the body timeout is 30 s).
    let mut holder = TcpStream::connect(&addr).await.unwrap();
    holder
        .write_all(
            b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Idempotency-Key: k\r\nContent-Length: 100\r\n\r\n{\"task_name\":",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = call(&addr, &get("/healthz")).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(
        answer.detail().contains("limit of 1 requests"),
        "{answer:?}"
    );
    drop(holder);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(healthy(&addr).await.0, 200);
    server.assert_alive();
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("in-flight limit reached"), "{log}");
}

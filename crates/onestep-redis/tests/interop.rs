#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! One Redis stream between the Python reference's `redis_stream` and this crate's: envelopes
//! a Python producer appended are consumed here with their body, metadata and attempts, and
//! the reverse; nothing is lost or changed. Python runs `tests/python/redis_interop.py` in the
//! reference virtualenv, which the test creates when it is missing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use onestep_core::{Envelope, Resource, Sink, Source};
use onestep_redis::{RedisConnector, RedisStream, RedisStreamOptions};
use serde_json::{Value, json};

fn url() -> String {
    std::env::var("ONESTEP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python/redis_interop.py")
        .display()
        .to_string()
}

fn python(args: &[&str]) -> String {
    let out = Command::new(onestep_testkit::reference::python())
        .arg(script())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn stream(name: &str) -> RedisStream {
    RedisStream::new(
        RedisConnector::new(&url()).unwrap(),
        RedisStreamOptions::new(name)
            .with_group("rust")
            .with_start_id("0")
            .with_poll_interval(Duration::from_millis(100)),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_share_one_stream_both_ways() {
    let name = format!("onestep-test:interop:{}", uuid::Uuid::new_v4().simple());
    // Python → Rust.
    python(&["send", &url(), &name, "5"]);
    let s = stream(&name);
    s.open().await.unwrap();
    let mut got = Vec::new();
    for _ in 0..50 {
        for mut d in s.fetch(10).await.unwrap() {
            let e = d.envelope();
            got.push((e.body.clone(), Value::Object(e.meta.clone()), e.attempts));
            d.ack().await.unwrap();
        }
        if got.len() >= 5 {
            break;
        }
    }
    let want: Vec<(Value, Value, u32)> = (1..=5)
        .map(|i| {
            (
                json!({"id": i, "text": "é✓"}),
                json!({"from": "python"}),
                i % 3,
            )
        })
        .collect();
    assert_eq!(got, want);

    // Rust → Python (a group of its own, from the start: it also sees Python's five).
    for i in 6..=8 {
        let mut envelope = Envelope::new(json!({"id": i, "nested": {"list": [1, 2.5, null]}}));
        envelope.meta.insert("from".into(), json!("rust"));
        envelope.attempts = 1;
        s.send(envelope).await.unwrap();
    }
    let lines = python(&["consume", &url(), &name, "py", "8"]);
    let read: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(read.len(), 8, "{lines}");
    assert_eq!(
        read[5],
        json!({"body": {"id": 6, "nested": {"list": [1, 2.5, null]}}, "meta": {"from": "rust"},
               "attempts": 1})
    );
    assert_eq!(read[0]["body"], json!({"id": 1, "text": "é✓"}));
}

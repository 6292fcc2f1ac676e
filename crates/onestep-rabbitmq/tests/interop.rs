#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! One RabbitMQ queue between the Python reference's `rabbitmq_queue` (onestep-mq) and this
//! crate's: envelopes a Python producer published are consumed here with their body, metadata
//! and attempts, and the reverse, including a copy this crate retried; both sides declare the
//! queue with the same arguments, which the broker accepts only if their types match. Python runs
//! `tests/python/rabbitmq_interop.py` in the reference virtualenv, which the test creates when
//! it is missing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use onestep_core::{Envelope, Resource, Sink, Source};
use onestep_rabbitmq::{RabbitMqConnector, RabbitMqQueue, RabbitMqQueueOptions};
use serde_json::{Map, Value, json};

fn url() -> String {
    std::env::var("ONESTEP_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn python(args: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/rabbitmq_interop.py");
    let out = Command::new(onestep_testkit::reference::python())
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn queue(name: &str) -> RabbitMqQueue {
    let mut args = Map::new();
    args.insert("x-expires".into(), json!(60_000));
    RabbitMqQueue::new(
        RabbitMqConnector::new(&url()).unwrap(),
        RabbitMqQueueOptions::new(name)
            .with_arguments(args)
            .with_poll_interval(Duration::from_millis(100)),
    )
    .unwrap()
}

async fn take(q: &RabbitMqQueue, n: usize) -> Vec<Box<dyn onestep_core::Delivery>> {
    let mut out = Vec::new();
    for _ in 0..100 {
        out.extend(q.fetch(n - out.len()).await.unwrap());
        if out.len() >= n {
            break;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_share_one_queue_both_ways() {
    let name = format!("onestep-test.interop.{}", uuid::Uuid::new_v4().simple());
    // Python → Rust.
    python(&["send", &url(), &name, "5"]);
    let q = queue(&name);
    q.open().await.unwrap();
    let mut got = Vec::new();
    for mut d in take(&q, 5).await {
        let e = d.envelope();
        got.push((e.body.clone(), Value::Object(e.meta.clone()), e.attempts));
        d.ack().await.unwrap();
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

    // Rust → Python: three sent, the first of them retried here first (a copy, attempts + 1).
    for i in 6..=8 {
        let mut envelope = Envelope::new(json!({"id": i, "nested": {"list": [1, 2.5, null]}}));
        envelope.meta.insert("from".into(), json!("rust"));
        envelope.attempts = 1;
        q.send(envelope).await.unwrap();
    }
    let mut first = take(&q, 1).await;
    assert_eq!(first[0].envelope().body["id"], json!(6));
    first[0].retry(None).await.unwrap();
    q.close().await.unwrap();
    let read = python(&["consume", &url(), &name, "3"]);
    let mut ids: Vec<i64> = read
        .iter()
        .map(|m| m["body"]["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [6, 7, 8], "{read:?}");
    let seven = read.iter().find(|m| m["body"]["id"] == json!(7)).unwrap();
    assert_eq!(
        *seven,
        json!({"body": {"id": 7, "nested": {"list": [1, 2.5, null]}}, "meta": {"from": "rust"},
               "attempts": 1})
    );
    let six = read.iter().find(|m| m["body"]["id"] == json!(6)).unwrap();
    assert_eq!(
        six["attempts"],
        json!(2),
        "the retried copy carries one more attempt"
    );

    // The reference's retry of a message Rust published requeues it unchanged.
    let q = queue(&name);
    q.send(Envelope::new(json!({"id": 9}))).await.unwrap();
    q.close().await.unwrap();
    let retried = python(&["retry", &url(), &name]);
    assert_eq!(retried.len(), 2);
    assert_eq!(retried[0], retried[1]);
    assert_eq!(retried[1]["body"], json!({"id": 9}));
}

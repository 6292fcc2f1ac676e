#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! One SQS queue between the Python reference's `sqs_queue` (onestep-sqs) and this crate's:
//! envelopes a Python producer sent are consumed here with their body (integers beyond 64 bits
//! included), metadata and attempts, and the reverse; a message retried here comes to Python
//! with its body unchanged, and one Python retried comes here with the receive counted. Python
//! runs `tests/python/sqs_interop.py` in the reference virtualenv, which the test creates when
//! it is missing.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use onestep_core::wire::{decode_envelope, encode_envelope};
use onestep_core::{Delivery, Envelope, Resource, Sink, Source};
use onestep_sqs::SqsQueue;
use serde_json::{Map, Value, json};
use support::{create_queue, endpoint, name, queue};

fn python(args: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/sqs_interop.py");
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

async fn take(q: &SqsQueue, n: usize) -> Vec<Box<dyn Delivery>> {
    let mut out = Vec::new();
    for _ in 0..30 {
        out.extend(q.fetch(n - out.len()).await.unwrap());
        if out.len() >= n {
            break;
        }
    }
    out
}

/// `meta` without the `sqs` entry each side's receive adds.
fn without_sqs(meta: &Map<String, Value>) -> Value {
    let mut meta = meta.clone();
    meta.remove("sqs");
    Value::Object(meta)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_share_one_queue_both_ways() {
    let url = create_queue(&name("interop"), 30).await;
    // Python → Rust.
    python(&["send", &endpoint(), &url, "5"]);
    // Byte for byte: what Python wrote is what this crate writes for the same envelope.
    let raw = support::client()
        .await
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(!raw.messages().is_empty());
    for message in raw.messages() {
        let body = message.body().unwrap();
        assert_eq!(encode_envelope(&decode_envelope(body.as_bytes())), body);
        assert!(body.is_ascii(), "json.dumps escapes non-ASCII: {body}");
    }
    let q = queue(&url, |o| o.with_deletes(10, Duration::ZERO));
    q.open().await.unwrap();
    let mut got = Vec::new();
    for mut d in take(&q, 5).await {
        let e = d.envelope();
        got.push((e.body.clone(), without_sqs(&e.meta), e.attempts));
        d.ack().await.unwrap();
    }
    got.sort_by_key(|(body, ..)| body["id"].as_i64());
    let big: Value = serde_json::from_str("1180591620717411303424").unwrap();
    let want: Vec<(Value, Value, u32)> = (1..=5)
        .map(|i| {
            (
                json!({"id": i, "text": "é✓", "big": big, "ratio": 0.1}),
                json!({"from": "python"}),
                // The body's attempts, plus the one receive of the byte check above.
                i % 3 + 1,
            )
        })
        .collect();
    assert_eq!(got, want);

    // Rust → Python: three sent, the first of them retried here first.
    for i in 6..=8 {
        let mut envelope = Envelope::new(json!({"id": i, "nested": {"list": [1, 2.5, null]}}));
        envelope.meta.insert("from".into(), json!("rust"));
        envelope.attempts = 1;
        q.send(envelope).await.unwrap();
    }
    let mut retried = None;
    while retried.is_none() {
        for mut d in take(&q, 1).await {
            if d.envelope().body["id"] == json!(6) {
                d.retry(None).await.unwrap();
                retried = Some(());
            } else {
                d.release_unstarted().await.unwrap();
            }
        }
    }
    q.close().await.unwrap();
    let read = python(&["consume", &endpoint(), &url, "3"]);
    let mut ids: Vec<i64> = read
        .iter()
        .map(|m| m["body"]["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [6, 7, 8], "{read:?}");
    for m in &read {
        let id = m["body"]["id"].as_i64().unwrap();
        assert_eq!(
            m["body"],
            json!({"id": id, "nested": {"list": [1, 2.5, null]}})
        );
        assert_eq!(
            without_sqs(m["meta"].as_object().unwrap()),
            json!({"from": "rust"})
        );
        assert_eq!(
            m["attempts"],
            json!(1),
            "the body's attempts, as Python counts them"
        );
    }

    // A message Python retried comes here with its receives counted (the body says 0).
    let q = queue(&url, |o| o.with_deletes(10, Duration::ZERO));
    q.send(Envelope::new(json!({"id": 9}))).await.unwrap();
    let py = python(&["retry", &endpoint(), &url]);
    assert_eq!(py.len(), 1);
    assert_eq!(py[0]["body"], json!({"id": 9}));
    assert_eq!(py[0]["attempts"], json!(0));
    let mut got = take(&q, 1).await;
    assert_eq!(got[0].envelope().body, json!({"id": 9}));
    assert_eq!(
        got[0].envelope().attempts,
        1,
        "one earlier receive, Python's"
    );
    got[0].ack().await.unwrap();
    q.close().await.unwrap();
}

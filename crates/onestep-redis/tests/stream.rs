#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `redis_stream` on a real Redis (`ONESTEP_REDIS_URL`, which `cargo xtask test` provides, else
//! the local default at 127.0.0.1:6379): the connector conformance kit, retries with their
//! attempts, fail, a crashed consumer's entries taken over, trimming and the wire format.

use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{Envelope, FailureInfo, FailureKind, Resource, Sink, Source, Stage, TaskError};
use onestep_redis::{RedisConnector, RedisStream, RedisStreamOptions};
use onestep_testkit::connector::SourceFactory;
use serde_json::{Value, json};

fn url() -> String {
    std::env::var("ONESTEP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn key(prefix: &str) -> String {
    format!("onestep-test:{prefix}:{}", uuid::Uuid::new_v4().simple())
}

fn stream(
    name: &str,
    options: impl FnOnce(RedisStreamOptions) -> RedisStreamOptions,
) -> RedisStream {
    let connector = RedisConnector::new(&url()).unwrap();
    let base = RedisStreamOptions::new(name)
        .with_group("tests")
        .with_start_id("0")
        .with_poll_interval(Duration::from_millis(100));
    RedisStream::new(connector, options(base)).unwrap()
}

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "Redis at {} does not answer ({e}); start one, set ONESTEP_REDIS_URL, or run \
                 `cargo xtask test`, which starts a throwaway server",
                url()
            )
        })
}

async fn pending(stream: &str, group: &str) -> i64 {
    let mut conn = redis().await;
    let summary: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(&mut conn)
        .await
        .unwrap();
    redis::from_redis_value(summary[0].clone()).unwrap()
}

struct Streams;

#[async_trait]
impl SourceFactory for Streams {
    type Source = RedisStream;

    async fn create(&self, messages: usize, consumers: usize) -> Vec<RedisStream> {
        let name = key("kit");
        let producer = stream(&name, |o| o);
        for i in 0..messages {
            producer
                .send(Envelope::new(json!({"id": i})))
                .await
                .unwrap();
        }
        // Consumers of one group, each under its own name.
        (0..consumers)
            .map(|i| stream(&name, |o| o.with_consumer(format!("c{i}"))))
            .collect()
    }

    fn id(&self, envelope: &Envelope) -> String {
        envelope.body["id"].to_string()
    }
}

onestep_testkit::connector_conformance!(Streams);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_carry_the_reference_envelope() {
    let name = key("wire");
    let s = stream(&name, |o| o);
    let mut envelope = Envelope::new(json!({"id": 1, "text": "é"}));
    envelope.meta.insert("trace".into(), json!("t-1"));
    envelope.attempts = 2;
    s.send(envelope).await.unwrap();
    let mut conn = redis().await;
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&name)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].1,
        [(
            "body".to_string(),
            r#"{"body": {"id": 1, "text": "\u00e9"}, "meta": {"trace": "t-1"}, "attempts": 2}"#
                .to_string()
        )]
    );
    // A foreign entry without a body field is delivered, its fields as the body.
    let _: String = redis::cmd("XADD")
        .arg(&name)
        .arg("*")
        .arg("kind")
        .arg("raw")
        .query_async(&mut conn)
        .await
        .unwrap();
    s.open().await.unwrap();
    let mut batch = s.fetch(10).await.unwrap();
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0].envelope().attempts, 2);
    assert_eq!(batch[0].envelope().meta["trace"], json!("t-1"));
    assert_eq!(batch[1].envelope().body, json!({"kind": "raw"}));
    for d in &mut batch {
        d.ack().await.unwrap();
    }
    assert_eq!(pending(&name, "tests").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_comes_again_with_one_more_attempt_and_a_fail_is_acked() {
    let name = key("retry");
    let s = stream(&name, |o| o);
    s.send(Envelope::new(json!({"id": 1}))).await.unwrap();
    s.send(Envelope::new(json!({"id": 2}))).await.unwrap();
    s.open().await.unwrap();
    let mut batch = s.fetch(10).await.unwrap();
    assert_eq!(batch.len(), 2);
    batch[0]
        .retry(Some(Duration::from_millis(300)))
        .await
        .unwrap();
    // Not before its delay.
    let early = s.fetch(10).await.unwrap();
    assert!(early.is_empty(), "delivered before its retry delay");
    tokio::time::sleep(Duration::from_millis(320)).await;
    let mut again = s.fetch(10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].envelope().body, json!({"id": 1}));
    assert_eq!(again[0].envelope().attempts, 1);
    // Both entries are still pending in Redis until their outcome.
    assert_eq!(pending(&name, "tests").await, 2);
    let failure = FailureInfo::from_error(
        FailureKind::Error,
        Stage::Handler,
        &TaskError::new("Boom", "boom"),
    );
    again[0].fail(&failure).await.unwrap();
    batch[1].ack().await.unwrap();
    assert_eq!(pending(&name, "tests").await, 0);
    assert!(s.fetch(10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_consumer_s_entries_are_taken_over_after_the_idle_time() {
    let name = key("crash");
    let producer = stream(&name, |o| o);
    for i in 1..=5 {
        producer
            .send(Envelope::new(json!({"id": i})))
            .await
            .unwrap();
    }
    let idle = Duration::from_millis(400);
    // A consumer (of any implementation) reads three entries and dies before finishing them.
    let mut conn = redis().await;
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&name)
        .arg("tests")
        .arg("0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("tests")
        .arg("dead")
        .arg("COUNT")
        .arg(3)
        .arg("STREAMS")
        .arg(&name)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending(&name, "tests").await, 3);
    let live = stream(&name, |o| o.with_consumer("live").with_reclaim_idle(idle));
    live.open().await.unwrap();
    let mut ids = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ids.len() < 5 && tokio::time::Instant::now() < deadline {
        for mut d in live.fetch(10).await.unwrap() {
            ids.push(d.envelope().body["id"].as_i64().unwrap());
            d.ack().await.unwrap();
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 4, 5], "the dead consumer's three came back");
    assert_eq!(pending(&name, "tests").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_keeps_its_entry() {
    let name = key("slow");
    let idle = Duration::from_millis(300);
    let a = stream(&name, |o| o.with_consumer("a").with_reclaim_idle(idle));
    let b = stream(&name, |o| o.with_consumer("b").with_reclaim_idle(idle));
    a.send(Envelope::new(json!({"id": 1}))).await.unwrap();
    a.open().await.unwrap();
    b.open().await.unwrap();
    let mut held = a.fetch(1).await.unwrap();
    assert_eq!(held.len(), 1);
    // Longer than the idle time: a keeps resetting it, so b never takes it.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1200);
    while tokio::time::Instant::now() < deadline {
        assert!(b.fetch(10).await.unwrap().is_empty(), "b took a live entry");
    }
    held[0].ack().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxlen_trims_and_bad_options_name_their_field() {
    let name = key("trim");
    let s = stream(&name, |o| o.with_maxlen(3, false));
    for i in 0..10 {
        s.send(Envelope::new(json!({"id": i}))).await.unwrap();
    }
    let mut conn = redis().await;
    let len: i64 = redis::cmd("XLEN")
        .arg(&name)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 3);
    let connector = RedisConnector::new(&url()).unwrap();
    let err = RedisStream::new(connector, RedisStreamOptions::new("x").with_batch_size(0))
        .expect_err("batch_size 0");
    assert!(err.to_string().contains("batch_size"), "{err}");
    let value: Value = json!(null);
    assert!(value.is_null());
}

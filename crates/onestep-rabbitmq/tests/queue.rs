#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `rabbitmq_queue` on a real RabbitMQ (`ONESTEP_RABBITMQ_URL`, which `cargo xtask test`
//! provides, else the local default at 127.0.0.1:5672 as guest): the connector conformance kit,
//! the wire format, retries with their attempts, fail to a dead-letter queue, unstarted
//! messages handed back, exchanges and bindings, and declarations that contradict the broker's.
//! Every queue is new and expires a minute after its last use.

use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use onestep_core::{
    ConnectorErrorKind, Envelope, Error, FailureInfo, FailureKind, Resource, Sink, Source, Stage,
    TaskError,
};
use onestep_rabbitmq::{RabbitMqConnector, RabbitMqQueue, RabbitMqQueueOptions};
use onestep_testkit::connector::SourceFactory;
use serde_json::{Map, json};

fn url() -> String {
    std::env::var("ONESTEP_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn name(prefix: &str) -> String {
    format!("onestep-test.{prefix}.{}", uuid::Uuid::new_v4().simple())
}

fn expiring() -> Map<String, serde_json::Value> {
    let mut args = Map::new();
    args.insert("x-expires".into(), json!(60_000));
    args
}

fn queue(
    queue: &str,
    options: impl FnOnce(RabbitMqQueueOptions) -> RabbitMqQueueOptions,
) -> RabbitMqQueue {
    let connector = RabbitMqConnector::new(&url()).unwrap();
    let base = RabbitMqQueueOptions::new(queue)
        .with_arguments(expiring())
        .with_poll_interval(Duration::from_millis(100));
    RabbitMqQueue::new(connector, options(base)).unwrap()
}

async fn connection() -> Connection {
    Connection::connect(&url(), ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "RabbitMQ at {} does not answer ({e}); start one, set ONESTEP_RABBITMQ_URL, or \
                 run `cargo xtask test`, which starts a throwaway broker",
                onestep_rabbitmq::connector::redact(&url())
            )
        })
}

/// Messages ready in `queue` (not counting unacknowledged ones).
async fn ready(queue: &str) -> u32 {
    let conn = connection().await;
    let channel = conn.create_channel().await.unwrap();
    let q = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = conn.close(200, "".into()).await;
    q.message_count()
}

/// Fetches until `count` deliveries came or `within` passed.
async fn take(
    source: &RabbitMqQueue,
    count: usize,
    within: Duration,
) -> Vec<Box<dyn onestep_core::Delivery>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < count && tokio::time::Instant::now() < deadline {
        let batch = source.fetch(count - out.len()).await.unwrap();
        if batch.is_empty() {
            source.wait_ready(Duration::from_millis(50)).await;
        }
        out.extend(batch);
    }
    out
}

struct Queues;

#[async_trait]
impl SourceFactory for Queues {
    type Source = RabbitMqQueue;

    async fn create(&self, messages: usize, consumers: usize) -> Vec<RabbitMqQueue> {
        let q = name("kit");
        let producer = queue(&q, |o| o);
        for i in 0..messages {
            producer
                .send(Envelope::new(json!({"id": i})))
                .await
                .unwrap();
        }
        producer.close().await.unwrap();
        (0..consumers).map(|_| queue(&q, |o| o)).collect()
    }

    fn id(&self, envelope: &Envelope) -> String {
        envelope.body["id"].to_string()
    }
}

onestep_testkit::connector_conformance!(Queues);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_the_reference_envelope() {
    let q = name("wire");
    let s = queue(&q, |o| o);
    let mut envelope = Envelope::new(json!({"id": 1, "text": "é"}));
    envelope.meta.insert("trace".into(), json!("t-1"));
    envelope.attempts = 2;
    s.send(envelope).await.unwrap();

    let conn = connection().await;
    let channel = conn.create_channel().await.unwrap();
    let got = channel
        .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("one message");
    assert_eq!(
        String::from_utf8(got.delivery.data.clone()).unwrap(),
        r#"{"body": {"id": 1, "text": "\u00e9"}, "meta": {"trace": "t-1"}, "attempts": 2}"#
    );
    assert_eq!(
        got.delivery
            .properties
            .content_type()
            .as_ref()
            .map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(*got.delivery.properties.delivery_mode(), Some(2));

    // A foreign message that is not an envelope is delivered as the body itself.
    channel
        .basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            b"plain text",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    let mut batch = take(&s, 1, Duration::from_secs(5)).await;
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].envelope().body, json!("plain text"));
    batch[0].ack().await.unwrap();
    s.close().await.unwrap();
    assert_eq!(ready(&q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_comes_again_with_one_more_attempt_and_its_headers() {
    let q = name("retry");
    let s = queue(&q, |o| o);
    s.open().await.unwrap();
    let conn = connection().await;
    let channel = conn.create_channel().await.unwrap();
    let mut headers = FieldTable::default();
    headers.insert(
        "tenant".into(),
        lapin::types::AMQPValue::LongString("acme".into()),
    );
    channel
        .basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            br#"{"body": {"id": 1}, "meta": {}, "attempts": 0}"#,
            BasicProperties::default()
                .with_headers(headers.clone())
                .with_message_id("m-1".into()),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let mut first = take(&s, 1, Duration::from_secs(5)).await;
    assert_eq!(first.len(), 1);
    first[0]
        .retry(Some(Duration::from_millis(400)))
        .await
        .unwrap();
    let early = take(&s, 1, Duration::from_millis(250)).await;
    assert!(early.is_empty(), "delivered before its retry delay");
    let mut again = take(&s, 1, Duration::from_secs(5)).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].envelope().body, json!({"id": 1}));
    assert_eq!(again[0].envelope().attempts, 1);
    again[0].retry(None).await.unwrap();
    let mut third = take(&s, 1, Duration::from_secs(5)).await;
    assert_eq!(third[0].envelope().attempts, 2);
    third[0].ack().await.unwrap();
    s.close().await.unwrap();
    assert_eq!(
        ready(&q).await,
        0,
        "the originals were acked, not left behind"
    );
    let _ = conn.close(200, "".into()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_goes_to_the_dead_letter_queue() {
    let q = name("fail");
    let dlq = name("dlq");
    let dead = queue(&dlq, |o| o);
    dead.open().await.unwrap();
    let mut args = expiring();
    args.insert("x-dead-letter-exchange".into(), json!(""));
    args.insert("x-dead-letter-routing-key".into(), json!(dlq));
    let s = queue(&q, |o| o.with_arguments(args));
    s.send(Envelope::new(json!({"id": 9}))).await.unwrap();
    let mut batch = take(&s, 1, Duration::from_secs(5)).await;
    let failure = FailureInfo::from_error(
        FailureKind::Error,
        Stage::Handler,
        &TaskError::new("Boom", "boom"),
    );
    batch[0].fail(&failure).await.unwrap();
    let mut dead_letters = take(&dead, 1, Duration::from_secs(5)).await;
    assert_eq!(dead_letters.len(), 1);
    assert_eq!(dead_letters[0].envelope().body, json!({"id": 9}));
    dead_letters[0].ack().await.unwrap();
    s.close().await.unwrap();
    dead.close().await.unwrap();
    assert_eq!(ready(&q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstarted_messages_are_handed_back() {
    let q = name("unstarted");
    let a = queue(&q, |o| o.with_prefetch(10));
    for i in 0..6 {
        a.send(Envelope::new(json!({"id": i}))).await.unwrap();
    }
    let mut held = take(&a, 1, Duration::from_secs(5)).await;
    assert_eq!(held.len(), 1);
    // The broker pushed the rest to `a` (prefetch 10); handing them back frees them for `b`.
    a.wait_ready(Duration::from_millis(200)).await;
    a.return_unstarted().await.unwrap();
    let b = queue(&q, |o| o);
    let mut rest = take(&b, 5, Duration::from_secs(5)).await;
    assert_eq!(rest.len(), 5, "the five unstarted came to another consumer");
    for d in &mut rest {
        d.ack().await.unwrap();
    }
    held[0].ack().await.unwrap();
    b.close().await.unwrap();
    // `a` consumes again on its next fetch.
    a.send(Envelope::new(json!({"id": 6}))).await.unwrap();
    let mut next = take(&a, 1, Duration::from_secs(5)).await;
    assert_eq!(next[0].envelope().body, json!({"id": 6}));
    next[0].ack().await.unwrap();
    a.close().await.unwrap();
    assert_eq!(ready(&q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_route_by_key_and_fan_out() {
    let exchange = name("topic");
    let orders = name("orders");
    let all = name("all");
    let sink = queue(&orders, |o| {
        o.with_exchange(exchange.as_str(), "topic")
            .with_routing_key("orders.created")
            .with_durable(false)
    });
    let every = queue(&all, |o| {
        o.with_exchange(exchange.as_str(), "topic")
            .with_routing_key("orders.*")
            .with_durable(false)
    });
    every.open().await.unwrap();
    sink.send(Envelope::new(json!({"id": 1}))).await.unwrap();
    for source in [&sink, &every] {
        let mut got = take(source, 1, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].envelope().body, json!({"id": 1}));
        got[0].ack().await.unwrap();
        // A retried copy goes back to this queue only, not through the exchange.
    }
    sink.send(Envelope::new(json!({"id": 2}))).await.unwrap();
    let mut got = take(&every, 1, Duration::from_secs(5)).await;
    got[0].retry(None).await.unwrap();
    let mut again = take(&every, 1, Duration::from_secs(5)).await;
    assert_eq!(again[0].envelope().attempts, 1);
    again[0].ack().await.unwrap();
    let mut once = take(&sink, 2, Duration::from_millis(800)).await;
    assert_eq!(
        once.len(),
        1,
        "the copy did not reach the other bound queue"
    );
    once[0].ack().await.unwrap();
    let describe = sink.describe();
    assert_eq!(describe["exchange"], json!(exchange));
    sink.close().await.unwrap();
    every.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contradicting_declaration_stops_the_app_and_bad_options_name_their_field() {
    let q = name("declared");
    let durable = queue(&q, |o| o);
    durable.open().await.unwrap();
    let transient = queue(&q, |o| o.with_durable(false));
    let err = transient.open().await.expect_err("inequivalent durable");
    match &err {
        Error::Connector(c) => assert_eq!(c.kind, ConnectorErrorKind::Permanent, "{err}"),
        other => panic!("expected a connector error, got {other}"),
    }
    durable.close().await.unwrap();

    let connector = RabbitMqConnector::new(&url()).unwrap();
    let err = RabbitMqQueue::new(
        connector.clone(),
        RabbitMqQueueOptions::new("x").with_batch_size(0),
    )
    .expect_err("batch_size 0");
    assert!(err.to_string().contains("batch_size"), "{err}");
    let err = RabbitMqQueue::new(
        connector,
        RabbitMqQueueOptions::new("x").with_exchange("e", "sideways"),
    )
    .expect_err("bad type");
    assert!(err.to_string().contains("exchange_type"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_a_misconfiguration_without_the_password() {
    let bad = url().replacen("guest:guest@", "guest:wrong-s3cret@", 1);
    let s = RabbitMqQueue::new(
        RabbitMqConnector::new(&bad).unwrap(),
        RabbitMqQueueOptions::new(name("auth")),
    )
    .unwrap();
    let err = s.open().await.expect_err("refused");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("wrong-s3cret"), "{text}");
    match &err {
        Error::Connector(c) => assert_eq!(c.kind, ConnectorErrorKind::Misconfigured, "{err}"),
        other => panic!("expected a connector error, got {other}"),
    }
}

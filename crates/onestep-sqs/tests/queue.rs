#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `sqs_queue` and `sns_topic` on a real SQS API (moto, see `support`): the connector
//! conformance kit, the wire format, attempts counted from receives, `on_fail`, visibility
//! heartbeats, grouped deletes, FIFO groups and deduplication, SNS to SQS, and errors
//! classified. Every queue and topic is new.

mod support;

use std::time::Duration;

use async_trait::async_trait;
use onestep_core::wire::encode_envelope;
use onestep_core::{
    ConnectorErrorKind, Delivery, Envelope, Error, FailureInfo, FailureKind, Resource, Sink,
    Source, Stage, TaskError,
};
use onestep_sqs::{
    AttributeValue, AwsSettings, DeduplicationId, MessageAttribute, OnFail, SnsTopic,
    SnsTopicOptions, SqsConnector, SqsQueue, SqsQueueOptions,
};
use onestep_testkit::connector::SourceFactory;
use serde_json::json;
use support::{client, counts, create_queue, name, queue};

struct Queues;

#[async_trait]
impl SourceFactory for Queues {
    type Source = SqsQueue;

    async fn create(&self, messages: usize, consumers: usize) -> Vec<SqsQueue> {
        let url = create_queue(&name("kit"), 30).await;
        let producer = queue(&url, |o| o);
        for i in 0..messages {
            producer
                .send(Envelope::new(json!({"id": i})))
                .await
                .unwrap();
        }
        (0..consumers).map(|_| queue(&url, |o| o)).collect()
    }

    fn id(&self, envelope: &Envelope) -> String {
        envelope.body["id"].to_string()
    }
}

// Every case of the kit but `concurrent_consumers_never_share_a_message`: SQS standard queues
// deliver at least once (AWS documents that a message is occasionally received twice), and the
// emulator does it under load, two receives racing for one visible message in its threaded
// server. Exclusivity is not a property of SQS; no loss and deletes that hold are, and the
// crash test counts both from the queue.
onestep_testkit::connector_conformance!(@cases Queues;
    each_message_is_delivered_once_when_acked,
    a_retried_message_comes_again,
    a_released_message_comes_again,
);

fn failure() -> FailureInfo {
    FailureInfo::from_error(FailureKind::Error, Stage::Handler, &TaskError::msg("boom"))
}

/// Fetches until `count` deliveries came or `within` passed.
async fn take(source: &SqsQueue, count: usize, within: Duration) -> Vec<Box<dyn Delivery>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < count && tokio::time::Instant::now() < deadline {
        out.extend(source.fetch(count - out.len()).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_the_reference_envelope_and_sqs_meta() {
    let url = create_queue(&name("wire"), 30).await;
    let s = queue(&url, |o| o);
    let mut envelope = Envelope::new(json!({"id": 1, "text": "é", "big": 12345678901234567890u64}));
    envelope.meta.insert("trace".into(), json!("t-1"));
    envelope
        .meta
        .insert("sqs".into(), json!({"message_id": "stale", "kept": true}));
    envelope.attempts = 2;
    s.send(envelope.clone()).await.unwrap();

    let raw = client()
        .await
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let message = &raw.messages()[0];
    assert_eq!(message.body().unwrap(), encode_envelope(&envelope));
    // Visible again at once, for the source.
    client()
        .await
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(message.receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();

    let mut got = take(&s, 1, Duration::from_secs(10)).await;
    let d = &mut got[0];
    let e = d.envelope();
    assert_eq!(e.body, envelope.body);
    assert_eq!(e.meta["trace"], json!("t-1"));
    let sqs = &e.meta["sqs"];
    assert_eq!(sqs["kept"], json!(true));
    assert_eq!(sqs["message_id"], json!(message.message_id().unwrap()));
    // Received twice: once above, once here.
    assert_eq!(sqs["attributes"]["ApproximateReceiveCount"], json!("2"));
    assert_eq!(e.attempts, 3, "2 in the body + 1 earlier receive");
    d.ack().await.unwrap();
    s.close().await.unwrap();
    assert_eq!(counts(&url).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_hides_the_message_for_its_delay_and_counts_the_attempt() {
    let url = create_queue(&name("retry"), 30).await;
    let s = queue(&url, |o| o);
    s.send(Envelope::new(json!({"id": 1}))).await.unwrap();
    let mut first = take(&s, 1, Duration::from_secs(10)).await;
    assert_eq!(first[0].envelope().attempts, 0);
    first[0]
        .retry(Some(Duration::from_millis(2500)))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    assert!(
        s.fetch(1).await.unwrap().is_empty(),
        "hidden for its delay (2 s, whole seconds)"
    );
    let mut again = take(&s, 1, Duration::from_secs(10)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(again[0].envelope().attempts, 1);
    again[0].ack().await.unwrap();
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_fail_leaves_releases_or_deletes() {
    for on_fail in [OnFail::Leave, OnFail::Release, OnFail::Delete] {
        let url = create_queue(&name("fail"), 30).await;
        let s = queue(&url, |o| {
            o.with_on_fail(on_fail).with_deletes(10, Duration::ZERO)
        });
        s.send(Envelope::new(json!({"id": 1}))).await.unwrap();
        let mut got = take(&s, 1, Duration::from_secs(10)).await;
        got[0].fail(&failure()).await.unwrap();
        let expected = match on_fail {
            OnFail::Leave => (0, 1),
            OnFail::Release => (1, 0),
            OnFail::Delete => (0, 0),
        };
        assert_eq!(counts(&url).await, expected, "{on_fail:?}");
        drop(got);
        s.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_keeps_a_long_running_message_hidden() {
    let url = create_queue(&name("beat"), 30).await;
    let s = queue(&url, |o| {
        o.with_visibility_timeout(2)
            .with_heartbeat(Duration::from_millis(500), None)
    });
    s.send(Envelope::new(json!({"id": 1}))).await.unwrap();
    let mut got = take(&s, 1, Duration::from_secs(10)).await;
    got[0].start_processing().await.unwrap();
    // Twice the visibility timeout later, nobody else has received it.
    let other = queue(&url, |o| o.with_wait_time_s(0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < deadline {
        assert!(
            other.fetch(1).await.unwrap().is_empty(),
            "the heartbeat lapsed"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    got[0].ack().await.unwrap();
    s.flush_deletes().await.unwrap();
    assert_eq!(counts(&url).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_are_deleted_in_groups_and_on_close() {
    let url = create_queue(&name("deletes"), 30).await;
    // Grouped by ten, and no flusher (an hour): only full groups and close delete.
    let s = queue(&url, |o| o.with_deletes(10, Duration::from_secs(3600)));
    for i in 0..15 {
        s.send(Envelope::new(json!({"id": i}))).await.unwrap();
    }
    let mut got = take(&s, 15, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 15);
    for d in &mut got {
        d.ack().await.unwrap();
    }
    assert_eq!(s.pending_deletes().await, 5, "one group of ten went out");
    assert_eq!(counts(&url).await, (0, 5));
    s.close().await.unwrap();
    assert_eq!(s.pending_deletes().await, 0);
    assert_eq!(counts(&url).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstarted_and_dropped_messages_are_visible_again_at_once() {
    let url = create_queue(&name("unstarted"), 30).await;
    let s = queue(&url, |o| o);
    s.send(Envelope::new(json!({"id": 1}))).await.unwrap();
    s.send(Envelope::new(json!({"id": 2}))).await.unwrap();
    let mut got = take(&s, 2, Duration::from_secs(10)).await;
    got[0].release_unstarted().await.unwrap();
    drop(got);
    let again = take(&s, 2, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 2, "both came back without waiting 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_queues_need_a_group_and_deduplicate_by_the_digest() {
    let url = create_queue(&format!("{}.fifo", name("fifo")), 30).await;
    let without = queue(&url, |o| o);
    let err = without
        .send(Envelope::new(json!({"id": 1})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { field, .. } if field == "message_group_id"),
        "{err}"
    );
    let s = queue(&url, |o| {
        o.with_message_group_id("g1")
            .with_deduplication_id(DeduplicationId::envelope_digest())
    });
    for id in [1, 1, 2] {
        s.send(Envelope::new(json!({"id": id}))).await.unwrap();
    }
    assert_eq!(
        counts(&url).await,
        (2, 0),
        "the second id 1 was a duplicate"
    );
    let got = take(&s, 2, Duration::from_secs(10)).await;
    let ids: Vec<_> = got
        .iter()
        .map(|d| d.envelope().body["id"].clone())
        .collect();
    assert_eq!(ids, [json!(1), json!(2)], "in group order");
    assert_eq!(
        got[0].envelope().meta["sqs"]["attributes"]["MessageGroupId"],
        json!("g1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_publishes_the_envelope_to_subscribed_queues() {
    let url = create_queue(&name("sns"), 30).await;
    let sqs = client().await;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(onestep_sqs::aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&onestep_sqs::aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let sns = support::sns().client("tests").await.unwrap();
    let topic = sns
        .create_topic()
        .name(name("topic"))
        .send()
        .await
        .unwrap()
        .topic_arn()
        .unwrap()
        .to_owned();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();
    let sink = SnsTopic::new(
        support::sns(),
        SnsTopicOptions::new(&topic)
            .with_subject("jobs")
            .with_attribute(
                "tenant",
                MessageAttribute {
                    data_type: "String".into(),
                    value: AttributeValue::String("acme".into()),
                },
            ),
    )
    .unwrap();
    let mut envelope = Envelope::new(json!({"id": 7}));
    envelope.meta.insert("k".into(), json!("v"));
    sink.send(envelope.clone()).await.unwrap();

    let raw = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(5)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let message = &raw.messages()[0];
    assert_eq!(message.body().unwrap(), encode_envelope(&envelope));
    assert_eq!(
        message.message_attributes().unwrap()["tenant"].string_value(),
        Some("acme")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_kind_they_are() {
    // A queue that does not exist: misconfigured.
    let url = format!("{}/123456789012/{}", support::endpoint(), name("missing"));
    let s = queue(&url, |o| o);
    let err = s.fetch(1).await.err().expect("an error");
    let Error::Connector(c) = &err else {
        panic!("{err}")
    };
    assert_eq!(c.kind, ConnectorErrorKind::Misconfigured, "{err}");
    assert!(!err.to_string().contains("testing-secret"), "{err}");

    // Nothing listening: disconnected, and the secret never printed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = SqsConnector::new(
        AwsSettings::new()
            .with_region("us-east-1")
            .with_endpoint_url(format!("http://127.0.0.1:{port}"))
            .with_credentials("testing", "testing-secret", None),
    )
    .unwrap();
    let s = SqsQueue::new(
        closed,
        SqsQueueOptions::new(format!("http://127.0.0.1:{port}/123456789012/q")).with_wait_time_s(0),
    )
    .unwrap();
    let err = s.fetch(1).await.err().expect("an error");
    let Error::Connector(c) = &err else {
        panic!("{err}")
    };
    assert_eq!(c.kind, ConnectorErrorKind::Disconnected, "{err}");
    assert!(!err.to_string().contains("testing-secret"), "{err}");
}

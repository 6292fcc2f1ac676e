//! What the SQS suites share: the emulator's endpoint (`ONESTEP_SQS_URL`, which `cargo xtask
//! test` provides by starting moto, else moto's default at 127.0.0.1:5000), connectors with
//! its test credentials, and fresh queues.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use onestep_sqs::aws_sdk_sqs::types::QueueAttributeName;
use onestep_sqs::{AwsSettings, SnsConnector, SqsConnector, SqsQueue, SqsQueueOptions};

pub fn endpoint() -> String {
    std::env::var("ONESTEP_SQS_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:5000".into())
        .trim_end_matches('/')
        .to_owned()
}

pub fn settings() -> AwsSettings {
    AwsSettings::new()
        .with_region("us-east-1")
        .with_endpoint_url(endpoint())
        .with_credentials("testing", "testing-secret", None)
}

pub fn connector() -> SqsConnector {
    SqsConnector::new(settings()).unwrap()
}

pub fn sns() -> SnsConnector {
    SnsConnector::new(settings()).unwrap()
}

pub async fn client() -> onestep_sqs::aws_sdk_sqs::Client {
    connector().client("tests").await.unwrap()
}

pub fn name(prefix: &str) -> String {
    format!("onestep-{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A new queue with `visibility` seconds of visibility timeout; its URL. A `.fifo` name makes
/// a FIFO queue (without content-based deduplication).
pub async fn create_queue(name: &str, visibility: u32) -> String {
    let mut request = client().await.create_queue().queue_name(name).attributes(
        QueueAttributeName::VisibilityTimeout,
        visibility.to_string(),
    );
    if name.ends_with(".fifo") {
        request = request.attributes(QueueAttributeName::FifoQueue, "true");
    }
    let created = request.send().await.unwrap_or_else(|e| {
        panic!(
            "the SQS emulator at {} does not answer ({}); start moto, set ONESTEP_SQS_URL, or \
             run `cargo xtask test`, which starts a throwaway one",
            endpoint(),
            onestep_sqs::aws_sdk_sqs::error::DisplayErrorContext(e)
        )
    });
    created.queue_url().unwrap().to_owned()
}

/// A source and sink over `url` that polls briefly (the tests' queues are small).
pub fn queue(url: &str, options: impl FnOnce(SqsQueueOptions) -> SqsQueueOptions) -> SqsQueue {
    let base = SqsQueueOptions::new(url)
        .with_wait_time_s(1)
        .with_poll_interval(Duration::from_millis(50));
    SqsQueue::new(connector(), options(base)).unwrap()
}

/// `(visible, in flight)` messages of `url`.
pub async fn counts(url: &str) -> (u64, u64) {
    let answer = client()
        .await
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attributes = answer.attributes().cloned().unwrap_or_default();
    let count = |name: &QueueAttributeName| {
        attributes
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (
        count(&QueueAttributeName::ApproximateNumberOfMessages),
        count(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

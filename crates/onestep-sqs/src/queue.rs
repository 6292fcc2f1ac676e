//! `SqsQueue`: an SQS queue received from with long polling (a [`Source`]) and sent to (a
//! [`Sink`]), as the reference's `sqs_queue`.
//!
//! # Delivery
//!
//! - A fetch is one `ReceiveMessage` of up to `batch_size` messages (at most 10), waiting up
//!   to `wait_time_s` for the first, with every system attribute. The body is the envelope,
//!   JSON `{"body", "meta", "attempts"}` ([`onestep_core::wire`]); `meta.sqs` gets the message
//!   id and the attributes, as the reference sets them.
//! - **attempts** counts the earlier receives too: the envelope's `attempts` plus
//!   `ApproximateReceiveCount - 1`. A retry changes the message's visibility and leaves its
//!   body alone, so this is how the task's `max_attempts` ends the retries (the reference's
//!   count never moves; see `docs/sqs.md`).
//! - **ack** stages a delete, sent with others in one `DeleteMessageBatch`
//!   (as the reference does; see `docs/sqs.md`).
//! - **retry** sets the message's visibility timeout to the delay (whole seconds, at most 12
//!   hours), so it comes again then.
//! - **fail** follows `on_fail`: `leave` does nothing (the message comes again after its
//!   visibility timeout, and the queue's redrive policy dead-letters it after
//!   `maxReceiveCount` receives), `release` makes it visible at once, `delete` deletes it.
//! - **Unstarted messages** (received when a worker pauses or stops) are made visible again
//!   at once.
//! - **Heartbeats**: with `heartbeat_interval_s`, a running message's visibility is extended
//!   to `heartbeat_visibility_timeout` that often, so a long handler keeps it.
//! - **A crash** leaves received messages invisible until their visibility timeout ends;
//!   then they are delivered again (at least once).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use onestep_core::wire::encode_envelope;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, Delivery, Envelope, Error, Resource, Result, Sink,
    Source,
};
use serde_json::{Map, Value};

use crate::connector::SqsConnector;
use crate::delivery::SqsDelivery;
use crate::options::SqsQueueOptions;
use crate::shared::Inner;

/// An SQS queue as a source and a sink (see the module docs). Clones share the pending
/// deletes and the flusher.
#[derive(Clone)]
pub struct SqsQueue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqsQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsQueue")
            .field("url", &self.inner.options.url)
            .finish()
    }
}

impl SqsQueue {
    /// The queue `options.url` over `connector` (named by its URL, as the reference names
    /// it); no I/O until it opens.
    pub fn new(connector: SqsConnector, options: SqsQueueOptions) -> Result<Self> {
        options.validate()?;
        Ok(Self {
            inner: Arc::new(Inner::new(connector, options)),
        })
    }

    /// The options in use.
    pub fn options(&self) -> &SqsQueueOptions {
        &self.inner.options
    }

    /// Sends the acks still waiting to be deleted.
    pub async fn flush_deletes(&self) -> Result<()> {
        self.inner.deletes.flush(&self.inner).await
    }

    /// How many acks wait to be deleted.
    pub async fn pending_deletes(&self) -> usize {
        self.inner.deletes.len().await
    }
}

/// The envelope of a received message: the body decoded, `meta.sqs` holding its message id and
/// attributes, and `attempts` counting the earlier receives.
fn received_envelope(message: &aws_sdk_sqs::types::Message) -> Envelope {
    let mut envelope = onestep_core::wire::decode_envelope(message.body().unwrap_or("").as_bytes());
    let mut sqs = match envelope.meta.remove("sqs") {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    sqs.remove("message_id");
    sqs.remove("attributes");
    if let Some(id) = message.message_id() {
        sqs.insert("message_id".into(), Value::String(id.to_owned()));
    }
    if let Some(attributes) = message.attributes() {
        let mut sorted: Vec<(&str, &String)> =
            attributes.iter().map(|(k, v)| (k.as_str(), v)).collect();
        sorted.sort_unstable();
        let map: Map<String, Value> = sorted
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v.clone())))
            .collect();
        sqs.insert("attributes".into(), Value::Object(map));
    }
    let earlier = message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|count| count.parse::<u32>().ok())
        .map_or(0, |count| count.saturating_sub(1));
    envelope.attempts = envelope.attempts.saturating_add(earlier);
    envelope.meta.insert("sqs".into(), Value::Object(sqs));
    envelope
}

#[async_trait]
impl Resource for SqsQueue {
    fn name(&self) -> &str {
        &self.inner.options.url
    }

    /// Builds the client and starts the delete flusher.
    async fn open(&self) -> Result<()> {
        self.inner.client().await?;
        self.inner.start_flusher();
        Ok(())
    }

    /// Stops the flusher and heartbeats and sends the deletes still waiting.
    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        inner.closing.cancel();
        inner.tasks.close();
        if tokio::time::timeout(Duration::from_secs(10), inner.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(queue = %inner.options.url, "SQS calls still running after 10 s");
        }
        match tokio::time::timeout(Duration::from_secs(30), inner.deletes.flush(inner)).await {
            Ok(result) => result,
            Err(_) => Err(inner.error_text(
                ConnectorOperation::Close,
                ConnectorErrorKind::Disconnected,
                "the last deletes did not finish within 30 s; those messages come again",
            )),
        }
    }
}

#[async_trait]
impl Source for SqsQueue {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let inner = &self.inner;
        inner.start_flusher();
        let o = &inner.options;
        let client = inner.client().await?;
        let count = limit.clamp(1, o.batch_size).min(10);
        let answer = client
            .receive_message()
            .queue_url(&o.url)
            .max_number_of_messages(i32::try_from(count).unwrap_or(10))
            .wait_time_seconds(i32::try_from(o.wait_time_s).unwrap_or(20))
            .set_visibility_timeout(
                o.visibility_timeout
                    .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
            )
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| inner.error(ConnectorOperation::Fetch, &e))?;
        Ok(answer
            .messages()
            .iter()
            .filter_map(|message| {
                let Some(receipt) = message.receipt_handle() else {
                    tracing::warn!(queue = %o.url, "SQS returned a message without a receipt handle");
                    return None;
                };
                let envelope = received_envelope(message);
                Some(Box::new(SqsDelivery::new(
                    self.inner.clone(),
                    receipt.to_owned(),
                    envelope,
                )) as Box<dyn Delivery>)
            })
            .collect())
    }

    fn batch_size(&self) -> usize {
        self.inner.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.inner.options.poll_interval
    }

    /// Not cancel-safe: a receive dropped mid-way would leave its messages invisible for their
    /// visibility timeout. The runner waits for it (at most `wait_time_s`) when it stops.
    fn fetch_is_cancel_safe(&self) -> bool {
        false
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.inner.options;
        let mut map = Map::new();
        map.insert("url".into(), Value::String(o.url.clone()));
        map.insert("wait_time_s".into(), Value::from(o.wait_time_s));
        if let Some(v) = o.visibility_timeout {
            map.insert("visibility_timeout".into(), Value::from(v));
        }
        map.insert("batch_size".into(), Value::from(o.batch_size));
        map.insert("on_fail".into(), Value::String(o.on_fail.as_str().into()));
        map
    }
}

#[async_trait]
impl Sink for SqsQueue {
    /// Sends the envelope with `SendMessage`; to a FIFO queue with the message group (required)
    /// and the deduplication id.
    async fn send(&self, envelope: Envelope) -> Result<()> {
        let inner = &self.inner;
        let o = &inner.options;
        let mut request = inner
            .client()
            .await?
            .send_message()
            .queue_url(&o.url)
            .message_body(encode_envelope(&envelope));
        if o.is_fifo() {
            let Some(group) = &o.message_group_id else {
                return Err(Error::invalid(
                    "message_group_id",
                    format!("FIFO SQS queues require message_group_id ({})", o.url),
                ));
            };
            request = request.message_group_id(group);
            if let Some(id) = &o.deduplication_id {
                request = request.message_deduplication_id(id.of(&envelope));
            }
        }
        request
            .send()
            .await
            .map(drop)
            .map_err(|e| inner.error(ConnectorOperation::Send, &e))
    }
}

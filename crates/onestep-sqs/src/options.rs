//! `SqsQueueOptions`: what an `sqs_queue` is and how it is consumed, with the reference's
//! defaults; and the deduplication ids of FIFO messages.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::wire::encode_envelope;
use onestep_core::{Envelope, Error, Result};
use sha2::{Digest, Sha256};

/// What a message that failed for good becomes (`on_fail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFail {
    /// Left as it is: it comes again after its visibility timeout, and the queue's redrive
    /// policy moves it to the dead-letter queue after `maxReceiveCount` receives (the default).
    #[default]
    Leave,
    /// Made visible again at once (visibility timeout 0).
    Release,
    /// Deleted.
    Delete,
}

impl OnFail {
    /// The YAML name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leave => "leave",
            Self::Release => "release",
            Self::Delete => "delete",
        }
    }

    /// Parses a YAML name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "leave" => Some(Self::Leave),
            "release" => Some(Self::Release),
            "delete" => Some(Self::Delete),
            _ => None,
        }
    }
}

/// Computes the deduplication id of a message sent to a FIFO queue or topic.
#[derive(Clone)]
pub struct DeduplicationId {
    name: String,
    compute: Arc<dyn Fn(&Envelope) -> String + Send + Sync>,
}

impl std::fmt::Debug for DeduplicationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DeduplicationId").field(&self.name).finish()
    }
}

impl DeduplicationId {
    /// The YAML name of [`DeduplicationId::envelope_digest`].
    pub const ENVELOPE_DIGEST: &'static str = "onestep_sqs:envelope_digest";

    /// A deduplication id computed by `compute` (at most 128 characters of ASCII letters,
    /// digits and punctuation, as SQS requires); `name` is shown in logs.
    pub fn new(
        name: impl Into<String>,
        compute: impl Fn(&Envelope) -> String + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            compute: Arc::new(compute),
        }
    }

    /// The SHA-256 of the encoded envelope, in hex: the same body, meta and attempts sent twice
    /// within SQS's five-minute window are stored once.
    pub fn envelope_digest() -> Self {
        Self::new(Self::ENVELOPE_DIGEST, |envelope| {
            hex::encode(Sha256::digest(encode_envelope(envelope).as_bytes()))
        })
    }

    /// The built-in factory called `name` in YAML, if there is one.
    pub fn builtin(name: &str) -> Option<Self> {
        (name == Self::ENVELOPE_DIGEST).then(Self::envelope_digest)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id of `envelope`.
    pub fn of(&self, envelope: &Envelope) -> String {
        (self.compute)(envelope)
    }
}

/// An SQS queue's settings; [`SqsQueueOptions::new`] gives the reference's defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqsQueueOptions {
    /// The queue URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`).
    pub url: String,
    /// Long polling: how long a receive waits for a message, 0..=20 s (default 20).
    pub wait_time_s: u32,
    /// The visibility timeout to receive with, 0..=43200 s (default: the queue's).
    pub visibility_timeout: Option<u32>,
    /// The most messages per receive, 1..=10 (default 10).
    pub batch_size: usize,
    /// The pause after an empty receive, and the back-off after errors (default 0: long
    /// polling waits already).
    pub poll_interval: Duration,
    /// The message group of messages sent to a FIFO queue (required there to send).
    pub message_group_id: Option<String>,
    /// The deduplication id of messages sent to a FIFO queue (default none: the queue's
    /// content-based deduplication, when it has it).
    pub deduplication_id: Option<DeduplicationId>,
    /// What a message that failed for good becomes (default leave).
    pub on_fail: OnFail,
    /// The most deletes per `DeleteMessageBatch`, 1..=10 (default 10).
    pub delete_batch_size: usize,
    /// How long acks wait to be deleted together (default 0.5 s; 0 deletes each at once).
    pub delete_flush_interval: Duration,
    /// While a handler runs, extend its message's visibility this often (default never).
    pub heartbeat_interval: Option<Duration>,
    /// The visibility timeout each extension sets, in seconds (default: `visibility_timeout`,
    /// else 60).
    pub heartbeat_visibility_timeout: Option<u32>,
}

/// The longest visibility timeout SQS allows (12 hours).
pub const MAX_VISIBILITY_TIMEOUT: u32 = 43_200;

impl SqsQueueOptions {
    /// The options of the queue at `url`, with the reference's defaults.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            wait_time_s: 20,
            visibility_timeout: None,
            batch_size: 10,
            poll_interval: Duration::ZERO,
            message_group_id: None,
            deduplication_id: None,
            on_fail: OnFail::Leave,
            delete_batch_size: 10,
            delete_flush_interval: Duration::from_millis(500),
            heartbeat_interval: None,
            heartbeat_visibility_timeout: None,
        }
    }

    /// Sets the long-poll wait in seconds.
    pub fn with_wait_time_s(mut self, seconds: u32) -> Self {
        self.wait_time_s = seconds;
        self
    }

    /// Sets the visibility timeout to receive with.
    pub fn with_visibility_timeout(mut self, seconds: u32) -> Self {
        self.visibility_timeout = Some(seconds);
        self
    }

    /// Sets the most messages per receive.
    pub fn with_batch_size(mut self, size: usize) -> Self {
        self.batch_size = size;
        self
    }

    /// Sets the pause after an empty receive.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the message group for a FIFO queue.
    pub fn with_message_group_id(mut self, group: impl Into<String>) -> Self {
        self.message_group_id = Some(group.into());
        self
    }

    /// Sets how FIFO deduplication ids are computed.
    pub fn with_deduplication_id(mut self, id: DeduplicationId) -> Self {
        self.deduplication_id = Some(id);
        self
    }

    /// Sets what a message that failed for good becomes.
    pub fn with_on_fail(mut self, on_fail: OnFail) -> Self {
        self.on_fail = on_fail;
        self
    }

    /// Sets how deletes are grouped.
    pub fn with_deletes(mut self, batch_size: usize, flush_interval: Duration) -> Self {
        self.delete_batch_size = batch_size;
        self.delete_flush_interval = flush_interval;
        self
    }

    /// Extends a running message's visibility every `interval`, to `visibility_timeout`
    /// seconds (`None`: the receive's visibility timeout, else 60).
    pub fn with_heartbeat(mut self, interval: Duration, visibility_timeout: Option<u32>) -> Self {
        self.heartbeat_interval = Some(interval);
        self.heartbeat_visibility_timeout = visibility_timeout;
        self
    }

    /// Whether the queue is a FIFO queue (its URL ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.url.ends_with(".fifo")
    }

    /// The visibility timeout a heartbeat sets.
    pub fn effective_heartbeat_visibility_timeout(&self) -> u32 {
        self.heartbeat_visibility_timeout
            .or(self.visibility_timeout)
            .unwrap_or(60)
    }

    /// Checks the options; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if !(self.url.starts_with("https://") || self.url.starts_with("http://")) {
            return Err(Error::invalid(
                "url",
                format!("must be the queue's http(s):// URL, got {:?}", self.url),
            ));
        }
        if self.wait_time_s > 20 {
            return Err(Error::invalid(
                "wait_time_s",
                format!(
                    "must be 0..=20 (SQS's longest long poll), got {}",
                    self.wait_time_s
                ),
            ));
        }
        for (field, value) in [
            ("visibility_timeout", self.visibility_timeout),
            (
                "heartbeat_visibility_timeout",
                self.heartbeat_visibility_timeout,
            ),
        ] {
            if let Some(v) = value.filter(|v| *v > MAX_VISIBILITY_TIMEOUT) {
                return Err(Error::invalid(
                    field,
                    format!("must be 0..={MAX_VISIBILITY_TIMEOUT} seconds, got {v}"),
                ));
            }
        }
        if !(1..=10).contains(&self.batch_size) {
            return Err(Error::invalid(
                "batch_size",
                format!("must be between 1 and 10 for SQS, got {}", self.batch_size),
            ));
        }
        if !(1..=10).contains(&self.delete_batch_size) {
            return Err(Error::invalid(
                "delete_batch_size",
                format!(
                    "must be between 1 and 10 for SQS, got {}",
                    self.delete_batch_size
                ),
            ));
        }
        if let Some(interval) = self.heartbeat_interval {
            let timeout = self.effective_heartbeat_visibility_timeout();
            if interval.is_zero() || interval >= Duration::from_secs(u64::from(timeout)) {
                return Err(Error::invalid(
                    "heartbeat_interval_s",
                    format!(
                        "must be > 0 and shorter than the visibility timeout each beat sets \
                         ({timeout} s), got {} s",
                        interval.as_secs_f64()
                    ),
                ));
            }
        }
        if let Some(group) = &self.message_group_id
            && (group.is_empty() || group.len() > 128)
        {
            return Err(Error::invalid(
                "message_group_id",
                format!("must be 1..=128 characters, got {}", group.len()),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_limits_hold() {
        let url = "http://127.0.0.1:5000/123456789012/q";
        assert!(SqsQueueOptions::new(url).validate().is_ok());
        let err = SqsQueueOptions::new(url)
            .with_batch_size(11)
            .validate()
            .expect_err("11");
        assert!(err.to_string().contains("batch_size"), "{err}");
        let err = SqsQueueOptions::new(url)
            .with_heartbeat(Duration::from_secs(60), None)
            .validate()
            .expect_err("beat as long as the timeout");
        assert!(err.to_string().contains("heartbeat_interval_s"), "{err}");
        let err = SqsQueueOptions::new("q").validate().expect_err("no URL");
        assert!(err.to_string().contains("url"), "{err}");
    }

    #[test]
    fn the_envelope_digest_is_stable_and_short() {
        let envelope = Envelope::new(serde_json::json!({"a": 1}));
        let id = DeduplicationId::envelope_digest();
        assert_eq!(id.of(&envelope), id.of(&envelope.clone()));
        assert_eq!(id.of(&envelope).len(), 64);
        assert!(DeduplicationId::builtin("app.tasks:dedup").is_none());
    }
}

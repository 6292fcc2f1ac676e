//! [`MemoryQueue`]: a bounded in-process queue that is both a source and a sink.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::buffer::EnvelopeBuffer;
use super::{Resource, Sink, Source};
use crate::delivery::Delivery;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::failure::FailureInfo;

struct Shared {
    buffer: EnvelopeBuffer,
    capacity: Option<usize>,
}

impl Shared {
    /// Appends, waiting while the queue is full.
    async fn push(&self, envelope: Envelope) {
        match self.capacity {
            Some(capacity) => self.buffer.push_within(envelope, capacity).await,
            None => self.buffer.push(envelope),
        }
    }
}

/// A FIFO queue in process memory; publish to it as a sink, consume it as a source.
///
/// Sending to a full queue waits for space (back-pressure). A retried delivery goes back to the
/// end of the queue with `attempts + 1`; a delayed retry waits aside (without holding a task slot
/// or queue space) until its delay has passed. Nothing survives the process.
///
/// # Example
/// ```
/// use onestep_core::{MemoryQueue, Sink, Source};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let queue = MemoryQueue::new("jobs", 100)?;
/// queue.publish(serde_json::json!({"n": 1}), Default::default()).await?;
/// assert_eq!(queue.len(), 1);
/// let fetched = queue.fetch(10).await?;
/// assert_eq!(fetched[0].envelope().body["n"], 1);
/// # Ok::<(), onestep_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct MemoryQueue {
    name: String,
    shared: Arc<Shared>,
    batch_size: usize,
    poll_interval: Duration,
}

impl MemoryQueue {
    /// A queue holding at most `maxsize` envelopes (`maxsize >= 1`), batch size 100, poll 100 ms.
    pub fn new(name: impl Into<String>, maxsize: usize) -> Result<Self> {
        if maxsize < 1 {
            return Err(Error::invalid(
                "maxsize",
                "must be a positive integer, got 0",
            ));
        }
        Ok(Self::build(name.into(), Some(maxsize)))
    }

    /// A queue without a size limit.
    pub fn unbounded(name: impl Into<String>) -> Self {
        Self::build(name.into(), None)
    }

    fn build(name: String, capacity: Option<usize>) -> Self {
        Self {
            name,
            shared: Arc::new(Shared {
                buffer: EnvelopeBuffer::new(),
                capacity,
            }),
            batch_size: 100,
            poll_interval: Duration::from_millis(100),
        }
    }

    /// Sets the most deliveries one fetch returns (>= 1).
    pub fn with_batch_size(mut self, batch_size: usize) -> Result<Self> {
        if batch_size < 1 {
            return Err(Error::invalid("batch_size", "must be >= 1, got 0"));
        }
        self.batch_size = batch_size;
        Ok(self)
    }

    /// Sets how long a fetch waits for the first envelope (> 0).
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Result<Self> {
        if poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval_s", "must be > 0, got 0"));
        }
        self.poll_interval = poll_interval;
        Ok(self)
    }

    /// How many envelopes are waiting, including retries whose delay has not passed.
    pub fn len(&self) -> usize {
        self.shared.buffer.len()
    }

    /// Whether no envelope is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl Resource for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }
}

#[async_trait]
impl Source for MemoryQueue {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let limit = limit.clamp(1, self.batch_size);
        let batch = self
            .shared
            .buffer
            .next_batch(limit, self.poll_interval)
            .await;
        Ok(batch
            .into_iter()
            .map(|envelope| {
                Box::new(MemoryDelivery {
                    queue: self.shared.clone(),
                    envelope,
                }) as Box<dyn Delivery>
            })
            .collect())
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("type".into(), "memory".into());
        m.insert(
            "maxsize".into(),
            self.shared
                .capacity
                .map(serde_json::Value::from)
                .unwrap_or_default(),
        );
        m
    }
}

#[async_trait]
impl Sink for MemoryQueue {
    async fn send(&self, envelope: Envelope) -> Result<()> {
        self.shared.push(envelope).await;
        Ok(())
    }
}

struct MemoryDelivery {
    queue: Arc<Shared>,
    envelope: Envelope,
}

#[async_trait]
impl Delivery for MemoryDelivery {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        Ok(())
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        let mut again = self.envelope.clone();
        again.attempts = again.attempts.saturating_add(1);
        match delay.filter(|d| !d.is_zero()) {
            Some(delay) => self
                .queue
                .buffer
                .park(again, tokio::time::Instant::now() + delay),
            None => self.queue.push(again).await,
        }
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.queue.push(self.envelope.clone()).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test(start_paused = true)]
    async fn fetch_returns_empty_after_poll_interval_when_nothing_arrives() {
        let q = MemoryQueue::new("q", 2).unwrap();
        let started = tokio::time::Instant::now();
        assert!(q.fetch(5).await.unwrap().is_empty());
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn send_waits_for_space_when_full() {
        let q = MemoryQueue::new("q", 1).unwrap();
        q.publish(json!(1), Default::default()).await.unwrap();
        let q2 = q.clone();
        let sender = tokio::spawn(async move { q2.publish(json!(2), Default::default()).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!sender.is_finished());
        let first = q.fetch(1).await.unwrap();
        assert_eq!(first[0].envelope().body, json!(1));
        sender.await.unwrap().unwrap();
        assert_eq!(q.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_requeues_with_one_more_attempt_after_delay() {
        let q = MemoryQueue::new("q", 10).unwrap();
        q.publish(json!("x"), Default::default()).await.unwrap();
        let mut d = q.fetch(1).await.unwrap().pop().unwrap();
        let started = tokio::time::Instant::now();
        d.retry(Some(Duration::from_secs(3))).await.unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "retry does not hold the slot"
        );
        assert_eq!(q.len(), 1);
        assert!(
            q.fetch(1).await.unwrap().is_empty(),
            "not due before its delay"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = q.fetch(1).await.unwrap().pop().unwrap();
        assert_eq!(again.envelope().attempts, 1);
    }

    #[test]
    fn zero_maxsize_is_rejected() {
        assert_eq!(
            MemoryQueue::new("q", 0).err().unwrap().to_string(),
            "maxsize must be a positive integer, got 0"
        );
    }
}

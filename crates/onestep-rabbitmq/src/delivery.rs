//! One RabbitMQ message and how it is settled (see [`crate::queue`] for the semantics).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lapin::Confirmation;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions};
use onestep_core::wire::{decode_envelope, encode_envelope};
use onestep_core::{Delivery, Envelope, FailureInfo, Result};

use crate::link::{CONFIRM_TIMEOUT, Inner};

/// How long an ack, nack or reject may take to be written before its channel counts as dead.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A consumed message, settled once.
pub(crate) struct AmqpDelivery {
    source: Arc<Inner>,
    generation: u64,
    message: lapin::message::Delivery,
    envelope: Envelope,
    done: bool,
}

impl AmqpDelivery {
    pub(crate) fn new(
        source: Arc<Inner>,
        generation: u64,
        message: lapin::message::Delivery,
    ) -> Self {
        let envelope = decode_envelope(&message.data);
        Self {
            source,
            generation,
            message,
            envelope,
            done: false,
        }
    }

    /// Logs a settle that did not reach the broker: its channel is gone, so the broker has
    /// requeued the message and delivers it again.
    fn lost(&self, what: &str, err: Option<&lapin::Error>) {
        self.source.mark_broken(self.generation);
        tracing::warn!(
            queue = %self.source.options.queue,
            error = err.map(tracing::field::display),
            "could not {what} a message: its channel closed, so the broker delivers it again"
        );
    }

    /// Waits for `settling` (an ack, nack or reject) up to [`SETTLE_TIMEOUT`]. One that fails
    /// or never completes (a connection that died under it) leaves the message to the broker:
    /// its channel is closed, if still open, so the broker requeues it.
    async fn settle(
        &mut self,
        what: &str,
        settling: impl std::future::Future<Output = lapin::Result<bool>>,
    ) -> Result<()> {
        self.done = true;
        match tokio::time::timeout(SETTLE_TIMEOUT, settling).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => self.lost(what, None),
            Ok(Err(err)) => self.lost(what, Some(&err)),
            Err(_) => self.lost(what, None),
        }
        Ok(())
    }
}

/// Publishes `envelope` (with the original's properties) straight back to the queue and acks
/// the original once the broker confirmed the copy; falls back to requeueing the original.
async fn send_again(
    source: &Inner,
    generation: u64,
    acker: &lapin::Acker,
    properties: lapin::BasicProperties,
    envelope: &Envelope,
) {
    let requeue = BasicNackOptions {
        multiple: false,
        requeue: true,
    };
    let channels = source
        .live_channels()
        .filter(|c| c.generation == generation);
    let Some(channels) = channels.filter(|_| acker.usable()) else {
        // The original's channel is gone: the broker requeued it already.
        return;
    };
    let payload = encode_envelope(envelope);
    let published = async {
        channels
            .publish
            .basic_publish(
                "".into(),
                source.options.queue.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                payload.as_bytes(),
                properties,
            )
            .await?
            .await
    };
    let published = match tokio::time::timeout(CONFIRM_TIMEOUT, published).await {
        Ok(published) => published,
        Err(_) => {
            // No confirm: leave the original unacked; the broker requeues it with the channel.
            source.mark_broken(generation);
            tracing::warn!(queue = %source.options.queue, "no confirm for a retried message's copy; the original comes again");
            return;
        }
    };
    let outcome = match published {
        Ok(Confirmation::Ack(None)) => {
            match tokio::time::timeout(SETTLE_TIMEOUT, acker.ack(BasicAckOptions::default())).await
            {
                Ok(acked) => acked,
                Err(_) => Ok(false),
            }
        }
        Ok(other) => {
            tracing::warn!(queue = %source.options.queue, confirmation = ?other,
                "the broker did not take a retried message's copy; requeueing the original");
            acker.nack(requeue).await
        }
        Err(err) => {
            tracing::warn!(queue = %source.options.queue, error = %err,
                "could not publish a retried message's copy; requeueing the original");
            source.mark_broken(generation);
            acker.nack(requeue).await
        }
    };
    if !matches!(outcome, Ok(true)) {
        source.mark_broken(generation);
        tracing::warn!(queue = %source.options.queue, error = ?outcome.err(),
            "could not settle a retried message: its channel closed, so the broker delivers it again");
    }
}

#[async_trait]
impl Delivery for AmqpDelivery {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        let acker = self.message.acker.clone();
        self.settle("ack", acker.ack(BasicAckOptions::default()))
            .await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        self.done = true;
        let mut envelope = self.envelope.clone();
        envelope.attempts = envelope.attempts.saturating_add(1);
        let acker = self.message.acker.clone();
        let properties = self.message.properties.clone();
        let delay = delay.unwrap_or_default();
        if delay.is_zero() {
            send_again(&self.source, self.generation, &acker, properties, &envelope).await;
            return Ok(());
        }
        let source = self.source.clone();
        let generation = self.generation;
        self.source.retries.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = source.closing.cancelled() => {}
            }
            send_again(&source, generation, &acker, properties, &envelope).await;
        });
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        let acker = self.message.acker.clone();
        self.settle(
            "reject",
            acker.reject(BasicRejectOptions { requeue: false }),
        )
        .await
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        let acker = self.message.acker.clone();
        let requeue = BasicNackOptions {
            multiple: false,
            requeue: true,
        };
        self.settle("requeue", acker.nack(requeue)).await
    }
}

impl Drop for AmqpDelivery {
    fn drop(&mut self) {
        // Dropped without an outcome (a cancelled handler): hand it back to the broker.
        if self.done {
            return;
        }
        let acker = self.message.acker.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let options = BasicNackOptions {
                    multiple: false,
                    requeue: true,
                };
                if let Err(err) = acker.nack(options).await {
                    tracing::debug!(error = %err, "requeueing a dropped message");
                }
            });
        }
    }
}

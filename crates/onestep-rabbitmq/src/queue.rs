//! `RabbitMqQueue`: a RabbitMQ queue consumed with `basic.consume` (a [`Source`]) and published
//! to (a [`Sink`]), as the reference's `rabbitmq_queue`.
//!
//! # Delivery
//!
//! - On open the queue is declared, and with an `exchange` the exchange too, and the queue bound
//!   to it by the routing key (as the reference does, a sink-only use declares them as well).
//!   Consuming starts on the first fetch, never for a queue only published to.
//! - The broker pushes up to `prefetch` unacknowledged messages; a fetch takes up to
//!   `batch_size` of them, waiting up to `poll_interval_s` for the first. Each message body is the envelope, JSON `{"body", "meta",
//!   "attempts"}` ([`onestep_core::wire`]).
//! - **ack** is `basic.ack`; **fail** is `basic.reject` without requeue (the queue's
//!   dead-letter exchange gets it, when it has one).
//! - **retry** waits out its delay (the message stays unacknowledged and counts against
//!   `prefetch`), then publishes a copy with `attempts` one higher, with the same properties,
//!   straight to this queue (default exchange, mandatory), and acks the original once the broker
//!   confirmed the copy. If the copy cannot be published it falls back to `basic.nack` with
//!   requeue (the reference's retry, which leaves `attempts` as it was).
//! - **Unstarted messages** (buffered when a worker pauses or stops) are handed back with
//!   `basic.nack` requeue after the consumer is cancelled, as the reference does.
//! - **A dropped connection** fails the fetch with a `disconnected` error (the runner backs
//!   off a poll interval); the next fetch connects again, redeclares and consumes again. The
//!   broker has requeued every message that was unacknowledged on the old channel, so an ack
//!   that could not reach it is logged and the message comes again (at least once).
//! - **A crash** of the worker likewise leaves its unacknowledged messages to the broker, which
//!   delivers them again (`redelivered`) to another consumer.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Confirmation};
use onestep_core::wire::encode_envelope;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Delivery, Envelope, Error,
    Resource, Result, Sink, Source,
};
use serde_json::{Map, Value};

use crate::connector::RabbitMqConnector;
use crate::delivery::AmqpDelivery;
use crate::link::{CONFIRM_TIMEOUT, Inner, close_quietly};
use crate::options::RabbitMqQueueOptions;

/// A RabbitMQ queue as a source and a sink (see the module docs). Clones share one consumer.
#[derive(Clone)]
pub struct RabbitMqQueue {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RabbitMqQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqQueue")
            .field("queue", &self.inner.options.queue)
            .field("exchange", &self.inner.options.exchange)
            .finish()
    }
}

impl RabbitMqQueue {
    /// A queue over `connector`, named after its queue, as in the reference; no I/O until it opens.
    pub fn new(connector: RabbitMqConnector, options: RabbitMqQueueOptions) -> Result<Self> {
        options.validate()?;
        Ok(Self {
            inner: Arc::new(Inner::new(connector, options)?),
        })
    }

    /// The options in use.
    pub fn options(&self) -> &RabbitMqQueueOptions {
        &self.inner.options
    }
}

/// The properties of a published message: JSON, and persistent unless configured otherwise.
fn publish_properties(persistent: bool) -> BasicProperties {
    let properties = BasicProperties::default().with_content_type("application/json".into());
    if persistent {
        properties.with_delivery_mode(2)
    } else {
        properties
    }
}

#[async_trait]
impl Resource for RabbitMqQueue {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Connects and declares the queue (and exchange and binding).
    async fn open(&self) -> Result<()> {
        self.inner.channels().await.map(drop)
    }

    /// Carries out waiting retries, requeues unstarted messages and closes the channels.
    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        inner.closing.cancel();
        inner.retries.close();
        if tokio::time::timeout(Duration::from_secs(10), inner.retries.wait())
            .await
            .is_err()
        {
            tracing::warn!(queue = %inner.options.queue, "retries still publishing after 10 s; the broker requeues their messages");
        }
        inner.return_unstarted().await;
        let channels = inner.channels_slot().take();
        if let Some(channels) = channels {
            close_quietly(&channels.publish).await;
            close_quietly(&channels.consume).await;
        }
        Ok(())
    }
}

#[async_trait]
impl Source for RabbitMqQueue {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let inner = &self.inner;
        let limit = limit.clamp(1, inner.options.batch_size);
        let channels = inner.channels().await?;
        let mut state = inner.consumer.lock().await;
        inner.ensure_consumer(&mut state, &channels).await?;
        let mut taken = inner.take_ready(&mut state, limit);
        if taken.is_ok()
            && state.buffer.is_empty()
            && let Some(consumer) = state.consumer.as_mut()
        {
            // Nothing here yet: wait up to a poll interval for the broker to push one.
            if let Ok(item) =
                tokio::time::timeout(inner.options.poll_interval, consumer.next()).await
            {
                taken = inner
                    .accept(&mut state, item)
                    .and_then(|()| inner.take_ready(&mut state, limit));
            }
        }
        let count = state.buffer.len().min(limit);
        if count == 0 {
            taken?;
        } else if let Err(err) = taken {
            tracing::warn!(queue = %inner.options.queue, error = %err, "consuming stopped; delivering what arrived before");
        }
        let generation = state.generation;
        let out = state
            .buffer
            .drain(..count)
            .map(|message| {
                Box::new(AmqpDelivery::new(self.inner.clone(), generation, message))
                    as Box<dyn Delivery>
            })
            .collect();
        Ok(out)
    }

    fn batch_size(&self) -> usize {
        self.inner.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.inner.options.poll_interval
    }

    /// Waits up to `max` for the broker to push a message.
    async fn wait_ready(&self, max: Duration) {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + max;
        let Ok(channels) = inner.channels().await else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        let Ok(mut state) = tokio::time::timeout_at(deadline, inner.consumer.lock()).await else {
            return;
        };
        if !state.buffer.is_empty() || inner.ensure_consumer(&mut state, &channels).await.is_err() {
            return;
        }
        let Some(consumer) = state.consumer.as_mut() else {
            return;
        };
        if let Ok(item) = tokio::time::timeout_at(deadline, consumer.next()).await
            && let Err(err) = inner.accept(&mut state, item)
        {
            tracing::debug!(error = %err, "waiting for RabbitMQ messages");
        }
    }

    async fn return_unstarted(&self) -> Result<()> {
        self.inner.return_unstarted().await;
        Ok(())
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.inner.options;
        let mut map = Map::new();
        map.insert("queue".into(), Value::String(o.queue.clone()));
        if let Some(exchange) = o.effective_exchange() {
            map.insert("exchange".into(), Value::String(exchange.to_owned()));
        }
        map.insert(
            "routing_key".into(),
            Value::String(o.effective_routing_key().to_owned()),
        );
        map.insert("prefetch".into(), Value::from(o.prefetch));
        map
    }
}

#[async_trait]
impl Sink for RabbitMqQueue {
    /// Publishes the envelope through the exchange (or straight to the queue) by the routing
    /// key, and waits for the broker's confirm when `publisher_confirms`.
    async fn send(&self, envelope: Envelope) -> Result<()> {
        let inner = &self.inner;
        let o = &inner.options;
        let channels = inner.channels().await?;
        let payload = encode_envelope(&envelope);
        let fail = |err: &lapin::Error| {
            inner.mark_broken(channels.generation);
            inner.error(ConnectorOperation::Send, err)
        };
        let confirm = channels
            .publish
            .basic_publish(
                o.effective_exchange().unwrap_or("").into(),
                o.effective_routing_key().into(),
                BasicPublishOptions::default(),
                payload.as_bytes(),
                publish_properties(o.persistent),
            )
            .await
            .map_err(|e| fail(&e))?;
        if !o.publisher_confirms {
            return Ok(());
        }
        let Ok(confirmed) = tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await else {
            // The connection went silent: whether the broker stored it is unknown.
            inner.mark_broken(channels.generation);
            return Err(Error::Connector(
                ConnectorOperationError::new(
                    "rabbitmq",
                    ConnectorOperation::Send,
                    ConnectorErrorKind::Uncertain,
                    &inner.name,
                )
                .with_cause(std::io::Error::other(format!(
                    "no publisher confirm within {} s",
                    CONFIRM_TIMEOUT.as_secs()
                ))),
            ));
        };
        match confirmed.map_err(|e| fail(&e))? {
            Confirmation::Nack(_) => Err(Error::Connector(
                ConnectorOperationError::new(
                    "rabbitmq",
                    ConnectorOperation::Send,
                    ConnectorErrorKind::Transient,
                    &inner.name,
                )
                .with_cause(std::io::Error::other(
                    "the broker did not take the message (publisher confirm: nack)",
                )),
            )),
            Confirmation::Ack(_) | Confirmation::NotRequested => Ok(()),
        }
    }
}

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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection, Consumer, ExchangeKind};
use onestep_core::wire::encode_envelope;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Delivery, Envelope, Error,
    Resource, Result, Sink, Source,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::arguments::field_table;
use crate::connector::RabbitMqConnector;
use crate::delivery::AmqpDelivery;
use crate::options::RabbitMqQueueOptions;

/// How long a publish waits for the broker's confirm before its outcome counts as unknown.
pub(crate) const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// The two channels of one connection: one consumes (with the prefetch limit), one publishes
/// (in confirm mode). `generation` counts reconnections; a message belongs to one.
#[derive(Clone)]
pub(crate) struct Channels {
    pub(crate) generation: u64,
    consume: Channel,
    pub(crate) publish: Channel,
}

impl Channels {
    fn connected(&self) -> bool {
        self.consume.status().connected() && self.publish.status().connected()
    }
}

#[derive(Default)]
struct ConsumerState {
    generation: u64,
    consumer: Option<Consumer>,
    /// Messages taken from the consumer and not yet returned by a fetch.
    buffer: VecDeque<lapin::message::Delivery>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    connector: RabbitMqConnector,
    pub(crate) options: RabbitMqQueueOptions,
    arguments: FieldTable,
    bind_arguments: FieldTable,
    exchange_arguments: FieldTable,
    channels: Mutex<Option<Channels>>,
    /// The generation last built; held while (re)building.
    building: tokio::sync::Mutex<u64>,
    consumer: tokio::sync::Mutex<ConsumerState>,
    /// Retries waiting out their delay.
    pub(crate) retries: TaskTracker,
    /// Cancelled on close: waiting retries are carried out at once.
    pub(crate) closing: CancellationToken,
}

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
    /// A queue over `connector`, named `rabbitmq.queue:<queue>`; no I/O until it opens.
    pub fn new(connector: RabbitMqConnector, options: RabbitMqQueueOptions) -> Result<Self> {
        options.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: format!("rabbitmq.queue:{}", options.queue),
                arguments: field_table("arguments", &options.arguments)?,
                bind_arguments: field_table("bind_arguments", &options.bind_arguments)?,
                exchange_arguments: field_table("exchange_arguments", &options.exchange_arguments)?,
                connector,
                options,
                channels: Mutex::new(None),
                building: tokio::sync::Mutex::new(0),
                consumer: tokio::sync::Mutex::default(),
                retries: TaskTracker::new(),
                closing: CancellationToken::new(),
            }),
        })
    }

    /// The options in use.
    pub fn options(&self) -> &RabbitMqQueueOptions {
        &self.inner.options
    }
}

impl Inner {
    pub(crate) fn error(&self, operation: ConnectorOperation, err: &lapin::Error) -> Error {
        self.connector
            .error(&self.name, operation, err, Some(self.options.poll_interval))
    }

    fn channels_slot(&self) -> std::sync::MutexGuard<'_, Option<Channels>> {
        self.channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The channels of generation `generation` if they are still open.
    pub(crate) fn live_channels(&self) -> Option<Channels> {
        self.channels_slot().clone().filter(Channels::connected)
    }

    /// Forgets generation `generation` after an error on it, closing its channels if they are
    /// still open (so the broker requeues what they hold); the next use connects again.
    pub(crate) fn mark_broken(&self, generation: u64) {
        let broken = {
            let mut slot = self.channels_slot();
            if slot.as_ref().is_some_and(|c| c.generation == generation) {
                slot.take()
            } else {
                None
            }
        };
        if let Some(channels) = broken
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let close = async {
                    close_quietly(&channels.consume).await;
                    close_quietly(&channels.publish).await;
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), close).await;
            });
        }
    }

    /// Open channels with the topology declared: the current ones, or new ones.
    pub(crate) async fn channels(&self) -> Result<Channels> {
        if let Some(channels) = self.live_channels() {
            return Ok(channels);
        }
        let mut generation = self.building.lock().await;
        if let Some(channels) = self.live_channels() {
            return Ok(channels);
        }
        let conn = self.connector.connection(&self.name).await?;
        let built = self
            .build(&conn, *generation + 1)
            .await
            .map_err(|e| self.error(ConnectorOperation::Open, &e))?;
        *generation += 1;
        if *generation > 1 {
            tracing::info!(queue = %self.options.queue, "reconnected to RabbitMQ");
        }
        *self.channels_slot() = Some(built.clone());
        Ok(built)
    }

    async fn build(&self, conn: &Connection, generation: u64) -> lapin::Result<Channels> {
        let consume = conn.create_channel().await?;
        let publish = match conn.create_channel().await {
            Ok(publish) => publish,
            Err(err) => {
                close_quietly(&consume).await;
                return Err(err);
            }
        };
        let channels = Channels {
            generation,
            consume,
            publish,
        };
        if let Err(err) = self.declare(&channels).await {
            close_quietly(&channels.consume).await;
            close_quietly(&channels.publish).await;
            return Err(err);
        }
        Ok(channels)
    }

    async fn declare(&self, channels: &Channels) -> lapin::Result<()> {
        let o = &self.options;
        channels
            .consume
            .basic_qos(o.prefetch, BasicQosOptions::default())
            .await?;
        channels
            .publish
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        channels
            .consume
            .queue_declare(
                o.queue.as_str().into(),
                QueueDeclareOptions {
                    passive: false,
                    durable: o.durable,
                    exclusive: o.exclusive,
                    auto_delete: o.auto_delete,
                    nowait: false,
                },
                self.arguments.clone(),
            )
            .await?;
        if let Some(exchange) = o.effective_exchange() {
            let kind = match o.exchange_type.as_str() {
                "direct" => ExchangeKind::Direct,
                "fanout" => ExchangeKind::Fanout,
                "topic" => ExchangeKind::Topic,
                "headers" => ExchangeKind::Headers,
                other => ExchangeKind::Custom(other.to_owned()),
            };
            channels
                .consume
                .exchange_declare(
                    exchange.into(),
                    kind,
                    ExchangeDeclareOptions {
                        durable: o.exchange_durable.unwrap_or(o.durable),
                        auto_delete: o.exchange_auto_delete,
                        ..ExchangeDeclareOptions::default()
                    },
                    self.exchange_arguments.clone(),
                )
                .await?;
            if o.bind {
                channels
                    .consume
                    .queue_bind(
                        o.queue.as_str().into(),
                        exchange.into(),
                        o.effective_routing_key().into(),
                        QueueBindOptions::default(),
                        self.bind_arguments.clone(),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    /// Starts consuming on `channels` unless a consumer of that generation runs.
    async fn ensure_consumer(&self, state: &mut ConsumerState, channels: &Channels) -> Result<()> {
        if state.generation != channels.generation {
            // The old channel is gone and the broker requeued what it held.
            state.buffer.clear();
            state.consumer = None;
            state.generation = channels.generation;
        }
        if state.consumer.is_some() {
            return Ok(());
        }
        let tag = format!(
            "onestep-{}-{}-{}",
            std::process::id(),
            random_suffix(),
            channels.generation
        );
        let consumer = channels
            .consume
            .basic_consume(
                self.options.queue.as_str().into(),
                tag.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| {
                self.mark_broken(channels.generation);
                self.error(ConnectorOperation::Fetch, &e)
            })?;
        state.consumer = Some(consumer);
        Ok(())
    }

    /// Takes what the consumer has without waiting, up to `limit` in the buffer.
    fn take_ready(&self, state: &mut ConsumerState, limit: usize) -> Result<()> {
        while state.buffer.len() < limit {
            let Some(consumer) = state.consumer.as_mut() else {
                return Ok(());
            };
            match consumer.next().now_or_never() {
                None => return Ok(()),
                Some(item) => self.accept(state, item)?,
            }
        }
        Ok(())
    }

    /// Puts one consumer item into the buffer; an error or a cancelled consumer drops it.
    fn accept(
        &self,
        state: &mut ConsumerState,
        item: Option<lapin::Result<lapin::message::Delivery>>,
    ) -> Result<()> {
        match item {
            Some(Ok(message)) => {
                state.buffer.push_back(message);
                Ok(())
            }
            Some(Err(err)) => {
                state.consumer = None;
                self.mark_broken(state.generation);
                Err(self.error(ConnectorOperation::Fetch, &err))
            }
            None => {
                // The broker cancelled the consumer (the queue was deleted): consume again next
                // time, which declares the queue again.
                tracing::warn!(queue = %self.options.queue, "the broker cancelled the consumer");
                state.consumer = None;
                self.mark_broken(state.generation);
                Err(Error::Connector(
                    ConnectorOperationError::new(
                        "rabbitmq",
                        ConnectorOperation::Fetch,
                        ConnectorErrorKind::Disconnected,
                        &self.name,
                    )
                    .with_cause(std::io::Error::other("the broker cancelled the consumer")),
                ))
            }
        }
    }

    /// Cancels the consumer and requeues every message it took and did not hand out.
    async fn return_unstarted(&self) {
        let mut state = self.consumer.lock().await;
        let generation = state.generation;
        let channels = self.live_channels().filter(|c| c.generation == generation);
        if let Some(mut consumer) = state.consumer.take()
            && let Some(channels) = channels
        {
            if let Err(err) = channels
                .consume
                .basic_cancel(consumer.tag(), BasicCancelOptions::default())
                .await
            {
                tracing::debug!(error = %err, "cancelling the RabbitMQ consumer");
            }
            // What the broker sent before the cancel arrives before the end of the stream.
            while let Ok(Some(Ok(message))) =
                tokio::time::timeout(Duration::from_secs(2), consumer.next()).await
            {
                state.buffer.push_back(message);
            }
        }
        let returned = state.buffer.len();
        for message in state.buffer.drain(..) {
            if let Err(err) = message
                .acker
                .nack(BasicNackOptions {
                    multiple: false,
                    requeue: true,
                })
                .await
            {
                tracing::debug!(error = %err, "requeueing an unstarted message (the broker requeues it with the channel)");
            }
        }
        if returned > 0 {
            tracing::debug!(queue = %self.options.queue, returned, "requeued unstarted messages");
        }
    }
}

async fn close_quietly(channel: &Channel) {
    if channel.status().connected()
        && let Err(err) = channel.close(200, "onestep: closing".into()).await
    {
        tracing::debug!(error = %err, "closing a RabbitMQ channel");
    }
}

fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{:06x}", nanos & 0xff_ffff)
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

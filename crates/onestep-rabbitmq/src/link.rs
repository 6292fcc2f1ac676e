//! The connection state of one queue: its two channels (rebuilt after a connection drops, each
//! rebuild a new generation), its consumer and the messages taken from it, and the waiting
//! retries. [`crate::queue`] and [`crate::delivery`] both work on it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, Consumer, ExchangeKind};
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Result,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::arguments::field_table;
use crate::connector::RabbitMqConnector;
use crate::options::RabbitMqQueueOptions;

/// How long a publish waits for the broker's confirm before its outcome counts as unknown.
pub(crate) const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long opening channels (with the declarations), `basic.consume` or `basic.cancel` may
/// take before the connection counts as dead.
const RPC_TIMEOUT: Duration = Duration::from_secs(30);

/// The two channels of one connection: one consumes (with the prefetch limit), one publishes
/// (in confirm mode). `generation` counts reconnections; a message belongs to one.
#[derive(Clone)]
pub(crate) struct Channels {
    pub(crate) generation: u64,
    pub(crate) consume: Channel,
    pub(crate) publish: Channel,
}

impl Channels {
    fn connected(&self) -> bool {
        self.consume.status().connected() && self.publish.status().connected()
    }
}

#[derive(Default)]
pub(crate) struct ConsumerState {
    pub(crate) generation: u64,
    pub(crate) consumer: Option<Consumer>,
    /// Messages taken from the consumer and not yet returned by a fetch.
    pub(crate) buffer: VecDeque<lapin::message::Delivery>,
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
    pub(crate) consumer: tokio::sync::Mutex<ConsumerState>,
    /// Retries waiting out their delay.
    pub(crate) retries: TaskTracker,
    /// Cancelled on close: waiting retries are carried out at once.
    pub(crate) closing: CancellationToken,
}

impl Inner {
    /// The state of a queue over `connector` with (validated) `options`.
    pub(crate) fn new(connector: RabbitMqConnector, options: RabbitMqQueueOptions) -> Result<Self> {
        Ok(Self {
            name: options.queue.clone(),
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
        })
    }
}

impl Inner {
    pub(crate) fn error(&self, operation: ConnectorOperation, err: &lapin::Error) -> Error {
        self.connector
            .error(&self.name, operation, err, Some(self.options.poll_interval))
    }

    /// A `disconnected` error for `what`, which got no answer within [`RPC_TIMEOUT`].
    fn silent(&self, operation: ConnectorOperation, what: &str) -> Error {
        Error::Connector(
            ConnectorOperationError::new(
                "rabbitmq",
                operation,
                ConnectorErrorKind::Disconnected,
                &self.name,
            )
            .with_cause(std::io::Error::other(format!(
                "{what}: no answer from the broker within {} s",
                RPC_TIMEOUT.as_secs()
            ))),
        )
    }

    pub(crate) fn channels_slot(&self) -> std::sync::MutexGuard<'_, Option<Channels>> {
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
        let built =
            match tokio::time::timeout(RPC_TIMEOUT, self.build(&conn, *generation + 1)).await {
                Ok(built) => built.map_err(|e| self.error(ConnectorOperation::Open, &e))?,
                Err(_) => return Err(self.silent(ConnectorOperation::Open, "opening channels")),
            };
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
    pub(crate) async fn ensure_consumer(
        &self,
        state: &mut ConsumerState,
        channels: &Channels,
    ) -> Result<()> {
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
        let consuming = channels.consume.basic_consume(
            self.options.queue.as_str().into(),
            tag.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        );
        let consumer = match tokio::time::timeout(RPC_TIMEOUT, consuming).await {
            Ok(Ok(consumer)) => consumer,
            Ok(Err(err)) => {
                self.mark_broken(channels.generation);
                return Err(self.error(ConnectorOperation::Fetch, &err));
            }
            Err(_) => {
                self.mark_broken(channels.generation);
                return Err(self.silent(ConnectorOperation::Fetch, "basic.consume"));
            }
        };
        state.consumer = Some(consumer);
        Ok(())
    }

    /// Takes what the consumer has without waiting, up to `limit` in the buffer.
    pub(crate) fn take_ready(&self, state: &mut ConsumerState, limit: usize) -> Result<()> {
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
    pub(crate) fn accept(
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
    pub(crate) async fn return_unstarted(&self) {
        let mut state = self.consumer.lock().await;
        let generation = state.generation;
        let channels = self.live_channels().filter(|c| c.generation == generation);
        if let Some(mut consumer) = state.consumer.take()
            && let Some(channels) = channels
        {
            let cancel = channels
                .consume
                .basic_cancel(consumer.tag(), BasicCancelOptions::default());
            match tokio::time::timeout(RPC_TIMEOUT, cancel).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::debug!(error = %err, "cancelling the RabbitMQ consumer"),
                Err(_) => {
                    // A silent connection: closing the channel hands everything back.
                    self.mark_broken(generation);
                }
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

pub(crate) async fn close_quietly(channel: &Channel) {
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

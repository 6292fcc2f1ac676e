//! What a RabbitMQ queue source and sink use: [`RabbitMqQueueOptions`].

use std::time::Duration;

use onestep_core::{Error, Result};
use serde_json::{Map, Value};

use crate::arguments::field_table;

/// The queue, its exchange and binding, and how it is consumed and published to; the
/// reference's `rabbitmq_queue` fields with its defaults.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RabbitMqQueueOptions {
    /// The queue (declared on open).
    pub queue: String,
    /// The routing key messages are published with and the queue is bound by; default the
    /// queue's name.
    pub routing_key: Option<String>,
    /// The exchange to declare, bind the queue to and publish through; `None` publishes to the
    /// default exchange straight to the queue.
    pub exchange: Option<String>,
    /// `direct` (default), `fanout`, `topic`, `headers`, or a plugin's `x-…` type.
    pub exchange_type: String,
    /// Bind the queue to the exchange (default true).
    pub bind: bool,
    /// Arguments of the binding (`headers` exchanges match on them).
    pub bind_arguments: Map<String, Value>,
    /// The queue survives a broker restart (default true).
    pub durable: bool,
    /// The broker deletes the queue when its last consumer leaves (default false).
    pub auto_delete: bool,
    /// Only this connection may use the queue, and it goes with the connection (default false).
    pub exclusive: bool,
    /// Queue arguments (`x-queue-type`, `x-max-length`, `x-dead-letter-exchange`, …).
    pub arguments: Map<String, Value>,
    /// The exchange survives a restart; default [`durable`](Self::durable).
    pub exchange_durable: Option<bool>,
    /// The exchange is deleted when its last binding goes (default false).
    pub exchange_auto_delete: bool,
    /// Exchange arguments (`alternate-exchange`, …).
    pub exchange_arguments: Map<String, Value>,
    /// Most unacknowledged messages the broker sends this consumer (default 100; 0: no limit).
    pub prefetch: u16,
    /// Most messages per fetch (default 100).
    pub batch_size: usize,
    /// How long a worker waits for a message before it looks again (default 1 s), and the
    /// back-off after a connection error.
    pub poll_interval: Duration,
    /// Wait for the broker to confirm each published message (default true).
    pub publisher_confirms: bool,
    /// Publish with delivery mode 2, written to disk on a durable queue (default true).
    pub persistent: bool,
}

impl RabbitMqQueueOptions {
    /// Options for `queue` with the reference's defaults.
    pub fn new(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            routing_key: None,
            exchange: None,
            exchange_type: "direct".into(),
            bind: true,
            bind_arguments: Map::new(),
            durable: true,
            auto_delete: false,
            exclusive: false,
            arguments: Map::new(),
            exchange_durable: None,
            exchange_auto_delete: false,
            exchange_arguments: Map::new(),
            prefetch: 100,
            batch_size: 100,
            poll_interval: Duration::from_secs(1),
            publisher_confirms: true,
            persistent: true,
        }
    }

    /// Publishes through (and binds the queue to) `exchange` of `exchange_type`.
    pub fn with_exchange(
        mut self,
        exchange: impl Into<String>,
        exchange_type: impl Into<String>,
    ) -> Self {
        self.exchange = Some(exchange.into());
        self.exchange_type = exchange_type.into();
        self
    }

    /// Sets the routing key.
    pub fn with_routing_key(mut self, routing_key: impl Into<String>) -> Self {
        self.routing_key = Some(routing_key.into());
        self
    }

    /// Sets the prefetch count.
    pub fn with_prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets the most messages per fetch.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the poll interval.
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Sets whether the queue is durable (and, unless set apart, the exchange).
    pub fn with_durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// Sets the queue arguments.
    pub fn with_arguments(mut self, arguments: Map<String, Value>) -> Self {
        self.arguments = arguments;
        self
    }

    /// Sets whether publishing waits for the broker's confirm.
    pub fn with_publisher_confirms(mut self, confirms: bool) -> Self {
        self.publisher_confirms = confirms;
        self
    }

    /// Sets whether messages are published persistent.
    pub fn with_persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// The routing key in use: the configured one or the queue's name.
    pub fn effective_routing_key(&self) -> &str {
        self.routing_key.as_deref().unwrap_or(&self.queue)
    }

    /// The exchange in use, `None` for the default exchange (an empty name is the default).
    pub fn effective_exchange(&self) -> Option<&str> {
        self.exchange.as_deref().filter(|e| !e.is_empty())
    }

    /// Checks every field, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        if self.queue.is_empty() {
            return Err(Error::invalid("queue", "must be a non-empty string"));
        }
        for (field, value) in [
            ("queue", Some(self.queue.as_str())),
            ("routing_key", self.routing_key.as_deref()),
            ("exchange", self.exchange.as_deref()),
        ] {
            if value.is_some_and(|v| v.len() > 255) {
                return Err(Error::invalid(field, "must be at most 255 bytes"));
            }
        }
        let known = ["direct", "fanout", "topic", "headers"];
        if !known.contains(&self.exchange_type.as_str()) && !self.exchange_type.starts_with("x-") {
            return Err(Error::invalid(
                "exchange_type",
                format!(
                    "expected one of direct, fanout, topic, headers or a plugin's x-… type, got {:?}",
                    self.exchange_type
                ),
            ));
        }
        if self.batch_size < 1 {
            return Err(Error::invalid("batch_size", "must be >= 1, got 0"));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval_s", "must be > 0, got 0"));
        }
        field_table("arguments", &self.arguments)?;
        field_table("bind_arguments", &self.bind_arguments)?;
        field_table("exchange_arguments", &self.exchange_arguments)?;
        Ok(())
    }
}

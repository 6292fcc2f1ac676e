//! This crate's resource types for declarative apps: the `rabbitmq` connector and
//! `rabbitmq_queue` (a source and a sink), with the reference's fields.
//!
//! ```
//! let mut catalog = onestep_core::catalog::Catalog::core();
//! onestep_rabbitmq::catalog::register(&mut catalog);
//! assert!(catalog.get("rabbitmq_queue").is_some());
//! ```

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, Catalog, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::{Map, Value};

use crate::connector::{RabbitMqConnector, RabbitMqOptions};
use crate::options::RabbitMqQueueOptions;
use crate::queue::RabbitMqQueue;

/// Adds `rabbitmq` and `rabbitmq_queue` to `catalog`.
pub fn register(catalog: &mut Catalog) {
    catalog.add(ConnectorType).add(QueueType);
}

const CONNECTOR_FIELDS: &[FieldDoc] = &[
    FieldDoc::required(
        "url",
        "string",
        "amqp://[user:password@]host[:port][/vhost] (vhost percent-encoded, %2f is /)",
    ),
    FieldDoc::optional(
        "options",
        "mapping",
        None,
        "heartbeat, timeout, client_properties.connection_name",
    ),
];

/// `type: rabbitmq`.
struct ConnectorType;

impl ResourceType for ConnectorType {
    type Options = (String, RabbitMqOptions);

    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Connector]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        CONNECTOR_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("RabbitMQConnector")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let url = f.string("url").and_then(|url| {
            if url.starts_with("amqp://") || url.starts_with("amqps://") {
                Some(url)
            } else {
                f.problem("url", "must start with amqp:// or amqps://");
                None
            }
        });
        let options = connector_options(f);
        let (url, options) = (url?, options?);
        if let Err(onestep_core::Error::InvalidArgument { field, message }) =
            RabbitMqConnector::with_options(&url, options.clone())
        {
            f.problem(&field, message);
            return None;
        }
        Some((url, options))
    }

    fn build(
        &self,
        _name: &str,
        (url, options): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = RabbitMqConnector::with_options(&url, options)
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Connector {
            kind: "rabbitmq",
            value: Arc::new(connector.clone()),
            lifecycle: Arc::new(connector),
        })
    }
}

/// `options`: the settings of aio-pika's `connect_robust` keywords that apply here.
fn connector_options(f: &mut Fields<'_>) -> Option<RabbitMqOptions> {
    let mut out = RabbitMqOptions::default();
    let Some(value) = f.value("options") else {
        return Some(out);
    };
    let Value::Object(map) = value else {
        f.problem(
            "options",
            format!("expected a mapping, got {}", type_name(value)),
        );
        return None;
    };
    let mut ok = true;
    for (key, value) in map {
        let field = format!("options.{key}");
        match (key.as_str(), value) {
            ("heartbeat", Value::Number(n)) if n.as_u64().is_some_and(|n| n <= 65_535) => {
                out.heartbeat = n.as_u64().and_then(|n| u16::try_from(n).ok());
            }
            ("timeout", Value::Number(n))
                if n.as_f64()
                    .is_some_and(|s| s > 0.0 && s.is_finite() && s < 1e9) =>
            {
                out.timeout = Some(Duration::from_secs_f64(n.as_f64().unwrap_or(10.0)));
            }
            ("client_properties", Value::Object(props)) => {
                for (prop, value) in props {
                    match (prop.as_str(), value) {
                        ("connection_name", Value::String(name)) => {
                            out.connection_name = Some(name.clone());
                        }
                        _ => {
                            f.problem(
                                &format!("{field}.{prop}"),
                                "unsupported client property; expected connection_name (a string)",
                            );
                            ok = false;
                        }
                    }
                }
            }
            ("heartbeat", other) => {
                f.problem(
                    &field,
                    format!("expected an integer of seconds 0..=65535, got {other}"),
                );
                ok = false;
            }
            ("timeout", other) => {
                f.problem(
                    &field,
                    format!("expected a number of seconds > 0, got {other}"),
                );
                ok = false;
            }
            _ => {
                f.problem(
                    &field,
                    "unsupported rabbitmq option; expected one of: heartbeat, timeout, \
                     client_properties",
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

const QUEUE_FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the rabbitmq connector resource"),
    FieldDoc::optional(
        "queue",
        "string",
        Some("<name>, else the resource name"),
        "the queue",
    ),
    FieldDoc::optional(
        "name",
        "string",
        None,
        "the queue (when `queue` is not given)",
    ),
    FieldDoc::optional(
        "routing_key",
        "string",
        Some("the queue"),
        "the routing key to publish with and bind by",
    ),
    FieldDoc::optional(
        "exchange",
        "string",
        None,
        "the exchange to declare, bind to and publish through (default: the default exchange)",
    ),
    FieldDoc::optional(
        "exchange_type",
        "string",
        Some("direct"),
        "direct, fanout, topic, headers or x-…",
    ),
    FieldDoc::optional(
        "bind",
        "boolean",
        Some("true"),
        "bind the queue to the exchange",
    ),
    FieldDoc::optional(
        "bind_arguments",
        "mapping",
        None,
        "arguments of the binding",
    ),
    FieldDoc::optional(
        "durable",
        "boolean",
        Some("true"),
        "the queue survives a restart",
    ),
    FieldDoc::optional(
        "auto_delete",
        "boolean",
        Some("false"),
        "delete the queue when its last consumer leaves",
    ),
    FieldDoc::optional(
        "exclusive",
        "boolean",
        Some("false"),
        "only this connection uses the queue",
    ),
    FieldDoc::optional(
        "arguments",
        "mapping",
        None,
        "queue arguments (x-queue-type, …)",
    ),
    FieldDoc::optional(
        "exchange_durable",
        "boolean",
        Some("durable"),
        "the exchange survives a restart",
    ),
    FieldDoc::optional(
        "exchange_auto_delete",
        "boolean",
        Some("false"),
        "delete the exchange when its last binding goes",
    ),
    FieldDoc::optional("exchange_arguments", "mapping", None, "exchange arguments"),
    FieldDoc::optional(
        "prefetch",
        "integer",
        Some("100"),
        "most unacknowledged messages in flight (0: no limit)",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("100"),
        "most messages per fetch",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("1.0"),
        "wait for messages before looking again; back-off after errors",
    ),
    FieldDoc::optional(
        "publisher_confirms",
        "boolean",
        Some("true"),
        "wait for the broker to confirm each published message",
    ),
    FieldDoc::optional(
        "persistent",
        "boolean",
        Some("true"),
        "publish with delivery mode 2",
    ),
];

/// `type: rabbitmq_queue`.
struct QueueType;

/// A queue's connector and options, read from YAML.
struct QueueSpec {
    connector: String,
    options: RabbitMqQueueOptions,
}

/// An optional mapping at `key`.
fn mapping(f: &mut Fields<'_>, key: &str) -> Map<String, Value> {
    match f.value(key) {
        None => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            f.problem(key, format!("expected a mapping, got {}", type_name(other)));
            Map::new()
        }
    }
}

/// An optional string at `key` that may be empty (the reference's `exchange: ""` is the
/// default exchange).
fn maybe_empty_string(f: &mut Fields<'_>, key: &str) -> Option<String> {
    match f.value(key)? {
        Value::String(s) => Some(s.clone()),
        other => {
            f.problem(key, format!("expected a string, got {}", type_name(other)));
            None
        }
    }
}

impl ResourceType for QueueType {
    type Options = QueueSpec;

    fn name(&self) -> &'static str {
        "rabbitmq_queue"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source, Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        QUEUE_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("RabbitMQQueue")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<QueueSpec> {
        let connector = f.reference("connector", Role::Connector, Some("rabbitmq"));
        let queue = f.opt_string("queue");
        let name = f.opt_string("name");
        let queue = queue
            .or(name)
            .unwrap_or_else(|| f.resource_name().to_owned());
        let mut o = RabbitMqQueueOptions::new(queue);
        o.routing_key = f.opt_string("routing_key");
        o.exchange = maybe_empty_string(f, "exchange");
        if let Some(kind) = f.opt_string("exchange_type") {
            o.exchange_type = kind;
        }
        for (key, slot) in [
            ("bind", &mut o.bind),
            ("durable", &mut o.durable),
            ("auto_delete", &mut o.auto_delete),
            ("exclusive", &mut o.exclusive),
            ("exchange_auto_delete", &mut o.exchange_auto_delete),
            ("publisher_confirms", &mut o.publisher_confirms),
            ("persistent", &mut o.persistent),
        ] {
            if let Some(b) = f.opt_bool(key) {
                *slot = b;
            }
        }
        o.exchange_durable = f.opt_bool("exchange_durable");
        o.bind_arguments = mapping(f, "bind_arguments");
        o.arguments = mapping(f, "arguments");
        o.exchange_arguments = mapping(f, "exchange_arguments");
        if let Some(n) = f.opt_integer("prefetch", 0) {
            match u16::try_from(n) {
                Ok(n) => o.prefetch = n,
                Err(_) => f.problem("prefetch", format!("must be at most 65535, got {n}")),
            }
        }
        if let Some(n) = f.opt_count("batch_size", 1) {
            o.batch_size = n;
        }
        if let Some(s) = f.opt_number("poll_interval_s", false) {
            o.poll_interval = Duration::from_secs_f64(s);
        }
        if let Err(onestep_core::Error::InvalidArgument { field, message }) = o.validate() {
            f.problem(&field, message);
        }
        Some(QueueSpec {
            connector: connector?,
            options: o,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: QueueSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<RabbitMqConnector>(&spec.connector, "rabbitmq")?;
        let queue = RabbitMqQueue::new(RabbitMqConnector::clone(&connector), spec.options)
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Both {
            source: Arc::new(queue.clone()),
            sink: Arc::new(queue),
        })
    }
}

//! This crate's resource types for declarative apps: the `redis` connector and `redis_stream`
//! (a source and a sink), with the reference's fields.
//!
//! ```
//! let mut catalog = onestep_core::catalog::Catalog::core();
//! onestep_redis::catalog::register(&mut catalog);
//! assert!(catalog.get("redis_stream").is_some());
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::Resource;
use onestep_core::catalog::{
    BuildContext, BuildError, Built, Catalog, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::Value;

use crate::connector::{RedisConnector, RedisOptions};
use crate::stream::{RedisStream, RedisStreamOptions};

/// Adds `redis` and `redis_stream` to `catalog`.
pub fn register(catalog: &mut Catalog) {
    catalog.add(ConnectorType).add(StreamType);
}

const CONNECTOR_FIELDS: &[FieldDoc] = &[
    FieldDoc::required("url", "string", "redis://[user:password@]host[:port][/db]"),
    FieldDoc::optional(
        "options",
        "mapping",
        None,
        "username, password, db, socket_connect_timeout, socket_timeout",
    ),
];

/// `type: redis`.
struct ConnectorType;

impl ResourceType for ConnectorType {
    type Options = (String, RedisOptions);

    fn name(&self) -> &'static str {
        "redis"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Connector]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        CONNECTOR_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("RedisConnector")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let url = f.string("url").and_then(|url| {
            if url.starts_with("redis://") || url.starts_with("rediss://") {
                Some(url)
            } else {
                f.problem("url", "must start with redis:// or rediss://");
                None
            }
        });
        let options = options(f);
        Some((url?, options?))
    }

    fn build(
        &self,
        name: &str,
        (url, options): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = RedisConnector::with_options(&url, options)
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Connector {
            kind: "redis",
            value: Arc::new(connector),
            lifecycle: Arc::new(Lifecycle(name.to_owned())),
        })
    }
}

/// Nothing to open or close: connections are made on first use and dropped with the app.
struct Lifecycle(String);

#[async_trait]
impl Resource for Lifecycle {
    fn name(&self) -> &str {
        &self.0
    }
}

/// `options`: the settings of the reference's `options` mapping that apply here.
fn options(f: &mut Fields<'_>) -> Option<RedisOptions> {
    let mut out = RedisOptions::default();
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
            ("username", Value::String(s)) => out.username = Some(s.clone()),
            ("password", Value::String(s)) => out.password = Some(s.clone()),
            ("db", Value::Number(n)) if n.as_i64().is_some_and(|n| n >= 0) => {
                out.db = n.as_i64();
            }
            ("socket_connect_timeout" | "socket_timeout", Value::Number(n))
                if n.as_f64()
                    .is_some_and(|s| s > 0.0 && s.is_finite() && s < 1e9) =>
            {
                let d = Duration::from_secs_f64(n.as_f64().unwrap_or(1.0));
                if key == "socket_timeout" {
                    out.socket_timeout = Some(d);
                } else {
                    out.socket_connect_timeout = Some(d);
                }
            }
            ("username" | "password", other) => {
                f.problem(
                    &field,
                    format!("expected a string, got {}", type_name(other)),
                );
                ok = false;
            }
            ("db", other) => {
                f.problem(&field, format!("expected an integer >= 0, got {other}"));
                ok = false;
            }
            ("socket_connect_timeout" | "socket_timeout", other) => {
                f.problem(
                    &field,
                    format!("expected a number of seconds > 0, got {other}"),
                );
                ok = false;
            }
            _ => {
                f.problem(
                    &field,
                    "unsupported redis option; expected one of: username, password, db, \
                     socket_connect_timeout, socket_timeout",
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

const STREAM_FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the redis connector resource"),
    FieldDoc::optional(
        "stream",
        "string",
        Some("<name>, else the resource name"),
        "the stream key",
    ),
    FieldDoc::optional(
        "name",
        "string",
        None,
        "the stream key (when `stream` is not given)",
    ),
    FieldDoc::optional("group", "string", Some("onestep"), "the consumer group"),
    FieldDoc::optional(
        "consumer",
        "string",
        Some("consumer-<pid>-<random>"),
        "this consumer's name in the group",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("100"),
        "most entries per fetch",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("1.0"),
        "sleep after finding nothing new",
    ),
    FieldDoc::optional(
        "block_ms",
        "integer",
        Some("poll_interval_s in ms"),
        "how long a read blocks for new entries",
    ),
    FieldDoc::optional(
        "start_id",
        "string",
        Some("$"),
        "where a created group starts ($: new entries only, 0: all)",
    ),
    FieldDoc::optional(
        "create_group",
        "boolean",
        Some("true"),
        "create the group and stream when missing",
    ),
    FieldDoc::optional(
        "maxlen",
        "integer",
        None,
        "trim the stream to about this length on append",
    ),
    FieldDoc::optional(
        "approximate_trim",
        "boolean",
        Some("true"),
        "trim with MAXLEN ~ (approximate)",
    ),
    FieldDoc::optional(
        "reclaim_idle_s",
        "number",
        Some("60"),
        "idle time after which another consumer's pending entries are taken over",
    ),
];

/// `type: redis_stream`.
struct StreamType;

/// A stream's connector and options, read from YAML.
struct StreamSpec {
    connector: String,
    options: RedisStreamOptions,
}

impl ResourceType for StreamType {
    type Options = StreamSpec;

    fn name(&self) -> &'static str {
        "redis_stream"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source, Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        STREAM_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("RedisStreamQueue")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<StreamSpec> {
        let connector = f.reference("connector", Role::Connector, Some("redis"));
        let stream = f.opt_string("stream");
        let name = f.opt_string("name");
        let key = stream
            .or(name)
            .unwrap_or_else(|| f.resource_name().to_owned());
        let mut options = RedisStreamOptions::new(key);
        if let Some(group) = f.opt_string("group") {
            options = options.with_group(group);
        }
        if let Some(consumer) = f.opt_string("consumer") {
            options = options.with_consumer(consumer);
        }
        if let Some(n) = f.opt_count("batch_size", 1) {
            options = options.with_batch_size(n);
        }
        if let Some(s) = f.opt_number("poll_interval_s", false) {
            options = options.with_poll_interval(Duration::from_secs_f64(s));
        }
        if let Some(ms) = f.opt_integer("block_ms", 0) {
            options = options.with_block(Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        }
        if let Some(id) = f.opt_string("start_id") {
            options = options.with_start_id(id);
        }
        if let Some(create) = f.opt_bool("create_group") {
            options = options.with_create_group(create);
        }
        let approximate = f.opt_bool("approximate_trim").unwrap_or(true);
        if let Some(n) = f.opt_count("maxlen", 1) {
            options = options.with_maxlen(n, approximate);
        } else {
            options.approximate_trim = approximate;
        }
        if let Some(s) = f.opt_number("reclaim_idle_s", false) {
            options = options.with_reclaim_idle(Duration::from_secs_f64(s));
        }
        if let Err(onestep_core::Error::InvalidArgument { field, message }) = options.validate() {
            f.problem(&field, message);
        }
        Some(StreamSpec {
            connector: connector?,
            options,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: StreamSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<RedisConnector>(&spec.connector, "redis")?;
        let stream = RedisStream::new(RedisConnector::clone(&connector), spec.options)
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Both {
            source: Arc::new(stream.clone()),
            sink: Arc::new(stream),
        })
    }
}

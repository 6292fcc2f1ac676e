//! `RedisStream`: a Redis stream read through a consumer group (a [`Source`]) and appended to
//! (a [`Sink`]), as the reference's `redis_stream`.
//!
//! # Delivery
//!
//! - New entries are read with `XREADGROUP … >` (blocking up to `block_ms` when nothing else is
//!   due); each entry's `body` field holds the envelope, JSON `{"body", "meta", "attempts"}`
//!   ([`onestep_core::wire`]).
//! - **ack** and **fail** remove the entry from the group's pending list (`XACK`); a dead letter,
//!   when the task has one, was written before the fail.
//! - **retry** keeps the entry pending and delivers it again after its delay, before anything
//!   new, with `attempts` one higher.
//! - **A crash** leaves the entries in the dead consumer's pending list. Another consumer takes
//!   them over with `XAUTOCLAIM` once they have been idle `reclaim_idle_s` (default 60 s); a
//!   consumer that keeps its name reads its own pending list again when it opens. While a
//!   handler runs, its entry's idle time is reset every third of `reclaim_idle_s`, so a slow
//!   handler's entry is not taken from a live consumer.
//! - Entries without a `body` field are delivered with their fields as the body (the reference
//!   skips them, leaving them pending forever).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{
    ConnectorOperation, Delivery, Envelope, Error, FailureInfo, Resource, Result, Sink, Source,
};
use redis::aio::ConnectionManager;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::connector::{RedisConnector, connector_error};
use onestep_core::wire::{decode_envelope, encode_envelope};

/// What a Redis stream source and sink use.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RedisStreamOptions {
    /// The stream key.
    pub stream: String,
    /// The consumer group (default `onestep`).
    pub group: String,
    /// This consumer's name in the group; default `consumer-<pid>-<random>`, new per process.
    pub consumer: Option<String>,
    /// Most entries per fetch (default 100).
    pub batch_size: usize,
    /// How long a worker waits after an empty fetch (default 1 s).
    pub poll_interval: Duration,
    /// How long a read blocks for new entries; default the poll interval.
    pub block: Option<Duration>,
    /// Where a group this source creates starts: `$` (new entries only, the default) or an id
    /// (`0` for the whole stream).
    pub start_id: String,
    /// Create the group (and the stream) when missing (default true).
    pub create_group: bool,
    /// Trim the stream to about this many entries on every append.
    pub maxlen: Option<usize>,
    /// Trim approximately (`MAXLEN ~`, the default) rather than exactly.
    pub approximate_trim: bool,
    /// How long another consumer's pending entry must be idle before this one takes it over
    /// (default 60 s).
    pub reclaim_idle: Duration,
}

impl RedisStreamOptions {
    /// Options for `stream` with the reference's defaults.
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            group: "onestep".into(),
            consumer: None,
            batch_size: 100,
            poll_interval: Duration::from_secs(1),
            block: None,
            start_id: "$".into(),
            create_group: true,
            maxlen: None,
            approximate_trim: true,
            reclaim_idle: Duration::from_secs(60),
        }
    }

    /// Sets the consumer group.
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Sets this consumer's name.
    pub fn with_consumer(mut self, consumer: impl Into<String>) -> Self {
        self.consumer = Some(consumer.into());
        self
    }

    /// Sets the most entries per fetch.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the wait after an empty fetch.
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Sets how long a read blocks.
    pub fn with_block(mut self, block: Duration) -> Self {
        self.block = Some(block);
        self
    }

    /// Sets where a created group starts.
    pub fn with_start_id(mut self, start_id: impl Into<String>) -> Self {
        self.start_id = start_id.into();
        self
    }

    /// Whether to create the group when missing.
    pub fn with_create_group(mut self, create_group: bool) -> Self {
        self.create_group = create_group;
        self
    }

    /// Trims the stream on append to about (or, without `approximate`, exactly) `maxlen`.
    pub fn with_maxlen(mut self, maxlen: usize, approximate: bool) -> Self {
        self.maxlen = Some(maxlen);
        self.approximate_trim = approximate;
        self
    }

    /// Sets the idle time after which another consumer's pending entries are taken over.
    pub fn with_reclaim_idle(mut self, reclaim_idle: Duration) -> Self {
        self.reclaim_idle = reclaim_idle;
        self
    }

    /// Checks every field, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        for (field, value) in [
            ("stream", &self.stream),
            ("group", &self.group),
            ("start_id", &self.start_id),
        ] {
            if value.is_empty() {
                return Err(Error::invalid(field, "must be a non-empty string"));
            }
        }
        if self.consumer.as_ref().is_some_and(String::is_empty) {
            return Err(Error::invalid("consumer", "must be a non-empty string"));
        }
        if self.batch_size < 1 {
            return Err(Error::invalid("batch_size", "must be >= 1, got 0"));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval_s", "must be > 0, got 0"));
        }
        if self.maxlen == Some(0) {
            return Err(Error::invalid("maxlen", "must be >= 1, got 0"));
        }
        if self.reclaim_idle < Duration::from_millis(100) {
            return Err(Error::invalid(
                "reclaim_idle_s",
                "must be at least 0.1 (a live consumer's entries would be taken from it)",
            ));
        }
        Ok(())
    }
}

/// An entry to deliver again: retried, handed back, or recovered from a pending list.
struct Again {
    envelope: Envelope,
    ready_at: Instant,
}

#[derive(Default)]
struct State {
    /// Entries delivered and not yet acked, failed, retried or released.
    in_flight: HashSet<String>,
    /// Entries to deliver again, by id, with their order.
    again: HashMap<String, Again>,
    order: VecDeque<String>,
    /// This consumer's own pending list was read after opening.
    recovered: bool,
    last_reclaim: Option<Instant>,
}

struct Inner {
    name: String,
    connector: RedisConnector,
    options: RedisStreamOptions,
    consumer: String,
    block: Duration,
    state: Mutex<State>,
    /// The connection blocking reads use; made on first fetch.
    reader: tokio::sync::Mutex<Option<ConnectionManager>>,
    opened: tokio::sync::OnceCell<()>,
}

/// A Redis stream as a source and a sink (see the module docs). Clones share one consumer.
#[derive(Clone)]
pub struct RedisStream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStream")
            .field("stream", &self.inner.options.stream)
            .field("group", &self.inner.options.group)
            .field("consumer", &self.inner.consumer)
            .finish()
    }
}

fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{:06x}", nanos & 0xff_ffff)
}

impl RedisStream {
    /// A stream over `connector`, named after its stream, as in the reference; no I/O until it opens.
    pub fn new(connector: RedisConnector, options: RedisStreamOptions) -> Result<Self> {
        options.validate()?;
        let consumer = options
            .consumer
            .clone()
            .unwrap_or_else(|| format!("consumer-{}-{}", std::process::id(), random_suffix()));
        let block = options.block.unwrap_or(options.poll_interval);
        Ok(Self {
            inner: Arc::new(Inner {
                name: options.stream.clone(),
                connector,
                options,
                consumer,
                block,
                state: Mutex::default(),
                reader: tokio::sync::Mutex::new(None),
                opened: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// This consumer's name in the group.
    pub fn consumer(&self) -> &str {
        &self.inner.consumer
    }
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn error(&self, operation: ConnectorOperation, err: &redis::RedisError) -> Error {
        connector_error(&self.name, operation, err, Some(self.options.poll_interval))
    }

    async fn shared(&self, operation: ConnectorOperation) -> Result<ConnectionManager> {
        self.connector.shared(&self.name, operation).await
    }

    /// Creates the group (and stream) when configured to; an existing group is fine.
    async fn open(self: &Arc<Self>) -> Result<()> {
        self.opened
            .get_or_try_init(|| async {
                if self.options.create_group {
                    self.create_group().await?;
                }
                let weak = Arc::downgrade(self);
                tokio::spawn(keep_claimed(weak, self.options.reclaim_idle / 3));
                Ok::<_, Error>(())
            })
            .await
            .map(drop)
    }

    async fn create_group(&self) -> Result<()> {
        let mut conn = self.shared(ConnectorOperation::Open).await?;
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.options.stream)
            .arg(&self.options.group)
            .arg(&self.options.start_id)
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(self.error(ConnectorOperation::Open, &e)),
        }
    }

    /// The entries in `ids` as deliveries (marked in flight).
    fn deliveries(self: &Arc<Self>, ids: Vec<StreamId>) -> Vec<Box<dyn Delivery>> {
        let mut state = self.state();
        let mut out: Vec<Box<dyn Delivery>> = Vec::with_capacity(ids.len());
        for entry in ids {
            if state.in_flight.contains(&entry.id) {
                continue;
            }
            // Another delivery of it is due again: this one is that one.
            state.again.remove(&entry.id);
            state.in_flight.insert(entry.id.clone());
            let envelope = envelope_of(&entry);
            out.push(Box::new(StreamDelivery {
                source: self.clone(),
                id: entry.id,
                envelope,
                done: false,
            }));
        }
        out
    }

    /// Due re-deliveries, oldest first, up to `limit`.
    fn due(self: &Arc<Self>, limit: usize) -> Vec<Box<dyn Delivery>> {
        let mut state = self.state();
        let now = Instant::now();
        let mut out: Vec<Box<dyn Delivery>> = Vec::new();
        let mut kept = VecDeque::new();
        while let Some(id) = state.order.pop_front() {
            let ready = state.again.get(&id).is_some_and(|a| a.ready_at <= now);
            if out.len() < limit
                && ready
                && let Some(again) = state.again.remove(&id)
            {
                state.in_flight.insert(id.clone());
                out.push(Box::new(StreamDelivery {
                    source: self.clone(),
                    id,
                    envelope: again.envelope,
                    done: false,
                }));
            } else if state.again.contains_key(&id) {
                kept.push_back(id);
            }
        }
        state.order = kept;
        out
    }

    /// Reads this consumer's own pending list (entries a previous run under the same name
    /// left); once after opening.
    async fn recover(self: &Arc<Self>, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let mut conn = self.shared(ConnectorOperation::Fetch).await?;
        let reply: StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.options.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(limit)
            .arg("STREAMS")
            .arg(&self.options.stream)
            .arg("0")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(ConnectorOperation::Fetch, &e))?;
        let ids: Vec<StreamId> = reply.keys.into_iter().flat_map(|k| k.ids).collect();
        if ids.is_empty() {
            self.state().recovered = true;
        }
        Ok(self.deliveries(ids))
    }

    /// Takes over other consumers' entries idle longer than `reclaim_idle`.
    async fn reclaim(self: &Arc<Self>, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let mut conn = self.shared(ConnectorOperation::Fetch).await?;
        let idle = u64::try_from(self.options.reclaim_idle.as_millis()).unwrap_or(u64::MAX);
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(&self.options.stream)
            .arg(&self.options.group)
            .arg(&self.consumer)
            .arg(idle)
            .arg("0-0")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(ConnectorOperation::Fetch, &e))?;
        if !reply.deleted_ids.is_empty() {
            tracing::warn!(
                stream = %self.options.stream, count = reply.deleted_ids.len(),
                "pending entries were trimmed from the stream before they were handled"
            );
        }
        if !reply.claimed.is_empty() {
            tracing::info!(
                stream = %self.options.stream, consumer = %self.consumer,
                count = reply.claimed.len(), "took over idle entries of another consumer"
            );
        }
        Ok(self.deliveries(reply.claimed))
    }

    /// New entries, blocking up to `block` when `wait`.
    async fn read_new(
        self: &Arc<Self>,
        limit: usize,
        wait: bool,
    ) -> Result<Vec<Box<dyn Delivery>>> {
        let mut reader = self.reader.lock().await;
        if reader.is_none() {
            *reader = Some(
                self.connector
                    .blocking_connection(&self.name, self.block)
                    .await?,
            );
        }
        let Some(conn) = reader.as_mut() else {
            return Ok(Vec::new());
        };
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.options.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(limit);
        if wait {
            cmd.arg("BLOCK").arg(
                u64::try_from(self.block.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        }
        cmd.arg("STREAMS").arg(&self.options.stream).arg(">");
        let reply: redis::RedisResult<Option<StreamReadReply>> = cmd.query_async(conn).await;
        match reply {
            Ok(reply) => {
                let ids = reply
                    .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
                    .unwrap_or_default();
                Ok(self.deliveries(ids))
            }
            Err(e) if e.code() == Some("NOGROUP") && self.options.create_group => {
                // The stream or group was deleted under us: make it again, read next time.
                drop(reader);
                self.create_group().await?;
                Ok(Vec::new())
            }
            Err(e) => Err(self.error(ConnectorOperation::Fetch, &e)),
        }
    }

    /// Resets the idle time of the entries in flight, so no other consumer takes them.
    async fn touch(&self) -> Result<()> {
        let ids: Vec<String> = self.state().in_flight.iter().cloned().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.shared(ConnectorOperation::Heartbeat).await?;
        for chunk in ids.chunks(500) {
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(&self.options.stream)
                .arg(&self.options.group)
                .arg(&self.consumer)
                .arg(0)
                .arg(chunk)
                .arg("JUSTID");
            let _: Vec<String> = cmd
                .query_async(&mut conn)
                .await
                .map_err(|e| self.error(ConnectorOperation::Heartbeat, &e))?;
        }
        Ok(())
    }

    async fn xack(&self, id: &str, operation: ConnectorOperation) -> Result<()> {
        let mut conn = self.shared(operation).await?;
        let _: i64 = redis::cmd("XACK")
            .arg(&self.options.stream)
            .arg(&self.options.group)
            .arg(id)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(operation, &e))?;
        Ok(())
    }

    fn again(&self, id: &str, envelope: Envelope, delay: Duration) {
        let mut state = self.state();
        state.in_flight.remove(id);
        if !state.again.contains_key(id) {
            state.order.push_back(id.to_owned());
        }
        state.again.insert(
            id.to_owned(),
            Again {
                envelope,
                ready_at: Instant::now() + delay,
            },
        );
    }
}

/// While the stream lives, resets its in-flight entries' idle time every `every`.
async fn keep_claimed(source: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(30)));
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = source.upgrade() else {
            return;
        };
        if let Err(err) = inner.touch().await {
            tracing::warn!(stream = %inner.options.stream, error = %err,
                "could not reset the idle time of entries in flight");
        }
    }
}

/// The envelope an entry carries in its `body` field, or its fields as the body.
fn envelope_of(entry: &StreamId) -> Envelope {
    match entry.map.get("body") {
        Some(redis::Value::BulkString(bytes)) => decode_envelope(bytes),
        Some(redis::Value::SimpleString(text)) => decode_envelope(text.as_bytes()),
        _ => {
            let mut fields = Map::new();
            for (key, value) in &entry.map {
                let text = match value {
                    redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    redis::Value::SimpleString(text) => text.clone(),
                    other => format!("{other:?}"),
                };
                fields.insert(key.clone(), Value::String(text));
            }
            tracing::warn!(id = %entry.id, "a stream entry without a body field; its fields are the body");
            Envelope::new(Value::Object(fields))
        }
    }
}

#[async_trait]
impl Resource for RedisStream {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Creates the consumer group when configured to.
    async fn open(&self) -> Result<()> {
        self.inner.open().await
    }
}

#[async_trait]
impl Source for RedisStream {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let inner = &self.inner;
        inner.open().await?;
        let limit = limit.clamp(1, inner.options.batch_size);
        let due = inner.due(limit);
        if !due.is_empty() {
            return Ok(due);
        }
        if !inner.state().recovered {
            let recovered = inner.recover(limit).await?;
            if !recovered.is_empty() {
                return Ok(recovered);
            }
        }
        let reclaim_due = inner
            .state()
            .last_reclaim
            .is_none_or(|at| at.elapsed() >= inner.options.reclaim_idle / 2);
        if reclaim_due {
            inner.state().last_reclaim = Some(Instant::now());
            let claimed = inner.reclaim(limit).await?;
            if !claimed.is_empty() {
                return Ok(claimed);
            }
        }
        // Block for new entries only when no retry is waiting to come due sooner.
        let waiting = !inner.state().again.is_empty();
        inner.read_new(limit, !waiting).await
    }

    fn batch_size(&self) -> usize {
        self.inner.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.inner.options.poll_interval
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.inner.options;
        let mut map = Map::new();
        map.insert("stream".into(), Value::String(o.stream.clone()));
        map.insert("group".into(), Value::String(o.group.clone()));
        map.insert(
            "consumer".into(),
            Value::String(self.inner.consumer.clone()),
        );
        map
    }
}

#[async_trait]
impl Sink for RedisStream {
    /// Appends the envelope (`XADD <stream> [MAXLEN [~] n] * body <json>`).
    async fn send(&self, envelope: Envelope) -> Result<()> {
        let inner = &self.inner;
        let mut conn = inner.shared(ConnectorOperation::Send).await?;
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&inner.options.stream);
        if let Some(maxlen) = inner.options.maxlen {
            cmd.arg("MAXLEN");
            if inner.options.approximate_trim {
                cmd.arg("~");
            }
            cmd.arg(maxlen);
        }
        cmd.arg("*").arg("body").arg(encode_envelope(&envelope));
        let _: String = cmd
            .query_async(&mut conn)
            .await
            .map_err(|e| inner.error(ConnectorOperation::Send, &e))?;
        Ok(())
    }
}

/// One stream entry.
struct StreamDelivery {
    source: Arc<Inner>,
    id: String,
    envelope: Envelope,
    done: bool,
}

impl StreamDelivery {
    /// `XACK`s the entry. When that fails the entry is still pending, so it is delivered again
    /// here (after a poll interval) rather than left in flight for good.
    async fn finish(&mut self, operation: ConnectorOperation) -> Result<()> {
        self.done = true;
        match self.source.xack(&self.id, operation).await {
            Ok(()) => {
                self.source.state().in_flight.remove(&self.id);
                Ok(())
            }
            Err(err) => {
                let delay = self.source.options.poll_interval;
                self.source.again(&self.id, self.envelope.clone(), delay);
                Err(err)
            }
        }
    }
}

#[async_trait]
impl Delivery for StreamDelivery {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        self.finish(ConnectorOperation::Ack).await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        let mut envelope = self.envelope.clone();
        envelope.attempts = envelope.attempts.saturating_add(1);
        self.source
            .again(&self.id, envelope, delay.unwrap_or_default());
        self.done = true;
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        self.finish(ConnectorOperation::Fail).await
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.source
            .again(&self.id, self.envelope.clone(), Duration::ZERO);
        self.done = true;
        Ok(())
    }
}

impl Drop for StreamDelivery {
    fn drop(&mut self) {
        // Dropped without an outcome (a cancelled handler): it stays pending in Redis and is
        // delivered again here.
        if !self.done {
            self.source
                .again(&self.id, self.envelope.clone(), Duration::ZERO);
        }
    }
}

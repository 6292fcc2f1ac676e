//! [`WebhookSource`]: a source fed by HTTP requests to a built-in server.
//!
//! Each source owns one path (and a set of methods) on a small HTTP/1.1 server. Sources built
//! from one [`WebhookServers`] with the same `(host, port)` share one listener: the first to open
//! starts it, the last to close stops it and frees the port. Port `0` binds a fresh ephemeral
//! port that is never shared implicitly; other sources join it by naming the bound port
//! ([`WebhookSource::local_addr`]). The listener bounds slow and greedy clients as the execution
//! API's does ([`crate::server::ServerLimits`]; [`WebhookServers::with_limits`]).
//!
//! # What a request becomes
//!
//! An accepted request is buffered in the source's bounded in-memory queue as an [`Envelope`]
//! whose body is the request *event* and whose meta is `{"source": <source name>}`:
//!
//! ```json
//! {
//!   "body": {"order": 42},
//!   "headers": {"content-type": "application/json", "x-signature": "abc"},
//!   "query": {"tag": "a", "many": ["1", "2"]},
//!   "method": "POST",
//!   "path": "/hooks/orders",
//!   "client": {"host": "127.0.0.1", "port": 53122},
//!   "received_at": "2026-01-01T12:00:00.123456+00:00"
//! }
//! ```
//!
//! * `body` is the request body after the [`Parser`]; an empty body is `null`.
//! * `headers` has lowercase names; repeated headers are joined with `", "`; the header checked by
//!   [`BearerAuth`] is replaced by `"[redacted]"`.
//! * `query` maps each parameter to its value, or to a list when it repeats.
//! * `path` is the request path as sent (before trailing-slash normalisation).
//!
//! # Answers
//!
//! | case | status |
//! |---|---|
//! | accepted (queued) | [`WebhookResponse`] (default 202 `{"accepted": true}`) |
//! | malformed JSON (parser `json`, or `auto` with a JSON content type), form body not UTF-8, broken body | 400 |
//! | missing or wrong bearer token | 401 with `WWW-Authenticate: Bearer realm="…"` |
//! | no source at this path | 404 |
//! | a source at this path, but not for this method | 405 with `Allow` |
//! | body not read within `read_timeout` | 408 |
//! | body larger than `max_body_bytes` | 413 |
//! | queue full (back-pressure: retry later) | 503 with `Retry-After: 1` |
//!
//! Errors are `{"error": <code>, "detail": <text>}` (`error` is the reference's code, `detail`
//! this crate's usual field).
//!
//! # Delivery guarantees
//!
//! At most once. A 2xx answer means "queued in this process's memory": a crash or shutdown
//! loses what is still queued. [`ack`](Delivery::ack) and [`fail`](Delivery::fail) drop the
//! message; [`retry`](Delivery::retry) queues it again with `attempts + 1` (a delayed retry waits
//! aside without holding a task slot); [`release_unstarted`](Delivery::release_unstarted) queues
//! it again unchanged. Retries and releases never get a 503: the queue limit applies to new
//! requests, and retries waiting out their delay count against it.

mod auth;
mod catalog;
mod options;
mod reply;
mod request;
mod server;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{Delivery, Envelope, FailureInfo, Resource, Result, Source};
use serde_json::{Map, Value};
use tokio::time::Instant;

pub use auth::BearerAuth;
pub use catalog::WebhookType;
pub use options::{KNOWN_METHODS, MAX_WAIT, Parser, WebhookOptions};
pub use reply::WebhookResponse;
pub use server::WebhookServers;

use request::Endpoint;
use server::Server;

/// A [`Source`] of HTTP requests received on `options.path`.
///
/// [`open`](Resource::open) starts the server for `(host, port)` or joins the one another source
/// of the same [`WebhookServers`] started; [`close`](Resource::close) removes this source's route and stops the server when no
/// route is left. See the [module docs](self) for the envelope shape, the answers and the
/// (at-most-once) delivery guarantees.
///
/// # Example
/// ```no_run
/// use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
/// use onestep_http::webhook::{BearerAuth, WebhookOptions, WebhookSource};
/// use serde_json::Value;
///
/// # async fn demo() -> Result<(), onestep_core::Error> {
/// let mut options = WebhookOptions::new("/hooks/github");
/// options.port = 9000;
/// options.auth = Some(BearerAuth::new("s3cret"));
/// let hooks = WebhookSource::new(options)?;
/// let app = OneStepApp::builder("hooks")
///     .task(Task::new("github").source(hooks).handler(
///         |_ctx: TaskContext, event: Value| async move {
///             println!("{} {}: {}", event["method"], event["path"], event["body"]);
///             Ok::<_, TaskError>(())
///         },
///     ))
///     .build()?;
/// app.run().await
/// # }
/// ```
pub struct WebhookSource {
    endpoint: Arc<Endpoint>,
    servers: WebhookServers,
    server: tokio::sync::Mutex<Option<Arc<Server>>>,
    local_addr: Mutex<Option<SocketAddr>>,
}

impl WebhookSource {
    /// A source with `options` on servers of its own (it shares its port with no other source;
    /// see [`WebhookServers::source`]). Invalid options fail here with a field-qualified message.
    pub fn new(options: WebhookOptions) -> Result<Self> {
        Self::build(options, WebhookServers::new())
    }

    fn build(options: WebhookOptions, servers: WebhookServers) -> Result<Self> {
        Ok(Self {
            endpoint: Arc::new(Endpoint::new(&options)?),
            servers,
            server: tokio::sync::Mutex::new(None),
            local_addr: Mutex::new(None),
        })
    }

    /// The normalised options (path without trailing `/`, methods upper case).
    pub fn options(&self) -> &WebhookOptions {
        &self.endpoint.options
    }

    /// The address the server listens on while this source is open (the bound port when the
    /// options said `0`), `None` before `open` and after `close`.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *lock(&self.local_addr)
    }

    /// `http://<local_addr><path>` while open.
    pub fn url(&self) -> Option<String> {
        self.local_addr()
            .map(|addr| format!("http://{addr}{}", self.endpoint.options.path))
    }

    /// How many requests are queued, including retries waiting out their delay.
    pub fn len(&self) -> usize {
        self.endpoint.buffer.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl Resource for WebhookSource {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    /// Starts or joins the server for `(host, port)` and adds this source's route. Opening an
    /// open source does nothing.
    async fn open(&self) -> Result<()> {
        let mut attached = self.server.lock().await;
        if attached.is_some() {
            return Ok(());
        }
        let server = self.servers.attach(&self.endpoint).await?;
        *lock(&self.local_addr) = Some(server.addr);
        *attached = Some(server);
        Ok(())
    }

    /// Removes this source's route; the last source on a server stops it and frees the port
    /// (in-flight requests get up to `read_timeout` + 1 s to finish). Queued requests stay
    /// queued.
    async fn close(&self) -> Result<()> {
        let mut attached = self.server.lock().await;
        let Some(server) = attached.take() else {
            return Ok(());
        };
        *lock(&self.local_addr) = None;
        let grace = self.endpoint.read_timeout + Duration::from_secs(1);
        self.servers.detach(&self.endpoint, server, grace).await;
        Ok(())
    }
}

#[async_trait]
impl Source for WebhookSource {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let limit = limit.clamp(1, self.endpoint.options.batch_size);
        let batch = self
            .endpoint
            .buffer
            .next_batch(limit, self.endpoint.poll_interval)
            .await;
        Ok(batch
            .into_iter()
            .map(|envelope| {
                Box::new(WebhookDelivery {
                    endpoint: self.endpoint.clone(),
                    envelope,
                }) as Box<dyn Delivery>
            })
            .collect())
    }

    fn batch_size(&self) -> usize {
        self.endpoint.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.endpoint.poll_interval
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.endpoint.options;
        let mut m = Map::new();
        m.insert("type".into(), "webhook".into());
        m.insert("path".into(), o.path.clone().into());
        m.insert("methods".into(), o.methods.clone().into());
        m.insert("host".into(), o.host.clone().into());
        m.insert("port".into(), o.port.into());
        m.insert("parser".into(), o.parser.as_str().into());
        m.insert("queue_maxsize".into(), o.queue_maxsize.into());
        m
    }
}

/// One queued request; settling it never talks to the client (it was answered on arrival).
struct WebhookDelivery {
    endpoint: Arc<Endpoint>,
    envelope: Envelope,
}

#[async_trait]
impl Delivery for WebhookDelivery {
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
            Some(delay) => self.endpoint.buffer.park(again, Instant::now() + delay),
            None => self.endpoint.buffer.push(again),
        }
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.endpoint.buffer.push(self.envelope.clone());
        Ok(())
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

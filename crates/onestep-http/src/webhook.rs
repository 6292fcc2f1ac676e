//! [`WebhookSource`]: a source fed by HTTP requests to a built-in server.
//!
//! Each source owns one path (and a set of methods) on a small HTTP/1.1 server. Sources with the
//! same `(host, port)` share one listener: the first to open starts it, the last to close stops
//! it and frees the port. Port `0` binds a fresh ephemeral port that is never shared implicitly;
//! other sources join it by naming the bound port ([`WebhookSource::local_addr`]).
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
//! | body not read within `read_timeout_s` | 408 |
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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use onestep_core::execution::codec::bytes_tag;
use onestep_core::execution::digest::python_isoformat;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Delivery, Envelope, Error,
    FailureInfo, Resource, Result, Source,
};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The methods a webhook may accept.
pub const KNOWN_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// How a request body becomes the event's `body`. An empty body is always `null`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Parser {
    /// Chosen by `Content-Type`: `application/x-www-form-urlencoded` as [`Form`](Parser::Form),
    /// `application/json` or `*+json` as [`Json`](Parser::Json), `text/*` as
    /// [`Text`](Parser::Text); anything else is a string when it is valid UTF-8, else
    /// [`Raw`](Parser::Raw).
    #[default]
    Auto,
    /// JSON; a malformed body is answered 400.
    Json,
    /// `a=1&b=2&b=3` as `{"a": "1", "b": ["2", "3"]}`; a body that is not UTF-8 is answered 400.
    Form,
    /// UTF-8 text, invalid sequences replaced by U+FFFD.
    Text,
    /// The bytes as the reference codec's tag `{"$onestep": {"type": "bytes", "value": <base64>}}`
    /// (read it with `onestep_core::execution::codec::bytes`).
    Raw,
}

impl Parser {
    /// The lowercase name (`"auto"`, `"json"`, `"form"`, `"text"`, `"raw"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Json => "json",
            Self::Form => "form",
            Self::Text => "text",
            Self::Raw => "raw",
        }
    }

    fn parse(self, bytes: &[u8], headers: &HeaderMap) -> Result<Value, Reject> {
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        match self {
            Self::Json => parse_json(bytes),
            Self::Form => parse_form(bytes),
            Self::Text => Ok(Value::String(String::from_utf8_lossy(bytes).into_owned())),
            Self::Raw => Ok(bytes_tag(bytes)),
            Self::Auto => {
                let content_type = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let mime = content_type
                    .split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase();
                if mime == "application/x-www-form-urlencoded" {
                    Self::Form.parse(bytes, headers)
                } else if mime == "application/json" || mime.ends_with("+json") {
                    Self::Json.parse(bytes, headers)
                } else if mime.starts_with("text/") {
                    Self::Text.parse(bytes, headers)
                } else {
                    Ok(match std::str::from_utf8(bytes) {
                        Ok(text) => Value::String(text.to_string()),
                        Err(_) => bytes_tag(bytes),
                    })
                }
            }
        }
    }
}

impl fmt::Display for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Parser {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "json" => Ok(Self::Json),
            "form" => Ok(Self::Form),
            "text" => Ok(Self::Text),
            "raw" => Ok(Self::Raw),
            other => Err(Error::invalid(
                "parser",
                format!("must be one of auto, form, json, raw, text, got {other:?}"),
            )),
        }
    }
}

/// Requires `<header>: <scheme> <token>` on every request (default `Authorization: Bearer …`).
///
/// The scheme is compared case-insensitively, the token in constant time. A request without
/// it is answered 401 with `WWW-Authenticate: <scheme> realm="<realm>"`.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerAuth {
    /// The expected token (not empty).
    pub token: String,
    /// The header carrying it (default `authorization`).
    pub header: String,
    /// The scheme before the token (default `Bearer`).
    pub scheme: String,
    /// The realm named in the 401 challenge (default `webhook`).
    pub realm: String,
}

impl BearerAuth {
    /// `Authorization: Bearer <token>` with realm `webhook`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            header: "authorization".to_string(),
            scheme: "Bearer".to_string(),
            realm: "webhook".to_string(),
        }
    }
}

impl fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerAuth")
            .field("token", &"[redacted]")
            .field("header", &self.header)
            .field("scheme", &self.scheme)
            .field("realm", &self.realm)
            .finish()
    }
}

/// The answer to an accepted request.
///
/// A `null` body sends no body, a string is sent as `text/plain; charset=utf-8`, anything else
/// as JSON. `headers` are added (a `Content-Type` here replaces the default one;
/// `Content-Length` is always computed). `Connection: close` is sent unless set here.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookResponse {
    /// The status (200..=599, default 202).
    pub status_code: u16,
    /// The body (default `{"accepted": true}`).
    pub body: Value,
    /// Extra response headers.
    pub headers: BTreeMap<String, String>,
}

impl Default for WebhookResponse {
    fn default() -> Self {
        Self {
            status_code: 202,
            body: json!({"accepted": true}),
            headers: BTreeMap::new(),
        }
    }
}

/// Options of a [`WebhookSource`], with the reference's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookOptions {
    /// The path served, starting with `/`; a trailing `/` is ignored.
    pub path: String,
    /// Accepted methods, from [`KNOWN_METHODS`] (any case; default `["POST"]`).
    pub methods: Vec<String>,
    /// The address to listen on (default `127.0.0.1`).
    pub host: String,
    /// The port (default 8080); `0` picks a free one, see [`WebhookSource::local_addr`].
    pub port: u16,
    /// How bodies are parsed (default [`Parser::Auto`]).
    pub parser: Parser,
    /// Bearer-token check (default none).
    pub auth: Option<BearerAuth>,
    /// The answer to accepted requests.
    pub response: WebhookResponse,
    /// The largest accepted body (default 1 MiB, >= 1).
    pub max_body_bytes: usize,
    /// Seconds allowed to receive the body once headers arrived (default 5).
    pub read_timeout_s: f64,
    /// How many requests may wait in memory before new ones get 503 (default 1000, >= 1).
    pub queue_maxsize: usize,
    /// The most deliveries one fetch returns (default 100, >= 1).
    pub batch_size: usize,
    /// Seconds a fetch waits for the first request (default 0.1).
    pub poll_interval_s: f64,
    /// The source name (default `webhook:<path>`).
    pub name: Option<String>,
}

impl WebhookOptions {
    /// Defaults for `path`.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            methods: vec!["POST".to_string()],
            host: "127.0.0.1".to_string(),
            port: 8080,
            parser: Parser::Auto,
            auth: None,
            response: WebhookResponse::default(),
            max_body_bytes: 1024 * 1024,
            read_timeout_s: 5.0,
            queue_maxsize: 1000,
            batch_size: 100,
            poll_interval_s: 0.1,
            name: None,
        }
    }

    /// Checks every option; `prefix` qualifies field names (e.g. `resources.hooks.`).
    pub fn validate(&self, prefix: &str) -> Result<()> {
        self.compile(prefix).map(|_| ())
    }

    /// Validates and builds the normalised options, auth check and response.
    fn compile(&self, prefix: &str) -> Result<(WebhookOptions, Option<Auth>, Reply)> {
        let invalid = |f: &str, m: String| Error::invalid(format!("{prefix}{f}"), m);
        if !self.path.starts_with('/') {
            return Err(invalid(
                "path",
                format!("must start with '/', got {:?}", self.path),
            ));
        }
        if self
            .path
            .chars()
            .any(|c| c == '?' || c == '#' || c.is_whitespace() || c.is_control())
        {
            return Err(invalid(
                "path",
                format!(
                    "must be a bare path without query, fragment or spaces, got {:?}",
                    self.path
                ),
            ));
        }
        if self.methods.is_empty() {
            return Err(invalid("methods", "must not be empty".to_string()));
        }
        let mut methods: Vec<String> = Vec::new();
        for (i, method) in self.methods.iter().enumerate() {
            let upper = method.trim().to_ascii_uppercase();
            if !KNOWN_METHODS.contains(&upper.as_str()) {
                return Err(invalid(
                    &format!("methods[{i}]"),
                    format!(
                        "must be one of {}, got {method:?}",
                        KNOWN_METHODS.join(", ")
                    ),
                ));
            }
            if !methods.contains(&upper) {
                methods.push(upper);
            }
        }
        if self.host.trim().is_empty() {
            return Err(invalid("host", "must not be empty".to_string()));
        }
        if self.max_body_bytes < 1 {
            return Err(invalid("max_body_bytes", "must be >= 1, got 0".to_string()));
        }
        if self.queue_maxsize < 1 {
            return Err(invalid("queue_maxsize", "must be >= 1, got 0".to_string()));
        }
        if self.batch_size < 1 {
            return Err(invalid("batch_size", "must be >= 1, got 0".to_string()));
        }
        for (name, value) in [
            ("read_timeout_s", self.read_timeout_s),
            ("poll_interval_s", self.poll_interval_s),
        ] {
            // Duration::from_secs_f64 panics past ~5.8e11 years; a day is plenty.
            if !(value.is_finite() && value > 0.0 && value <= 86_400.0) {
                return Err(invalid(
                    name,
                    format!("must be a number > 0 and <= 86400, got {value}"),
                ));
            }
        }
        if let Some(name) = &self.name
            && name.trim().is_empty()
        {
            return Err(invalid("name", "must not be empty when set".to_string()));
        }
        let auth = match &self.auth {
            Some(a) => Some(Auth::compile(a, &format!("{prefix}auth."))?),
            None => None,
        };
        let reply = Reply::compile(&self.response, &format!("{prefix}response."))?;
        let mut normalised = self.clone();
        normalised.path = normalise_path(&self.path).to_string();
        normalised.methods = methods;
        normalised.host = self.host.trim().to_string();
        Ok((normalised, auth, reply))
    }
}

/// A [`Source`] of HTTP requests received on `options.path`.
///
/// [`open`](Resource::open) starts the server for `(host, port)` or joins the one another source
/// started; [`close`](Resource::close) removes this source's route and stops the server when no
/// route is left. See the [module docs](self) for the envelope shape, the answers and the
/// (at-most-once) delivery guarantees.
///
/// # Example
/// ```no_run
/// use std::sync::Arc;
/// use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
/// use onestep_http::webhook::{BearerAuth, WebhookOptions, WebhookSource};
/// use serde_json::Value;
///
/// # async fn demo() -> Result<(), onestep_core::Error> {
/// let mut options = WebhookOptions::new("/hooks/github");
/// options.port = 9000;
/// options.auth = Some(BearerAuth::new("s3cret"));
/// let hooks = Arc::new(WebhookSource::new(options)?);
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
    server: tokio::sync::Mutex<Option<Arc<Server>>>,
    local_addr: Mutex<Option<SocketAddr>>,
}

impl WebhookSource {
    /// A source with `options`; invalid options fail here with a field-qualified message.
    pub fn new(options: WebhookOptions) -> Result<Self> {
        let (options, auth, reply) = options.compile("")?;
        let name = options
            .name
            .clone()
            .unwrap_or_else(|| format!("webhook:{}", options.path));
        let endpoint = Endpoint {
            name,
            auth,
            reply,
            read_timeout: Duration::from_secs_f64(options.read_timeout_s),
            poll_interval: Duration::from_secs_f64(options.poll_interval_s),
            buffer: Buffer::new(options.queue_maxsize),
            options,
        };
        Ok(Self {
            endpoint: Arc::new(endpoint),
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
        let options = &self.endpoint.options;
        let mut servers = SERVERS.lock().await;
        let shared = (options.port != 0)
            .then(|| servers.get(&(options.host.clone(), options.port)))
            .flatten()
            .filter(|s| s.is_running())
            .cloned();
        let server = match shared {
            Some(server) => server,
            None => {
                let server =
                    Server::start(&options.host, options.port, &self.endpoint.name).await?;
                servers.insert((options.host.clone(), server.addr.port()), server.clone());
                server
            }
        };
        server.routes.add(&self.endpoint, server.addr)?;
        *lock(&self.local_addr) = Some(server.addr);
        *attached = Some(server);
        Ok(())
    }

    /// Removes this source's route; the last source on a server stops it and frees the port
    /// (in-flight requests get up to `read_timeout_s` + 1 s to finish). Queued requests stay
    /// queued.
    async fn close(&self) -> Result<()> {
        let mut attached = self.server.lock().await;
        let Some(server) = attached.take() else {
            return Ok(());
        };
        *lock(&self.local_addr) = None;
        let mut servers = SERVERS.lock().await;
        if server.routes.remove(&self.endpoint) {
            let key = (server.host.clone(), server.addr.port());
            if servers.get(&key).is_some_and(|s| Arc::ptr_eq(s, &server)) {
                servers.remove(&key);
            }
            server
                .stop(self.endpoint.read_timeout + Duration::from_secs(1))
                .await;
        }
        Ok(())
    }
}

#[async_trait]
impl Source for WebhookSource {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let limit = limit.clamp(1, self.endpoint.options.batch_size);
        let buffer = &self.endpoint.buffer;
        let deadline = Instant::now() + self.endpoint.poll_interval;
        loop {
            let ready = buffer.readable.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let (items, next_retry) = buffer.take(limit);
            if !items.is_empty() {
                return Ok(items
                    .into_iter()
                    .map(|envelope| {
                        Box::new(WebhookDelivery {
                            endpoint: self.endpoint.clone(),
                            envelope,
                        }) as Box<dyn Delivery>
                    })
                    .collect());
            }
            let wake = next_retry.map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                _ = ready => {}
                _ = tokio::time::sleep_until(wake) => {
                    if wake == deadline {
                        return Ok(Vec::new());
                    }
                }
            }
        }
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
            Some(delay) => self.endpoint.buffer.delay(again, Instant::now() + delay),
            None => self.endpoint.buffer.requeue(again),
        }
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.endpoint.buffer.requeue(self.envelope.clone());
        Ok(())
    }
}

/// What a source contributes to a server: its options, checks and queue.
struct Endpoint {
    name: String,
    options: WebhookOptions,
    auth: Option<Auth>,
    reply: Reply,
    read_timeout: Duration,
    poll_interval: Duration,
    buffer: Buffer,
}

impl Endpoint {
    /// Checks, reads, parses and queues one request.
    async fn accept(&self, parts: &Parts, body: Body, peer: SocketAddr) -> Result<(), Reject> {
        if let Some(auth) = &self.auth {
            auth.check(&parts.headers)?;
        }
        let limit = self.options.max_body_bytes;
        let declared = body.size_hint().exact();
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large(limit));
        }
        let bytes = tokio::time::timeout(self.read_timeout, read_limited(body, limit))
            .await
            .map_err(|_| {
                Reject::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "request body not received within {} s",
                        self.options.read_timeout_s
                    ),
                )
            })??;
        let parsed = self.options.parser.parse(&bytes, &parts.headers)?;
        let redacted = self.auth.as_ref().map(|a| &a.header);
        let event = json!({
            "body": parsed,
            "headers": header_object(&parts.headers, redacted),
            "query": query_object(parts.uri.query().unwrap_or("").as_bytes()),
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "client": {"host": peer.ip().to_string(), "port": peer.port()},
            "received_at": python_isoformat(OffsetDateTime::now_utc()),
        });
        let mut meta = Map::new();
        meta.insert("source".into(), self.name.clone().into());
        if !self.buffer.offer(Envelope::new(event).with_meta(meta)) {
            tracing::warn!(source = %self.name, "webhook queue full; answering 503");
            return Err(Reject::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "queue_full",
                format!(
                    "the queue of {} is full ({} requests); retry later",
                    self.name, self.options.queue_maxsize
                ),
            )
            .header(header::RETRY_AFTER, HeaderValue::from_static("1")));
        }
        Ok(())
    }
}

/// The compiled bearer check.
struct Auth {
    header: HeaderName,
    scheme: String,
    token: String,
    challenge: HeaderValue,
}

impl Auth {
    fn compile(auth: &BearerAuth, prefix: &str) -> Result<Self> {
        let invalid = |f: &str, m: String| Error::invalid(format!("{prefix}{f}"), m);
        if auth.token.is_empty() {
            return Err(invalid("token", "must not be empty".to_string()));
        }
        if auth
            .token
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(
                "token",
                "must not contain spaces or control characters".to_string(),
            ));
        }
        let header = HeaderName::from_bytes(auth.header.trim().as_bytes()).map_err(|_| {
            invalid(
                "header",
                format!("must be a valid header name, got {:?}", auth.header),
            )
        })?;
        if auth.scheme.is_empty() || !auth.scheme.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid(
                "scheme",
                format!("must be a non-empty word, got {:?}", auth.scheme),
            ));
        }
        let challenge = (!auth.realm.contains(['"', '\\']))
            .then(|| HeaderValue::from_str(&format!("{} realm=\"{}\"", auth.scheme, auth.realm)))
            .and_then(|v| v.ok())
            .ok_or_else(|| {
                invalid(
                    "realm",
                    format!(
                        "must be visible ASCII without quotes or backslashes, got {:?}",
                        auth.realm
                    ),
                )
            })?;
        Ok(Self {
            header,
            scheme: auth.scheme.clone(),
            token: auth.token.clone(),
            challenge,
        })
    }

    fn check(&self, headers: &HeaderMap) -> Result<(), Reject> {
        let presented = headers.get(&self.header).map(HeaderValue::as_bytes);
        let ok = presented.is_some_and(|value| {
            let mut split = value.splitn(2, |b| *b == b' ');
            let scheme = split.next().unwrap_or_default();
            let token = split.next().unwrap_or_default();
            !token.is_empty()
                && scheme.eq_ignore_ascii_case(self.scheme.as_bytes())
                && super::constant_time_eq(token, self.token.as_bytes())
        });
        if ok {
            return Ok(());
        }
        Err(Reject::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("missing or invalid {} token", self.scheme),
        )
        .header(header::WWW_AUTHENTICATE, self.challenge.clone()))
    }
}

/// The compiled answer to accepted requests.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn compile(response: &WebhookResponse, prefix: &str) -> Result<Self> {
        let invalid = |f: &str, m: String| Error::invalid(format!("{prefix}{f}"), m);
        let status = (200..=599)
            .contains(&response.status_code)
            .then(|| StatusCode::from_u16(response.status_code).ok())
            .flatten()
            .ok_or_else(|| {
                invalid(
                    "status_code",
                    format!("must be between 200 and 599, got {}", response.status_code),
                )
            })?;
        let (body, content_type) = match &response.body {
            Value::Null => (Bytes::new(), None),
            Value::String(text) => (
                Bytes::from(text.clone().into_bytes()),
                Some("text/plain; charset=utf-8"),
            ),
            other => (
                Bytes::from(other.to_string().into_bytes()),
                Some("application/json"),
            ),
        };
        let mut headers = HeaderMap::new();
        if let Some(ct) = content_type {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        for (name, value) in &response.headers {
            let field = format!("headers[{name:?}]");
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(&field, "is not a valid header name".to_string()))?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                invalid(
                    &field,
                    format!("is not a valid header value, got {value:?}"),
                )
            })?;
            if name != header::CONTENT_LENGTH {
                headers.insert(name, value);
            }
        }
        Ok(Self {
            status,
            headers,
            body,
        })
    }

    fn render(&self) -> Response {
        let mut response = Response::new(Body::from(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// An error answer: `{"error": code, "detail": text}`, connection closed.
#[derive(Debug)]
struct Reject {
    status: StatusCode,
    code: &'static str,
    detail: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Reject {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            headers: Vec::new(),
        }
    }

    fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }
}

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            axum::Json(json!({"error": self.code, "detail": self.detail})),
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}

fn too_large(limit: usize) -> Reject {
    Reject::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("request body exceeds {limit} bytes"),
    )
}

/// Reads the whole body, answering 413 as soon as it passes `limit` bytes.
async fn read_limited(mut body: Body, limit: usize) -> Result<Vec<u8>, Reject> {
    let mut out = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            Reject::new(
                StatusCode::BAD_REQUEST,
                "incomplete_body",
                format!("request body could not be read: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(too_large(limit));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

fn parse_json(bytes: &[u8]) -> Result<Value, Reject> {
    serde_json::from_slice(bytes).map_err(|e| {
        Reject::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("malformed JSON body: {e}"),
        )
    })
}

fn parse_form(bytes: &[u8]) -> Result<Value, Reject> {
    if std::str::from_utf8(bytes).is_err() {
        return Err(Reject::new(
            StatusCode::BAD_REQUEST,
            "invalid_form",
            "form body is not valid UTF-8",
        ));
    }
    Ok(Value::Object(query_object(bytes)))
}

/// `a=1&b=2&b=3` as `{"a": "1", "b": ["2", "3"]}` (blank values kept, lossy decoding).
fn query_object(raw: &[u8]) -> Map<String, Value> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(raw).unwrap_or_default();
    let mut out = Map::new();
    for (key, value) in pairs {
        match out.get_mut(&key) {
            None => {
                out.insert(key, Value::String(value));
            }
            Some(Value::Array(items)) => items.push(Value::String(value)),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, Value::String(value)]);
            }
        }
    }
    out
}

/// Lowercase header names to values; repeats joined with `", "`; `redacted`'s value hidden.
fn header_object(headers: &HeaderMap, redacted: Option<&HeaderName>) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in headers {
        let text = if redacted == Some(name) {
            "[redacted]".to_string()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        match out.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&text);
            }
            _ => {
                out.insert(name.as_str().to_string(), Value::String(text));
            }
        }
    }
    out
}

/// `/a/b/` → `/a/b`; `/` stays `/`.
fn normalise_path(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() { "/" } else { trimmed }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Retries keyed by (ready time, sequence), so equal ready times keep their order.
type DelayedRetries = BTreeMap<(Instant, u64), Envelope>;

#[derive(Default)]
struct BufferState {
    ready: VecDeque<Envelope>,
    delayed: DelayedRetries,
    sequence: u64,
}

/// A source's queue: bounded for new requests, unbounded for retries and releases.
struct Buffer {
    capacity: usize,
    state: Mutex<BufferState>,
    readable: Notify,
}

impl Buffer {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: Mutex::new(BufferState::default()),
            readable: Notify::new(),
        }
    }

    fn len(&self) -> usize {
        let state = lock(&self.state);
        state.ready.len() + state.delayed.len()
    }

    /// Queues a new request unless `capacity` envelopes (ready or delayed) already wait.
    fn offer(&self, envelope: Envelope) -> bool {
        let mut state = lock(&self.state);
        if state.ready.len() + state.delayed.len() >= self.capacity {
            return false;
        }
        state.ready.push_back(envelope);
        drop(state);
        self.readable.notify_one();
        true
    }

    /// Queues an envelope that was accepted before, whatever the size.
    fn requeue(&self, envelope: Envelope) {
        lock(&self.state).ready.push_back(envelope);
        self.readable.notify_one();
    }

    /// Parks a retry until `ready_at`.
    fn delay(&self, envelope: Envelope, ready_at: Instant) {
        let mut state = lock(&self.state);
        state.sequence += 1;
        let key = (ready_at, state.sequence);
        state.delayed.insert(key, envelope);
    }

    /// Takes due retries, then queued requests (up to `limit`); returns the next retry time.
    fn take(&self, limit: usize) -> (Vec<Envelope>, Option<Instant>) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        let mut out = Vec::new();
        while out.len() < limit
            && state
                .delayed
                .first_key_value()
                .is_some_and(|(k, _)| k.0 <= now)
        {
            if let Some((_, envelope)) = state.delayed.pop_first() {
                out.push(envelope);
            }
        }
        while out.len() < limit {
            match state.ready.pop_front() {
                Some(envelope) => out.push(envelope),
                None => break,
            }
        }
        let next = state.delayed.first_key_value().map(|(k, _)| k.0);
        let more = !state.ready.is_empty();
        drop(state);
        if more {
            self.readable.notify_one();
        }
        (out, next)
    }
}

/// Running servers by (host, bound port).
type Registry = HashMap<(String, u16), Arc<Server>>;

/// Servers by (host, bound port), shared by the sources that name that port.
static SERVERS: LazyLock<tokio::sync::Mutex<Registry>> = LazyLock::new(Default::default);

/// One listener and its route table; the serve loop is owned by `tasks`.
struct Server {
    host: String,
    addr: SocketAddr,
    routes: Arc<Routes>,
    running: Arc<AtomicBool>,
    stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
}

/// Clears `running` when the serve loop ends or is dropped (its runtime shut down).
struct RunningFlag(Arc<AtomicBool>);

impl Drop for RunningFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Server {
    async fn start(host: &str, port: u16, source_name: &str) -> Result<Arc<Self>> {
        let open_error = |e: std::io::Error| {
            let kind = if e.kind() == std::io::ErrorKind::AddrInUse {
                ConnectorErrorKind::Misconfigured
            } else {
                ConnectorErrorKind::Disconnected
            };
            let message = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!("{host}:{port} is already in use")
            } else {
                format!("cannot listen on {host}:{port}: {e}")
            };
            Error::from(
                ConnectorOperationError::new(
                    "webhook",
                    ConnectorOperation::Open,
                    kind,
                    source_name,
                )
                .with_cause(std::io::Error::new(e.kind(), message)),
            )
        };
        let listener = tokio::net::TcpListener::bind((host, port))
            .await
            .map_err(open_error)?;
        let addr = listener.local_addr().map_err(open_error)?;
        let routes = Arc::new(Routes::default());
        let router = Router::new().fallback(dispatch).with_state(routes.clone());
        let stop = CancellationToken::new();
        let running = Arc::new(AtomicBool::new(true));
        let flag = RunningFlag(running.clone());
        let signal = stop.clone().cancelled_owned();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let _flag = flag;
            let service = router.into_make_service_with_connect_info::<SocketAddr>();
            if let Err(err) = axum::serve(listener, service)
                .with_graceful_shutdown(signal)
                .await
            {
                tracing::error!(%addr, error = %err, "webhook server failed");
            }
            tracing::info!(%addr, "webhook server stopped");
        });
        tracing::info!(%addr, "webhook server listening");
        Ok(Arc::new(Self {
            host: host.to_string(),
            addr,
            routes,
            running,
            stop,
            tasks: Mutex::new(tasks),
        }))
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Stops accepting, lets in-flight requests finish within `grace`, then aborts.
    async fn stop(&self, grace: Duration) {
        self.stop.cancel();
        let mut tasks = std::mem::take(&mut *lock(&self.tasks));
        let drained =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(addr = %self.addr, "webhook server did not stop in time; aborting");
            tasks.shutdown().await;
        }
    }
}

/// Path → method → endpoint.
#[derive(Default)]
struct Routes {
    by_path: Mutex<HashMap<String, BTreeMap<String, Arc<Endpoint>>>>,
}

impl Routes {
    fn add(&self, endpoint: &Arc<Endpoint>, addr: SocketAddr) -> Result<()> {
        let mut by_path = lock(&self.by_path);
        let path = &endpoint.options.path;
        if let Some(taken) = by_path.get(path) {
            for method in &endpoint.options.methods {
                if let Some(other) = taken.get(method)
                    && !Arc::ptr_eq(other, endpoint)
                {
                    return Err(Error::Configuration(format!(
                        "duplicate webhook route for {method} {path} on {addr}: {} already serves it",
                        other.name
                    )));
                }
            }
        }
        let methods = by_path.entry(path.clone()).or_default();
        for method in &endpoint.options.methods {
            methods.insert(method.clone(), endpoint.clone());
        }
        Ok(())
    }

    /// Removes `endpoint`'s routes; returns whether no route is left.
    fn remove(&self, endpoint: &Arc<Endpoint>) -> bool {
        let mut by_path = lock(&self.by_path);
        if let Some(methods) = by_path.get_mut(&endpoint.options.path) {
            methods.retain(|_, e| !Arc::ptr_eq(e, endpoint));
            if methods.is_empty() {
                by_path.remove(&endpoint.options.path);
            }
        }
        by_path.is_empty()
    }

    fn resolve(&self, path: &str, method: &str) -> Result<Arc<Endpoint>, Reject> {
        let by_path = lock(&self.by_path);
        let Some(methods) = by_path.get(normalise_path(path)) else {
            return Err(Reject::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no webhook at {path}"),
            ));
        };
        if let Some(endpoint) = methods.get(method) {
            return Ok(endpoint.clone());
        }
        let allowed = methods.keys().cloned().collect::<Vec<_>>().join(", ");
        let mut reject = Reject::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed on {path}; allowed: {allowed}"),
        );
        if let Ok(value) = HeaderValue::from_str(&allowed) {
            reject = reject.header(header::ALLOW, value);
        }
        Err(reject)
    }
}

async fn dispatch(
    State(routes): State<Arc<Routes>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let endpoint = match routes.resolve(parts.uri.path(), parts.method.as_str()) {
        Ok(endpoint) => endpoint,
        Err(reject) => return reject.into_response(),
    };
    match endpoint.accept(&parts, body, peer).await {
        Ok(()) => endpoint.reply.render(),
        Err(reject) => reject.into_response(),
    }
}

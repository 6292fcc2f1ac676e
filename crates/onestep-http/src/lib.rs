//! # onestep-http
//!
//! The HTTP API the seed documents build by hand in FastAPI, ready to mount: a [`Router`] over an
//! [`ExecutionClient`] with
//!
//! | method and path | does | answers |
//! |---|---|---|
//! | `POST /v1/executions` | submit (`Idempotency-Key` header required) | 202 + execution |
//! | `GET /v1/executions` | list newest first (`task_name`, `status`, `limit`, `cursor`) | `{items, next_cursor}` |
//! | `GET /v1/executions/{id}` | one execution, with its last `progress` | execution |
//! | `POST /v1/executions/{id}/cancel` | cancel (`{"reason": …}` optional) | execution |
//! | `GET /v1/executions/{id}/result` | the result, never waits | `{"result": …}` |
//! | `GET /healthz` | checks the store | `{"status": "ok"}` |
//! | `GET /openapi.json` | the API description | OpenAPI 3.1 |
//!
//! Errors are `{"detail": "…"}`: 400 malformed JSON, 401 unauthorized, 404 unknown id, 409
//! conflict / not ready / cancelled, 410 expired, 413 body too large, 415 body not declared as
//! JSON, 422 failed / invalid / unencodable, 503 store unavailable.
//!
//! [`webhook::WebhookSource`] is a task source fed by HTTP requests (its own small server per
//! host and port, shared by several paths). [`outbound::HttpSink`] sends envelopes to an HTTP
//! endpoint and [`outbound::HttpFetcher`] is one a handler calls.
//!
//! ```no_run
//! use onestep_core::execution::{ExecutionClient, MemoryExecutionBackend};
//! use onestep_http::ExecutionApi;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ExecutionClient::new(MemoryExecutionBackend::new(), "agents")?;
//! let router = ExecutionApi::new(client)
//!     .allow_tasks(["run_agent"])
//!     .bearer_token("s3cret")
//!     .metadata_injector(["tenant"], |headers, _principal| {
//!         let mut m = serde_json::Map::new();
//!         if let Some(tenant) = headers.get("x-tenant").and_then(|v| v.to_str().ok()) {
//!             m.insert("tenant".into(), tenant.into());
//!         }
//!         m
//!     })
//!     .router();
//! let listener = onestep_http::bind("127.0.0.1:8080").await?;
//! onestep_http::serve(listener, router, std::future::pending()).await?;
//! # Ok(()) }
//! ```

#![recursion_limit = "256"]

mod body;
pub mod catalog;
pub mod client;
#[cfg(feature = "dashboard")]
pub mod dashboard;
mod error;
pub mod metrics;
mod openapi;
pub mod outbound;
pub mod server;
mod view;
pub mod webhook;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use onestep_core::execution::{
    ExecutionBackend, ExecutionClient, ExecutionStatus, SubmitOptions, client::parse_id, stored,
};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The router type every builder here returns (axum's), to merge into a service of your own.
pub use axum::Router;
pub use error::ApiError;
pub use view::{execution_view, plain_json};

/// Decides whether a request may use the API; returns a principal passed to the metadata
/// injector, or the error to answer (usually 401).
pub type Authorizer = Arc<dyn Fn(&HeaderMap) -> Result<Value, ApiError> + Send + Sync>;

/// Computes server-side metadata (tenant, requester) for a submission from the request headers
/// and the authorizer's principal.
pub type MetadataInjector = Arc<dyn Fn(&HeaderMap, &Value) -> Map<String, Value> + Send + Sync>;

/// The default request body limit: the payload limit (1 MiB) plus room for metadata and JSON.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1_048_576 + 65_536 + 16_384;

/// The default time a client has to send a whole request body (408 after it).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The deepest nesting of arrays and objects a payload or metadata may have as stored (the
/// core's limit, which also holds for results).
pub use onestep_core::execution::stored::MAX_STORED_DEPTH;

/// How much of a caller's value an error detail quotes back.
const QUOTED_CHARS: usize = 64;

struct Shared<B> {
    client: ExecutionClient<B>,
    allowed: Option<BTreeSet<String>>,
    authorizer: Option<Authorizer>,
    injector: Option<MetadataInjector>,
    owned_keys: BTreeSet<String>,
    max_body_bytes: usize,
    body_timeout: Duration,
}

/// Builds the `/v1/executions` router.
pub struct ExecutionApi<B> {
    shared: Shared<B>,
}

impl<B: ExecutionBackend + Clone + 'static> ExecutionApi<B> {
    /// An API over `client` (its namespace is the API's), accepting every task name.
    pub fn new(client: ExecutionClient<B>) -> Self {
        Self {
            shared: Shared {
                client,
                allowed: None,
                authorizer: None,
                injector: None,
                owned_keys: BTreeSet::new(),
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                body_timeout: DEFAULT_BODY_TIMEOUT,
            },
        }
    }

    /// Accepts only these task names (others get 422 "unsupported task_name").
    pub fn allow_tasks<I, S>(mut self, tasks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.shared.allowed = Some(tasks.into_iter().map(Into::into).collect());
        self
    }

    /// Checks every `/v1` request with `authorizer`.
    pub fn authorizer(
        mut self,
        authorizer: impl Fn(&HeaderMap) -> Result<Value, ApiError> + Send + Sync + 'static,
    ) -> Self {
        self.shared.authorizer = Some(Arc::new(authorizer));
        self
    }

    /// Requires `Authorization: Bearer <token>` on every `/v1` request.
    pub fn bearer_token(self, token: impl Into<String>) -> Self {
        let expected = format!("Bearer {}", token.into());
        self.authorizer(move |headers| {
            match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some(given) if constant_time_eq(given.as_bytes(), expected.as_bytes()) => {
                    Ok(json!({"auth": "bearer"}))
                }
                _ => Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "missing or invalid bearer token",
                )),
            }
        })
    }

    /// Sets server-owned metadata keys: `owned_keys` are always removed from the client's
    /// metadata, then `injector`'s entries are added, so callers can neither forge nor keep a
    /// stale value for them (when the injector has no value, the key is simply absent).
    pub fn metadata_injector<I, S>(
        mut self,
        owned_keys: I,
        injector: impl Fn(&HeaderMap, &Value) -> Map<String, Value> + Send + Sync + 'static,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.shared.owned_keys = owned_keys.into_iter().map(Into::into).collect();
        self.shared.injector = Some(Arc::new(injector));
        self
    }

    /// Rejects request bodies larger than `bytes` with 413.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.shared.max_body_bytes = bytes;
        self
    }

    /// Answers 408 to a request whose body has not fully arrived `timeout` after the handler
    /// started reading it (default [`DEFAULT_BODY_TIMEOUT`]), so a client that stalls mid-body
    /// cannot hold a connection and a request slot open forever.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.shared.body_timeout = timeout;
        self
    }

    /// The router.
    pub fn router(self) -> Router {
        let shared = Arc::new(self.shared);
        let document = Arc::new(openapi::document(&openapi::Config {
            allowed: shared
                .allowed
                .as_ref()
                .map(|names| names.iter().map(String::as_str).collect()),
            token: shared.authorizer.is_some(),
        }));
        let not_allowed = || async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed; see /openapi.json",
            )
        };
        // Authorization runs first on every /v1 route, whatever the method: a client without
        // the token learns nothing about the routes, not even which methods exist (401, not 405).
        let v1 = Router::new()
            .route("/v1/executions", post(submit::<B>).get(list::<B>))
            .route("/v1/executions/{id}", get(get_one::<B>))
            .route("/v1/executions/{id}/cancel", post(cancel::<B>))
            .route("/v1/executions/{id}/result", get(result::<B>))
            .method_not_allowed_fallback(not_allowed)
            .route_layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                authorized::<B>,
            ));
        Router::new()
            .merge(v1)
            .route("/healthz", get(health::<B>))
            .route(
                "/openapi.json",
                get(move || {
                    let document = document.clone();
                    async move { axum::Json(Value::clone(&document)) }
                }),
            )
            .fallback(|| async {
                ApiError::new(StatusCode::NOT_FOUND, "no such endpoint; see /openapi.json")
            })
            .method_not_allowed_fallback(not_allowed)
            .layer(DefaultBodyLimit::disable())
            .with_state(shared)
    }
}

/// What the authorizer said of a request's caller, for the metadata injector.
#[derive(Debug, Clone)]
struct Principal(Value);

/// Answers the authorizer's error (401) before any /v1 handler or method check runs.
async fn authorized<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match s.authorize(request.headers()) {
        Ok(principal) => {
            request.extensions_mut().insert(Principal(principal));
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl<B> Shared<B> {
    fn authorize(&self, headers: &HeaderMap) -> Result<Value, ApiError> {
        match &self.authorizer {
            Some(a) => a(headers),
            None => Ok(Value::Null),
        }
    }
}

/// `text` quoted for an error detail, clipped so that a huge value is not echoed back whole.
fn quoted(text: &str) -> String {
    let count = text.chars().count();
    if count <= QUOTED_CHARS {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(QUOTED_CHARS).collect();
        format!("{head:?}… ({count} characters)")
    }
}

/// A list for an error detail, cut to [`QUOTED_CHARS`] characters.
fn clipped(list: &str) -> String {
    if list.chars().count() <= QUOTED_CHARS {
        list.to_owned()
    } else {
        let head: String = list.chars().take(QUOTED_CHARS).collect();
        format!("{head}…")
    }
}

/// Rejects a text field holding U+0000 (the core's rule, checked here so it comes first).
/// Rejects a name (a task name) holding U+0000 or another control character, before the
/// allowlist is consulted, so the answer names the real problem.
fn checked_name(field: &str, text: &str) -> Result<(), ApiError> {
    no_nul_text(field, text)?;
    // Counted as sent, before surrounding whitespace is stripped, as the OpenAPI document says.
    let length = text.chars().count();
    if length > 255 {
        return Err(ApiError::unprocessable(format!(
            "{field} must be at most 255 characters, got {length}"
        )));
    }
    Ok(onestep_core::execution::record::reject_control(
        field, text,
    )?)
}

fn no_nul_text(field: &str, text: &str) -> Result<(), ApiError> {
    Ok(stored::reject_nul(field, text)?)
}

/// Encodes a payload or metadata value of a request body as the reference's API stores it:
/// plain JSON, so every object with a `"$onestep"` key is a `mapping` (never a tag), numbers as
/// Python reads them (integers of any size kept). Checks the core's storage rules on the way: no
/// U+0000 anywhere, not nested deeper than [`MAX_STORED_DEPTH`] once encoded (an object with a
/// `"$onestep"` key is stored 3 levels deeper), no number Python cannot store. Checking here
/// keeps the API's error order; the client's own encoding then changes nothing.
fn stored_value(field: &str, value: &Value) -> Result<Value, ApiError> {
    Ok(stored::encode_plain_storable(field, value)?)
}

fn id_of(path: Result<Path<String>, PathRejection>) -> Result<uuid::Uuid, ApiError> {
    let raw = match path {
        Ok(Path(raw)) => raw,
        Err(PathRejection::FailedToDeserializePathParams(e))
            if matches!(e.kind(), ErrorKind::InvalidUtf8InPathParam { .. }) =>
        {
            return Err(ApiError::unprocessable(
                "execution_id must be a UUID, got a path segment that is not valid UTF-8",
            ));
        }
        Err(other) => return Err(ApiError::new(other.status(), other.body_text())),
    };
    parse_id(&raw).map_err(|_| {
        ApiError::unprocessable(format!("execution_id must be a UUID, got {}", quoted(&raw)))
    })
}

const SUBMIT_FIELDS: [&str; 5] = ["task_name", "payload", "metadata", "delay_s", "expires_at"];

async fn submit<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
    axum::Extension(Principal(principal)): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => {
            return Err(ApiError::unprocessable(
                "header Idempotency-Key is required (1..255 characters)",
            ));
        }
        Some(Err(_)) => {
            return Err(ApiError::unprocessable(
                "header Idempotency-Key must be printable ASCII (no control characters)",
            ));
        }
        // Printable ASCII: a space inside is kept (a Python client may use "order 123" as a
        // key, and the same key must reach the same execution here); control characters are not.
        Some(Ok(k)) if k.chars().any(|c| c.is_ascii_control()) => {
            return Err(ApiError::unprocessable(
                "header Idempotency-Key must be printable ASCII (no control characters)",
            ));
        }
        Some(Ok(k)) if k.trim().is_empty() || k.chars().count() > 255 => {
            return Err(ApiError::unprocessable(format!(
                "header Idempotency-Key must be 1..255 characters, got {}",
                k.chars().count()
            )));
        }
        Some(Ok(k)) => k.trim().to_string(),
    };
    body::require_json(&headers)?;
    let body = body::parse_json(&body::read_body(body, s.max_body_bytes, s.body_timeout).await?)?;
    let Value::Object(mut body) = body else {
        return Err(ApiError::unprocessable(
            "request body must be a JSON object",
        ));
    };
    if let Some(unknown) = body.keys().find(|k| !SUBMIT_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::unprocessable(format!(
            "unknown field {}; expected {}",
            quoted(unknown),
            SUBMIT_FIELDS.join(", ")
        )));
    }
    let task = match body.remove("task_name") {
        Some(Value::String(t)) => t,
        Some(_) => return Err(ApiError::unprocessable("task_name must be a string")),
        None => return Err(ApiError::unprocessable("task_name is required")),
    };
    checked_name("task_name", &task)?;
    if let Some(allowed) = s.allowed.as_ref().filter(|a| !a.contains(&task)) {
        let names: Vec<&str> = allowed.iter().map(String::as_str).collect();
        return Err(ApiError::unprocessable(format!(
            "unsupported task_name {}; accepted: {}",
            quoted(&task),
            clipped(&names.join(", "))
        )));
    }
    let Some(payload) = body.remove("payload") else {
        return Err(ApiError::unprocessable(
            "payload is required (use null for none)",
        ));
    };
    let payload = stored_value("payload", &payload)?;
    let mut metadata = match body.remove("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(ApiError::unprocessable("metadata must be a JSON object")),
    };
    metadata.retain(|k, _| !s.owned_keys.contains(k));
    if let Some(injector) = &s.injector {
        let injected = injector(&headers, &principal);
        metadata.extend(
            injected
                .into_iter()
                .filter(|(k, _)| s.owned_keys.contains(k) || s.owned_keys.is_empty()),
        );
    }
    // An object stays an object when encoded (one with a `"$onestep"` key becomes a `mapping`,
    // which Python reads back as a dict).
    let Value::Object(metadata) = stored_value("metadata", &Value::Object(metadata))? else {
        return Err(ApiError::unprocessable("metadata must be a JSON object"));
    };
    let delay_s = match body.remove("delay_s") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(delay) => Some(delay),
            // `as_f64` is `None` only for a literal beyond the f64 range.
            None => {
                return Err(ApiError::unprocessable(format!(
                    "delay_s must be a finite number >= 0, got {}",
                    quoted(n.as_str())
                )));
            }
        },
        Some(_) => {
            return Err(ApiError::unprocessable(
                "delay_s must be a number of seconds",
            ));
        }
    };
    let expires_at = match body.remove("expires_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(parse_aware(&t)?),
        Some(_) => {
            return Err(ApiError::unprocessable(
                "expires_at must be an ISO 8601 string with an offset",
            ));
        }
    };
    let mut options = SubmitOptions::default()
        .idempotency_key(key)
        .metadata(metadata);
    options.delay_s = delay_s;
    options.expires_at = expires_at;
    let execution = s.client.submit(&task, &payload, options).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(execution_view(&execution))).into_response())
}

/// Parses an ISO 8601 time that must carry an offset and lie in years 1..=9999 in UTC (the
/// range Python's `datetime` and the stored format cover).
fn parse_aware(text: &str) -> Result<OffsetDateTime, ApiError> {
    let parsed = OffsetDateTime::parse(text, &Rfc3339).map_err(|_| {
        let iso = &time::format_description::well_known::Iso8601::DEFAULT;
        let offset_given = text
            .split_once(['T', 't', ' '])
            .is_some_and(|(_, clock)| clock.contains(['+', '-', 'Z', 'z']));
        if !offset_given && time::PrimitiveDateTime::parse(text, iso).is_ok() {
            ApiError::unprocessable("expires_at must include a timezone")
        } else {
            ApiError::unprocessable(format!(
                "expires_at must be an ISO 8601 time with an offset, got {}",
                quoted(text)
            ))
        }
    })?;
    match stored::check_expires_at(parsed) {
        Ok(_) => Ok(parsed),
        Err(_) => Err(ApiError::unprocessable(format!(
            "expires_at must be between 0001-01-01 and 9999-12-31 in UTC, got {}",
            quoted(text)
        ))),
    }
}

async fn list<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = body::query_pairs(query.as_deref())?;
    let (mut task, mut status, mut limit, mut cursor) = (None, None, 50u32, None);
    for (k, v) in pairs {
        match k.as_str() {
            "task_name" => {
                checked_name("task_name", &v)?;
                task = Some(v)
            }
            "status" => {
                status = Some(v.parse::<ExecutionStatus>().map_err(|_| {
                    ApiError::unprocessable(format!(
                        "status must be one of {}; got {}",
                        ExecutionStatus::ALL.map(|s| s.as_str()).join(", "),
                        quoted(&v)
                    ))
                })?)
            }
            "limit" => {
                limit = v.parse().map_err(|_| {
                    ApiError::unprocessable(format!(
                        "limit must be an integer between 1 and 200, got {}",
                        quoted(&v)
                    ))
                })?
            }
            "cursor" => cursor = Some(v),
            other => {
                return Err(ApiError::unprocessable(format!(
                    "unknown query parameter {}; expected task_name, status, limit, cursor",
                    quoted(other)
                )));
            }
        }
    }
    let page = s
        .client
        .list(task.as_deref(), status, limit, cursor.as_deref())
        .await?;
    let items: Vec<Value> = page.items.iter().map(execution_view).collect();
    Ok(axum::Json(json!({"items": items, "next_cursor": page.next_cursor})).into_response())
}

async fn get_one<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    match s.client.get(id_of(id)?).await? {
        Some(e) => {
            let progress = s.client.progress(e.id).await?;
            let mut view = execution_view(&e);
            view["progress"] = progress.as_ref().map_or(Value::Null, plain_json);
            Ok(axum::Json(view).into_response())
        }
        None => Err(ApiError::new(StatusCode::NOT_FOUND, "execution not found")),
    }
}

async fn cancel<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Response, ApiError> {
    let id = id_of(id)?;
    let bytes = body::read_body(body, 16_384, s.body_timeout).await?;
    // No body at all is no reason; anything else must be the JSON object the document
    // describes (whitespace alone is not JSON).
    let reason = if bytes.is_empty() {
        None
    } else {
        body::require_json(&headers)?;
        match body::parse_json(&bytes)? {
            Value::Object(m) => {
                if let Some(unknown) = m.keys().find(|k| *k != "reason") {
                    return Err(ApiError::unprocessable(format!(
                        "unknown field {}; expected reason",
                        quoted(unknown)
                    )));
                }
                match m.get("reason") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(r)) => {
                        no_nul_text("reason", r)?;
                        Some(r.clone())
                    }
                    Some(_) => {
                        return Err(ApiError::unprocessable("reason must be a string or null"));
                    }
                }
            }
            _ => {
                return Err(ApiError::unprocessable(
                    "request body must be a JSON object",
                ));
            }
        }
    };
    match s.client.cancel(id, reason.as_deref()).await? {
        Some(e) => Ok(axum::Json(execution_view(&e)).into_response()),
        None => Err(ApiError::new(StatusCode::NOT_FOUND, "execution not found")),
    }
}

async fn result<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let value: Value = s.client.result(id_of(id)?).await?;
    Ok(axum::Json(json!({"result": plain_json(&value)})).into_response())
}

async fn health<B: ExecutionBackend + Clone + 'static>(
    State(s): State<Arc<Shared<B>>>,
) -> Result<Response, ApiError> {
    s.client.get(uuid::Uuid::nil()).await?;
    Ok(axum::Json(json!({"status": "ok", "namespace": s.client.namespace()})).into_response())
}

/// Binds `addr`; a taken port gives a message saying so.
pub async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            std::io::Error::new(
                e.kind(),
                format!("{addr} is already in use; pick another address with --listen"),
            )
        } else {
            std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
        }
    })
}

pub use server::{ServerLimits, serve, serve_with};

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

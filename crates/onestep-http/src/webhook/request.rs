//! One request, from its head to a queued envelope: auth, body limits, parsing.

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use onestep_core::execution::codec::bytes_tag;
use onestep_core::execution::digest::python_isoformat;
use onestep_core::{Envelope, EnvelopeBuffer, Result};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use super::auth::Auth;
use super::options::{Parser, WebhookOptions};
use super::reply::{Reject, Reply, too_large};

/// What a source contributes to a server: its options, checks and queue.
pub(super) struct Endpoint {
    pub(super) name: String,
    pub(super) options: WebhookOptions,
    auth: Option<Auth>,
    pub(super) reply: Reply,
    pub(super) read_timeout: Duration,
    pub(super) poll_interval: Duration,
    pub(super) buffer: EnvelopeBuffer,
}

impl Endpoint {
    /// The endpoint for `options`; invalid options fail with field-qualified messages.
    pub(super) fn new(options: &WebhookOptions) -> Result<Self> {
        let (options, auth, reply) = options.compile("")?;
        let name = options
            .name
            .clone()
            .unwrap_or_else(|| format!("webhook:{}", options.path));
        Ok(Self {
            name,
            auth,
            reply,
            read_timeout: options.read_timeout,
            poll_interval: options.poll_interval,
            buffer: EnvelopeBuffer::new(),
            options,
        })
    }

    /// Checks, reads, parses and queues one request.
    pub(super) async fn accept(
        &self,
        parts: &Parts,
        body: Body,
        peer: SocketAddr,
    ) -> Result<(), Reject> {
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
                        self.options.read_timeout.as_secs_f64()
                    ),
                )
            })??;
        let parsed = parse_body(self.options.parser, &bytes, &parts.headers)?;
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
        let envelope = Envelope::new(event).with_meta(meta);
        if self
            .buffer
            .offer(envelope, self.options.queue_maxsize)
            .is_err()
        {
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

/// How `parser` turns a body into the event's `body`; an empty body is `null`.
fn parse_body(parser: Parser, bytes: &[u8], headers: &HeaderMap) -> Result<Value, Reject> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    let parser = match parser {
        Parser::Auto => auto_parser(headers),
        chosen => chosen,
    };
    match parser {
        Parser::Json => parse_json(bytes),
        Parser::Form => parse_form(bytes),
        Parser::Text => Ok(Value::String(String::from_utf8_lossy(bytes).into_owned())),
        Parser::Raw => Ok(bytes_tag(bytes)),
        Parser::Auto => Ok(match std::str::from_utf8(bytes) {
            Ok(text) => Value::String(text.to_string()),
            Err(_) => bytes_tag(bytes),
        }),
    }
}

/// The parser `Content-Type` names; [`Parser::Auto`] (string or bytes) for anything else.
fn auto_parser(headers: &HeaderMap) -> Parser {
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
        Parser::Form
    } else if mime == "application/json" || mime.ends_with("+json") {
        Parser::Json
    } else if mime.starts_with("text/") {
        Parser::Text
    } else {
        Parser::Auto
    }
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

//! The answers a webhook sends: the configured one for accepted requests, and errors.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use onestep_core::{Error, Result};
use serde_json::{Value, json};

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

/// The compiled answer to accepted requests.
pub(super) struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    pub(super) fn compile(response: &WebhookResponse, prefix: &str) -> Result<Self> {
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

    pub(super) fn render(&self) -> Response {
        let mut response = Response::new(Body::from(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// An error answer: `{"error": code, "detail": text}`, connection closed.
#[derive(Debug)]
pub(super) struct Reject {
    status: StatusCode,
    code: &'static str,
    detail: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Reject {
    pub(super) fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            headers: Vec::new(),
        }
    }

    pub(super) fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
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

pub(super) fn too_large(limit: usize) -> Reject {
    Reject::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("request body exceeds {limit} bytes"),
    )
}

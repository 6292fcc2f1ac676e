//! `HttpSink`: each envelope sent as one HTTP request, as the reference's `http_sink`.
//!
//! - The request goes to `url` with `method` (default `POST`), `headers` and `params` (query
//!   parameters); every field may hold `{{ body | payload | meta | attempts }}` variables
//!   ([`template`](crate::outbound::template)), rendered per envelope.
//! - Methods with a body send `body` (rendered), or else the envelope's body, as JSON
//!   (`Content-Type: application/json` unless a header sets it). `GET` and `DELETE` send no
//!   body: the envelope's body, a mapping, becomes query parameters instead.
//! - A status outside `success_statuses` (default 200, 201, 202, 204) fails the send: 429 is
//!   `throttled`, 408, 425 and 5xx `transient`, others `permanent`. No answer within
//!   `timeout_s` (default 5), or no connection, is `disconnected`. The runtime retries a
//!   retryable send once, then the task's retry policy takes over.
//! - A variable that names nothing fails as `misconfigured`, naming it.
//! - Logs and errors show the URL without credentials or query, and never a header value.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Envelope, Error, Resource,
    Result, Sink,
};
use serde_json::{Map, Value};

use crate::outbound::request::{
    self, RequestSpec, classify_status, exchange, header_text, is_bodyless, json_bytes, redact_url,
    with_query,
};
use crate::outbound::template::{MissingVariable, render};

/// An HTTP endpoint as a sink (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct HttpSink {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    spec: RequestSpec,
    client: reqwest::Client,
}

impl std::fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSink")
            .field("name", &self.inner.name)
            .field("spec", &self.inner.spec)
            .finish()
    }
}

impl HttpSink {
    /// A sink called `name` sending with `spec` (checked here).
    pub fn new(name: impl Into<String>, spec: RequestSpec) -> Result<Self> {
        spec.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: name.into(),
                client: super::client()?,
                spec,
            }),
        })
    }

    /// The settings in use.
    pub fn spec(&self) -> &RequestSpec {
        &self.inner.spec
    }

    fn error(&self, kind: ConnectorErrorKind, text: String) -> Error {
        Error::Connector(
            ConnectorOperationError::new(
                "http_sink",
                ConnectorOperation::Send,
                kind,
                &self.inner.name,
            )
            .with_cause(std::io::Error::other(text)),
        )
    }

    /// The URL, headers and payload for `envelope`.
    fn request(&self, envelope: &Envelope) -> std::result::Result<Prepared, String> {
        let spec = &self.inner.spec;
        let rendering = |e: MissingVariable| e.to_string();
        let Value::Object(mut params) =
            render(&Value::Object(spec.params.clone()), envelope).map_err(rendering)?
        else {
            return Err("params did not render to a mapping".into());
        };
        let bodyless = is_bodyless(&spec.method);
        if bodyless && !envelope.body.is_null() {
            let Value::Object(extra) = &envelope.body else {
                return Err(format!(
                    "'envelope.body' must be a mapping to become {}'s query parameters",
                    spec.method
                ));
            };
            merge(&mut params, extra);
        }
        let url = match render(&Value::String(spec.url.clone()), envelope).map_err(rendering)? {
            Value::String(url) => url,
            other => crate::outbound::template::python_str(&other),
        };
        request::check_url("url", url.trim()).map_err(|e| e.to_string())?;
        let url = with_query(url.trim(), &params);
        let payload = if bodyless {
            None
        } else {
            let body = match &spec.body {
                Some(template) => render(template, envelope).map_err(rendering)?,
                None => envelope.body.clone(),
            };
            Some(json_bytes(&body))
        };
        let mut headers = Vec::with_capacity(spec.headers.len() + 1);
        for (key, value) in &spec.headers {
            headers.push((
                key.clone(),
                header_text(&render(value, envelope).map_err(rendering)?),
            ));
        }
        if payload.is_some()
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        Ok(Prepared {
            url,
            headers,
            payload,
        })
    }
}

/// One rendered request: the URL with its query, the headers, the JSON payload.
struct Prepared {
    url: String,
    headers: Vec<(String, String)>,
    payload: Option<Vec<u8>>,
}

/// `extra`'s entries over `params` (non-empty names, as the reference requires).
fn merge(params: &mut Map<String, Value>, extra: &Map<String, Value>) {
    for (key, value) in extra {
        params.insert(key.trim().to_owned(), value.clone());
    }
}

#[async_trait]
impl Resource for HttpSink {
    fn name(&self) -> &str {
        &self.inner.name
    }
}

#[async_trait]
impl Sink for HttpSink {
    async fn send(&self, envelope: Envelope) -> Result<()> {
        let inner = &self.inner;
        let Prepared {
            url,
            headers,
            payload,
        } = self.request(&envelope).map_err(|e| {
            self.error(
                ConnectorErrorKind::Misconfigured,
                format!(
                    "http_sink variable rendering failed for {:?}: {e}",
                    inner.name
                ),
            )
        })?;
        let answer = exchange(
            &inner.client,
            "http_sink",
            ConnectorOperation::Send,
            &inner.name,
            &inner.spec.method,
            &url,
            &headers,
            payload,
            inner.spec.timeout,
        )
        .await?;
        if inner.spec.success_statuses.contains(&answer.status) {
            return Ok(());
        }
        tracing::debug!(sink = %inner.name, url = %redact_url(&url), status = answer.status,
            body_bytes = answer.body.len(), "http_sink got a non-success status");
        Err(self.error(
            classify_status(answer.status),
            format!(
                "http_sink send failed for {:?}: HTTP {} {}",
                inner.name,
                answer.status,
                request::reason(answer.status)
            )
            .trim_end()
            .to_owned(),
        ))
    }
}

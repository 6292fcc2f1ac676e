//! `HttpFetcher`: an HTTP endpoint a handler calls on demand, as the reference's
//! `http_fetcher`. It is not a source: the runtime never polls it; a delivery (a cron tick,
//! say) is the trigger and the handler calls [`HttpFetcher::fetch`].
//!
//! - The request goes to `url` with `method` (default `GET`), `headers`, `params` (merged
//!   under a call's overrides) and, for methods with a body, `body` (or a call's override) as
//!   JSON; `Accept: application/json` unless a header sets it.
//! - The answer's JSON is returned (`null` for an empty body). A status outside
//!   `success_statuses`, no answer within `timeout_s`, or a body that is not JSON fails with a
//!   connector error the task's retry policy handles, classified as for
//!   [`HttpSink`](crate::outbound::HttpSink); the fetcher keeps no state between calls.
//! - [`HttpFetcher::fetch_rows`] hands the answer to a rows extractor and checks it returned a
//!   list of mappings.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Resource, Result,
};
use serde_json::{Map, Value};

use crate::outbound::request::{
    self, RequestSpec, classify_status, exchange, header_text, is_bodyless, json_bytes, with_query,
};

/// Turns a fetched answer into rows.
pub type RowsExtractor = Arc<dyn Fn(Value) -> std::result::Result<Value, String> + Send + Sync>;

/// An HTTP endpoint for handlers (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct HttpFetcher {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    spec: RequestSpec,
    rows: Option<RowsExtractor>,
    client: reqwest::Client,
}

impl std::fmt::Debug for HttpFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFetcher")
            .field("name", &self.inner.name)
            .field("spec", &self.inner.spec)
            .field("rows", &self.inner.rows.is_some())
            .finish()
    }
}

impl HttpFetcher {
    /// A fetcher called `name` requesting with `spec` (checked here).
    pub fn new(name: impl Into<String>, spec: RequestSpec) -> Result<Self> {
        spec.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: name.into(),
                client: super::client()?,
                spec,
                rows: None,
            }),
        })
    }

    /// The same fetcher with a rows extractor for [`HttpFetcher::fetch_rows`].
    pub fn with_rows(
        self,
        rows: impl Fn(Value) -> std::result::Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                name: inner.name.clone(),
                spec: inner.spec.clone(),
                client: inner.client.clone(),
                rows: Some(Arc::new(rows)),
            }),
        }
    }

    /// The settings in use.
    pub fn spec(&self) -> &RequestSpec {
        &self.inner.spec
    }

    fn error(&self, kind: ConnectorErrorKind, text: String) -> Error {
        Error::Connector(
            ConnectorOperationError::new(
                "http_fetcher",
                ConnectorOperation::Fetch,
                kind,
                &self.inner.name,
            )
            .with_cause(std::io::Error::other(text)),
        )
    }

    /// Sends the request (`params_override` over the configured parameters, `body_override`
    /// instead of the configured body) and returns the answer's JSON, `null` when empty.
    pub async fn fetch(
        &self,
        params_override: Option<&Map<String, Value>>,
        body_override: Option<&Value>,
    ) -> Result<Value> {
        let inner = &self.inner;
        let spec = &inner.spec;
        let mut params = spec.params.clone();
        if let Some(extra) = params_override {
            if let Some(key) = extra.keys().find(|k| k.trim().is_empty()) {
                return Err(Error::invalid(
                    format!("params_override.{key}"),
                    "parameter names must be non-empty",
                ));
            }
            for (k, v) in extra {
                params.insert(k.trim().to_owned(), v.clone());
            }
        }
        let body = body_override.or(spec.body.as_ref());
        let payload = match body {
            Some(body) if !is_bodyless(&spec.method) && !body.is_null() => Some(json_bytes(body)),
            _ => None,
        };
        let mut headers: Vec<(String, String)> = spec
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), header_text(v)))
            .collect();
        let has = |headers: &[(String, String)], name: &str| {
            headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name))
        };
        if !has(&headers, "accept") {
            headers.push(("Accept".into(), "application/json".into()));
        }
        if payload.is_some() && !has(&headers, "content-type") {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        let answer = exchange(
            &inner.client,
            "http_fetcher",
            ConnectorOperation::Fetch,
            &inner.name,
            &spec.method,
            &with_query(&spec.url, &params),
            &headers,
            payload,
            spec.timeout,
        )
        .await?;
        if !spec.success_statuses.contains(&answer.status) {
            return Err(self.error(
                classify_status(answer.status),
                format!(
                    "http_fetcher {:?} returned HTTP {} {}",
                    inner.name,
                    answer.status,
                    request::reason(answer.status)
                )
                .trim_end()
                .to_owned(),
            ));
        }
        if answer.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&answer.body).map_err(|_| {
            self.error(
                ConnectorErrorKind::Permanent,
                format!("http_fetcher {:?} response is not valid JSON", inner.name),
            )
        })
    }

    /// [`HttpFetcher::fetch`], then the rows extractor: its result must be a list of mappings.
    pub async fn fetch_rows(
        &self,
        params_override: Option<&Map<String, Value>>,
        body_override: Option<&Value>,
    ) -> Result<Vec<Map<String, Value>>> {
        let name = &self.inner.name;
        let Some(rows) = self.inner.rows.clone() else {
            return Err(self.error(
                ConnectorErrorKind::Misconfigured,
                format!(
                    "http_fetcher {name:?} fetch_rows requires a rows extractor; configure one \
                     (HttpFetcher::with_rows) or call fetch() and extract rows in the handler"
                ),
            ));
        };
        let payload = self.fetch(params_override, body_override).await?;
        let extracted = rows(payload).map_err(|e| {
            self.error(
                ConnectorErrorKind::Permanent,
                format!("http_fetcher {name:?} rows extractor failed: {e}"),
            )
        })?;
        let Value::Array(items) = extracted else {
            return Err(self.error(
                ConnectorErrorKind::Permanent,
                format!(
                    "http_fetcher {name:?} rows extractor must return a list, got {}",
                    onestep_core::catalog::type_name(&extracted)
                ),
            ));
        };
        items
            .into_iter()
            .enumerate()
            .map(|(i, row)| match row {
                Value::Object(map) => Ok(map),
                other => Err(self.error(
                    ConnectorErrorKind::Permanent,
                    format!(
                        "http_fetcher {name:?} rows extractor item {i} must be a mapping, got {}",
                        onestep_core::catalog::type_name(&other)
                    ),
                )),
            })
            .collect()
    }
}

#[async_trait]
impl Resource for HttpFetcher {
    fn name(&self) -> &str {
        &self.inner.name
    }
}

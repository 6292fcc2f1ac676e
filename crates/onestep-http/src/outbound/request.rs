//! What `http_sink` and `http_fetcher` share: the request settings (URL, method, headers, query
//! parameters, JSON body, timeout, the statuses that count as success), checked as the reference
//! checks them, one HTTP exchange, and how its failures are classified and printed (never a
//! header value, a query string or URL credentials).

use std::time::Duration;

use onestep_core::execution::canonical::python_dumps_ascii;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Result,
};
use serde_json::{Map, Value};

use crate::outbound::template::python_str;

/// The statuses that count as success unless `success_statuses` says otherwise.
pub const DEFAULT_SUCCESS_STATUSES: [u16; 4] = [200, 201, 202, 204];

/// The default timeout of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Methods that never carry a body (their `body`, or the envelope's, becomes query parameters
/// for a sink).
pub(crate) fn is_bodyless(method: &str) -> bool {
    matches!(method, "GET" | "DELETE")
}

/// One outbound endpoint's settings.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct RequestSpec {
    /// The URL (`http://` or `https://`).
    pub url: String,
    /// The method, upper case.
    pub method: String,
    /// Headers, in order; values are text.
    pub headers: Vec<(String, Value)>,
    /// Query parameters appended to the URL (a list value repeats the key).
    pub params: Map<String, Value>,
    /// The JSON body (for methods that carry one).
    pub body: Option<Value>,
    /// The limit on one whole request.
    pub timeout: Duration,
    /// The statuses that count as success.
    pub success_statuses: Vec<u16>,
}

impl std::fmt::Debug for RequestSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        let params: Vec<&str> = self.params.keys().map(String::as_str).collect();
        f.debug_struct("RequestSpec")
            .field("url", &redact_url(&self.url))
            .field("method", &self.method)
            .field("headers", &names)
            .field("params", &params)
            .field("body", &self.body.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("success_statuses", &self.success_statuses)
            .finish()
    }
}

impl RequestSpec {
    /// A request to `url` with `method` and the reference's defaults otherwise.
    pub fn new(url: impl Into<String>, method: impl Into<String>) -> Self {
        Self {
            url: url.into().trim().to_owned(),
            method: method.into().trim().to_ascii_uppercase(),
            headers: Vec::new(),
            params: Map::new(),
            body: None,
            timeout: DEFAULT_TIMEOUT,
            success_statuses: DEFAULT_SUCCESS_STATUSES.to_vec(),
        }
    }

    /// Checks the settings; errors name the field.
    pub fn validate(&self) -> Result<()> {
        check_url("url", &self.url)?;
        if self.method.is_empty()
            || !self
                .method
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err(Error::invalid(
                "method",
                format!("must be an HTTP method such as POST, got {:?}", self.method),
            ));
        }
        for (name, _) in &self.headers {
            if name.trim().is_empty()
                || reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
            {
                return Err(Error::invalid(
                    format!("headers.{name}"),
                    "must be a valid header name (letters, digits, - and _)",
                ));
            }
        }
        if let Some(key) = self.params.keys().find(|k| k.trim().is_empty()) {
            return Err(Error::invalid(
                format!("params.{key}"),
                "parameter names must be non-empty",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid("timeout_s", "must be > 0"));
        }
        if self.success_statuses.is_empty() {
            return Err(Error::invalid("success_statuses", "must not be empty"));
        }
        if let Some((i, s)) = self
            .success_statuses
            .iter()
            .enumerate()
            .find(|(_, s)| !(100..=599).contains(*s))
        {
            return Err(Error::invalid(
                format!("success_statuses[{i}]"),
                format!("must be an HTTP status code (100..=599), got {s}"),
            ));
        }
        Ok(())
    }
}

/// Checks that `url` is an `http://` or `https://` URL with a host.
pub(crate) fn check_url(field: &str, url: &str) -> Result<()> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        Error::invalid(
            field,
            format!(
                "must be an http or https URL, got {} ({e})",
                redact_url(url)
            ),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(
            field,
            format!("must be an http or https URL, got {}", redact_url(url)),
        ));
    }
    Ok(())
}

/// `url` as logs and errors show it: credentials replaced by `<redacted>`, no query, no
/// fragment (both may carry tokens).
pub fn redact_url(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..cut];
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://<redacted>@{host}{path}"),
        None => url.to_owned(),
    }
}

/// `url` with `params` appended as Python's `urlencode(params, doseq=True)` writes them.
pub(crate) fn with_query(url: &str, params: &Map<String, Value>) -> String {
    if params.is_empty() {
        return url.to_owned();
    }
    let mut pairs = Vec::new();
    for (key, value) in params {
        let values = match value {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for value in values {
            pairs.push(format!(
                "{}={}",
                quote_plus(key),
                quote_plus(&python_str(value))
            ));
        }
    }
    let encoded = pairs.join("&");
    let (base, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let joined = if base.contains('?') {
        format!("{base}&{encoded}")
    } else {
        format!("{base}?{encoded}")
    };
    match fragment {
        Some(f) => format!("{joined}#{f}"),
        None => joined,
    }
}

/// Python's `urllib.parse.quote_plus`: letters, digits and `_.-~` as they are, a space as `+`,
/// every other byte of the UTF-8 text as `%XX`.
fn quote_plus(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// Header values as text: `null` is empty, anything else Python's `str()`.
pub(crate) fn header_text(value: &Value) -> String {
    if value.is_null() {
        String::new()
    } else {
        python_str(value)
    }
}

/// `body` as the reference sends it: `json.dumps` (ASCII escapes, `", "` and `": "`).
pub(crate) fn json_bytes(body: &Value) -> Vec<u8> {
    python_dumps_ascii(body).into_bytes()
}

/// A sent request's answer.
pub(crate) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// One HTTP exchange: a failure to get any answer is a connector error (`disconnected` for a
/// timeout or a refused or dropped connection), with the URL redacted.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn exchange(
    client: &reqwest::Client,
    backend: &'static str,
    operation: ConnectorOperation,
    name: &str,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    payload: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Answer> {
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| Error::invalid("method", format!("{method:?} is not an HTTP method")))?;
    let mut request = client.request(method, url).timeout(timeout);
    for (key, value) in headers {
        request = request.header(key.as_str(), value.as_str());
    }
    if let Some(payload) = payload {
        request = request.body(payload);
    }
    let failed = |err: reqwest::Error| {
        let kind = if err.is_builder() {
            ConnectorErrorKind::Misconfigured
        } else {
            ConnectorErrorKind::Disconnected
        };
        // reqwest prints the URL with its query; print ours instead.
        let what = if err.is_timeout() {
            format!("no answer within {} s", timeout.as_secs_f64())
        } else if err.is_connect() {
            "could not connect".to_owned()
        } else {
            source_text(&err)
        };
        let mut error = ConnectorOperationError::new(backend, operation, kind, name).with_cause(
            std::io::Error::other(format!("{what} ({})", redact_url(url))),
        );
        error.retry_delay = Some(timeout);
        Error::Connector(error)
    };
    let response = request.send().await.map_err(failed)?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(failed)?.to_vec();
    Ok(Answer { status, body })
}

/// The innermost cause of `err` (reqwest's own text names the URL with its query).
fn source_text(err: &reqwest::Error) -> String {
    let mut source = std::error::Error::source(err);
    let mut text = None;
    while let Some(cause) = source {
        text = Some(cause.to_string());
        source = cause.source();
    }
    text.unwrap_or_else(|| "the request failed".to_owned())
}

/// A non-success status as the reference classifies it: 429 is `throttled`, 408, 425 and 5xx
/// are `transient`, everything else `permanent`.
pub fn classify_status(status: u16) -> ConnectorErrorKind {
    match status {
        429 => ConnectorErrorKind::Throttled,
        408 | 425 | 500.. => ConnectorErrorKind::Transient,
        _ => ConnectorErrorKind::Permanent,
    }
}

/// The reason phrase of `status` (`"Not Found"`), or nothing.
pub(crate) fn reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn urls_never_print_credentials_or_queries() {
        assert_eq!(
            redact_url("https://u:p@h.example/x?token=s#f"),
            "https://<redacted>@h.example/x"
        );
        assert_eq!(redact_url("http://h/x?a=1"), "http://h/x");
    }

    #[test]
    fn queries_are_python_urlencode() {
        let mut params = Map::new();
        params.insert("q".into(), json!("a b&c*~é"));
        params.insert("n".into(), json!([1, true]));
        params.insert("z".into(), json!(null));
        assert_eq!(
            with_query("http://h/p?x=1#f", &params),
            "http://h/p?x=1&q=a+b%26c%2A~%C3%A9&n=1&n=True&z=None#f"
        );
    }

    #[test]
    fn statuses_are_classified_as_the_reference_does() {
        assert_eq!(classify_status(429), ConnectorErrorKind::Throttled);
        assert_eq!(classify_status(503), ConnectorErrorKind::Transient);
        assert_eq!(classify_status(408), ConnectorErrorKind::Transient);
        assert_eq!(classify_status(404), ConnectorErrorKind::Permanent);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let err = RequestSpec::new("ftp://h/x", "POST")
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("url"), "{err}");
        let mut spec = RequestSpec::new("http://h/x", "POST");
        spec.success_statuses = vec![200, 700];
        let err = spec.validate().unwrap_err();
        assert!(err.to_string().contains("success_statuses[1]"), "{err}");
        let spec = RequestSpec::new("http://h/x", "PO ST");
        assert!(spec.validate().unwrap_err().to_string().contains("method"));
    }
}

//! What a webhook source accepts and answers: [`WebhookOptions`] and their parts.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use onestep_core::{Error, Result};

use super::auth::{Auth, BearerAuth};
use super::reply::{Reply, WebhookResponse};

/// The longest `read_timeout` and `poll_interval`: a day.
pub const MAX_WAIT: Duration = Duration::from_secs(86_400);

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

/// Options of a [`WebhookSource`](super::WebhookSource), with the reference's defaults; set
/// fields after [`WebhookOptions::new`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WebhookOptions {
    /// The path served, starting with `/`; a trailing `/` is ignored.
    pub path: String,
    /// Accepted methods, from [`KNOWN_METHODS`] (any case; default `["POST"]`).
    pub methods: Vec<String>,
    /// The address to listen on (default `127.0.0.1`).
    pub host: String,
    /// The port (default 8080); `0` picks a free one, see
    /// [`WebhookSource::local_addr`](super::WebhookSource::local_addr).
    pub port: u16,
    /// How bodies are parsed (default [`Parser::Auto`]).
    pub parser: Parser,
    /// Bearer-token check (default none).
    pub auth: Option<BearerAuth>,
    /// The answer to accepted requests.
    pub response: WebhookResponse,
    /// The largest accepted body (default 1 MiB, >= 1).
    pub max_body_bytes: usize,
    /// The time allowed to receive the body once the head arrived (default 5 s, at most a day;
    /// YAML `read_timeout_s`).
    pub read_timeout: Duration,
    /// How many requests may wait in memory before new ones get 503 (default 1000, >= 1).
    pub queue_maxsize: usize,
    /// The most deliveries one fetch returns (default 100, >= 1).
    pub batch_size: usize,
    /// How long a fetch waits for the first request (default 100 ms, at most a day; YAML
    /// `poll_interval_s`).
    pub poll_interval: Duration,
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
            read_timeout: Duration::from_secs(5),
            queue_maxsize: 1000,
            batch_size: 100,
            poll_interval: Duration::from_millis(100),
            name: None,
        }
    }

    /// Checks every option; `prefix` qualifies field names (e.g. `resources.hooks.`).
    pub fn validate(&self, prefix: &str) -> Result<()> {
        self.compile(prefix).map(|_| ())
    }

    /// Validates and builds the normalised options, auth check and response.
    pub(super) fn compile(&self, prefix: &str) -> Result<(WebhookOptions, Option<Auth>, Reply)> {
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
            ("read_timeout", self.read_timeout),
            ("poll_interval", self.poll_interval),
        ] {
            if value.is_zero() || value > MAX_WAIT {
                return Err(invalid(
                    name,
                    format!(
                        "must be longer than 0 s and at most 86400 s, got {} s",
                        value.as_secs_f64()
                    ),
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

/// `/a/b/` → `/a/b`; `/` stays `/`.
pub(super) fn normalise_path(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() { "/" } else { trimmed }
}

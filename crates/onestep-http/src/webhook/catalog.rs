//! `type: webhook` for declarative apps: the fields of [`WebhookOptions`], read once.

use std::sync::Arc;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::{Map, Value};

use super::{BearerAuth, WebhookOptions, WebhookResponse, WebhookServers};

const FIELDS: &[FieldDoc] = &[
    FieldDoc::optional(
        "name",
        "string",
        None,
        "source name (default webhook:<path>)",
    ),
    FieldDoc::required(
        "path",
        "string",
        "the URL path to accept, e.g. /hooks/github",
    ),
    FieldDoc::optional("methods", "list", Some("[POST]"), "accepted HTTP methods"),
    FieldDoc::optional("host", "string", Some("127.0.0.1"), "listen address"),
    FieldDoc::optional(
        "port",
        "integer",
        Some("8080"),
        "listen port (shared by webhooks on the same host and port)",
    ),
    FieldDoc::optional(
        "parser",
        "string",
        Some("auto"),
        "auto | json | form | text | raw",
    ),
    FieldDoc::optional(
        "auth",
        "json",
        None,
        "a bearer token string, or {type: bearer, token, header, scheme, realm}",
    ),
    FieldDoc::optional(
        "response",
        "json",
        Some("{status_code: 202, body: {accepted: true}}"),
        "{status_code, body, headers}",
    ),
    FieldDoc::optional(
        "max_body_bytes",
        "integer",
        Some("1048576"),
        "larger requests get 413",
    ),
    FieldDoc::optional(
        "read_timeout_s",
        "number",
        Some("5"),
        "time to read a request body",
    ),
    FieldDoc::optional(
        "queue_maxsize",
        "integer",
        Some("1000"),
        "buffered requests before 503",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("100"),
        "most deliveries per fetch",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("0.1"),
        "fetch wait for the first request",
    ),
];

/// `type: webhook`: a [`WebhookSource`](super::WebhookSource); the webhooks of one app share
/// listeners per `(host, port)`.
pub struct WebhookType;

impl ResourceType for WebhookType {
    type Options = WebhookOptions;

    fn name(&self) -> &'static str {
        "webhook"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("WebhookSource")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<WebhookOptions> {
        let path = f.string("path");
        let mut o = WebhookOptions::new(path.clone().unwrap_or_default());
        if let Some(v) = f.opt_count("max_body_bytes", 1) {
            o.max_body_bytes = v;
        }
        if let Some(v) = f.opt_count("queue_maxsize", 1) {
            o.queue_maxsize = v;
        }
        if let Some(v) = f.opt_count("batch_size", 1) {
            o.batch_size = v;
        }
        if let Some(v) = read_wait(f, "read_timeout_s") {
            o.read_timeout = v;
        }
        if let Some(v) = read_wait(f, "poll_interval_s") {
            o.poll_interval = v;
        }
        let name = f.value("name").and_then(Value::as_str);
        o.name = Some(name.unwrap_or(f.resource_name()).to_string());
        if let Some(m) = f.value("methods") {
            let methods = m.as_array().and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().map(str::to_ascii_uppercase))
                    .collect::<Option<Vec<_>>>()
            });
            match methods {
                Some(methods) => o.methods = methods,
                None => f.problem("methods", "expected a list of method names"),
            }
        }
        if let Some(host) = f.opt_string("host") {
            o.host = host;
        }
        if let Some(p) = f.value("port") {
            match p.as_u64().and_then(|p| u16::try_from(p).ok()) {
                Some(port) => o.port = port,
                None => f.problem("port", format!("must be a port number 0..65535, got {p}")),
            }
        }
        if let Some(p) = f.opt_string("parser") {
            match p.parse() {
                Ok(parser) => o.parser = parser,
                Err(e) => f.problem(
                    "parser",
                    e.to_string().trim_start_matches("parser ").to_string(),
                ),
            }
        }
        if let Some(auth) = f.value("auth") {
            o.auth = read_auth(f, auth);
        }
        if let Some(response) = f.value("response") {
            o.response = read_response(f, response);
        }
        if path.is_some()
            && f.is_clean()
            && let Err(e) = o.validate("")
        {
            let text = e.to_string();
            let (field, message) = text.split_once(' ').unwrap_or(("", text.as_str()));
            f.problem(field, message.to_string());
        }
        Some(o)
    }

    fn build(
        &self,
        _name: &str,
        options: WebhookOptions,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let servers = ctx.shared::<WebhookServers>();
        Ok(Built::Source(Arc::new(servers.source(options)?)))
    }
}

/// A wait in seconds, > 0 and at most [`MAX_WAIT`](super::options::MAX_WAIT).
fn read_wait(f: &mut Fields<'_>, key: &str) -> Option<std::time::Duration> {
    let seconds = f.opt_number(key, false)?;
    let max = super::options::MAX_WAIT.as_secs_f64();
    if seconds > max {
        f.problem(
            key,
            format!("must be a number > 0 and <= {max}, got {seconds}"),
        );
        return None;
    }
    Some(std::time::Duration::from_secs_f64(seconds))
}

/// `auth`: a token string, or `{type: bearer, token, header, scheme, realm}`.
fn read_auth(f: &mut Fields<'_>, auth: &Value) -> Option<BearerAuth> {
    match auth {
        Value::String(token) => Some(BearerAuth::new(token.clone())),
        Value::Object(a) => {
            let kind = a.get("type").and_then(Value::as_str).unwrap_or("bearer");
            if !kind.eq_ignore_ascii_case("bearer") {
                f.problem("auth.type", format!("must be bearer, got {kind:?}"));
            }
            unknown_keys(
                f,
                a,
                "auth",
                &["type", "token", "header", "scheme", "realm"],
            );
            let text = |key: &str| a.get(key).and_then(Value::as_str);
            let mut bearer = BearerAuth::new(text("token").unwrap_or_default());
            if let Some(h) = text("header") {
                bearer.header = h.to_string();
            }
            if let Some(s) = text("scheme") {
                bearer.scheme = s.to_string();
            }
            if let Some(r) = text("realm") {
                bearer.realm = r.to_string();
            }
            Some(bearer)
        }
        other => {
            f.problem(
                "auth",
                format!(
                    "expected a token string or a mapping, got {}",
                    type_name(other)
                ),
            );
            None
        }
    }
}

/// `response`: `{status_code, body, headers}`.
fn read_response(f: &mut Fields<'_>, response: &Value) -> WebhookResponse {
    let mut out = WebhookResponse::default();
    let Value::Object(m) = response else {
        f.problem(
            "response",
            format!("expected a mapping, got {}", type_name(response)),
        );
        return out;
    };
    unknown_keys(f, m, "response", &["status_code", "body", "headers"]);
    if let Some(code) = m.get("status_code") {
        match code.as_u64().and_then(|c| u16::try_from(c).ok()) {
            Some(c) => out.status_code = c,
            None => f.problem(
                "response.status_code",
                format!("must be an HTTP status, got {code}"),
            ),
        }
    }
    if let Some(body) = m.get("body") {
        out.body = body.clone();
    }
    if let Some(Value::Object(h)) = m.get("headers") {
        out.headers = h
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
    }
    out
}

/// Reports the first key of `map` (the mapping at `key`) that is not in `allowed`.
fn unknown_keys(f: &mut Fields<'_>, map: &Map<String, Value>, key: &str, allowed: &[&str]) {
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        f.problem(
            &format!("{key}.{unknown}"),
            format!("unknown field; expected {}", allowed.join(", ")),
        );
    }
}

#[cfg(test)]
mod tests {
    use onestep_core::catalog::{Catalog, CatalogEntry, ResourceSpec};
    use serde_json::json;

    use super::*;

    fn problems(fields: Value) -> Vec<String> {
        let spec = ResourceSpec {
            name: "hook".into(),
            type_name: "webhook".into(),
            fields: fields.as_object().cloned().unwrap_or_default(),
            path: "resources.hook".into(),
        };
        CatalogEntry::check(&WebhookType, &spec, false)
            .0
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn every_documented_field_is_read_and_nothing_else() {
        let mut catalog = Catalog::new();
        catalog.add(WebhookType);
        assert_eq!(catalog.audit(), Vec::<String>::new());
    }

    #[test]
    fn problems_name_their_fields() {
        assert_eq!(
            problems(json!({"path": "/x", "port": 70000, "auth": {"type": "basic"}})),
            [
                "resources.hook.port must be a port number 0..65535, got 70000",
                "resources.hook.auth.type must be bearer, got \"basic\"",
            ]
        );
        assert_eq!(
            problems(json!({"path": "x"})),
            ["resources.hook.path must start with '/', got \"x\""]
        );
        assert_eq!(
            problems(json!({"path": "/x", "auth": {"token": "a b"}})),
            ["resources.hook.auth.token must not contain spaces or control characters"]
        );
        assert!(problems(json!({"path": "/x", "methods": ["get", "post"]})).is_empty());
    }
}

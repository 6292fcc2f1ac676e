//! `type: http_sink` and `type: http_fetcher`, with the reference's fields.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::{Map, Value};

use crate::outbound::request::RequestSpec;
use crate::outbound::{HttpFetcher, HttpSink};

/// The fields both share; `method`'s default differs.
macro_rules! request_fields {
    ($method_default:literal $(, $extra:expr)*) => {
        &[
            FieldDoc::required("url", "string", "http(s) URL; may hold {{ variables }} (sink)"),
            FieldDoc::optional("name", "string", Some("the resource name"), "the name in logs"),
            FieldDoc::optional(
                "method",
                "string",
                Some($method_default),
                "POST, PUT, PATCH, GET, DELETE, …",
            ),
            FieldDoc::optional("headers", "mapping", None, "request headers"),
            FieldDoc::optional("params", "mapping", None, "query parameters"),
            FieldDoc::optional("body", "json", None, "the JSON body (methods with a body)"),
            FieldDoc::optional("timeout_s", "number", Some("5.0"), "limit on one request"),
            FieldDoc::optional(
                "success_statuses",
                "list",
                Some("[200, 201, 202, 204]"),
                "statuses that count as success",
            ),
            $($extra,)*
        ]
    };
}

const SINK_FIELDS: &[FieldDoc] = request_fields!("POST");

const FETCHER_FIELDS: &[FieldDoc] = request_fields!(
    "GET",
    FieldDoc::optional(
        "rows",
        "string",
        None,
        "rows extractor (Rust: HttpFetcher::with_rows)"
    )
);

/// The request settings of an `http_sink` or `http_fetcher` spec.
fn read_spec(f: &mut Fields<'_>, default_method: &str) -> Option<RequestSpec> {
    let url = f.string("url");
    let method = f
        .opt_string("method")
        .unwrap_or_else(|| default_method.to_owned());
    let mut spec = RequestSpec::new(url.clone().unwrap_or_default(), method);
    spec.headers = mapping(f, "headers").into_iter().collect();
    for (key, value) in &spec.headers {
        if matches!(value, Value::Object(_) | Value::Array(_)) {
            f.problem(
                &format!("headers.{key}"),
                format!("expected text, got {}", type_name(value)),
            );
        }
    }
    spec.params = mapping(f, "params");
    spec.body = f.value("body").filter(|v| !v.is_null()).cloned();
    if let Some(seconds) = f.opt_number("timeout_s", false) {
        spec.timeout = Duration::from_secs_f64(seconds);
    }
    match f.value("success_statuses") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            let mut statuses = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item.as_u64().and_then(|n| u16::try_from(n).ok()) {
                    Some(status) if !item.is_boolean() => statuses.push(status),
                    _ => f.problem(
                        &format!("success_statuses[{i}]"),
                        format!("must be an integer HTTP status, got {item}"),
                    ),
                }
            }
            statuses.dedup();
            spec.success_statuses = statuses;
        }
        Some(other) => f.problem(
            "success_statuses",
            format!("expected a list of integers, got {}", type_name(other)),
        ),
    }
    if url.is_some()
        && let Err(onestep_core::Error::InvalidArgument { field, message }) = spec.validate()
    {
        // A URL made of variables is checked once rendered, per envelope.
        let templated = field == "url" && crate::outbound::template::has_variables(&spec.url);
        if !templated {
            f.problem(&field, message);
        }
    }
    Some(spec)
}

/// An optional mapping at `key`.
fn mapping(f: &mut Fields<'_>, key: &str) -> Map<String, Value> {
    match f.value(key) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            f.problem(key, format!("expected a mapping, got {}", type_name(other)));
            Map::new()
        }
    }
}

/// `type: http_sink`.
pub struct HttpSinkType;

impl ResourceType for HttpSinkType {
    type Options = (String, RequestSpec);

    fn name(&self) -> &'static str {
        "http_sink"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        SINK_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("HttpSink")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let name = f
            .opt_string("name")
            .unwrap_or_else(|| f.resource_name().to_owned());
        Some((name, read_spec(f, "POST")?))
    }

    fn build(
        &self,
        _name: &str,
        (name, spec): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let sink = HttpSink::new(name, spec).map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Sink(Arc::new(sink)))
    }
}

/// `type: http_fetcher`: a connector handlers call; the runtime never polls it.
pub struct HttpFetcherType;

impl ResourceType for HttpFetcherType {
    type Options = (String, RequestSpec);

    fn name(&self) -> &'static str {
        "http_fetcher"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Connector]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        FETCHER_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("HttpFetcher")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let name = f
            .opt_string("name")
            .unwrap_or_else(|| f.resource_name().to_owned());
        if let Some(rows) = f.opt_string("rows") {
            f.problem(
                "rows",
                format!(
                    "{rows:?} names a Python function, which the Rust runtime cannot call; \
                     extract rows in the handler, or in Rust use HttpFetcher::with_rows"
                ),
            );
        }
        Some((name, read_spec(f, "GET")?))
    }

    fn build(
        &self,
        _name: &str,
        (name, spec): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let fetcher = HttpFetcher::new(name, spec).map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Connector {
            kind: "http_fetcher",
            value: Arc::new(fetcher.clone()),
            lifecycle: Arc::new(fetcher),
        })
    }
}

//! The OpenAPI 3.1 description served at `/openapi.json`, written for the API as configured: the
//! allowlist becomes the `task_name` enum, a token makes the bearer scheme required. Every rule
//! the server applies to a request is in it where JSON Schema can say it (lengths, patterns,
//! ranges, enums, formats, no U+0000, no control characters in names); `cargo xtask ci` runs
//! schemathesis with all its checks against a live `onestep serve` to hold the two together.

use serde_json::{Value, json};

/// What the document depends on.
pub(crate) struct Config<'a> {
    /// The task names accepted, when there is an allowlist.
    pub allowed: Option<Vec<&'a str>>,
    /// Whether a bearer token is required.
    pub token: bool,
}

fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// 503 with `Retry-After` (the server's limits) or the store being unavailable.
fn unavailable() -> Value {
    json!({"description": "The store is unavailable, or the server is at its connection or request limit (Retry-After)",
           "headers": {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait, when a limit answered"}},
           "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// Responses every route may give besides its own: a malformed request (400), the header
/// timeout (408), an oversized head (431), the limits (503), and 401 on `/v1` routes.
fn with_common(mut responses: Value, v1: bool) -> Value {
    if let Some(map) = responses.as_object_mut() {
        let mut add = |code: &str, value: Value| {
            map.entry(code).or_insert(value);
        };
        add(
            "400",
            error("The request is not valid HTTP/1.1, or its body or query is malformed"),
        );
        add(
            "408",
            error("The request head or body did not arrive within the server's timeouts"),
        );
        add("431", error("The request head is larger than 64 KiB"));
        add("503", unavailable());
        if v1 {
            add(
                "401",
                error("A bearer token is configured and missing or wrong"),
            );
        }
    }
    responses
}

fn execution_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Execution"}}}})
}

fn id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}})
}

/// A name as the server checks it: 1 to 255 characters, at least one that is not whitespace, no
/// control character (surrounding whitespace is stripped).
fn name_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255,
           "pattern": "^\\s*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"})
}

/// The document for `config`.
pub(crate) fn document(config: &Config<'_>) -> Value {
    let time = json!({"type": ["string", "null"], "format": "date-time"});
    let task_name = match &config.allowed {
        Some(names) => json!({"type": "string", "enum": names}),
        None => name_schema(),
    };
    let security = if config.token {
        json!([{"bearer": []}])
    } else {
        json!([])
    };
    json!({
        "openapi": "3.1.0",
        "info": {"title": "onestep executions", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Submit long-running tasks, poll their status and read their results. Errors are {\"detail\": …}."},
        "paths": {
            "/v1/executions": {
                "post": {
                    "summary": "Submit an execution",
                    "security": security,
                    "parameters": [{"name": "Idempotency-Key", "in": "header", "required": true,
                                    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]*[!-~][ -~]*$"},
                                    "description": "Printable ASCII. Retry with the same key and body after a timeout: the same execution comes back."}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Submit"}}}},
                    "responses": with_common(json!({
                        "202": execution_response("Accepted (or the existing execution for a repeated key)"),
                        "409": error("The key was used with a different submission"),
                        "413": error("Body too large"),
                        "415": error("The body is declared as something other than JSON in UTF-8"),
                        "422": error("Invalid or unencodable submission")
                    }), true)
                },
                "get": {
                    "summary": "List executions, newest first",
                    "security": security,
                    "parameters": [
                        {"name": "task_name", "in": "query", "schema": name_schema()},
                        {"name": "status", "in": "query", "schema": {"$ref": "#/components/schemas/Status"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}},
                        {"name": "cursor", "in": "query", "description": "The next_cursor of the previous page (opaque)",
                         "schema": {"type": "string", "minLength": 1}}
                    ],
                    "responses": with_common(json!({"200": {"description": "A page", "content": {"application/json": {"schema": {
                        "type": "object", "required": ["items", "next_cursor"], "properties": {
                            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Execution"}},
                            "next_cursor": {"type": ["string", "null"]}}}}}},
                        "422": error("Invalid filter or cursor")}), true)
                }
            },
            "/v1/executions/{id}": {"get": {"summary": "One execution", "security": security, "parameters": [id_param()],
                "responses": with_common(json!({"200": execution_response("The execution"), "404": error("Unknown id"), "422": error("Not a UUID")}), true)}},
            "/v1/executions/{id}/cancel": {"post": {"summary": "Cancel (cooperative when running)", "security": security, "parameters": [id_param()],
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object",
                    "properties": {"reason": {"type": ["string", "null"], "maxLength": 500, "pattern": "^[^\\x00]*$"}}, "additionalProperties": false}}}},
                "responses": with_common(json!({"200": execution_response("The execution after the request"), "404": error("Unknown id"),
                    "413": error("Body too large"), "415": error("The body is declared as something other than JSON in UTF-8"),
                    "422": error("Invalid reason or id")}), true)}},
            "/v1/executions/{id}/result": {"get": {"summary": "The result (never waits)", "security": security, "parameters": [id_param()],
                "responses": with_common(json!({
                    "200": {"description": "Succeeded", "content": {"application/json": {"schema": {"type": "object", "required": ["result"], "properties": {"result": {}}}}}},
                    "404": error("Unknown id"), "409": error("Not finished, or cancelled"), "410": error("Expired before it started"),
                    "422": error("Failed (see the execution's error), or not a UUID")}), true)}},
            "/healthz": {"get": {"summary": "Store health", "security": [], "responses": with_common(json!({
                "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "required": ["status"],
                    "properties": {"status": {"const": "ok"}, "namespace": {"type": "string"}}}}}}}), false)}}
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
            "description": "Required when the server is configured with a token (onestep serve --bearer-token)."}},
            "schemas": {
            "Status": {"type": "string", "enum": ["queued", "running", "retrying", "succeeded", "failed", "cancel_requested", "cancelled", "expired"]},
            "Error": {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]},
            "Json": {"description": "Any JSON without U+0000 in a string or key, nested at most 31 levels as stored, at most 1 MiB encoded",
                "anyOf": [{"type": ["null", "boolean", "number"]}, {"type": "string", "pattern": "^[^\\x00]*$"},
                    {"type": "array", "items": {"$ref": "#/components/schemas/Json"}},
                    {"type": "object", "propertyNames": {"pattern": "^[^\\x00]*$"}, "additionalProperties": {"$ref": "#/components/schemas/Json"}}]},
            "Submit": {"type": "object", "required": ["task_name", "payload"], "additionalProperties": false, "properties": {
                "task_name": task_name,
                "payload": {"$ref": "#/components/schemas/Json"},
                "metadata": {"type": ["object", "null"], "propertyNames": {"pattern": "^[^\\x00]*$", "not": {"const": "onestep.execution"}},
                    "additionalProperties": {"$ref": "#/components/schemas/Json"}},
                "delay_s": {"type": ["number", "null"], "minimum": 0, "maximum": 3_155_760_000u64},
                "expires_at": {"type": ["string", "null"], "format": "date-time",
                    "description": "Latest start time, RFC 3339 with an offset, in years 1 to 9999 in UTC"}}},
            "Execution": {"type": "object", "required": ["id", "namespace", "task_name", "status", "attempts", "metadata", "version", "created_at", "available_at"], "properties": {
                "id": {"type": "string", "format": "uuid"}, "namespace": {"type": "string"}, "task_name": {"type": "string"},
                "status": {"$ref": "#/components/schemas/Status"}, "attempts": {"type": "integer", "minimum": 0}, "metadata": {"type": "object"},
                "version": {"type": "integer", "minimum": 0}, "created_at": time, "available_at": time, "started_at": time,
                "finished_at": time, "cancel_requested_at": time, "expires_at": time,
                "progress": {"description": "The handler's last progress report (any JSON, null when none); only GET /v1/executions/{id} carries it"},
                "error": {"type": ["object", "null"], "properties": {"kind": {"type": "string"}, "exception_type": {"type": "string"},
                    "stage": {"type": ["string", "null"]}, "backend": {"type": ["string", "null"]},
                    "operation": {"type": ["string", "null"]}, "connector_kind": {"type": ["string", "null"]},
                    "sinks_succeeded": {"type": ["string", "null"]}, "sinks_remaining": {"type": ["string", "null"]}}}}}
        }}
    })
}

//! The OpenAPI 3.1 description served at `/openapi.json`.

use serde_json::{Value, json};

fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// Responses every /v1 route may give besides its own.
fn common(mut responses: Value) -> Value {
    if let Some(map) = responses.as_object_mut() {
        map.entry("401")
            .or_insert_with(|| error("Missing or invalid bearer token (when configured)"));
        map.entry("503")
            .or_insert_with(|| error("The execution store is unavailable"));
    }
    responses
}

fn execution_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Execution"}}}})
}

fn id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}})
}

/// The document.
pub fn document() -> Value {
    let time = json!({"type": ["string", "null"], "format": "date-time"});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "onestep executions", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Submit long-running tasks, poll their status and read their results."},
        "paths": {
            "/v1/executions": {
                "post": {
                    "summary": "Submit an execution",
                    "parameters": [{"name": "Idempotency-Key", "in": "header", "required": true,
                                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                                    "description": "Retry with the same key and body after a timeout: the same execution comes back."}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Submit"}}}},
                    "responses": {
                        "202": execution_response("Accepted (or the existing execution for a repeated key)"),
                        "400": error("Malformed JSON"), "401": error("Unauthorized"),
                        "409": error("The key was used with a different submission"),
                        "408": error("The body did not arrive within the body timeout"), "413": error("Body too large"), "415": error("The body is declared as something other than JSON"),
                        "422": error("Invalid or unencodable submission"),
                        "503": error("The execution store is unavailable")
                    }
                },
                "get": {
                    "summary": "List executions, newest first",
                    "parameters": [
                        {"name": "task_name", "in": "query", "schema": {"type": "string"}},
                        {"name": "status", "in": "query", "schema": {"$ref": "#/components/schemas/Status"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}},
                        {"name": "cursor", "in": "query", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": "A page", "content": {"application/json": {"schema": {
                        "type": "object", "properties": {
                            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Execution"}},
                            "next_cursor": {"type": ["string", "null"]}}}}}},
                        "422": error("Invalid filter or cursor")}
                }
            },
            "/v1/executions/{id}": {"get": {"summary": "One execution", "parameters": [id_param()],
                "responses": common(json!({"200": execution_response("The execution"), "404": error("Unknown id"), "422": error("Not a UUID")}))}},
            "/v1/executions/{id}/cancel": {"post": {"summary": "Cancel (cooperative when running)", "parameters": [id_param()],
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object",
                    "properties": {"reason": {"type": ["string", "null"], "maxLength": 500}}, "additionalProperties": false}}}},
                "responses": common(json!({"200": execution_response("The execution after the request"), "404": error("Unknown id"),
                    "408": error("The body did not arrive within the body timeout"), "413": error("Body too large"), "415": error("The body is declared as something other than JSON"),
                    "422": error("Invalid reason or id")}))}},
            "/v1/executions/{id}/result": {"get": {"summary": "The result (never waits)", "parameters": [id_param()],
                "responses": {
                    "200": {"description": "Succeeded", "content": {"application/json": {"schema": {"type": "object", "properties": {"result": {}}}}}},
                    "404": error("Unknown id"), "409": error("Not finished, or cancelled"), "410": error("Expired before it started"),
                    "422": error("Failed (see the execution's error)")}}},
            "/healthz": {"get": {"summary": "Store health", "responses": {"200": {"description": "OK"}, "503": error("Store unavailable")}}}
        },
        "security": [{"bearer": []}, {}],
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
            "description": "Required when the server is configured with a token (onestep serve --bearer-token)."}},
            "schemas": {
            "Status": {"type": "string", "enum": ["queued", "running", "retrying", "succeeded", "failed", "cancel_requested", "cancelled", "expired"]},
            "Error": {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]},
            "Submit": {"type": "object", "required": ["task_name", "payload"], "additionalProperties": false, "properties": {
                "task_name": {"type": "string"}, "payload": {}, "metadata": {"type": "object"},
                "delay_s": {"type": ["number", "null"], "minimum": 0},
                "expires_at": {"type": ["string", "null"], "format": "date-time", "description": "Latest start time; must carry an offset"}}},
            "Execution": {"type": "object", "properties": {
                "id": {"type": "string", "format": "uuid"}, "namespace": {"type": "string"}, "task_name": {"type": "string"},
                "status": {"$ref": "#/components/schemas/Status"}, "attempts": {"type": "integer"}, "metadata": {"type": "object"},
                "version": {"type": "integer"}, "created_at": time, "available_at": time, "started_at": time,
                "finished_at": time, "cancel_requested_at": time, "expires_at": time,
                "error": {"type": ["object", "null"], "properties": {"kind": {"type": "string"}, "exception_type": {"type": "string"},
                    "stage": {"type": ["string", "null"]}, "backend": {"type": ["string", "null"]},
                    "operation": {"type": ["string", "null"]}, "connector_kind": {"type": ["string", "null"]},
                    "sinks_succeeded": {"type": ["string", "null"]}, "sinks_remaining": {"type": ["string", "null"]}}}}}
        }}
    })
}

//! The hostile requests to every route but submit.

use base64::Engine as _;
use serde_json::json;

use crate::corpus::{Case, SQL, case};
use crate::wire::{cancel_bytes, get, http};

/// Hostile requests to the other routes: wrong methods and paths, list queries, bad ids in
/// paths, and cancels with hostile reasons and bodies aimed at `victim` (which must not change).
pub fn route_cases(victim: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    // Methods and paths.
    cases.push(case(
        "PUT /v1/executions",
        http("PUT", "/v1/executions", &[], Some(b"{}")),
        405,
        "method not allowed",
    ));
    cases.push(case(
        "DELETE an execution",
        http("DELETE", &format!("/v1/executions/{victim}"), &[], None),
        405,
        "method not allowed",
    ));
    cases.push(case(
        "POST a result",
        http(
            "POST",
            &format!("/v1/executions/{victim}/result"),
            &[],
            None,
        ),
        405,
        "method not allowed",
    ));
    cases.push(case(
        "an unknown path",
        get("/v1/executions/x/y/z"),
        404,
        "no such endpoint; see /openapi.json",
    ));
    cases.push(case(
        "an SQL path",
        get("/v1/%27%3B%20DROP%20TABLE%20x%3B--"),
        404,
        "no such endpoint; see /openapi.json",
    ));

    // The list's query.
    for (query, detail) in [
        ("limit=0", "limit must be between 1 and 200, got 0"),
        ("limit=201", "limit must be between 1 and 200, got 201"),
        (
            "limit=-1",
            "limit must be an integer between 1 and 200, got \"-1\"",
        ),
        (
            "limit=abc",
            "limit must be an integer between 1 and 200, got \"abc\"",
        ),
        (
            "limit=1e3",
            "limit must be an integer between 1 and 200, got \"1e3\"",
        ),
        (
            "limit=99999999999999999999",
            "limit must be an integer between 1 and 200",
        ),
        (
            "limit=",
            "limit must be an integer between 1 and 200, got \"\"",
        ),
        (
            "limit=1%20OR%201%3D1",
            "limit must be an integer between 1 and 200, got \"1 OR 1=1\"",
        ),
        ("cursor=", "cursor must be a non-empty string"),
        ("cursor=xyz", "cursor is rejected: invalid execution cursor"),
        (
            "cursor=%27%3B%20DROP%20TABLE%20x%3B--",
            "cursor is rejected: invalid execution cursor",
        ),
        (
            "cursor=%C3%A9",
            "cursor is rejected: invalid execution cursor",
        ),
        ("status=done", "status must be one of queued, running"),
        (
            "status=queued%27%20OR%20%271%27%3D%271",
            "got \"queued' OR '1'='1\"",
        ),
        ("status=", "status must be one of"),
        ("task_name=", "task_name must be a non-empty string"),
        ("task_name=%20%20", "task_name must be a non-empty string"),
        (
            "task_name=a%00b",
            "task_name must not contain the NUL character (\\u0000)",
        ),
        (
            "page=2",
            "unknown query parameter \"page\"; expected task_name, status, limit, cursor",
        ),
        (
            "namespace=other-tenant",
            "unknown query parameter \"namespace\"",
        ),
        (
            "table=onestep_executions",
            "unknown query parameter \"table\"",
        ),
        ("limit=10&offset=5", "unknown query parameter \"offset\""),
    ] {
        cases.push(case(
            format!("list ?{query}"),
            get(&format!("/v1/executions?{query}")),
            422,
            detail,
        ));
    }
    cases.push(case(
        "list with a 300-character task_name",
        get(&format!("/v1/executions?task_name={}", "t".repeat(300))),
        422,
        "task_name must be at most 255 characters, got 300",
    ));
    cases.push(case(
        "list with a 2,000-character cursor",
        get(&format!("/v1/executions?cursor={}", "A".repeat(2_000))),
        422,
        "cursor is rejected: invalid execution cursor",
    ));
    cases.push(case(
        "list with a 1,000-character parameter name",
        get(&format!("/v1/executions?{}=1", "p".repeat(1_000))),
        422,
        "(1000 characters); expected task_name",
    ));
    let b64 = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    for (what, cursor, detail) in [
        (
            "version 2",
            b64(
                r#"{"v":2,"created_at":"2026-01-01T00:00:00+00:00","id":"00000000-0000-0000-0000-000000000001"}"#,
            ),
            "cursor is rejected: unknown cursor version",
        ),
        (
            "SQL in created_at",
            b64(&format!(
                r#"{{"v":1,"created_at":"2026-01-01' OR '1'='1","id":"{victim}"}}"#
            )),
            "cursor is rejected: invalid execution cursor",
        ),
        (
            "SQL in id",
            b64(r#"{"v":1,"created_at":"2026-01-01T00:00:00+00:00","id":"1' OR '1'='1"}"#),
            "cursor is rejected: invalid execution cursor",
        ),
        (
            "a naive created_at",
            b64(&format!(
                r#"{{"v":1,"created_at":"2026-01-01T00:00:00","id":"{victim}"}}"#
            )),
            "cursor is rejected: invalid execution cursor",
        ),
        (
            "NaN",
            b64(r#"{"v":NaN,"created_at":"2026-01-01T00:00:00+00:00","id":"x"}"#),
            "cursor is rejected: invalid execution cursor",
        ),
        (
            "an array",
            b64("[1,2,3]"),
            "cursor is rejected: invalid execution cursor",
        ),
    ] {
        cases.push(case(
            format!("a forged cursor: {what}"),
            get(&format!("/v1/executions?cursor={cursor}")),
            422,
            detail,
        ));
    }

    // Bad ids in paths, on every route that takes one.
    let long = "a".repeat(10_000);
    for (id, shown) in [
        ("not-a-uuid", "\"not-a-uuid\"".to_string()),
        ("123", "\"123\"".to_string()),
        (
            "00000000-0000-0000-0000-00000000000g",
            "\"00000000-0000-0000-0000-00000000000g\"".to_string(),
        ),
        ("%27%20OR%20%271%27%3D%271", "\"' OR '1'='1\"".to_string()),
        (
            "%27%3B%20DROP%20TABLE%20x%3B--",
            "\"'; DROP TABLE x;--\"".to_string(),
        ),
        ("%00", "\"\\0\"".to_string()),
        ("..%2F..%2Fhealthz", "\"../../healthz\"".to_string()),
        (
            long.as_str(),
            format!("\"{}\"… (10000 characters)", &long[..64]),
        ),
        ("%ff", "a path segment that is not valid UTF-8".to_string()),
        (
            "%C0%AF",
            "a path segment that is not valid UTF-8".to_string(),
        ),
    ] {
        let label = &id[..id.len().min(40)];
        let detail = format!("execution_id must be a UUID, got {shown}");
        cases.push(case(
            format!("GET id {label}"),
            get(&format!("/v1/executions/{id}")),
            422,
            detail.clone(),
        ));
        cases.push(case(
            format!("GET result of id {label}"),
            get(&format!("/v1/executions/{id}/result")),
            422,
            detail.clone(),
        ));
        cases.push(case(
            format!("cancel id {label}"),
            cancel_bytes(id, "application/json", br#"{"reason": "x"}"#),
            422,
            detail,
        ));
    }
    let unknown = uuid::Uuid::new_v4();
    cases.push(case(
        "GET an unknown id",
        get(&format!("/v1/executions/{unknown}")),
        404,
        "execution not found",
    ));
    cases.push(case(
        "GET the result of an unknown id",
        get(&format!("/v1/executions/{unknown}/result")),
        404,
        format!("execution {unknown} was not found"),
    ));
    cases.push(case(
        "cancel an unknown id with an SQL reason",
        cancel_bytes(
            &unknown.to_string(),
            "application/json",
            json!({ "reason": SQL }).to_string().as_bytes(),
        ),
        404,
        "execution not found",
    ));

    // Cancel with hostile reasons and bodies (aimed at the queued victim, which must not change).
    for (what, body, status, detail) in [
        (
            "a 501-character reason",
            json!({"reason": "r".repeat(501)}).to_string(),
            422,
            "reason must be at most 500 characters, got 501",
        ),
        (
            "a 10,000-character reason",
            json!({"reason": "r".repeat(10_000)}).to_string(),
            422,
            "reason must be at most 500 characters, got 10000",
        ),
        (
            "a NUL in the reason",
            json!({"reason": "stop\u{0}now"}).to_string(),
            422,
            "reason must not contain the NUL character (\\u0000)",
        ),
        (
            "reason 1",
            r#"{"reason": 1}"#.into(),
            422,
            "reason must be a string or null",
        ),
        (
            "reason true",
            r#"{"reason": true}"#.into(),
            422,
            "reason must be a string or null",
        ),
        (
            "reason []",
            r#"{"reason": ["x"]}"#.into(),
            422,
            "reason must be a string or null",
        ),
        (
            "reason {}",
            r#"{"reason": {"sql": "x"}}"#.into(),
            422,
            "reason must be a string or null",
        ),
        (
            "an unknown field",
            r#"{"why": "x"}"#.into(),
            422,
            "unknown field \"why\"; expected reason",
        ),
        (
            "an unknown field beside reason",
            json!({"reason": "x", "namespace": "other-tenant"}).to_string(),
            422,
            "unknown field \"namespace\"; expected reason",
        ),
        (
            "an array body",
            r#"["reason"]"#.into(),
            422,
            "request body must be a JSON object",
        ),
        (
            "a string body",
            json!(SQL).to_string(),
            422,
            "request body must be a JSON object",
        ),
        (
            "a truncated body",
            r#"{"reason": "#.into(),
            400,
            "malformed JSON body",
        ),
        (
            "a NaN reason",
            r#"{"reason": NaN}"#.into(),
            400,
            "malformed JSON body",
        ),
    ] {
        cases.push(case(
            format!("cancel with {what}"),
            cancel_bytes(victim, "application/json", body.as_bytes()),
            status,
            detail,
        ));
    }
    cases.push(case(
        "cancel with invalid UTF-8",
        cancel_bytes(victim, "application/json", b"{\"reason\": \"\xff\"}"),
        400,
        "request body is not valid UTF-8",
    ));
    cases.push(case(
        "cancel declared as text/plain",
        cancel_bytes(victim, "text/plain", br#"{"reason": "csrf"}"#),
        415,
        "Content-Type must be application/json, got \"text/plain\"",
    ));
    cases.push(case(
        "cancel declared as a form",
        cancel_bytes(victim, "application/x-www-form-urlencoded", b"reason=csrf"),
        415,
        "Content-Type must be application/json, got \"application/x-www-form-urlencoded\"",
    ));
    cases
}

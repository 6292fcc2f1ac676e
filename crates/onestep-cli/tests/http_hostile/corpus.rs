//! The hostile submits, and the shape of a hostile case.

use serde_json::{Value, json};

use crate::wire::{How, cancel_bytes, http, submit_bytes, submit_json};

/// One hostile request and what it must get.
pub struct Case {
    /// What the request is, for the failure list.
    pub what: String,
    /// The bytes sent.
    pub raw: Vec<u8>,
    /// How they are sent.
    pub how: How,
    /// The status it must get.
    pub status: u16,
    /// Text the `detail` must contain.
    pub detail: String,
}

/// A case sent whole.
pub fn case(what: impl Into<String>, raw: Vec<u8>, status: u16, detail: impl Into<String>) -> Case {
    Case {
        what: what.into(),
        raw,
        how: How::Whole,
        status,
        detail: detail.into(),
    }
}

/// An allowed task name that is an SQL fragment: stored and listed literally.
pub const SQL_TASK: &str = "hello'); DROP TABLE onestep_executions; --";
/// An SQL fragment used as a value wherever one is accepted.
pub const SQL: &str = "'; DROP TABLE onestep_executions; --";

/// Hostile submits: sizes and framing, bodies that are not JSON or not declared as JSON, the
/// body's shape, wrong types for every field, values that are not allowed, the key header.
/// `victim` is a queued execution; `table` is the executions table's name (for SQL fragments).
pub fn submit_cases(victim: &str, table: &str) -> Vec<Case> {
    let drop_it = format!("x'); DROP TABLE {table}; --");
    let k = "hostile-key";
    let ok_body = |extra: Value| {
        let mut body = json!({"task_name": "hello", "payload": {"n": 1}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let mut cases = Vec::new();

    // Size and framing.
    let huge = json!({"task_name": "hello", "payload": "x".repeat(2 * 1024 * 1024)}).to_string();
    cases.push(Case {
        how: How::ExpectContinue(huge.clone().into_bytes()),
        ..case(
            "a 2 MiB body",
            http(
                "POST",
                "/v1/executions",
                &[
                    ("Content-Type", "application/json"),
                    ("Idempotency-Key", k),
                    ("Expect", "100-continue"),
                    ("Content-Length", &huge.len().to_string()),
                ],
                None,
            ),
            413,
            "request body exceeds 1130496 bytes",
        )
    });
    cases.push(Case {
        how: How::Chunked(huge.clone().into_bytes()),
        ..case(
            "a 2 MiB chunked body",
            http(
                "POST",
                "/v1/executions",
                &[
                    ("Content-Type", "application/json"),
                    ("Idempotency-Key", k),
                    ("Transfer-Encoding", "chunked"),
                ],
                None,
            ),
            413,
            "request body exceeds 1130496 bytes",
        )
    });
    cases.push(case(
        "a Content-Length of 99999999999 and no body (answered at once)",
        http(
            "POST",
            "/v1/executions",
            &[
                ("Content-Type", "application/json"),
                ("Idempotency-Key", k),
                ("Content-Length", "99999999999"),
            ],
            None,
        ),
        413,
        "request body exceeds 1130496 bytes",
    ));
    let mut chunked = http(
        "POST",
        "/v1/executions",
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", k),
            ("Transfer-Encoding", "chunked"),
        ],
        None,
    );
    chunked.extend_from_slice(b"zz\r\n{}\r\n0\r\n\r\n");
    cases.push(case(
        "broken chunked framing",
        chunked,
        400,
        "the request body could not be read",
    ));
    let mut cut = http(
        "POST",
        "/v1/executions",
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", k),
            ("Content-Length", "100"),
        ],
        None,
    );
    cut.extend_from_slice(br#"{"task_name": "hello""#);
    cases.push(Case {
        how: How::HalfClose,
        ..case(
            "a body that breaks off",
            cut,
            400,
            "the request body could not be read",
        )
    });
    let big_reason = json!({"reason": "r".repeat(20_000)}).to_string();
    cases.push(case(
        "a 20 KB cancel body",
        cancel_bytes(victim, "application/json", big_reason.as_bytes()),
        413,
        "request body exceeds 16384 bytes",
    ));
    let big_payload = json!({"task_name": "hello", "payload": "x".repeat(1_100_000)});
    cases.push(case(
        "a payload over 1 MiB (under the body limit)",
        submit_json(k, &big_payload),
        422,
        "execution payload exceeds the configured limit",
    ));
    cases.push(case(
        "metadata over 64 KiB",
        submit_json(k, &ok_body(json!({"metadata": {"m": "x".repeat(70_000)}}))),
        422,
        "execution metadata exceeds the configured limit",
    ));

    // Not JSON, or JSON no parser should accept.
    let deep = format!(
        r#"{{"task_name": "hello", "payload": {}}}"#,
        "[".repeat(100_000)
    );
    cases.push(case(
        "100k nested [",
        submit_bytes(k, deep.as_bytes()),
        400,
        "malformed JSON body: recursion limit exceeded",
    ));
    let deep_objects = format!(
        r#"{{"task_name": "hello", "payload": {}1{}}}"#,
        r#"{"a":"#.repeat(50_000),
        "}".repeat(50_000)
    );
    cases.push(case(
        "50k nested objects",
        submit_bytes(k, deep_objects.as_bytes()),
        400,
        "malformed JSON body: recursion limit exceeded",
    ));
    for (what, body) in [
        (
            "invalid UTF-8 in a string",
            b"{\"task_name\": \"hello\", \"payload\": \"\xff\xfe\"}".to_vec(),
        ),
        (
            "Latin-1 text",
            b"{\"task_name\": \"h\xe9llo\", \"payload\": 1}".to_vec(),
        ),
        (
            "UTF-16 with a byte-order mark",
            "\u{feff}{\"task_name\": \"hello\", \"payload\": 1}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
    ] {
        cases.push(case(
            what,
            submit_bytes(k, &body),
            400,
            "request body is not valid UTF-8",
        ));
    }
    // Refused before the router (by hyper's parser), with the same JSON body as everything else.
    for (what, raw, status, detail) in [
        (
            "the banner's <id> pasted literally",
            http("GET", "/v1/executions/<id>", &[], None),
            400,
            "malformed HTTP request",
        ),
        (
            "a header line without a colon",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n".to_vec(),
            400,
            "malformed HTTP request",
        ),
        (
            "a 70 KiB header",
            http("GET", "/healthz", &[("X-Big", &"a".repeat(70_000))], None),
            431,
            "the request head is too large",
        ),
        (
            "a 70 KiB path",
            http(
                "GET",
                &format!("/v1/executions/{}", "a".repeat(70_000)),
                &[],
                None,
            ),
            431,
            "the request head is too large",
        ),
    ] {
        cases.push(case(what, raw, status, detail));
    }
    // Ambiguous input is refused rather than read one way of several.
    for (what, raw, status, detail) in [
        (
            "a key given twice in the body",
            submit_bytes(k, br#"{"task_name": "hello", "payload": 1, "payload": 2}"#),
            400,
            "malformed JSON body: the key \"payload\" appears twice in one object",
        ),
        (
            "a key given twice in a nested object",
            submit_bytes(
                k,
                br#"{"task_name": "hello", "payload": {"a": [{"b": 1, "b": 1}]}}"#,
            ),
            400,
            "the key \"b\" appears twice in one object",
        ),
        (
            "a query parameter given twice",
            http("GET", "/v1/executions?limit=1&limit=2", &[], None),
            422,
            "query parameter \"limit\" is given twice",
        ),
        (
            "a query that is not UTF-8 once decoded",
            http("GET", "/v1/executions?task_name=h%E9llo", &[], None),
            400,
            "the query string is not valid UTF-8 once percent-decoded",
        ),
        (
            "a body declared as Latin-1",
            http(
                "POST",
                "/v1/executions",
                &[
                    ("Content-Type", "application/json; charset=latin-1"),
                    ("Idempotency-Key", k),
                ],
                Some(br#"{"task_name": "hello", "payload": 1}"#),
            ),
            415,
            "the body must be UTF-8 (charset=utf-8 or none), got charset \"latin-1\"",
        ),
        (
            "an escape sequence in the task name",
            submit_bytes(k, br#"{"task_name": "hel\u001b[2Jlo", "payload": 1}"#),
            422,
            "task_name must not contain control characters; found U+001B at character 4",
        ),
        (
            "a newline in the task name",
            submit_bytes(
                k,
                br#"{"task_name": "hello\nINFO forged log line", "payload": 1}"#,
            ),
            422,
            "task_name must not contain control characters; found U+000A at character 6",
        ),
        (
            "a control character in the list filter",
            http("GET", "/v1/executions?task_name=a%1Bb", &[], None),
            422,
            "task_name must not contain control characters",
        ),
    ] {
        cases.push(case(what, raw, status, detail));
    }
    // Python's `json.loads` reads a float literal beyond the f64 range as infinity, which the
    // reference then refuses; an integer longer than Python converts is refused too.
    let long_integer = format!(
        r#"{{"task_name": "hello", "payload": [{}]}}"#,
        "7".repeat(4301)
    );
    for (what, body, detail) in [
        (
            "1e999 delay_s",
            r#"{"task_name": "hello", "payload": 1, "delay_s": 1e999}"#.to_owned(),
            "delay_s must be a finite number >= 0",
        ),
        (
            "1e999 in the payload",
            r#"{"task_name": "hello", "payload": {"x": -1e999}}"#.to_owned(),
            "cannot encode execution payload: cannot encode builtins.float at /x: non-finite float",
        ),
        (
            "an integer of 4301 digits",
            long_integer,
            "cannot encode execution payload: cannot encode builtins.int at /0: 4301 digits exceed the limit",
        ),
    ] {
        cases.push(case(what, submit_bytes(k, body.as_bytes()), 422, detail));
    }
    for (what, body) in [
        ("NaN payload", r#"{"task_name": "hello", "payload": NaN}"#),
        (
            "Infinity payload",
            r#"{"task_name": "hello", "payload": Infinity}"#,
        ),
        (
            "-Infinity payload",
            r#"{"task_name": "hello", "payload": -Infinity}"#,
        ),
        (
            "NaN delay_s",
            r#"{"task_name": "hello", "payload": 1, "delay_s": NaN}"#,
        ),
        (
            "Infinity delay_s",
            r#"{"task_name": "hello", "payload": 1, "delay_s": Infinity}"#,
        ),
        (
            "NaN in metadata",
            r#"{"task_name": "hello", "payload": 1, "metadata": {"m": NaN}}"#,
        ),
        ("an empty body", ""),
        ("a truncated object", r#"{"task_name": "hello", "payload":"#),
        (
            "trailing garbage",
            r#"{"task_name": "hello", "payload": 1} DROP TABLE x"#,
        ),
        (
            "a lone surrogate",
            r#"{"task_name": "hello", "payload": "\ud800"}"#,
        ),
        (
            "a comment",
            r#"{"task_name": "hello", /* hi */ "payload": 1}"#,
        ),
        ("single quotes", r#"{'task_name': 'hello', 'payload': 1}"#),
        ("a byte-order mark", "\u{feff}{\"task_name\": \"hello\"}"),
    ] {
        cases.push(case(
            what,
            submit_bytes(k, body.as_bytes()),
            400,
            "malformed JSON body",
        ));
    }

    // Declared as something other than JSON.
    let valid = ok_body(json!({})).to_string();
    for (content_type, body) in [
        ("text/plain", valid.clone()),
        (
            "application/x-www-form-urlencoded",
            "task_name=hello&payload=1".to_string(),
        ),
        (
            "multipart/form-data; boundary=x",
            "--x\r\nContent-Disposition: form-data; name=\"task_name\"\r\n\r\nhello\r\n--x--\r\n"
                .to_string(),
        ),
        (
            "application/xml",
            "<execution><task_name>hello</task_name></execution>".to_string(),
        ),
        ("application/octet-stream", valid.clone()),
        ("application/jsonx", valid.clone()),
        ("text/json", valid.clone()),
    ] {
        cases.push(case(
            format!("Content-Type {content_type}"),
            http(
                "POST",
                "/v1/executions",
                &[("Content-Type", content_type), ("Idempotency-Key", k)],
                Some(body.as_bytes()),
            ),
            415,
            format!("Content-Type must be application/json, got {content_type:?}"),
        ));
    }
    let mut latin_type = b"POST /v1/executions HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
        Idempotency-Key: k\r\nContent-Type: t\xe9xt/plain\r\nContent-Length: "
        .to_vec();
    latin_type.extend_from_slice(format!("{}\r\n\r\n{valid}", valid.len()).as_bytes());
    cases.push(case(
        "a Content-Type that is not ASCII",
        latin_type,
        415,
        "Content-Type must be application/json, got",
    ));

    // The body's shape.
    for (what, body) in [
        ("an array body", "[]"),
        ("a string body", r#""hello""#),
        ("a null body", "null"),
        ("a number body", "42"),
    ] {
        cases.push(case(
            what,
            submit_bytes(k, body.as_bytes()),
            422,
            "request body must be a JSON object",
        ));
    }
    for (field, value) in [
        ("priority", json!(1)),
        ("namespace", json!("other-tenant")),
        ("table", json!(drop_it)),
        ("attempts_table", json!(SQL)),
        ("idempotency_key", json!("k2")),
        ("Task_Name", json!("hello")),
    ] {
        cases.push(case(
            format!("unknown field {field}"),
            submit_json(k, &ok_body(json!({ field: value }))),
            422,
            format!(
                "unknown field {field:?}; expected task_name, payload, metadata, delay_s, expires_at"
            ),
        ));
    }
    cases.push(case(
        "an unknown field with a 10,000-character name",
        submit_json(k, &ok_body(json!({ "f".repeat(10_000): 1 }))),
        422,
        "(10000 characters); expected task_name",
    ));
    cases.push(case(
        "no task_name",
        submit_json(k, &json!({"payload": 1})),
        422,
        "task_name is required",
    ));
    cases.push(case(
        "no payload",
        submit_json(k, &json!({"task_name": "hello"})),
        422,
        "payload is required (use null for none)",
    ));
    cases.push(case(
        "an empty object",
        submit_json(k, &json!({})),
        422,
        "task_name is required",
    ));

    // Wrong types for every field.
    let wrong = [json!(1), json!(null), json!(true), json!([]), json!({})];
    for value in &wrong {
        cases.push(case(
            format!("task_name {value}"),
            submit_json(k, &json!({"task_name": value, "payload": 1})),
            422,
            "task_name must be a string",
        ));
    }
    for value in [json!("x"), json!(1), json!([]), json!(true), json!(1.5)] {
        cases.push(case(
            format!("metadata {value}"),
            submit_json(k, &ok_body(json!({ "metadata": value }))),
            422,
            "metadata must be a JSON object",
        ));
    }
    for value in [json!("10"), json!(true), json!([1]), json!({"s": 1})] {
        cases.push(case(
            format!("delay_s {value}"),
            submit_json(k, &ok_body(json!({ "delay_s": value }))),
            422,
            "delay_s must be a number of seconds",
        ));
    }
    for value in [json!(1_900_000_000), json!(true), json!([]), json!({})] {
        cases.push(case(
            format!("expires_at {value}"),
            submit_json(k, &ok_body(json!({ "expires_at": value }))),
            422,
            "expires_at must be an ISO 8601 string with an offset",
        ));
    }

    // Values that are not allowed.
    for task in [
        "",
        " ",
        "other",
        "HELLO",
        "hello ",
        SQL,
        drop_it.as_str(),
        "hello' OR '1'='1",
        "hello\"; --",
    ] {
        cases.push(case(
            format!("task_name {:?}", &task[..task.len().min(40)]),
            submit_json(k, &json!({"task_name": task, "payload": 1})),
            422,
            "unsupported task_name",
        ));
    }
    cases.push(case(
        "a 10,000-character task_name",
        submit_json(k, &json!({"task_name": "t".repeat(10_000), "payload": 1})),
        422,
        "task_name must be at most 255 characters, got 10000",
    ));
    cases.push(case(
        "a NUL in task_name",
        submit_json(k, &json!({"task_name": "hel\u{0}lo", "payload": 1})),
        422,
        "task_name must not contain the NUL character (\\u0000)",
    ));
    cases.push(case(
        "a NUL in a payload string",
        submit_json(
            k,
            &json!({"task_name": "hello", "payload": {"a": ["x\u{0}y"]}}),
        ),
        422,
        "payload must not contain the NUL character (\\u0000); found at /a/0",
    ));
    cases.push(case(
        "a NUL in a payload key",
        submit_json(k, &json!({"task_name": "hello", "payload": {"k\u{0}": 1}})),
        422,
        "payload must not contain the NUL character (\\u0000); found at /k\u{0}",
    ));
    cases.push(case(
        "a NUL in metadata",
        submit_json(k, &ok_body(json!({"metadata": {"m": "\u{0}"}}))),
        422,
        "metadata must not contain the NUL character (\\u0000); found at /m",
    ));
    let mut escaped = json!(1);
    for _ in 0..8 {
        escaped = json!({ "$onestep": escaped });
    }
    cases.push(case(
        "a payload of 8 nested \"$onestep\" objects (32 levels as stored)",
        submit_json(k, &json!({"task_name": "hello", "payload": escaped})),
        422,
        "payload is nested 32 levels deep as stored, more than 31",
    ));
    let nested = format!(
        r#"{{"task_name": "hello", "payload": {}{}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    cases.push(case(
        "a payload of 100 nested arrays",
        submit_bytes(k, nested.as_bytes()),
        422,
        "payload is nested 100 levels deep as stored, more than 31",
    ));
    let nested = format!(
        r#"{{"task_name": "hello", "payload": 1, "metadata": {{"m": {}{}}}}}"#,
        "[".repeat(31),
        "]".repeat(31)
    );
    cases.push(case(
        "metadata nested 32 levels",
        submit_bytes(k, nested.as_bytes()),
        422,
        "metadata is nested 32 levels deep as stored, more than 31",
    ));
    cases.push(case(
        "the reserved metadata key",
        submit_json(
            k,
            &ok_body(json!({"metadata": {"onestep.execution": {"id": victim}}})),
        ),
        422,
        "metadata key 'onestep.execution' is reserved",
    ));
    for value in [
        json!(-1),
        json!(-0.001),
        json!(1e20),
        json!(3_155_760_001u64),
    ] {
        cases.push(case(
            format!("delay_s {value}"),
            submit_json(k, &ok_body(json!({ "delay_s": value }))),
            422,
            "delay_s must be a finite number >= 0",
        ));
    }
    for naive in [
        "2030-01-01T00:00:00",
        "2030-01-01T00:00:00.123456",
        "20300101T000000",
    ] {
        cases.push(case(
            format!("naive expires_at {naive}"),
            submit_json(k, &ok_body(json!({ "expires_at": naive }))),
            422,
            "expires_at must include a timezone",
        ));
    }
    for bad in [
        "tomorrow",
        "",
        "2030-01-01",
        "2030-02-30T00:00:00Z",
        "2030-01-01T24:00:00Z",
        "2030-01-01T00:00:00+25:00",
        "2030-01-01T00:00:00+0200",
        "2030-01-01 00:00:00",
        "+10000-01-01T00:00:00Z",
        "2030-01-01T00:00:00Z'; DROP TABLE onestep_executions; --",
    ] {
        cases.push(case(
            format!("expires_at {bad:?}"),
            submit_json(k, &ok_body(json!({ "expires_at": bad }))),
            422,
            format!("expires_at must be an ISO 8601 time with an offset, got {bad:?}"),
        ));
    }
    cases.push(case(
        "a 10,000-character expires_at",
        submit_json(k, &ok_body(json!({ "expires_at": "9".repeat(10_000) }))),
        422,
        "(10000 characters)",
    ));
    for edge in ["9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+23:59"] {
        cases.push(case(
            format!("expires_at {edge} (outside years 1..9999 in UTC)"),
            submit_json(k, &ok_body(json!({ "expires_at": edge }))),
            422,
            format!("expires_at must be between 0001-01-01 and 9999-12-31 in UTC, got {edge:?}"),
        ));
    }

    // The Idempotency-Key header.
    let valid = ok_body(json!({})).to_string();
    let with_key = |key: &str| {
        http(
            "POST",
            "/v1/executions",
            &[
                ("Content-Type", "application/json"),
                ("Idempotency-Key", key),
            ],
            Some(valid.as_bytes()),
        )
    };
    cases.push(case(
        "no Idempotency-Key",
        http(
            "POST",
            "/v1/executions",
            &[("Content-Type", "application/json")],
            Some(valid.as_bytes()),
        ),
        422,
        "header Idempotency-Key is required (1..255 characters)",
    ));
    cases.push(case(
        "a 10,000-character Idempotency-Key",
        with_key(&"k".repeat(10_000)),
        422,
        "header Idempotency-Key must be 1..255 characters, got 10000",
    ));
    cases.push(case(
        "a 256-character Idempotency-Key",
        with_key(&"k".repeat(256)),
        422,
        "header Idempotency-Key must be 1..255 characters, got 256",
    ));
    cases.push(case(
        "an empty Idempotency-Key",
        with_key(""),
        422,
        "header Idempotency-Key must be 1..255 characters, got 0",
    ));
    cases.push(case(
        "a blank Idempotency-Key",
        with_key("   "),
        422,
        "header Idempotency-Key must be 1..255 characters, got 0",
    ));
    cases.push(case(
        "a UTF-8 Idempotency-Key",
        with_key("ключ"),
        422,
        "header Idempotency-Key must be printable ASCII",
    ));
    cases.push(case(
        "a tab in the Idempotency-Key",
        with_key("a\tb"),
        422,
        "header Idempotency-Key must be printable ASCII",
    ));

    cases
}

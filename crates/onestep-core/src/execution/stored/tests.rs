//! Tests of the stored-row layer.

use serde_json::json;
use time::macros::datetime;

use super::*;
use crate::execution::SubmitOptions;

fn request(payload: Value, options: SubmitOptions) -> ExecutionResult<ExecutionRequest> {
    ExecutionRequest::new("ns", "task", payload, options)
}

fn field_of(err: ExecutionError) -> (String, String) {
    match err {
        ExecutionError::InvalidArgument { field, message } => (field, message),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// `depth` arrays around a number.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| Value::Array(vec![inner]))
}

/// `n` objects `{"$onestep": …}` around a number: the codec stores each as a 4-level mapping.
fn escaped(n: usize) -> Value {
    (0..n).fold(json!(1), |inner, _| {
        Value::Object(Map::from_iter([(TAG.to_string(), inner)]))
    })
}

#[test]
fn expires_at_outside_years_1_to_9999_in_utc_is_an_invalid_argument_not_a_panic() {
    for bad in [
        datetime!(9999-12-31 23:59:59 -23:59),
        datetime!(0000-01-01 00:00:00 +23:59),
        datetime!(0000-06-01 00:00 UTC),
        datetime!(-0001-01-01 00:00 UTC),
    ] {
        let err = request(json!(1), SubmitOptions::default().expires_at(bad)).unwrap_err();
        let (field, message) = field_of(err);
        assert_eq!(field, "expires_at", "{bad}");
        assert!(
            message.starts_with("must be between 0001-01-01 and 9999-12-31 in UTC, got"),
            "{message}"
        );
        // A request built field by field reaches the same check in every backend.
        let mut built = request(json!(1), SubmitOptions::default()).unwrap();
        built.expires_at = Some(bad);
        let err = encode_submission(&built, &ExecutionLimits::default()).unwrap_err();
        assert_eq!(field_of(err).0, "expires_at");
    }
    let err = request(
        json!(1),
        SubmitOptions::default().expires_at(datetime!(9999-12-31 23:59:59 -23:59)),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "expires_at must be between 0001-01-01 and 9999-12-31 in UTC, got 9999-12-31 \
         23:59:59.0 -23:59:00"
    );
    let now = datetime!(2026-01-01 00:00 UTC);
    for edge in [
        datetime!(0001-01-01 00:00:00 UTC),
        datetime!(0001-01-01 23:59:00 +23:59),
        datetime!(9999-12-31 23:59:59.999999 UTC),
        datetime!(9999-12-31 00:00:00 -23:59),
    ] {
        let ok = request(json!(1), SubmitOptions::default().expires_at(edge)).unwrap();
        let encoded = encode_submission(&ok, &ExecutionLimits::default()).unwrap();
        let row = ExecutionRow::queued(&ok, encoded, Uuid::nil(), now);
        let stored = row.expires_at.unwrap();
        assert_eq!((stored, stored.offset()), (edge, time::UtcOffset::UTC));
        assert_eq!(row.to_execution().unwrap().expires_at, Some(edge));
    }
}

#[test]
fn a_delay_reaching_past_the_end_of_time_saturates_instead_of_panicking() {
    let ok = request(
        json!(1),
        SubmitOptions::default().delay(std::time::Duration::from_secs(86_400)),
    )
    .unwrap();
    let encoded = encode_submission(&ok, &ExecutionLimits::default()).unwrap();
    let row = ExecutionRow::queued(&ok, encoded, Uuid::nil(), datetime!(9999-12-31 12:00 UTC));
    assert_eq!(
        row.available_at,
        crate::clock::whole_micros(time::PrimitiveDateTime::MAX.assume_utc()),
        "the last storable instant"
    );
}

#[test]
fn nul_characters_are_rejected_with_the_pointer_of_the_first_one() {
    let cases = [
        (json!("a\u{0}"), "/"),
        (json!({"a": ["ok", "x\u{0}y"]}), "/a/1"),
        (json!({"k\u{0}": 1}), "/k\u{0}"),
        (json!({"a/b": {"c~d": "\u{0}"}}), "/a~1b/c~0d"),
        // Document order: the key of the first entry comes before a later value.
        (json!({"a\u{0}": 1, "b": "\u{0}"}), "/a\u{0}"),
        (json!([[1, [2, "\u{0}"]], "\u{0}"]), "/0/1/1"),
    ];
    for (value, at) in cases {
        let err = encode_storable("payload", &value).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("payload must not contain the NUL character (\\u0000); found at {at}"),
            "{value}"
        );
    }
    // Other control characters are storable everywhere.
    assert!(encode_storable("payload", &json!({"\u{1}": "\u{1f}\u{7f}"})).is_ok());

    let limits = ExecutionLimits::default();
    let mut meta = Map::new();
    meta.insert("m".into(), json!(["\u{0}"]));
    let err = encode_submission(
        &request(json!(1), SubmitOptions::default().metadata(meta)).unwrap(),
        &limits,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadata must not contain the NUL character (\\u0000); found at /m/0"
    );
    let err = encode_result(&json!({"r": "\u{0}"}), &limits).unwrap_err();
    assert_eq!(
        field_of(err),
        (
            "result".to_string(),
            "must not contain the NUL character (\\u0000); found at /r".to_string()
        )
    );
}

#[test]
fn nul_characters_in_names_keys_reasons_and_error_details_are_rejected() {
    let nul = "must not contain the NUL character (\\u0000)";
    let cases = [
        ExecutionRequest::new("n\u{0}s", "t", Value::Null, SubmitOptions::default()),
        ExecutionRequest::new("ns", "t\u{0}", Value::Null, SubmitOptions::default()),
        request(
            Value::Null,
            SubmitOptions::default().idempotency_key("k\u{0}"),
        ),
    ];
    for (result, field) in cases
        .into_iter()
        .zip(["namespace", "task_name", "idempotency_key"])
    {
        assert_eq!(
            field_of(result.unwrap_err()),
            (field.to_string(), nul.to_string())
        );
    }
    let mut built = request(Value::Null, SubmitOptions::default()).unwrap();
    built.idempotency_key = Some("\u{0}".into());
    let err = encode_submission(&built, &ExecutionLimits::default()).unwrap_err();
    assert_eq!(field_of(err).0, "idempotency_key");

    use crate::execution::backend::validate_cancel_reason;
    use crate::execution::client::normalize_reason;
    assert_eq!(
        field_of(normalize_reason(Some(" why\u{0} ")).unwrap_err()).1,
        nul
    );
    assert_eq!(
        field_of(validate_cancel_reason(Some("\u{0}")).unwrap_err()).0,
        "reason"
    );
    assert!(validate_cancel_reason(Some("why")).is_ok());

    let query = crate::execution::ExecutionQuery {
        namespace: "ns".into(),
        task_name: Some("t\u{0}".into()),
        status: None,
        limit: 10,
        cursor: None,
    };
    assert_eq!(field_of(query.validate().unwrap_err()).0, "task_name");

    let detail = crate::execution::ExecutionErrorDetail {
        stage: Some("handler\u{0}".into()),
        ..crate::execution::ExecutionErrorDetail::new("error", "E").unwrap()
    };
    assert_eq!(field_of(detail.validated().unwrap_err()).0, "stage");
    // The runtime's own detail is always storable.
    let failure = crate::failure::FailureInfo::from_error(
        crate::failure::FailureKind::Error,
        crate::failure::Stage::Handler,
        &crate::TaskError::new("Bad\u{0}Type", "boom"),
    );
    let detail = crate::execution::ExecutionErrorDetail::from_failure(&failure);
    assert_eq!(detail.exception_type, "Bad\u{FFFD}Type");
    assert!(detail.validated().is_ok());
}

#[test]
fn values_nested_deeper_than_31_levels_as_stored_are_rejected() {
    let limits = ExecutionLimits::default();
    assert_eq!(
        encode_storable("payload", &nested(MAX_STORED_DEPTH)).unwrap(),
        nested(MAX_STORED_DEPTH)
    );
    let err = encode_storable("payload", &nested(MAX_STORED_DEPTH + 1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "payload is nested 32 levels deep as stored, more than 31 (each array or object is \
         a level; a \"$onestep\" key adds 3)"
    );
    // 7 escaped objects are 28 levels as stored, 8 are 32: the limit is on the stored form,
    // although the value itself is only 8 levels deep.
    assert!(encode_result(&escaped(7), &limits).is_ok());
    let err = encode_result(&escaped(8), &limits).unwrap_err();
    let (field, message) = field_of(err);
    assert_eq!(field, "result");
    assert!(
        message.starts_with("is nested 32 levels deep as stored"),
        "{message}"
    );
    let mut meta = Map::new();
    meta.insert("m".into(), nested(MAX_STORED_DEPTH));
    let err = encode_submission(
        &request(json!(1), SubmitOptions::default().metadata(meta)).unwrap(),
        &limits,
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("metadata is nested 32 levels"),
        "{err}"
    );
    // Far too deep is refused before the (recursive) codec sees it.
    let err = encode_storable("payload", &nested(2_000)).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("payload is nested at least 2000 levels deep as stored"),
        "{err}"
    );
}

#[test]
fn the_deepest_storable_value_reads_back() {
    let limits = ExecutionLimits::default();
    let deepest = json!({"a": nested(MAX_STORED_DEPTH - 1)});
    let built = request(deepest.clone(), SubmitOptions::default()).unwrap();
    let encoded = encode_submission(&built, &limits).unwrap();
    // What a backend writes is text it can parse again (serde_json stops at 128 levels).
    let text = encoded.payload.to_string();
    let parsed: Value = serde_json::from_str(&text).unwrap();
    let row = ExecutionRow::queued(
        &built,
        EncodedSubmission {
            payload: parsed,
            ..encoded
        },
        Uuid::nil(),
        datetime!(2026-01-01 00:00 UTC),
    );
    assert_eq!(row.to_execution().unwrap().payload, deepest);
}

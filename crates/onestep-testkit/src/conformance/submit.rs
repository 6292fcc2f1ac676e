//! Submit: limits, idempotency, batches, tagged values, NUL and depth checks, edge instants.

use std::time::Duration;

use onestep_core::execution::{
    Execution, ExecutionBackend, ExecutionClient, ExecutionCompletion, ExecutionError,
    ExecutionLimits, ExecutionRequest, ExecutionStatus, SubmitOptions,
};
use serde_json::{Map, Value, json};
use time::macros::datetime;
use uuid::Uuid;

use onestep_core::clock::Clock;
use onestep_core::execution::stored::MAX_STORED_DEPTH;

use super::*;

/// Submit returns a queued snapshot equal to what `get` returns; a success with no result reads
/// back as `null`.
pub async fn submit_get_and_successful_none_result_round_trip<F: BackendFactory>(f: &F) {
    let (b, setup) = backend(f).await;
    let mut meta = Map::new();
    meta.insert("tenant".into(), json!("acme"));
    let submitted = b
        .submit(request(
            "report",
            json!({"month": "2026-11"}),
            SubmitOptions::default().metadata(meta),
        ))
        .await
        .unwrap();
    assert_eq!(submitted.status, ExecutionStatus::Queued);
    assert_eq!((submitted.attempts, submitted.version), (0, 0));
    assert_eq!(submitted.created_at, setup.clock.now());
    assert_eq!(submitted.available_at, submitted.created_at);
    assert_eq!(submitted.metadata["tenant"], "acme");
    assert_eq!(submitted.result, None);
    let fetched = b.get(NS, submitted.id).await.unwrap().unwrap();
    assert_eq!(fetched, submitted);

    let lease = claim_one(&b, "report", 30.0).await;
    let done = complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: Value::Null,
        },
    )
    .await
    .unwrap();
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    assert_eq!(
        client.result::<Option<i32>>(submitted.id).await.unwrap(),
        None
    );
    assert!(matches!(
        client.result::<Value>(Uuid::new_v4()).await,
        Err(ExecutionError::NotFound(_))
    ));
}

/// Payload and metadata over their configured limits are encoding errors and store nothing.
pub async fn submit_rejects_payload_and_metadata_over_their_limits<F: BackendFactory>(f: &F) {
    let setup = Setup {
        limits: ExecutionLimits {
            max_payload_bytes: 64,
            max_metadata_bytes: 32,
            max_result_bytes: 64,
        },
        ..Setup::default()
    };
    let (b, _) = backend_with(f, setup).await;
    let err = b
        .submit(request(
            "t",
            json!("x".repeat(100)),
            SubmitOptions::default(),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ExecutionError::Encoding(m) if m == "execution payload exceeds the configured limit"),
        "{err}"
    );
    let mut meta = Map::new();
    meta.insert("k".into(), json!("v".repeat(40)));
    let err = b
        .submit(request(
            "t",
            json!(1),
            SubmitOptions::default().metadata(meta),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ExecutionError::Encoding(m) if m == "execution metadata exceeds the configured limit"),
        "{err}"
    );
    let page = b.list(&query(None, None, 10)).await.unwrap();
    assert!(page.items.is_empty(), "nothing was stored");
    // A payload of exactly the limit is accepted: the limit is inclusive.
    let exact = json!("y".repeat(62));
    b.submit(request("t", exact, SubmitOptions::default()))
        .await
        .unwrap();
}

/// Metadata may not use the key the runtime reserves for workers.
pub async fn submit_rejects_the_reserved_metadata_key<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let mut meta = Map::new();
    meta.insert("onestep.execution".into(), json!({}));
    let err = b
        .submit(request(
            "t",
            json!(1),
            SubmitOptions::default().metadata(meta),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadata key 'onestep.execution' is reserved"
    );
}

/// Tagged values (datetime, uuid, decimal, bytes, tuples, sets, mappings with a `$onestep` key,
/// integers beyond 64 bits) survive the store unchanged, and an object with a `$onestep` key is
/// stored and read back as the `mapping` Python makes of it, items in their order.
pub async fn tagged_values_round_trip_through_the_store<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let payload = json!({
        "when": {"$onestep": {"type": "datetime", "value": "2026-01-02T03:04:05.000006+08:00", "fold": 0}},
        "id": {"$onestep": {"type": "uuid", "value": "12345678-1234-5678-1234-567812345678"}},
        "amount": {"$onestep": {"type": "decimal", "value": "12.50"}},
        "blob": {"$onestep": {"type": "bytes", "value": "AAEC/w=="}},
        "unicode": "naïve ☃ 𝄞",
        "float": 0.1,
        "big": 9007199254740993_u64,
        "huge": 100000000000000000000000000001_u128,
        "pair": {"$onestep": {"type": "tuple", "values": [1, "two"]}},
        "set": {"$onestep": {"type": "frozenset", "values": ["a", "b"]}},
        "mapping": {"$onestep": {"type": "mapping", "items": [["z", 1], ["$onestep", 2], ["a", 3]]}},
    });
    let submitted = b
        .submit(request("t", payload.clone(), SubmitOptions::default()))
        .await
        .unwrap();
    let fetched = b.get(NS, submitted.id).await.unwrap().unwrap();
    assert_eq!(fetched.payload, payload);
    let escaped = json!({"other": 1, "$onestep": "a user key"});
    let submitted = b
        .submit(request("t", escaped, SubmitOptions::default()))
        .await
        .unwrap();
    assert_eq!(
        b.get(NS, submitted.id).await.unwrap().unwrap().payload,
        json!({"$onestep": {"type": "mapping", "items": [["other", 1], ["$onestep", "a user key"]]}})
    );
}

/// The same key with the same submission returns the original execution, from another backend
/// instance over the same tables too.
pub async fn same_idempotency_key_and_digest_returns_the_original_execution<F: BackendFactory>(
    f: &F,
) {
    let (first_backend, setup) = backend(f).await;
    let second_backend = f.create(&setup).await;
    let opts = || {
        SubmitOptions::default()
            .idempotency_key("order-7")
            .delay(std::time::Duration::from_secs(5))
            .expires_at(datetime!(2026-06-01 12:00 +08:00))
    };
    let first = first_backend
        .submit(request("charge", json!({"order": 7}), opts()))
        .await
        .unwrap();
    let again = second_backend
        .submit(request("charge", json!({"order": 7}), opts()))
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    let other_task = second_backend
        .submit(request("refund", json!({"order": 7}), opts()))
        .await
        .unwrap();
    assert_ne!(other_task.id, first.id, "the key is scoped by task");
}

/// The same key with a different payload, delay or expiry offset is a conflict.
pub async fn same_idempotency_key_with_a_different_submission_conflicts<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let key = || SubmitOptions::default().idempotency_key("k1");
    b.submit(request(
        "t",
        json!({"n": 1}),
        key().expires_at(datetime!(2026-06-01 04:00 UTC)),
    ))
    .await
    .unwrap();
    for (payload, options) in [
        (
            json!({"n": 2}),
            key().expires_at(datetime!(2026-06-01 04:00 UTC)),
        ),
        (
            json!({"n": 1}),
            key().expires_at(datetime!(2026-06-01 12:00 +08:00)),
        ),
        (
            json!({"n": 1}),
            key()
                .expires_at(datetime!(2026-06-01 04:00 UTC))
                .delay(std::time::Duration::from_secs(1)),
        ),
    ] {
        let err = b.submit(request("t", payload, options)).await.unwrap_err();
        assert!(
            matches!(&err, ExecutionError::Conflict(m) if m == "idempotency key was already used with a different submission"),
            "{err}"
        );
    }
}

/// An idempotent re-submit returns the execution even after it finished.
pub async fn idempotent_resubmit_returns_the_execution_whatever_its_status<F: BackendFactory>(
    f: &F,
) {
    let (b, _) = backend(f).await;
    let opts = || SubmitOptions::default().idempotency_key("once");
    let first = b.submit(request("t", json!(1), opts())).await.unwrap();
    let lease = claim_one(&b, "t", 30.0).await;
    complete(
        &b,
        &lease,
        ExecutionCompletion::Succeeded {
            result: json!("done"),
        },
    )
    .await
    .unwrap();
    let again = b.submit(request("t", json!(1), opts())).await.unwrap();
    assert_eq!(
        (again.id, again.status),
        (first.id, ExecutionStatus::Succeeded)
    );
    assert_eq!(again.result, Some(json!("done")));
}

/// Submissions without a key are always new executions.
pub async fn executions_without_a_key_never_conflict<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let a = submit(&b, "t", json!(1)).await;
    let c = submit(&b, "t", json!(1)).await;
    assert_ne!(a.id, c.id);
}

/// A batch submit stores every valid item and reports each failure on its own.
pub async fn submit_many_applies_the_rules_to_each_item<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let first = b
        .submit(request(
            "t",
            json!(0),
            SubmitOptions::default().idempotency_key("dup"),
        ))
        .await
        .unwrap();
    let mut reserved = Map::new();
    reserved.insert("onestep.execution".into(), json!(1));
    let results = b
        .submit_many(vec![
            request("t", json!(1), SubmitOptions::default()),
            request(
                "t",
                json!(0),
                SubmitOptions::default().idempotency_key("dup"),
            ),
            request(
                "t",
                json!(9),
                SubmitOptions::default().idempotency_key("dup"),
            ),
            request("t", json!(2), SubmitOptions::default().metadata(reserved)),
            request(
                "t",
                json!(3),
                SubmitOptions::default().idempotency_key("fresh"),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 5);
    assert!(results[0].is_ok());
    assert_eq!(results[1].as_ref().unwrap().id, first.id);
    assert!(matches!(results[2], Err(ExecutionError::Conflict(_))));
    assert!(matches!(
        results[3],
        Err(ExecutionError::InvalidArgument { .. })
    ));
    assert!(results[4].is_ok());
    assert_eq!(listed(&b, "t").await, 3);
    // A key repeated inside one batch behaves as two sequential submits.
    let twice = b
        .submit_many(vec![
            request(
                "u",
                json!(1),
                SubmitOptions::default().idempotency_key("in-batch"),
            ),
            request(
                "u",
                json!(1),
                SubmitOptions::default().idempotency_key("in-batch"),
            ),
            request(
                "u",
                json!(2),
                SubmitOptions::default().idempotency_key("in-batch"),
            ),
            request("u", json!(3), SubmitOptions::default()),
        ])
        .await
        .unwrap();
    assert_eq!(twice[0].as_ref().unwrap().id, twice[1].as_ref().unwrap().id);
    assert!(matches!(twice[2], Err(ExecutionError::Conflict(_))));
    assert_eq!(listed(&b, "u").await, 2);
}

/// A batch stores each row exactly as it returns it (a JSON `null` payload, nested values,
/// metadata, a delay, `expires_at` at the edges of the supported years), whichever way the
/// backend inserts the batch; resubmitting the batch, whole or mixed with new keys, returns the
/// stored executions and adds only the new ones.
pub async fn submit_many_stores_each_row_as_returned<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let mut metadata = Map::new();
    metadata.insert("trace".into(), json!({"id": "abc", "hops": [1, 2.5, null]}));
    let batch = |keys: &[&str]| -> Vec<ExecutionRequest> {
        keys.iter()
            .enumerate()
            .map(|(i, key)| {
                let options = SubmitOptions::default().idempotency_key(*key);
                let (payload, options) = match i % 4 {
                    0 => (json!(null), options),
                    1 => (
                        json!({"nested": {"list": [1, "two", {"three": true}]}, "n": -0.5}),
                        options.metadata(metadata.clone()),
                    ),
                    2 => (
                        json!("text"),
                        options
                            .delay(Duration::from_secs(3600))
                            .expires_at(datetime!(0001-01-01 23:59:00 +23:59)),
                    ),
                    _ => (
                        json!([i]),
                        options.expires_at(datetime!(9999-12-31 00:00:00.123456 -23:59:59)),
                    ),
                };
                request("t", payload, options)
            })
            .collect()
    };
    let first: Vec<Execution> = b
        .submit_many(batch(&["a", "b", "c", "d"]))
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for e in &first {
        let stored = b
            .get(NS, e.id)
            .await
            .unwrap()
            .expect("a returned row is stored");
        assert_eq!(&stored, e, "the stored row equals the returned one");
        assert_eq!(e.status, ExecutionStatus::Queued);
    }
    assert_eq!(first[0].payload, json!(null));
    assert_eq!(first[1].metadata.get("trace"), metadata.get("trace"));
    assert!(first[2].available_at > first[0].available_at);
    // The same batch again, then the stored keys mixed with new ones.
    let again = b.submit_many(batch(&["a", "b", "c", "d"])).await.unwrap();
    for (e, r) in first.iter().zip(&again) {
        assert_eq!(r.as_ref().unwrap().id, e.id);
    }
    let mixed = b.submit_many(batch(&["a", "x", "c", "y"])).await.unwrap();
    assert_eq!(mixed[0].as_ref().unwrap().id, first[0].id);
    assert_eq!(mixed[2].as_ref().unwrap().id, first[2].id);
    for new in [&mixed[1], &mixed[3]] {
        let new = new.as_ref().unwrap();
        assert!(first.iter().all(|e| e.id != new.id));
        assert_eq!(&b.get(NS, new.id).await.unwrap().unwrap(), new);
    }
    assert_eq!(listed(&b, "t").await, 6);
}

/// U+0000 (which PostgreSQL cannot store) is refused on every backend alike, before anything is
/// written: in payload and metadata strings and keys (the error names the JSON pointer), task
/// names, idempotency keys, cancel reasons and list filters; a namespace holding one holds
/// nothing. Other control characters are stored.
pub async fn nul_characters_are_rejected_on_every_entry_point_before_any_write<
    F: BackendFactory,
>(
    f: &F,
) {
    let (b, _) = backend(f).await;
    let client = ExecutionClient::new(b.clone(), NS).unwrap();
    let mut nul_key = Map::new();
    nul_key.insert("m\u{0}".into(), json!(1));
    let bad = [
        (
            built("t", json!({"a": ["x\u{0}y"]}), None, Map::new()),
            "payload",
            "must not contain the NUL character (\\u0000); found at /a/0",
        ),
        (
            built("t", json!(1), None, nul_key),
            "metadata",
            "must not contain the NUL character (\\u0000); found at /m\u{0}",
        ),
        (
            built("t\u{0}", json!(1), None, Map::new()),
            "task_name",
            NUL,
        ),
        (
            built("t", json!(1), Some("k\u{0}"), Map::new()),
            "idempotency_key",
            NUL,
        ),
    ];
    for (request, field, message) in &bad {
        assert_invalid(b.submit(request.clone()).await.unwrap_err(), field, message);
    }
    let mut batch: Vec<ExecutionRequest> = bad.iter().map(|(r, _, _)| r.clone()).collect();
    batch.push(built(
        "t",
        json!("ctrl \u{1}\u{1f}"),
        Some("good"),
        Map::new(),
    ));
    batch.push(built("t", json!(2), None, Map::new()));
    let mut results = b.submit_many(batch).await.unwrap();
    let second = results.pop().unwrap().unwrap();
    let good = results.pop().unwrap().unwrap();
    for (result, (_, field, message)) in results.into_iter().zip(&bad) {
        assert_invalid(result.unwrap_err(), field, message);
    }
    assert_eq!(good.payload, json!("ctrl \u{1}\u{1f}"));

    assert_invalid(
        client
            .submit("t\u{0}", &1, SubmitOptions::default())
            .await
            .unwrap_err(),
        "task_name",
        NUL,
    );
    assert_invalid(
        client
            .submit("t", &json!({"k\u{0}": 1}), SubmitOptions::default())
            .await
            .unwrap_err(),
        "payload",
        "must not contain the NUL character (\\u0000); found at /k\u{0}",
    );
    assert_invalid(
        client.cancel(good.id, Some("why\u{0}")).await.unwrap_err(),
        "reason",
        NUL,
    );
    assert_invalid(
        b.request_cancel(NS, good.id, Some("\u{0}"))
            .await
            .unwrap_err(),
        "reason",
        NUL,
    );
    assert!(b.get("n\u{0}", good.id).await.unwrap().is_none());
    assert!(
        b.request_cancel("n\u{0}", good.id, None)
            .await
            .unwrap()
            .is_none()
    );
    assert_invalid(
        b.list(&query(Some("t\u{0}"), None, 10)).await.unwrap_err(),
        "task_name",
        NUL,
    );
    assert_invalid(
        client
            .list(Some("t\u{0}"), None, 10, None)
            .await
            .unwrap_err(),
        "task_name",
        NUL,
    );
    let page = b.list(&query(None, None, 50)).await.unwrap();
    let mut ids: Vec<Uuid> = page.items.iter().map(|e| e.id).collect();
    ids.sort();
    let mut expected = vec![good.id, second.id];
    expected.sort();
    assert_eq!(ids, expected, "only the valid submissions were stored");
    assert!(
        page.items
            .iter()
            .all(|e| e.status == ExecutionStatus::Queued),
        "no cancel was written"
    );
}

/// `expires_at` may be any instant in years 1..=9999 in UTC, whatever its offset: the edges are
/// stored, read back and listed on every backend (and hash alike on a repeated key). Beyond them
/// it is an invalid argument, also for a request built field by field, never a panic.
pub async fn expires_at_at_the_edges_of_years_1_to_9999_round_trips<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let first = datetime!(0001-01-01 23:59:00 +23:59);
    let last = datetime!(9999-12-31 00:00:00 -23:59:59);
    let mut ids = Vec::new();
    for at in [first, last] {
        let options = SubmitOptions::default()
            .expires_at(at)
            .idempotency_key(format!("{at}"));
        let e = b
            .submit(request("t", json!(1), options.clone()))
            .await
            .unwrap();
        assert_eq!(e.expires_at, Some(at));
        assert_eq!(b.get(NS, e.id).await.unwrap().unwrap().expires_at, Some(at));
        let again = b.submit(request("t", json!(1), options)).await.unwrap();
        assert_eq!(
            again.id, e.id,
            "the same key and submission is the same execution"
        );
        ids.push(e.id);
    }
    for bad in [
        datetime!(9999-12-31 23:59:59 -23:59),
        datetime!(0000-01-01 00:00:00 +23:59),
    ] {
        let mut built = built("t", json!(1), None, Map::new());
        built.expires_at = Some(bad);
        assert_invalid(
            b.submit(built.clone()).await.unwrap_err(),
            "expires_at",
            "must be between",
        );
        let results = b.submit_many(vec![built.clone(), built]).await.unwrap();
        for result in results {
            assert_invalid(result.unwrap_err(), "expires_at", "must be between");
        }
    }
    let page = b.list(&query(None, None, 10)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(ids.iter().all(|id| page.items.iter().any(|e| e.id == *id)));
}

/// Payload and metadata may be nested at most `MAX_STORED_DEPTH` (31) levels as stored, after tag
/// encoding, so every backend can store and read them back (MariaDB before 12.1 refuses 32):
/// the deepest allowed values round-trip and list; one level more is an invalid argument, for
/// single and batched submits.
pub async fn submit_rejects_values_nested_deeper_than_the_stored_depth_limit<F: BackendFactory>(
    f: &F,
) {
    let (b, _) = backend(f).await;
    let over = format!(
        "is nested {} levels deep as stored, more than {MAX_STORED_DEPTH}",
        MAX_STORED_DEPTH + 1
    );
    let mut meta = Map::new();
    meta.insert("m".into(), nested(MAX_STORED_DEPTH - 1));
    let deepest = b
        .submit(request(
            "t",
            nested(MAX_STORED_DEPTH),
            SubmitOptions::default().metadata(meta),
        ))
        .await
        .unwrap();
    let read = b.get(NS, deepest.id).await.unwrap().unwrap();
    assert_eq!(
        (&read.payload, &read.metadata["m"]),
        (&nested(MAX_STORED_DEPTH), &nested(MAX_STORED_DEPTH - 1))
    );

    assert_invalid(
        b.submit(request(
            "t",
            nested(MAX_STORED_DEPTH + 1),
            SubmitOptions::default(),
        ))
        .await
        .unwrap_err(),
        "payload",
        &over,
    );
    let mut meta = Map::new();
    meta.insert("m".into(), nested(MAX_STORED_DEPTH));
    assert_invalid(
        b.submit(request(
            "t",
            json!(1),
            SubmitOptions::default().metadata(meta),
        ))
        .await
        .unwrap_err(),
        "metadata",
        &over,
    );
    // Each object with a "$onestep" key is stored as 4 levels: 8 of them are 32, although the
    // value is only 8 deep.
    let escaped = (0..8).fold(json!(1), |inner, _| {
        Value::Object(Map::from_iter([("$onestep".to_string(), inner)]))
    });
    assert_invalid(
        b.submit(request("t", escaped, SubmitOptions::default()))
            .await
            .unwrap_err(),
        "payload",
        "is nested 32 levels deep as stored",
    );
    let mut results = b
        .submit_many(vec![
            request("t", nested(MAX_STORED_DEPTH + 1), SubmitOptions::default()),
            request("t", nested(MAX_STORED_DEPTH), SubmitOptions::default()),
        ])
        .await
        .unwrap();
    let batched = results.pop().unwrap().unwrap();
    assert_invalid(results.pop().unwrap().unwrap_err(), "payload", &over);
    let page = b.list(&query(None, None, 50)).await.unwrap();
    let mut ids: Vec<Uuid> = page.items.iter().map(|e| e.id).collect();
    ids.sort();
    let mut expected = vec![deepest.id, batched.id];
    expected.sort();
    assert_eq!(ids, expected);
}

/// Top-level numbers survive the store exactly: floats stay floats, big integers stay integers
/// (beyond 64 bits too), and a replay is recognised however the store spells a number back
/// (PostgreSQL's jsonb writes the float `1e-05` as `0.00001`).
pub async fn top_level_numbers_round_trip_exactly<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    for payload in [
        json!(1.0),
        json!(12345678901234567890_u64),
        json!(-0.5),
        json!(7),
        json!(1e-5),
        json!(100000000000000000000_u128),
    ] {
        let e = b
            .submit(request("n", payload.clone(), SubmitOptions::default()))
            .await
            .unwrap();
        assert_eq!(b.get(NS, e.id).await.unwrap().unwrap().payload, payload);
        let lease = claim_one(&b, "n", 30.0).await;
        let done = complete(
            &b,
            &lease,
            ExecutionCompletion::Succeeded {
                result: payload.clone(),
            },
        )
        .await
        .unwrap();
        assert_eq!(done.result, Some(payload.clone()));
        let replay = complete(
            &b,
            &lease,
            ExecutionCompletion::Succeeded {
                result: payload.clone(),
            },
        )
        .await;
        assert_eq!(
            replay.unwrap().result,
            Some(payload.clone()),
            "a replay of {payload} is recognised"
        );
        assert_eq!(
            b.get(NS, e.id).await.unwrap().unwrap().result,
            Some(payload)
        );
    }
}

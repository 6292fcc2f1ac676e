//! Callers side by side: submits that run at once (which a backend may write together).

use std::collections::{BTreeMap, HashSet};

use onestep_core::execution::{ExecutionBackend, ExecutionError, SubmitOptions};
use serde_json::{Map, json};
use tokio::task::JoinSet;

use super::*;

/// Submits side by side are each answered as if they were alone, whether or not the backend
/// writes them together (SQLite groups the submits that wait for its one connection): new work
/// gets an execution of its own; a key repeated with the same submission gets the one
/// execution; a key repeated with different submissions stores one of them and rejects the
/// others as conflicts; an invalid request fails on its own and costs the others nothing.
pub async fn submits_side_by_side_are_each_answered_as_if_alone<F: BackendFactory>(f: &F) {
    let (b, _) = backend(f).await;
    let mut calls = JoinSet::new();
    for i in 0..48_u32 {
        let request = match i % 4 {
            0 => request("t", json!({"fresh": i}), SubmitOptions::default()),
            1 => request(
                "t",
                json!({"same": true}),
                SubmitOptions::default().idempotency_key("same"),
            ),
            2 => request(
                "t",
                json!({"contested": i}),
                SubmitOptions::default().idempotency_key("contested"),
            ),
            _ => built("t", json!({"bad": "x\u{0}"}), None, Map::new()),
        };
        let b = b.clone();
        calls.spawn(async move { (i, b.submit(request).await) });
    }
    let mut answers = BTreeMap::new();
    while let Some(joined) = calls.join_next().await {
        let (i, answer) = joined.unwrap();
        answers.insert(i, answer);
    }

    let mut fresh_ids = HashSet::new();
    let mut same_ids = HashSet::new();
    let mut contested_winners = Vec::new();
    for (i, answer) in answers {
        match (i % 4, answer) {
            (0, Ok(e)) => {
                assert_eq!(
                    e.payload,
                    json!({"fresh": i}),
                    "submit {i} got another's answer"
                );
                assert!(
                    fresh_ids.insert(e.id),
                    "two new submits share execution {}",
                    e.id
                );
            }
            (1, Ok(e)) => {
                assert_eq!(e.payload, json!({"same": true}));
                same_ids.insert(e.id);
            }
            (2, Ok(e)) => {
                assert_eq!(
                    e.payload,
                    json!({"contested": i}),
                    "submit {i} got another's answer"
                );
                contested_winners.push(e.id);
            }
            (2, Err(ExecutionError::Conflict(m))) => assert_eq!(
                m,
                "idempotency key was already used with a different submission"
            ),
            (3, Err(err)) => assert_invalid(
                err,
                "payload",
                "must not contain the NUL character (\\u0000); found at /bad",
            ),
            (kind, answer) => panic!("submit {i} (kind {kind}) answered {answer:?}"),
        }
    }
    assert_eq!(fresh_ids.len(), 12, "every new submit is stored on its own");
    assert_eq!(
        same_ids.len(),
        1,
        "a repeated key answers with one execution"
    );
    assert_eq!(
        contested_winners.len(),
        1,
        "exactly one of the different submissions of one key is stored"
    );

    // What is stored is exactly what was answered.
    let page = b.list(&query(None, None, 100)).await.unwrap();
    let stored: HashSet<_> = page.items.iter().map(|e| e.id).collect();
    let answered: HashSet<_> = fresh_ids
        .iter()
        .chain(&same_ids)
        .chain(&contested_winners)
        .copied()
        .collect();
    assert_eq!(stored, answered);
}

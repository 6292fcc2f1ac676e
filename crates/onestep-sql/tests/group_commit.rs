//! Group commit of submits (SQLite): the submits that wait while another is being written go in
//! together, in one transaction; a leader that goes away leaves no submit waiting; a submit given
//! up before its group is written is not written; a failed group answers each member as if alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use onestep_core::execution::{
    Execution, ExecutionBackend, ExecutionError, ExecutionQuery, ExecutionRequest, ExecutionResult,
    SubmitOptions,
};
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde_json::json;

fn request(i: usize) -> ExecutionRequest {
    ExecutionRequest::new("group", "t", json!({"i": i}), SubmitOptions::default()).unwrap()
}

fn backend(dir: &tempfile::TempDir) -> SqliteExecutionBackend {
    let dsn = format!("sqlite://{}/group.db?mode=rwc", dir.path().display());
    SqliteExecutionBackend::new(&dsn, support::live::fresh_options()).unwrap()
}

/// A submit of `request(i)` to run as a task of its own.
fn submitting(
    b: &SqliteExecutionBackend,
    i: usize,
) -> impl Future<Output = ExecutionResult<Execution>> + Send + 'static {
    let b = b.clone();
    async move { b.submit(request(i)).await }
}

async fn stored(b: &SqliteExecutionBackend) -> Vec<serde_json::Value> {
    let q = ExecutionQuery {
        namespace: "group".into(),
        task_name: None,
        status: None,
        limit: 200,
        cursor: None,
    };
    let page = b.list(&q).await.unwrap();
    page.items.into_iter().map(|e| e.payload).collect()
}

/// Submits made at once share transactions: a transaction reads the time once, so rows written
/// together carry one `created_at`, where one transaction each would give every row its own.
#[tokio::test]
async fn submits_made_at_once_are_written_together() {
    let dir = support::sqlite_dir();
    let b = backend(&dir);
    b.submit(request(0)).await.unwrap(); // creates the tables

    let mut calls = tokio::task::JoinSet::new();
    for i in 1..=60 {
        calls.spawn(submitting(&b, i));
    }
    let mut times = HashSet::new();
    let mut ids = HashSet::new();
    while let Some(e) = calls.join_next().await {
        let e = e.unwrap().unwrap();
        times.insert(e.created_at);
        ids.insert(e.id);
    }
    assert_eq!(ids.len(), 60);
    assert!(
        times.len() <= 10,
        "60 submits made at once were written in {} transactions",
        times.len()
    );
    assert_eq!(stored(&b).await.len(), 61);
}

/// A leader that stops waiting mid-write (its caller gave up) hands the submits waiting behind
/// it back to their callers, who write them themselves: none is left waiting.
#[tokio::test]
async fn a_leader_that_stops_waiting_leaves_no_submit_waiting() {
    let dir = support::sqlite_dir();
    let b = backend(&dir);
    b.submit(request(0)).await.unwrap(); // creates the tables

    let leader = tokio::spawn(submitting(&b, 1));
    let mut waiting = tokio::task::JoinSet::new();
    for i in 2..6 {
        waiting.spawn(submitting(&b, i));
    }
    // One turn for the spawned submits: the leader starts its write, the others queue.
    tokio::task::yield_now().await;
    leader.abort();
    let answered = tokio::time::timeout(Duration::from_secs(20), waiting.join_all())
        .await
        .expect("submits waiting behind a leader that stopped were never answered");
    assert_eq!(answered.len(), 4);
    for answer in answered {
        answer.unwrap();
    }
    let stored = stored(&b).await;
    for i in 2..6 {
        assert!(
            stored.contains(&json!({"i": i})),
            "submit {i} is not stored"
        );
    }
}

/// A submit whose caller stopped waiting before its group was taken is not written, as a submit
/// dropped before it reached the database never was.
#[tokio::test]
async fn a_submit_given_up_before_its_group_is_written_is_not_written() {
    let dir = support::sqlite_dir();
    let b = backend(&dir);
    b.submit(request(0)).await.unwrap(); // creates the tables

    let leader = tokio::spawn(submitting(&b, 1));
    let given_up = tokio::spawn(submitting(&b, 2));
    let kept = tokio::spawn(submitting(&b, 3));
    // One turn for the spawned submits: the first leads, the others queue; then one gives up.
    tokio::task::yield_now().await;
    given_up.abort();
    leader.await.unwrap().unwrap();
    kept.await.unwrap().unwrap();
    let mut payloads = stored(&b).await;
    payloads.sort_by_key(|p| p["i"].as_u64());
    assert_eq!(
        payloads,
        vec![json!({"i": 0}), json!({"i": 1}), json!({"i": 3})]
    );
}

/// When a group fails as a whole (here its table is gone), it was rolled back, and each member
/// is written alone: an invalid one gets the error it would get alone, not a database error it
/// could retry, and a valid one the database's.
#[tokio::test]
async fn an_invalid_submit_in_a_failed_group_gets_its_own_error() {
    let dir = support::sqlite_dir();
    let dsn = format!("sqlite://{}/group.db?mode=rwc", dir.path().display());
    let options = support::live::fresh_options();
    let (executions, attempts) = (options.table.clone(), options.attempts_table.clone());
    let b = SqliteExecutionBackend::new(&dsn, options).unwrap();
    b.submit(request(0)).await.unwrap(); // creates the tables
    let other = sqlx::SqlitePool::connect(&dsn).await.unwrap();
    for table in [attempts, executions] {
        sqlx::query(&format!("DROP TABLE \"{table}\""))
            .execute(&other)
            .await
            .unwrap();
    }
    other.close().await;

    let mut nul = request(2);
    nul.payload = json!({"bad": "x\u{0}"});
    let mut calls = tokio::task::JoinSet::new();
    for (i, r) in [request(1), nul, request(3)].into_iter().enumerate() {
        let b = b.clone();
        calls.spawn(async move { (i, b.submit(r).await) });
    }
    let mut answers = calls.join_all().await;
    answers.sort_by_key(|(i, _)| *i);
    for (i, answer) in answers {
        match (i, answer) {
            (1, Err(ExecutionError::InvalidArgument { field, .. })) => assert_eq!(field, "payload"),
            (0 | 2, Err(ExecutionError::Connector(c))) => {
                assert!(c.to_string().contains("no such table"), "{c}")
            }
            (i, other) => panic!("submit {i} answered {other:?}"),
        }
    }
}

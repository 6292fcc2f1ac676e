//! Group commit of submits: the submits that wait while another is being written go in
//! together, in one transaction; a submit never waits for a writer on another runtime; a leader
//! or writer that goes away leaves no submit waiting; an invalid submit keeps its own error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionError, ExecutionQuery, ExecutionRequest, SubmitOptions,
};
use onestep_sql::postgres::PostgresExecutionBackend;
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde_json::json;

fn request(i: usize) -> ExecutionRequest {
    ExecutionRequest::new("group", "t", json!({"i": i}), SubmitOptions::default()).unwrap()
}

fn backend(dir: &tempfile::TempDir) -> SqliteExecutionBackend {
    let dsn = format!("sqlite://{}/group.db?mode=rwc", dir.path().display());
    SqliteExecutionBackend::new(&dsn, support::live::fresh_options()).unwrap()
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
        let b = b.clone();
        calls.spawn(async move { b.submit(request(i)).await.unwrap() });
    }
    let mut times = HashSet::new();
    let mut ids = HashSet::new();
    while let Some(e) = calls.join_next().await {
        let e = e.unwrap();
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

    let leader = {
        let b = b.clone();
        tokio::spawn(async move { b.submit(request(1)).await })
    };
    let mut waiting = tokio::task::JoinSet::new();
    for i in 2..6 {
        let b = b.clone();
        waiting.spawn(async move { b.submit(request(i)).await.unwrap().payload });
    }
    // One turn for the spawned submits: the leader starts its write, the others queue.
    tokio::task::yield_now().await;
    leader.abort();
    let answered = tokio::time::timeout(Duration::from_secs(20), waiting.join_all())
        .await
        .expect("submits waiting behind a leader that stopped were never answered");
    assert_eq!(answered.len(), 4);
    let stored = stored(&b).await;
    for i in 2..6 {
        assert!(
            stored.contains(&json!({"i": i})),
            "submit {i} is not stored"
        );
    }
}

/// A writer belongs to the runtime of the submit that leads it, and only submits on that runtime
/// wait for it. Here a submit leads in a runtime that then never runs again: a submit from
/// another runtime is written alone instead of waiting. Once the stalled leader is dropped,
/// nothing is left behind: submits made at once are grouped again.
#[test]
fn a_submit_never_waits_for_a_writer_on_another_runtime() {
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = main.block_on(async {
        let b =
            PostgresExecutionBackend::new(&support::postgres_url(), support::live::fresh_options())
                .unwrap();
        b.submit(request(0)).await.unwrap(); // creates the tables, opens the pool
        b
    });

    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Polled once in the idle runtime's context, a submit leads, sends its insert and waits for
    // a reply that nothing will ever poll for. (Should one be answered within that one poll, it
    // led nothing that stays: the next tries again.)
    let mut stalled = None;
    let mut answered_at_once = Vec::new();
    for i in 100..105 {
        let _entered = idle.enter();
        let mut submit = b.submit(request(i));
        match submit
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        {
            std::task::Poll::Pending => {
                stalled = Some(submit);
                break;
            }
            std::task::Poll::Ready(answer) => answered_at_once.push(answer),
        }
    }
    assert!(
        stalled.is_some(),
        "every submit was answered within one poll: {answered_at_once:?}"
    );

    main.block_on(async {
        let alone = tokio::time::timeout(Duration::from_secs(20), b.submit(request(2)))
            .await
            .expect("a submit waited for the writer of a runtime that does not run")
            .unwrap();
        assert_eq!(alone.payload, json!({"i": 2}));
    });

    {
        // Dropped where it ran: its pooled connection goes back through that runtime.
        let _entered = idle.enter();
        stalled.take();
    }
    drop(idle);
    main.block_on(async {
        let mut calls = tokio::task::JoinSet::new();
        for i in 3..23 {
            let b = b.clone();
            calls.spawn(async move { b.submit(request(i)).await.unwrap() });
        }
        let times = tokio::time::timeout(Duration::from_secs(20), async {
            let mut times = HashSet::new();
            while let Some(e) = calls.join_next().await {
                times.insert(e.unwrap().created_at);
            }
            times
        })
        .await
        .expect("submits waited for a leader that was dropped");
        // The first leads alone; the other 19 go in together.
        assert!(
            times.len() <= 2,
            "20 submits made at once after the stalled leader went took {} transactions",
            times.len()
        );
    });
}

/// When a group fails as a whole (here its table is gone), each valid member gets the group's
/// error, and an invalid one the error it would get alone, not a database error it could retry.
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

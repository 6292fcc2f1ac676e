#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `onestep run` of a YAML worker over `rabbitmq_queue` (`ONESTEP_RABBITMQ_URL`, which `cargo
//! xtask test` provides, else the local default): messages published in the reference's wire
//! format are handled and emitted through a topic exchange to a second queue, and acked in the
//! first; SIGTERM stops the worker, which hands back nothing it did not finish.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

fn url() -> String {
    std::env::var("ONESTEP_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// The ready count of `queue`, or `None` while it is not declared. Each look opens its own
/// channel: a passive declare of a missing queue closes the channel it was sent on.
async fn ready(conn: &Connection, queue: &str) -> Option<u32> {
    let probe = conn.create_channel().await.unwrap();
    let count = probe
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .map(|q| q.message_count())
        .ok();
    let _ = probe.close(200, "".into()).await;
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_worker_moves_messages_between_queues() {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let (jobs, done, exchange) = (
        format!("cli-jobs-{suffix}"),
        format!("cli-done-{suffix}"),
        format!("cli-events-{suffix}"),
    );
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("worker.yaml");
    std::fs::write(
        &yaml,
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: mover}}\nresources:\n  \
             mq: {{type: rabbitmq, url: \"{}\"}}\n  \
             jobs: {{type: rabbitmq_queue, connector: mq, queue: {jobs}, durable: false, \
             poll_interval_s: 0.1, arguments: {{x-expires: 60000}}}}\n  \
             done: {{type: rabbitmq_queue, connector: mq, queue: {done}, exchange: {exchange}, \
             exchange_type: topic, routing_key: done.moved, durable: false, \
             arguments: {{x-expires: 60000}}}}\n\
             tasks:\n  - {{name: move, source: jobs, handler: onestep:echo, emit: [done], \
             concurrency: 4}}\n",
            url()
        ),
    )
    .unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["check", "--strict", yaml.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{check:?}");
    let worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", yaml.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let conn = Connection::connect(&url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = conn.create_channel().await.unwrap();
    // The worker declares both queues (and binds the second to the exchange) on start; publish
    // only then, or an emitted message could reach the exchange before its queue is bound.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline
        && (ready(&conn, &jobs).await.is_none() || ready(&conn, &done).await.is_none())
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 1..=3 {
        let body = format!(r#"{{"body": {{"id": {i}}}, "meta": {{}}, "attempts": 0}}"#);
        channel
            .basic_publish(
                "".into(),
                jobs.as_str().into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut moved = 0;
    while moved < 3 && Instant::now() < deadline {
        moved = ready(&conn, &done).await.unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = worker.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert_eq!(moved, 3, "{log}");
    let first = channel
        .basic_get(done.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a moved message");
    let first: serde_json::Value = serde_json::from_slice(&first.delivery.data).unwrap();
    assert_eq!(
        first["body"]["id"].as_i64().map(|i| (1..=3).contains(&i)),
        Some(true)
    );
    assert_eq!(
        ready(&conn, &jobs).await,
        Some(0),
        "every job was acked: {log}"
    );
    let _ = conn.close(200, "".into()).await;
}

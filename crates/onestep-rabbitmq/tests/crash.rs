#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! A worker process (`examples/queue_worker.rs`, prefetch 20) is SIGKILLed a third of the way
//! through 300 messages; the broker requeues what it held, and a second worker finishes. The
//! handler's effect file shows that no message was lost and that at most the killed worker's
//! prefetch ran twice; nothing is left in the queue.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

const MESSAGES: usize = 300;
const PREFETCH: usize = 20;

fn url() -> String {
    std::env::var("ONESTEP_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn worker_binary() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "onestep-rabbitmq",
            "--example",
            "queue_worker",
        ])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the queue_worker example failed");
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples/queue_worker")
}

fn start(binary: &Path, queue: &str, effects: &Path) -> Child {
    let mut child = Command::new(binary)
        .args(["--url", &url(), "--queue", queue, "--effects"])
        .arg(effects)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the worker did not start");
    child
}

fn effects(path: &Path) -> Vec<i64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn ready(channel: &lapin::Channel, queue: &str) -> u32 {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_messages_come_back_and_nothing_is_lost() {
    let binary = worker_binary();
    let queue = format!("onestep-test.crash.{}", uuid::Uuid::new_v4().simple());
    let dir = tempfile_dir();
    let effects_file = dir.join("effects");
    let conn = Connection::connect(&url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = conn.create_channel().await.unwrap();
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-expires".into(),
        lapin::types::AMQPValue::ShortUInt(60_000),
    );
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .unwrap();
    for i in 1..=MESSAGES {
        let body = format!(r#"{{"body": {{"id": {i}}}, "meta": {{}}, "attempts": 0}}"#);
        channel
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap();
    }
    let mut first = start(&binary, &queue, &effects_file);
    wait_for("a third of the messages", || {
        effects(&effects_file).len() >= MESSAGES / 3
    });
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    let mut second = start(&binary, &queue, &effects_file);
    wait_for("every message", || {
        effects(&effects_file)
            .into_iter()
            .collect::<HashSet<_>>()
            .len()
            == MESSAGES
    });
    // Acks are sent after the effect: give the last ones a moment, then the queue is empty.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready(&channel, &queue).await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    second.kill().unwrap();
    second.wait().unwrap();
    let all = effects(&effects_file);
    let unique: HashSet<i64> = all.iter().copied().collect();
    let duplicated = all.len() - unique.len();
    eprintln!(
        "rabbitmq queue: {MESSAGES} messages, {} effects, {duplicated} duplicated",
        all.len()
    );
    assert_eq!(unique.len(), MESSAGES, "nothing lost");
    assert!(
        duplicated <= PREFETCH,
        "only messages the killed worker held may run twice: {duplicated} > {PREFETCH}"
    );
    // The second worker was killed too; its unacked messages (if any) were requeued, and every
    // one of them had already run.
    let left = ready(&channel, &queue).await as usize;
    assert!(
        left <= PREFETCH,
        "{left} messages left after everything ran"
    );
    let _ = conn.close(200, "".into()).await;
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "onestep-rabbitmq-crash-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

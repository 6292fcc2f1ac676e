#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! A worker process (`examples/sqs_worker.rs`: ten per receive, 3 s visibility, acks deleted
//! in groups of ten or every 0.5 s) is SIGKILLed a third of the way through 300 messages; what
//! it held becomes visible again, and a second worker finishes. The handler's effect file shows
//! that no message was lost and that only what the killed worker held (received, or acked but
//! not yet deleted) ran twice. The second worker is stopped with SIGTERM, exits 0, and has
//! deleted everything it acked: the queue is empty.

mod support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onestep_sqs::aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use support::{client, counts, create_queue, endpoint, name};

const MESSAGES: usize = 300;
/// What the killed worker can hold: two receives of ten, and the acks of two delete groups.
const HELD: usize = 40;

fn worker_binary() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "onestep-sqs", "--example", "sqs_worker"])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the sqs_worker example failed");
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples/sqs_worker")
}

fn start(binary: &Path, queue_url: &str, effects: &Path) -> Child {
    let mut child = Command::new(binary)
        .args([
            "--endpoint",
            &endpoint(),
            "--queue-url",
            queue_url,
            "--effects",
        ])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_messages_come_back_and_nothing_is_lost() {
    let binary = worker_binary();
    let url = create_queue(&name("crash"), 3).await;
    let dir = tempfile_dir();
    let effects_file = dir.join("effects");
    let sqs = client().await;
    for chunk in (1..=MESSAGES).collect::<Vec<_>>().chunks(10) {
        let entries = chunk
            .iter()
            .map(|i| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(format!(
                        r#"{{"body": {{"id": {i}}}, "meta": {{}}, "attempts": 0}}"#
                    ))
                    .build()
                    .unwrap()
            })
            .collect();
        let sent = sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(sent.failed().is_empty());
    }
    let mut first = start(&binary, &url, &effects_file);
    wait_for("a third of the messages", || {
        effects(&effects_file).len() >= MESSAGES / 3
    });
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    let mut second = start(&binary, &url, &effects_file);
    wait_for("every message", || {
        effects(&effects_file)
            .into_iter()
            .collect::<HashSet<_>>()
            .len()
            == MESSAGES
    });
    let stopped = Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let status = second.wait().unwrap();
    assert!(status.success(), "SIGTERM: a clean stop, got {status}");
    let all = effects(&effects_file);
    let unique: HashSet<i64> = all.iter().copied().collect();
    let duplicated = all.len() - unique.len();
    eprintln!(
        "sqs queue: {MESSAGES} messages, {} effects, {duplicated} duplicated",
        all.len()
    );
    assert_eq!(unique.len(), MESSAGES, "nothing lost");
    assert!(
        duplicated <= HELD,
        "only messages the killed worker held may run twice: {duplicated} > {HELD}"
    );
    // The second worker deleted every message it acked before it exited.
    assert_eq!(counts(&url).await, (0, 0), "the queue is empty");
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "onestep-sqs-crash-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

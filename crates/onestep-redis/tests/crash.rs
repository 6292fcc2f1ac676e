#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! A worker process (`examples/stream_worker.rs`) is SIGKILLed a third of the way through 300
//! entries; a second worker, under another consumer name, takes the dead one's pending entries
//! over after the idle time and finishes. The handler's effect list shows that no entry was lost
//! and that only entries the killed worker held ran twice; nothing stays pending.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ENTRIES: i64 = 300;

fn url() -> String {
    std::env::var("ONESTEP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn worker_binary() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "onestep-redis", "--example", "stream_worker"])
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building the stream_worker example failed"
    );
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples/stream_worker")
}

fn start(binary: &PathBuf, stream: &str, consumer: &str) -> Child {
    let mut child = Command::new(binary)
        .args(["--url", &url(), "--stream", stream, "--consumer", consumer])
        .args(["--reclaim-idle-ms", "1000"])
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

fn effects(conn: &mut redis::Connection, stream: &str) -> Vec<i64> {
    redis::cmd("LRANGE")
        .arg(format!("{stream}:effects"))
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_consumer_s_entries_are_taken_over_and_nothing_is_lost() {
    let binary = worker_binary();
    let stream = format!("onestep-test:crash:{}", uuid::Uuid::new_v4().simple());
    let client = redis::Client::open(url().as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    for i in 1..=ENTRIES {
        let body = format!(r#"{{"body": {{"id": {i}}}, "meta": {{}}, "attempts": 0}}"#);
        let _: String = redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg("body")
            .arg(body)
            .query(&mut conn)
            .unwrap();
    }
    let mut first = start(&binary, &stream, "first");
    wait_for("a third of the entries", || {
        effects(&mut conn, &stream).len() as i64 >= ENTRIES / 3
    });
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let held: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(&stream)
        .arg("crash")
        .query(&mut conn)
        .unwrap();
    let held: i64 = redis::from_redis_value(held[0].clone()).unwrap();

    let mut second = start(&binary, &stream, "second");
    wait_for("every entry", || {
        effects(&mut conn, &stream)
            .into_iter()
            .collect::<HashSet<_>>()
            .len() as i64
            == ENTRIES
    });
    wait_for("nothing pending", || {
        let p: Vec<redis::Value> = redis::cmd("XPENDING")
            .arg(&stream)
            .arg("crash")
            .query(&mut conn)
            .unwrap();
        redis::from_redis_value::<i64>(p[0].clone()).unwrap() == 0
    });
    second.kill().unwrap();
    second.wait().unwrap();
    let all = effects(&mut conn, &stream);
    let unique: HashSet<i64> = all.iter().copied().collect();
    let duplicated = all.len() as i64 - unique.len() as i64;
    eprintln!(
        "redis stream: {ENTRIES} entries, {} effects, {duplicated} duplicated, {held} pending at \
         the kill",
        all.len()
    );
    assert_eq!(unique.len() as i64, ENTRIES, "nothing lost");
    assert!(
        duplicated <= held,
        "only entries the killed worker held may run twice: {duplicated} > {held}"
    );
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .arg(format!("{stream}:effects"))
        .query(&mut conn)
        .unwrap();
}

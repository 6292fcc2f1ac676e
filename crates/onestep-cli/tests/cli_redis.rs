#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `onestep run` of a YAML worker over `redis_stream` (`ONESTEP_REDIS_URL`, which `cargo xtask
//! test` provides, else the local default): entries appended in the reference's wire format are
//! handled and emitted to a second stream, acked in the first; SIGTERM stops the worker.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn url() -> String {
    std::env::var("ONESTEP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

#[test]
fn a_yaml_worker_moves_entries_between_streams() {
    let suffix = format!("{:x}", std::process::id() ^ 0x5eed);
    let (jobs, done) = (format!("cli-jobs-{suffix}"), format!("cli-done-{suffix}"));
    let client = redis::Client::open(url().as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&jobs)
        .arg(&done)
        .query(&mut conn)
        .unwrap();
    for i in 1..=3 {
        let body = format!(r#"{{"body": {{"id": {i}}}, "meta": {{}}, "attempts": 0}}"#);
        let _: String = redis::cmd("XADD")
            .arg(&jobs)
            .arg("*")
            .arg("body")
            .arg(body)
            .query(&mut conn)
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("worker.yaml");
    std::fs::write(
        &yaml,
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: mover}}\nresources:\n  \
             cache: {{type: redis, url: \"{}\"}}\n  \
             jobs: {{type: redis_stream, connector: cache, stream: {jobs}, start_id: \"0\", \
             poll_interval_s: 0.1}}\n  \
             done: {{type: redis_stream, connector: cache, stream: {done}}}\n\
             tasks:\n  - {{name: move, source: jobs, handler: onestep:echo, emit: [done]}}\n",
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
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut moved: i64 = 0;
    while moved < 3 && Instant::now() < deadline {
        moved = redis::cmd("XLEN").arg(&done).query(&mut conn).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = worker.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert_eq!(moved, 3, "{log}");
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&done)
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let first: serde_json::Value = serde_json::from_str(&entries[0].1[0].1).unwrap();
    assert_eq!(first["body"], serde_json::json!({"id": 1}));
    // Every entry of the first stream was acked.
    let pending: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(&jobs)
        .arg("onestep")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        redis::from_redis_value::<i64>(pending[0].clone()).unwrap(),
        0
    );
    let _: () = redis::cmd("DEL")
        .arg(&jobs)
        .arg(&done)
        .query(&mut conn)
        .unwrap();
}

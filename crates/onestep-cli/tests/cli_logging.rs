//! `onestep run --log-format json` writes the reference's JSON lines; `--no-task-events` drops
//! the task-event lines and nothing else. Real binary, the README's SQLite example worker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sqlite-worker.yaml")
}

/// Runs the example worker with `flags` (`onestep run FILE …`, or `onestep FILE …` when
/// `flags` starts with `"bare"`), submits one report, waits for its result, stops the worker
/// with SIGTERM and returns the execution id and the worker's stdout lines.
fn one_report(flags: &[&str]) -> (String, Vec<String>) {
    let (bare, flags) = match flags.split_first() {
        Some((&"bare", rest)) => (true, rest),
        _ => (false, flags),
    };
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}", dir.path().join("log.db").display());
    let worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(if bare { &[][..] } else { &["run"][..] })
        .arg(example())
        .args(flags)
        .env("ONESTEP_SQLITE_DSN", &dsn)
        .env("ONESTEP_NAMESPACE", "logs")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_onestep"))
            .arg("executions")
            .args(args)
            .args(["--namespace", "logs"])
            .env("ONESTEP_DSN", &dsn)
            .output()
            .unwrap()
    };
    let until_ok = |args: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = cli(args);
            if o.status.success() || Instant::now() > deadline {
                return o;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let submitted = until_ok(&["submit", "report", r#"{"month": "2026-12"}"#]);
    if !submitted.status.success() {
        panic!("{}", gave_up(worker, "submit", &submitted));
    }
    let printed = String::from_utf8_lossy(&submitted.stdout).to_string();
    let id = printed.split_whitespace().next().unwrap().to_string();
    let result = until_ok(&["result", &id]);
    if !result.status.success() {
        panic!("{}", gave_up(worker, "result", &result));
    }
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = worker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (id, lines)
}

/// Stops `worker` and says why the test gave up on it: the last `onestep executions {what}`
/// call's output, and whether the worker was still running and what it printed.
fn gave_up(mut worker: Child, what: &str, last: &Output) -> String {
    let running = worker.try_wait().unwrap().is_none();
    worker.kill().unwrap();
    let out = worker.wait_with_output().unwrap();
    format!(
        "`onestep executions {what}` did not succeed within 30 s: {last:?}\n\
         the worker ({}): stdout:\n{}\nstderr:\n{}",
        if running {
            "still running, killed".to_string()
        } else {
            format!("had exited: {}", out.status)
        },
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn json_lines_have_the_reference_shape_and_task_events_their_promoted_fields() {
    let (id, lines) = one_report(&["--log-format", "json"]);
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for record in &records {
        let keys: Vec<&str> = record
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .take(4)
            .collect();
        assert_eq!(keys, ["ts", "level", "logger", "message"], "{record}");
        let level = record["level"].as_str().unwrap();
        assert!(
            ["DEBUG", "INFO", "WARNING", "ERROR"].contains(&level),
            "{record}"
        );
    }
    let succeeded = records
        .iter()
        .find(|r| r["event_kind"] == "succeeded")
        .unwrap_or_else(|| panic!("a succeeded event among {lines:#?}"));
    assert_eq!(succeeded["logger"], "onestep.events");
    assert_eq!(succeeded["level"], "INFO");
    assert_eq!(succeeded["message"], "task succeeded");
    assert_eq!(succeeded["app_name"], "sqlite-worker");
    assert_eq!(succeeded["task_name"], "report");
    assert_eq!(succeeded["source_name"], "sqlite.execution:logs");
    assert_eq!(succeeded["attempts"], 0);
    assert!(succeeded["duration_s"].as_f64().unwrap() > 0.0);
    assert_eq!(succeeded["ts"], succeeded["emitted_at"]);
    let ts = succeeded["ts"].as_str().unwrap();
    assert!(ts.ends_with("+00:00") && ts.len() == 32, "isoformat: {ts}");
    assert!(succeeded["failure_kind"].is_null());
    assert_eq!(succeeded["task_event_meta"]["onestep.execution"]["id"], id);
    assert_eq!(succeeded["extra"]["execution_id"], id);
    assert!(
        records.iter().any(|r| r["logger"] != "onestep.events"),
        "the worker's own lines are JSON too: {lines:#?}"
    );
}

#[test]
fn no_task_events_drops_the_event_lines_only() {
    let (_, lines) = one_report(&["--no-task-events"]);
    assert!(
        !lines.iter().any(|l| l.contains("task succeeded")),
        "{lines:#?}"
    );
    assert!(
        !lines.is_empty(),
        "the worker still logs its start and stop"
    );
    let (_, lines) = one_report(&["--no-task-events", "--task-events"]);
    assert!(
        lines.iter().any(|l| l.contains("task succeeded")),
        "the last flag wins: {lines:#?}"
    );
}

#[test]
fn a_file_as_the_first_argument_is_run() {
    let (id, lines) = one_report(&["bare", "--log-format", "json"]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"task succeeded\"") && l.contains(&id)),
        "{lines:#?}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .arg("nowhere.yaml")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(2), "{help:?}");
    assert!(
        String::from_utf8_lossy(&help.stderr).contains("cannot read nowhere.yaml"),
        "{help:?}"
    );
}

//! Failure capture and the task diagnostics, against the Python reference: a capture this
//! runtime writes is the reference's document (the reference loads and replays it), a capture
//! the reference writes replays here, and `task run` reports what the reference reports.
//! Uses `tests/python/parity/worker.yaml` (its `reject_odd` task always fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn parity_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/parity")
}

/// `onestep ARGS` (ours, or the reference's with `reference`) in the parity directory.
fn onestep(reference: bool, out: &Path, args: &[&str]) -> Output {
    let mut command = if reference {
        onestep_testkit::reference::cli()
    } else {
        Command::new(env!("CARGO_BIN_EXE_onestep"))
    };
    command
        .args(args)
        .env("PARITY_OUT", out)
        .env("PYTHONPATH", parity_dir())
        .current_dir(parity_dir())
        .output()
        .unwrap()
}

/// Runs the worker (ours or the reference's) until a capture appears; returns its path.
fn first_capture(reference: bool, out: &Path) -> PathBuf {
    let captures = out.join("captures");
    let mut worker = if reference {
        onestep_testkit::reference::cli()
    } else {
        Command::new(env!("CARGO_BIN_EXE_onestep"))
    }
    .args(["run", "worker.yaml"])
    .env("PARITY_OUT", out)
    .env("PYTHONPATH", parity_dir())
    .current_dir(parity_dir())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let found = std::fs::read_dir(&captures).ok().and_then(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .find(|p| p.extension().is_some_and(|e| e == "json"))
        });
        if found.is_some() || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let _ = worker.wait();
    found.expect("a capture within a minute")
}

#[test]
fn our_capture_is_the_reference_document_and_both_replay_it() {
    let out = tempfile::tempdir().unwrap();
    let path = first_capture(false, out.path());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&out.path().join("captures")), 0o700);
    let text = std::fs::read_to_string(&path).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["schema"], "onestep/envelope-capture");
    assert_eq!(document["version"], 1);
    assert_eq!(document["app"], "parity");
    assert_eq!(document["task"], "reject_odd");
    assert_eq!(document["stage"], "handler");
    assert_eq!(document["terminal"], true);
    assert_eq!(
        document["failure"],
        json!({"kind": "error", "exception_type": "ValueError", "message": "odd n 1"})
    );
    assert_eq!(
        document["envelope"],
        json!({"body": {"n": 1, "payload": "<redacted>"}, "meta": {}, "attempts": 0})
    );
    assert_eq!(document["redacted_paths"], json!(["/body/payload"]));
    // Python's json.dumps(sort_keys=True, indent=2): the same bytes again.
    let python = onestep_testkit::reference::python();
    let redumped = Command::new(python)
        .args([
            "-c",
            "import json,sys; d=json.load(open(sys.argv[1])); \
             sys.stdout.write(json.dumps(d, ensure_ascii=False, sort_keys=True, indent=2))",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&redumped.stdout), text);
    let loaded = Command::new(python)
        .args([
            "-c",
            "import sys; from onestep.capture.writer import load_capture; \
             c=load_capture(sys.argv[1], expected_app='parity', expected_task='reject_odd'); \
             print(c.envelope.body)",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{loaded:?}");
    let capture = path.to_str().unwrap();
    for reference in [false, true] {
        let replay = onestep(
            reference,
            out.path(),
            &[
                "task",
                "replay",
                "worker.yaml",
                "--task",
                "reject_odd",
                "--envelope",
                capture,
                "--json",
            ],
        );
        assert_eq!(replay.status.code(), Some(1), "{replay:?}");
        let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
        assert_eq!(report["operation"], "replay");
        assert_eq!(report["completion"], "failed");
        assert_eq!(report["failure_stage"], "handler");
        assert_eq!(report["delivery_action"], "would_fail");
        assert_eq!(
            report["failure"],
            json!({"failure_kind": "error", "exception_type": "ValueError"}),
            "reference: {reference}"
        );
    }
}

#[test]
fn a_reference_capture_replays_here() {
    let out = tempfile::tempdir().unwrap();
    let path = first_capture(true, out.path());
    let replay = onestep(
        false,
        out.path(),
        &[
            "task",
            "replay",
            "worker.yaml",
            "--task",
            "reject_odd",
            "--envelope",
            path.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(replay.status.code(), Some(1), "{replay:?}");
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(report["completion"], "failed");
    let wrong_task = onestep(
        false,
        out.path(),
        &[
            "task",
            "replay",
            "worker.yaml",
            "--task",
            "produce",
            "--envelope",
            path.to_str().unwrap(),
        ],
    );
    assert_eq!(wrong_task.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&wrong_task.stderr)
            .contains("capture task mismatch: expected \"produce\", received \"reject_odd\""),
        "{wrong_task:?}"
    );
}

/// The report without what differs run to run (times, durations, the checkpoint the
/// reference's supervisor records).
fn comparable(mut report: Value) -> Value {
    for key in ["duration_s", "last_checkpoint"] {
        report.as_object_mut().unwrap().remove(key);
    }
    for event in report["events"].as_array_mut().unwrap() {
        let event = event.as_object_mut().unwrap();
        event.remove("emitted_at");
        event.remove("duration_s");
    }
    report
}

#[test]
fn task_run_reports_what_the_reference_reports() {
    let out = tempfile::tempdir().unwrap();
    let input = out.path().join("input.json");
    std::fs::write(&input, r#"{"from": "input"}"#).unwrap();
    let input = input.to_str().unwrap();
    for (task, code) in [("produce", 0), ("reject_odd", 1)] {
        let payload = if task == "produce" {
            input.to_owned()
        } else {
            let odd = out.path().join("odd.json");
            std::fs::write(&odd, r#"{"n": 3, "payload": {}}"#).unwrap();
            odd.to_str().unwrap().to_owned()
        };
        let args = [
            "task",
            "run",
            "worker.yaml",
            "--task",
            task,
            "--input",
            &payload,
            "--json",
        ];
        let ours = onestep(false, out.path(), &args);
        let theirs = onestep(true, out.path(), &args);
        assert_eq!(ours.status.code(), Some(code), "{ours:?}");
        assert_eq!(theirs.status.code(), Some(code), "{theirs:?}");
        let ours: Value = serde_json::from_slice(&ours.stdout).unwrap();
        let theirs: Value = serde_json::from_slice(&theirs.stdout).unwrap();
        assert_eq!(comparable(ours), comparable(theirs), "task {task}");
    }
}

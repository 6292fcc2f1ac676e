//! The reference's YAML features beyond handlers, run by the real binary with the real Python:
//! app hooks, task hooks, an emit route with a transform (`tests/python/parity/worker.yaml`).
//! The same file passes both `check --strict`s, ours and the Python reference's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn parity_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/parity")
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

#[test]
fn both_strict_checks_accept_the_hooks_routes_and_transforms() {
    let out = tempfile::tempdir().unwrap();
    let yaml = parity_dir().join("worker.yaml");
    let ours = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["check", "--strict"])
        .arg(&yaml)
        .env("PARITY_OUT", out.path())
        .current_dir(parity_dir())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&ours.stdout).to_string() + &String::from_utf8_lossy(&ours.stderr);
    assert_eq!(ours.status.code(), Some(0), "{text}");
    let reference = onestep_testkit::reference::cli()
        .args(["check", "--strict"])
        .arg(&yaml)
        .env("PARITY_OUT", out.path())
        .current_dir(parity_dir())
        .output()
        .unwrap();
    assert_eq!(
        reference.status.code(),
        Some(0),
        "the reference refused the file: {}{}",
        String::from_utf8_lossy(&reference.stdout),
        String::from_utf8_lossy(&reference.stderr)
    );
}

#[test]
fn render_draws_routes_and_transforms_as_the_reference_draws_them() {
    let render = |mut command: Command| {
        let output = command
            .args(["render", "worker.yaml"])
            .env("PARITY_OUT", "/tmp")
            .current_dir(parity_dir())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let ours = render(Command::new(env!("CARGO_BIN_EXE_onestep")));
    let reference = render(onestep_testkit::reference::cli());
    assert_eq!(ours, reference);
    assert!(
        ours.contains(r#"-->|"when parity_hooks:is_even · parity_hooks:double"|"#),
        "{ours}"
    );
}

#[test]
fn hooks_routes_and_transforms_run_in_python_on_the_rust_runtime() {
    let out = tempfile::tempdir().unwrap();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .arg("run")
        .arg(parity_dir().join("worker.yaml"))
        .args(["--log-format", "json"])
        .env("PARITY_OUT", out.path())
        .current_dir(parity_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (even, failure) = loop {
        let even = read_json(&out.path().join("even-2.json"));
        let failure = read_json(&out.path().join("failure-1.json"));
        if let (Some(even), Some(failure)) = (&even, &failure) {
            break (even.clone(), failure.clone());
        }
        if Instant::now() > deadline || worker.try_wait().unwrap().is_some() {
            let _ = worker.kill();
            let output = worker.wait_with_output().unwrap();
            panic!(
                "no even-2.json and failure-1.json in time; files: {:?}; worker stderr: {}",
                std::fs::read_dir(out.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect::<Vec<_>>(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Ctrl-C in a terminal signals the whole process group, the Python processes included:
    // they must still be there for the shutdown hook.
    Command::new("kill")
        .args(["-s", "INT", "--", &format!("-{}", worker.id())])
        .status()
        .unwrap();
    let output = worker.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    // The handler's ctx.logger records are the worker's own JSON lines.
    let logged = String::from_utf8_lossy(&output.stdout);
    assert!(
        logged.lines().any(|line| {
            serde_json::from_str::<Value>(line).is_ok_and(|l| {
                l["logger"] == "onestep.parity.produce"
                    && l["message"] == "produced 0"
                    && l["level"] == "INFO"
            })
        }),
        "{logged}"
    );

    let startup = read_json(&out.path().join("startup.json")).expect("the startup hook ran");
    assert_eq!(startup["name"], "parity");
    assert_eq!(
        read_json(&out.path().join("shutdown.json")).expect("the shutdown hook ran")["name"],
        "parity"
    );
    assert_eq!(
        read_json(&out.path().join("before.json")),
        Some(serde_json::json!({"from": "tick"})),
        "the before hook got the payload"
    );
    assert_eq!(
        read_json(&out.path().join("after-0.json")),
        Some(serde_json::json!({"tag": "done"})),
        "after_success got the result and its params"
    );
    // The route sent even results through the transform and odd ones as they were.
    assert_eq!(
        even,
        serde_json::json!({"n": 2, "doubled": 4, "task": "produce"})
    );
    assert!(!out.path().join("even-1.json").exists());
    assert_eq!(failure["kind"], "error");
    assert_eq!(failure["exception_type"], "ValueError");
    assert_eq!(failure["message"], "odd n 1");
    let traceback = failure["traceback"].as_str().unwrap_or_default();
    assert!(
        traceback.starts_with("Traceback (most recent call last):")
            && traceback.contains("in reject")
            && traceback.trim_end().ends_with("ValueError: odd n 1"),
        "the Python traceback, as the reference gives it: {traceback}"
    );
    let events = std::fs::read_to_string(out.path().join("events.txt")).unwrap();
    for line in [
        "ev produce succeeded 0",
        "ev record_even succeeded 0",
        "ev reject_odd failed 0",
    ] {
        assert!(
            events.lines().any(|l| l == line),
            "{line:?} in events:\n{events}"
        );
    }
}

/// The startup hook feeds the queue through `app.resources`, the handler stops the app with
/// `ctx.app.request_shutdown()`: the worker exits by itself, here as under the reference.
#[test]
fn python_feeds_its_own_queue_and_stops_the_app() {
    for reference in [false, true] {
        let out = tempfile::tempdir().unwrap();
        let mut command = if reference {
            onestep_testkit::reference::cli()
        } else {
            Command::new(env!("CARGO_BIN_EXE_onestep"))
        };
        let mut worker = command
            .args(["run", "seeded.yaml"])
            .env("PARITY_OUT", out.path())
            .current_dir(parity_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = worker.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not stop itself (reference: {reference})"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut worker.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(0), "reference: {reference}; {stderr}");
        assert_eq!(
            read_json(&out.path().join("taken.json")),
            Some(serde_json::json!([0, 1, 2])),
            "reference: {reference}"
        );
    }
}

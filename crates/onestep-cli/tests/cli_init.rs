//! `onestep init` writes the reference's project skeleton byte for byte, for every template; the
//! skeleton passes `check --strict` and the interval one runs its Python demo handler.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn onestep(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Every file under `root`, relative, with its bytes.
fn tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    stack.push(path);
                }
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path.strip_prefix(root).unwrap().to_owned(), bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_template_writes_the_reference_files_and_passes_the_strict_check() {
    for template in ["interval", "webhook", "redis", "sql-cdc"] {
        let ours = tempfile::tempdir().unwrap();
        let theirs = tempfile::tempdir().unwrap();
        let name = "My Worker";
        let made = onestep(ours.path(), &["init", name, "--template", template]);
        assert_eq!(made.status.code(), Some(0), "{made:?}");
        let printed = String::from_utf8_lossy(&made.stdout);
        assert!(
            printed.contains("Project: my-worker\nPackage: my_worker\n"),
            "{printed}"
        );
        let reference = onestep_testkit::reference::cli()
            .args(["init", name, "--template", template])
            .current_dir(theirs.path())
            .output()
            .unwrap();
        assert_eq!(reference.status.code(), Some(0), "{reference:?}");
        let project = ours.path().join(name);
        assert_eq!(
            tree(&project),
            tree(&theirs.path().join(name)),
            "{template}: the same files with the same bytes"
        );
        let checked = onestep(&project, &["check", "--strict", "worker.yaml"]);
        assert_eq!(
            checked.status.code(),
            Some(0),
            "{template}: {}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

#[test]
fn init_refuses_to_overwrite_without_force_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert!(onestep(dir.path(), &["init", "w"]).status.success());
    let worker = dir.path().join("w/worker.yaml");
    std::fs::write(&worker, "mine").unwrap();
    let again = onestep(dir.path(), &["init", "w", "--template", "webhook"]);
    assert_eq!(again.status.code(), Some(2));
    let message = String::from_utf8_lossy(&again.stderr);
    assert!(
        message.contains(
            "refusing to overwrite existing files: pyproject.toml, README.md, worker.yaml"
        ),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&worker).unwrap(), "mine");
    let forced = onestep(
        dir.path(),
        &["init", "w", "--template", "webhook", "--force"],
    );
    assert!(forced.status.success(), "{forced:?}");
    assert!(
        std::fs::read_to_string(&worker)
            .unwrap()
            .contains("type: webhook")
    );
}

#[test]
fn the_interval_skeleton_runs_its_python_handler() {
    let dir = tempfile::tempdir().unwrap();
    assert!(onestep(dir.path(), &["init", "demo"]).status.success());
    let mut worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", "worker.yaml"])
        .current_dir(dir.path().join("demo"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The demo handler prints its row; a Python print() goes to the worker's stderr.
    let stderr = worker.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let row = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("hello onestep") => break line,
            Ok(line) => seen.push(line),
            Err(_) if Instant::now() > deadline => {
                let _ = worker.kill();
                panic!("no demo row; stderr: {seen:#?}");
            }
            Err(_) => {}
        }
    };
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(worker.wait().unwrap().code(), Some(0));
    let row: serde_json::Value = serde_json::from_str(&row).unwrap();
    assert_eq!(
        row,
        serde_json::json!({
            "app": "demo",
            "message": "hello onestep",
            "payload": {"message": "hello onestep"},
        })
    );
}

//! schemathesis (from PyPI, in `.venv-schemathesis`, created by the test) against a live
//! `onestep serve` on SQLite, with every check, a fixed seed and a bounded number of examples,
//! once without and once with a bearer token: the OpenAPI document must describe what the server
//! does (statuses, schemas, headers, which data is accepted and which refused), and no request
//! may make it fail. Zero failures is the gate. The one widened expectation is in
//! `tests/schemathesis/schemathesis.toml`, with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use onestep_testkit::reference::SCHEMATHESIS;

/// Examples per operation and phase: enough to reach every rule, small enough for CI (~20 s).
const EXAMPLES: &str = "60";
const SEED: &str = "20261201";

struct Serve {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(token: Option<&str>) -> Serve {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onestep"));
    cmd.args([
        "serve",
        "--dsn",
        &dsn,
        "--namespace",
        "schemathesis",
        "--auto-create",
    ])
    .args([
        "--listen",
        "127.0.0.1:0",
        "--allow-task",
        "hello",
        "--allow-task",
        "report",
    ])
    .env_remove("ONESTEP_API_TOKEN")
    .env("NO_COLOR", "1")
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(token) = token {
        cmd.args(["--bearer-token", token]);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("onestep serve printed its address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("serving ") {
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches("/v1/executions")
                .to_owned();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    Serve {
        child,
        url,
        _dir: dir,
    }
}

fn run_schemathesis(token: Option<&str>) {
    let server = serve(token);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis/schemathesis.toml");
    let reports = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(SCHEMATHESIS.program("st"));
    cmd.arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/openapi.json", server.url)])
        .args([
            "--checks",
            "all",
            "--seed",
            SEED,
            "--max-examples",
            EXAMPLES,
        ])
        .args(["--workers", "1", "--no-color", "--report-dir"])
        .arg(reports.path())
        .current_dir(reports.path());
    if let Some(token) = token {
        cmd.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let output = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let summary: String = text
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    println!(
        "schemathesis ({}):\n{summary}",
        if token.is_some() { "token" } else { "no token" }
    );
    assert!(
        output.status.success() && text.contains(" passed") && !text.contains("FAILURES"),
        "schemathesis found failures ({}):\n{text}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn schemathesis_finds_nothing_without_a_token() {
    run_schemathesis(None);
}

#[test]
fn schemathesis_finds_nothing_with_a_bearer_token() {
    run_schemathesis(Some("schemathesis-token"));
}

//! `onestep run --metrics-addr`: `/metrics`, `/healthz` and `/readyz` over real HTTP from the
//! real binary, and the same metric families as the Python reference's `--metrics-addr` serves
//! for the same file (`tests/python/parity/worker.yaml`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn parity_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/parity")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request; the status and the body.
fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// Waits until `path` answers 200 and `check` holds for its body.
fn until(port: u16, path: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((200, body)) = http(port, "GET", path)
            && check(&body)
        {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered as expected"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn worker(reference: bool, port: u16, out: &std::path::Path) -> Child {
    let mut command = if reference {
        onestep_testkit::reference::cli()
    } else {
        Command::new(env!("CARGO_BIN_EXE_onestep"))
    };
    command
        .args([
            "run",
            "worker.yaml",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .env("PARITY_OUT", out)
        .current_dir(parity_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn stop(mut child: Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
}

#[test]
fn metrics_health_and_readiness_answer_over_http() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = worker(false, port, out.path());
    let metrics = until(port, "/metrics", |b| {
        b.contains(
            r#"onestep_task_failures_total{app="parity",task="reject_odd",failure_kind="error"}"#,
        )
    });
    assert!(
        metrics.contains(
            r#"onestep_tasks_processed_total{app="parity",task="produce",status="succeeded"}"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains("# TYPE onestep_task_duration_seconds histogram"));
    // The Python handler's ctx.metrics counter, as the reference renders custom series.
    assert!(
        metrics.contains("# TYPE produced_total counter"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"produced_total{task="produce",source="tick"} "#),
        "{metrics}"
    );
    let health: Value = serde_json::from_str(&until(port, "/healthz", |_| true)).unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["app"], "parity");
    assert_eq!(health["stopping"], false);
    let produce = health["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task"] == "produce")
        .unwrap();
    assert_eq!(produce["source"]["name"], "tick");
    assert_eq!(produce["source"]["kind"], "IntervalSource");
    assert_eq!(produce["source"]["alive"], true);
    assert_eq!(http(port, "GET", "/readyz").unwrap().0, 200);
    assert_eq!(http(port, "POST", "/metrics").unwrap().0, 405);
    assert_eq!(http(port, "GET", "/nowhere").unwrap().0, 404);
    stop(child);
    assert!(
        http(port, "GET", "/metrics").is_none(),
        "the listener closes with the worker"
    );
}

/// The metric family names and types, from `# TYPE` lines.
fn families(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("# TYPE "))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

#[test]
fn the_families_are_the_references() {
    let mut seen = Vec::new();
    for reference in [false, true] {
        let out = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = worker(reference, port, out.path());
        let text = until(port, "/metrics", |b| {
            b.contains("onestep_task_failures_total{")
        });
        stop(child);
        seen.push(families(&text));
    }
    assert_eq!(seen[0], seen[1], "ours, then the reference's");
}

/// `onestep serve` counts its requests by route template and serves them at `/metrics`, behind
/// the bearer token when one is set.
#[test]
fn serve_counts_requests_by_route_and_guards_metrics_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}", dir.path().join("api.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args([
            "serve",
            "--dsn",
            &dsn,
            "--namespace",
            "m",
            "--listen",
            "127.0.0.1:0",
            "--auto-create",
            "--bearer-token",
            "s3cret",
            "--allow-task",
            "t",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving http://") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0,
            "serve exited"
        );
    }
    let port: u16 = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("an address in {line:?}"));
    let get = |path: &str, token: bool| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let auth = if token {
            "Authorization: Bearer s3cret\r\n"
        } else {
            ""
        };
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    let id = "0190f5a8-2d84-7c3a-9d1e-4f1b2c3d4e5f";
    assert!(get(&format!("/v1/executions/{id}"), true).starts_with("HTTP/1.1 404"));
    assert!(get("/nowhere", true).starts_with("HTTP/1.1 404"));
    assert!(
        get("/metrics", false).starts_with("HTTP/1.1 401"),
        "the token guards /metrics"
    );
    let metrics = get("/metrics", true);
    stop(child);
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for expected in [
        r#"onestep_http_requests_total{method="GET",route="/v1/executions/{id}",status="404"} 1"#,
        r#"onestep_http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"onestep_http_requests_total{method="GET",route="/metrics",status="401"} 1"#,
        "# TYPE onestep_http_request_duration_seconds histogram",
        "onestep_http_busy_rejections_total 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == expected),
            "{expected} in\n{metrics}"
        );
    }
}

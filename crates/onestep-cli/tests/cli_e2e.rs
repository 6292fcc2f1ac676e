//! The `onestep` binary end to end on a real PostgreSQL: init-db, run a YAML worker whose
//! handler is `onestep:exec`, watch it with `onestep executions`, stop it with SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use onestep_core::execution::{ExecutionClient, SubmitOptions};
use onestep_sql::BackendOptions;
use onestep_sql::postgres::PostgresExecutionBackend;
use serde_json::{Value, json};

fn postgres_url() -> String {
    std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn onestep(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(args)
        .output()
        .expect("the onestep binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn check_exit_codes_say_ok_problems_or_unloadable() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "apiVersion: onestep/v1alpha1\nkind: App\napp: {name: x}\nresources:\n  q: {type: memory, maxsize: 1}\ntasks:\n  - {name: t, source: q, handler: onestep:echo}\n").unwrap();
    let o = onestep(&["check", "--strict", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o)
            .trim_end()
            .ends_with(&format!("OK: {} is valid (strict)", good.display())),
        "{}",
        text(&o)
    );
    let o = onestep(&["check", "--json", good.to_str().unwrap()]);
    let described: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(described["tasks"][0]["handler_ref"], "onestep:echo");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: onestep/v1alpha1\nkind: App\napp: {name: x}\ntasks:\n  - {name: t, handler: nope}\n").unwrap();
    let o = onestep(&["check", "--strict", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(
            "bad.yaml:5:15: tasks[0].handler: handler \"nope\" is neither a registered Rust handler"
        ),
        "{}",
        text(&o)
    );
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "app: [unclosed\n").unwrap();
    assert_eq!(
        onestep(&["check", broken.to_str().unwrap()]).status.code(),
        Some(2)
    );
    assert_eq!(
        onestep(&["check", "/nonexistent/worker.yaml"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn run_executes_a_command_worker_and_executions_reports_the_states() {
    let url = postgres_url();
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..10].to_string();
    let (table, attempts) = (
        format!("cli{suffix}_executions"),
        format!("cli{suffix}_attempts"),
    );
    let namespace = format!("cli-{suffix}");

    let init = onestep(&[
        "init-db",
        "--dsn",
        &url,
        "--table",
        &table,
        "--attempts-table",
        &attempts,
    ]);
    assert_eq!(init.status.code(), Some(0), "{}", text(&init));
    assert!(text(&init).contains("created"), "{}", text(&init));
    let again = onestep(&[
        "init-db",
        "--dsn",
        &url,
        "--table",
        &table,
        "--attempts-table",
        &attempts,
    ]);
    assert!(text(&again).contains("already exist"), "{}", text(&again));

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("worker.yaml");
    let script = r#"p=$(cat); case "$p" in *fail*) echo "boom from the script" >&2; exit 3;; *) printf '{"echo": %s, "attempts": %s}' "$p" "$ONESTEP_ATTEMPTS";; esac"#;
    std::fs::write(
        &cfg,
        format!(
            "apiVersion: onestep/v1alpha1
kind: App
app:
  name: cli-e2e
  shutdown_timeout_s: 5
  logging: {{level: info, format: json}}
resources:
  db: {{type: postgres, dsn: '{url}'}}
  jobs:
    type: postgres_execution_source
    connector: db
    namespace: {namespace}
    task_names: [shell]
    table: {table}
    attempts_table: {attempts}
    auto_create: false
    poll_interval_s: 0.1
    lease_duration_s: 6
    heartbeat_interval_s: 1
tasks:
  - name: shell
    source: jobs
    handler:
      ref: onestep:exec
      params:
        command: [sh, -c, {script:?}]
    retry: {{type: max_attempts, max_attempts: 2}}
"
        ),
    )
    .unwrap();
    assert_eq!(
        onestep(&["check", "--strict", cfg.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let options = BackendOptions::default()
        .with_table(table.clone())
        .with_attempts_table(attempts.clone());
    let client = ExecutionClient::new(
        PostgresExecutionBackend::new(&url, options).unwrap(),
        &namespace,
    )
    .unwrap();
    let ok = rt
        .block_on(client.submit("shell", &json!({"n": 2}), SubmitOptions::default()))
        .unwrap();
    let bad = rt
        .block_on(client.submit(
            "shell",
            &json!({"please": "fail"}),
            SubmitOptions::default(),
        ))
        .unwrap();

    let mut worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let common = [
        "--dsn",
        url.as_str(),
        "--namespace",
        namespace.as_str(),
        "--table",
        table.as_str(),
        "--attempts-table",
        attempts.as_str(),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let counts = loop {
        let mut args = vec!["executions", "stats", "--json"];
        args.extend(common);
        let o = onestep(&args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let stats: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        let count = |s: &str| {
            stats
                .iter()
                .find(|x| x["status"] == s)
                .and_then(|x| x["count"].as_u64())
                .unwrap_or(0)
        };
        if count("succeeded") == 1 && count("failed") == 1 {
            break (count("succeeded"), count("failed"), count("queued"));
        }
        assert!(
            Instant::now() < deadline,
            "executions did not finish: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(counts, (1, 1, 0));

    let mut args = vec!["executions", "result"];
    let ok_id = ok.id.to_string();
    args.push(&ok_id);
    args.extend(common);
    let o = onestep(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(result, json!({"echo": {"n": 2}, "attempts": 0}));

    let bad_id = bad.id.to_string();
    let mut args = vec!["executions", "result", bad_id.as_str()];
    args.extend(common);
    let o = onestep(&args);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("failed (error: ExecFailed)"),
        "{}",
        text(&o)
    );

    let mut args = vec!["executions", "attempts", bad_id.as_str(), "--json"];
    args.extend(common);
    let attempts_json: Vec<Value> = serde_json::from_slice(&onestep(&args).stdout).unwrap();
    assert_eq!(
        attempts_json
            .iter()
            .map(|a| a["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["retrying", "failed"]
    );

    let mut args = vec!["executions", "list", "--json"];
    args.extend(common);
    let page: Value = serde_json::from_slice(&onestep(&args).stdout).unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);

    let status = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(s) = worker.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = worker.wait_with_output().unwrap();
    assert_eq!(code, Some(0), "{}", text(&out));
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(
        logs.lines()
            .any(|l| l.contains("\"event_kind\":\"succeeded\"")),
        "structured JSON logs: {logs}"
    );

    let mut args = vec![
        "executions",
        "prune",
        "--finished-before",
        "0s",
        "--dry-run",
    ];
    args.extend(common);
    assert!(text(&onestep(&args)).contains("would delete 2 terminal execution(s)"));
    let mut args = vec!["executions", "prune", "--finished-before", "0s"];
    args.extend(common);
    assert!(text(&onestep(&args)).contains("deleted 2 terminal execution(s)"));
}

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn example_configs_pass_the_strict_check() {
    let dir = workspace().join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let o = onestep(&["check", "--strict", path.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(0), "{}: {}", path.display(), text(&o));
            checked += 1;
        }
    }
    assert!(checked >= 3, "examples for sqlite, postgres and mysql");
}

/// README's YAML section, as written: a worker on the SQLite example, a "report" submitted and
/// read back with `onestep executions`, SIGTERM, a prompt exit.
#[test]
fn the_readme_sqlite_sequence_runs_a_report_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}", dir.path().join("example.db").display());
    let namespace = format!("ex-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args([
            "run",
            workspace()
                .join("examples/sqlite-worker.yaml")
                .to_str()
                .unwrap(),
        ])
        .env("ONESTEP_SQLITE_DSN", &dsn)
        .env("ONESTEP_NAMESPACE", &namespace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_onestep"))
            .args(["executions"])
            .args(args)
            .args(["--namespace", &namespace])
            .env("ONESTEP_DSN", &dsn)
            .output()
            .unwrap()
    };
    // The worker creates the tables; submit once they are there.
    let deadline = Instant::now() + Duration::from_secs(30);
    let submitted = loop {
        let o = cli(&["submit", "report", r#"{"month": "2026-11"}"#]);
        if o.status.success() || Instant::now() > deadline {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(submitted.status.code(), Some(0), "{}", text(&submitted));
    let printed = String::from_utf8_lossy(&submitted.stdout).to_string();
    let (id, status) = printed.trim().split_once(' ').expect("<id> <status>");
    assert_eq!(status, "queued");
    let result = loop {
        let o = cli(&["result", id]);
        if o.status.success() || Instant::now() > deadline {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(result.status.code(), Some(0), "{}", text(&result));
    let value: Value = serde_json::from_slice(&result.stdout).unwrap();
    assert_eq!(value, json!({"month": "2026-11", "rows": 42}));
    let stats = cli(&["stats"]);
    let stats_text = String::from_utf8_lossy(&stats.stdout).to_string();
    assert!(
        stats_text
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["succeeded", "1"])),
        "{stats_text}"
    );
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let stopped = Instant::now();
    let out = worker.wait_with_output().unwrap();
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "the worker took {:?} to exit",
        stopped.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains(&format!("attempt=1 execution_id=\"{id}\"")),
        "the success event names the attempt and the execution: {log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no colour codes in a log written to a pipe: {log}"
    );
}

/// The quickstart keeps its database between runs and says so; `--fresh` starts empty.
#[test]
fn quickstart_says_what_earlier_runs_left_and_fresh_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let start = |fresh: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_onestep"));
        cmd.args([
            "quickstart",
            "--listen",
            "127.0.0.1:0",
            "--db",
            db.to_str().unwrap(),
            "--no-demo",
        ]);
        if fresh {
            cmd.arg("--fresh");
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        let first = lines.next().unwrap().unwrap();
        let dashboard = lines.next().unwrap().unwrap();
        assert!(dashboard.starts_with("Dashboard: http://"), "{dashboard}");
        let state = lines.next().unwrap().unwrap();
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap()
            .to_string();
        std::thread::spawn(move || lines.for_each(drop));
        (child, addr, state)
    };
    let stop = |child: std::process::Child| {
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let (child, addr, state) = start(false);
    assert!(
        state.contains("(empty); kept between runs, `--fresh` starts empty"),
        "{state}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let body = json!({"task_name": "sleep", "payload": {"seconds": 600}});
    let reply = rt
        .block_on(onestep_http::client::request(
            &addr,
            "POST",
            "/v1/executions",
            &[("Idempotency-Key", "long")],
            Some(&body),
        ))
        .unwrap();
    assert_eq!(reply.status, 202, "{reply:?}");
    std::thread::sleep(Duration::from_millis(500));
    stop(child);

    let (child, _, state) = start(false);
    assert!(
        state
            .contains("1 execution(s) from earlier runs, 1 of them unfinished: they run again now"),
        "{state}"
    );
    stop(child);
    let (child, _, state) = start(true);
    assert!(state.contains("(empty)"), "{state}");
    stop(child);
}

/// What a person does first: runs the quickstart, opens the printed dashboard URL, and sees the
/// demo executions move through their states (here with a plain HTTP client; the browser test
/// drives the same pages in Chromium).
#[test]
fn the_quickstart_dashboard_shows_the_demo_executions_moving() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args([
            "quickstart",
            "--listen",
            "127.0.0.1:0",
            "--db",
            db.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let url = loop {
        let line = lines.next().expect("quickstart exited").unwrap();
        if let Some(rest) = line.strip_prefix("Dashboard: ") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let (addr, prefix) = url
        .trim_start_matches("http://")
        .split_once('/')
        .map(|(a, p)| (a.to_owned(), format!("/{p}")))
        .unwrap();
    let page = |path: &str| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    let mut seen = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while !(seen.contains("succeeded") && seen.contains("running") && seen.contains("failed")) {
        assert!(std::time::Instant::now() < deadline, "saw only {seen:?}");
        let listing = page(&format!("{prefix}executions"));
        assert!(listing.starts_with("HTTP/1.1 200"), "{listing}");
        for status in ["queued", "running", "retrying", "succeeded", "failed"] {
            if listing.contains(&format!("status-{status}\"")) {
                seen.insert(status);
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let overview = page(&prefix);
    assert!(
        overview.contains("id=\"counts\"") && overview.contains(">hello<"),
        "{overview}"
    );
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_quickstart_tour_passes_twice_in_a_row() {
    for run in 0..2 {
        let o = onestep(&["quickstart", "--tour"]);
        assert_eq!(o.status.code(), Some(0), "run {run}: {}", text(&o));
        assert!(text(&o).contains("every step behaved as documented"));
    }
}

#[test]
fn quickstart_says_clearly_when_its_port_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let o = onestep(&[
        "quickstart",
        "--listen",
        &addr,
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!(
            "{addr} is already in use; pick another address with --listen"
        )),
        "{}",
        text(&o)
    );
}

/// A name with a control character would be printed raw by logs and `onestep executions`: YAML
/// refuses it like the HTTP API and the Rust client do.
#[test]
fn check_refuses_control_characters_in_names_and_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cc.db");
    for (yaml, expected) in [
        (
            format!(
                "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: demo}}\nresources:\n  db: {{type: sqlite, dsn: \"sqlite://{}\"}}\n  jobs: {{type: sqlite_execution_source, connector: db, namespace: \"de\\emo\", task_names: [work]}}\ntasks:\n  - {{name: work, source: jobs, handler: onestep:echo}}\n",
                db.display()
            ),
            "resources.jobs.namespace must not contain control characters; found U+001B at character 3",
        ),
        (
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {name: demo}\nresources:\n  q: {type: memory, maxsize: 1}\ntasks:\n  - {name: \"wo\\nrk\", source: q, handler: onestep:echo}\n".to_owned(),
            "tasks[0].name must not contain control characters; found U+000A at character 3",
        ),
    ] {
        let path = dir.path().join("names.yaml");
        std::fs::write(&path, yaml).unwrap();
        let o = onestep(&["check", "--strict", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains(expected), "{}", text(&o));
    }
}

/// One plain HTTP/1.1 POST; the status code of the answer.
fn post_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split(' ').nth(1)?.parse().ok()
}

/// Two webhooks of one app on one port serve from one listener, each on its own path.
#[test]
fn webhooks_of_one_app_share_their_port() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("hooks.yaml");
    std::fs::write(
        &config,
        format!(
            "app: {{name: hooks}}\n\
             resources:\n  \
               a: {{type: webhook, path: /a, port: {port}}}\n  \
               b: {{type: webhook, path: /b, port: {port}}}\n\
             tasks:\n  \
               - {{name: on-a, source: a, handler: {{ref: \"onestep:echo\"}}}}\n  \
               - {{name: on-b, source: b, handler: {{ref: \"onestep:echo\"}}}}\n"
        ),
    )
    .unwrap();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", config.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        match post_status(port, "/a") {
            Some(status) => break Some(status),
            None if Instant::now() > deadline => break None,
            None => {
                if worker.try_wait().unwrap().is_some() {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let second = post_status(port, "/b");
    let _ = worker.kill();
    let out = worker.wait_with_output().unwrap();
    assert_eq!((first, second), (Some(202), Some(202)), "{}", text(&out));
}

/// A state store declared with `auto_create: false` fails `check --connect` until `init-db
/// --state-table` creates its table; `catalog --role` lists the store types.
#[test]
fn init_db_creates_the_state_tables_check_connect_finds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let dsn = format!("sqlite://{}?mode=rwc", db.display());
    let yaml = dir.path().join("worker.yaml");
    std::fs::write(
        &yaml,
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: x, state: kv}}\nresources:\n  \
             db: {{type: sqlite, dsn: \"{dsn}\"}}\n  \
             kv: {{type: sqlite_state_store, connector: db, table: kv, auto_create: false}}\n  \
             cursors: {{type: sqlite_cursor_store, connector: db, table: marks, auto_create: false}}\n  \
             q: {{type: memory, maxsize: 1}}\ntasks:\n  - {{name: t, source: q, handler: onestep:echo}}\n"
        ),
    )
    .unwrap();
    let o = onestep(&["check", "--strict", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = onestep(&["check", "--connect", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("x kv:"), "{}", text(&o));
    assert!(text(&o).contains("x cursors:"), "{}", text(&o));

    let o = onestep(&[
        "init-db",
        "--dsn",
        &dsn,
        "--state-table",
        "kv",
        "--cursor-table",
        "marks",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("kv exists"), "{}", text(&o));
    let o = onestep(&["check", "--connect", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("ok kv") && text(&o).contains("ok cursors"),
        "{}",
        text(&o)
    );

    let o = onestep(&["init-db", "--dsn", &dsn, "--state-table", "bad name"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("--state-table must be a non-empty SQL identifier"),
        "{}",
        text(&o)
    );

    let o = onestep(&["catalog", "--role", "state_store"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let types: Vec<&str> = std::str::from_utf8(&o.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with("handlers"))
        .collect();
    assert_eq!(
        types,
        [
            "mysql_state_store (state_store)",
            "postgres_state_store (state_store)",
            "sqlite_state_store (state_store)"
        ]
    );
    let o = onestep(&["catalog", "--role", "stat"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// A YAML worker over a `sqlite_table_queue`: the user's own table drained row by row into a
/// `sqlite_table_sink`, each row's `ack` written, then SIGTERM.
#[test]
fn a_yaml_worker_drains_a_sqlite_table_queue() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tickets.db");
    let dsn = format!("sqlite://{}?mode=rwc", db.display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = runtime.block_on(sqlx::SqlitePool::connect(&dsn)).unwrap();
    runtime
        .block_on(
            sqlx::raw_sql(
                "CREATE TABLE tickets (id INTEGER PRIMARY KEY, status TEXT NOT NULL, title TEXT);
                 CREATE TABLE triaged (id INTEGER PRIMARY KEY, status TEXT, title TEXT);
                 INSERT INTO tickets VALUES (1, 'new', 'a'), (2, 'new', 'b'), (3, 'new', 'c'),
                   (4, 'closed', 'd'), (5, 'new', 'e');",
            )
            .execute(&pool),
        )
        .unwrap();
    let yaml = dir.path().join("worker.yaml");
    std::fs::write(
        &yaml,
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: tickets}}\nresources:\n  \
             db: {{type: sqlite, dsn: \"{dsn}\"}}\n  \
             tickets:\n    type: sqlite_table_queue\n    connector: db\n    table: tickets\n    \
             key: id\n    where: \"status = 'new'\"\n    claim: {{status: working}}\n    \
             ack: {{status: done}}\n    nack: {{status: new}}\n    poll_interval_s: 0.05\n  \
             triaged: {{type: sqlite_table_sink, connector: db, table: triaged, mode: upsert, \
             keys: [id]}}\n\
             tasks:\n  - {{name: triage, source: tickets, handler: onestep:echo, emit: [triaged]}}\n"
        ),
    )
    .unwrap();
    let o = onestep(&["check", "--strict", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", yaml.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let statuses = || -> Vec<(i64, String)> {
        runtime
            .block_on(sqlx::query_as("SELECT id, status FROM tickets ORDER BY id").fetch_all(&pool))
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while statuses().iter().any(|(_, s)| s != "done" && s != "closed") && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = worker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        statuses(),
        [
            (1, "done".to_string()),
            (2, "done".to_string()),
            (3, "done".to_string()),
            (4, "closed".to_string()),
            (5, "done".to_string()),
        ],
        "{}",
        text(&out)
    );
    // The handler echoed each claimed row; the sink wrote it.
    let triaged: Vec<(i64, String)> = runtime
        .block_on(sqlx::query_as("SELECT id, status FROM triaged ORDER BY id").fetch_all(&pool))
        .unwrap();
    assert_eq!(
        triaged,
        [
            (1, "working".to_string()),
            (2, "working".to_string()),
            (3, "working".to_string()),
            (5, "working".to_string()),
        ]
    );
}

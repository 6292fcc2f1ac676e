//! The dashboard in a real browser: Debian's Chromium, driven through chromedriver (WebDriver),
//! against a real `onestep serve --ui` and a real `onestep run` worker on one SQLite database.
//! Pages render, filters and paging work, cancel reaches the database, the auth gate holds, and
//! the browser logs no console error. Plus, over plain HTTP: basic auth, read-only mode and the
//! guards of the actions (form token, origin).
//!
//! chromedriver comes from `ONESTEP_CHROMEDRIVER`, else `PATH`; `cargo xtask test` installs
//! Debian's `chromium` and `chromium-driver` when they are missing. Without them the test fails
//! and says how to get them. `ONESTEP_UPDATE_SCREENSHOTS=1` writes the pages' screenshots to
//! `docs/screenshots/` (what docs/operations.md shows).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

const TOKEN: &str = "dash-s3cret";

/// A child process killed when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn chromedriver() -> PathBuf {
    if let Some(path) = std::env::var_os("ONESTEP_CHROMEDRIVER") {
        return PathBuf::from(path);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("chromedriver"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromedriver is missing: run the tests with `cargo xtask test` (it installs \
                 Debian's chromium and chromium-driver), or `apt-get install chromium \
                 chromium-driver`, or set ONESTEP_CHROMEDRIVER"
            )
        })
}

/// Raw HTTP/1.1 (what a script or an attacker sends): status, head, body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// Starts `onestep serve` with `extra` flags; returns it and its address.
fn serve(dsn: &str, extra: &[&str]) -> (Guard, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args([
            "serve",
            "--dsn",
            dsn,
            "--namespace",
            "dash",
            "--listen",
            "127.0.0.1:0",
            "--auto-create",
            "--ui",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving http://") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "serve exited");
    }
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    (Guard(child), addr)
}

fn worker(dir: &Path, dsn: &str) -> Guard {
    let yaml = format!(
        "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: dashboard-test}}\nresources:\n  \
         db: {{type: sqlite, dsn: \"{dsn}\"}}\n  \
         work: {{type: sqlite_execution_source, connector: db, namespace: dash, task_names: [work], worker_id: browser-test-worker, heartbeat_interval_s: 0.5}}\n  \
         broken: {{type: sqlite_execution_source, connector: db, namespace: dash, task_names: [broken]}}\n\
         tasks:\n  - {{name: work, source: work, handler: onestep:sleep, concurrency: 8}}\n  \
         - {{name: broken, source: broken, handler: onestep:fail, retry: {{type: max_attempts, max_attempts: 1}}}}\n"
    );
    let path = dir.join("worker.yaml");
    std::fs::write(&path, yaml).unwrap();
    Guard(
        Command::new(env!("CARGO_BIN_EXE_onestep"))
            .args(["run", path.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

async fn submit(addr: &str, task: &str, payload: Value, metadata: Value) -> String {
    let key = uuid::Uuid::new_v4().to_string();
    let reply = onestep_http::client::request(
        addr,
        "POST",
        "/v1/executions",
        &[
            ("Idempotency-Key", key.as_str()),
            ("Authorization", &format!("Bearer {TOKEN}")),
        ],
        Some(&json!({"task_name": task, "payload": payload, "metadata": metadata})),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 202, "{:?}", reply.body);
    reply.body["id"].as_str().unwrap().to_owned()
}

/// The execution's status as the database holds it (through `onestep executions get`).
fn stored_status(dsn: &str, id: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["executions", "--dsn", dsn, "--namespace", "dash", "get", id])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    shown["status"].as_str().unwrap_or_default().to_owned()
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The text of the element `css`, waiting for it (up to 10 s) as the page loads or refreshes.
async fn text(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Waits until the browser's address holds `part` (a click's navigation has happened).
async fn navigated(c: &Client, part: &str) {
    eventually(&format!("an address with {part}"), || async {
        c.current_url().await.unwrap().as_str().contains(part)
    })
    .await;
}

async fn shot(c: &Client, name: &str, dir: &Path) {
    let png = c.screenshot().await.unwrap();
    let target = if std::env::var_os("ONESTEP_UPDATE_SCREENSHOTS").is_some() {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots")
    } else {
        dir.to_path_buf()
    };
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join(format!("dashboard-{name}.png")), png).unwrap();
}

/// chromedriver's (legacy) log endpoint: the browser's console since the last call.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// The browser's console errors since the last call.
async fn console_errors(c: &Client) -> Vec<String> {
    let logged = c.issue_cmd(BrowserLog).await.unwrap();
    logged
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|entry| entry["level"] == "SEVERE")
        .map(|entry| entry["message"].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}?mode=rwc", dir.path().join("dash.db").display());
    let (_api, addr) = serve(&dsn, &["--bearer-token", TOKEN]);
    let _worker = worker(dir.path(), &dsn);

    // Work to look at: quick ones of two tenants (enough for two pages), one failure, one long.
    for n in 0..30 {
        let tenant = if n % 3 == 0 { "acme" } else { "globex" };
        submit(
            &addr,
            "work",
            json!({"seconds": 0.05}),
            json!({"tenant": tenant}),
        )
        .await;
    }
    let failed = submit(&addr, "broken", json!({"message": "disk full"}), json!({})).await;
    // A task no worker runs: its executions wait, and the overview's backlog shows them.
    for _ in 0..2 {
        submit(&addr, "nightly", json!({}), json!({})).await;
    }
    let long = submit(
        &addr,
        "work",
        json!({"seconds": 120}),
        json!({"tenant": "acme"}),
    )
    .await;

    // The gate, as a script sees it: no page, no asset, no action without the token.
    let (status, head, _) = http(&addr, "GET", "/ui/executions", &[], "");
    assert_eq!(status, 303, "{head}");
    assert!(
        head.to_lowercase().contains("location: /ui/login"),
        "{head}"
    );
    assert_eq!(http(&addr, "GET", "/ui/assets/app.css", &[], "").0, 401);
    assert_eq!(
        http(
            &addr,
            "POST",
            &format!("/ui/executions/{long}/cancel"),
            &[],
            ""
        )
        .0,
        401
    );
    let (status, _, body) = http(
        &addr,
        "GET",
        "/ui/workers",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    );
    assert_eq!(status, 200);
    assert!(
        !body.contains("sqlite://") && !body.contains(TOKEN),
        "no DSN or secret on a page"
    );

    let driver_port = free_port();
    let _driver = Guard(
        Command::new(chromedriver())
            .arg(format!("--port={driver_port}"))
            // Chromium's scratch directories go into the test's directory, removed with it.
            .env("TMPDIR", dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let driver = format!("127.0.0.1:{driver_port}");
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000", format!("--user-data-dir={}", dir.path().join("chromium").display())]}),
    );
    capabilities.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    let mut connected = None;
    for _ in 0..50 {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&format!("http://{driver}"))
            .await
        {
            Ok(c) => {
                connected = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let c = connected.expect("chromedriver did not start a Chromium session");
    let base = format!("http://{addr}/ui");

    // Signing in: a wrong token is refused, the right one leads to the overview.
    c.goto(&format!("{base}/")).await.unwrap();
    assert!(c.current_url().await.unwrap().path().ends_with("/ui/login"));
    c.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("wrong")
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        text(&c, "#login-error")
            .await
            .contains("not the dashboard's")
    );
    c.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text(&c, "#finished-last-hour").await;
    let errors = console_errors(&c).await;
    assert!(
        errors
            .iter()
            .all(|e| e.contains("/ui/login") && e.contains("status of 401")),
        "only the refused sign-in may be logged: {errors:#?}"
    );
    assert_eq!(c.current_url().await.unwrap().path(), "/ui/");

    // Overview: the counts and the last hour move as the worker drains (the page refreshes).
    eventually("the overview to count 31 finished executions", || async {
        text(&c, "#finished-last-hour").await.trim() == "31"
    })
    .await;
    let counts = text(&c, "#counts").await;
    assert!(
        counts.contains("work") && counts.contains("broken"),
        "{counts}"
    );
    assert!(text(&c, "#failure-rate").await.contains('%'));
    c.find(Locator::Id("throughput-chart")).await.unwrap();
    let backlog = text(&c, "#backlog tbody").await;
    let cells: Vec<&str> = backlog.split_whitespace().collect();
    assert_eq!(
        &cells[..3],
        ["nightly", "2", "2"],
        "the waiting task, its depth and ready count: {backlog}"
    );
    shot(&c, "overview", dir.path()).await;

    // Executions: filter by status with the form, by metadata, and page with the cursor.
    c.goto(&format!("{base}/executions")).await.unwrap();
    let status = c.find(Locator::Css("select[name=status]")).await.unwrap();
    status.select_by_value("failed").await.unwrap();
    c.find(Locator::Css("#filters button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    navigated(&c, "status=failed").await;
    let rows = c
        .find_all(Locator::Css("#executions tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].attr("data-id").await.unwrap().as_deref(),
        Some(failed.as_str())
    );
    c.goto(&format!(
        "{base}/executions?meta_key=tenant&meta_value=acme&limit=6"
    ))
    .await
    .unwrap();
    let first: Vec<String> = ids(&c).await;
    assert_eq!(first.len(), 6);
    c.find(Locator::Id("next-page"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    navigated(&c, "cursor=").await;
    let second = ids(&c).await;
    assert_eq!(second.len(), 5, "11 acme executions: 6, then 5");
    assert!(
        second.iter().all(|id| !first.contains(id)),
        "pages do not overlap"
    );
    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    // A bad filter: the page says what is wrong (and answers 400, which the console notes).
    c.goto(&format!("{base}/executions?status=bogus"))
        .await
        .unwrap();
    assert!(
        text(&c, "#filter-error")
            .await
            .contains("status must be one of")
    );
    let errors = console_errors(&c).await;
    assert!(
        errors.iter().all(|e| e.contains("status of 400")),
        "console errors: {errors:#?}"
    );
    c.goto(&format!(
        "{base}/executions?meta_key=tenant&meta_value=acme"
    ))
    .await
    .unwrap();
    shot(&c, "executions", dir.path()).await;

    // Workers: the long one's lease, held by the worker, heartbeating.
    c.goto(&format!("{base}/workers")).await.unwrap();
    eventually("the worker to show its lease", || async {
        c.find(Locator::Css("[data-worker=browser-test-worker]"))
            .await
            .is_ok()
    })
    .await;
    assert!(c.source().await.unwrap().contains(&long));
    shot(&c, "workers", dir.path()).await;

    // Detail, then cancel: the confirm is accepted and the database ends cancelled.
    c.goto(&format!("{base}/executions/{long}")).await.unwrap();
    assert_eq!(text(&c, "#execution-id").await, long);
    eventually("the attempt to appear", || async {
        c.find(Locator::Css("#attempts li")).await.is_ok()
    })
    .await;
    assert!(text(&c, "#payload").await.contains("120"));
    eventually("the handler's progress", || async {
        text(&c, "#progress").await.contains("slept_s")
    })
    .await;
    shot(&c, "execution", dir.path()).await;
    c.find(Locator::Css("input[name=reason]"))
        .await
        .unwrap()
        .send_keys("browser test")
        .await
        .unwrap();
    c.find(Locator::Id("cancel"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.accept_alert().await.unwrap();
    eventually("the cancel to reach the database", || async {
        stored_status(&dsn, &long) == "cancelled"
    })
    .await;
    eventually("the page to show it cancelled", || async {
        c.source().await.unwrap().contains("status-cancelled")
    })
    .await;

    // "Submit again as new": a new execution with the same task and payload.
    c.goto(&format!("{base}/executions/{failed}"))
        .await
        .unwrap();
    c.find(Locator::Id("resubmit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.accept_alert().await.unwrap();
    eventually("the new execution's page", || async {
        c.find(Locator::Id("execution-id")).await.is_ok()
            && text(&c, "#execution-id").await != failed
    })
    .await;
    assert_eq!(text(&c, "#task-name").await, "broken");
    assert!(text(&c, "#payload").await.contains("disk full"));

    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    c.close().await.unwrap();
}

async fn ids(c: &Client) -> Vec<String> {
    let mut out = Vec::new();
    for row in c
        .find_all(Locator::Css("#executions tbody tr"))
        .await
        .unwrap()
    {
        out.push(row.attr("data-id").await.unwrap().unwrap());
    }
    out
}

/// Basic auth, read-only mode, and the guards of the actions, over plain HTTP.
#[tokio::test]
async fn basic_auth_read_only_and_forged_actions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}?mode=rwc", dir.path().join("ro.db").display());
    let (_ro, ro) = serve(
        &dsn,
        &[
            "--ui-read-only",
            "--ui-basic-auth",
            "admin:pw",
            "--bearer-token",
            TOKEN,
        ],
    );
    let id = submit(&ro, "work", json!({}), json!({})).await;
    let basic = format!("Basic {}", base64_of("admin:pw"));
    let (status, head, _) = http(&ro, "GET", "/ui/", &[], "");
    assert_eq!(status, 401);
    assert!(
        head.contains("WWW-Authenticate: Basic") || head.contains("www-authenticate: Basic"),
        "{head}"
    );
    assert_eq!(
        http(
            &ro,
            "GET",
            "/ui/",
            &[("Authorization", &format!("Basic {}", base64_of("admin:no")))],
            ""
        )
        .0,
        401
    );
    let (status, head, page) = http(
        &ro,
        "GET",
        &format!("/ui/executions/{id}"),
        &[("Authorization", &basic)],
        "",
    );
    assert_eq!(status, 200);
    assert!(
        head.to_lowercase()
            .contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(!page.contains("id=\"cancel\"") && page.contains("read-only"));
    let (status, _, _) = http(
        &ro,
        "POST",
        &format!("/ui/executions/{id}/cancel"),
        &[
            ("Authorization", &basic),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        "csrf=x",
    );
    assert_eq!(status, 403);
    assert_eq!(
        stored_status(&dsn, &id),
        "queued",
        "a refused action changes nothing"
    );

    let (_rw, rw) = serve(&dsn, &[]);
    let (_, _, page) = http(&rw, "GET", &format!("/ui/executions/{id}"), &[], "");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let path = format!("/ui/executions/{id}/cancel");
    assert_eq!(
        http(&rw, "POST", &path, &[form], "csrf=forged").0,
        403,
        "a forged token"
    );
    assert_eq!(
        http(
            &rw,
            "POST",
            &path,
            &[form, ("Origin", "http://evil.example")],
            &format!("csrf={csrf}")
        )
        .0,
        403,
        "another origin"
    );
    assert_eq!(stored_status(&dsn, &id), "queued");
    let (status, head, _) = http(
        &rw,
        "POST",
        &path,
        &[form, ("Origin", &format!("http://{rw}"))],
        &format!("csrf={csrf}&reason=done"),
    );
    assert_eq!(status, 303, "{head}");
    assert_eq!(stored_status(&dsn, &id), "cancelled");
    assert_eq!(
        http(&rw, "GET", "/ui/executions/not-a-uuid", &[], "").0,
        404
    );
    assert_eq!(
        http(&rw, "GET", "/ui/executions?cursor=%ZZ", &[], "").0,
        400
    );
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A malformed `--ui-basic-auth` or `--ui-prefix` stops `serve` at once with a message naming
/// the flag, before it listens.
#[test]
fn bad_dashboard_flags_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("flags.db").display()
    );
    for (flag, value, expected) in [
        (
            "--ui-basic-auth",
            "admin",
            "--ui-basic-auth must be USER:PASSWORD, both non-empty",
        ),
        (
            "--ui-basic-auth",
            "admin:",
            "--ui-basic-auth must be USER:PASSWORD, both non-empty",
        ),
        (
            "--ui-prefix",
            "ops/",
            "dashboard prefix must be empty or start with '/'",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_onestep"))
            .args([
                "serve",
                "--dsn",
                &dsn,
                "--namespace",
                "dash",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--auto-create", "--ui", flag, value])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag} {value}: {stderr}");
        assert!(stderr.contains(expected), "{flag} {value}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "nothing served: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

//! `onestep quickstart [--tour]`: the whole system on embedded SQLite in one process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onestep_core::execution::{
    ExecutionBackend as _, ExecutionClient, ExecutionSource, ExecutionSourceOptions,
};
use onestep_core::{AppHandle, MaxAttempts, OneStepApp, Task, TaskContext, TaskError};
use onestep_http::ExecutionApi;
use onestep_http::client::{Reply, request};
use onestep_http::dashboard::Dashboard;
use onestep_sql::BackendOptions;
use onestep_sql::sqlite::SqliteExecutionBackend;
use serde_json::{Value, json};

/// Arguments of `quickstart`.
#[derive(Debug, clap::Args)]
pub struct QuickstartArgs {
    /// The address of the API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// The SQLite database file; kept between runs, so executions of earlier runs stay (and
    /// one interrupted by Ctrl-C runs again).
    #[arg(long, default_value = "onestep-quickstart.db")]
    db: PathBuf,
    /// Delete the database file first and start with no executions.
    #[arg(long)]
    fresh: bool,
    /// Run a scripted tour through the HTTP API instead (free port, temporary database); exits 0
    /// when every step behaved as documented.
    #[arg(long)]
    tour: bool,
    /// Do not submit the demo executions (a few per second of every task, so the dashboard has
    /// something to show); only what you submit runs.
    #[arg(long)]
    no_demo: bool,
}

const NAMESPACE: &str = "quickstart";
/// Where the dashboard is mounted.
const DASHBOARD: &str = "/ui";
const TASKS: [&str; 4] = ["hello", "flaky", "always_fails", "sleep"];

async fn hello(_ctx: TaskContext, input: Value) -> Result<Value, TaskError> {
    let name = input.get("name").and_then(Value::as_str).unwrap_or("world");
    Ok(json!({"greeting": format!("hello, {name}")}))
}

async fn flaky(ctx: TaskContext, _input: Value) -> Result<Value, TaskError> {
    if ctx.attempts() == 0 {
        return Err(TaskError::new(
            "UpstreamTimeout",
            "the first attempt always times out",
        ));
    }
    Ok(json!({"succeeded_on_attempt": ctx.attempts() + 1}))
}

async fn always_fails(_ctx: TaskContext, _input: Value) -> Result<Value, TaskError> {
    Err(TaskError::new("ValueError", "this task always fails"))
}

async fn sleep(ctx: TaskContext, input: Value) -> Result<Value, TaskError> {
    let seconds = input
        .get("seconds")
        .and_then(Value::as_f64)
        .unwrap_or(30.0)
        .clamp(0.0, 3600.0);
    // Reports progress every quarter second (the store keeps at most one write a second).
    let started = Instant::now();
    let total = Duration::from_secs_f64(seconds);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let slept = started.elapsed().min(total);
                let _ = ctx.report_progress(json!({
                    "slept_s": (slept.as_secs_f64() * 10.0).round() / 10.0,
                    "of_s": seconds,
                }));
                if slept >= total {
                    return Ok(json!({"slept_s": seconds}));
                }
            }
            _ = ctx.cancellation().cancelled() => {
                return Err(TaskError::new("CancelledError", "cancelled"));
            }
        }
    }
}

/// The demo worker: one execution source per task on the same backend.
fn worker(backend: &SqliteExecutionBackend, retry_delay: Duration) -> anyhow::Result<OneStepApp> {
    let source = |task: &str| -> anyhow::Result<Arc<ExecutionSource<SqliteExecutionBackend>>> {
        let mut o = ExecutionSourceOptions::new(NAMESPACE, task);
        o.poll_interval = Duration::from_millis(100);
        o.lease_duration = Duration::from_secs(15);
        o.heartbeat_interval = Duration::from_millis(250);
        o.worker_id = "quickstart-worker".into();
        Ok(Arc::new(ExecutionSource::new(backend.clone(), o)?))
    };
    Ok(OneStepApp::builder("quickstart")
        .shutdown_timeout(Some(Duration::from_secs(2)))
        .task(
            Task::new("hello")
                .source(source("hello")?)
                .concurrency(4)
                .handler(hello),
        )
        .task(
            Task::new("flaky")
                .source(source("flaky")?)
                .retry(MaxAttempts::new(3)?.with_delay(retry_delay))
                .handler(flaky),
        )
        .task(
            Task::new("always_fails")
                .source(source("always_fails")?)
                .retry(MaxAttempts::new(2)?)
                .handler(always_fails),
        )
        .task(
            Task::new("sleep")
                .source(source("sleep")?)
                .concurrency(4)
                .handler(sleep),
        )
        .build()?)
}

struct Running {
    addr: String,
    client: ExecutionClient<SqliteExecutionBackend>,
    worker: AppHandle,
    worker_task: tokio::task::JoinHandle<onestep_core::Result<()>>,
    api_stop: tokio::sync::oneshot::Sender<()>,
    api_task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(
    listen: &str,
    db: &std::path::Path,
    retry_delay: Duration,
) -> anyhow::Result<Running> {
    let dsn = format!("sqlite://{}", db.display());
    let backend = SqliteExecutionBackend::new(&dsn, BackendOptions::default())?;
    let client = ExecutionClient::new(backend.clone(), NAMESPACE)?;
    client.open().await?;
    let demo_client = client.clone();
    let listener = onestep_http::bind(listen).await?;
    let addr = listener.local_addr()?.to_string();
    let (api_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let dashboard = Dashboard::new(backend.clone(), NAMESPACE)?
        .prefix(DASHBOARD)?
        .refresh_every(Duration::from_secs(2))
        .router();
    let router = ExecutionApi::new(client)
        .allow_tasks(TASKS)
        .router()
        .merge(dashboard);
    let api_task = tokio::spawn(onestep_http::serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let app = worker(&backend, retry_delay)?;
    let handle = app.handle();
    let worker_task = tokio::spawn(async move { app.serve().await });
    Ok(Running {
        addr,
        client: demo_client,
        worker: handle,
        worker_task,
        api_stop,
        api_task,
    })
}

impl Running {
    async fn stop(self) -> anyhow::Result<()> {
        self.worker.request_shutdown();
        self.worker_task.await??;
        let _ = self.api_stop.send(());
        self.api_task.await??;
        Ok(())
    }
}

/// Submits demo executions until aborted: about one a second, cycling through the tasks (a
/// greeting most often, now and then one that retries, fails, or sleeps a few seconds).
async fn demo(client: ExecutionClient<SqliteExecutionBackend>) {
    let names = ["ada", "grace", "edsger", "barbara", "alan"];
    for n in 0usize.. {
        let (task, payload) = match n % 10 {
            3 => ("flaky", json!({})),
            6 => ("sleep", json!({"seconds": 3 + n % 5})),
            9 => ("always_fails", json!({})),
            _ => ("hello", json!({"name": names[n % names.len()]})),
        };
        let mut options = onestep_core::execution::SubmitOptions::default();
        options.metadata.insert("source".into(), json!("demo"));
        if let Err(e) = client.submit(task, &payload, options).await {
            tracing::warn!(error = %e, "demo submission failed");
        }
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
}

/// What the banner says about the database: where it is and what earlier runs left in it.
struct DbState {
    path: PathBuf,
    earlier: usize,
    unfinished: usize,
}

/// Counts what earlier runs left in the quickstart's namespace.
async fn db_state(db: &std::path::Path) -> anyhow::Result<DbState> {
    let path = std::path::absolute(db).unwrap_or_else(|_| db.to_path_buf());
    let dsn = format!("sqlite://{}", db.display());
    let backend = SqliteExecutionBackend::new(&dsn, BackendOptions::default())?;
    let stats = backend.stats(Some(NAMESPACE)).await?;
    let _ = backend.close().await;
    let earlier = stats.iter().map(|s| s.count).sum();
    let unfinished = stats
        .iter()
        .filter(|s| !s.status.is_terminal())
        .map(|s| s.count)
        .sum();
    Ok(DbState {
        path,
        earlier,
        unfinished,
    })
}

/// Removes the database file and its WAL and shared-memory files.
fn remove_db(db: &std::path::Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("cannot remove {}: {e}", PathBuf::from(name).display()),
        }
    }
    Ok(())
}

fn curl_help(addr: &str, state: &DbState, run: &str) -> String {
    let kept = match (state.earlier, state.unfinished) {
        (0, _) => "empty".to_owned(),
        (n, 0) => format!("{n} execution(s) from earlier runs"),
        (n, u) => format!(
            "{n} execution(s) from earlier runs, {u} of them unfinished: they run again now"
        ),
    };
    format!(
        r#"onestep quickstart: API on http://{addr}, worker running tasks {tasks:?}.
Dashboard: http://{addr}{DASHBOARD}/  (open it in a browser; no sign-in, it listens on {addr} only)
State: {db} ({kept}); kept between runs, `--fresh` starts empty.

Try (keys end in this run's "{run}", so they are new):
  # submit (202 + an execution id); repeat with the same key: same id
  ID=$(curl -s -X POST http://{addr}/v1/executions -H 'Idempotency-Key: demo-{run}-1' \
       -H 'Content-Type: application/json' -d '{{"task_name": "hello", "payload": {{"name": "ada"}}}}' \
       | sed 's/.*"id":"\([^"]*\)".*/\1/'); echo $ID
  # status and result
  curl -s http://{addr}/v1/executions/$ID
  curl -s http://{addr}/v1/executions/$ID/result
  # a task that fails once, then succeeds; one that always fails
  curl -s -X POST http://{addr}/v1/executions -H 'Idempotency-Key: demo-{run}-2' -H 'Content-Type: application/json' -d '{{"task_name": "flaky", "payload": {{}}}}'
  curl -s -X POST http://{addr}/v1/executions -H 'Idempotency-Key: demo-{run}-3' -H 'Content-Type: application/json' -d '{{"task_name": "always_fails", "payload": {{}}}}'
  # a long task, then cancel it
  ID=$(curl -s -X POST http://{addr}/v1/executions -H 'Idempotency-Key: demo-{run}-4' -H 'Content-Type: application/json' \
       -d '{{"task_name": "sleep", "payload": {{"seconds": 300}}}}' | sed 's/.*"id":"\([^"]*\)".*/\1/')
  curl -s -X POST http://{addr}/v1/executions/$ID/cancel -H 'Content-Type: application/json' -d '{{"reason": "changed my mind"}}'
  # newest first, two at a time
  curl -s 'http://{addr}/v1/executions?limit=2'

Ctrl-C stops API and worker gracefully."#,
        tasks = TASKS,
        db = state.path.display(),
    )
}

/// Runs the quickstart or the tour.
pub async fn run(args: QuickstartArgs) -> u8 {
    if args.tour {
        return match tour().await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("tour failed: {e}");
                1
            }
        };
    }
    crate::logging::init("warning", "text");
    let prepared = async {
        if args.fresh {
            remove_db(&args.db)?;
        }
        let state = db_state(&args.db).await?;
        let running = start(&args.listen, &args.db, Duration::from_secs(1)).await?;
        anyhow::Ok((state, running))
    };
    let (state, running) = match prepared.await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("onestep quickstart: {e}");
            return 1;
        }
    };
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..6].to_owned();
    println!("{}", curl_help(&running.addr, &state, &run_id));
    if !args.no_demo {
        println!("Demo executions are being submitted (`--no-demo` stops that).");
    }
    let demo = (!args.no_demo).then(|| tokio::spawn(demo(running.client.clone())));
    super::serve::shutdown_signal().await;
    if let Some(demo) = demo {
        demo.abort();
    }
    println!("stopping…");
    match running.stop().await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("onestep quickstart: {e}");
            1
        }
    }
}

struct Tour {
    addr: String,
}

impl Tour {
    async fn submit(&self, key: &str, task: &str, payload: Value) -> anyhow::Result<Reply> {
        let body = json!({"task_name": task, "payload": payload});
        Ok(request(
            &self.addr,
            "POST",
            "/v1/executions",
            &[("Idempotency-Key", key)],
            Some(&body),
        )
        .await?)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        Ok(request(&self.addr, "GET", path, &[], None).await?)
    }

    /// Polls until the execution reaches `wanted`, printing each status change.
    async fn follow(&self, id: &str, wanted: &str) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        loop {
            let r = self.get(&format!("/v1/executions/{id}")).await?;
            let status = r.body["status"].as_str().unwrap_or_default().to_string();
            if status != last {
                println!("    {id} -> {status} (attempts {})", r.body["attempts"]);
                last = status.clone();
            }
            if status == wanted {
                return Ok(r.body);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{id} did not reach {wanted} (last {status})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn check(ok: bool, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(ok, "{what}");
    println!("  ok: {what}");
    Ok(())
}

async fn tour() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("onestep-tour-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let running = start(
        "127.0.0.1:0",
        &dir.join("tour.db"),
        Duration::from_millis(200),
    )
    .await?;
    let t = Tour {
        addr: running.addr.clone(),
    };
    println!(
        "tour: API on http://{} with a worker on {}",
        t.addr,
        dir.join("tour.db").display()
    );
    let outcome = steps(&t).await;
    running.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    outcome?;
    println!("tour: every step behaved as documented");
    Ok(())
}

async fn steps(t: &Tour) -> anyhow::Result<()> {
    println!("1. success");
    let r = t
        .submit("tour-hello", "hello", json!({"name": "ada"}))
        .await?;
    check(r.status == 202, "submit answers 202 with an id")?;
    let id = r.body["id"].as_str().unwrap_or_default().to_string();
    t.follow(&id, "succeeded").await?;
    let result = t.get(&format!("/v1/executions/{id}/result")).await?;
    check(
        result.body["result"]["greeting"] == "hello, ada",
        "the result is the handler's return value",
    )?;

    println!("2. retry, then success");
    let r = t.submit("tour-flaky", "flaky", json!({})).await?;
    let flaky = t
        .follow(r.body["id"].as_str().unwrap_or_default(), "succeeded")
        .await?;
    check(flaky["attempts"] == 2, "the second attempt succeeded")?;

    println!("3. final failure");
    let r = t.submit("tour-fail", "always_fails", json!({})).await?;
    let fid = r.body["id"].as_str().unwrap_or_default().to_string();
    let failed = t.follow(&fid, "failed").await?;
    check(
        failed["error"]["exception_type"] == "ValueError",
        "the error detail says ValueError",
    )?;
    check(
        t.get(&format!("/v1/executions/{fid}/result")).await?.status == 422,
        "its result answers 422",
    )?;

    println!("4. cancel a long task");
    let r = t
        .submit("tour-sleep", "sleep", json!({"seconds": 60}))
        .await?;
    let sid = r.body["id"].as_str().unwrap_or_default().to_string();
    t.follow(&sid, "running").await?;
    let c = request(
        &t.addr,
        "POST",
        &format!("/v1/executions/{sid}/cancel"),
        &[],
        Some(&json!({"reason": "tour"})),
    )
    .await?;
    check(
        c.body["status"] == "cancel_requested",
        "cancel of a running task is cooperative",
    )?;
    t.follow(&sid, "cancelled").await?;

    println!("5. duplicate submit");
    let again = t
        .submit("tour-hello", "hello", json!({"name": "ada"}))
        .await?;
    check(
        again.body["id"].as_str() == Some(id.as_str()),
        "the same key and body return the same id",
    )?;

    println!("6. conflicting submit");
    let conflict = t
        .submit("tour-hello", "hello", json!({"name": "grace"}))
        .await?;
    check(
        conflict.status == 409,
        "the same key with another body answers 409",
    )?;

    println!("7. two pages of listing");
    let first = t.get("/v1/executions?limit=2").await?;
    let cursor = first.body["next_cursor"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    check(
        first.body["items"].as_array().is_some_and(|i| i.len() == 2) && !cursor.is_empty(),
        "page 1 has 2 items and a cursor",
    )?;
    let second = t
        .get(&format!("/v1/executions?limit=2&cursor={cursor}"))
        .await?;
    let ids: Vec<&str> = first.body["items"]
        .as_array()
        .into_iter()
        .chain(second.body["items"].as_array())
        .flatten()
        .filter_map(|i| i["id"].as_str())
        .collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    check(
        ids.len() == 4 && unique.len() == 4,
        "page 2 continues without duplicates (4 executions in all)",
    )?;
    Ok(())
}

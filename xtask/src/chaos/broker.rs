//! Fault 8: restart the broker under a queue source. A worker drains `n` messages from a
//! throwaway broker the suite owns (Redis with every write on disk, `examples/stream_worker.rs`;
//! RabbitMQ with a durable queue of persistent, confirmed messages,
//! `examples/queue_worker.rs --publish`), recording each handled message's id; the broker is
//! stopped for a few seconds a third of the way through and started again. The worker must
//! reconnect and go on: every message handled (lost = 0), duplicates counted (at least once
//! allows a message whose ack the restart swallowed to run again).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::wait_until;
use crate::sys;
use crate::url::DbUrl;

/// The two workers, built.
pub struct Workers {
    redis: PathBuf,
    rabbitmq: PathBuf,
}

/// Builds the workers (the brokers' crash-test examples).
pub fn build() -> Result<Workers> {
    let mut built = Vec::new();
    for (package, example) in [
        ("onestep-redis", "stream_worker"),
        ("onestep-rabbitmq", "queue_worker"),
    ] {
        crate::cargo(&["build", "-p", package, "--example", example], &[])?;
        let path = crate::target_dir().join("debug/examples").join(example);
        if !path.is_file() {
            bail!("the build finished but {} is missing", path.display());
        }
        built.push(path);
    }
    let rabbitmq = built.pop().context("two workers")?;
    let redis = built.pop().context("two workers")?;
    Ok(Workers { redis, rabbitmq })
}

/// Starts `cmd` (its stderr into `log`) and waits for its `ready` line.
fn start_worker(mut cmd: Command, log: &Path) -> Result<Child> {
    let log = std::fs::File::create(log)
        .with_context(|| format!("could not create {}", log.display()))?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("could not start the worker")?;
    let mut line = String::new();
    if let Some(out) = child.stdout.as_mut() {
        BufReader::new(out).read_line(&mut line)?;
    }
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        bail!("the worker did not start");
    }
    Ok(child)
}

/// Drives one restart: waits for a third of `n`, restarts, waits for all; reads the handled
/// ids with `effects`. Returns the report (with how many were handled when the restart began,
/// which shows that it fell mid-drain).
fn drive(
    backend: &str,
    n: usize,
    restart: &dyn Fn(Duration) -> Result<()>,
    (mut child, log): (Child, &Path),
    mut effects: impl FnMut() -> Vec<i64>,
) -> Result<Value> {
    let started = Instant::now();
    let result = (|| {
        let unique = |ids: &[i64]| ids.iter().collect::<HashSet<_>>().len();
        wait_until("a third of the messages", Duration::from_secs(60), || {
            unique(&effects()) >= n / 3
        })?;
        let before = unique(&effects());
        let down = Instant::now();
        restart(Duration::from_secs(2))?;
        let outage = down.elapsed().as_secs_f64();
        let back = Instant::now();
        let mut handled = 0;
        wait_until(
            "every message after the restart",
            Duration::from_secs(120),
            || {
                handled = unique(&effects());
                handled >= n
            },
        )
        .with_context(|| {
            format!(
                "{handled} of {n} handled; the worker's log:\n{}",
                sys::file_tail(log, 20)
            )
        })?;
        let recovery = back.elapsed().as_secs_f64();
        // Late duplicates would show within a poll or two.
        std::thread::sleep(Duration::from_millis(500));
        let all = effects();
        Ok::<_, anyhow::Error>((before, outage, recovery, all.len(), unique(&all)))
    })();
    let _ = child.kill();
    let _ = child.wait();
    let (before, outage, recovery, total, unique) = result?;
    let lost = n.saturating_sub(unique);
    let report = json!({
        "backend": backend,
        "fault": "broker restart under its queue source",
        "executions": n,
        "injected": format!("1 restart ({outage:.1} s down)"),
        "handled_before_restart": before,
        "lost": lost,
        "succeeded": unique,
        "duplicated_effects": total - unique,
        "recovery_s": recovery,
        "total_s": started.elapsed().as_secs_f64(),
    });
    println!("xtask: chaos {backend} broker restart: {report}");
    if lost != 0 {
        bail!("the {backend} source lost {lost} of {n} messages across a broker restart");
    }
    Ok(report)
}

/// The fault on Redis: a stream of `n` entries read by a consumer group.
pub fn redis(workers: &Workers, dir: &Path, n: usize) -> Result<Value> {
    let server = crate::throwaway::redis::Throwaway::start(&dir.join("restart-redis"))?;
    let outcome = (|| {
        let url = DbUrl::parse(&server.url())?;
        let stream = format!("chaos:{}", sys::random_hex(4)?);
        let adds: String = (1..=n)
            .map(|i| {
                format!(
                    "XADD {stream} * body '{{\"body\": {{\"id\": {i}}}, \"meta\": {{}}, \"attempts\": 0}}'\n"
                )
            })
            .collect();
        redis_cli(&url, &adds)?;
        let mut worker = Command::new(&workers.redis);
        worker.args([
            "--url",
            &server.url(),
            "--stream",
            &stream,
            "--consumer",
            "c1",
        ]);
        let log = dir.join(format!("{}.log", stream.replace(':', "-")));
        let child = start_worker(worker, &log)?;
        let effects_key = format!("{stream}:effects");
        drive(
            "redis",
            n,
            &|down| server.restart(down),
            (child, &log),
            || {
                redis_cli(&url, &format!("LRANGE {effects_key} 0 -1\n"))
                    .map(|out| out.lines().filter_map(|l| l.trim().parse().ok()).collect())
                    .unwrap_or_default()
            },
        )
    })();
    let stopped = server.stop();
    let report = outcome?;
    stopped?;
    Ok(report)
}

/// Runs `commands` (one per line) through `redis-cli` against `url`.
fn redis_cli(url: &DbUrl, commands: &str) -> Result<String> {
    let client = crate::redis::client().context("redis-cli is not installed")?;
    let mut cmd = Command::new(client);
    cmd.args(["-u", &url.to_string()]);
    sys::run_with_input(&mut cmd, commands)
}

/// The fault on RabbitMQ: a durable queue of `n` persistent messages.
pub fn rabbitmq(workers: &Workers, dir: &Path, n: usize) -> Result<Value> {
    let server = crate::throwaway::rabbitmq::Throwaway::start(&dir.join("restart-rabbitmq"))?;
    let outcome = (|| {
        let queue = format!("chaos.{}", sys::random_hex(4)?);
        let effects = dir.join(format!("{queue}.effects"));
        let mut worker = Command::new(&workers.rabbitmq);
        worker
            .args(["--url", &server.url(), "--queue", &queue, "--effects"])
            .arg(&effects)
            .args(["--publish", &n.to_string()]);
        let log = dir.join(format!("{queue}.log"));
        let child = start_worker(worker, &log)?;
        drive(
            "rabbitmq",
            n,
            &|down| server.restart(down),
            (child, &log),
            || {
                std::fs::read_to_string(&effects)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect()
            },
        )
    })();
    let stopped = server.stop();
    let report = outcome?;
    stopped?;
    Ok(report)
}

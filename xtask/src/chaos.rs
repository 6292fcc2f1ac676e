//! `cargo xtask chaos`: the fault suite of `docs/reliability.md`.
//!
//! Builds the `chaos` example of onestep-sql (debug; the tests already built its dependencies)
//! and runs each fault as separate worker *processes* against real servers, then checks the
//! tables with `chaos verify`: every execution terminal and none lost, only the allowed end
//! states, exactly one accepted completion per succeeded execution (and its side effect), attempt
//! numbers contiguous, no two live leases, duplicated side effects ≤ reclaimed attempts.
//!
//! Faults, on PostgreSQL, MariaDB and SQLite unless noted:
//! 1. `kill`: SIGKILL a worker (with the adaptive prefetch buffer) in the middle of a drain,
//!    then start a new one.
//! 2. `restart` (PostgreSQL and MariaDB, each a throwaway server this run owns): stop the server
//!    in the middle of a drain for 8 s and start it again; the worker (with the adaptive
//!    prefetch buffer) keeps running and finishes, and `onestep serve` answers 200 or 503
//!    throughout.
//! 3. `contention`: four worker processes drain one table.
//! 4. `kill-storm` (PostgreSQL, MariaDB): terminate every client connection every 300 ms while
//!    two workers claim and complete.
//! 5. `cancel-storm`: cancel a random half at random moments during the drain.
//! 6. `skew`: two workers whose clocks differ by half the safe bound (no lease may be taken
//!    from a live holder), then by more than the lease (leases are stolen, fencing must hold).
//! 7. `binlog-restart` (MariaDB writing a row-format log, a throwaway server): restart the
//!    server under the `mysql_binlog` source mid-read; every row handled, none lost
//!    ([`binlog`]).
//!
//! `--short` (what `cargo xtask ci` runs) uses smaller counts; the results are printed as one
//! table and written to `target/chaos/<unix-seconds>.jsonl`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::kind::Kind;
use crate::servers::{Options, Servers};
use crate::sys;

mod binlog;
mod broker;

/// The faults, by the names `--only` takes.
const FAULTS: [&str; 8] = [
    "kill",
    "restart",
    "binlog-restart",
    "broker-restart",
    "contention",
    "kill-storm",
    "cancel-storm",
    "skew",
];

/// Sizes of one chaos run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Run only this fault (`kill`, `restart`, `binlog-restart`, `broker-restart`, `contention`,
    /// `kill-storm`, `cancel-storm`, `skew`).
    pub only: Option<String>,
    /// Executions of the kill, kill-storm and cancel-storm faults.
    pub n: usize,
    /// Executions of the four-worker contention fault.
    pub contention_n: usize,
    /// Executions of each clock-skew run (their handlers take 1.5 s each).
    pub skew_n: usize,
    /// Length of the kill storm and the cancel storm, in seconds.
    pub storm_s: f64,
}

impl ChaosOptions {
    /// Parses `[--short]` (CI's sizes) and `[--n N]`.
    pub fn from_args(args: &[String]) -> Result<Self> {
        let mut options = Self {
            only: None,
            n: 5_000,
            contention_n: 20_000,
            skew_n: 192,
            storm_s: 10.0,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            match flag.as_str() {
                "--short" => {
                    options = Self {
                        only: options.only,
                        n: 1_000,
                        contention_n: 2_000,
                        skew_n: 64,
                        storm_s: 3.0,
                    }
                }
                "--n" => {
                    let value = it.next().context("--n needs a value")?;
                    options.n = value.parse().ok().filter(|n| *n > 0).with_context(|| {
                        format!("--n: expected a positive integer, got {value:?}")
                    })?;
                }
                "--only" => {
                    let value = it.next().context("--only needs a fault name")?;
                    if !FAULTS.contains(&value.as_str()) {
                        bail!("--only: unknown fault {value:?} (expected one of {FAULTS:?})");
                    }
                    options.only = Some(value.clone());
                }
                other => bail!(
                    "`chaos`: unknown argument {other:?} (expected --short, --n N, --only FAULT)"
                ),
            }
        }
        Ok(options)
    }
}

/// Runs every fault with servers from `server_options`, cleaning them up whatever happens.
pub fn run(server_options: Options, options: &ChaosOptions) -> Result<()> {
    let (chaos, onestep) = build()?;
    let servers = Servers::provide(server_options, &Kind::DATABASES)?;
    let dir = std::env::temp_dir().join(format!("onestep-chaos-{}", sys::random_hex(6)?));
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let outcome = run_all((&chaos, &onestep), &servers, &dir, options);
    let cleaned = servers.finish();
    let _ = std::fs::remove_dir_all(&dir);
    let reports = outcome?;
    cleaned?;
    finish(&reports)
}

/// Builds the `chaos` example and the `onestep` binary; returns their paths.
pub fn build() -> Result<(PathBuf, PathBuf)> {
    crate::cargo(
        &[
            "build",
            "-p",
            "onestep-sql",
            "-p",
            "onestep-cli",
            "--example",
            "chaos",
            "--bin",
            "onestep",
        ],
        &[],
    )?;
    let debug = crate::target_dir().join("debug");
    let chaos = debug.join("examples/chaos");
    let onestep = debug.join("onestep");
    for bin in [&chaos, &onestep] {
        if !bin.is_file() {
            bail!("the build finished but {} is missing", bin.display());
        }
    }
    Ok((chaos, onestep))
}

/// Every fault on every backend; stops at the first violated invariant.
fn run_all(
    (bin, onestep): (&Path, &Path),
    servers: &Servers,
    dir: &Path,
    o: &ChaosOptions,
) -> Result<Vec<Value>> {
    let backends = [
        ("postgres", servers.url(Kind::Postgres)?),
        ("mariadb", servers.url(Kind::Mariadb)?),
        (
            "sqlite",
            format!("sqlite://{}?mode=rwc", dir.join("chaos.db").display()),
        ),
    ];
    let wanted = |fault: &str| o.only.as_deref().is_none_or(|only| only == fault);
    let mut reports = Vec::new();
    for (backend, dsn) in &backends {
        let run = Run { bin, backend, dsn };
        if wanted("kill") {
            reports.push(run.kill(o.n)?);
        }
        if wanted("contention") {
            reports.push(run.contention(o.contention_n)?);
        }
        if wanted("kill-storm") && *backend != "sqlite" {
            reports.push(run.kill_storm(o.n, o.storm_s)?);
        }
        if wanted("cancel-storm") {
            reports.push(run.cancel_storm(o.n, o.storm_s)?);
        }
        if wanted("skew") {
            reports.push(run.skew(o.skew_n, false)?);
            reports.push(run.skew(o.skew_n, true)?);
        }
    }
    if wanted("restart") {
        for kind in [Kind::Postgres, Kind::Mariadb] {
            reports.push(restart_server((bin, onestep), kind, dir, o.n)?);
        }
    }
    if wanted("binlog-restart") {
        let worker = binlog::build()?;
        reports.push(binlog::restart(&worker, dir, o.n)?);
    }
    if wanted("broker-restart") {
        let workers = broker::build()?;
        reports.push(broker::redis(&workers, dir, o.n)?);
        reports.push(broker::rabbitmq(&workers, dir, o.n)?);
    }
    Ok(reports)
}

/// Polls `done` every 50 ms until it holds; an error naming `what` after `timeout`.
fn wait_until(
    what: &str,
    timeout: std::time::Duration,
    mut done: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        if std::time::Instant::now() > deadline {
            bail!("timed out after {}s waiting for {what}", timeout.as_secs());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// Prints the table and writes the JSON lines.
fn finish(reports: &[Value]) -> Result<()> {
    let file = crate::write_jsonl("chaos", reports)?;
    println!("\n{}", table(reports));
    println!("xtask: every invariant held; results in {}", file.display());
    Ok(())
}

/// The summary table of `docs/reliability.md`.
fn table(reports: &[Value]) -> String {
    let mut out = String::from(
        "| backend | fault | executions | faults injected | lost | succeeded | cancelled | reclaimed attempts | duplicated effects | recovery s | total s |\n\
         |---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in reports {
        let v = |k: &str| r.get(k).cloned().unwrap_or(Value::Null);
        let s = |k: &str| match v(k) {
            Value::String(s) => s,
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        let f = |k: &str| {
            v(k).as_f64()
                .map_or_else(|| "-".to_string(), |x| format!("{x:.1}"))
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            s("backend"),
            s("fault"),
            s("executions"),
            s("injected"),
            s("lost"),
            s("succeeded"),
            s("cancelled"),
            s("reclaimed_attempts"),
            s("duplicated_effects"),
            f("recovery_s"),
            f("total_s"),
        ));
    }
    out
}

/// One backend's faults: the chaos binary and the DSN.
struct Run<'a> {
    bin: &'a Path,
    backend: &'a str,
    dsn: &'a str,
}

impl Run<'_> {
    /// `chaos <command> --dsn … <args>`, not yet started; its stdout is piped.
    fn command(&self, command: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin);
        cmd.arg(command)
            .args(["--dsn", self.dsn])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Runs a subcommand to its end; returns its JSON line.
    fn call(&self, command: &str, args: &[&str]) -> Result<Value> {
        let output = self
            .command(command, args)
            .output()
            .with_context(|| format!("could not run chaos {command}"))?;
        outcome(command, self.backend, output)
    }

    /// Starts a subcommand in the background.
    fn spawn(&self, command: &str, args: &[&str]) -> Result<Child> {
        self.command(command, args)
            .spawn()
            .with_context(|| format!("could not start chaos {command}"))
    }

    /// A fresh table name and its prepared executions.
    fn prepare(&self, fault: &str, n: usize) -> Result<String> {
        let table = format!("chaos_{}_{}", fault.replace('-', "_"), sys::random_hex(4)?);
        self.call("prepare", &["--table", &table, "--n", &n.to_string()])?;
        Ok(table)
    }

    /// Verifies, drops the tables, and labels the report.
    fn verify(
        &self,
        fault: &str,
        table: &str,
        n: usize,
        extra: &[&str],
        report: Value,
    ) -> Result<Value> {
        let mut args = vec!["--table", table, "--n"];
        let n_text = n.to_string();
        args.push(&n_text);
        args.extend(extra);
        let verified = self.call("verify", &args);
        self.call("drop", &["--table", table])?;
        let mut out = json!({"backend": self.backend, "fault": fault});
        merge(
            &mut out,
            verified.with_context(|| format!("{} {fault}", self.backend))?,
        );
        merge(&mut out, report);
        println!("xtask: chaos {} {fault}: {out}", self.backend);
        Ok(out)
    }

    /// Fault 1: SIGKILL a worker a third of the way through; a new worker finishes. The killed
    /// worker runs with the adaptive prefetch buffer, so what it had claimed ahead dies with it
    /// too and must be reclaimed.
    fn kill(&self, n: usize) -> Result<Value> {
        let started = Instant::now();
        let table = self.prepare("kill", n)?;
        let worker = self.spawn("work", &prefetching_drain(&table))?;
        let third = (n / 3).to_string();
        let waited = self.call("wait", &["--table", &table, "--terminal", &third]);
        let mut worker = worker;
        worker.kill().context("could not SIGKILL the worker")?;
        let _ = worker.wait();
        waited?;
        let killed_at = Instant::now();
        self.call("work", &["--table", &table, "--until-done"])?;
        let recovery = killed_at.elapsed().as_secs_f64();
        self.verify(
            "kill -9 mid-drain",
            &table,
            n,
            &[],
            json!({"injected": "1 SIGKILL", "recovery_s": recovery, "total_s": started.elapsed().as_secs_f64()}),
        )
    }

    /// Fault 3: four worker processes on one table.
    fn contention(&self, n: usize) -> Result<Value> {
        let started = Instant::now();
        let table = self.prepare("contention", n)?;
        let workers = (0..4)
            .map(|_| self.spawn("work", &["--table", &table, "--until-done"]))
            .collect::<Result<Vec<_>>>()?;
        for worker in workers {
            wait_child("work", self.backend, worker)?;
        }
        self.verify(
            "4 workers, one table",
            &table,
            n,
            &[],
            json!({"injected": "4 processes", "total_s": started.elapsed().as_secs_f64()}),
        )
    }

    /// Fault 4: terminate every client connection every 300 ms while two workers drain.
    fn kill_storm(&self, n: usize, seconds: f64) -> Result<Value> {
        let started = Instant::now();
        let table = self.prepare("kill-storm", n)?;
        let workers = (0..2)
            .map(|_| {
                self.spawn(
                    "work",
                    &["--table", &table, "--work-ms", "5", "--until-done"],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let storm = self.call(
            "kill-storm",
            &["--seconds", &seconds.to_string(), "--every-ms", "300"],
        );
        let storm_end = Instant::now();
        for worker in workers {
            wait_child("work", self.backend, worker)?;
        }
        let storm = storm?;
        let killed = storm
            .get("connections_killed")
            .cloned()
            .unwrap_or(Value::Null);
        self.verify(
            "connection kill storm",
            &table,
            n,
            &[],
            json!({
                "injected": format!("{killed} connections killed"),
                "recovery_s": storm_end.elapsed().as_secs_f64(),
                "total_s": started.elapsed().as_secs_f64(),
            }),
        )
    }

    /// Fault 5: cancel a random half at random moments while a worker drains.
    fn cancel_storm(&self, n: usize, seconds: f64) -> Result<Value> {
        let started = Instant::now();
        let table = self.prepare("cancel-storm", n)?;
        // Slow enough handlers that cancels land on queued, running and finished executions.
        let work_ms = ((seconds * 1000.0 * 16.0 / n as f64) as u64)
            .max(1)
            .to_string();
        let worker = self.spawn(
            "work",
            &["--table", &table, "--work-ms", &work_ms, "--until-done"],
        )?;
        let storm = self.call(
            "cancel-storm",
            &[
                "--table",
                &table,
                "--fraction",
                "0.5",
                "--seconds",
                &seconds.to_string(),
            ],
        );
        wait_child("work", self.backend, worker)?;
        let storm = storm?;
        let requested = storm
            .get("cancel_requested")
            .cloned()
            .unwrap_or(Value::Null);
        self.verify(
            "cancel storm",
            &table,
            n,
            &["--allow-cancelled"],
            json!({"injected": format!("{requested} cancels"), "total_s": started.elapsed().as_secs_f64()}),
        )
    }

    /// Fault 6: two workers with skewed clocks (lease 4 s, heartbeat 0.5 s, handlers 1.5 s).
    /// `beyond`: false skews by (lease − heartbeat) / 2, inside the safe bound, and requires
    /// that no lease was lost; true skews by lease + heartbeat, where leases are stolen and only
    /// fencing keeps the results right.
    fn skew(&self, n: usize, beyond: bool) -> Result<Value> {
        let started = Instant::now();
        let fault = if beyond { "skew-beyond" } else { "skew-safe" };
        let table = self.prepare(fault, n)?;
        let skew = if beyond { "4500" } else { "1750" };
        let common = [
            "--table",
            &table,
            "--lease-s",
            "4",
            "--heartbeat-s",
            "0.5",
            "--work-ms",
            "1500",
        ];
        let mut a = common.to_vec();
        a.extend(["--until-done"]);
        let mut b = a.clone();
        b.extend(["--skew-ms", skew]);
        let workers = [self.spawn("work", &a)?, self.spawn("work", &b)?];
        for worker in workers {
            wait_child("work", self.backend, worker)?;
        }
        let report = self.verify(
            if beyond { "clock skew 4.5 s (beyond the lease)" } else { "clock skew 1.75 s (safe)" },
            &table,
            n,
            &[],
            json!({"injected": format!("{skew} ms skew"), "total_s": started.elapsed().as_secs_f64()}),
        )?;
        let reclaimed = report.get("reclaimed_attempts").and_then(Value::as_i64);
        if !beyond && reclaimed != Some(0) {
            bail!(
                "{}: a clock skew inside the safe bound (lease − heartbeat) took {reclaimed:?} leases from live holders",
                self.backend
            );
        }
        Ok(report)
    }
}

/// A throwaway server this run owns and may restart.
enum Owned {
    Postgres(Box<crate::throwaway::postgres::Throwaway>),
    Mariadb(Box<crate::throwaway::mariadb::Throwaway>),
}

impl Owned {
    fn start(kind: Kind, dir: &Path) -> Result<Self> {
        Ok(match kind {
            Kind::Postgres => {
                Self::Postgres(Box::new(crate::throwaway::postgres::Throwaway::start(dir)?))
            }
            Kind::Mariadb | Kind::MariadbBinlog => Self::Mariadb(Box::new(
                crate::throwaway::mariadb::Throwaway::start(dir, kind == Kind::MariadbBinlog)?,
            )),
            Kind::Redis | Kind::Rabbitmq | Kind::Sqs => bail!(
                "the chaos suite restarts database servers only, not {}",
                kind.label()
            ),
        })
    }

    fn url(&self) -> String {
        match self {
            Self::Postgres(s) => s.url(),
            Self::Mariadb(s) => s.url(),
        }
    }

    fn restart(&self, down: std::time::Duration) -> Result<()> {
        match self {
            Self::Postgres(s) => s.restart(down),
            Self::Mariadb(s) => s.restart(down),
        }
    }

    fn stop(self) -> Result<()> {
        match self {
            Self::Postgres(s) => s.stop(),
            Self::Mariadb(s) => s.stop(),
        }
    }
}

/// Fault 2: restart a throwaway server of `kind` in the middle of a drain, with
/// `onestep serve` on the same tables probed every 100 ms: during the outage it must answer 503
/// with a detail, never another 5xx, never hang; afterwards 200 again.
fn restart_server(
    (bin, onestep): (&Path, &Path),
    kind: Kind,
    dir: &Path,
    n: usize,
) -> Result<Value> {
    let backend = match kind {
        Kind::Postgres => "postgres",
        Kind::Mariadb | Kind::MariadbBinlog => "mariadb",
        Kind::Redis => "redis",
        Kind::Rabbitmq => "rabbitmq",
        Kind::Sqs => "sqs",
    };
    let server = Owned::start(kind, &dir.join(format!("restart-{backend}")))?;
    let outcome = (|| {
        let dsn = server.url();
        let run = Run {
            bin,
            backend,
            dsn: &dsn,
        };
        let started = Instant::now();
        let table = run.prepare("restart", n)?;
        let api = Api::start(onestep, &dsn, &table)?;
        let probe = api.probe();
        // With the adaptive prefetch buffer: its refills fail during the outage too.
        let worker = run.spawn("work", &prefetching_drain(&table))?;
        let third = (n / 3).to_string();
        run.call("wait", &["--table", &table, "--terminal", &third])?;
        let down = Instant::now();
        // Longer than the pool's acquire timeout (5 s), so API requests see the outage.
        server.restart(std::time::Duration::from_secs(8))?;
        let outage = down.elapsed().as_secs_f64();
        let back = Instant::now();
        wait_child("work", backend, worker)?;
        let recovery = back.elapsed().as_secs_f64();
        let answers = probe.finish()?;
        api.stop();
        let api_report = answers.check()?;
        let mut report = json!({
            "injected": format!("1 restart ({outage:.1} s down)"),
            "recovery_s": recovery,
            "total_s": started.elapsed().as_secs_f64(),
        });
        merge(&mut report, api_report);
        run.verify("server restart mid-drain", &table, n, &[], report)
    })();
    let stopped = server.stop();
    let report = outcome?;
    stopped?;
    Ok(report)
}

/// `onestep serve` on the chaos tables.
struct Api {
    child: Child,
    addr: String,
}

impl Api {
    fn start(onestep: &Path, dsn: &str, table: &str) -> Result<Self> {
        let attempts = format!("{table}_attempts");
        let mut child = Command::new(onestep)
            .args([
                "serve",
                "--dsn",
                dsn,
                "--namespace",
                "chaos",
                "--listen",
                "127.0.0.1:0",
            ])
            .args([
                "--table",
                table,
                "--attempts-table",
                &attempts,
                "--allow-task",
                "effect",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("could not start onestep serve")?;
        let stdout = child.stdout.take().context("onestep serve has no stdout")?;
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let addr = lines.by_ref().map_while(Result::ok).find_map(|line| {
            line.strip_prefix("serving http://")
                .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
        });
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        match addr {
            Some(addr) => Ok(Self { child, addr }),
            None => {
                let _ = child.kill();
                bail!("onestep serve exited without printing its address")
            }
        }
    }

    /// Polls `GET /v1/executions?limit=1` every 100 ms on a thread until finished.
    fn probe(&self) -> Probe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let addr = self.addr.clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut answers = Answers::default();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = Instant::now();
                let answer = http_get(&addr, "/v1/executions?limit=1");
                answers.slowest_s = answers.slowest_s.max(asked.elapsed().as_secs_f64());
                answers.record(answer);
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            // After the outage: the API must serve again.
            answers.after = Some(http_get(&addr, "/v1/executions?limit=1"));
            answers
        });
        Probe { stop, thread }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Probe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Answers>,
}

impl Probe {
    fn finish(self) -> Result<Answers> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the API probe thread panicked"))
    }
}

/// What the API answered while the server restarted.
#[derive(Default)]
struct Answers {
    ok: usize,
    unavailable: usize,
    /// Anything else: other statuses, missing details, hangs, refused connections.
    wrong: Vec<String>,
    /// The longest wait for an answer, in seconds.
    slowest_s: f64,
    after: Option<Result<(u16, String), String>>,
}

impl Answers {
    fn record(&mut self, answer: Result<(u16, String), String>) {
        match answer {
            Ok((200, _)) => self.ok += 1,
            Ok((503, body)) if body.contains("\"detail\"") => self.unavailable += 1,
            Ok((status, body)) => self.wrong.push(format!("{status} {body}")),
            Err(err) => self.wrong.push(err),
        }
    }

    fn check(self) -> Result<Value> {
        if !self.wrong.is_empty() {
            bail!(
                "during the restart the API answered {} time(s) with neither 200 nor a 503 with a detail: {:?}",
                self.wrong.len(),
                &self.wrong[..self.wrong.len().min(5)]
            );
        }
        match &self.after {
            Some(Ok((200, _))) => {}
            other => bail!("after the restart the API did not answer 200: {other:?}"),
        }
        Ok(
            json!({"api_200": self.ok, "api_503": self.unavailable, "api_slowest_s": self.slowest_s}),
        )
    }
}

/// A minimal HTTP/1.1 GET with a 10 s budget: the status and the body.
fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_secs(10);
    let socket: std::net::SocketAddr = addr.parse().map_err(|e| format!("address {addr}: {e}"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&socket, timeout)
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(|e| format!("no complete answer within {timeout:?}: {e}"))?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "not an HTTP answer: {:?}",
                text.chars().take(80).collect::<String>()
            )
        })?;
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    Ok((status, body))
}

/// The arguments of `chaos work` for a worker that drains `table` to the end with 5 ms
/// handlers and the adaptive prefetch buffer (the `kill` and `restart` faults).
fn prefetching_drain(table: &str) -> [&str; 7] {
    [
        "--table",
        table,
        "--work-ms",
        "5",
        "--prefetch",
        "auto",
        "--until-done",
    ]
}

/// Waits for a background subcommand; fails with its stderr if it failed.
fn wait_child(command: &str, backend: &str, child: Child) -> Result<Value> {
    let output = child
        .wait_with_output()
        .with_context(|| format!("could not wait for chaos {command}"))?;
    outcome(command, backend, output)
}

/// The JSON line of a finished subcommand, or its failure with the end of its stderr.
fn outcome(command: &str, backend: &str, output: std::process::Output) -> Result<Value> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!(
            "chaos {command} on {backend} failed ({}):\n{}",
            output.status,
            sys::last_lines(&stderr, 30)
        );
    }
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .with_context(|| format!("chaos {command} on {backend} printed {line:?}, not JSON"))
}

/// Copies `from`'s fields into `into` (both objects).
fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_parse_and_bad_ones_name_the_flag() {
        let o = ChaosOptions::from_args(&args(&["--only", "restart", "--short"])).unwrap();
        assert_eq!((o.n, o.only.as_deref()), (1_000, Some("restart")));
        assert_eq!(ChaosOptions::from_args(&[]).unwrap().n, 5_000);
        let err = ChaosOptions::from_args(&args(&["--only", "flood"])).unwrap_err();
        assert!(err.to_string().contains("unknown fault \"flood\""), "{err}");
        let err = ChaosOptions::from_args(&args(&["--n", "0"])).unwrap_err();
        assert!(
            err.to_string().contains("--n: expected a positive integer"),
            "{err}"
        );
        let err = ChaosOptions::from_args(&args(&["--fast"])).unwrap_err();
        assert!(err.to_string().contains("unknown argument"), "{err}");
    }

    #[test]
    fn the_api_probe_accepts_only_200_and_503_with_a_detail() {
        let mut answers = Answers::default();
        answers.record(Ok((200, "{}".into())));
        answers.record(Ok((503, r#"{"detail":"store unavailable"}"#.into())));
        answers.after = Some(Ok((200, "{}".into())));
        let report = answers.check().unwrap();
        assert_eq!(
            (report["api_200"].as_u64(), report["api_503"].as_u64()),
            (Some(1), Some(1))
        );

        for wrong in [
            Ok((500, r#"{"detail":"boom"}"#.to_string())),
            Ok((503, String::new())),
            Err("connect: refused".to_string()),
        ] {
            let mut answers = Answers::default();
            answers.record(wrong);
            answers.after = Some(Ok((200, "{}".into())));
            assert!(answers.check().is_err());
        }
        let answers = Answers {
            after: Some(Ok((503, r#"{"detail":"x"}"#.into()))),
            ..Answers::default()
        };
        let err = answers.check().unwrap_err();
        assert!(err.to_string().contains("after the restart"), "{err}");
    }

    #[test]
    fn the_table_shows_one_row_per_report() {
        let report = json!({"backend": "postgres", "fault": "kill -9 mid-drain", "executions": 5000,
            "injected": "1 SIGKILL", "lost": 0, "succeeded": 5000, "cancelled": 0,
            "reclaimed_attempts": 10, "duplicated_effects": 6, "recovery_s": 3.44, "total_s": 5.7});
        let text = table(&[report]);
        assert!(
            text.contains("| postgres | kill -9 mid-drain | 5000 | 1 SIGKILL | 0 | 5000 | 0 | 10 | 6 | 3.4 | 5.7 |"),
            "{text}"
        );
    }
}

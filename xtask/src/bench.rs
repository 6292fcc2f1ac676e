//! `cargo xtask bench`: the side-by-side burn-down benchmark (figures in `docs/benchmarks.md`).
//!
//! Builds the `burndown` example once in release mode, then on every backend (PostgreSQL, MariaDB,
//! SQLite) submits `--n` executions (one by one with an idempotency key, then again with
//! `submit_many` in chunks of 1,000) and drains them with one worker process; then offers
//! `--steady-rate` submits per second for `--steady-seconds` to an idle worker, for pickup latency;
//! then submits `--n` executions over HTTP to `onestep serve` (PostgreSQL and SQLite) from 32
//! keep-alive connections (the `http_submit` example of onestep-http). On PostgreSQL and MariaDB
//! it first drains `--n` executions as bare SQL with no runtime (the `ceiling` and
//! `ceiling_mysql` examples: per batch of 100, a claim transaction and a completion transaction,
//! on two connections), the schema's ceiling that our drains on that server are compared with
//! (issue 21). Where `--prefetch` is 0 it drains the `submit_many` burn-down once more on
//! PostgreSQL and MariaDB with the adaptive prefetch buffer (`--prefetch auto`). With `--peers` it
//! runs the peer workloads of `bench/peers/run.sh` in the same session, against the same servers:
//! the Python reference (`onestep` 1.15.0 + `onestep-sql` 0.7.1) on PostgreSQL and MariaDB, and
//! graphile-worker on PostgreSQL (default settings and batched settings). Then `--rounds`
//! rounds (default 3) run each server's ceiling and our `submit_many` drain back to back, the
//! order turned round every round (two workers too with `--scale-out`), and a third table gives
//! the ratio of each round and their median (`bench/pairs.rs`).
//!
//! Every run prints one JSON line; the lines are also written to
//! `target/bench/<unix-seconds>.jsonl`, and a summary table ends the output. The machine is noisy:
//! compare ratios within one run, not absolute numbers across runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::kind::Kind;
use crate::servers::{Options, Servers};

mod ceiling;
mod pairs;
mod scale;
mod sources;
mod steal;

/// What `cargo xtask bench` was asked to do.
#[derive(Debug)]
pub struct BenchOptions {
    /// Executions per run of our own workload.
    pub n: usize,
    /// Executions per run of the Python reference (it is two orders of magnitude slower).
    pub reference_n: usize,
    /// Also run the peers.
    pub peers: bool,
    /// Worker concurrency of our runs.
    pub concurrency: usize,
    /// Claim batch size of our runs.
    pub batch: usize,
    /// Prefetch buffer of our runs' worker (`ExecutionSourceOptions::prefetch`; 0: none).
    pub prefetch: usize,
    /// Offered submits per second of the steady-state runs (pickup latency).
    pub steady_rate: usize,
    /// Length of the steady-state runs, in seconds.
    pub steady_seconds: usize,
    /// When > 0: one more burn-down per backend with this many finished executions of the same
    /// task already in the table (does the cost grow with history?).
    pub history: usize,
    /// When > 0: one more burn-down per backend with this many executions of another task
    /// running under long leases through the drain (does the cost grow with long-running work?).
    pub running: usize,
    /// Also drain the PostgreSQL burn-down with 1, 2, 4 and 8 worker apps side by side.
    pub scale_out: bool,
    /// Rounds of the paired runs: the ceiling and our `submit_many` drain back to back, their
    /// ratio's median over the rounds (`bench/pairs.rs`).
    pub rounds: usize,
}

impl BenchOptions {
    /// Parses `[--n N] [--reference-n N] [--concurrency N] [--batch N] [--prefetch N] [--steady-rate N]
    /// [--steady-seconds N] [--history N] [--running N] [--rounds N] [--peers] [--scale-out]`.
    pub fn from_args(args: &[String]) -> Result<Self> {
        let mut options = Self {
            n: 20_000,
            reference_n: 2_000,
            peers: false,
            concurrency: 64,
            batch: 100,
            prefetch: 0,
            steady_rate: 1000,
            steady_seconds: 10,
            history: 0,
            running: 0,
            scale_out: false,
            rounds: 3,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut number = |name: &str| -> Result<usize> {
                let value = it
                    .next()
                    .with_context(|| format!("{name} needs a value (a positive integer)"))?;
                match value.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => bail!("{name}: expected a positive integer, got {value:?}"),
                }
            };
            match flag.as_str() {
                "--n" => options.n = number("--n")?,
                "--reference-n" => options.reference_n = number("--reference-n")?,
                "--concurrency" => options.concurrency = number("--concurrency")?,
                "--batch" => options.batch = number("--batch")?,
                "--prefetch" => options.prefetch = number("--prefetch")?,
                "--steady-rate" => options.steady_rate = number("--steady-rate")?,
                "--steady-seconds" => options.steady_seconds = number("--steady-seconds")?,
                "--history" => options.history = number("--history")?,
                "--running" => options.running = number("--running")?,
                "--rounds" => options.rounds = number("--rounds")?,
                "--peers" => options.peers = true,
                "--scale-out" => options.scale_out = true,
                other => bail!(
                    "`bench`: unknown argument {other:?} (expected --n, --reference-n, \
                     --concurrency, --batch, --prefetch, --steady-rate, --steady-seconds, --history, \
                     --running, --rounds, --peers, --scale-out)"
                ),
            }
        }
        Ok(options)
    }
}

/// Runs the benchmark with servers from `server_options`, cleaning them up whatever happens.
pub fn run(server_options: Options, options: &BenchOptions) -> Result<()> {
    let root = crate::workspace_root();
    // Before the release build (minutes in a new checkout), not after it.
    if options.peers {
        check_peer_tools(&root)?;
    }
    crate::cargo(
        &[
            "build",
            "--release",
            "-p",
            "onestep-sql",
            "-p",
            "onestep-http",
            "-p",
            "onestep-cli",
            "-p",
            "onestep-redis",
            "-p",
            "onestep-rabbitmq",
            "-p",
            "onestep-sqs",
            "-p",
            "onestep-python",
            "--example",
            "burndown",
            "--example",
            "ceiling",
            "--example",
            "ceiling_mysql",
            "--example",
            "http_submit",
            "--example",
            "source_drain",
            "--example",
            "stream_drain",
            "--example",
            "queue_drain",
            "--example",
            "sqs_drain",
            "--example",
            "python_calls",
            "--bin",
            "onestep",
        ],
        &[],
    )?;
    let burndown = crate::target_dir().join("release/examples/burndown");
    if !burndown.is_file() {
        bail!(
            "the burndown example was built but {} is missing",
            burndown.display()
        );
    }
    // The source drains beside the reference (--peers) include the binlog source, which needs
    // a server writing a row-format binary log.
    let kinds: &[Kind] = if options.peers {
        &Kind::ALL
    } else {
        &Kind::DATABASES
    };
    let servers = Servers::provide(server_options, kinds)?;
    let outcome = run_all(&root, &burndown, &servers, options);
    let cleaned = servers.finish();
    let lines = outcome?;
    cleaned?;

    let file = crate::write_jsonl("bench", &lines)?;
    println!("\n{}", summary(&lines));
    if let Some(cost) = ceiling::server_cost(&lines) {
        println!("\n{cost}");
    }
    if let Some(rounds) = pairs::summary(&lines) {
        println!(
            "\nOur drains beside the ceiling (and the reference) in adjacent runs, round by round:\n\n{rounds}"
        );
    }
    if lines
        .iter()
        .any(|l| l.get("workload").is_some() && l.get("system").is_some())
    {
        println!("\n{}", sources::summary(&lines));
    }
    if let Some(calls) = lines
        .iter()
        .find(|l| l.get("workload").and_then(Value::as_str) == Some("python_calls"))
    {
        let us = |k: &str| calls.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
        println!(
            "\nPython handler overhead per delivery over a Rust echo (µs): async {:.0} at \
             concurrency 1, {:.0} at 16; sync {:.0} and {:.0} (Rust echo {:.1} and {:.1})",
            us("python_async_c1_overhead_us"),
            us("python_async_c16_overhead_us"),
            us("python_sync_c1_overhead_us"),
            us("python_sync_c16_overhead_us"),
            us("rust_c1_us"),
            us("rust_c16_us"),
        );
    }
    println!("xtask: results in {}", file.display());
    Ok(())
}

/// Our runs on every backend, then (optionally) the peers; each result is one JSON object.
fn run_all(
    root: &Path,
    burndown: &Path,
    servers: &Servers,
    options: &BenchOptions,
) -> Result<Vec<Value>> {
    let postgres = servers.url(Kind::Postgres)?;
    let mariadb = servers.url(Kind::Mariadb)?;
    let sqlite_dir = crate::target_dir().join("bench/sqlite");
    std::fs::create_dir_all(&sqlite_dir)
        .with_context(|| format!("could not create {}", sqlite_dir.display()))?;

    let mut lines = Vec::new();
    // The schema's bare-SQL ceilings, in the same session as our drains.
    let examples = crate::target_dir().join("release/examples");
    lines.push(ceiling::run(
        &examples.join("ceiling"),
        &postgres,
        "postgres",
        options.n,
    )?);
    lines.push(ceiling::run(
        &examples.join("ceiling_mysql"),
        &mariadb,
        "mariadb",
        options.n,
    )?);
    // (submit batch, steady rate, history, running): two burn-downs, then the steady-state run.
    let mut modes = vec![
        (0usize, 0usize, 0usize, 0usize),
        (1000, 0, 0, 0),
        (0, options.steady_rate, 0, 0),
    ];
    if options.history > 0 {
        modes.push((0, 0, options.history, 0));
    }
    if options.running > 0 {
        modes.push((0, 0, 0, options.running));
    }
    for (submit_batch, rate, history, running) in modes {
        for (label, dsn) in [
            ("postgres", postgres.clone()),
            ("mariadb", mariadb.clone()),
            ("sqlite", String::new()),
        ] {
            let sqlite_file = sqlite_dir.join(format!(
                "bench-{submit_batch}-{rate}-{history}-{running}.db"
            ));
            let dsn = if label == "sqlite" {
                remove_sqlite(&sqlite_file)?;
                format!("sqlite://{}?mode=rwc", sqlite_file.display())
            } else {
                dsn
            };
            let drain = |submit_batch: usize| {
                let mut cmd = Command::new(burndown);
                cmd.args(["--dsn", &dsn])
                    .args(["--n", &options.n.to_string()])
                    .args(["--concurrency", &options.concurrency.to_string()])
                    .args(["--batch", &options.batch.to_string()])
                    .args(["--prefetch", &options.prefetch.to_string()])
                    .args(["--submit-batch", &submit_batch.to_string()]);
                cmd
            };
            let mut cmd = drain(submit_batch);
            if rate > 0 {
                cmd.args(["--rate", &rate.to_string()])
                    .args(["--seconds", &options.steady_seconds.to_string()]);
            }
            if history > 0 {
                cmd.args(["--history", &history.to_string()]);
            }
            if running > 0 {
                cmd.args(["--running", &running.to_string()]);
            }
            let what = format!("onestep on {label}");
            lines.push(labeled_run(cmd, &what, "onestep (Rust)", label, &[])?);
            // The metrics' cost: the PostgreSQL burn-down again, right after, with the exporter
            // and a scrape every second (issue: at most 5 % slower).
            if label == "postgres" && (submit_batch, rate, history, running) == (0, 0, 0, 0) {
                let mut cmd = drain(0);
                cmd.args(["--metrics", "on"]);
                let what = "onestep on postgres with metrics";
                let system = "onestep (Rust), metrics on";
                lines.push(labeled_run(cmd, what, system, label, &[])?);
            }
            if label == "sqlite" {
                remove_sqlite(&sqlite_file)?;
            }
        }
    }
    // The claim hidden behind running work: the `submit_many` burn-down again with the adaptive
    // prefetch buffer, on the servers whose claim is a round trip away.
    if options.prefetch == 0 {
        for (label, dsn) in [("postgres", &postgres), ("mariadb", &mariadb)] {
            let mut cmd = Command::new(burndown);
            cmd.args(["--dsn", dsn.as_str()])
                .args(["--n", &options.n.to_string()])
                .args(["--concurrency", &options.concurrency.to_string()])
                .args(["--batch", &options.batch.to_string()])
                .args(["--prefetch", "auto"])
                .args(["--submit-batch", "1000"]);
            let what = format!("onestep on {label} with prefetch auto");
            lines.push(labeled_run(cmd, &what, PREFETCH_AUTO, label, &[])?);
        }
    }
    if options.scale_out {
        lines.extend(scale::run(
            burndown,
            &postgres,
            options.n,
            options.concurrency,
            options.batch,
        )?);
    }
    // The ratios to the ceilings again, from runs side by side, several rounds; with --peers,
    // to the Python reference too.
    let script = root.join("bench/peers/run.sh");
    let setup = pairs::Setup {
        burndown,
        examples: &examples,
        postgres: &postgres,
        mariadb: &mariadb,
        n: options.n,
        concurrency: options.concurrency,
        batch: options.batch,
        reference: options
            .peers
            .then_some((script.as_path(), options.reference_n)),
    };
    lines.extend(pairs::run(
        &setup,
        &pairs::pairs(options.scale_out),
        options.rounds,
    )?);
    // The API path: `onestep serve` taking submits over HTTP from 32 keep-alive connections.
    let http_submit = crate::target_dir().join("release/examples/http_submit");
    let onestep = crate::target_dir().join("release/onestep");
    for (label, dsn) in [("postgres", postgres.clone()), ("sqlite", String::new())] {
        let sqlite_file = sqlite_dir.join("bench-http.db");
        let dsn = if label == "sqlite" {
            remove_sqlite(&sqlite_file)?;
            format!("sqlite://{}?mode=rwc", sqlite_file.display())
        } else {
            dsn
        };
        let mut cmd = Command::new(&http_submit);
        cmd.arg("--onestep")
            .arg(&onestep)
            .args(["--dsn", &dsn, "--n", &options.n.to_string()])
            .args(["--concurrency", "32"]);
        let what = format!("onestep serve on {label} (HTTP submits)");
        let settings = [("settings", json!({"submit": "HTTP, 32 connections"}))];
        lines.push(labeled_run(cmd, &what, "onestep (Rust)", label, &settings)?);
        if label == "sqlite" {
            remove_sqlite(&sqlite_file)?;
        }
    }
    // What a Python handler costs over a Rust one (needs only an interpreter on PATH).
    let python_calls = crate::target_dir().join("release/examples/python_calls");
    let mut cmd = Command::new(&python_calls);
    cmd.args(["--n", "5000"]);
    let line = json_line(cmd, "Python handler calls")?;
    println!("{line}");
    lines.push(line);
    if options.peers {
        let runs = [
            ("reference", "postgres", options.reference_n, "default"),
            ("reference", "mariadb", options.reference_n, "default"),
            ("graphile", "postgres", options.n, "default"),
            ("graphile", "postgres", options.n, "batch"),
        ];
        for (peer, backend, n, mode) in runs {
            let cmd = peer_command(&script, (peer, backend, n, mode), (&postgres, &mariadb));
            let what = format!("{peer} on {backend} ({mode})");
            let system = peer_label(peer, mode);
            lines.push(labeled_run(cmd, &what, &system, backend, &[])?);
        }
        let sqlite_file = sqlite_dir.join("bench-sources.db");
        remove_sqlite(&sqlite_file)?;
        let redis_url = servers.url(Kind::Redis)?;
        let rabbitmq_url = servers.url(Kind::Rabbitmq)?;
        let sqs_url = servers.url(Kind::Sqs)?;
        let servers = [
            ("postgres", postgres.clone()),
            ("mariadb", mariadb.clone()),
            (
                "sqlite",
                format!("sqlite://{}?mode=rwc", sqlite_file.display()),
            ),
            ("mariadb-binlog", servers.url(Kind::MariadbBinlog)?),
        ];
        let drain = crate::target_dir().join("release/examples/source_drain");
        lines.extend(sources::run(root, &drain, &servers)?);
        let stream_drain = crate::target_dir().join("release/examples/stream_drain");
        lines.extend(sources::run_broker(
            root,
            (&stream_drain, "py_redis_bench.py"),
            &redis_url,
            ("redis_stream", "redis"),
            sources::N,
        )?);
        let queue_drain = crate::target_dir().join("release/examples/queue_drain");
        lines.extend(sources::run_broker(
            root,
            (&queue_drain, "py_rabbitmq_bench.py"),
            &rabbitmq_url,
            ("rabbitmq_queue", "rabbitmq"),
            sources::N,
        )?);
        let sqs_drain = crate::target_dir().join("release/examples/sqs_drain");
        lines.extend(sources::run_broker(
            root,
            (&sqs_drain, "py_sqs_bench.py"),
            &sqs_url,
            ("sqs_queue", "sqs"),
            // moto answers a ReceiveMessage in about 0.16 s: both sides drain ~45/s there, so
            // 500 keeps the pair under a minute.
            500,
        )?);
        remove_sqlite(&sqlite_file)?;
    }
    Ok(lines)
}

/// The system name of the Python reference's runs.
pub const REFERENCE: &str = "onestep (Python reference)";

/// The system name of our `submit_many` drain with the adaptive prefetch buffer.
const PREFETCH_AUTO: &str = "onestep (Rust), prefetch auto";

/// The command of one peer run (`bench/peers/run.sh`): `peer` (`reference` or `graphile`) on
/// `backend` (`postgres` or `mariadb`), `n` executions, in `mode`, against the servers at
/// `postgres` and `mariadb` (our URLs; the reference's MariaDB driver is named in its own).
pub fn peer_command(
    script: &Path,
    (peer, backend, n, mode): (&str, &str, usize, &str),
    (postgres, mariadb): (&str, &str),
) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .args([peer, backend, &n.to_string(), mode])
        .env("PG_URL", postgres)
        .env(
            "MARIADB_URL",
            mariadb.replacen("mysql://", "mysql+asyncmy://", 1),
        )
        // The build is finished and nothing else of ours runs: no need to wait.
        .env("WAIT_FOR_IDLE", "0");
    cmd
}

/// What a burn-down's tables held besides its own executions (`burndown --history` and
/// `--running`), as `, N finished rows already, M others running`; empty for neither.
pub fn already_in_the_tables(line: &Value) -> String {
    [
        ("history", "finished rows already"),
        ("running", "others running"),
    ]
    .iter()
    .filter_map(|(key, what)| match line.get(key).and_then(Value::as_u64) {
        Some(n) if n > 0 => Some(format!(", {n} {what}")),
        _ => None,
    })
    .collect()
}

/// The name a peer run gets in the summary.
fn peer_label(peer: &str, mode: &str) -> String {
    match (peer, mode) {
        ("reference", _) => REFERENCE.to_string(),
        ("graphile", "batch") => "graphile-worker (batched)".to_string(),
        ("graphile", _) => "graphile-worker (default)".to_string(),
        (other, mode) => format!("{other} ({mode})"),
    }
}

/// Runs `cmd` and parses the last line of its standard output as JSON.
/// Runs `cmd` ([`json_line`]), labels its line with `system`, `server` and the `extra` fields,
/// prints it and returns it: every run of the table goes through here.
fn labeled_run(
    cmd: Command,
    what: &str,
    system: &str,
    server: &str,
    extra: &[(&str, Value)],
) -> Result<Value> {
    let mut line = json_line(cmd, what)?;
    if let Value::Object(map) = &mut line {
        map.insert("system".into(), system.into());
        map.insert("server".into(), server.into());
        for (key, value) in extra {
            map.insert((*key).into(), value.clone());
        }
    }
    println!("{line}");
    Ok(line)
}

fn json_line(mut cmd: Command, what: &str) -> Result<Value> {
    eprintln!("xtask: bench: {what}");
    let before = steal::sample();
    let output = cmd
        .output()
        .with_context(|| format!("could not start the {what} run"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "the {what} run failed ({}):\n{}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let last = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .with_context(|| format!("the {what} run printed nothing"))?;
    let mut line: Value = serde_json::from_str(last)
        .with_context(|| format!("the {what} run printed {last:?}, expected one JSON object"))?;
    let steal = before
        .zip(steal::sample())
        .and_then(|(b, a)| steal::percent(b, a));
    if let (Value::Object(map), Some(steal)) = (&mut line, steal) {
        map.insert("steal_pct".into(), steal.into());
    }
    Ok(line)
}

/// Fails early, with the fix, when a peer run could not start.
fn check_peer_tools(root: &Path) -> Result<()> {
    let venv = root.join(".venv-ref/bin/python");
    // Every module a peer run imports, checked now rather than after the runs before it.
    let imports = "import onestep, onestep_sql, pymysqlreplication, onestep_redis, \
                   onestep_rabbitmq, onestep_sqs";
    let ready = venv.is_file()
        && Command::new(&venv)
            .args(["-c", imports])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
    if !ready {
        bail!(
            "--peers needs the Python reference and its plugins in .venv-ref ({imports} failed): \
             run `cargo xtask test` once, which creates it, or `python3 -m venv .venv-ref` and \
             `.venv-ref/bin/pip install` the packages of REQUIREMENTS in \
             crates/onestep-testkit/src/reference.rs"
        );
    }
    if !root
        .join("bench/peers/node_modules/graphile-worker")
        .is_dir()
    {
        bail!("--peers needs graphile-worker: (cd bench/peers && npm ci)");
    }
    for tool in ["node", "psql", "mysql"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            bail!("--peers needs `{tool}` on PATH");
        }
    }
    Ok(())
}

/// Removes an SQLite database file and its journal files, if present.
fn remove_sqlite(file: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let path = PathBuf::from(format!("{}{suffix}", file.display()));
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(err).with_context(|| format!("could not remove {}", path.display()));
            }
        }
    }
    Ok(())
}

/// A Markdown table of the runs: who, where, how many, submit/s and drained/s, with our drains'
/// ratios to the peers and to the bare SQL ceiling, and the host's CPU steal during each run.
fn summary(lines: &[Value]) -> String {
    let mut out = String::from(
        "| system | server | submit | n | submitted/s | drained/s | pickup p50 ms | \
         drained vs reference | drained vs graphile batched | drained vs ceiling | steal % |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let drained = |line: &Value| line.get("drain_per_s").and_then(Value::as_f64);
    let peer_drain = |system: &str, server: &str| {
        lines
            .iter()
            // A source drain (`workload`) is another workload, never a burn-down's peer.
            .find(|l| {
                l.get("workload").is_none()
                    && l.get("system").and_then(Value::as_str) == Some(system)
                    && l.get("server").and_then(Value::as_str) == Some(server)
            })
            .and_then(drained)
    };
    let ratio = |ours: Option<f64>, theirs: Option<f64>| match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
        _ => "–".to_string(),
    };
    for line in lines
        .iter()
        .filter(|l| l.get("workload").is_none() && !pairs::is_paired(l))
    {
        let text = |key: &str| line.get(key).and_then(Value::as_str).unwrap_or("?");
        let number = |key: &str| {
            line.get(key)
                .and_then(Value::as_f64)
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "–".to_string())
        };
        let steady = line.get("mode").and_then(Value::as_str) == Some("steady");
        let submit = match line.get("submit_batch").and_then(Value::as_u64) {
            _ if steady => format!(
                "steady {}/s",
                line.get("rate").and_then(Value::as_u64).unwrap_or_default()
            ),
            Some(0) => format!("one by one{}", already_in_the_tables(line)),
            Some(n) => format!("submit_many({n})"),
            None => line
                .get("settings")
                .and_then(|s| s.get("submit"))
                .and_then(Value::as_str)
                .unwrap_or("one by one")
                .to_string(),
        };
        let percentile = |p: &str| {
            line.get("pickup_ms")
                .and_then(|l| l.get(p))
                .and_then(Value::as_f64)
        };
        let pickup = match (percentile("p50"), percentile("p99")) {
            (Some(p50), Some(p99)) if steady => format!("{p50:.1} (p99 {p99:.1})"),
            (Some(p50), _) => format!("{p50:.0}"),
            _ => "–".to_string(),
        };
        let ours = text("system").starts_with("onestep (Rust)");
        let (vs_reference, vs_graphile, vs_ceiling) = if ours && !steady {
            (
                ratio(drained(line), peer_drain(REFERENCE, text("server"))),
                ratio(
                    drained(line),
                    peer_drain("graphile-worker (batched)", text("server")),
                ),
                ceiling::ratio(drained(line), ceiling::drained(lines, text("server"))),
            )
        } else {
            ("–".to_string(), "–".to_string(), "–".to_string())
        };
        let steal = line
            .get("steal_pct")
            .and_then(Value::as_f64)
            .map_or_else(|| "–".to_string(), |v| format!("{v:.0}"));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            text("system"),
            text("server"),
            submit,
            number("n"),
            number("submit_per_s"),
            number("drain_per_s"),
            pickup,
            vs_reference,
            vs_graphile,
            vs_ceiling,
            steal
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_default_and_parse() {
        let o = BenchOptions::from_args(&[]).unwrap();
        assert_eq!((o.n, o.reference_n, o.peers), (20_000, 2_000, false));
        let o = BenchOptions::from_args(&args(&["--n", "500", "--peers"])).unwrap();
        assert_eq!((o.n, o.peers), (500, true));
        assert_eq!((o.history, o.rounds), (0, 3));
        let o = BenchOptions::from_args(&args(&["--rounds", "5"])).unwrap();
        assert_eq!(o.rounds, 5);
        let o = BenchOptions::from_args(&args(&["--history", "1000000"])).unwrap();
        assert_eq!(o.history, 1_000_000);
        let o = BenchOptions::from_args(&args(&["--running", "10000"])).unwrap();
        assert_eq!(o.running, 10_000);
        assert!(!o.scale_out);
        assert!(
            BenchOptions::from_args(&args(&["--scale-out"]))
                .unwrap()
                .scale_out
        );
    }

    #[test]
    fn bad_options_name_the_flag() {
        let err = BenchOptions::from_args(&args(&["--n", "0"])).unwrap_err();
        assert!(err.to_string().contains("--n"), "{err}");
        let err = BenchOptions::from_args(&args(&["--batch"])).unwrap_err();
        assert!(err.to_string().contains("--batch needs a value"), "{err}");
        let err = BenchOptions::from_args(&args(&["--fast"])).unwrap_err();
        assert!(err.to_string().contains("unknown argument"), "{err}");
    }

    #[test]
    fn a_drain_names_what_its_tables_already_held() {
        let line = |history: u64, running: u64| serde_json::json!({"submit_batch": 0, "history": history, "running": running});
        assert_eq!(already_in_the_tables(&line(0, 0)), "");
        assert_eq!(
            already_in_the_tables(&line(1_000_000, 0)),
            ", 1000000 finished rows already"
        );
        assert_eq!(
            already_in_the_tables(&line(0, 10_000)),
            ", 10000 others running"
        );
        assert_eq!(
            already_in_the_tables(&serde_json::json!({"submit_batch": 0})),
            "",
            "lines from before --history and --running"
        );
    }

    #[test]
    fn summary_lists_ours_and_peers() {
        let ours = serde_json::json!({"system": "onestep (Rust)", "server": "postgres",
            "submit_batch": 1000, "n": 20000, "submit_per_s": 30000.0, "drain_per_s": 3000.0,
            "pickup_ms": {"p50": 12.0}});
        let peer = serde_json::json!({"system": "graphile-worker (batched)", "server": "postgres",
            "n": 20000, "submit_per_s": 41030.4, "drain_per_s": 20989.1,
            "settings": {"submit": "utils.addJobs, chunks of 5000"}});
        let steady = serde_json::json!({"system": "onestep (Rust)", "server": "postgres",
            "mode": "steady", "rate": 1000, "submit_batch": 0, "n": 10000,
            "submit_per_s": 1000.0, "drain_per_s": 990.0,
            "pickup_ms": {"p50": 2.25, "p99": 9.0}, "steal_pct": 2.6});
        let table = summary(&[ours, peer, steady]);
        assert!(table.contains("| onestep (Rust) | postgres | steady 1000/s | 10000 | 1000 | 990 | 2.2 (p99 9.0) | – | – | – | 3 |"), "{table}");
        assert!(
            table.contains(
                "| onestep (Rust) | postgres | submit_many(1000) | 20000 | 30000 | 3000 | 12 | – | 0.1× | – | – |"
            ),
            "{table}"
        );
        assert!(table.contains("| graphile-worker (batched) | postgres | utils.addJobs, chunks of 5000 | 20000 | 41030 | 20989 | – | – | – | – | – |"), "{table}");
    }

    #[test]
    fn summary_lists_the_ceilings_and_our_drains_against_the_one_of_their_server() {
        let ceiling = serde_json::json!({"system": ceiling::SYSTEM, "server": "postgres",
            "submit_batch": 1000, "n": 20000, "submit_per_s": 20000.0, "drain_per_s": 12000.0});
        let ours = serde_json::json!({"system": "onestep (Rust)", "server": "postgres",
            "submit_batch": 0, "n": 20000, "submit_per_s": 700.0, "drain_per_s": 8000.0,
            "pickup_ms": {"p50": 9000.0}});
        let mariadb = serde_json::json!({"system": "onestep (Rust)", "server": "mariadb",
            "submit_batch": 0, "n": 20000, "submit_per_s": 700.0, "drain_per_s": 4000.0,
            "pickup_ms": {"p50": 9000.0}});
        let four = serde_json::json!({"system": scale::system(4), "server": "postgres",
            "submit_batch": 1000, "n": 20000, "submit_per_s": 20000.0, "drain_per_s": 9600.0,
            "pickup_ms": {"p50": 900.0}});
        // The reference's table-queue drain on SQLite is no peer of our SQLite burn-down.
        let sqlite = serde_json::json!({"system": "onestep (Rust)", "server": "sqlite",
            "submit_batch": 0, "n": 20000, "submit_per_s": 700.0, "drain_per_s": 6000.0,
            "pickup_ms": {"p50": 9000.0}});
        let table_queue = serde_json::json!({"system": "onestep (Python reference)",
            "server": "sqlite", "workload": "table_queue", "drain_per_s": 600.0});
        let maria_ceiling = serde_json::json!({"system": ceiling::SYSTEM, "server": "mariadb",
            "submit_batch": 1000, "n": 20000, "submit_per_s": 20000.0, "drain_per_s": 10000.0});
        let maria_batched = serde_json::json!({"system": "onestep (Rust)", "server": "mariadb",
            "submit_batch": 1000, "n": 20000, "submit_per_s": 20000.0, "drain_per_s": 5500.0,
            "pickup_ms": {"p50": 900.0}});
        let table = summary(&[ceiling, ours, mariadb, four, sqlite, table_queue]);
        let with_maria_ceiling = summary(&[maria_ceiling, maria_batched]);
        assert!(
            with_maria_ceiling.contains(
                "| onestep (Rust) | mariadb | submit_many(1000) | 20000 | 20000 | 5500 | 900 | – | – | 0.55× | – |"
            ),
            "{with_maria_ceiling}"
        );
        assert!(
            table.contains(
                "| onestep (Rust) | sqlite | one by one | 20000 | 700 | 6000 | 9000 | – | – | – | – |"
            ),
            "{table}"
        );
        assert!(table.contains("| bare SQL ceiling | postgres | submit_many(1000) | 20000 | 20000 | 12000 | – | – | – | – | – |"), "{table}");
        assert!(table.contains("| onestep (Rust), 4 workers | postgres | submit_many(1000) | 20000 | 20000 | 9600 | 900 | – | – | 0.80× | – |"), "{table}");
        assert!(table.contains("| onestep (Rust) | postgres | one by one | 20000 | 700 | 8000 | 9000 | – | – | 0.67× | – |"), "{table}");
        assert!(
            table.contains(
                "| onestep (Rust) | mariadb | one by one | 20000 | 700 | 4000 | 9000 | – | – | – | – |"
            ),
            "{table}"
        );
    }
}

//! HTTP submit benchmark: starts `onestep serve` on fresh tables, submits N executions through
//! `POST /v1/executions` (an `Idempotency-Key` on each) from C keep-alive connections, and
//! prints one JSON line with submits per second and the request latency percentiles. The
//! tables are dropped at the end. `cargo xtask bench` runs it on PostgreSQL and SQLite.
//!
//! `cargo run --release -p onestep-http --example http_submit -- --onestep target/release/onestep
//! --dsn URL [--n 20000] [--concurrency 32]`

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    onestep: String,
    dsn: String,
    n: usize,
    concurrency: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        onestep: String::new(),
        dsn: String::new(),
        n: 20_000,
        concurrency: 32,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--onestep" => a.onestep = value()?,
            "--dsn" => a.dsn = value()?,
            "--n" => a.n = value()?.parse().map_err(|e| format!("--n: {e}"))?,
            "--concurrency" => {
                a.concurrency = value()?
                    .parse()
                    .map_err(|e| format!("--concurrency: {e}"))?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.onestep.is_empty() || a.dsn.is_empty() {
        return Err("--onestep (the onestep binary) and --dsn are required".into());
    }
    if a.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    Ok(a)
}

/// One keep-alive HTTP/1.1 connection that posts submits.
struct Connection {
    reader: tokio::io::BufReader<tokio::net::TcpStream>,
    addr: String,
}

impl Connection {
    async fn open(addr: &str) -> Result<Self, BoxError> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            reader: tokio::io::BufReader::new(stream),
            addr: addr.to_string(),
        })
    }

    /// Posts one submit; returns the status.
    async fn submit(&mut self, i: usize) -> Result<u16, BoxError> {
        let body = json!({"task_name": "noop", "payload": {"i": i}}).to_string();
        let request = format!(
            "POST /v1/executions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Idempotency-Key: k{i}\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).await?;
        let mut line = String::new();
        self.reader.read_line(&mut line).await?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not an HTTP status line: {line:?}"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line).await?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse()?;
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).await?;
        Ok(status)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run<D: Dialect>(a: Args) -> Result<serde_json::Value, BoxError> {
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let options = BackendOptions::default()
        .with_table(format!("httpbench{suffix}_executions"))
        .with_attempts_table(format!("httpbench{suffix}_attempts"));
    let mut serve = Command::new(&a.onestep)
        .args(["serve", "--dsn", &a.dsn, "--namespace", "bench"])
        .args([
            "--table",
            &options.table,
            "--attempts-table",
            &options.attempts_table,
        ])
        .args([
            "--allow-task",
            "noop",
            "--auto-create",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = serve.stdout.take().ok_or("onestep serve has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = lines.by_ref().map_while(Result::ok).find_map(|line| {
        line.strip_prefix("serving http://")
            .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
    });
    std::thread::spawn(move || lines.for_each(drop));
    let Some(addr) = addr else {
        let _ = serve.kill();
        return Err("onestep serve exited without printing its address".into());
    };

    let outcome = async {
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..a.concurrency {
            let addr = addr.clone();
            let (n, c) = (a.n, a.concurrency);
            workers.spawn(async move {
                let mut connection = Connection::open(&addr).await?;
                let mut latencies = Vec::new();
                for i in (w..n).step_by(c) {
                    let sent = Instant::now();
                    let status = connection.submit(i).await?;
                    if status != 201 && status != 200 && status != 202 {
                        return Err(format!("submit {i} answered {status}").into());
                    }
                    latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                }
                Ok::<_, BoxError>(latencies)
            });
        }
        let mut latencies = Vec::with_capacity(a.n);
        while let Some(done) = workers.join_next().await {
            latencies.extend(done??);
        }
        let seconds = started.elapsed().as_secs_f64();
        latencies.sort_by(f64::total_cmp);
        Ok::<_, BoxError>(json!({
            "backend": D::NAME,
            "mode": "http-submit",
            "n": a.n,
            "concurrency": a.concurrency,
            "submit_per_s": (a.n as f64 / seconds).round(),
            "request_ms": {
                "p50": percentile(&latencies, 0.5),
                "p95": percentile(&latencies, 0.95),
                "p99": percentile(&latencies, 0.99),
            },
        }))
    }
    .await;
    let _ = serve.kill();
    let _ = serve.wait();

    // Leave nothing behind: drop the run's tables (attempts first; they reference executions).
    let backend = SqlExecutionBackend::<D>::new(&a.dsn, options.clone())?;
    let pool = backend.connector().pool()?;
    for table in [&options.attempts_table, &options.table] {
        let mut tx = D::begin(&pool).await?;
        D::execute(
            &mut tx,
            &format!("DROP TABLE IF EXISTS {}", D::quote(table)),
            Vec::new(),
        )
        .await?;
        tx.commit().await?;
    }
    backend.connector().close().await;
    outcome
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("http_submit: {e}");
            std::process::exit(2);
        }
    };
    let scheme = a.dsn.split(':').next().unwrap_or_default().to_string();
    let out = match scheme.as_str() {
        "postgres" | "postgresql" => run::<onestep_sql::postgres::Postgres>(a).await,
        "sqlite" => run::<onestep_sql::sqlite::Sqlite>(a).await,
        other => {
            eprintln!("http_submit: unsupported scheme {other} (postgres or sqlite)");
            std::process::exit(2);
        }
    };
    match out {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("http_submit: {e}");
            std::process::exit(1);
        }
    }
    // Give the killed server's port a moment before the next run binds one.
    tokio::time::sleep(Duration::from_millis(100)).await;
}

//! Fault 7: restart the server under the `mysql_binlog` source. A worker
//! (`examples/source_crash.rs --source binlog`) reads the inserts of a table from a throwaway
//! MariaDB writing a row-format binary log, recording each handled row; the server is shut down
//! for a few seconds a third of the way through and started again. The worker must reconnect
//! and read on from where it was: every row handled, none twice beyond what at-least-once
//! allows (none here, as the worker itself survives).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::mariadb::query;

use super::wait_until;
use crate::sys;
use crate::throwaway::mariadb::Throwaway;
use crate::url::DbUrl;

/// Rows per insert statement, so the log position moves on as rows are handled.
const PER_STATEMENT: usize = 10;

/// Builds the worker (the `source_crash` example); returns its path.
pub fn build() -> Result<std::path::PathBuf> {
    crate::cargo(
        &["build", "-p", "onestep-sql", "--example", "source_crash"],
        &[],
    )?;
    let worker = crate::target_dir().join("debug/examples/source_crash");
    if !worker.is_file() {
        bail!("the build finished but {} is missing", worker.display());
    }
    Ok(worker)
}

/// `sql` in the throwaway server's chaos database (the client is given no database).
fn run(url: &DbUrl, sql: &str) -> Result<String> {
    query(url, &format!("USE onestep_chaos;\n{sql}"))
}

fn count(url: &DbUrl, sql: &str) -> Result<i64> {
    let out = run(url, sql)?;
    out.trim()
        .parse()
        .with_context(|| format!("`{sql}` answered {out:?}"))
}

/// Runs the fault with `n` rows on a throwaway server in `dir`.
pub fn restart(worker: &Path, dir: &Path, n: usize) -> Result<Value> {
    let server = Throwaway::start(&dir.join("restart-binlog"), true)?;
    let outcome = (|| {
        let started = Instant::now();
        let dsn = server.url();
        let url = DbUrl::parse(&dsn)?;
        let table = format!("chaos_binlog_{}", sys::random_hex(4)?);
        run(
            &url,
            &format!(
                "CREATE TABLE {table} (id BIGINT PRIMARY KEY, status VARCHAR(20) NOT NULL); \
                 CREATE TABLE {table}_effects (id BIGINT NOT NULL, pos BIGINT NOT NULL);"
            ),
        )?;
        // The worker's log, kept after the run (the server's directory is not) and read back
        // when it stalls.
        let logs = crate::target_dir().join("chaos");
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("could not create {}", logs.display()))?;
        let log_path = logs.join("binlog-restart-worker.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("could not create {}", log_path.display()))?;
        let mut child = Command::new(worker)
            // Slow enough (20 ms a row, 8 at once) that the restart lands mid-read, while rows
            // of a ten-row event wait in the reader.
            .args(["--dsn", &dsn, "--table", &table, "--source", "binlog"])
            .args(["--work-ms", "20"])
            .env("RUST_LOG", "onestep=debug,info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("could not start the binlog worker")?;
        let mut line = String::new();
        if let Some(out) = child.stdout.as_mut() {
            BufReader::new(out).read_line(&mut line)?;
        }
        if line.trim() != "ready" {
            let _ = child.kill();
            bail!("the binlog worker did not start");
        }
        let result = (|| {
            // Its first open saves where the log ends; the rows come after.
            let saved = format!("SELECT COUNT(*) FROM {table}_cursor");
            wait_until(
                "the worker's first position",
                Duration::from_secs(30),
                || count(&url, &saved).is_ok_and(|c| c == 1),
            )?;
            let values: Vec<String> = (1..=n).map(|i| format!("({i}, 'new')")).collect();
            let inserts: Vec<String> = values
                .chunks(PER_STATEMENT)
                .map(|chunk| format!("INSERT INTO {table} VALUES {};", chunk.join(", ")))
                .collect();
            run(&url, &inserts.join("\n"))?;
            let distinct = format!("SELECT COUNT(DISTINCT id) FROM {table}_effects");
            let third = i64::try_from(n / 3).unwrap_or(i64::MAX);
            wait_until("a third of the rows", Duration::from_secs(60), || {
                count(&url, &distinct).is_ok_and(|c| c >= third)
            })?;
            let down = Instant::now();
            server.restart(Duration::from_secs(3))?;
            let outage = down.elapsed().as_secs_f64();
            let back = Instant::now();
            let all = i64::try_from(n).unwrap_or(i64::MAX);
            wait_until(
                "every row after the restart",
                Duration::from_secs(120),
                || count(&url, &distinct).is_ok_and(|c| c >= all),
            )
            .map_err(|stalled| {
                let handled =
                    count(&url, &distinct).map_or_else(|e| e.to_string(), |c| c.to_string());
                let saved = run(&url, &format!("SELECT * FROM {table}_cursor"))
                    .unwrap_or_else(|e| e.to_string());
                anyhow::anyhow!(
                    "{stalled}: {handled} of {n} rows handled; saved position {}; the worker's \
                     log is {}, ending:\n{}",
                    saved.trim(),
                    log_path.display(),
                    sys::file_tail(&log_path, 40)
                )
            })?;
            let recovery = back.elapsed().as_secs_f64();
            // Late duplicates would show within a poll or two.
            std::thread::sleep(Duration::from_millis(500));
            let total = count(&url, &format!("SELECT COUNT(*) FROM {table}_effects"))?;
            let unique = count(&url, &distinct)?;
            Ok::<_, anyhow::Error>((outage, recovery, total, unique))
        })();
        let _ = child.kill();
        let _ = child.wait();
        let (outage, recovery, total, unique) = result?;
        let lost = i64::try_from(n).unwrap_or(i64::MAX) - unique;
        let report = json!({
            "backend": "mariadb",
            "fault": "server restart under the binlog source",
            "executions": n,
            "injected": format!("1 restart ({outage:.1} s down)"),
            "lost": lost,
            "succeeded": unique,
            "duplicated_effects": total - unique,
            "recovery_s": recovery,
            "total_s": started.elapsed().as_secs_f64(),
        });
        println!("xtask: chaos mariadb binlog restart: {report}");
        if lost != 0 {
            bail!("the binlog source lost {lost} of {n} rows across a server restart");
        }
        Ok(report)
    })();
    let stopped = server.stop();
    let report = outcome?;
    stopped?;
    Ok(report)
}

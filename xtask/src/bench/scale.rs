//! Scale-out on one server (issue 21): the PostgreSQL burn-down drained by 1, 2, 4 and 8 worker
//! apps side by side in one process (`burndown --workers K`, each with its own pool, source and
//! concurrency, standing in for separate processes; they share one tokio runtime), so the table
//! shows how the drain grows with workers and where one server stops it.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::Value;

/// Worker counts of the scale-out runs.
pub const WORKERS: [usize; 4] = [1, 2, 4, 8];

/// The system name of a scale-out line in the JSON lines and the summary table.
pub fn system(workers: usize) -> String {
    format!(
        "onestep (Rust), {workers} worker{}",
        if workers == 1 { "" } else { "s" }
    )
}

/// The `burndown` command for `n` executions submitted with `submit_many(1000)` on the server at
/// `dsn`, drained by `workers` worker apps, each with `concurrency` slots and claim `batch`.
pub fn command(
    burndown: &Path,
    dsn: &str,
    n: usize,
    (concurrency, batch): (usize, usize),
    workers: usize,
) -> Command {
    let mut cmd = Command::new(burndown);
    cmd.args(["--dsn", dsn, "--n", &n.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--batch", &batch.to_string()])
        .args(["--submit-batch", "1000"])
        .args(["--workers", &workers.to_string()]);
    cmd
}

/// Runs [`command`] once per entry of [`WORKERS`] on the PostgreSQL server at `dsn`, with each
/// worker's `concurrency` and claim `batch`; one JSON object per run.
pub fn run(
    burndown: &Path,
    dsn: &str,
    n: usize,
    concurrency: usize,
    batch: usize,
) -> Result<Vec<Value>> {
    let mut lines = Vec::with_capacity(WORKERS.len());
    for workers in WORKERS {
        let cmd = command(burndown, dsn, n, (concurrency, batch), workers);
        let what = format!("onestep on postgres, {workers} workers");
        lines.push(super::labeled_run(
            cmd,
            &what,
            &system(workers),
            "postgres",
            &[],
        )?);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_names_count_the_workers() {
        assert_eq!(system(1), "onestep (Rust), 1 worker");
        assert_eq!(system(8), "onestep (Rust), 8 workers");
    }
}

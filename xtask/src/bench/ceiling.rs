//! The bare-SQL ceilings (issue 21) beside our drains: the `ceiling` example of onestep-sql
//! drains the same burn-down as bare SQL on PostgreSQL (per batch, one claim statement and one
//! completion statement, a plain loop on each of two connections, no runtime), and
//! `ceiling_mysql` does the same on MariaDB with statements of one shape (`JSON_TABLE` over the
//! batch), so the summary can say what fraction of the schema's ceiling our worker reaches on
//! each server in the same session.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::Value;

/// The ceiling's name in the JSON lines and the summary table.
pub const SYSTEM: &str = "bare SQL ceiling";

/// Connections of the ceiling's drain, each a claim-then-complete loop.
pub const CONNECTIONS: usize = 2;

/// Executions claimed (and completed) per statement.
pub const BATCH: usize = 100;

/// Runs a ceiling example (`binary`) over `n` executions on the server at `dsn`, labelled
/// `server` (`postgres`, `mariadb`); one JSON object with `system`, `server` and `drain_per_s`.
pub fn run(binary: &Path, dsn: &str, server: &str, n: usize) -> Result<Value> {
    let mut cmd = Command::new(binary);
    cmd.args(["--dsn", dsn, "--n", &n.to_string()])
        .args(["--connections", &CONNECTIONS.to_string()])
        .args(["--batch", &BATCH.to_string()]);
    super::labeled_run(
        cmd,
        &format!("the bare SQL ceiling on {server}"),
        SYSTEM,
        server,
        &[],
    )
}

/// The ceiling's drained/s on `server` among `lines`, if it ran there.
pub fn drained(lines: &[Value], server: &str) -> Option<f64> {
    lines
        .iter()
        .find(|l| {
            !super::pairs::is_paired(l)
                && l.get("system").and_then(Value::as_str) == Some(SYSTEM)
                && l.get("server").and_then(Value::as_str) == Some(server)
        })
        .and_then(|l| l.get("drain_per_s").and_then(Value::as_f64))
}

/// `ours` as a fraction of the ceiling, with two decimals (the figures are 0.55–0.80):
/// `0.62×`, or `–` when either is missing.
pub fn ratio(ours: Option<f64>, ceiling: Option<f64>) -> String {
    match (ours, ceiling) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_string(),
    }
}

/// What each PostgreSQL drain cost per execution, counted (the ceiling's, our burn-downs' and
/// graphile-worker's `write_transactions_per_1000_executions` and `wal_bytes_per_execution`,
/// which do not move with the machine's load, and the CPU time of the client process and of the
/// whole machine, which does, and shows whether the cores were the bound), or `None` when no
/// line has the counts.
pub fn server_cost(lines: &[Value]) -> Option<String> {
    let counted: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l.get("write_transactions_per_1000_executions").is_some() && !super::pairs::is_paired(l)
        })
        .collect();
    if counted.is_empty() {
        return None;
    }
    let mut out = String::from(
        "| system | drain | write transactions per 1,000 executions | WAL bytes per execution | \
         client CPU µs per execution | machine CPU µs per execution |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for line in counted {
        let text = |k: &str| {
            line.get(k).map_or("–".to_string(), |v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        // A peer's script says what its drain was (graphile-worker's).
        let drain = match (line.get("drain_shape"), line.get("concurrency")) {
            (Some(_), _) => text("drain_shape"),
            (None, Some(c)) => format!(
                "concurrency {c}, batch {}, submit batch {}{}",
                text("batch"),
                text("submit_batch"),
                super::already_in_the_tables(line)
            ),
            (None, None) => format!(
                "{} connections, batch {}",
                text("connections"),
                text("batch")
            ),
        };
        let system = line
            .get("system")
            .and_then(Value::as_str)
            .unwrap_or("onestep (Rust)");
        out.push_str(&format!(
            "| {system} | {drain} | {} | {} | {} | {} |\n",
            text("write_transactions_per_1000_executions"),
            text("wal_bytes_per_execution"),
            text("client_cpu_us_per_execution"),
            text("machine_cpu_us_per_execution")
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_cost_table_lists_the_counted_drains_only() {
        let lines = vec![
            serde_json::json!({"system": SYSTEM, "connections": 2, "batch": 100,
                "write_transactions_per_1000_executions": 20.1, "wal_bytes_per_execution": 1530.0,
                "client_cpu_us_per_execution": 7.0, "machine_cpu_us_per_execution": 210.0}),
            serde_json::json!({"backend": "postgres", "concurrency": 64, "batch": 100, "submit_batch": 1000,
                "write_transactions_per_1000_executions": 71.5, "wal_bytes_per_execution": 2210.0}),
            serde_json::json!({"backend": "sqlite", "concurrency": 64, "batch": 100}),
            serde_json::json!({"backend": "postgres", "concurrency": 64, "batch": 100, "submit_batch": 0,
                "history": 0, "running": 10000, "write_transactions_per_1000_executions": 21.0}),
            serde_json::json!({"system": "graphile-worker (batched)",
                "drain_shape": "1 process, concurrency 24, local queue 500, batched completions",
                "write_transactions_per_1000_executions": 4.0, "wal_bytes_per_execution": 495,
                "client_cpu_us_per_execution": 43, "machine_cpu_us_per_execution": 165}),
        ];
        let table = server_cost(&lines).unwrap();
        assert!(
            table.contains(
                "| bare SQL ceiling | 2 connections, batch 100 | 20.1 | 1530.0 | 7.0 | 210.0 |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| onestep (Rust) | concurrency 64, batch 100, submit batch 1000 | 71.5 | 2210.0 | – | – |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| graphile-worker (batched) | 1 process, concurrency 24, local queue 500, batched completions | 4.0 | 495 | 43 | 165 |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| onestep (Rust) | concurrency 64, batch 100, submit batch 0, 10000 others running | 21.0 |"
            ),
            "{table}"
        );
        assert_eq!(table.lines().count(), 6, "{table}");
        assert_eq!(server_cost(&lines[2..3]), None);
    }

    #[test]
    fn the_ratio_has_two_decimals_and_a_dash_when_missing() {
        assert_eq!(ratio(Some(9_000.0), Some(14_000.0)), "0.64×");
        assert_eq!(ratio(Some(9_000.0), None), "–");
        assert_eq!(ratio(None, Some(14_000.0)), "–");
        assert_eq!(ratio(Some(1.0), Some(0.0)), "–");
    }

    #[test]
    fn the_ceiling_is_found_by_system_and_server() {
        let lines = vec![
            serde_json::json!({"system": "onestep (Rust)", "server": "postgres", "drain_per_s": 9000.0}),
            serde_json::json!({"system": SYSTEM, "server": "postgres", "drain_per_s": 14000.0}),
        ];
        assert_eq!(drained(&lines, "postgres"), Some(14_000.0));
        assert_eq!(drained(&lines, "mariadb"), None);
    }
}

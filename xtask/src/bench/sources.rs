//! The SQL sources over a user's table and the Redis stream, drained side by side with the
//! reference's connectors (`cargo xtask bench --peers`): `crates/onestep-sql/examples/source_drain.rs` and
//! `bench/peers/py_source_bench.py` create the same table of rows, drain it with one worker
//! whose handler does nothing, and print one JSON line each.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::Value;

/// Rows per source drain.
pub const N: usize = 5000;

/// The table queue and incremental drains of both systems on every server (the binlog drain on
/// `mariadb-binlog`, a server writing a row-format log); each result one JSON object with
/// `system`, `server` and `workload`.
pub fn run(root: &Path, binary: &Path, servers: &[(&str, String)]) -> Result<Vec<Value>> {
    let python = root.join(".venv-ref/bin/python");
    let script = root.join("bench/peers/py_source_bench.py");
    let mut lines = Vec::new();
    for (server, dsn) in servers {
        let workloads: &[&str] = if *server == "mariadb-binlog" {
            &["binlog"]
        } else {
            &["table_queue", "incremental"]
        };
        for &workload in workloads {
            let mut ours = Command::new(binary);
            ours.args(["--dsn", dsn, "--source", workload, "--n", &N.to_string()]);
            let mut theirs = Command::new(&python);
            theirs
                .arg(&script)
                .args([workload, &sqlalchemy_url(dsn), &N.to_string()]);
            for (system, cmd) in [
                ("onestep (Rust)", ours),
                ("onestep (Python reference)", theirs),
            ] {
                let what = format!("{system} {workload} on {server}");
                let workload = [("workload", Value::from(workload))];
                lines.push(super::labeled_run(cmd, &what, system, server, &workload)?);
            }
        }
    }
    Ok(lines)
}

/// A broker drain of `n` messages: ours (`binary --url URL --n N`) beside the reference's plugin
/// (`bench/peers/<script> URL N`), each one JSON object like [`run`]'s, labelled `workload` on
/// `server` (`redis_stream` on `redis`, `rabbitmq_queue` on `rabbitmq`).
pub fn run_broker(
    root: &Path,
    (binary, script): (&Path, &str),
    url: &str,
    (workload, server): (&str, &str),
    n: usize,
) -> Result<Vec<Value>> {
    let python = root.join(".venv-ref/bin/python");
    let script = root.join("bench/peers").join(script);
    let mut ours = Command::new(binary);
    ours.args(["--url", url, "--n", &n.to_string()]);
    let mut theirs = Command::new(&python);
    theirs.arg(&script).args([url, &n.to_string()]);
    let mut lines = Vec::new();
    for (system, cmd) in [
        ("onestep (Rust)", ours),
        ("onestep (Python reference)", theirs),
    ] {
        let what = format!("{system} {workload}");
        let workload = [("workload", Value::from(workload))];
        lines.push(super::labeled_run(cmd, &what, system, server, &workload)?);
    }
    Ok(lines)
}

/// The reference's spelling of a server URL.
fn sqlalchemy_url(dsn: &str) -> String {
    if let Some(rest) = dsn.strip_prefix("postgres://") {
        format!("postgresql+psycopg://{rest}")
    } else if let Some(rest) = dsn.strip_prefix("mysql://") {
        format!("mysql+asyncmy://{rest}")
    } else if let Some(rest) = dsn.strip_prefix("sqlite://") {
        let path = rest.split('?').next().unwrap_or(rest);
        // SQLAlchemy puts the path after a third slash (four for an absolute path).
        format!("sqlite+aiosqlite:///{path}")
    } else {
        dsn.to_owned()
    }
}

/// A Markdown table of the source drains: ours beside the reference's, with the ratio.
pub fn summary(lines: &[Value]) -> String {
    let mut out = String::from(
        "| source | server | n | onestep drained/s | reference drained/s | ratio |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    let drained = |system: &str, server: &str, workload: &str| {
        lines
            .iter()
            .find(|l| {
                l.get("system").and_then(Value::as_str) == Some(system)
                    && l.get("server").and_then(Value::as_str) == Some(server)
                    && l.get("workload").and_then(Value::as_str) == Some(workload)
            })
            .and_then(|l| l.get("drain_per_s").and_then(Value::as_f64))
    };
    for line in lines.iter().filter(|l| {
        l.get("system").and_then(Value::as_str) == Some("onestep (Rust)")
            && l.get("workload").is_some()
    }) {
        let text = |key: &str| line.get(key).and_then(Value::as_str).unwrap_or("?");
        let (server, workload) = (text("server"), text("workload"));
        let ours = drained("onestep (Rust)", server, workload);
        let theirs = drained("onestep (Python reference)", server, workload);
        let show = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
        let ratio = match (ours, theirs) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.1}×", a / b),
            _ => "–".to_string(),
        };
        let n = line.get("n").and_then(Value::as_u64).unwrap_or(N as u64);
        out.push_str(&format!(
            "| {workload} | {server} | {n} | {} | {} | {ratio} |\n",
            show(ours),
            show(theirs)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_spelled_for_sqlalchemy() {
        assert_eq!(
            sqlalchemy_url("postgres://u@h:5432/db"),
            "postgresql+psycopg://u@h:5432/db"
        );
        assert_eq!(
            sqlalchemy_url("mysql://root@h/db"),
            "mysql+asyncmy://root@h/db"
        );
        assert_eq!(
            sqlalchemy_url("sqlite:///tmp/x.db?mode=rwc"),
            "sqlite+aiosqlite:////tmp/x.db"
        );
    }

    #[test]
    fn the_summary_pairs_ours_with_the_reference() {
        let lines = vec![
            serde_json::json!({"system": "onestep (Rust)", "server": "postgres", "workload": "table_queue", "drain_per_s": 4000.0}),
            serde_json::json!({"system": "onestep (Python reference)", "server": "postgres", "workload": "table_queue", "drain_per_s": 400.0}),
        ];
        let table = summary(&lines);
        assert!(
            table.contains("| table_queue | postgres | 5000 | 4000 | 400 | 10.0× |"),
            "{table}"
        );
    }
}

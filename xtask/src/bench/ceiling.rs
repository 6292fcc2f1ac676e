//! The two-statement ceiling (issue 21) beside our PostgreSQL drain: the `ceiling` example of
//! onestep-sql drains the same burn-down as bare SQL (per batch, one claim statement and one
//! completion statement, a plain loop on each of two connections, no runtime), so the summary
//! can say what fraction of the schema's ceiling our worker reaches in the same session.

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

/// Runs the ceiling example (`binary`) over `n` executions on the PostgreSQL server at `dsn`;
/// one JSON object with `system`, `server` and `drain_per_s`.
pub fn run(binary: &Path, dsn: &str, n: usize) -> Result<Value> {
    let mut cmd = Command::new(binary);
    cmd.args(["--dsn", dsn, "--n", &n.to_string()])
        .args(["--connections", &CONNECTIONS.to_string()])
        .args(["--batch", &BATCH.to_string()]);
    let mut line = super::json_line(cmd, "the bare SQL ceiling on postgres")?;
    if let Value::Object(map) = &mut line {
        map.insert("system".into(), SYSTEM.into());
        map.insert("server".into(), "postgres".into());
    }
    println!("{line}");
    Ok(line)
}

/// The ceiling's drained/s on `server` among `lines`, if it ran there.
pub fn drained(lines: &[Value], server: &str) -> Option<f64> {
    lines
        .iter()
        .find(|l| {
            l.get("system").and_then(Value::as_str) == Some(SYSTEM)
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

#[cfg(test)]
mod tests {
    use super::*;

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

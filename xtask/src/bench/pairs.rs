//! Paired rounds (issue 21): the bare-SQL ceiling and our `submit_many` burn-down run back to
//! back several times on PostgreSQL and MariaDB, the order turned round every round, and the
//! ratio is taken within each round. This machine's speed moves more within minutes than most
//! changes do (the same binary has used 109 and 259 µs of busy CPU per execution in consecutive
//! runs), so one ceiling and one drain a few minutes apart can put the ratio 0.1–0.2 off; the
//! median of ratios from adjacent runs does not move with the hour.

use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};

use super::{ceiling, scale};

/// The key that marks a paired run's line (its round, from 1); the main table leaves these out.
pub const ROUND: &str = "pair_round";

/// One paired comparison: which of our drains, on which server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair<'a> {
    /// `postgres` or `mariadb`.
    pub server: &'a str,
    /// Worker apps of our drain (`burndown --workers`).
    pub workers: usize,
}

/// Where the paired runs find their programs and servers, and what our drains look like.
pub struct Setup<'a> {
    /// The `burndown` example.
    pub burndown: &'a Path,
    /// The directory of the `ceiling` and `ceiling_mysql` examples.
    pub examples: &'a Path,
    /// The servers' URLs: PostgreSQL, then MariaDB.
    pub postgres: &'a str,
    /// See `postgres`.
    pub mariadb: &'a str,
    /// Executions per run.
    pub n: usize,
    /// Our worker's concurrency and claim batch.
    pub concurrency: usize,
    /// See `concurrency`.
    pub batch: usize,
}

impl Setup<'_> {
    /// The URL of `server` (`postgres`, else MariaDB's).
    fn dsn(&self, server: &str) -> &str {
        match server {
            "postgres" => self.postgres,
            _ => self.mariadb,
        }
    }
}

/// The comparisons of a bench run: one worker on each server, and two workers on PostgreSQL
/// when the scale-out runs are asked for too.
pub fn pairs(scale_out: bool) -> Vec<Pair<'static>> {
    let mut pairs = vec![Pair {
        server: "postgres",
        workers: 1,
    }];
    if scale_out {
        pairs.push(Pair {
            server: "postgres",
            workers: 2,
        });
    }
    pairs.push(Pair {
        server: "mariadb",
        workers: 1,
    });
    pairs
}

/// Runs `rounds` rounds; in each, every server's ceiling and its comparisons, the ceiling first
/// in odd rounds and last in even ones. Every line carries [`ROUND`].
pub fn run(setup: &Setup<'_>, pairs: &[Pair<'_>], rounds: usize) -> Result<Vec<Value>> {
    let mut lines = Vec::new();
    for round in 1..=rounds {
        for server in ["postgres", "mariadb"] {
            let ours: Vec<&Pair<'_>> = pairs.iter().filter(|p| p.server == server).collect();
            if ours.is_empty() {
                continue;
            }
            let ceiling_first = !round.is_multiple_of(2);
            if ceiling_first {
                lines.push(ceiling_run(setup, server, round)?);
            }
            for pair in &ours {
                lines.push(our_run(setup, pair, round)?);
            }
            if !ceiling_first {
                lines.push(ceiling_run(setup, server, round)?);
            }
        }
    }
    Ok(lines)
}

fn ceiling_run(setup: &Setup<'_>, server: &str, round: usize) -> Result<Value> {
    let binary = match server {
        "postgres" => "ceiling",
        _ => "ceiling_mysql",
    };
    let dsn = setup.dsn(server);
    let mut line = ceiling::run(&setup.examples.join(binary), dsn, server, setup.n)?;
    mark(&mut line, round);
    Ok(line)
}

fn our_run(setup: &Setup<'_>, pair: &Pair<'_>, round: usize) -> Result<Value> {
    let cmd = scale::command(
        setup.burndown,
        setup.dsn(pair.server),
        setup.n,
        (setup.concurrency, setup.batch),
        pair.workers,
    );
    let what = format!(
        "round {round}: onestep on {}, {} worker(s)",
        pair.server, pair.workers
    );
    let mut line = super::labeled_run(cmd, &what, &scale::system(pair.workers), pair.server, &[])?;
    mark(&mut line, round);
    Ok(line)
}

fn mark(line: &mut Value, round: usize) {
    if let Value::Object(map) = line {
        map.insert(ROUND.into(), json!(round));
    }
}

/// Whether `line` is a paired run's.
pub fn is_paired(line: &Value) -> bool {
    line.get(ROUND).is_some()
}

/// A Markdown table of the paired rounds: for each comparison, the ratio in every round and
/// their median; `None` when no line is paired.
pub fn summary(lines: &[Value]) -> Option<String> {
    let paired: Vec<&Value> = lines.iter().filter(|l| is_paired(l)).collect();
    if paired.is_empty() {
        return None;
    }
    let text = |l: &Value, k: &str| l.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let round = |l: &Value| l.get(ROUND).and_then(Value::as_u64).unwrap_or(0);
    let drained = |l: &Value| l.get("drain_per_s").and_then(Value::as_f64);
    // Our systems in the order they first ran, each with its server.
    let mut systems: Vec<(String, String)> = Vec::new();
    for l in &paired {
        let key = (text(l, "system"), text(l, "server"));
        if key.0 != ceiling::SYSTEM && !systems.contains(&key) {
            systems.push(key);
        }
    }
    let mut out = String::from(
        "| system | server | drained vs ceiling, each round (ours / ceiling drained/s) | median |\n\
         |---|---|---|---:|\n",
    );
    for (system, server) in systems {
        let mut ratios = Vec::new();
        let mut cells = Vec::new();
        for l in paired
            .iter()
            .filter(|l| text(l, "system") == system && text(l, "server") == server)
        {
            let ceiling = paired.iter().find(|c| {
                text(c, "system") == ceiling::SYSTEM
                    && text(c, "server") == server
                    && round(c) == round(l)
            });
            match (drained(l), ceiling.and_then(|c| drained(c))) {
                (Some(ours), Some(bare)) if bare > 0.0 => {
                    ratios.push(ours / bare);
                    cells.push(format!("{:.2}× ({ours:.0} / {bare:.0})", ours / bare));
                }
                _ => cells.push("–".to_string()),
            }
        }
        let median = median(&mut ratios).map_or_else(|| "–".to_string(), |m| format!("{m:.2}×"));
        out.push_str(&format!(
            "| {system} | {server} | {} | {median} |\n",
            cells.join(", ")
        ));
    }
    Some(out)
}

/// The median of `values` (the mean of the middle two for an even count), `None` if empty.
fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(system: &str, server: &str, round: u64, drained: f64) -> Value {
        json!({"system": system, "server": server, ROUND: round, "drain_per_s": drained})
    }

    #[test]
    fn the_median_takes_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [0.9, 0.7, 0.8]), Some(0.8));
        assert_eq!(median(&mut [1.0, 0.5, 0.75, 0.25]), Some(0.625));
    }

    #[test]
    fn each_round_is_compared_with_its_own_ceiling() {
        let one = scale::system(1);
        let two = scale::system(2);
        let lines = vec![
            line(ceiling::SYSTEM, "postgres", 1, 10_000.0),
            line(&one, "postgres", 1, 9_000.0),
            line(&two, "postgres", 1, 10_500.0),
            line(&one, "postgres", 2, 16_000.0),
            line(&two, "postgres", 2, 20_000.0),
            line(ceiling::SYSTEM, "postgres", 2, 20_000.0),
            line(ceiling::SYSTEM, "postgres", 3, 12_000.0),
            line(&one, "postgres", 3, 9_600.0),
            line(&two, "postgres", 3, 12_000.0),
            // An unpaired ceiling of another hour is no round's.
            json!({"system": ceiling::SYSTEM, "server": "postgres", "drain_per_s": 1.0}),
        ];
        let table = summary(&lines).unwrap();
        assert!(
            table.contains(
                "| onestep (Rust), 1 worker | postgres | 0.90× (9000 / 10000), 0.80× (16000 / 20000), \
                 0.80× (9600 / 12000) | 0.80× |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| onestep (Rust), 2 workers | postgres | 1.05× (10500 / 10000), 1.00× (20000 / 20000), 1.00× (12000 / 12000) | 1.00× |"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 4, "{table}");
        assert_eq!(summary(&lines[9..]), None);
    }

    #[test]
    fn a_round_without_its_ceiling_shows_a_dash() {
        let lines = vec![line(&scale::system(1), "mariadb", 1, 9_000.0)];
        let table = summary(&lines).unwrap();
        assert!(
            table.contains("| onestep (Rust), 1 worker | mariadb | – | – |"),
            "{table}"
        );
    }

    #[test]
    fn two_workers_are_compared_only_with_the_scale_out_runs() {
        assert_eq!(pairs(false).len(), 2);
        assert!(pairs(true).contains(&Pair {
            server: "postgres",
            workers: 2
        }));
    }
}

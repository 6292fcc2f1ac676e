//! Paired rounds (issue 21): the bare-SQL ceiling and our `submit_many` burn-down run back to
//! back several times on PostgreSQL and MariaDB, the order turned round every round, and the
//! ratio is taken within each round. This machine's speed moves more within minutes than most
//! changes do (the same binary has used 109 and 259 µs of busy CPU per execution in consecutive
//! runs), so one ceiling and one drain a few minutes apart can put the ratio 0.1–0.2 off; the
//! median of ratios from adjacent runs does not move with the hour.
//!
//! With `--peers` the Python reference runs in every round too, on the other side of our drains
//! from the ceiling, so the ratio to the reference is taken within each round as well: the
//! reference's own drain moved 112–134/s between two runs ten minutes apart.

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
    /// Each worker's slots and claim batch when not the bench's (`--concurrency`, `--batch`):
    /// see [`CEILING_SLOTS`].
    pub slots: Option<usize>,
    /// Whether the workers claim ahead with the adaptive buffer (`burndown --prefetch auto`).
    pub prefetch_auto: bool,
}

/// Slots of the worker compared with the ceiling like for like: as many as the ceiling keeps
/// executions claimed at once (its connections, each holding one claimed batch until it is
/// completed). A worker claims for free slots only, so its slots bound the executions between a
/// claim's start and their handlers' end, and every slot waits out each claim's round trip:
/// with fewer slots than the ceiling keeps claimed, a worker holds less work in flight than the
/// ceiling does (Little's law), whatever either costs. At this size the runner's claims (half
/// its slots) are as large as the ceiling's.
pub const CEILING_SLOTS: usize = ceiling::CONNECTIONS * ceiling::BATCH;

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
    /// With `--peers`: `bench/peers/run.sh` and the executions of each reference run, which
    /// then runs in every round too.
    pub reference: Option<(&'a Path, usize)>,
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

/// The comparisons of a bench run: on each server one worker with the bench's slots, the same
/// worker with `prefetch: auto`, and one with [`CEILING_SLOTS`]; and two workers on PostgreSQL
/// when the scale-out runs are asked for too.
pub fn pairs(scale_out: bool) -> Vec<Pair<'static>> {
    let worker = |server, workers, slots, prefetch_auto| Pair {
        server,
        workers,
        slots,
        prefetch_auto,
    };
    let mut pairs = vec![
        worker("postgres", 1, None, false),
        worker("postgres", 1, None, true),
        worker("postgres", 1, Some(CEILING_SLOTS), false),
    ];
    if scale_out {
        pairs.push(worker("postgres", 2, None, false));
    }
    pairs.push(worker("mariadb", 1, None, false));
    pairs.push(worker("mariadb", 1, None, true));
    pairs.push(worker("mariadb", 1, Some(CEILING_SLOTS), false));
    pairs
}

/// Runs `rounds` rounds; in each, every server's ceiling and its comparisons, the ceiling first
/// in odd rounds and last in even ones, and the reference (when set up) at the other end. Every
/// line carries [`ROUND`].
pub fn run(setup: &Setup<'_>, pairs: &[Pair<'_>], rounds: usize) -> Result<Vec<Value>> {
    let mut lines = Vec::new();
    for round in 1..=rounds {
        for server in ["postgres", "mariadb"] {
            let ours: Vec<&Pair<'_>> = pairs.iter().filter(|p| p.server == server).collect();
            if ours.is_empty() {
                continue;
            }
            let ceiling_first = !round.is_multiple_of(2);
            lines.extend(end_run(setup, server, round, ceiling_first)?);
            for pair in &ours {
                lines.push(our_run(setup, pair, round)?);
            }
            lines.extend(end_run(setup, server, round, !ceiling_first)?);
        }
    }
    Ok(lines)
}

/// The run at one end of a round's drains: the ceiling, or else the reference if set up.
fn end_run(setup: &Setup<'_>, server: &str, round: usize, ceiling: bool) -> Result<Option<Value>> {
    match (ceiling, setup.reference) {
        (true, _) => ceiling_run(setup, server, round).map(Some),
        (false, Some(reference)) => reference_run(setup, reference, server, round).map(Some),
        (false, None) => Ok(None),
    }
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

fn reference_run(
    setup: &Setup<'_>,
    (script, n): (&Path, usize),
    server: &str,
    round: usize,
) -> Result<Value> {
    let cmd = super::peer_command(
        script,
        ("reference", server, n, "default"),
        (setup.postgres, setup.mariadb),
    );
    let what = format!("round {round}: the Python reference on {server}");
    let mut line = super::labeled_run(cmd, &what, super::REFERENCE, server, &[])?;
    mark(&mut line, round);
    Ok(line)
}

fn our_run(setup: &Setup<'_>, pair: &Pair<'_>, round: usize) -> Result<Value> {
    let shape = pair
        .slots
        .map_or((setup.concurrency, setup.batch), |slots| (slots, slots));
    let mut cmd = scale::command(
        setup.burndown,
        setup.dsn(pair.server),
        setup.n,
        shape,
        pair.workers,
    );
    if pair.prefetch_auto {
        cmd.args(["--prefetch", "auto"]);
    }
    let what = format!(
        "round {round}: {} on {}, {} slots",
        system(pair),
        pair.server,
        shape.0
    );
    let mut line = super::labeled_run(cmd, &what, &system(pair), pair.server, &[])?;
    mark(&mut line, round);
    Ok(line)
}

/// The name of `pair`'s drain in the tables: [`scale::system`], then its slots when they are
/// [`CEILING_SLOTS`] and `prefetch auto` when it claims ahead.
fn system(pair: &Pair<'_>) -> String {
    let mut name = scale::system(pair.workers);
    if let Some(slots) = pair.slots {
        name.push_str(&format!(", {slots} slots"));
    }
    if pair.prefetch_auto {
        name.push_str(", prefetch auto");
    }
    name
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

/// Markdown tables of the paired rounds: for each of our drains, its ratio to the ceiling in
/// every round and their median, then the same against the reference when it ran in the rounds;
/// `None` when no line is paired.
pub fn summary(lines: &[Value]) -> Option<String> {
    let paired: Vec<&Value> = lines.iter().filter(|l| is_paired(l)).collect();
    if paired.is_empty() {
        return None;
    }
    // Our systems in the order they first ran, each with its server.
    let mut ours: Vec<(String, String)> = Vec::new();
    for l in &paired {
        let key = (text(l, "system"), text(l, "server"));
        if key.0 != ceiling::SYSTEM && key.0 != super::REFERENCE && !ours.contains(&key) {
            ours.push(key);
        }
    }
    let mut out = table(&paired, &ours, (ceiling::SYSTEM, "ceiling"), 2);
    if paired.iter().any(|l| text(l, "system") == super::REFERENCE) {
        out.push('\n');
        out.push_str(&table(&paired, &ours, (super::REFERENCE, "reference"), 1));
    }
    Some(out)
}

fn text(line: &Value, key: &str) -> String {
    line.get(key)
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

/// One table of [`summary`]: each of `ours` against the `baseline` system (its name, and the
/// word for it in the heading) of the same round and server, ratios with `digits` decimals.
fn table(
    paired: &[&Value],
    ours: &[(String, String)],
    (baseline, word): (&str, &str),
    digits: usize,
) -> String {
    let round = |l: &Value| l.get(ROUND).and_then(Value::as_u64).unwrap_or(0);
    let drained = |l: &Value| l.get("drain_per_s").and_then(Value::as_f64);
    let mut out = format!(
        "| system | server | drained vs {word}, each round (ours / {word} drained/s) | median |\n\
         |---|---|---|---:|\n",
    );
    for (system, server) in ours {
        let mut ratios = Vec::new();
        let mut cells = Vec::new();
        for l in paired
            .iter()
            .filter(|l| &text(l, "system") == system && &text(l, "server") == server)
        {
            let theirs = paired.iter().find(|c| {
                text(c, "system") == baseline
                    && &text(c, "server") == server
                    && round(c) == round(l)
            });
            match (drained(l), theirs.and_then(|c| drained(c))) {
                (Some(mine), Some(base)) if base > 0.0 => {
                    ratios.push(mine / base);
                    cells.push(format!("{:.digits$}× ({mine:.0} / {base:.0})", mine / base));
                }
                _ => cells.push("–".to_string()),
            }
        }
        let median =
            median(&mut ratios).map_or_else(|| "–".to_string(), |m| format!("{m:.digits$}×"));
        out.push_str(&format!(
            "| {system} | {server} | {} | {median} |\n",
            cells.join(", ")
        ));
    }
    out
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
    fn with_the_reference_in_the_rounds_a_second_table_compares_with_it() {
        let one = scale::system(1);
        let lines = vec![
            line(ceiling::SYSTEM, "postgres", 1, 20_000.0),
            line(&one, "postgres", 1, 16_000.0),
            line(crate::bench::REFERENCE, "postgres", 1, 125.0),
            line(crate::bench::REFERENCE, "postgres", 2, 100.0),
            line(&one, "postgres", 2, 15_000.0),
            line(ceiling::SYSTEM, "postgres", 2, 18_750.0),
        ];
        let tables = summary(&lines).unwrap();
        assert!(
            tables.contains("| onestep (Rust), 1 worker | postgres | 0.80× (16000 / 20000), 0.80× (15000 / 18750) | 0.80× |"),
            "{tables}"
        );
        assert!(
            tables.contains("| drained vs reference, each round (ours / reference drained/s) |"),
            "{tables}"
        );
        assert!(
            tables.contains("| onestep (Rust), 1 worker | postgres | 128.0× (16000 / 125), 150.0× (15000 / 100) | 139.0× |"),
            "{tables}"
        );
        // The reference is a baseline, never a row of ours.
        assert!(
            !tables.contains("| onestep (Python reference) |"),
            "{tables}"
        );
        assert_eq!(tables.lines().count(), 7, "{tables}");
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
        assert_eq!(pairs(false).len(), 6);
        let two = Pair {
            server: "postgres",
            workers: 2,
            slots: None,
            prefetch_auto: false,
        };
        assert!(pairs(true).contains(&two));
        assert!(!pairs(false).contains(&two));
    }

    #[test]
    fn each_server_has_a_worker_with_the_ceilings_slots() {
        assert_eq!(CEILING_SLOTS, 200);
        for server in ["postgres", "mariadb"] {
            let like = Pair {
                server,
                workers: 1,
                slots: Some(CEILING_SLOTS),
                prefetch_auto: false,
            };
            assert!(pairs(false).contains(&like), "{server}");
            assert_eq!(system(&like), "onestep (Rust), 1 worker, 200 slots");
        }
    }

    #[test]
    fn each_server_has_the_benchs_worker_with_prefetch_auto_too() {
        for server in ["postgres", "mariadb"] {
            let auto = Pair {
                server,
                workers: 1,
                slots: None,
                prefetch_auto: true,
            };
            assert!(pairs(false).contains(&auto), "{server}");
            assert_eq!(system(&auto), "onestep (Rust), 1 worker, prefetch auto");
        }
    }
}

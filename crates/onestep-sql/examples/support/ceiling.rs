//! What the bare-SQL ceiling examples (`ceiling`, `ceiling_mysql`) share: the command line, a
//! connection loop's count, and the untimed fill of ready executions.

use onestep_core::execution::{ExecutionBackend, ExecutionRequest, SubmitOptions};
use serde_json::json;

/// The namespace and task of the run's executions (burndown's).
pub const NAMESPACE: &str = "bench";
pub const TASK: &str = "noop";

/// An error of these examples, with its message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The command line.
pub struct Args {
    pub dsn: String,
    pub n: usize,
    pub connections: usize,
    pub batch: usize,
    /// `--combined` (PostgreSQL): each batch is completed in the transaction that claims the
    /// next, one transaction per batch instead of two.
    pub combined: bool,
    /// `--attempts` (PostgreSQL): when the attempts table is written.
    pub attempts: AttemptWrites,
    /// `--one-completer IN_FLIGHT` (PostgreSQL): the connections only claim, and one more
    /// connection completes whatever they have claimed, with at most `IN_FLIGHT` rows claimed
    /// and not yet completed: a worker's shape with no runtime.
    pub one_completer: Option<usize>,
}

/// When a drain writes its attempt rows (`--attempts`, PostgreSQL's ceiling only): the cheaper
/// schedules bound what a drain that kept less history could reach (issue 21's graphile-worker
/// arithmetic); only `at-claim` is what the reference, and our worker, write.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AttemptWrites {
    /// `at-claim` (the default): inserted `running` by the claim, updated by the completion.
    AtClaim,
    /// `at-end`: inserted once, already `succeeded`, by the completion.
    AtEnd,
    /// `none`: never written; the executions alone.
    None,
}

impl AttemptWrites {
    /// The flag's value for this schedule.
    pub fn name(self) -> &'static str {
        match self {
            AttemptWrites::AtClaim => "at-claim",
            AttemptWrites::AtEnd => "at-end",
            AttemptWrites::None => "none",
        }
    }
}

/// Reads `--dsn URL [--n 20000] [--connections 2] [--batch 100] [--combined]
/// [--attempts at-claim|at-end|none] [--one-completer IN_FLIGHT]`; the DSN must
/// start with one of `schemes`, else `wrong_scheme` is the error.
pub fn args(schemes: &[&str], wrong_scheme: &str) -> Result<Args, String> {
    let mut a = Args {
        dsn: String::new(),
        n: 20_000,
        connections: 2,
        batch: 100,
        combined: false,
        attempts: AttemptWrites::AtClaim,
        one_completer: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let value = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            match value.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "{name}: expected a positive integer, got {value:?}"
                )),
            }
        };
        match flag.as_str() {
            "--dsn" => a.dsn = it.next().ok_or("--dsn needs a value")?,
            "--n" => a.n = number("--n")?,
            "--connections" => a.connections = number("--connections")?,
            "--batch" => a.batch = number("--batch")?,
            "--combined" => a.combined = true,
            "--one-completer" => a.one_completer = Some(number("--one-completer")?),
            "--attempts" => {
                let value = it.next().ok_or("--attempts needs a value")?;
                a.attempts = [
                    AttemptWrites::AtClaim,
                    AttemptWrites::AtEnd,
                    AttemptWrites::None,
                ]
                .into_iter()
                .find(|w| w.name() == value)
                .ok_or_else(|| {
                    format!("--attempts: expected at-claim, at-end or none, got {value:?}")
                })?;
            }
            other => {
                return Err(format!(
                    "unknown flag {other} (expected --dsn, --n, --connections, --batch, \
                     --combined, --attempts, --one-completer)"
                ));
            }
        }
    }
    if a.combined && a.one_completer.is_some() {
        return Err("--combined and --one-completer are two different drains: pick one".into());
    }
    if a.one_completer.is_some_and(|cap| cap < a.batch) {
        return Err("--one-completer: expected at least --batch rows in flight".into());
    }
    if !schemes.iter().any(|s| a.dsn.starts_with(s)) {
        return Err(wrong_scheme.into());
    }
    Ok(a)
}

/// What one connection's loop did.
#[derive(Default)]
pub struct Drained {
    pub executions: usize,
    pub claims: usize,
    /// Completion statements run (a `--one-completer` drain merges claimed batches).
    pub completions: usize,
}

/// Puts `n` ready executions in `backend`'s tables, as burndown's `--submit-batch 1000` does;
/// returns how long that took, in seconds.
pub async fn fill<B: ExecutionBackend>(backend: &B, n: usize) -> Result<f64, Error> {
    let started = std::time::Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let requests = chunk
            .iter()
            .map(|i| {
                ExecutionRequest::new(
                    NAMESPACE,
                    TASK,
                    json!({"i": i}),
                    SubmitOptions::default().idempotency_key(format!("k{i}")),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        for r in backend.submit_many(requests).await? {
            r?;
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

//! The two-statement ceiling (issue 21): the burn-down's drain as bare SQL, with no runtime.
//!
//! Creates the reference tables with a random suffix through the crate's own backend (the same
//! DDL and indexes as the burndown example), puts N ready executions in them with `submit_many`
//! (not timed), then drains them with `--connections` connections, each a plain loop:
//!
//! 1. one transaction with the claim statement our PostgreSQL worker runs
//!    ([`SqlExecutionBackend::claim_to_run_in_one_statement_sql`]: a CTE that locks up to
//!    `--batch` ready rows with `FOR UPDATE SKIP LOCKED`, starts them with `UPDATE … FROM …
//!    RETURNING`, inserts their attempts and answers the columns a worker runs them with),
//!    bound as the backend binds it;
//! 2. one transaction with one statement, [`COMPLETE`], that marks the claimed executions and
//!    their attempts `succeeded` (result `{"ok": true}`) from typed arrays with
//!    `UPDATE … FROM unnest(…)`, each row fenced by its lease token;
//!
//! until a claim returns no row. No handler, no channels, no lock-and-read before the writes:
//! two statements per batch, which bounds what any worker can drain on this schema. With
//! `--combined` each batch is completed instead in the transaction that claims the next one (the
//! completion first): one transaction and one commit per batch, the shape issue 21 asks to
//! weigh. At the end
//! exactly N executions and N attempts must be `succeeded` (else it fails, leaving the tables for
//! a look), the tables are dropped, and one JSON line like burndown's is printed, with the
//! drain's write transactions and WAL bytes per execution (`support/pg_counters.rs`).
//!
//! `--attempts at-end` and `--attempts none` measure drains that keep less history than the
//! reference: the claim leaves the attempts table alone, and the completion inserts each attempt
//! once, already `succeeded` ([`COMPLETE_ATTEMPT_AT_END`]), or writes no attempt at all
//! ([`COMPLETE_EXECUTIONS_ONLY`]). They bound what an opt-in mode with fewer writes could reach
//! (issue 21's graphile-worker arithmetic, `docs/benchmarks.md`); neither is what the reference
//! or our worker writes.
//!
//! `--one-completer IN_FLIGHT` drains in a worker's shape instead: the `--connections` only
//! claim, and one more connection completes, in one transaction, every batch claimed since its
//! last, with at most `IN_FLIGHT` rows claimed and not yet completed (a worker of 128 slots
//! holds up to 384). It measures what that shape allows on this schema with no runtime: one
//! completion writer, claims decoupled from completions (which handlers of any length need).
//!
//! `cargo run --release -p onestep-sql --example ceiling -- --dsn postgres://… [--n 20000]
//! [--connections 2] [--batch 100] [--combined] [--attempts at-claim|at-end|none]
//! [--one-completer IN_FLIGHT]`

#[path = "support/allocator.rs"]
mod allocator;
#[path = "support/pg_counters.rs"]
mod pg_counters;
#[path = "support/ceiling.rs"]
mod support;

use support::{Args, AttemptWrites, Drained, Error, NAMESPACE, TASK};

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use onestep_core::execution::ExecutionBackend;
use onestep_sql::param::{PLAN_PER_CALL, is_stable};
use onestep_sql::postgres::{Postgres, PostgresExecutionBackend};
use onestep_sql::{BackendOptions, Dialect};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::types::Json;
use sqlx::{Connection, Row};
use time::OffsetDateTime;
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

/// The system name in the JSON line (and in `cargo xtask bench`'s table).
const SYSTEM: &str = "bare SQL ceiling";

/// Completes a claimed batch in one statement: the executions and their attempts from typed
/// arrays (execution ids, lease tokens, attempt ids, results), each row only while its lease
/// token still holds; returns how many rows of each table changed. Planned per call, as our
/// batched completion is (`Dialect::COMPLETE_MANY`): a plan kept from the start of the drain,
/// when the attempts table was empty, would scan it for every batch once it has grown.
const COMPLETE: &str = "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], \
$4::jsonb[]) AS v(id, token, attempt_id, result)), \
done AS (UPDATE {e} x SET status = 'succeeded', result = v.result, error = NULL, \
finished_at = CURRENT_TIMESTAMP, updated_at = CURRENT_TIMESTAMP, version = x.version + 1, \
lease_token = NULL, lease_expires_at = NULL, worker_id = NULL FROM v \
WHERE x.id = v.id AND x.lease_token = v.token AND x.status = 'running' RETURNING x.id), \
finished AS (UPDATE {a} y SET status = 'succeeded', error = NULL, finished_at = CURRENT_TIMESTAMP \
FROM v WHERE y.id = v.attempt_id AND y.lease_token = v.token AND y.status = 'running' \
RETURNING y.id) \
SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM finished)";

/// [`COMPLETE`] for `--attempts at-end`: the executions as there, and each attempt inserted
/// once, already `succeeded` (`$5`: the worker id), since the claim inserted none.
const COMPLETE_ATTEMPT_AT_END: &str = "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], \
$3::uuid[], $4::jsonb[]) AS v(id, token, attempt_id, result)), \
done AS (UPDATE {e} x SET status = 'succeeded', result = v.result, error = NULL, \
finished_at = CURRENT_TIMESTAMP, updated_at = CURRENT_TIMESTAMP, version = x.version + 1, \
lease_token = NULL, lease_expires_at = NULL, worker_id = NULL FROM v \
WHERE x.id = v.id AND x.lease_token = v.token AND x.status = 'running' \
RETURNING x.id, x.attempts, x.started_at, v.token, v.attempt_id), \
finished AS (INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, \
error, started_at, heartbeat_at, finished_at) SELECT attempt_id, id, attempts, token, $5::text, \
'succeeded', NULL, started_at, started_at, CURRENT_TIMESTAMP FROM done RETURNING id) \
SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM finished)";

/// [`COMPLETE`] for `--attempts none`: the executions alone (the second count is always 0).
const COMPLETE_EXECUTIONS_ONLY: &str = "WITH v AS (SELECT * FROM unnest($1::uuid[], \
$2::uuid[], $3::uuid[], $4::jsonb[]) AS v(id, token, attempt_id, result)), \
done AS (UPDATE {e} x SET status = 'succeeded', result = v.result, error = NULL, \
finished_at = CURRENT_TIMESTAMP, updated_at = CURRENT_TIMESTAMP, version = x.version + 1, \
lease_token = NULL, lease_expires_at = NULL, worker_id = NULL FROM v \
WHERE x.id = v.id AND x.lease_token = v.token AND x.status = 'running' RETURNING x.id) \
SELECT (SELECT count(*) FROM done), 0::bigint";

/// `claim` without its attempts insert (the `started` CTE of `CLAIM_IN_ONE_STATEMENT`), for
/// `--attempts at-end` and `none`.
fn claim_without_attempts(claim: &str) -> Result<String, Error> {
    const CTE: &str = ", started AS (";
    const CTE_END: &str = " FROM claimed)";
    let start = claim
        .find(CTE)
        .ok_or("the claim statement has no `started` CTE to leave out")?;
    let end = claim[start..]
        .find(CTE_END)
        .map(|i| start + i + CTE_END.len())
        .ok_or("the claim statement's `started` CTE has no end")?;
    Ok(format!("{}{}", &claim[..start], &claim[end..]))
}

/// The lease each claim takes, in microseconds (burndown's worker leases for 60 s).
const LEASE_MICROS: i64 = 60_000_000;

/// A claimed batch waiting for its completion: execution ids, lease tokens, attempt ids.
#[derive(Default)]
struct Claimed {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    attempt_ids: Vec<Uuid>,
}

/// How a drain completes its batches: the statement ([`COMPLETE`] or one of its
/// `--attempts` variants), and what it needs and changes besides the executions.
#[derive(Clone)]
struct Completion {
    sql: String,
    attempts: AttemptWrites,
    worker_id: String,
}

/// Runs the completion for `batch` in `conn`'s transaction; an error unless every execution of
/// it changed, and every attempt where the statement writes attempts.
async fn complete_batch(
    conn: &mut PgConnection,
    complete: &Completion,
    batch: &Claimed,
    ok: &Value,
) -> Result<(), Error> {
    let results = vec![Json(ok); batch.ids.len()];
    let mut query = sqlx::query(&complete.sql)
        .persistent(is_stable(&complete.sql))
        .bind(&batch.ids)
        .bind(&batch.tokens)
        .bind(&batch.attempt_ids)
        .bind(&results);
    if complete.attempts == AttemptWrites::AtEnd {
        query = query.bind(complete.worker_id.as_str());
    }
    let counts = query.fetch_one(&mut *conn).await?;
    let (done, finished): (i64, i64) = (counts.try_get(0)?, counts.try_get(1)?);
    let attempts_expected = match complete.attempts {
        AttemptWrites::None => 0,
        AttemptWrites::AtClaim | AttemptWrites::AtEnd => batch.ids.len(),
    };
    if usize::try_from(done).ok() != Some(batch.ids.len())
        || usize::try_from(finished).ok() != Some(attempts_expected)
    {
        return Err(format!(
            "completion of {} claimed rows changed {done} executions and {finished} attempts",
            batch.ids.len()
        )
        .into());
    }
    Ok(())
}

/// Claims up to `batch` ready rows in `conn`'s transaction with the backend's claim statement,
/// bound as the backend binds it; an empty batch when none is ready.
async fn claim_batch(
    conn: &mut PgConnection,
    claim: &str,
    worker_id: &str,
    batch: usize,
) -> Result<Claimed, Error> {
    // The caller's lease tokens and attempt ids, paired with the locked rows by position
    // (as the backend does: `uuid4` tokens, UUIDv7 attempt ids).
    let fresh: Vec<(Uuid, Uuid)> = (0..batch)
        .map(|_| (Uuid::new_v4(), Uuid::now_v7()))
        .collect();
    let list = |pick: fn(&(Uuid, Uuid)) -> Uuid| {
        fresh
            .iter()
            .map(|f| pick(f).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let none = None::<OffsetDateTime>;
    // The backend's parameters with no injected clock: the statement reads the transaction's
    // time wherever a `now` is NULL.
    let rows = sqlx::query(claim)
        .persistent(is_stable(claim))
        .bind(NAMESPACE)
        .bind(TASK)
        .bind(none)
        .bind(none)
        .bind(i64::try_from(batch)?)
        .bind(list(|f| f.0))
        .bind(list(|f| f.1))
        .bind(none)
        .bind(none)
        .bind(LEASE_MICROS)
        .bind(worker_id)
        .bind(none)
        .bind(none)
        .fetch_all(&mut *conn)
        .await?;
    let attempt_of: HashMap<Uuid, Uuid> = fresh.into_iter().collect();
    let mut claimed = Claimed::default();
    for row in &rows {
        let id: Uuid = row.try_get("id")?;
        let token: Option<Uuid> = row.try_get("lease_token")?;
        // The handler's input, decoded as a worker would before running it.
        let payload: Json<Value> = row.try_get("payload")?;
        std::hint::black_box(payload);
        let (token, attempt_id) = token
            .and_then(|t| attempt_of.get(&t).map(|a| (t, *a)))
            .ok_or_else(|| format!("claim returned execution {id} without a lease of ours"))?;
        claimed.ids.push(id);
        claimed.tokens.push(token);
        claimed.attempt_ids.push(attempt_id);
    }
    Ok(claimed)
}

/// One connection's loop: claim a batch, complete it, until a claim finds nothing. `combined`:
/// complete each batch in the next claim's transaction instead of in its own.
async fn drain(
    mut conn: PgConnection,
    claim: String,
    complete: Completion,
    batch: usize,
    combined: bool,
) -> Result<Drained, Error> {
    let mut drained = Drained::default();
    let ok = json!({"ok": true});
    let mut pending: Option<Claimed> = None;
    loop {
        let mut tx = conn.begin().await?;
        if let Some(done) = pending.take() {
            complete_batch(&mut tx, &complete, &done, &ok).await?;
            drained.completions += 1;
        }
        let claimed = claim_batch(&mut tx, &claim, &complete.worker_id, batch).await?;
        tx.commit().await?;
        if claimed.ids.is_empty() {
            return Ok(drained);
        }
        drained.claims += 1;
        drained.executions += claimed.ids.len();
        if combined {
            pending = Some(claimed);
            continue;
        }
        let mut tx = conn.begin().await?;
        complete_batch(&mut tx, &complete, &claimed, &ok).await?;
        tx.commit().await?;
        drained.completions += 1;
    }
}

/// `--one-completer`: each of `claimers` claims batches in a loop and hands them over, and
/// `completer` completes everything handed over since its last batch in one transaction, as
/// a worker's one completion writer does. A claimer asks for `batch` rows only while fewer
/// than `in_flight - batch` are claimed and not yet completed (a worker's bound on what it
/// holds), and stops when a claim finds nothing.
async fn drain_one_completer(
    claimers: Vec<PgConnection>,
    mut completer: PgConnection,
    claim: String,
    complete: Completion,
    batch: usize,
    in_flight: usize,
) -> Result<Drained, Error> {
    let room = Arc::new(Semaphore::new(in_flight));
    let (handed, mut taken) = mpsc::unbounded_channel::<Claimed>();
    let mut loops = tokio::task::JoinSet::new();
    for mut conn in claimers {
        let (room, handed, claim) = (room.clone(), handed.clone(), claim.clone());
        let worker_id = complete.worker_id.clone();
        loops.spawn(async move {
            let mut claims = 0;
            loop {
                let permits = u32::try_from(batch)?;
                room.acquire_many(permits).await?.forget();
                let mut tx = conn.begin().await?;
                let claimed = claim_batch(&mut tx, &claim, &worker_id, batch).await?;
                tx.commit().await?;
                // Room the claim did not fill is free again at once.
                room.add_permits(batch - claimed.ids.len());
                if claimed.ids.is_empty() {
                    return Ok::<usize, Error>(claims);
                }
                claims += 1;
                handed.send(claimed)?;
            }
        });
    }
    drop(handed);
    let ok = json!({"ok": true});
    let mut drained = Drained::default();
    while let Some(first) = taken.recv().await {
        let mut merged = first;
        while let Ok(more) = taken.try_recv() {
            merged.ids.extend(more.ids);
            merged.tokens.extend(more.tokens);
            merged.attempt_ids.extend(more.attempt_ids);
        }
        let mut tx = completer.begin().await?;
        complete_batch(&mut tx, &complete, &merged, &ok).await?;
        tx.commit().await?;
        drained.executions += merged.ids.len();
        drained.completions += 1;
        room.add_permits(merged.ids.len());
    }
    while let Some(claims) = loops.join_next().await {
        drained.claims += claims??;
    }
    Ok(drained)
}

/// The number of `succeeded` rows and of all rows in `table`.
async fn count_succeeded(conn: &mut PgConnection, table: &str) -> Result<(i64, i64), Error> {
    let sql = format!(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM {}",
        Postgres::quote(table)
    );
    let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

async fn run(a: Args) -> Result<Value, Error> {
    let suffix = Uuid::new_v4().simple().to_string()[..8].to_string();
    let options = BackendOptions::default()
        .with_table(format!("ceil{suffix}_executions"))
        .with_attempts_table(format!("ceil{suffix}_attempts"));
    let backend = PostgresExecutionBackend::new(&a.dsn, options.clone())?;
    backend.open().await?;
    let claim = backend
        .claim_to_run_in_one_statement_sql(1)
        .ok_or("the PostgreSQL backend has no one-statement claim")?;
    let (claim, complete) = match a.attempts {
        AttemptWrites::AtClaim => (claim, COMPLETE),
        AttemptWrites::AtEnd => (claim_without_attempts(&claim)?, COMPLETE_ATTEMPT_AT_END),
        AttemptWrites::None => (claim_without_attempts(&claim)?, COMPLETE_EXECUTIONS_ONLY),
    };
    let complete = format!(
        "{PLAN_PER_CALL}{}",
        complete
            .replace("{e}", &Postgres::quote(&options.table))
            .replace("{a}", &Postgres::quote(&options.attempts_table))
    );

    // Not timed: N ready executions, submitted as burndown's `--submit-batch 1000` does.
    let submit_s = support::fill(&backend, a.n).await?;
    backend.connector().close().await;

    // The connections of the drain, opened before the clock starts (our worker's pool is warm
    // from the submits too), with JIT off as the backend's sessions have it.
    let connect = || PgConnectOptions::from_str(&a.dsn).map(|o| o.options([("jit", "off")]));
    let mut connections = Vec::with_capacity(a.connections);
    for _ in 0..a.connections {
        connections.push(PgConnection::connect_with(&connect()?).await?);
    }
    // `--one-completer`: its completing connection and the rows it may leave in flight.
    let one_completer = match a.one_completer {
        Some(in_flight) => Some((PgConnection::connect_with(&connect()?).await?, in_flight)),
        None => None,
    };
    let before = pg_counters::Counters::read(&a.dsn).await?;
    let drain_started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    let completion = |i: usize| Completion {
        sql: complete.clone(),
        attempts: a.attempts,
        worker_id: format!("ceiling-{i}"),
    };
    match one_completer {
        Some((completer, in_flight)) => {
            loops.spawn(drain_one_completer(
                connections,
                completer,
                claim.clone(),
                completion(0),
                a.batch,
                in_flight,
            ));
        }
        None => {
            for (i, conn) in connections.into_iter().enumerate() {
                loops.spawn(drain(
                    conn,
                    claim.clone(),
                    completion(i),
                    a.batch,
                    a.combined,
                ));
            }
        }
    }
    let mut total = Drained::default();
    while let Some(done) = loops.join_next().await {
        let done = done??;
        total.executions += done.executions;
        total.claims += done.claims;
        total.completions += done.completions;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    let after = pg_counters::Counters::read(&a.dsn).await?;
    let counted = before.per_execution(&after, a.n, &a.dsn).await?;

    let mut conn = PgConnection::connect_with(&connect()?).await?;
    let n = i64::try_from(a.n)?;
    let executions = count_succeeded(&mut conn, &options.table).await?;
    let attempts = count_succeeded(&mut conn, &options.attempts_table).await?;
    let attempts_expected = match a.attempts {
        AttemptWrites::None => (0, 0),
        AttemptWrites::AtClaim | AttemptWrites::AtEnd => (n, n),
    };
    if total.executions != a.n || executions != (n, n) || attempts != attempts_expected {
        return Err(format!(
            "the drain completed {} of {n}; succeeded/all: executions {}/{}, attempts {}/{} \
             (tables {} and {} left for a look)",
            total.executions,
            executions.0,
            executions.1,
            attempts.0,
            attempts.1,
            options.table,
            options.attempts_table
        )
        .into());
    }
    // Leave nothing behind: attempts first (they reference executions).
    for table in [&options.attempts_table, &options.table] {
        sqlx::query(&format!("DROP TABLE {}", Postgres::quote(table)))
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    let mut line = json!({
        "system": SYSTEM,
        "backend": Postgres::NAME,
        "server": "postgres",
        "mode": match (a.one_completer, a.combined, a.attempts) {
            (Some(in_flight), _, _) => format!(
                "ceiling, {} claiming, one completing, {in_flight} in flight",
                a.connections
            ),
            (None, false, AttemptWrites::AtClaim) => "ceiling".to_string(),
            (None, true, AttemptWrites::AtClaim) => "ceiling, each completion with the next claim".to_string(),
            (None, combined, attempts) => format!(
                "ceiling, attempts {}{}",
                attempts.name(),
                if combined { ", each completion with the next claim" } else { "" }
            ),
        },
        "n": a.n,
        "connections": a.connections,
        "batch": a.batch,
        "claims": total.claims,
        "completions": total.completions,
        "submit_batch": 1000,
        "submit_per_s": (a.n as f64 / submit_s).round(),
        "drain_per_s": (a.n as f64 / drain_s).round(),
    });
    pg_counters::merge(&mut line, &counted);
    Ok(line)
}

#[tokio::main]
async fn main() {
    let a = match support::args(
        &["postgres://", "postgresql://"],
        "--dsn must be a postgres:// URL (the ceiling is PostgreSQL's)",
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ceiling: {e}");
            std::process::exit(2);
        }
    };
    match run(a).await {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("ceiling: {e}");
            std::process::exit(1);
        }
    }
}

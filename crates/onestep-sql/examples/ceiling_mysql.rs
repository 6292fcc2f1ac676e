//! The bare-SQL ceiling on MySQL/MariaDB (issue 21): the burn-down's drain with nothing but SQL,
//! in statements of one shape for every batch size.
//!
//! Creates the reference tables with a random suffix through the crate's own backend (the same
//! DDL, indexes and claim column as the burndown example), puts N ready executions in them with
//! `submit_many` (not timed), then drains them with `--connections` connections, each a plain
//! loop:
//!
//! 1. one transaction with the backend's own claim `SELECT … FOR UPDATE SKIP LOCKED`
//!    ([`SqlExecutionBackend::claim_sql`](onestep_sql::SqlExecutionBackend::claim_sql)) for up
//!    to `--batch` rows, then [`START`] and [`ATTEMPTS`]: one `UPDATE` and one `INSERT … SELECT`
//!    joined with `JSON_TABLE` over the batch's ids, lease tokens and attempt ids;
//! 2. one transaction with [`FINISH_EXECUTIONS`] and [`FINISH_ATTEMPTS`], which mark the claimed
//!    executions and their attempts `succeeded` (result `{"ok": true}`), each row fenced by its
//!    lease token;
//!
//! until a claim finds nothing. After a claim that came back full, the connections' next claims
//! resume after its last row, as the worker's do
//! ([`SqlExecutionBackend::resumed_claim_sql`](onestep_sql::SqlExecutionBackend::resumed_claim_sql)),
//! reading again from the front in the same transaction when that comes back short: without it
//! every claim looks up the delete-marked index entries of the rows claimed since InnoDB's last
//! purge. No handler, no channels, no lock-and-read before the writes, and
//! every statement's text is the same at every batch size, so each is prepared once per
//! connection (the worker's batch statements are prepared, run and closed per batch). At the end
//! exactly N executions and N attempts must be `succeeded` (else it fails, leaving the tables for
//! a look), the tables are dropped, and one JSON line like burndown's is printed.
//!
//! `cargo run --release -p onestep-sql --example ceiling_mysql -- --dsn mysql://… [--n 20000]
//! [--connections 2] [--batch 100]`

#[path = "support/allocator.rs"]
mod allocator;
#[path = "support/ceiling.rs"]
mod support;

use std::collections::HashMap;
use std::time::Instant;
use support::{Args, Drained, Error, NAMESPACE, TASK};

use onestep_core::execution::ExecutionBackend;
use onestep_sql::mysql::{MySql, MySqlExecutionBackend};
use onestep_sql::{BackendOptions, Dialect};
use serde_json::{Value, json};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlRow};
use sqlx::{Connection, Executor, Row};
use time::{OffsetDateTime, PrimitiveDateTime};
use uuid::Uuid;

/// The system name in the JSON line (and in `cargo xtask bench`'s table).
const SYSTEM: &str = "bare SQL ceiling";

/// The lease each claim takes (burndown's worker leases for 60 s).
const LEASE: time::Duration = time::Duration::seconds(60);

/// Starts the claimed rows: the batch as a JSON array of `{"i": id, "t": lease token}`.
/// Parameters: the batch, `lease_expires_at`, worker id, now, now.
const START: &str = "UPDATE {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS (i CHAR(32) PATH '$.i', \
t CHAR(32) PATH '$.t')) v ON e.id = v.i SET e.status = 'running', e.attempts = e.attempts + 1, \
e.lease_token = v.t, e.lease_expires_at = ?, e.worker_id = ?, \
e.started_at = COALESCE(e.started_at, ?), e.updated_at = ?, e.version = e.version + 1";

/// Inserts the claimed rows' attempts: the batch as a JSON array of `{"i": id, "a": attempt
/// id}`. Parameters: worker id, now, now, the batch.
const ATTEMPTS: &str = "INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, \
status, error, started_at, heartbeat_at, finished_at) SELECT v.a, e.id, e.attempts, \
e.lease_token, ?, 'running', NULL, ?, ?, NULL FROM {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS \
(i CHAR(32) PATH '$.i', a CHAR(32) PATH '$.a')) v ON e.id = v.i";

/// Marks the batch's executions `succeeded` while their lease holds: the batch as a JSON array
/// of `{"i": id, "t": lease token}`. Parameters: the batch, the result, now, now.
const FINISH_EXECUTIONS: &str = "UPDATE {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS \
(i CHAR(32) PATH '$.i', t CHAR(32) PATH '$.t')) v ON e.id = v.i SET e.status = 'succeeded', \
e.result = ?, e.error = NULL, e.finished_at = ?, e.updated_at = ?, e.version = e.version + 1, \
e.lease_token = NULL, e.lease_expires_at = NULL, e.worker_id = NULL \
WHERE e.lease_token = v.t AND e.status = 'running'";

/// Marks the batch's attempts `succeeded`: the batch as a JSON array of `{"a": attempt id, "t":
/// lease token}`. Parameters: the batch, now.
const FINISH_ATTEMPTS: &str = "UPDATE {a} y JOIN JSON_TABLE(?, '$[*]' COLUMNS \
(a CHAR(32) PATH '$.a', t CHAR(32) PATH '$.t')) v ON y.id = v.a SET y.status = 'succeeded', \
y.error = NULL, y.finished_at = ? WHERE y.lease_token = v.t AND y.status = 'running'";

/// The statements of one run, with its table names in place.
#[derive(Clone)]
struct Statements {
    claim: String,
    /// The claim resuming after a claim key (`available_at`, `created_at`, `id`).
    resumed_claim: String,
    start: String,
    attempts: String,
    finish_executions: String,
    finish_attempts: String,
}

/// The process clock in UTC, whole microseconds, as the MySQL dialect binds it.
fn now() -> PrimitiveDateTime {
    let t = onestep_core::clock::whole_micros(OffsetDateTime::now_utc());
    PrimitiveDateTime::new(t.date(), t.time())
}

/// Fails unless `changed` is the batch's size.
fn check(what: &str, changed: u64, batch: usize) -> Result<(), Error> {
    if usize::try_from(changed).ok() == Some(batch) {
        return Ok(());
    }
    Err(format!("{what} changed {changed} rows of a batch of {batch}").into())
}

/// A row's place in claim order: `available_at`, `created_at` and `id`.
type ClaimKey = (PrimitiveDateTime, PrimitiveDateTime, Uuid);

/// Where the connections' next claims resume: the last row of the last full claim.
type Resume = std::sync::Arc<std::sync::Mutex<Option<ClaimKey>>>;

/// The claim key of a claimed row (the claim selects every column, in the backend's order).
fn claim_key(row: &MySqlRow) -> Result<ClaimKey, Error> {
    let at = |i| -> Result<PrimitiveDateTime, Error> {
        let t = MySql::time(row, i)?.ok_or("a claimed row has no time")?;
        Ok(PrimitiveDateTime::new(t.date(), t.time()))
    };
    let id = MySql::id(row, 0)?.ok_or("a claimed row has no id")?;
    Ok((at(11)?, at(18)?, id))
}

/// One connection's loop: claim a batch, complete it, until a claim finds nothing.
async fn drain(
    mut conn: MySqlConnection,
    s: Statements,
    batch: usize,
    worker_id: String,
    resume: Resume,
) -> Result<Drained, Error> {
    let mut drained = Drained::default();
    let limit = i64::try_from(batch)?;
    let ok = json!({"ok": true}).to_string();
    loop {
        let now = now();
        let mut tx = conn.begin().await?;
        let after = *resume.lock().map_err(|_| "a drain loop panicked")?;
        let mut rows = match after {
            Some((available_at, created_at, id)) => {
                sqlx::query(&s.resumed_claim)
                    .bind(NAMESPACE)
                    .bind(TASK)
                    .bind(now)
                    .bind(available_at)
                    .bind(available_at)
                    .bind(created_at)
                    .bind(created_at)
                    .bind(id.simple().to_string())
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?
            }
            None => Vec::new(),
        };
        if rows.len() < batch {
            rows = sqlx::query(&s.claim)
                .bind(NAMESPACE)
                .bind(TASK)
                .bind(now)
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
        }
        let key = match rows.last() {
            Some(row) if rows.len() == batch => Some(claim_key(row)?),
            _ => None,
        };
        *resume.lock().map_err(|_| "a drain loop panicked")? = key;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(drained);
        }
        // The caller's lease tokens and attempt ids (`uuid4` tokens, UUIDv7 attempt ids, as
        // the backend makes them), bound as the dialect binds ids: 32 hex digits.
        let mut claimed: HashMap<Uuid, (Uuid, Uuid)> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let id = MySql::id(row, 0)?.ok_or("a claimed row has no id")?;
            // The handler's input, decoded as a worker would before running it.
            std::hint::black_box(MySql::json(row, 4)?);
            claimed.insert(id, (Uuid::new_v4(), Uuid::now_v7()));
        }
        let batch_json = |f: &dyn Fn(&Uuid, &(Uuid, Uuid)) -> Value| {
            Value::from(
                claimed
                    .iter()
                    .map(|(id, ids)| f(id, ids))
                    .collect::<Vec<_>>(),
            )
            .to_string()
        };
        let tokens = batch_json(
            &|id, (t, _)| json!({"i": id.simple().to_string(), "t": t.simple().to_string()}),
        );
        let attempt_ids = batch_json(
            &|id, (_, a)| json!({"i": id.simple().to_string(), "a": a.simple().to_string()}),
        );
        let attempt_tokens = batch_json(
            &|_, (t, a)| json!({"a": a.simple().to_string(), "t": t.simple().to_string()}),
        );
        let started = sqlx::query(&s.start)
            .bind(&tokens)
            .bind(now + LEASE)
            .bind(worker_id.as_str())
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        check(
            "starting the claimed rows",
            started.rows_affected(),
            rows.len(),
        )?;
        let inserted = sqlx::query(&s.attempts)
            .bind(worker_id.as_str())
            .bind(now)
            .bind(now)
            .bind(&attempt_ids)
            .execute(&mut *tx)
            .await?;
        check(
            "inserting the attempts",
            inserted.rows_affected(),
            rows.len(),
        )?;
        tx.commit().await?;
        drained.claims += 1;

        let now = self::now();
        let mut tx = conn.begin().await?;
        let done = sqlx::query(&s.finish_executions)
            .bind(&tokens)
            .bind(ok.as_str())
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        check(
            "completing the executions",
            done.rows_affected(),
            rows.len(),
        )?;
        let finished = sqlx::query(&s.finish_attempts)
            .bind(&attempt_tokens)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        check(
            "finishing the attempts",
            finished.rows_affected(),
            rows.len(),
        )?;
        tx.commit().await?;
        drained.executions += rows.len();
        drained.completions += 1;
    }
}

/// The number of `succeeded` rows and of all rows in `table`.
async fn count_succeeded(conn: &mut MySqlConnection, table: &str) -> Result<(i64, i64), Error> {
    let sql = format!(
        "SELECT CAST(COALESCE(SUM(status = 'succeeded'), 0) AS SIGNED), COUNT(*) FROM {}",
        MySql::quote(table)
    );
    let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

async fn run(a: Args) -> Result<Value, Error> {
    let suffix = Uuid::new_v4().simple().to_string()[..8].to_string();
    let options = BackendOptions::default()
        .with_table(format!("ceil{suffix}_executions"))
        .with_attempts_table(format!("ceil{suffix}_attempts"));
    let backend = MySqlExecutionBackend::new(&a.dsn, options.clone())?;
    backend.open().await?;
    let (e, at) = (
        MySql::quote(&options.table),
        MySql::quote(&options.attempts_table),
    );
    let tables = |sql: &str| sql.replace("{e}", &e).replace("{a}", &at);
    let statements = Statements {
        claim: backend.claim_sql(1),
        resumed_claim: backend
            .resumed_claim_sql(1)
            .ok_or("the table has no claim column index to resume claims on")?,
        start: tables(START),
        attempts: tables(ATTEMPTS),
        finish_executions: tables(FINISH_EXECUTIONS),
        finish_attempts: tables(FINISH_ATTEMPTS),
    };

    // Not timed: N ready executions, submitted as burndown's `--submit-batch 1000` does.
    let submit_s = support::fill(&backend, a.n).await?;
    backend.connector().close().await;

    // The connections of the drain, opened before the clock starts, set up as the dialect's
    // pool sets its connections up (UTC, READ COMMITTED).
    let mut connections = Vec::with_capacity(a.connections);
    for _ in 0..a.connections {
        let options = a
            .dsn
            .parse::<MySqlConnectOptions>()?
            .timezone(Some("+00:00".into()));
        let mut conn = MySqlConnection::connect_with(&options).await?;
        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        connections.push(conn);
    }
    let drain_started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    let resume = Resume::default();
    for (i, conn) in connections.into_iter().enumerate() {
        loops.spawn(drain(
            conn,
            statements.clone(),
            a.batch,
            format!("ceiling-{i}"),
            resume.clone(),
        ));
    }
    let mut total = Drained::default();
    while let Some(done) = loops.join_next().await {
        let done = done??;
        total.executions += done.executions;
        total.claims += done.claims;
        total.completions += done.completions;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();

    let mut conn = MySqlConnection::connect(&a.dsn).await?;
    let n = i64::try_from(a.n)?;
    let executions = count_succeeded(&mut conn, &options.table).await?;
    let attempts = count_succeeded(&mut conn, &options.attempts_table).await?;
    if total.executions != a.n || executions != (n, n) || attempts != (n, n) {
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
        sqlx::query(&format!("DROP TABLE {}", MySql::quote(table)))
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(json!({
        "system": SYSTEM,
        "backend": MySql::NAME,
        "mode": "ceiling",
        "n": a.n,
        "connections": a.connections,
        "batch": a.batch,
        "claims": total.claims,
        "completions": total.completions,
        "submit_batch": 1000,
        "submit_per_s": (a.n as f64 / submit_s).round(),
        "drain_per_s": (a.n as f64 / drain_s).round(),
    }))
}

#[tokio::main]
async fn main() {
    let a = match support::args(
        &["mysql://", "mariadb://"],
        "--dsn must be a mysql:// or mariadb:// URL",
    ) {
        Ok(a)
            if a.combined
                || a.one_completer.is_some()
                || a.attempts != support::AttemptWrites::AtClaim =>
        {
            eprintln!(
                "ceiling_mysql: --combined, --attempts and --one-completer are the PostgreSQL \
                 ceiling's only"
            );
            std::process::exit(2);
        }
        Ok(a) => a,
        Err(e) => {
            eprintln!("ceiling_mysql: {e}");
            std::process::exit(2);
        }
    };
    match run(a).await {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("ceiling_mysql: {e}");
            std::process::exit(1);
        }
    }
}

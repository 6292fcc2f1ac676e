//! PostgreSQL: native UUID, JSONB and TIMESTAMPTZ; leases decided by the transaction's database
//! time; `FOR UPDATE SKIP LOCKED` claims; DDL serialized with an advisory transaction lock.

use std::str::FromStr;

use async_trait::async_trait;
use onestep_core::execution::stored::ExecutionRow;
use onestep_core::execution::{
    ExecutionError, ExecutionResult, ExecutionSource, ExecutionSourceOptions,
};
use onestep_core::{ConnectorErrorKind, ConnectorOperation};
use serde_json::Value;
use sqlx::postgres::{PgArguments, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{Row, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::dialect::{
    BatchPaths, CompletionWrite, Dialect, PoolSettings, RunningCompletion, classify_common,
};
use crate::dsn::Dsn;
use crate::machine::{BackendOptions, SqlExecutionBackend};
use crate::param::{Param, numbered_placeholders};
use crate::schema::{self, TableNames};
use crate::{SqlConnector, setup_error};

/// The PostgreSQL dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postgres;

/// Tracked execution on PostgreSQL.
pub type PostgresExecutionBackend = SqlExecutionBackend<Postgres>;
/// A shared PostgreSQL pool.
pub type PostgresConnector = SqlConnector<Postgres>;
/// A worker source claiming PostgreSQL executions.
pub type PostgresExecutionSource = ExecutionSource<PostgresExecutionBackend>;

/// A source for `dsn`: its own backend (with `backend` options) and the worker `options`.
pub fn execution_source(
    dsn: &str,
    backend: BackendOptions,
    options: ExecutionSourceOptions,
) -> onestep_core::Result<PostgresExecutionSource> {
    let backend = PostgresExecutionBackend::new(dsn, backend)?;
    ExecutionSource::new(backend, options)
}

/// The batch claim as one statement (River's and graphile-worker's): data-modifying CTEs lock
/// the ready rows (`{claim}`, with `SKIP LOCKED`), start them and insert their attempts, and the
/// rows come back in claim order. One round trip and one prepared plan, where the claim in steps
/// sends a `SELECT` for the time, the locking `SELECT`, an `UPDATE … CASE id …` and a multi-row
/// `INSERT` (both re-planned for every batch size).
///
/// The lease tokens and attempt ids are the caller's `uuid4`s, as in the claim in steps (no
/// `gen_random_uuid()`, which needs PostgreSQL 13; the DDL is accepted by 9.5+), sent as two
/// comma-separated lists and paired with the locked rows by position; `row_number()` numbers
/// the rows in a CTE of its own because `FOR UPDATE` cannot share a query with a window function.
///
/// Each locked row takes its token and attempt id by subscript from arrays parsed once: `fresh`
/// is read only through uncorrelated sub-selects, which the executor runs once per statement.
/// The lists used to be unnested `WITH ORDINALITY` and joined to the rows on the position; the
/// prepared plan guesses one locked row, so it joined in a nested loop that ran the unnest again
/// for every row, parsing `n²` uuids (10,000 for a batch of 100, 40,000 for 200). Arrays parsed
/// once took a 100-row claim from 4.4–5.1 to 3.0 ms of server time (the server log, two runs
/// each); the bare-SQL ceiling drained 7 % faster and a worker 5 % (4 alternating rounds).
///
/// `{returned}` is what the update keeps of each row for the rest of the statement and
/// `{answered}` what the statement answers: every column for `claim`, the columns a worker runs
/// an execution with for `claim_to_run` (see `machine::statements::one_statement_claim`).
const CLAIM_IN_ONE_STATEMENT: &str = "WITH candidates AS ({claim}), \
numbered AS (SELECT id AS claim_id, CAST(row_number() OVER () AS int4) AS n FROM candidates), \
fresh AS (SELECT string_to_array(?, ',')::uuid[] AS tokens, string_to_array(?, ',')::uuid[] AS attempt_ids), \
claimed AS (UPDATE {e} x SET status = 'running', attempts = x.attempts + 1, \
lease_token = (SELECT tokens FROM fresh)[c.n], \
lease_expires_at = COALESCE(?, {now} + ? * INTERVAL '1 microsecond'), \
worker_id = ?, started_at = COALESCE(x.started_at, {now}), updated_at = {now}, \
version = x.version + 1 FROM numbered c WHERE x.id = c.claim_id \
RETURNING {returned}, (SELECT attempt_ids FROM fresh)[c.n] AS attempt_id), \
started AS (INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, error, \
started_at, heartbeat_at, finished_at) SELECT attempt_id, id, attempts, lease_token, worker_id, \
'running', NULL, updated_at, updated_at, NULL FROM claimed) \
SELECT {answered} FROM claimed ORDER BY available_at, created_at, id";

/// Rows by idempotency keys (see `BatchPaths::rows_by_keys`): one equality look-up per key, in a
/// `LATERAL` subquery that `LIMIT 1` keeps from being flattened into a join. With
/// `idempotency_key IN (…)` the planner may match only `(namespace, task_name)` in the unique
/// index and filter the keys: on a table that grew faster than autovacuum analyzes it (a bulk
/// import of 1,000,000 rows through `submit_many`), each look-up of 1,000 keys scanned every row
/// of the task (0.6 s at 870,000 rows, so the import slowed quadratically). It is planned per
/// call ([`crate::param::PLAN_PER_CALL`]): kept prepared, its generic plan was made while the
/// table of a new bulk import was nearly empty, picked the list index `(namespace, created_at,
/// id)` and filtered every row of the namespace per key (0.2 s per 500 keys at 5,000 rows,
/// 1.4 s at 10,000), until the next `ANALYZE`.
const ROWS_BY_KEYS: &str = "/* planned per call */ SELECT x.* FROM jsonb_array_elements_text(?::jsonb) AS k(key) \
CROSS JOIN LATERAL (SELECT {cols} FROM {e} WHERE namespace = ? AND task_name = ? \
AND idempotency_key = k.key LIMIT 1) x";

/// A batch of new executions in one fixed-shape insert (see `BatchPaths::insert_many`): one typed
/// array per column, bound in binary. A multi-row `VALUES` list of 500 rows has 11,500
/// parameters; its text differs per batch size and is too large to keep prepared, so every
/// batch paid ~7 ms of parse and ~12 ms of bind per 1,000 rows for ~10 ms of execution. A row
/// whose key is taken fails the statement (a unique violation), so a batch of new keys needs no
/// look-up first. It has no `ON CONFLICT DO NOTHING`: that makes every row a speculative
/// insertion (each unique index probed first, one more WAL record per row to confirm it), and
/// 20 batches of 1,000 took the server 276–301 ms with it against 204–248 ms without.
const INSERT_MANY: &str = "INSERT INTO {e} ({cols}) SELECT * FROM unnest(?::uuid[], ?::text[], \
?::text[], ?::text[], ?::jsonb[], ?::jsonb[], ?::jsonb[], ?::jsonb[], ?::text[], ?::text[], \
?::integer[], ?::timestamptz[], ?::uuid[], ?::timestamptz[], ?::text[], ?::text[], \
?::timestamptz[], ?::timestamptz[], ?::timestamptz[], ?::timestamptz[], ?::timestamptz[], \
?::timestamptz[], ?::bigint[])";

/// One submit in one round trip (see `BatchPaths::insert_one`), committed by itself: the row's
/// times are the statement's `CURRENT_TIMESTAMP`, and the workers' channel is notified in the
/// same statement when a channel is given. `BEGIN`, `SELECT CURRENT_TIMESTAMP`, the insert and
/// `COMMIT` were four round trips before the commit's flush; `pgbench` with one client here
/// commits 1,360–1,440 such transactions a second, and 2,220–2,490 of this statement alone.
const INSERT_ONE: &str = "WITH t AS (SELECT CURRENT_TIMESTAMP AS now), \
n AS (SELECT pg_notify(c, '') FROM (SELECT ?::text AS c) x WHERE c IS NOT NULL) \
INSERT INTO {e} ({cols}) SELECT ?, ?, ?, 'queued', ?::jsonb, ?::jsonb, NULL, NULL, ?, ?, 0, \
t.now + ? * INTERVAL '1 microsecond', NULL, NULL, NULL, NULL, NULL, ?, t.now, t.now, NULL, NULL, 0 \
FROM t LEFT JOIN n ON true ON CONFLICT DO NOTHING RETURNING {cols}";

/// A batch of ids matched by a statement of fixed shape (see `BatchPaths::id_in_text_list`).
const ID_IN_TEXT_LIST: &str = "= ANY(string_to_array(?, ',')::uuid[])";

/// A batch of accepted completions in one fixed-shape statement (see
/// `BatchPaths::complete_many`): one update of the executions and one of their still-running
/// attempts, as data-modifying CTEs over the same arrays, answering both row counts: one round
/// trip where two updates took two. The `CASE id WHEN ? THEN ? …` updates these replaced had a
/// text per batch size and evaluated one `WHEN` after another for every row and column. Planned
/// per call, like the batch lock (see `SqlExecutionBackend::over_ids`): kept prepared, the
/// attempts update got a generic plan while the attempts table was still nearly empty at the
/// start of a drain (a hash join over a scan of the whole table), and kept it as the table grew,
/// at 2.6 ms a batch. Ids are matched as `id = ANY(ARRAY[…])`, so the rows are found by
/// primary key whatever the statistics say (see [`complete_running_sql`]).
const COMPLETE_MANY: &str = "/* planned per call */ WITH v AS (SELECT * FROM unnest(?::uuid[], \
?::uuid[], ?::text[], ?::text[], ?::jsonb[], ?::jsonb[], ?::timestamptz[], ?::timestamptz[]) \
AS v(id, attempt_id, status, attempt_status, result, error, available_at, finished_at)), \
done AS (UPDATE {e} x SET status = v.status, result = v.result, error = v.error, \
available_at = v.available_at, finished_at = v.finished_at, updated_at = ?, \
version = x.version + 1, lease_token = NULL, lease_expires_at = NULL, worker_id = NULL \
FROM v WHERE x.id = ANY(ARRAY[v.id]) RETURNING 1), \
ended AS (UPDATE {a} x SET status = v.attempt_status, error = v.error, finished_at = ? \
FROM v WHERE x.id = ANY(ARRAY[v.attempt_id]) AND x.status = 'running' RETURNING 1) \
SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM ended)";

/// Completes the executions of a batch that still run under their leases (see
/// `BatchPaths::complete_running`) in one statement, committed by itself: the execution update
/// is fenced by its own `WHERE` (status, lease token, lease end), and the attempts update
/// finishes each written execution's attempt, fenced by the same token. Where the locked path
/// sends `BEGIN`, the lock, the write and `COMMIT`, this is one round trip, and it writes no row
/// locks before the updates. Should the two counts differ (an execution running under a token
/// whose attempt is not, which our writes never leave), the final cast fails and the whole
/// statement with it, and the batch is decided one by one on locked rows. The executions update
/// does not look at the attempts itself: that semi-join cost more planning than the rest of the
/// statement (planned per call, like the batch lock) on every batch, for a case that is never
/// reached.
///
/// Each update reaches its rows by primary-key probes only, whatever the tables' statistics say:
/// the fences are inside a `CASE` (see the `sql` module's docs), and the ids are matched as
/// `id = ANY(ARRAY[…])`, which the planner can use as an index condition but not hash or merge
/// on. With `x.id = v.v_id` it could, and did: on a table too small or too recently filled for
/// its statistics, it hashed a scan of the whole table (4 of 9 ms a batch at 20,000 rows).
///
/// The final `SELECT` returns the written rows' columns (`$answer`): all of them
/// ([`COMPLETE_RUNNING`]) or only `id, status` ([`COMPLETE_RUNNING_STATUS`], for a worker, which
/// needs no more and saves receiving and decoding each payload and result). `$kept` are the
/// columns the executions update keeps for the rest of the statement: `$answer`'s, and `id` and
/// `error`, which the attempts update reads.
macro_rules! complete_running_sql {
    ($kept:literal, $answer:literal) => {
        concat!(
            "/* planned per call */ WITH \
t AS (SELECT COALESCE(CAST(? AS TIMESTAMP WITH TIME ZONE), CURRENT_TIMESTAMP) AS now), \
v AS (SELECT * FROM unnest(?::uuid[], ?::uuid[], ?::uuid[], ?::text[], ?::text[], ?::jsonb[], \
?::jsonb[], ?::int8[]) AS v(v_id, v_attempt_id, v_token, v_status, v_attempt_status, v_result, \
v_error, v_retry_us)), \
done AS (UPDATE {e} x SET status = v.v_status, result = v.v_result, error = v.v_error, \
available_at = COALESCE(t.now + v.v_retry_us * INTERVAL '1 microsecond', x.available_at), \
finished_at = CASE WHEN v.v_retry_us IS NULL THEN t.now END, updated_at = t.now, \
version = x.version + 1, lease_token = NULL, lease_expires_at = NULL, worker_id = NULL \
FROM v, t WHERE x.id = ANY(ARRAY[v.v_id]) AND CASE WHEN x.lease_token = v.v_token \
AND x.status = 'running' AND x.lease_expires_at > t.now THEN 1 ELSE 0 END = 1 RETURNING ",
            $kept,
            ", v.v_attempt_id, v.v_token, v.v_attempt_status), \
ended AS (UPDATE {a} r SET status = d.v_attempt_status, error = d.error, finished_at = t.now \
FROM done d, t WHERE r.id = ANY(ARRAY[d.v_attempt_id]) AND CASE WHEN r.execution_id = d.id \
AND r.lease_token = d.v_token AND r.status = 'running' THEN 1 ELSE 0 END = 1 RETURNING 1) \
SELECT ",
            $answer,
            ", CAST(CASE WHEN (SELECT count(*) FROM ended) = (SELECT count(*) FROM done) \
THEN '0' ELSE 'a batched completion finished fewer attempts than executions' END AS int8) \
FROM done"
        )
    };
}

/// [`complete_running_sql`] answering every column of each written row.
const COMPLETE_RUNNING: &str = complete_running_sql!("{cols}", "{cols}");

/// [`complete_running_sql`] answering `id, status` of each written row.
const COMPLETE_RUNNING_STATUS: &str = complete_running_sql!("id, status, error", "id, status");

/// Locks the executions of a batch of leases and reads, in the same round trip, the
/// transaction's time and whether each lease's attempt still runs (see `BatchPaths::lock_leases`):
/// one statement where a time read, the lock and the attempts read took three. The pairs come
/// as two comma-separated texts matched by position; planned per call, like the batch lock. Ids
/// are matched as `id = ANY(ARRAY[…])` (see [`complete_running_sql`]): matched with `=`, a table
/// younger than its statistics was scanned whole and hashed (5 of 7 ms for 125 leases at 20,000
/// rows, against 1 ms by primary key).
const LOCK_LEASES: &str = "/* planned per call */ SELECT {cols}, \
(EXISTS (SELECT 1 FROM {a} r WHERE r.id = ANY(ARRAY[p.attempt_id]) AND r.execution_id = e.id \
AND r.lease_token = e.lease_token AND r.status = 'running'))::int4::int8, CURRENT_TIMESTAMP \
FROM unnest(string_to_array(?, ',')::uuid[], string_to_array(?, ',')::uuid[]) \
AS p(execution_id, attempt_id) JOIN {e} e ON e.id = ANY(ARRAY[p.execution_id]) \
ORDER BY e.id FOR UPDATE OF e";

/// One array parameter of a fixed-shape batch statement: `f` of each item.
fn column<I: Copy, T>(items: &[I], f: impl Fn(I) -> T) -> Vec<T> {
    items.iter().map(|&item| f(item)).collect()
}

fn bind(
    q: Query<'_, sqlx::Postgres, PgArguments>,
    param: Param,
) -> Query<'_, sqlx::Postgres, PgArguments> {
    match param {
        Param::Id(v) => q.bind(v),
        Param::OptId(v) => q.bind(v),
        Param::Text(v) => q.bind(v),
        Param::OptText(v) => q.bind(v),
        Param::Int(v) => q.bind(v),
        Param::BigInt(v) => q.bind(v),
        Param::Json(v) => q.bind(sqlx::types::Json(v)),
        Param::OptJson(v) => q.bind(v.map(sqlx::types::Json)),
        Param::Time(v) => q.bind(v),
        Param::OptTime(v) => q.bind(v),
    }
}

fn query(sql: &str, params: Vec<Param>) -> Query<'_, sqlx::Postgres, PgArguments> {
    let persistent = crate::param::is_stable(sql);
    params
        .into_iter()
        .fold(sqlx::query(sql).persistent(persistent), bind)
}

/// Runs [`COMPLETE_MANY`]: one array per column.
async fn complete_many(
    tx: &mut Transaction<'static, sqlx::Postgres>,
    sql: &str,
    now: OffsetDateTime,
    writes: &[CompletionWrite<'_>],
) -> Result<(u64, u64), sqlx::Error> {
    use sqlx::types::Json;
    let (executions, attempts): (i64, i64) = sqlx::query_as(sql)
        .persistent(crate::param::is_stable(sql))
        .bind(column(writes, |w| w.execution_id))
        .bind(column(writes, |w| w.attempt_id))
        .bind(column(writes, |w| w.status))
        .bind(column(writes, |w| w.attempt_status))
        .bind(column(writes, |w| w.result.map(Json)))
        .bind(column(writes, |w| w.error.map(Json)))
        .bind(column(writes, |w| w.available_at))
        .bind(column(writes, |w| w.finished_at))
        .bind(now)
        .bind(now)
        .fetch_one(&mut **tx)
        .await?;
    // Counts of at most one batch: never negative.
    Ok((executions.unsigned_abs(), attempts.unsigned_abs()))
}

/// Runs [`INSERT_ONE`] on its own: the stored row, or `None` when its key was taken.
async fn insert_one(
    conn: &mut sqlx::PgConnection,
    sql: &str,
    row: &ExecutionRow,
    delay_us: i64,
    notify: Option<&str>,
) -> Result<Option<ExecutionRow>, sqlx::Error> {
    use sqlx::types::Json;
    let stored = sqlx::query(sql)
        .bind(notify)
        .bind(row.id)
        .bind(row.namespace.as_str())
        .bind(row.task_name.as_str())
        .bind(Json(&row.payload))
        .bind(Json(&row.metadata))
        .bind(row.idempotency_key.as_deref())
        .bind(row.submission_digest.as_deref())
        .bind(delay_us)
        .bind(row.expires_at)
        .fetch_optional(conn)
        .await?;
    stored
        .as_ref()
        .map(crate::decode::execution::<Postgres>)
        .transpose()
}

/// Runs [`COMPLETE_RUNNING`] or [`COMPLETE_RUNNING_STATUS`] (`sql`, rendered) with one array per
/// field; each row it wrote read back with `decode`.
async fn complete_running<T>(
    pool: &sqlx::Pool<sqlx::Postgres>,
    sql: &str,
    now: Option<OffsetDateTime>,
    items: &[RunningCompletion<'_>],
    decode: fn(&PgRow) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, sqlx::Error> {
    use sqlx::types::Json;
    let rows = sqlx::query(sql)
        .persistent(crate::param::is_stable(sql))
        .bind(now)
        .bind(column(items, |c| c.execution_id))
        .bind(column(items, |c| c.attempt_id))
        .bind(column(items, |c| c.lease_token))
        .bind(column(items, |c| c.status))
        .bind(column(items, |c| c.attempt_status))
        .bind(column(items, |c| c.result.map(Json)))
        .bind(column(items, |c| c.error.map(Json)))
        .bind(column(items, |c| c.retry_after_us))
        .fetch_all(pool)
        .await?;
    rows.iter().map(decode).collect()
}

/// Runs [`INSERT_MANY`]: one typed array per column, bound in binary.
async fn insert_many(
    tx: &mut Transaction<'static, sqlx::Postgres>,
    sql: &str,
    rows: &[&ExecutionRow],
) -> Result<u64, sqlx::Error> {
    use sqlx::types::Json;
    let done = sqlx::query(sql)
        .bind(column(rows, |r| r.id))
        .bind(column(rows, |r| r.namespace.as_str()))
        .bind(column(rows, |r| r.task_name.as_str()))
        .bind(column(rows, |r| r.status.as_str()))
        .bind(column(rows, |r| Json(&r.payload)))
        .bind(column(rows, |r| Json(&r.metadata)))
        .bind(column(rows, |r| r.result.as_ref().map(Json)))
        .bind(column(rows, |r| r.error.as_ref().map(Json)))
        .bind(column(rows, |r| r.idempotency_key.as_deref()))
        .bind(column(rows, |r| r.submission_digest.as_deref()))
        .bind(column(rows, |r| r.attempts))
        .bind(column(rows, |r| r.available_at))
        .bind(column(rows, |r| r.lease_token))
        .bind(column(rows, |r| r.lease_expires_at))
        .bind(column(rows, |r| r.worker_id.as_deref()))
        .bind(column(rows, |r| r.cancel_reason.as_deref()))
        .bind(column(rows, |r| r.cancel_requested_at))
        .bind(column(rows, |r| r.expires_at))
        .bind(column(rows, |r| r.created_at))
        .bind(column(rows, |r| r.updated_at))
        .bind(column(rows, |r| r.started_at))
        .bind(column(rows, |r| r.finished_at))
        .bind(column(rows, |r| r.version))
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected())
}

/// [`Dialect::BATCH_PATHS`] of PostgreSQL.
const BATCH_PATHS: BatchPaths<Postgres> = BatchPaths {
    claim: CLAIM_IN_ONE_STATEMENT,
    rows_by_keys: ROWS_BY_KEYS,
    insert_many: INSERT_MANY,
    id_in_text_list: ID_IN_TEXT_LIST,
    complete_many: COMPLETE_MANY,
    lock_leases: LOCK_LEASES,
    insert_one: INSERT_ONE,
    run_insert_one: |conn, sql, row, delay_us, notify| {
        Box::pin(insert_one(conn, sql, row, delay_us, notify))
    },
    run_insert_many: |tx, sql, rows| Box::pin(insert_many(tx, sql, rows)),
    run_complete_many: |tx, sql, now, writes| Box::pin(complete_many(tx, sql, now, writes)),
    complete_running: COMPLETE_RUNNING,
    run_complete_running: |pool, sql, now, items| {
        Box::pin(complete_running(
            pool,
            sql,
            now,
            items,
            crate::decode::execution::<Postgres>,
        ))
    },
    complete_running_status: COMPLETE_RUNNING_STATUS,
    run_complete_running_status: |pool, sql, now, items| {
        Box::pin(complete_running(
            pool,
            sql,
            now,
            items,
            crate::decode::id_and_status::<Postgres>,
        ))
    },
};

#[async_trait]
impl Dialect for Postgres {
    type Db = sqlx::Postgres;
    const NAME: &'static str = "postgres";
    const SCHEMA: schema::Dialect = schema::Dialect::Postgres;
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const BATCH_PATHS: Option<BatchPaths<Self>> = Some(BATCH_PATHS);
    /// A claim is one statement and `SKIP LOCKED` lets two pass each other: a second claim in
    /// flight drained a burn-down 12 % faster (median of 7 alternating rounds).
    const CONCURRENT_CLAIMS: usize = 2;

    fn render(sql: &str) -> String {
        numbered_placeholders(sql)
    }

    fn connect_lazy(
        dsn: &Dsn,
        settings: &PoolSettings,
    ) -> Result<sqlx::Pool<sqlx::Postgres>, String> {
        // JIT compilation pays off for long analytic queries, never for the short statements of
        // a job queue: on a fresh 20,000-row table the planner's seq-scan estimate of the expiry
        // sweep crosses `jit_above_cost` and each sweep spends ~200 ms compiling. Off for our
        // sessions only.
        let options = sqlx::postgres::PgConnectOptions::from_str(dsn.as_url())
            .map_err(|e| e.to_string())?
            .options([("jit", "off")]);
        Ok(
            crate::pool_health::ping_only_when_idle(PgPoolOptions::new())
                .max_connections(settings.max_connections)
                .acquire_timeout(settings.acquire_timeout)
                .connect_lazy_with(options),
        )
    }

    async fn begin(
        pool: &sqlx::Pool<sqlx::Postgres>,
    ) -> Result<Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        pool.begin().await
    }

    async fn execute_on(
        conn: &mut sqlx::PgConnection,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<u64, sqlx::Error> {
        Ok(query(sql, params).execute(conn).await?.rows_affected())
    }

    async fn fetch(
        tx: &mut Transaction<'static, sqlx::Postgres>,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        query(sql, params).fetch_all(&mut **tx).await
    }

    /// Read without sqlx's per-value type check (a scan of the types `String` accepts, a
    /// measurable share of decoding a claimed row): every text-like type (`text`, `varchar`,
    /// `char`, `name`, an enum) sends its characters as they are, and anything else fails as
    /// invalid UTF-8 or reads as a status, id or key that the caller then refuses.
    fn text(row: &PgRow, i: usize) -> Result<Option<String>, sqlx::Error> {
        row.try_get_unchecked(i)
    }

    fn int(row: &PgRow, i: usize) -> Result<Option<i32>, sqlx::Error> {
        row.try_get(i)
    }

    fn bigint(row: &PgRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
        row.try_get(i)
    }

    fn id(row: &PgRow, i: usize) -> Result<Option<Uuid>, sqlx::Error> {
        row.try_get(i)
    }

    /// A `timestamptz` in the binary format (every statement of ours is prepared) is read
    /// straight from its eight bytes, microseconds since 2000-01-01 UTC, which is sqlx's own
    /// decoding without its per-value date arithmetic (a claim reads eight per row). A value out
    /// of `time`'s range (`infinity`) is a decode error where sqlx's addition would panic; any
    /// other type or format goes through sqlx.
    fn time(row: &PgRow, i: usize) -> Result<Option<OffsetDateTime>, sqlx::Error> {
        use sqlx::ValueRef as _;
        use sqlx::postgres::PgValueFormat;
        use sqlx::postgres::types::Oid;
        /// `timestamptz`'s type OID (`pg_type`).
        const TIMESTAMPTZ: Oid = Oid(1184);
        let raw = row.try_get_raw(i)?;
        if raw.is_null() {
            return Ok(None);
        }
        let binary_timestamptz =
            raw.format() == PgValueFormat::Binary && raw.type_info().oid() == Some(TIMESTAMPTZ);
        match raw.as_bytes().ok().filter(|_| binary_timestamptz) {
            Some(&[b0, b1, b2, b3, b4, b5, b6, b7]) => {
                let micros = i64::from_be_bytes([b0, b1, b2, b3, b4, b5, b6, b7]);
                pg_micros_to_time(micros)
                    .map(Some)
                    .ok_or_else(|| sqlx::Error::ColumnDecode {
                        index: i.to_string(),
                        source: format!("timestamp {micros} µs after 2000-01-01 is out of range")
                            .into(),
                    })
            }
            _ => row.try_get(i),
        }
    }

    /// Read without sqlx's per-value type check, as [`Self::text`]: the decoder itself looks at
    /// the value's type (`jsonb` carries a version byte, `json` and text do not) and parses the
    /// rest as JSON, so anything that is not JSON fails to parse.
    fn json(row: &PgRow, i: usize) -> Result<Option<Value>, sqlx::Error> {
        row.try_get_unchecked(i)
    }

    async fn database_now(
        tx: &mut Transaction<'static, sqlx::Postgres>,
    ) -> Result<Option<OffsetDateTime>, sqlx::Error> {
        let now: OffsetDateTime = sqlx::query_scalar("SELECT CURRENT_TIMESTAMP")
            .fetch_one(&mut **tx)
            .await?;
        Ok(Some(now))
    }

    async fn check_server(_pool: &sqlx::Pool<sqlx::Postgres>) -> ExecutionResult<()> {
        Ok(())
    }

    async fn ensure_tables(
        pool: &sqlx::Pool<sqlx::Postgres>,
        tables: &TableNames,
        auto_create: bool,
    ) -> ExecutionResult<()> {
        let open = |e: sqlx::Error| {
            ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
        };
        if !auto_create {
            let mut missing = Vec::new();
            for table in [&tables.executions, &tables.attempts] {
                let found: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
                    .bind(Self::quote(table))
                    .fetch_one(pool)
                    .await
                    .map_err(open)?;
                if found.is_none() {
                    missing.push(table.as_str());
                }
            }
            return if missing.is_empty() {
                Ok(())
            } else {
                Err(setup_error::<Self>(format!(
                    "missing execution tables: {} (or invisible to this role, which needs USAGE \
                     on their schema, and that schema on its search_path)",
                    missing.join(", ")
                )))
            };
        }
        let ddl = schema::render_ddl(Self::SCHEMA, tables).map_err(crate::machine::schema_error)?;
        let mut tx = pool.begin().await.map_err(open)?;
        // `IF NOT EXISTS` on existing objects sends "already exists, skipping" notices, which
        // sqlx logs at INFO on every start; they say nothing the caller needs.
        sqlx::query("SET LOCAL client_min_messages = warning")
            .execute(&mut *tx)
            .await
            .map_err(open)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(schema::postgres_advisory_lock_key(tables))
            .execute(&mut *tx)
            .await
            .map_err(open)?;
        for statement in ddl {
            sqlx::query(&statement)
                .execute(&mut *tx)
                .await
                .map_err(|e| crate::ddl_error::<Self>(tables, e))?;
        }
        tx.commit().await.map_err(open)
    }

    fn notify_sql() -> Option<&'static str> {
        Some("SELECT pg_notify($1, '')")
    }

    fn listen(
        pool: sqlx::Pool<sqlx::Postgres>,
        channel: String,
        signal: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        Some(tokio::spawn(async move {
            loop {
                let listening = async {
                    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
                    listener.listen(&channel).await?;
                    loop {
                        listener.recv().await?;
                        signal.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    #[allow(unreachable_code)] // the loop only ends by an error
                    Ok::<(), sqlx::Error>(())
                };
                if let Err(err) = listening.await {
                    tracing::debug!(error = %err, channel = %channel, "LISTEN connection lost; workers poll until it is back");
                }
                // Wake waiters so they poll while the listener reconnects.
                signal.send_modify(|n| *n = n.wrapping_add(1));
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }))
    }

    fn classify(err: &sqlx::Error) -> ConnectorErrorKind {
        if let Some(kind) = classify_common(err) {
            return kind;
        }
        let Some(code) = err
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.to_string())
        else {
            return ConnectorErrorKind::Uncertain;
        };
        match code.as_str() {
            "40001" | "40P01" | "55P03" | "57014" => ConnectorErrorKind::Transient,
            "53300" | "53400" => ConnectorErrorKind::Throttled,
            "57P01" | "57P02" | "57P03" => ConnectorErrorKind::Disconnected,
            "3D000" | "42501" => ConnectorErrorKind::Misconfigured,
            c if c.starts_with("08") => ConnectorErrorKind::Disconnected,
            c if c.starts_with("28") => ConnectorErrorKind::Misconfigured,
            c if c.starts_with("53") => ConnectorErrorKind::Throttled,
            c if c.starts_with("42") || c.starts_with("23") || c.starts_with("22") => {
                ConnectorErrorKind::Permanent
            }
            _ => ConnectorErrorKind::Transient,
        }
    }
}

/// Microseconds since PostgreSQL's epoch (2000-01-01 00:00 UTC) as a UTC time, or `None`
/// outside `time`'s range.
fn pg_micros_to_time(micros: i64) -> Option<OffsetDateTime> {
    /// 2000-01-01 00:00 UTC in seconds since the Unix epoch.
    const PG_EPOCH_UNIX_SECONDS: i64 = 946_684_800;
    // Whole seconds and the microseconds within them, in i64 (no i128 division per value).
    let seconds = micros.div_euclid(1_000_000) + PG_EPOCH_UNIX_SECONDS;
    let within = u32::try_from(micros.rem_euclid(1_000_000)).ok()?;
    OffsetDateTime::from_unix_timestamp(seconds)
        .ok()?
        .replace_microsecond(within)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::is_stable;

    #[test]
    fn the_key_look_up_is_planned_per_call_and_the_batch_insert_kept_prepared() {
        let render = |t: &str| Postgres::render(&crate::sql::render(t, "e", "a", "", ""));
        assert!(!is_stable(&render(ROWS_BY_KEYS)));
        let insert = render(INSERT_MANY);
        assert!(is_stable(&insert));
        assert_eq!(
            insert.matches('$').count(),
            23,
            "one array per column: {insert}"
        );
    }

    #[test]
    fn batched_completion_statements_are_planned_per_call() {
        let render = |t: &str| Postgres::render(&crate::sql::render(t, "e", "a", "", ""));
        for statement in [COMPLETE_MANY, LOCK_LEASES] {
            assert!(!is_stable(&render(statement)), "{statement}");
        }
        // Eight arrays and the time twice; two id lists.
        assert_eq!(render(COMPLETE_MANY).matches('$').count(), 10);
        assert_eq!(render(LOCK_LEASES).matches('$').count(), 2);
    }
}

//! [`SqlExecutionBackend`]: the execution state machine, written once over a [`Dialect`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::ConnectorOperation;
use onestep_core::clock::SharedClock;
use onestep_core::execution::backend::{validate_cancel_reason, validate_claim};
use onestep_core::execution::cursor::decode_cursor;
use onestep_core::execution::state::{
    attempt_status_for, cancel_target, cancel_wins, completion_sources, is_replay,
};
use onestep_core::execution::stored::{
    AttemptRow, EncodedSubmission, ExecutionRow, encode_result, encode_submission, page_of,
    reject_nul,
};
use onestep_core::execution::{
    AttemptStatus, Execution, ExecutionBackend, ExecutionCompletion, ExecutionError,
    ExecutionLease, ExecutionLimits, ExecutionPage, ExecutionQuery, ExecutionRequest,
    ExecutionResult, ExecutionStatus, HeartbeatResult, LeasedExecutionBackend,
};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::Mutex as AsyncMutex;
use uuid::Uuid;

use crate::connector::SqlConnector;
use crate::dialect::{CompletionWrite, Dialect};
use crate::param::{PLAN_PER_CALL, Param};
use crate::schema::{SchemaError, TableNames};
use crate::sql;

/// How many executions have one status, and the oldest of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    /// The status.
    pub status: ExecutionStatus,
    /// How many executions have it.
    pub count: usize,
    /// When the oldest of them was submitted.
    pub oldest_created_at: Option<OffsetDateTime>,
}

/// Options of a SQL execution backend, with the reference's defaults.
#[derive(Debug, Clone)]
pub struct BackendOptions {
    /// The executions table (default `onestep_executions`).
    pub table: String,
    /// The attempts table (default `onestep_execution_attempts`).
    pub attempts_table: String,
    /// Create missing tables on first use (default true). With false, missing tables are an error.
    pub auto_create: bool,
    /// Size limits.
    pub limits: ExecutionLimits,
    /// How many expired rows each claim recovers per maintenance step (default 100).
    pub reclaim_batch_size: usize,
    /// Decide leases with this clock instead of the dialect's (tests). PostgreSQL otherwise uses
    /// the transaction's database time; MySQL and SQLite the process clock.
    pub clock: Option<SharedClock>,
    /// The least time between two claim-time maintenance passes of this backend (default
    /// 250 ms; zero runs it on every claim, as the reference does). Recovery of expired work is
    /// delayed by at most this much, and busy workers do not rescan on every claim.
    pub maintenance_interval: Duration,
    /// The least time between two sweeps for queued work past its `expires_at` (default 5 s;
    /// zero sweeps on every maintenance pass). Claims never pick expired work whatever this is;
    /// it only bounds how long such work still reads as `queued` or `retrying`. The sweep has no
    /// index of its own (the tables are the reference's), so it reads every waiting row on
    /// PostgreSQL and SQLite and the whole table on MySQL; hence the slower cadence.
    pub expiry_sweep_interval: Duration,
}

impl Default for BackendOptions {
    fn default() -> Self {
        Self {
            table: "onestep_executions".into(),
            attempts_table: "onestep_execution_attempts".into(),
            auto_create: true,
            limits: ExecutionLimits::default(),
            reclaim_batch_size: 100,
            clock: None,
            maintenance_interval: Duration::from_millis(250),
            expiry_sweep_interval: Duration::from_secs(5),
        }
    }
}

/// The statements, rendered once for the backend's tables and dialect.
struct Statements {
    insert: String,
    get: String,
    get_for_update: String,
    get_in_namespace_for_update: String,
    get_by_key: String,
    expire_candidates: String,
    expire: String,
    cancel_expiry_candidates: String,
    cancel_expiry: String,
    reclaim_candidates: String,
    reclaim: String,
    finish_attempt_by_token: String,
    claim_one_task: String,
    /// The dialect's one-statement claim of one task, if it has one.
    claim_one_task_in_one_statement: Option<String>,
    /// The dialect's look-up of a batch of idempotency keys, if it has one.
    rows_by_keys: Option<String>,
    /// The dialect's fixed-shape insert of a batch of new executions, if it has one.
    insert_many: Option<String>,
    /// The dialect's fixed-shape writes of a batch of completions, if it has them.
    complete_many: Option<[String; 2]>,
    heartbeat: String,
    heartbeat_attempt: String,
    get_running_attempt: String,
    complete: String,
    finish_attempt: String,
    release: String,
    cancel: String,
    attempts: String,
}

impl Statements {
    fn new<D: Dialect>(tables: &TableNames) -> Self {
        let (e, a) = (D::quote(&tables.executions), D::quote(&tables.attempts));
        let r = |t: &str| D::render(&sql::render(t, &e, &a, D::FOR_UPDATE, D::SKIP_LOCKED));
        Self {
            insert: r(sql::INSERT_EXECUTION),
            get: r(sql::GET),
            get_for_update: r(sql::GET_FOR_UPDATE),
            get_in_namespace_for_update: r(sql::GET_IN_NAMESPACE_FOR_UPDATE),
            get_by_key: r(sql::GET_BY_KEY),
            expire_candidates: r(sql::EXPIRE_CANDIDATES),
            expire: r(sql::EXPIRE),
            cancel_expiry_candidates: r(sql::CANCEL_EXPIRY_CANDIDATES),
            cancel_expiry: r(sql::CANCEL_EXPIRY),
            reclaim_candidates: r(sql::RECLAIM_CANDIDATES),
            reclaim: r(sql::RECLAIM),
            finish_attempt_by_token: r(sql::FINISH_ATTEMPT_BY_TOKEN),
            claim_one_task: r(&sql::CLAIM.replace("{tasks}", "= ?")),
            claim_one_task_in_one_statement: D::CLAIM_IN_ONE_STATEMENT
                .map(|t| r(&one_statement_claim(t, "= ?"))),
            rows_by_keys: D::ROWS_BY_KEYS.map(r),
            insert_many: D::INSERT_MANY.map(r),
            complete_many: D::COMPLETE_MANY
                .map(|[executions, attempts]| [r(executions), r(attempts)]),
            heartbeat: r(sql::HEARTBEAT),
            heartbeat_attempt: r(sql::HEARTBEAT_ATTEMPT),
            get_running_attempt: r(sql::GET_RUNNING_ATTEMPT),
            complete: r(sql::COMPLETE),
            finish_attempt: r(sql::FINISH_ATTEMPT),
            release: r(sql::RELEASE),
            cancel: r(sql::CANCEL),
            attempts: r(sql::ATTEMPTS),
        }
    }
}

struct Inner<D: Dialect> {
    connector: SqlConnector<D>,
    owns_connector: bool,
    tables: TableNames,
    statements: Statements,
    options: BackendOptions,
    ready: AsyncMutex<bool>,
    /// The claim column and the statements that use it, derived when the backend becomes ready.
    claim_column: std::sync::OnceLock<ClaimColumn>,
    opens: AtomicUsize,
    last_maintenance: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the expiry sweep last ran in this process.
    last_expiry_sweep: std::sync::Mutex<Option<std::time::Instant>>,
    /// Whether the last batched submit that read its keys found some already stored: the next
    /// batch then reads its keys first instead of trying them as new (see `submit_many`).
    batch_keys_were_stored: std::sync::atomic::AtomicBool,
    /// Bumped when work may have become claimable (in this process, or notified by another).
    work: Arc<tokio::sync::watch::Sender<u64>>,
    /// The LISTEN task, started by the first idle worker.
    listener: std::sync::OnceLock<tokio_util::task::AbortOnDropHandle<()>>,
    /// When this process last sent a NOTIFY (rate limit).
    last_notify: std::sync::Mutex<Option<std::time::Instant>>,
    /// The notification channel (`onestep_` + the executions table, at most 63 characters).
    channel: String,
    _dialect: PhantomData<D>,
}

/// Tracked execution on a SQL database: the one state machine every dialect shares.
///
/// Use it through its dialect aliases (`PostgresExecutionBackend`, `MySqlExecutionBackend`,
/// `SqliteExecutionBackend`). Cheap to clone; clones share the pool.
pub struct SqlExecutionBackend<D: Dialect> {
    inner: Arc<Inner<D>>,
}

impl<D: Dialect> Clone for SqlExecutionBackend<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlExecutionBackend<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlExecutionBackend")
            .field("dialect", &D::NAME)
            .field("connector", &self.inner.connector)
            .field("tables", &self.inner.tables)
            .finish()
    }
}

type Tx<D> = sqlx::Transaction<'static, <D as Dialect>::Db>;

/// The column the claim filters tasks on (`Dialect::claim_task_column`: `task_name`, or on
/// MySQL/MariaDB the generated column that is non-NULL only while claimable), with the
/// statements rewritten for it once, when the backend becomes ready, rather than on every claim.
struct ClaimColumn {
    column: &'static str,
    /// The claim of one task, filtering on the column.
    claim_one_task: String,
    /// The expiry sweep, reading the column's index instead of every row where it has one.
    expire_candidates: String,
}

impl ClaimColumn {
    fn new(column: &'static str, statements: &Statements) -> Self {
        let expire_candidates = if column == "task_name" {
            statements.expire_candidates.clone()
        } else {
            statements.expire_candidates.replace(
                "WHERE e.status IN",
                &format!("WHERE e.{column} IS NOT NULL AND e.status IN"),
            )
        };
        Self {
            column,
            claim_one_task: filter_tasks_on(column, &statements.claim_one_task),
            expire_candidates,
        }
    }

    /// A claim `statement` filtering tasks on the column.
    fn claim(&self, statement: &str) -> String {
        filter_tasks_on(self.column, statement)
    }
}

/// `statement` (a claim) filtering tasks on `column`, so it walks the index that holds only
/// claimable rows instead of every finished row (MySQL/MariaDB).
fn filter_tasks_on(column: &str, statement: &str) -> String {
    if column == "task_name" {
        statement.to_string()
    } else {
        statement.replace("AND e.task_name ", &format!("AND e.{column} "))
    }
}

fn db<D: Dialect>(operation: ConnectorOperation) -> impl Fn(sqlx::Error) -> ExecutionError {
    move |err| ExecutionError::Connector(D::connector_error(operation, err))
}

/// A table-name error as an invalid argument naming the option.
pub(crate) fn schema_error(err: SchemaError) -> ExecutionError {
    match err {
        SchemaError::NotAnIdentifier { field } => {
            ExecutionError::invalid(field, "must be a non-empty SQL identifier")
        }
        SchemaError::TooLong { field, max_length } => {
            ExecutionError::invalid(field, format!("must be at most {max_length} characters"))
        }
        SchemaError::SameTable => ExecutionError::invalid(
            "attempts_table",
            "must name a different table than executions_table",
        ),
    }
}

/// Whether an error is a unique-index violation (a concurrent submit of the same key).
fn is_unique_violation(err: &ExecutionError) -> bool {
    match err {
        ExecutionError::Connector(c) => c
            .cause
            .as_deref()
            .and_then(|cause| cause.downcast_ref::<sqlx::Error>())
            .is_some_and(|e| matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())),
        _ => false,
    }
}

/// The most rows one claim takes: keeps its statements under every dialect's bind limit.
pub const MAX_CLAIM_ROWS: usize = 1000;

/// How many times a transaction that failed transiently (deadlock, lock wait timeout,
/// serialization failure) is run again before the error is reported.
const TRANSIENT_RETRIES: u32 = 3;

/// Runs `attempt` again after transient failures; the failed transaction rolled back, so nothing
/// was written.
async fn retry_transient<T, F, Fut>(mut attempt: F) -> ExecutionResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ExecutionResult<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(ExecutionError::Connector(c))
                if c.kind == onestep_core::ConnectorErrorKind::Transient
                    && tries < TRANSIENT_RETRIES =>
            {
                tries += 1;
                tracing::debug!(error = %c, tries, "transient database error; running the transaction again");
                tokio::time::sleep(
                    Duration::from_millis(10 * u64::from(tries))
                        + Duration::from_micros(fastrand_micros()),
                )
                .await;
            }
            other => return other,
        }
    }
}

/// A little jitter so retried transactions do not collide again in lock step.
fn fastrand_micros() -> u64 {
    u64::from(Uuid::new_v4().as_bytes()[0]) * 20
}

/// A dialect's one-statement claim template with the claim select and its time filled in;
/// `tasks` is `= ?` or `IN (?, …)`.
fn one_statement_claim(template: &str, tasks: &str) -> String {
    template
        .replace("{claim}", &sql::CLAIM.replace("{cols}", "e.id"))
        .replace("{now}", sql::NOW_OR_TRANSACTION_TIME)
        .replace("{tasks}", tasks)
}

/// A new execution or attempt id: a time-ordered UUIDv7 (monotonic within the process).
///
/// Ids are opaque to the reference and to users, but their order matters to the tables' primary
/// keys: MySQL/MariaDB store rows in primary-key order, so random (v4) ids put every new row on a
/// random page of the whole table, and once the table outgrows the buffer pool each insert,
/// claim and completion reads a page from disk. Time-ordered ids keep new rows, the ones a queue
/// works on, together at the end (on PostgreSQL: in the primary-key index). Lease tokens stay
/// random (v4): they are the fence, not a key.
/// Whether no execution appears twice (a batch may then lock and write each row once).
fn distinct_executions(ids: impl Iterator<Item = Uuid>) -> bool {
    let mut seen = std::collections::HashSet::new();
    ids.into_iter().all(|id| seen.insert(id))
}

/// Whether `attempt_id` is, among the `running` attempts a batch read, the running attempt of
/// `execution_id` under `token`.
fn attempt_runs(running: &[AttemptRow], execution_id: Uuid, attempt_id: Uuid, token: Uuid) -> bool {
    running
        .iter()
        .any(|r| r.id == attempt_id && r.execution_id == execution_id && r.lease_token == token)
}

fn new_row_id() -> Uuid {
    Uuid::now_v7()
}

fn later(now: OffsetDateTime, d: Duration) -> OffsetDateTime {
    onestep_core::clock::whole_micros(
        now.checked_add(time::Duration::try_from(d).unwrap_or(time::Duration::MAX))
            .unwrap_or(now),
    )
}

impl<D: Dialect> SqlExecutionBackend<D> {
    /// A backend that owns a lazily connected pool for `dsn` (no I/O until first use).
    pub fn new(dsn: &str, options: BackendOptions) -> ExecutionResult<Self> {
        let connector = SqlConnector::<D>::new(dsn)?;
        Self::build(connector, true, options)
    }

    /// A backend sharing `connector`'s pool; closing the backend never closes the connector.
    pub fn from_connector(
        connector: &SqlConnector<D>,
        options: BackendOptions,
    ) -> ExecutionResult<Self> {
        Self::build(connector.clone(), false, options)
    }

    fn build(
        connector: SqlConnector<D>,
        owns_connector: bool,
        options: BackendOptions,
    ) -> ExecutionResult<Self> {
        let tables = TableNames::new(options.table.trim(), options.attempts_table.trim());
        tables.validate(D::SCHEMA).map_err(schema_error)?;
        options.limits.validate()?;
        if options.reclaim_batch_size < 1 {
            return Err(ExecutionError::invalid(
                "reclaim_batch_size",
                "must be a positive integer, got 0",
            ));
        }
        let statements = Statements::new::<D>(&tables);
        let channel: String = format!("onestep_{}", tables.executions)
            .chars()
            .take(63)
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                connector,
                owns_connector,
                tables,
                statements,
                options,
                ready: AsyncMutex::new(false),
                claim_column: std::sync::OnceLock::new(),
                opens: AtomicUsize::new(0),
                last_maintenance: std::sync::Mutex::new(None),
                last_expiry_sweep: std::sync::Mutex::new(None),
                batch_keys_were_stored: std::sync::atomic::AtomicBool::new(false),
                work: Arc::new(tokio::sync::watch::Sender::new(0)),
                listener: std::sync::OnceLock::new(),
                last_notify: std::sync::Mutex::new(None),
                channel,
                _dialect: PhantomData,
            }),
        })
    }

    /// The connector (shared pool).
    pub fn connector(&self) -> &SqlConnector<D> {
        &self.inner.connector
    }

    /// The table names.
    pub fn tables(&self) -> &TableNames {
        &self.inner.tables
    }

    /// Makes the backend ready once: checks the server, then creates or checks the tables.
    async fn pool(&self) -> ExecutionResult<sqlx::Pool<D::Db>> {
        let pool = self.inner.connector.pool()?;
        let mut ready = self.inner.ready.lock().await;
        if !*ready {
            D::check_server(&pool).await?;
            D::ensure_tables(&pool, &self.inner.tables, self.inner.options.auto_create).await?;
            let column = D::claim_task_column(&pool, &self.inner.tables).await?;
            let _ = self
                .inner
                .claim_column
                .set(ClaimColumn::new(column, &self.inner.statements));
            *ready = true;
        }
        Ok(pool)
    }

    async fn begin(&self, operation: ConnectorOperation) -> ExecutionResult<Tx<D>> {
        let pool = self.pool().await?;
        D::begin(&pool).await.map_err(db::<D>(operation))
    }

    async fn now(
        &self,
        tx: &mut Tx<D>,
        operation: ConnectorOperation,
    ) -> ExecutionResult<OffsetDateTime> {
        // Whole microseconds: what the columns keep, so a returned execution equals the stored one.
        if let Some(clock) = &self.inner.options.clock {
            return Ok(onestep_core::clock::whole_micros(onestep_core::clock::utc(
                clock.now(),
            )));
        }
        let db_now = D::database_now(tx).await.map_err(db::<D>(operation))?;
        Ok(onestep_core::clock::whole_micros(onestep_core::clock::utc(
            db_now.unwrap_or_else(OffsetDateTime::now_utc),
        )))
    }

    /// Commits when `out` is a success, rolls back otherwise. Every write path ends here, so a
    /// failed or fenced operation never leaves its row locks to a lazy rollback (which would make
    /// other workers' `SKIP LOCKED` claims skip the row until the connection is reused).
    async fn finish<T>(
        tx: Tx<D>,
        out: ExecutionResult<T>,
        operation: ConnectorOperation,
    ) -> ExecutionResult<T> {
        match out {
            Ok(value) => {
                Self::commit(tx, operation).await?;
                Ok(value)
            }
            Err(err) => {
                if let Err(rollback) = tx.rollback().await {
                    tracing::debug!(error = %rollback, "rollback after a failed operation failed");
                }
                Err(err)
            }
        }
    }

    async fn commit(tx: Tx<D>, operation: ConnectorOperation) -> ExecutionResult<()> {
        tx.commit().await.map_err(db::<D>(operation))
    }

    async fn one(
        tx: &mut Tx<D>,
        sql: &str,
        params: Vec<Param>,
        op: ConnectorOperation,
    ) -> ExecutionResult<Option<ExecutionRow>> {
        Ok(D::fetch_executions(tx, sql, params)
            .await
            .map_err(db::<D>(op))?
            .into_iter()
            .next())
    }

    /// The attempts history of an execution, oldest first.
    pub async fn attempts(&self, execution_id: Uuid) -> ExecutionResult<Vec<AttemptRow>> {
        let mut tx = self.begin(ConnectorOperation::Fetch).await?;
        let rows = D::fetch_attempts(
            &mut tx,
            &self.inner.statements.attempts,
            vec![execution_id.into()],
        )
        .await
        .map_err(db::<D>(ConnectorOperation::Fetch))?;
        Self::commit(tx, ConnectorOperation::Fetch).await?;
        Ok(rows)
    }

    /// Counts executions by status in `namespace` (all namespaces when `None`), with the oldest
    /// `created_at` of each status: the numbers to alert on.
    pub async fn stats(&self, namespace: Option<&str>) -> ExecutionResult<Vec<StatusCount>> {
        namespace.map_or(Ok(()), |ns| reject_nul("namespace", ns))?;
        let op = ConnectorOperation::Fetch;
        // One pass over the table, whatever the number of statuses (was two queries per
        // status, each a scan where no index leads with `status`).
        let mut sql = format!(
            "SELECT status, COUNT(*), MIN(created_at) FROM {e}",
            e = D::quote(&self.inner.tables.executions)
        );
        let mut params: Vec<Param> = Vec::new();
        if let Some(ns) = namespace {
            sql.push_str(" WHERE namespace = ?");
            params.push(ns.into());
        }
        sql.push_str(" GROUP BY status");
        let mut tx = self.begin(op).await?;
        let rows = D::fetch_status_counts(&mut tx, &D::render(&sql), params)
            .await
            .map_err(db::<D>(op))?;
        Self::commit(tx, op).await?;
        let mut out: Vec<StatusCount> = ExecutionStatus::ALL
            .into_iter()
            .map(|status| StatusCount {
                status,
                count: 0,
                oldest_created_at: None,
            })
            .collect();
        for (status, count, oldest) in rows {
            // The table's CHECK constraint admits only known statuses; a table without it
            // (created by hand) reports the stranger instead of hiding its rows.
            let known: ExecutionStatus = status.parse().map_err(|_| {
                ExecutionError::Backend(
                    format!("column status holds {status:?}, which is not an execution status")
                        .into(),
                )
            })?;
            if let Some(entry) = out.iter_mut().find(|s| s.status == known) {
                entry.count = usize::try_from(count).unwrap_or(0);
                entry.oldest_created_at = oldest;
            }
        }
        Ok(out)
    }

    /// Deletes terminal executions (and their attempts) finished before `before`, in `namespace`
    /// (every namespace when `None`), at most
    /// `batch` per transaction, until none is left; with `dry_run` only counts them. Returns how
    /// many were (or would be) deleted.
    pub async fn prune(
        &self,
        namespace: Option<&str>,
        before: OffsetDateTime,
        batch: usize,
        dry_run: bool,
    ) -> ExecutionResult<usize> {
        if batch < 1 {
            return Err(ExecutionError::invalid("batch", "must be >= 1, got 0"));
        }
        namespace.map_or(Ok(()), |ns| reject_nul("namespace", ns))?;
        let op = ConnectorOperation::Send;
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let ns = if namespace.is_some() {
            " AND namespace = ?"
        } else {
            ""
        };
        let select = D::render(&format!(
            "SELECT id, version, lease_token FROM {e} WHERE status IN ('succeeded', 'failed', 'cancelled', 'expired') \
             AND finished_at IS NOT NULL AND finished_at < ?{ns} ORDER BY finished_at, id LIMIT ?"
        ));
        let delete_attempts = D::render(&format!("DELETE FROM {a} WHERE execution_id = ?"));
        let delete = D::render(&format!(
            "DELETE FROM {e} WHERE id = ? AND status IN ('succeeded', 'failed', 'cancelled', 'expired')"
        ));
        let mut total = 0;
        loop {
            let mut tx = self.begin(op).await?;
            let limit = if dry_run {
                i64::MAX
            } else {
                i64::try_from(batch).unwrap_or(i64::MAX)
            };
            let rows = D::fetch_candidates(&mut tx, &select, {
                let mut params: Vec<Param> = vec![before.into()];
                params.extend(namespace.map(Param::from));
                params.push(limit.into());
                params
            })
            .await
            .map_err(db::<D>(op))?;
            if dry_run || rows.is_empty() {
                Self::commit(tx, op).await?;
                return Ok(total + if dry_run { rows.len() } else { 0 });
            }
            for (id, _, _) in &rows {
                D::execute(&mut tx, &delete_attempts, vec![(*id).into()])
                    .await
                    .map_err(db::<D>(op))?;
                total += D::execute(&mut tx, &delete, vec![(*id).into()])
                    .await
                    .map_err(db::<D>(op))? as usize;
            }
            Self::commit(tx, op).await?;
        }
    }

    fn insert_params(row: &ExecutionRow) -> Vec<Param> {
        vec![
            row.id.into(),
            row.namespace.clone().into(),
            row.task_name.clone().into(),
            row.status.as_str().into(),
            Param::Json(row.payload.clone()),
            Param::Json(row.metadata.clone()),
            Param::OptJson(row.result.clone()),
            Param::OptJson(row.error.clone()),
            row.idempotency_key.clone().into(),
            row.submission_digest.clone().into(),
            row.attempts.into(),
            row.available_at.into(),
            row.lease_token.into(),
            row.lease_expires_at.into(),
            row.worker_id.clone().into(),
            row.cancel_reason.clone().into(),
            row.cancel_requested_at.into(),
            row.expires_at.into(),
            row.created_at.into(),
            row.updated_at.into(),
            row.started_at.into(),
            row.finished_at.into(),
            row.version.into(),
        ]
    }

    /// Submits each request in its own transaction, in order (`submit`, with transient retries).
    async fn submit_one_by_one(
        &self,
        requests: Vec<ExecutionRequest>,
    ) -> Vec<ExecutionResult<Execution>> {
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            out.push(ExecutionBackend::submit(self, r).await);
        }
        out
    }

    async fn submit_one(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
        let encoded = encode_submission(&request, &self.inner.options.limits)?;
        let op = ConnectorOperation::Send;
        let mut tx = self.begin(op).await?;
        let now = self.now(&mut tx, op).await?;
        let row = ExecutionRow::queued(&request, encoded, new_row_id(), now);
        let inserted = D::execute(
            &mut tx,
            &self.inner.statements.insert,
            Self::insert_params(&row),
        )
        .await;
        match inserted {
            Ok(_) => {
                let signalled = self.signal_work(&mut tx).await;
                Self::finish(tx, signalled, op).await?;
                self.wake_local();
                row.to_execution()
            }
            Err(err) => {
                let unique = matches!(&err, sqlx::Error::Database(e) if e.is_unique_violation());
                let _ = tx.rollback().await;
                let Some(key) = request.idempotency_key.as_ref().filter(|_| unique) else {
                    return Err(db::<D>(op)(err));
                };
                let mut tx = self.begin(op).await?;
                let existing = Self::one(
                    &mut tx,
                    &self.inner.statements.get_by_key,
                    vec![
                        request.namespace.clone().into(),
                        request.task_name.clone().into(),
                        key.clone().into(),
                    ],
                    op,
                )
                .await?;
                Self::commit(tx, op).await?;
                let Some(existing) = existing else {
                    return Err(db::<D>(op)(err));
                };
                if existing.submission_digest != row.submission_digest {
                    return Err(ExecutionError::Conflict(
                        "idempotency key was already used with a different submission".into(),
                    ));
                }
                existing.to_execution()
            }
        }
    }

    /// Wakes this process's idle workers; called after the commit that made work claimable.
    fn wake_local(&self) {
        self.inner.work.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes other processes' idle workers through NOTIFY (at most every 5 ms per backend,
    /// inside the caller's transaction so it is delivered at commit).
    async fn signal_work(&self, tx: &mut Tx<D>) -> ExecutionResult<()> {
        let Some(notify) = D::notify_sql() else {
            return Ok(());
        };
        let due = {
            let mut last = self
                .inner
                .last_notify
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let due = last.is_none_or(|t| t.elapsed() >= Duration::from_millis(5));
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if due {
            D::execute(tx, notify, vec![self.inner.channel.clone().into()])
                .await
                .map_err(db::<D>(ConnectorOperation::Send))?;
        }
        Ok(())
    }

    /// Whether a claim should run maintenance now; marks it done when it should.
    fn maintenance_due(&self) -> bool {
        Self::due(
            &self.inner.last_maintenance,
            self.inner.options.maintenance_interval,
        )
    }

    /// Whether `last` is at least `interval` ago (or never); marks it now when it is.
    fn due(last: &std::sync::Mutex<Option<std::time::Instant>>, interval: Duration) -> bool {
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= interval);
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }

    /// Submits a batch in one transaction: existing rows for the batch's keys are read once,
    /// repeated submissions are answered from them (or rejected as conflicts), and every new row
    /// goes in with multi-row INSERTs (or the dialect's [`Dialect::INSERT_MANY`]). Fails as a
    /// whole on a unique violation (a concurrent submit of the same key); the caller then falls
    /// back to one-by-one submits.
    ///
    /// With `look_up_keys` false (only where the dialect has `INSERT_MANY`, which skips a row
    /// whose key is taken) the keys are not read first: every request is taken for new, which
    /// saves the look-up on a bulk import of new keys. `Ok(None)` (rolled back) when a row was
    /// skipped, that is when a key was taken after all, or in look-up mode, taken by a
    /// concurrent submit.
    async fn submit_batch(
        &self,
        requests: &[ExecutionRequest],
        look_up_keys: bool,
    ) -> ExecutionResult<Option<Vec<ExecutionResult<Execution>>>> {
        const CHUNK: usize = 500;
        let op = ConnectorOperation::Send;
        let e = D::quote(&self.inner.tables.executions);
        // Encoding validates each request first, so an invalid one (a U+0000 in its key, say)
        // fails on its own and never reaches a statement.
        let encoded: Vec<ExecutionResult<EncodedSubmission>> = requests
            .iter()
            .map(|r| encode_submission(r, &self.inner.options.limits))
            .collect();
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let mut results: Vec<Option<ExecutionResult<Execution>>> =
                Vec::with_capacity(requests.len());
            let mut fresh: Vec<(usize, ExecutionRow)> = Vec::new();
            // Keys seen earlier in this batch, so a key repeated inside the batch behaves as two
            // sequential submits.
            let mut batch_keys: std::collections::HashMap<(String, String, String), usize> =
                std::collections::HashMap::new();
            // Existing rows for the batch's keys, read per (namespace, task) with a plain
            // `idempotency_key IN (…)` list: every dialect plans that in about a millisecond,
            // where 500 OR-ed (namespace, task, key) triples take PostgreSQL ~60 ms to plan.
            let mut scopes: std::collections::BTreeMap<(&str, &str), Vec<&str>> =
                std::collections::BTreeMap::new();
            for (r, _) in requests.iter().zip(&encoded).filter(|(_, e)| e.is_ok()) {
                if let Some(key) = &r.idempotency_key {
                    scopes
                        .entry((r.namespace.as_str(), r.task_name.as_str()))
                        .or_default()
                        .push(key.as_str());
                }
            }
            let mut existing: Vec<ExecutionRow> = Vec::new();
            if !look_up_keys {
                scopes.clear();
            }
            for ((namespace, task_name), keys) in &scopes {
                for chunk in keys.chunks(CHUNK) {
                    if let Some(by_keys) = &self.inner.statements.rows_by_keys {
                        let params = vec![
                            Param::from(Value::from(chunk.to_vec()).to_string()),
                            Param::from(namespace.to_string()),
                            Param::from(task_name.to_string()),
                        ];
                        existing.extend(
                            D::fetch_executions(&mut tx, by_keys, params)
                                .await
                                .map_err(db::<D>(op))?,
                        );
                        continue;
                    }
                    let marks = vec!["?"; chunk.len()].join(", ");
                    let sql = D::render(&format!(
                        "SELECT {} FROM {e} WHERE namespace = ? AND task_name = ? \
                         AND idempotency_key IN ({marks})",
                        sql::EXECUTION_COLUMNS
                    ));
                    let mut params = Vec::with_capacity(chunk.len() + 2);
                    params.push(Param::from(namespace.to_string()));
                    params.push(Param::from(task_name.to_string()));
                    params.extend(chunk.iter().map(|k| Param::from(k.to_string())));
                    existing.extend(
                        D::fetch_executions(&mut tx, &sql, params)
                            .await
                            .map_err(db::<D>(op))?,
                    );
                }
            }
            if look_up_keys {
                self.inner
                    .batch_keys_were_stored
                    .store(!existing.is_empty(), Ordering::Relaxed);
            }
            let existing: std::collections::HashMap<(&str, &str, &str), &ExecutionRow> = existing
                .iter()
                .filter_map(|r| {
                    let key = r.idempotency_key.as_deref()?;
                    Some(((r.namespace.as_str(), r.task_name.as_str(), key), r))
                })
                .collect();
            for (index, (request, encoded)) in requests.iter().zip(encoded).enumerate() {
                let encoded = match encoded {
                    Ok(encoded) => encoded,
                    Err(err) => {
                        results.push(Some(Err(err)));
                        continue;
                    }
                };
                if let Some(key) = &request.idempotency_key {
                    let scope = (
                        request.namespace.clone(),
                        request.task_name.clone(),
                        key.clone(),
                    );
                    let prior = existing
                        .get(&(scope.0.as_str(), scope.1.as_str(), key.as_str()))
                        .map(|r| (*r).clone())
                        .or_else(|| {
                            batch_keys
                                .get(&scope)
                                .and_then(|i| fresh.iter().find(|(j, _)| j == i))
                                .map(|(_, r)| r.clone())
                        });
                    if let Some(prior) = prior {
                        results.push(Some(if prior.submission_digest == encoded.digest {
                            prior.to_execution()
                        } else {
                            Err(ExecutionError::Conflict(
                                "idempotency key was already used with a different submission"
                                    .into(),
                            ))
                        }));
                        continue;
                    }
                    batch_keys.insert(scope, index);
                }
                let row = ExecutionRow::queued(request, encoded, new_row_id(), now);
                fresh.push((index, row));
                results.push(None);
            }
            // Rows go in ordered by key, so concurrent batches with overlapping keys take the
            // key index's entries in one order and wait on each other instead of deadlocking.
            let mut ordered: Vec<&(usize, ExecutionRow)> = fresh.iter().collect();
            ordered.sort_by(|(_, a), (_, b)| {
                (&a.namespace, &a.task_name, &a.idempotency_key).cmp(&(
                    &b.namespace,
                    &b.task_name,
                    &b.idempotency_key,
                ))
            });
            for chunk in ordered.chunks(CHUNK) {
                if let Some(sql) = &self.inner.statements.insert_many {
                    let rows: Vec<&ExecutionRow> = chunk.iter().map(|(_, row)| row).collect();
                    let inserted = D::insert_many(&mut tx, sql, &rows)
                        .await
                        .map_err(db::<D>(op))?;
                    if inserted != chunk.len() as u64 {
                        return Ok(None);
                    }
                    continue;
                }
                let values = vec![
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
                    chunk.len()
                ]
                .join(", ");
                let insert = D::render(&format!(
                    "INSERT INTO {e} ({}) VALUES {values}",
                    sql::EXECUTION_COLUMNS
                ));
                let params: Vec<Param> = chunk
                    .iter()
                    .flat_map(|(_, row)| Self::insert_params(row))
                    .collect();
                D::execute(&mut tx, &insert, params)
                    .await
                    .map_err(db::<D>(op))?;
            }
            if !fresh.is_empty() {
                self.signal_work(&mut tx).await?;
            }
            let mut fresh = fresh.into_iter().peekable();
            let mut out = Vec::with_capacity(requests.len());
            for (index, result) in results.into_iter().enumerate() {
                match result {
                    Some(r) => out.push(r),
                    None => match fresh.next_if(|(i, _)| *i == index) {
                        Some((_, row)) => out.push(row.to_execution()),
                        None => {
                            return Err(ExecutionError::Backend(
                                "batched submit lost track of a row".into(),
                            ));
                        }
                    },
                }
            }
            Ok(Some(out))
        }
        .await;
        if let Ok(None) = out {
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %rollback, "rollback after a skipped batch insert failed");
            }
            return Ok(None);
        }
        Self::finish(tx, out, op).await
    }

    async fn maintain(&self, tx: &mut Tx<D>, now: OffsetDateTime) -> ExecutionResult<()> {
        let s = &self.inner.statements;
        let batch = i64::try_from(self.inner.options.reclaim_batch_size).unwrap_or(i64::MAX);
        let op = ConnectorOperation::Fetch;
        let expiring = if Self::due(
            &self.inner.last_expiry_sweep,
            self.inner.options.expiry_sweep_interval,
        ) {
            let sweep = match self.inner.claim_column.get() {
                Some(c) => &c.expire_candidates,
                None => &s.expire_candidates,
            };
            D::fetch_candidates(tx, sweep, vec![now.into(), batch.into()])
                .await
                .map_err(db::<D>(op))?
        } else {
            Vec::new()
        };
        if expiring.len() as u64 >= batch.max(0) as u64 {
            // A full batch: there may be more, so sweep again on the next maintenance pass.
            *self
                .inner
                .last_expiry_sweep
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
        }
        for (id, version, _) in expiring {
            D::execute(
                tx,
                &s.expire,
                vec![
                    now.into(),
                    now.into(),
                    id.into(),
                    version.into(),
                    now.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
        }
        // Lapsed cancel requests become cancelled; lapsed leases go back to retrying.
        self.sweep_leases(
            tx,
            &s.cancel_expiry_candidates,
            &s.cancel_expiry,
            AttemptStatus::Cancelled,
            now,
            batch,
        )
        .await?;
        self.sweep_leases(
            tx,
            &s.reclaim_candidates,
            &s.reclaim,
            AttemptStatus::LeaseLost,
            now,
            batch,
        )
        .await?;
        Ok(())
    }

    /// One lease sweep of maintenance: selects up to `batch` candidates with `candidates`, applies
    /// `apply` to each (fenced by version and lease token), and ends the attempt holding the token
    /// with `attempt_status` where `apply` changed the row.
    async fn sweep_leases(
        &self,
        tx: &mut Tx<D>,
        candidates: &str,
        apply: &str,
        attempt_status: AttemptStatus,
        now: OffsetDateTime,
        batch: i64,
    ) -> ExecutionResult<()> {
        let op = ConnectorOperation::Fetch;
        let rows = D::fetch_candidates(tx, candidates, vec![now.into(), batch.into()])
            .await
            .map_err(db::<D>(op))?;
        for (id, version, token) in rows {
            let changed = D::execute(
                tx,
                apply,
                vec![
                    now.into(),
                    now.into(),
                    id.into(),
                    version.into(),
                    token.into(),
                    now.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if changed == 1 {
                D::execute(
                    tx,
                    &self.inner.statements.finish_attempt_by_token,
                    vec![
                        attempt_status.as_str().into(),
                        now.into(),
                        id.into(),
                        token.into(),
                    ],
                )
                .await
                .map_err(db::<D>(op))?;
            }
        }
        Ok(())
    }

    /// The claim statement for `task_count` task names, with the dialect's placeholders; for
    /// checking its plan with `EXPLAIN` (it must walk the claim index without a filesort).
    pub fn claim_sql(&self, task_count: usize) -> String {
        let column = self.inner.claim_column.get();
        if task_count == 1 {
            return match column {
                Some(c) => c.claim_one_task.clone(),
                None => self.inner.statements.claim_one_task.clone(),
            };
        }
        let statement = {
            let marks = vec!["?"; task_count].join(", ");
            let t = &self.inner.tables;
            D::render(&sql::render(
                &sql::CLAIM.replace("{tasks}", &format!("IN ({marks})")),
                &D::quote(&t.executions),
                &D::quote(&t.attempts),
                D::FOR_UPDATE,
                D::SKIP_LOCKED,
            ))
        };
        match column {
            Some(c) => c.claim(&statement),
            None => statement,
        }
    }

    /// The dialect's one-statement claim for `task_count` task names (`None` where the dialect
    /// claims in steps), with the dialect's placeholders; for checking its plan with `EXPLAIN`.
    pub fn claim_in_one_statement_sql(&self, task_count: usize) -> Option<String> {
        let template = D::CLAIM_IN_ONE_STATEMENT?;
        if task_count == 1 {
            return self
                .inner
                .statements
                .claim_one_task_in_one_statement
                .clone();
        }
        let marks = vec!["?"; task_count].join(", ");
        let t = &self.inner.tables;
        Some(D::render(&sql::render(
            &one_statement_claim(template, &format!("IN ({marks})")),
            &D::quote(&t.executions),
            &D::quote(&t.attempts),
            D::FOR_UPDATE,
            D::SKIP_LOCKED,
        )))
    }

    /// Whether the running attempt of a lease exists.
    async fn attempt_is_running(
        &self,
        tx: &mut Tx<D>,
        execution_id: Uuid,
        attempt_id: Uuid,
        token: Uuid,
        op: ConnectorOperation,
    ) -> ExecutionResult<bool> {
        let rows = D::fetch_attempts(
            tx,
            &self.inner.statements.get_running_attempt,
            vec![attempt_id.into(), execution_id.into(), token.into()],
        )
        .await
        .map_err(db::<D>(op))?;
        Ok(!rows.is_empty())
    }
}

#[async_trait]
impl<D: Dialect> ExecutionBackend for SqlExecutionBackend<D> {
    fn backend_name(&self) -> &str {
        D::NAME
    }

    async fn open(&self) -> ExecutionResult<()> {
        self.pool().await?;
        self.inner.opens.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn close(&self) -> ExecutionResult<()> {
        let before = self
            .inner
            .opens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            });
        if before == Ok(1) && self.inner.owns_connector {
            *self.inner.ready.lock().await = false;
            self.inner.connector.close().await;
        }
        Ok(())
    }

    async fn submit(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
        retry_transient(|| self.submit_one(request.clone())).await
    }

    async fn submit_many(
        &self,
        requests: Vec<ExecutionRequest>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        if requests.len() < 2 {
            return Ok(self.submit_one_by_one(requests).await);
        }
        // Where the dialect's batch insert skips taken keys, first try the batch as all new
        // (no look-up); a batch that turns out to repeat a stored key goes again with one. After
        // a batch whose look-up found stored keys (a client resubmitting), batches read their
        // keys first until one finds none, so retries do not pay for an insert and a rollback.
        let optimistic = self.inner.statements.insert_many.is_some()
            && !self.inner.batch_keys_were_stored.load(Ordering::Relaxed);
        let mut out = retry_transient(|| self.submit_batch(&requests, !optimistic)).await;
        if optimistic && matches!(out, Ok(None)) {
            out = retry_transient(|| self.submit_batch(&requests, true)).await;
        }
        // A concurrent submit took one of the keys between our check and the insert (a skipped
        // row, or a unique violation): the transaction rolled back, so submitting one by one
        // resolves each key on its own.
        let raced = match out {
            Ok(Some(out)) => {
                self.wake_local();
                return Ok(out);
            }
            Ok(None) => None,
            Err(err) if is_unique_violation(&err) => Some(err),
            // Any other failure (including a lost COMMIT reply) leaves the outcome unknown:
            // report it rather than submitting again, which could duplicate keyless requests.
            Err(err) => return Err(err),
        };
        tracing::debug!(error = ?raced, "batched submit raced on a key; submitting one by one");
        Ok(self.submit_one_by_one(requests).await)
    }

    async fn get(&self, namespace: &str, id: Uuid) -> ExecutionResult<Option<Execution>> {
        if namespace.contains('\0') {
            // No namespace holding U+0000 can be stored (PostgreSQL would refuse the query).
            return Ok(None);
        }
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let row = Self::one(
            &mut tx,
            &self.inner.statements.get,
            vec![namespace.into(), id.into()],
            op,
        )
        .await?;
        Self::commit(tx, op).await?;
        row.map(|r| r.to_execution()).transpose()
    }

    async fn list(&self, query: &ExecutionQuery) -> ExecutionResult<ExecutionPage> {
        query.validate()?;
        let after = query
            .cursor
            .as_deref()
            .map(decode_cursor)
            .transpose()
            .map_err(|e| ExecutionError::invalid("cursor", format!("is rejected: {e}")))?;
        let mut sql = format!(
            "SELECT {} FROM {} WHERE namespace = ?",
            sql::EXECUTION_COLUMNS,
            D::quote(&self.inner.tables.executions)
        );
        let mut params: Vec<Param> = vec![query.namespace.clone().into()];
        if let Some(task) = &query.task_name {
            sql.push_str(" AND task_name = ?");
            params.push(task.clone().into());
        }
        if let Some(status) = query.status {
            sql.push_str(" AND status = ?");
            params.push(status.as_str().into());
        }
        if let Some((created_at, id)) = after {
            sql.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
            params.extend([created_at.into(), created_at.into(), id.into()]);
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT ?");
        params.push(i64::from(query.limit).saturating_add(1).into());
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let rows = D::fetch_executions(&mut tx, &D::render(&sql), params)
            .await
            .map_err(db::<D>(op))?;
        Self::commit(tx, op).await?;
        page_of(rows, query.limit as usize)
    }

    async fn request_cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<&str>,
    ) -> ExecutionResult<Option<Execution>> {
        validate_cancel_reason(reason)?;
        if namespace.contains('\0') {
            return Ok(None);
        }
        let op = ConnectorOperation::Send;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let Some(mut row) = Self::one(
                &mut tx,
                &self.inner.statements.get_in_namespace_for_update,
                vec![namespace.into(), id.into()],
                op,
            )
            .await?
            else {
                return Ok(None);
            };
            if let Some(target) = cancel_target(row.status) {
                let finished = (target == ExecutionStatus::Cancelled).then_some(now);
                D::execute(
                    &mut tx,
                    &self.inner.statements.cancel,
                    vec![
                        target.as_str().into(),
                        reason.map(str::to_string).into(),
                        now.into(),
                        finished.or(row.finished_at).into(),
                        now.into(),
                        id.into(),
                        row.version.into(),
                    ],
                )
                .await
                .map_err(db::<D>(op))?;
                row.status = target;
                row.cancel_reason = reason.map(str::to_string);
                row.cancel_requested_at = Some(now);
                row.finished_at = finished.or(row.finished_at);
                row.updated_at = now;
                row.version += 1;
            }
            row.to_execution().map(Some)
        }
        .await;
        Self::finish(tx, out, op).await
    }
}

#[async_trait]
impl<D: Dialect> LeasedExecutionBackend for SqlExecutionBackend<D> {
    async fn claim(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ExecutionLease>> {
        reject_nul("namespace", namespace)?;
        validate_claim(task_names, limit, lease_duration, worker_id)?;
        retry_transient(|| self.claim_once(namespace, task_names, limit, lease_duration, worker_id))
            .await
    }

    async fn heartbeat(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_duration: Duration,
    ) -> ExecutionResult<HeartbeatResult> {
        self.heartbeat_once(execution_id, attempt_id, lease_token, lease_duration)
            .await
    }

    /// Renews distinct leases in one transaction, four statements whatever their number (the
    /// leases of one execution twice, or a zero lease, go one by one); each lease is decided on
    /// its own, as [`heartbeat`](LeasedExecutionBackend::heartbeat) decides it.
    async fn heartbeat_many(
        &self,
        leases: &[(Uuid, Uuid, Uuid)],
        lease_duration: Duration,
    ) -> ExecutionResult<Vec<ExecutionResult<HeartbeatResult>>> {
        if leases.len() < 2
            || !distinct_executions(leases.iter().map(|l| l.0))
            || lease_duration.is_zero()
        {
            let mut out = Vec::with_capacity(leases.len());
            for &(execution_id, attempt_id, token) in leases {
                out.push(
                    self.heartbeat_once(execution_id, attempt_id, token, lease_duration)
                        .await,
                );
            }
            return Ok(out);
        }
        self.heartbeat_batch(leases, lease_duration).await
    }

    async fn complete(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution> {
        let done = retry_transient(|| {
            self.complete_once(execution_id, attempt_id, lease_token, completion.clone())
        })
        .await?;
        if done.status == ExecutionStatus::Retrying {
            self.wake_local();
        }
        Ok(done)
    }

    async fn complete_many(
        &self,
        completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        if completions.len() < 2 || !distinct_executions(completions.iter().map(|c| c.0)) {
            // One completion, or the same execution twice: complete them one by one, in order.
            let mut out = Vec::with_capacity(completions.len());
            for (execution_id, attempt_id, token, completion) in completions {
                out.push(
                    self.complete(execution_id, attempt_id, token, completion)
                        .await,
                );
            }
            return Ok(out);
        }
        match retry_transient(|| self.complete_batch(&completions)).await {
            Ok(out) => {
                if out.iter().any(|r| {
                    r.as_ref()
                        .is_ok_and(|e| e.status == ExecutionStatus::Retrying)
                }) {
                    self.wake_local();
                }
                Ok(out)
            }
            Err(err) => {
                // The batch failed as a whole: each completion gets its own answer.
                tracing::debug!(error = %err, "batched completion failed; completing one by one");
                let mut out = Vec::with_capacity(completions.len());
                for (execution_id, attempt_id, token, completion) in completions {
                    out.push(
                        self.complete(execution_id, attempt_id, token, completion)
                            .await,
                    );
                }
                Ok(out)
            }
        }
    }

    async fn release(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
    ) -> ExecutionResult<Execution> {
        let released =
            retry_transient(|| self.release_once(execution_id, attempt_id, lease_token)).await?;
        self.wake_local();
        Ok(released)
    }

    async fn lease_remaining(&self, lease_expires_at: OffsetDateTime) -> ExecutionResult<Duration> {
        let op = ConnectorOperation::Heartbeat;
        let mut tx = self.begin(op).await?;
        let now = self.now(&mut tx, op).await?;
        Self::commit(tx, op).await?;
        Ok(Duration::try_from(lease_expires_at - now).unwrap_or(Duration::ZERO))
    }

    fn validate_result(&self, result: &Value) -> ExecutionResult<()> {
        encode_result(result, &self.inner.options.limits).map(|_| ())
    }

    async fn wait_for_work(&self, _namespace: &str, _task_names: &[String], timeout: Duration) {
        let mut work = self.inner.work.subscribe();
        if self.inner.listener.get().is_none()
            && let Ok(pool) = self.inner.connector.pool()
            && let Some(task) = D::listen(pool, self.inner.channel.clone(), self.inner.work.clone())
        {
            let _ = self
                .inner
                .listener
                .set(tokio_util::task::AbortOnDropHandle::new(task));
        }
        let _ = tokio::time::timeout(timeout, work.changed()).await;
    }
}

/// The lease operations, each one transaction.
impl<D: Dialect> SqlExecutionBackend<D> {
    /// One claim transaction: maintenance when it is due, then the batch, in one statement
    /// where the dialect has one, else in steps.
    async fn claim_once(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ExecutionLease>> {
        let worker_id = worker_id.trim();
        let maintain = self.maintenance_due();
        if let Some(sql) = self.claim_in_one_statement_sql(task_names.len()) {
            let claimed = self
                .claim_in_one_statement(
                    &sql,
                    maintain,
                    namespace,
                    task_names,
                    limit,
                    lease_duration,
                    worker_id,
                )
                .await?;
            if let Some(leases) = claimed {
                return Ok(leases);
            }
            // A claimed row's stored values do not decode. That transaction rolled back (with
            // its maintenance); the claim in steps runs both again, fails that row without
            // starting it and claims the rest.
        }
        self.claim_in_steps(
            maintain,
            namespace,
            task_names,
            limit,
            lease_duration,
            worker_id,
        )
        .await
    }

    /// [`Self::claim_once`] with the dialect's one-statement claim `sql`. `None`: a claimed row
    /// does not decode, and the transaction was rolled back.
    #[allow(clippy::too_many_arguments)] // the claim's arguments, plus the statement and maintenance
    async fn claim_in_one_statement(
        &self,
        sql: &str,
        maintain: bool,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Option<Vec<ExecutionLease>>> {
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            // The statement reads the transaction's time itself (one round trip fewer); `now` is
            // bound only when it is known anyway: an injected clock, or read for maintenance.
            let now = if maintain || self.inner.options.clock.is_some() {
                let now = self.now(&mut tx, op).await?;
                if maintain {
                    self.maintain(&mut tx, now).await?;
                }
                Some(now)
            } else {
                None
            };
            let limit = limit.min(MAX_CLAIM_ROWS);
            let fresh: Vec<(Uuid, Uuid)> =
                (0..limit).map(|_| (Uuid::new_v4(), new_row_id())).collect();
            let list = |pick: fn(&(Uuid, Uuid)) -> Uuid| {
                fresh
                    .iter()
                    .map(|f| pick(f).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let micros = i64::try_from(lease_duration.as_micros()).unwrap_or(i64::MAX);
            let mut params: Vec<Param> = vec![namespace.into()];
            params.extend(task_names.iter().map(|t| Param::from(t.trim())));
            params.extend([
                now.into(),
                now.into(),
                i64::try_from(limit).unwrap_or(1000).into(),
                list(|f| f.0).into(),
                list(|f| f.1).into(),
                now.map(|now| later(now, lease_duration)).into(),
                now.into(),
                micros.into(),
                worker_id.into(),
                now.into(),
                now.into(),
            ]);
            let rows = D::fetch_executions(&mut tx, sql, params)
                .await
                .map_err(db::<D>(op))?;
            let attempt_ids: std::collections::HashMap<Uuid, Uuid> = fresh.into_iter().collect();
            let mut leases = Vec::with_capacity(rows.len());
            for mut row in rows {
                let Some((lease_token, attempt_id)) = row
                    .lease_token
                    .and_then(|t| attempt_ids.get(&t).map(|a| (t, *a)))
                else {
                    return Err(ExecutionError::Backend(
                        format!(
                            "claim returned execution {} without a lease of its own",
                            row.id
                        )
                        .into(),
                    ));
                };
                // `updated_at` is the transaction's time when `now` was not bound; the lease ends
                // exactly where the claim in steps puts it.
                let lease_expires_at = later(now.unwrap_or(row.updated_at), lease_duration);
                row.lease_expires_at = Some(lease_expires_at);
                let Ok(execution) = row.to_execution() else {
                    return Ok(None);
                };
                leases.push(ExecutionLease {
                    execution,
                    attempt_id,
                    lease_token,
                    lease_expires_at,
                });
            }
            Ok(Some(leases))
        }
        .await;
        match out {
            Ok(None) => {
                if let Err(rollback) = tx.rollback().await {
                    tracing::debug!(error = %rollback, "rollback of a claim with an undecodable row failed");
                }
                Ok(None)
            }
            out => Self::finish(tx, out, op).await,
        }
    }

    /// [`Self::claim_once`] in steps: the locking select, one `UPDATE` and one multi-row `INSERT`.
    async fn claim_in_steps(
        &self,
        maintain: bool,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ExecutionLease>> {
        let op = ConnectorOperation::Fetch;
        let worker_id = worker_id.to_string();
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            if maintain {
                self.maintain(&mut tx, now).await?;
            }
            let mut params: Vec<Param> = vec![namespace.into()];
            params.extend(task_names.iter().map(|t| Param::from(t.trim())));
            params.extend([now.into(), now.into(), i64::try_from(limit.min(MAX_CLAIM_ROWS)).unwrap_or(1000).into()]);
            let rows = D::fetch_executions(&mut tx, &self.claim_sql(task_names.len()), params)
                .await
                .map_err(db::<D>(op))?;
            // A row whose stored values do not decode would fail every claim of its task forever:
            // fail it (it never started) and claim the rest.
            let mut rows = rows;
            let mut poisoned = Vec::new();
            rows.retain(|r| match r.to_execution() {
                Ok(_) => true,
                Err(err) => {
                    poisoned.push((r.id, err.to_string()));
                    false
                }
            });
            for (id, why) in poisoned {
                tracing::error!(execution_id = %id, error = %why, "failing an execution whose stored values cannot be decoded");
                let mut detail = onestep_core::execution::ExecutionErrorDetail::new("error", "ExecutionEncodingError")?;
                detail.stage = Some("delivery_action".into());
                let fail = D::render(&format!(
                    "UPDATE {} SET status = 'failed', finished_at = ?, updated_at = ?, error = ?, \
                     version = version + 1 WHERE id = ?",
                    D::quote(&self.inner.tables.executions)
                ));
                D::execute(&mut tx, &fail, vec![now.into(), now.into(), Param::Json(detail.to_json()), id.into()])
                    .await
                    .map_err(db::<D>(op))?;
            }
            let lease_expires_at = later(now, lease_duration);
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            // The rows are locked (FOR UPDATE SKIP LOCKED, or SQLite's write transaction), so
            // the whole batch starts in two statements: one UPDATE and one multi-row INSERT.
            let (e, a) = (D::quote(&self.inner.tables.executions), D::quote(&self.inner.tables.attempts));
            let marks = vec!["?"; rows.len()].join(", ");
            let cases = vec!["WHEN ? THEN ?"; rows.len()].join(" ");
            let start = D::render(&format!(
                "UPDATE {e} SET status = 'running', attempts = attempts + 1, lease_token = CASE id {cases} END, \
                 lease_expires_at = ?, worker_id = ?, started_at = COALESCE(started_at, ?), updated_at = ?, \
                 version = version + 1 WHERE id IN ({marks})"
            ));
            let insert = D::render(&format!(
                "INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, error, started_at, \
                 heartbeat_at, finished_at) VALUES {}",
                vec!["(?, ?, ?, ?, ?, 'running', NULL, ?, ?, NULL)"; rows.len()].join(", ")
            ));
            let mut start_params: Vec<Param> = Vec::with_capacity(rows.len() * 3 + 4);
            let mut insert_params: Vec<Param> = Vec::with_capacity(rows.len() * 7);
            let mut leases = Vec::with_capacity(rows.len());
            for mut row in rows.clone() {
                let attempt_id = new_row_id();
                let lease_token = Uuid::new_v4();
                start_params.extend([row.id.into(), lease_token.into()]);
                row.status = ExecutionStatus::Running;
                row.attempts += 1;
                row.lease_token = Some(lease_token);
                row.lease_expires_at = Some(lease_expires_at);
                row.worker_id = Some(worker_id.clone());
                row.started_at = row.started_at.or(Some(now));
                row.updated_at = now;
                row.version += 1;
                insert_params.extend([
                    attempt_id.into(),
                    row.id.into(),
                    row.attempts.into(),
                    lease_token.into(),
                    worker_id.clone().into(),
                    now.into(),
                    now.into(),
                ]);
                leases.push(ExecutionLease { execution: row.to_execution()?, attempt_id, lease_token, lease_expires_at });
            }
            start_params.extend([lease_expires_at.into(), worker_id.clone().into(), now.into(), now.into()]);
            start_params.extend(rows.iter().map(|r| Param::from(r.id)));
            let started = D::execute(&mut tx, &start, start_params).await.map_err(db::<D>(op))?;
            if started != rows.len() as u64 {
                return Err(ExecutionError::Backend(
                    format!("claim updated {started} of {} locked rows", rows.len()).into(),
                ));
            }
            D::execute(&mut tx, &insert, insert_params).await.map_err(db::<D>(op))?;
            Ok(leases)
        }
        .await;
        Self::finish(tx, out, op).await
    }

    async fn heartbeat_once(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_duration: Duration,
    ) -> ExecutionResult<HeartbeatResult> {
        if lease_duration.is_zero() {
            return Err(ExecutionError::invalid(
                "lease_duration_s",
                "must be > 0, got 0",
            ));
        }
        let op = ConnectorOperation::Heartbeat;
        let s = &self.inner.statements;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let expires = later(now, lease_duration);
            let renewed = D::execute(
                &mut tx,
                &s.heartbeat,
                vec![
                    expires.into(),
                    now.into(),
                    execution_id.into(),
                    lease_token.into(),
                    now.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            let beat = D::execute(
                &mut tx,
                &s.heartbeat_attempt,
                vec![
                    now.into(),
                    attempt_id.into(),
                    execution_id.into(),
                    lease_token.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if renewed != 1 || beat != 1 {
                return Err(ExecutionError::lease_lost());
            }
            let row = Self::one(
                &mut tx,
                &s.get_for_update.replace(D::FOR_UPDATE, ""),
                vec![execution_id.into()],
                op,
            )
            .await?;
            let cancel_requested =
                row.is_some_and(|r| r.status == ExecutionStatus::CancelRequested);
            Ok(HeartbeatResult {
                lease_expires_at: expires,
                cancel_requested,
            })
        }
        .await;
        Self::finish(tx, out, op).await
    }

    async fn complete_once(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution> {
        let completion = completion.validate()?;
        let op = ConnectorOperation::Ack;
        let s = &self.inner.statements;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let Some(mut row) =
                Self::one(&mut tx, &s.get_for_update, vec![execution_id.into()], op).await?
            else {
                return Err(ExecutionError::LeaseLost("execution does not exist".into()));
            };
            let requested = completion.status();
            let (status, result, error) = if cancel_wins(&completion, row.status) {
                (ExecutionStatus::Cancelled, None, None)
            } else {
                match &completion {
                    ExecutionCompletion::Succeeded { result } => (
                        requested,
                        Some(encode_result(result, &self.inner.options.limits)?),
                        None,
                    ),
                    other => (requested, None, other.error().map(|e| e.to_json())),
                }
            };
            let fenced = row.lease_token == Some(lease_token)
                && completion_sources(requested).contains(&row.status)
                && row.lease_expires_at.is_some_and(|e| e > now);
            if !fenced {
                if is_replay(
                    requested,
                    row.status,
                    row.result.as_ref(),
                    row.error.as_ref(),
                    result.as_ref(),
                    error.as_ref(),
                ) {
                    return row.to_execution();
                }
                return Err(ExecutionError::lease_lost());
            }
            let (available_at, finished_at) = match &completion {
                ExecutionCompletion::Retrying { delay_s, .. }
                    if status == ExecutionStatus::Retrying =>
                {
                    (
                        later(now, Duration::from_secs_f64(delay_s.unwrap_or(0.0))),
                        None,
                    )
                }
                _ => (row.available_at, Some(now)),
            };
            let changed = D::execute(
                &mut tx,
                &s.complete,
                vec![
                    status.as_str().into(),
                    now.into(),
                    Param::OptJson(result.clone()),
                    Param::OptJson(error.clone()),
                    available_at.into(),
                    finished_at.into(),
                    execution_id.into(),
                    row.version.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if changed != 1 {
                return Err(ExecutionError::lease_lost());
            }
            let attempt = D::execute(
                &mut tx,
                &s.finish_attempt,
                vec![
                    attempt_status_for(status).as_str().into(),
                    Param::OptJson(error.clone()),
                    now.into(),
                    attempt_id.into(),
                    execution_id.into(),
                    lease_token.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if attempt != 1 {
                return Err(ExecutionError::LeaseLost(
                    "execution attempt is no longer valid".into(),
                ));
            }
            row.status = status;
            row.updated_at = now;
            row.version += 1;
            row.lease_token = None;
            row.lease_expires_at = None;
            row.worker_id = None;
            row.result = result;
            row.error = error;
            row.available_at = available_at;
            row.finished_at = finished_at;
            row.to_execution()
        }
        .await;
        Self::finish(tx, out, op).await
    }

    /// A statement over a batch of ids and its id parameters: `template`'s `{ids}` becomes the
    /// dialect's fixed-shape match with the ids as one text ([`Dialect::ID_IN_TEXT_LIST`]),
    /// planned per call (a plan kept from the start of a drain, when the attempts table was
    /// nearly empty, would scan the whole table for every batch once it has grown), or
    /// `IN (?, …)` with one parameter per id (kept prepared only while short, see
    /// [`crate::param::is_stable`]).
    fn over_ids(
        &self,
        template: &str,
        ids: impl ExactSizeIterator<Item = Uuid>,
    ) -> (String, Vec<Param>) {
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let (prefix, matcher, params) = match D::ID_IN_TEXT_LIST {
            Some(matcher) => {
                let list = ids.map(|id| id.to_string()).collect::<Vec<_>>().join(",");
                (PLAN_PER_CALL, matcher.to_string(), vec![Param::Text(list)])
            }
            None => (
                "",
                format!("IN ({})", vec!["?"; ids.len()].join(", ")),
                ids.map(Param::from).collect(),
            ),
        };
        let statement = sql::render(
            &template.replace("{ids}", &matcher),
            &e,
            &a,
            D::FOR_UPDATE,
            D::SKIP_LOCKED,
        );
        (format!("{prefix}{}", D::render(&statement)), params)
    }

    /// Locks the executions of a batch of (execution, attempt) pairs, in id order, and reads
    /// those of their attempts still running: what batched heartbeats and completions decide on.
    async fn lock_batch(
        &self,
        tx: &mut Tx<D>,
        op: ConnectorOperation,
        pairs: impl ExactSizeIterator<Item = (Uuid, Uuid)> + Clone,
    ) -> ExecutionResult<(Vec<ExecutionRow>, Vec<AttemptRow>)> {
        let (lock, execution_ids) = self.over_ids(sql::LOCK_MANY, pairs.clone().map(|p| p.0));
        let (attempts, attempt_ids) = self.over_ids(sql::RUNNING_ATTEMPTS_MANY, pairs.map(|p| p.1));
        let rows = D::fetch_executions(tx, &lock, execution_ids)
            .await
            .map_err(db::<D>(op))?;
        let running = D::fetch_attempts(tx, &attempts, attempt_ids)
            .await
            .map_err(db::<D>(op))?;
        Ok((rows, running))
    }

    /// Renews distinct leases in one transaction: lock their executions (in id order) and read
    /// their running attempts, decide each lease with the rules of
    /// [`heartbeat`](LeasedExecutionBackend::heartbeat), renew the held ones with one UPDATE per
    /// table, commit once. A lease that is not held is reported lost and left unchanged.
    async fn heartbeat_batch(
        &self,
        leases: &[(Uuid, Uuid, Uuid)],
        lease_duration: Duration,
    ) -> ExecutionResult<Vec<ExecutionResult<HeartbeatResult>>> {
        let op = ConnectorOperation::Heartbeat;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let expires = later(now, lease_duration);
            let (rows, running) = self
                .lock_batch(&mut tx, op, leases.iter().map(|l| (l.0, l.1)))
                .await?;
            let mut held = Vec::with_capacity(leases.len());
            let results: Vec<ExecutionResult<HeartbeatResult>> = leases
                .iter()
                .map(|&(execution_id, attempt_id, token)| {
                    let row = rows.iter().find(|r| {
                        r.id == execution_id
                            && r.lease_token == Some(token)
                            && matches!(
                                r.status,
                                ExecutionStatus::Running | ExecutionStatus::CancelRequested
                            )
                            && r.lease_expires_at.is_some_and(|e| e > now)
                    });
                    match row {
                        Some(row) if attempt_runs(&running, execution_id, attempt_id, token) => {
                            held.push((execution_id, attempt_id));
                            Ok(HeartbeatResult {
                                lease_expires_at: expires,
                                cancel_requested: row.status == ExecutionStatus::CancelRequested,
                            })
                        }
                        _ => Err(ExecutionError::lease_lost()),
                    }
                })
                .collect();
            if !held.is_empty() {
                let n = held.len() as u64;
                let (renew, ids) = self.over_ids(sql::HEARTBEAT_MANY, held.iter().map(|h| h.0));
                let renewed = D::execute(
                    &mut tx,
                    &renew,
                    [vec![expires.into(), now.into()], ids].concat(),
                )
                .await
                .map_err(db::<D>(op))?;
                let (beat, ids) =
                    self.over_ids(sql::HEARTBEAT_ATTEMPTS_MANY, held.iter().map(|h| h.1));
                let beaten = D::execute(&mut tx, &beat, [vec![now.into()], ids].concat())
                    .await
                    .map_err(db::<D>(op))?;
                if renewed != n || beaten != n {
                    return Err(ExecutionError::Backend(
                        format!(
                            "batched heartbeat renewed {renewed} executions and {beaten} attempts \
                             of {n} locked leases"
                        )
                        .into(),
                    ));
                }
            }
            Ok(results)
        }
        .await;
        Self::finish(tx, out, op).await
    }

    /// Completes distinct executions in one transaction: lock them all (in id order), decide each
    /// with the same rules as [`complete`](LeasedExecutionBackend::complete), write the accepted
    /// ones with one UPDATE per table, commit once.
    async fn complete_batch(
        &self,
        completions: &[(Uuid, Uuid, Uuid, ExecutionCompletion)],
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        let op = ConnectorOperation::Ack;
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let (rows, running) = self.lock_batch(&mut tx, op, completions.iter().map(|c| (c.0, c.1))).await?;
            let mut results: Vec<Option<ExecutionResult<Execution>>> = Vec::with_capacity(completions.len());
            // Accepted writes: (index, row, status, result, error, available_at, finished_at).
            let mut accepted = Vec::new();
            for (index, (execution_id, attempt_id, token, completion)) in completions.iter().enumerate() {
                let decided = (|| -> ExecutionResult<Option<_>> {
                    let completion = completion.clone().validate()?;
                    let Some(row) = rows.iter().find(|r| r.id == *execution_id) else {
                        return Err(ExecutionError::LeaseLost("execution does not exist".into()));
                    };
                    let requested = completion.status();
                    let (status, result, error) = if cancel_wins(&completion, row.status) {
                        (ExecutionStatus::Cancelled, None, None)
                    } else {
                        match &completion {
                            ExecutionCompletion::Succeeded { result } => {
                                (requested, Some(encode_result(result, &self.inner.options.limits)?), None)
                            }
                            other => (requested, None, other.error().map(|e| e.to_json())),
                        }
                    };
                    let fenced = row.lease_token == Some(*token)
                        && completion_sources(requested).contains(&row.status)
                        && row.lease_expires_at.is_some_and(|e| e > now);
                    if !fenced {
                        if is_replay(requested, row.status, row.result.as_ref(), row.error.as_ref(), result.as_ref(), error.as_ref()) {
                            return row.to_execution().map(|e| Some(Err(e)));
                        }
                        return Err(ExecutionError::lease_lost());
                    }
                    if !attempt_runs(&running, *execution_id, *attempt_id, *token) {
                        return Err(ExecutionError::LeaseLost("execution attempt is no longer valid".into()));
                    }
                    let (available_at, finished_at) = match &completion {
                        ExecutionCompletion::Retrying { delay_s, .. } if status == ExecutionStatus::Retrying => {
                            (later(now, Duration::from_secs_f64(delay_s.unwrap_or(0.0))), None)
                        }
                        _ => (row.available_at, Some(now)),
                    };
                    Ok(Some(Ok((row.clone(), status, result, error, available_at, finished_at))))
                })();
                match decided {
                    Ok(Some(Ok(write))) => {
                        accepted.push((index, write));
                        results.push(None);
                    }
                    Ok(Some(Err(replayed))) => results.push(Some(Ok(replayed))),
                    Ok(None) => results.push(Some(Err(ExecutionError::lease_lost()))),
                    Err(err) => results.push(Some(Err(err))),
                }
            }
            if let (false, Some(statements)) = (accepted.is_empty(), &self.inner.statements.complete_many) {
                let n = accepted.len();
                let writes: Vec<CompletionWrite<'_>> = accepted
                    .iter()
                    .map(|(index, (row, status, result, error, available_at, finished_at))| CompletionWrite {
                        execution_id: row.id,
                        attempt_id: completions[*index].1,
                        status: status.as_str(),
                        attempt_status: attempt_status_for(*status).as_str(),
                        result: result.as_ref(),
                        error: error.as_ref(),
                        available_at: *available_at,
                        finished_at: *finished_at,
                    })
                    .collect();
                let (changed, finished) = D::complete_many(&mut tx, statements, now, &writes).await.map_err(db::<D>(op))?;
                if changed != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion updated {changed} of {n} locked rows").into()));
                }
                if finished != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion finished {finished} of {n} attempts").into()));
                }
            } else if !accepted.is_empty() {
                let n = accepted.len();
                let when = vec!["WHEN ? THEN ?"; n].join(" ");
                let in_marks = vec!["?"; n].join(", ");
                let update = D::render(&format!(
                    "UPDATE {e} SET status = CASE id {when} END, result = CASE id {when} END, \
                     error = CASE id {when} END, available_at = CASE id {when} END, \
                     finished_at = CASE id {when} END, updated_at = ?, version = version + 1, \
                     lease_token = NULL, lease_expires_at = NULL, worker_id = NULL WHERE id IN ({in_marks})"
                ));
                let mut p: Vec<Param> = Vec::with_capacity(n * 10 + n + 1);
                for (_, (row, status, ..)) in &accepted {
                    p.extend([Param::from(row.id), Param::from(status.as_str())]);
                }
                for (_, (row, _, result, ..)) in &accepted {
                    p.extend([Param::from(row.id), Param::OptJson(result.clone())]);
                }
                for (_, (row, _, _, error, ..)) in &accepted {
                    p.extend([Param::from(row.id), Param::OptJson(error.clone())]);
                }
                for (_, (row, _, _, _, available_at, _)) in &accepted {
                    p.extend([Param::from(row.id), Param::from(*available_at)]);
                }
                for (_, (row, _, _, _, _, finished_at)) in &accepted {
                    p.extend([Param::from(row.id), Param::from(*finished_at)]);
                }
                p.push(now.into());
                p.extend(accepted.iter().map(|(_, (row, ..))| Param::from(row.id)));
                let changed = D::execute(&mut tx, &update, p).await.map_err(db::<D>(op))?;
                if changed != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion updated {changed} of {n} locked rows").into()));
                }
                let finish = D::render(&format!(
                    "UPDATE {a} SET status = CASE id {when} END, error = CASE id {when} END, finished_at = ? \
                     WHERE id IN ({in_marks}) AND status = 'running'"
                ));
                let mut p: Vec<Param> = Vec::with_capacity(n * 5 + 1);
                for (index, (_, status, ..)) in &accepted {
                    p.extend([Param::from(completions[*index].1), Param::from(attempt_status_for(*status).as_str())]);
                }
                for (index, (_, _, _, error, ..)) in &accepted {
                    p.extend([Param::from(completions[*index].1), Param::OptJson(error.clone())]);
                }
                p.push(now.into());
                p.extend(accepted.iter().map(|(index, _)| Param::from(completions[*index].1)));
                let finished = D::execute(&mut tx, &finish, p).await.map_err(db::<D>(op))?;
                if finished != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion finished {finished} of {n} attempts").into()));
                }
            }
            let mut out = Vec::with_capacity(completions.len());
            let mut accepted_iter = accepted.into_iter().peekable();
            for (index, result) in results.into_iter().enumerate() {
                match result {
                    Some(r) => out.push(r),
                    None => {
                        let Some((_, (mut row, status, result, error, available_at, finished_at))) =
                            accepted_iter.next_if(|(i, _)| *i == index)
                        else {
                            return Err(ExecutionError::Backend("batched completion lost track of a row".into()));
                        };
                        row.status = status;
                        row.updated_at = now;
                        row.version += 1;
                        row.lease_token = None;
                        row.lease_expires_at = None;
                        row.worker_id = None;
                        row.result = result;
                        row.error = error;
                        row.available_at = available_at;
                        row.finished_at = finished_at;
                        out.push(row.to_execution());
                    }
                }
            }
            Ok(out)
        }
        .await;
        Self::finish(tx, out, op).await
    }

    async fn release_once(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
    ) -> ExecutionResult<Execution> {
        let op = ConnectorOperation::Retry;
        let s = &self.inner.statements;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let Some(mut row) =
                Self::one(&mut tx, &s.get_for_update, vec![execution_id.into()], op).await?
            else {
                return Err(ExecutionError::LeaseLost("execution does not exist".into()));
            };
            let fenced = row.status == ExecutionStatus::Running
                && row.lease_token == Some(lease_token)
                && row.lease_expires_at.is_some_and(|e| e > now);
            if !fenced
                || !self
                    .attempt_is_running(&mut tx, execution_id, attempt_id, lease_token, op)
                    .await?
            {
                return Err(ExecutionError::lease_lost());
            }
            D::execute(
                &mut tx,
                &s.release,
                vec![
                    now.into(),
                    now.into(),
                    execution_id.into(),
                    row.version.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            D::execute(
                &mut tx,
                &s.finish_attempt,
                vec![
                    AttemptStatus::LeaseLost.as_str().into(),
                    Param::OptJson(None),
                    now.into(),
                    attempt_id.into(),
                    execution_id.into(),
                    lease_token.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            row.status = ExecutionStatus::Queued;
            row.available_at = now;
            row.lease_token = None;
            row.lease_expires_at = None;
            row.worker_id = None;
            row.updated_at = now;
            row.version += 1;
            row.to_execution()
        }
        .await;
        Self::finish(tx, out, op).await
    }
}

//! [`SqlExecutionBackend`]: the execution state machine, written once over a [`Dialect`].
//!
//! | module | what happens there |
//! |---|---|
//! | `backend` | the [`ExecutionBackend`] and [`LeasedExecutionBackend`] contract: retries of transient errors, one-by-one fallbacks |
//! | `submit` | submit one request or a batch; wake idle workers |
//! | `group` | group commit of submits (SQLite): submits waiting for the connection written in one transaction |
//! | `claim` | claim ready executions (one statement, or in steps) |
//! | `maintain` | at claim time: expire what waited past `expires_at`, reclaim expired leases |
//! | `lease` | check, renew and release a lease |
//! | `complete` | complete an attempt, one or a batch (cancel wins, replays, lost leases) |
//! | `admin` | attempts of one execution, counts per status, pruning |
//! | `progress` | the additive progress column: added with the tables, written by reports, read by the API |
//! | `inspect` | the [`ExecutionInspector`](onestep_core::execution::ExecutionInspector) reads of a dashboard and the queue-depth metrics |
//! | `statements` | every statement, rendered once for the tables and dialect |
//! | `json_batch` | MariaDB's batch statements of one shape, the batch as one `JSON_TABLE` array |
//!
//! This file holds the backend itself, its options, and the transaction helpers every module
//! uses.

mod admin;
mod backend;
mod claim;
mod claim_row;
mod complete;
mod group;
mod inspect;
mod json_batch;
mod lease;
mod maintain;
mod progress;
mod resume;
mod statements;
mod submit;

pub use progress::PROGRESS_COLUMN;
use statements::{ClaimColumn, Statements, one_statement_claim};

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
    CompletionDecision, RowChange, cancel_target, decide_completion,
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
///
/// ```
/// use onestep_sql::BackendOptions;
///
/// let options = BackendOptions::default()
///     .with_tables("billing_executions", "billing_attempts")
///     .with_auto_create(false);
/// assert_eq!(options.table, "billing_executions");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
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

impl BackendOptions {
    /// Sets both tables: [`table`](Self::table) and [`attempts_table`](Self::attempts_table).
    pub fn with_tables(self, executions: impl Into<String>, attempts: impl Into<String>) -> Self {
        self.with_table(executions).with_attempts_table(attempts)
    }

    /// Sets [`table`](Self::table).
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Sets [`attempts_table`](Self::attempts_table).
    pub fn with_attempts_table(mut self, attempts_table: impl Into<String>) -> Self {
        self.attempts_table = attempts_table.into();
        self
    }

    /// Sets [`auto_create`](Self::auto_create).
    pub fn with_auto_create(mut self, auto_create: bool) -> Self {
        self.auto_create = auto_create;
        self
    }

    /// Sets [`limits`](Self::limits).
    pub fn with_limits(mut self, limits: ExecutionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets [`reclaim_batch_size`](Self::reclaim_batch_size).
    pub fn with_reclaim_batch_size(mut self, reclaim_batch_size: usize) -> Self {
        self.reclaim_batch_size = reclaim_batch_size;
        self
    }

    /// Sets [`clock`](Self::clock).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets [`maintenance_interval`](Self::maintenance_interval).
    pub fn with_maintenance_interval(mut self, interval: Duration) -> Self {
        self.maintenance_interval = interval;
        self
    }

    /// Sets [`expiry_sweep_interval`](Self::expiry_sweep_interval).
    pub fn with_expiry_sweep_interval(mut self, interval: Duration) -> Self {
        self.expiry_sweep_interval = interval;
        self
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
    /// Whether the executions table has the progress column, learned when the backend opens.
    progress_column: std::sync::atomic::AtomicBool,
    /// Whether batches run through `statements.json` ([`Dialect::json_table_batches`]),
    /// learned when the backend opens.
    json_batches: std::sync::atomic::AtomicBool,
    opens: AtomicUsize,
    last_maintenance: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the expiry sweep last ran in this process.
    last_expiry_sweep: std::sync::Mutex<Option<std::time::Instant>>,
    /// Where the claims in steps of each queue resume reading the claim index
    /// ([`Dialect::claim_resume_index`]).
    claim_resumes: resume::ClaimResumes,
    /// Whether the last batched submit that read its keys found some already stored: the next
    /// batch then reads its keys first instead of trying them as new (see `submit_many`).
    batch_keys_were_stored: std::sync::atomic::AtomicBool,
    /// Submits waiting to be written together ([`Dialect::GROUP_SUBMITS`]).
    group: group::SubmitGroup,
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
            .is_some_and(is_unique),
        _ => false,
    }
}

/// Whether a database error is a unique violation (a taken key or id).
fn is_unique(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(d) if d.is_unique_violation())
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
                progress_column: std::sync::atomic::AtomicBool::new(false),
                json_batches: std::sync::atomic::AtomicBool::new(false),
                opens: AtomicUsize::new(0),
                last_maintenance: std::sync::Mutex::new(None),
                last_expiry_sweep: std::sync::Mutex::new(None),
                claim_resumes: resume::ClaimResumes::default(),
                batch_keys_were_stored: std::sync::atomic::AtomicBool::new(false),
                group: group::SubmitGroup::default(),
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

    /// MariaDB's batch statements of one shape, where the backend opened on a server and
    /// tables that allow them ([`Dialect::json_table_batches`]).
    fn json_batches(&self) -> Option<&json_batch::JsonStatements> {
        self.inner
            .statements
            .json
            .as_ref()
            .filter(|_| self.inner.json_batches.load(Ordering::Relaxed))
    }

    /// Makes the backend ready once: checks the server, then creates or checks the tables.
    async fn pool(&self) -> ExecutionResult<sqlx::Pool<D::Db>> {
        let pool = self.inner.connector.pool()?;
        let mut ready = self.inner.ready.lock().await;
        if !*ready {
            D::check_server(&pool).await?;
            D::ensure_tables(&pool, &self.inner.tables, self.inner.options.auto_create).await?;
            let column = D::claim_task_column(&pool, &self.inner.tables).await?;
            let resume_index = D::claim_resume_index(&pool, &self.inner.tables).await?;
            let _ = self.inner.claim_column.set(ClaimColumn::new(
                column,
                &self.inner.statements,
                resume_index.map(|index| (D::quote(&self.inner.tables.executions), index)),
            ));
            let json = D::json_table_batches(&pool, &self.inner.tables).await?;
            self.inner.json_batches.store(json, Ordering::Relaxed);
            let progress = self.ensure_progress_column(&pool).await?;
            self.inner
                .progress_column
                .store(progress, Ordering::Relaxed);
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
        if self.inner.options.clock.is_some() {
            return Ok(self.process_now());
        }
        match D::database_now(tx).await.map_err(db::<D>(operation))? {
            Some(db_now) => Ok(onestep_core::clock::whole_micros(onestep_core::clock::utc(
                db_now,
            ))),
            None => Ok(self.process_now()),
        }
    }

    /// The process's time: the injected clock's, else the system's. Whole microseconds, what
    /// the columns keep, so a returned execution equals the stored one.
    fn process_now(&self) -> OffsetDateTime {
        let now = match &self.inner.options.clock {
            Some(clock) => clock.now(),
            None => OffsetDateTime::now_utc(),
        };
        onestep_core::clock::whole_micros(onestep_core::clock::utc(now))
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
        Ok(crate::decode::executions::<D>(tx, sql, params)
            .await
            .map_err(db::<D>(op))?
            .into_iter()
            .next())
    }
}

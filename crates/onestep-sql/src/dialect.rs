//! The small interface the shared state machine needs from a database.

use async_trait::async_trait;
use onestep_core::execution::stored::ExecutionRow;
use onestep_core::execution::{ExecutionResult, ExecutionStatus};
use onestep_core::{ConnectorErrorKind, ConnectorOperation, ConnectorOperationError};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::param::Param;
use crate::schema::{self, TableNames};

/// Pool sizing and timeouts of a connector. A connector starts with its dialect's
/// [`Dialect::default_pool_settings`]: these defaults, except on SQLite (one connection, see
/// there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// The most connections the pool opens (default 10). On PostgreSQL and MySQL/MariaDB a
    /// connector that submits one by one opens one more of its own for those submits, kept
    /// between them.
    pub max_connections: u32,
    /// How long an operation waits for a connection before failing as transient (default 5 s);
    /// a worker then backs off and retries, so a database outage is noticed quickly.
    pub acquire_timeout: std::time::Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_connections: 10,
            acquire_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// A row of maintenance candidates: id, version and lease token.
pub type Candidate = (Uuid, i64, Option<Uuid>);

/// A row of dialect `D`'s database.
pub type Row<D> = <<D as Dialect>::Db as sqlx::Database>::Row;

/// A future the batch writers return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Runs [`BatchPaths::insert_many`] (rendered) for new executions; returns how many went in,
/// fewer than the rows when a key was taken.
pub type InsertMany<D> = for<'a> fn(
    &'a mut sqlx::Transaction<'static, <D as Dialect>::Db>,
    &'a str,
    &'a [&'a ExecutionRow],
) -> BoxFuture<'a, Result<u64, sqlx::Error>>;

/// Runs [`BatchPaths::insert_one`] (rendered) on a connection outside any transaction, so the
/// statement commits itself: the stored row, with the database's times, or `None` when its
/// idempotency key (or id) was taken. The row's own times are not sent; it is due `delay_us`
/// microseconds after the database's now, and `notify` names the channel to notify, if any.
pub type InsertOne<D> = for<'a> fn(
    &'a mut <<D as Dialect>::Db as sqlx::Database>::Connection,
    &'a str,
    &'a ExecutionRow,
    i64,
    Option<&'a str>,
) -> BoxFuture<'a, Result<Option<ExecutionRow>, sqlx::Error>>;

/// Runs [`BatchPaths::complete_running`] (rendered) on a connection of the pool, outside any
/// transaction (the statement commits by itself), at the given time (`None`: the database's):
/// the executions it completed, with their new values. A completion whose execution is not
/// running under its lease any more is not written and not returned.
pub type CompleteRunning<D> = for<'a> fn(
    &'a sqlx::Pool<<D as Dialect>::Db>,
    &'a str,
    Option<OffsetDateTime>,
    &'a [RunningCompletion<'a>],
) -> BoxFuture<'a, Result<Vec<ExecutionRow>, sqlx::Error>>;

/// Runs [`BatchPaths::complete_running_status`] (rendered) as [`CompleteRunning`] runs
/// `complete_running`: the id and new status of each execution it completed.
pub type CompleteRunningStatus<D> =
    for<'a> fn(
        &'a sqlx::Pool<<D as Dialect>::Db>,
        &'a str,
        Option<OffsetDateTime>,
        &'a [RunningCompletion<'a>],
    ) -> BoxFuture<'a, Result<Vec<(Uuid, ExecutionStatus)>, sqlx::Error>>;

/// Runs [`BatchPaths::complete_many`] (rendered) for completions the state machine accepted
/// (their rows locked) at the given time; returns how many executions and attempts changed.
pub type CompleteMany<D> = for<'a> fn(
    &'a mut sqlx::Transaction<'static, <D as Dialect>::Db>,
    &'a str,
    OffsetDateTime,
    &'a [CompletionWrite<'a>],
) -> BoxFuture<'a, Result<(u64, u64), sqlx::Error>>;

/// The one optional capability of a dialect: statements of fixed shape for batches, so their
/// text, and the server's plan for it, is the same at every batch size, the writers that bind
/// whole columns at once, and a submit in one round trip. Without it, the state machine claims
/// in three statements, looks keys up with `IN (?, …)`, inserts with multi-row `VALUES`, matches ids with
/// `IN (?, …)` and completes with `CASE id WHEN ? THEN ? …` updates, which every dialect runs
/// (MySQL has no `UPDATE … RETURNING`; SQLite runs in-process under one database lock, so its
/// statements cost no round trips).
///
/// Placeholders as in `sql::render`.
pub struct BatchPaths<D: Dialect> {
    /// Claims a batch in one round trip: locks ready rows as `sql::CLAIM` does, starts them,
    /// inserts their attempts and returns the started rows (all columns, in claim order). Also
    /// `{claim}` (`sql::CLAIM` selecting `e.id`), `{now}` (`sql::NOW_OR_TRANSACTION_TIME`, so
    /// only a dialect whose [`Dialect::database_now`] is its `CURRENT_TIMESTAMP` may offer
    /// it) and `{tasks}`. Parameters, in order: namespace, the task names, now, now, limit; the
    /// lease tokens and the attempt ids (as many as the limit, each list one comma-separated
    /// text, paired with the locked rows by position); `lease_expires_at` (NULL: now plus the
    /// next parameter), now, the lease in microseconds, worker id, now, now.
    pub claim: &'static str,
    /// Reads the rows of one (namespace, task) for a batch of idempotency keys, each looked up
    /// through the unique key index whatever the table's statistics say. Parameters: the keys
    /// as one JSON array text, namespace, task name. Returns all execution columns.
    pub rows_by_keys: &'static str,
    /// Inserts a batch of new executions, run by `run_insert_many`. A row whose idempotency key
    /// (or id) is taken fails the statement with a unique violation (no `ON CONFLICT`, whose
    /// speculative insertion costs a quarter of the insert): the state machine then rolls the
    /// batch back and goes again with the stored keys read first. It also checks the row count
    /// against the rows it sent.
    pub insert_many: &'static str,
    /// How `id` matches a batch of ids bound as one comma-separated text (batched completions
    /// and heartbeats lock their rows with it); PostgreSQL's is
    /// `= ANY(string_to_array(?, ',')::uuid[])`.
    pub id_in_text_list: &'static str,
    /// Writes a batch of accepted completions in one statement, run by `run_complete_many`:
    /// updates the executions and finishes their attempts (only those still `running`), and
    /// returns one row with the two counts.
    pub complete_many: &'static str,
    /// Locks the executions of a batch of leases in id order (batched completions and
    /// heartbeats) and reads what deciding on them needs in the same statement. Parameters: the
    /// execution ids and the attempt ids, each list one comma-separated text, paired by
    /// position. Returns, per locked execution, all its columns, then 1 where the paired attempt
    /// is `running` under the execution's lease token, else 0 (as the other dialects' lock
    /// does), then the transaction's time.
    pub lock_leases: &'static str,
    /// Submits one new execution in one statement that commits by itself (one round trip,
    /// where `BEGIN`, the time read, the insert and `COMMIT` took four), run by
    /// `run_insert_one`. It reads the database's time itself, so only a dialect whose
    /// [`Dialect::database_now`] is its `CURRENT_TIMESTAMP` may offer it, and it notifies the
    /// workers' channel when one is given. A row whose key (or id) is taken is skipped and no
    /// row comes back. Parameters: the notify channel (NULL: none), id, namespace, task name,
    /// payload, metadata, idempotency key, submission digest, the delay in microseconds,
    /// `expires_at`. Returns all execution columns of the new row.
    pub insert_one: &'static str,
    /// Runs `insert_one`.
    pub run_insert_one: InsertOne<D>,
    /// Runs `insert_many`.
    pub run_insert_many: InsertMany<D>,
    /// Runs `complete_many`.
    pub run_complete_many: CompleteMany<D>,
    /// Completes a batch of executions that still run under the completions' leases in one
    /// statement that commits by itself, without locking them first, run by
    /// `run_complete_running`: an execution is written only if it is `running` under the
    /// lease, the lease has not ended and the attempt runs under it, and its attempt is
    /// finished in the same statement. The rest (a cancel requested, a lost or ended lease, a
    /// repeated completion, a result it cannot store) are left for `lock_leases` and
    /// `complete_many`, which decide each on its locked row. Parameters: the batch's time (NULL: the database's), then one array
    /// per field of [`RunningCompletion`]. Returns all execution columns of each written row.
    pub complete_running: &'static str,
    /// Runs `complete_running`.
    pub run_complete_running: CompleteRunning<D>,
    /// `complete_running` returning only `id, status` of each written row: what a worker's
    /// batched completion needs (`LeasedExecutionBackend::complete_many_statuses`).
    pub complete_running_status: &'static str,
    /// Runs `complete_running_status`.
    pub run_complete_running_status: CompleteRunningStatus<D>,
}

/// One accepted completion of a batch, as [`BatchPaths::run_complete_many`] writes it: the execution's
/// new state (its lease, token and worker are cleared, its version bumped, `updated_at` set to
/// the batch's time) and its attempt's.
#[derive(Debug, Clone, Copy)]
pub struct CompletionWrite<'a> {
    /// The execution.
    pub execution_id: Uuid,
    /// The attempt being finished (still `running`).
    pub attempt_id: Uuid,
    /// The execution's new status.
    pub status: &'a str,
    /// The attempt's final status.
    pub attempt_status: &'a str,
    /// The stored result (a success), else `None`.
    pub result: Option<&'a serde_json::Value>,
    /// The stored error (a failure or retry), else `None`; written to both rows.
    pub error: Option<&'a serde_json::Value>,
    /// When the execution is next claimable (a retry), else its current `available_at`.
    pub available_at: OffsetDateTime,
    /// When it finished, or `None` for a retry.
    pub finished_at: Option<OffsetDateTime>,
}

/// One completion of a batch as [`BatchPaths::run_complete_running`] writes it, decided for an
/// execution still running under its lease: written only if that is still so.
#[derive(Debug, Clone, Copy)]
pub struct RunningCompletion<'a> {
    /// The execution.
    pub execution_id: Uuid,
    /// The attempt being finished.
    pub attempt_id: Uuid,
    /// The lease the execution and its attempt must still run under.
    pub lease_token: Uuid,
    /// The execution's new status.
    pub status: &'a str,
    /// The attempt's final status.
    pub attempt_status: &'a str,
    /// The stored result (a success), else `None`.
    pub result: Option<&'a serde_json::Value>,
    /// The stored error, else `None`; written to both rows.
    pub error: Option<&'a serde_json::Value>,
    /// A retry: claimable again this many microseconds after the batch's time (and not
    /// finished). `None`: finished at the batch's time, `available_at` unchanged.
    pub retry_after_us: Option<i64>,
}

/// What differs between PostgreSQL, MySQL and SQLite: how to lock, what "now" is, how values bind
/// and decode, how errors classify, and how tables are created.
///
/// Statements are written once with `?` placeholders; [`Dialect::render`] adapts them.
#[async_trait]
pub trait Dialect: Send + Sync + Sized + 'static {
    /// The sqlx database.
    type Db: sqlx::Database;

    /// The backend name in errors and source names (`"postgres"`, `"mysql"`, `"sqlite"`).
    const NAME: &'static str;

    /// The schema rules (identifier limits, DDL) of this dialect.
    const SCHEMA: schema::Dialect;

    /// The clause that locks selected rows for the transaction (`" FOR UPDATE"`, or empty).
    const FOR_UPDATE: &'static str;

    /// The clause that locks selected rows and skips rows locked by others (claims).
    const SKIP_LOCKED: &'static str;

    /// Whether a submit's insert may run on its own, committed by itself, instead of inside
    /// `BEGIN` … `COMMIT` (two round trips fewer). Only for a dialect whose process clock
    /// decides a new row's times ([`Dialect::database_now`] is `None`) and that sends no
    /// notification with a submit ([`Dialect::notify_sql`] is `None`): then the insert needs
    /// nothing else from a transaction. `false` (the default) keeps the transaction.
    const INSERT_ON_ITS_OWN: bool = false;

    /// How many claims one worker's runner may have under way at once
    /// ([`LeasedExecutionBackend::concurrent_claims`](onestep_core::execution::LeasedExecutionBackend::concurrent_claims)).
    /// One (the default) where a second claim cannot help: SQLite, which has one writer.
    const CONCURRENT_CLAIMS: usize = 1;

    /// Whether concurrent submits are written together: the submits that wait while one is
    /// being written go in next, in one transaction, each answered on its own (group commit;
    /// see the `group` module). For an embedded database with one writer (SQLite): there every
    /// write already waits for the one connection, and a group that fails was rolled back, so
    /// its members can be written again one by one. `false` (the default): each submit is its
    /// own transaction. On PostgreSQL and MariaDB it measured well under load but is not enabled:
    /// one writer per backend would serialize submits that ran on the pool's connections side
    /// by side, and a failed `COMMIT` there leaves the group's outcome unknown
    /// (docs/benchmarks.md, "What bounds us now").
    const GROUP_SUBMITS: bool = false;

    /// The statements of fixed shape for batches, and the writers that run them, when the
    /// dialect has them (PostgreSQL); see [`BatchPaths`]. `None` (the default): the statements
    /// every dialect runs.
    const BATCH_PATHS: Option<BatchPaths<Self>> = None;

    /// Quotes a validated identifier (`"name"`, or `` `name` `` on MySQL), as the DDL does.
    fn quote(identifier: &str) -> String {
        format!("\"{identifier}\"")
    }

    /// The column a claim in steps filters its task on, read once when the backend opens:
    /// `task_name`, or a column that indexes only claimable rows (MySQL/MariaDB's
    /// [`crate::schema::MYSQL_CLAIM_TASK_COLUMN`], where the table has it).
    async fn claim_task_column(
        _pool: &sqlx::Pool<Self::Db>,
        _tables: &TableNames,
    ) -> ExecutionResult<&'static str> {
        Ok("task_name")
    }

    /// The index a claim in steps reads when, while a backlog lasts, it resumes after the last
    /// row a full claim of the same queue took instead of reading from the front (the
    /// `machine::resume` module), read once when the backend opens: for InnoDB, whose claimed
    /// rows leave delete-marked index entries that every claim from the front looks up until
    /// the purge removes them. `None` (the default): every claim reads from the front.
    async fn claim_resume_index(
        _pool: &sqlx::Pool<Self::Db>,
        _tables: &TableNames,
    ) -> ExecutionResult<Option<String>> {
        Ok(None)
    }

    /// Whether batches travel as one JSON array that `JSON_TABLE` joins on the primary key,
    /// in statements of one shape for every batch size (see `machine::json_batch`), read once
    /// when the backend opens. `false` (the default): the statements every dialect runs.
    async fn json_table_batches(
        _pool: &sqlx::Pool<Self::Db>,
        _tables: &TableNames,
    ) -> ExecutionResult<bool> {
        Ok(false)
    }

    /// Adapts `?` placeholders to the dialect.
    fn render(sql: &str) -> String;

    /// The pool settings a connector starts with when none are given: [`PoolSettings::default`],
    /// unless the dialect knows better.
    fn default_pool_settings() -> PoolSettings {
        PoolSettings::default()
    }

    /// Builds a pool without connecting (connections open on first use).
    fn connect_lazy(
        dsn: &crate::dsn::Dsn,
        settings: &PoolSettings,
    ) -> Result<sqlx::Pool<Self::Db>, String>;

    /// Starts a transaction that may write.
    async fn begin(
        pool: &sqlx::Pool<Self::Db>,
    ) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>;

    /// Runs a statement in `tx` ([`Dialect::execute_on`] its connection); returns the number of
    /// rows it matched.
    async fn execute(
        tx: &mut sqlx::Transaction<'static, Self::Db>,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<u64, sqlx::Error> {
        Self::execute_on(&mut **tx, sql, params).await
    }

    /// Runs a statement on `conn`: inside the transaction it is in, or, outside any, committed
    /// by itself. Returns the number of rows it matched.
    async fn execute_on(
        conn: &mut <Self::Db as sqlx::Database>::Connection,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<u64, sqlx::Error>;

    /// Prepares a new connection before its first statement: the pool's `after_connect`, and
    /// the connector's own connection for one-by-one submits (`solo.rs`). The default does
    /// nothing.
    fn set_up_session(
        _conn: &mut <Self::Db as sqlx::Database>::Connection,
    ) -> BoxFuture<'_, Result<(), sqlx::Error>> {
        Box::pin(async { Ok(()) })
    }

    /// Runs a query; returns its rows.
    async fn fetch(
        tx: &mut sqlx::Transaction<'static, Self::Db>,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<Vec<Row<Self>>, sqlx::Error>;

    /// Column `i` of `row` as text (`None` for NULL).
    fn text(row: &Row<Self>, i: usize) -> Result<Option<String>, sqlx::Error>;

    /// Column `i` as a 32-bit integer (`attempts`, `attempt_no`).
    fn int(row: &Row<Self>, i: usize) -> Result<Option<i32>, sqlx::Error>;

    /// Column `i` as a 64-bit integer (`version`, counts).
    fn bigint(row: &Row<Self>, i: usize) -> Result<Option<i64>, sqlx::Error>;

    /// Column `i` as an id, however the dialect stores it.
    fn id(row: &Row<Self>, i: usize) -> Result<Option<Uuid>, sqlx::Error>;

    /// Column `i` as an instant, however the dialect stores it.
    fn time(row: &Row<Self>, i: usize) -> Result<Option<OffsetDateTime>, sqlx::Error>;

    /// Column `i` as a JSON document, however the dialect stores it.
    fn json(row: &Row<Self>, i: usize) -> Result<Option<serde_json::Value>, sqlx::Error>;

    /// The database's own time for lease decisions, when the dialect uses it (PostgreSQL's
    /// transaction time); `None` means the process clock decides.
    async fn database_now(
        tx: &mut sqlx::Transaction<'static, Self::Db>,
    ) -> Result<Option<OffsetDateTime>, sqlx::Error>;

    /// Checks the server is supported, once per pool (MySQL ≥ 8.0.16, MariaDB ≥ 10.6).
    async fn check_server(pool: &sqlx::Pool<Self::Db>) -> ExecutionResult<()>;

    /// Creates missing tables under a cross-process lock (`auto_create`), or reports
    /// "missing execution tables: a, b".
    async fn ensure_tables(
        pool: &sqlx::Pool<Self::Db>,
        tables: &TableNames,
        auto_create: bool,
    ) -> ExecutionResult<()>;

    /// The statement that wakes other processes' idle workers after a submit, with the channel
    /// as its only parameter (PostgreSQL: `SELECT pg_notify(?, '')`); `None` where the dialect
    /// has no notifications (workers then poll, or wake on in-process signals).
    fn notify_sql() -> Option<&'static str> {
        None
    }

    /// Starts a task that bumps `signal` whenever `channel` is notified; `None` without
    /// notifications.
    fn listen(
        _pool: sqlx::Pool<Self::Db>,
        _channel: String,
        _signal: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        None
    }

    /// Classifies a driver error.
    fn classify(err: &sqlx::Error) -> ConnectorErrorKind;

    /// Maps a driver error onto the core's connector error (no secrets: sqlx errors carry no DSN).
    fn connector_error(operation: ConnectorOperation, err: sqlx::Error) -> ConnectorOperationError {
        let kind = crate::pool_health::classify::<Self>(&err);
        ConnectorOperationError::new(
            Self::NAME,
            operation,
            kind,
            format!("{}.execution", Self::NAME),
        )
        .with_cause(err)
    }
}

/// Classification shared by every dialect for errors that are not the server's.
pub(crate) fn classify_common(err: &sqlx::Error) -> Option<ConnectorErrorKind> {
    use sqlx::Error as E;
    Some(match err {
        E::Io(_) | E::Tls(_) | E::PoolClosed | E::WorkerCrashed => ConnectorErrorKind::Disconnected,
        // No connection within the acquire timeout: the server is unreachable or saturated.
        E::PoolTimedOut => ConnectorErrorKind::Disconnected,
        E::Configuration(_) => ConnectorErrorKind::Misconfigured,
        E::Protocol(_) => ConnectorErrorKind::Disconnected,
        E::ColumnDecode { .. }
        | E::Decode(_)
        | E::ColumnNotFound(_)
        | E::ColumnIndexOutOfBounds { .. }
        | E::TypeNotFound { .. } => ConnectorErrorKind::Permanent,
        E::RowNotFound => ConnectorErrorKind::Permanent,
        _ => return None,
    })
}

//! MySQL 8.0.16+ and MariaDB 10.6+: ids as 32 hex digits (`CHAR(32)`, or MariaDB's native
//! `UUID` on 10.7+ as the reference creates it), `DATETIME(6)` in UTC, JSON as text; sessions
//! pinned to UTC and READ COMMITTED; leases decided by the process clock; DDL serialized with
//! `GET_LOCK`.

use async_trait::async_trait;
use onestep_core::execution::{
    ExecutionError, ExecutionResult, ExecutionSource, ExecutionSourceOptions,
};
use onestep_core::{ConnectorErrorKind, ConnectorOperation};
use serde_json::Value;
use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlPoolOptions, MySqlRow};
use sqlx::query::Query;
use sqlx::{Executor, Row, Transaction};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::dialect::{Dialect, PoolSettings, classify_common};
use crate::dsn::Dsn;
use crate::machine::{BackendOptions, SqlExecutionBackend};
use crate::param::Param;
use crate::schema::{self, TableNames};
use crate::{SqlConnector, decode, setup_error};

/// The MySQL / MariaDB dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct MySql;

/// Tracked execution on MySQL or MariaDB.
pub type MySqlExecutionBackend = SqlExecutionBackend<MySql>;
/// A shared MySQL pool.
pub type MySqlConnector = SqlConnector<MySql>;
/// A worker source claiming MySQL executions.
pub type MySqlExecutionSource = ExecutionSource<MySqlExecutionBackend>;

/// A source for `dsn`: its own backend (with `backend` options) and the worker `options`.
pub fn execution_source(
    dsn: &str,
    backend: BackendOptions,
    options: ExecutionSourceOptions,
) -> onestep_core::Result<MySqlExecutionSource> {
    let backend = MySqlExecutionBackend::new(dsn, backend)?;
    ExecutionSource::new(backend, options)
}

fn utc(t: OffsetDateTime) -> PrimitiveDateTime {
    let t = onestep_core::clock::utc(t);
    PrimitiveDateTime::new(t.date(), t.time())
}

fn bind(
    q: Query<'_, sqlx::MySql, MySqlArguments>,
    param: Param,
) -> Query<'_, sqlx::MySql, MySqlArguments> {
    match param {
        Param::Id(v) => q.bind(v.simple().to_string()),
        Param::OptId(v) => q.bind(v.map(|v| v.simple().to_string())),
        Param::Text(v) => q.bind(v),
        Param::OptText(v) => q.bind(v),
        Param::Int(v) => q.bind(v),
        Param::BigInt(v) => q.bind(v),
        Param::Json(v) => q.bind(v.to_string()),
        Param::OptJson(v) => q.bind(v.map(|v| v.to_string())),
        Param::Time(v) => q.bind(utc(v)),
        Param::OptTime(v) => q.bind(v.map(utc)),
    }
}

fn query(sql: &str, params: Vec<Param>) -> Query<'_, sqlx::MySql, MySqlArguments> {
    let persistent = crate::param::is_stable(sql);
    params
        .into_iter()
        .fold(sqlx::query(sql).persistent(persistent), bind)
}

fn json(row: &MySqlRow, i: usize) -> Result<Option<Value>, sqlx::Error> {
    Ok(row
        .try_get::<Option<sqlx::types::Json<Value>>, _>(i)?
        .map(|j| j.0))
}

/// An id column: `CHAR(32)` text, or MariaDB's `UUID` type, which arrives as binary text. Read
/// as bytes whatever the column's type, without sqlx's type check: for the `UUID` type that check
/// failed and built an error on every read before the bytes were read instead (~1,300
/// instructions an id; a claimed row has two).
fn id(row: &MySqlRow, i: usize) -> Result<Option<uuid::Uuid>, sqlx::Error> {
    let Some(bytes) = row.try_get_unchecked::<Option<&[u8]>, _>(i)? else {
        return Ok(None);
    };
    match bytes.len() {
        16 => uuid::Uuid::from_slice(bytes)
            .map(Some)
            .map_err(|e| sqlx::Error::Decode(e.into())),
        _ => decode::id(&String::from_utf8_lossy(bytes)).map(Some),
    }
}

fn time(row: &MySqlRow, i: usize) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    Ok(row
        .try_get::<Option<PrimitiveDateTime>, _>(i)?
        .map(PrimitiveDateTime::assume_utc))
}

/// A parsed `SELECT VERSION()`: MariaDB or MySQL, and its numbers.
fn parse_version(raw: &str) -> (bool, Vec<u64>) {
    let mariadb = raw.to_ascii_lowercase().contains("mariadb");
    let core = raw.trim_start_matches("5.5.5-");
    let numbers = core
        .split(['.', '-', '+'])
        .take(3)
        .map_while(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u64>()
                .ok()
        })
        .collect();
    (mariadb, numbers)
}

/// Why the server is too old, if it is.
fn unsupported(raw: &str) -> Option<String> {
    let (mariadb, numbers) = parse_version(raw);
    let (name, floor): (&str, [u64; 3]) = if mariadb {
        ("MariaDB", [10, 6, 0])
    } else {
        ("MySQL", [8, 0, 16])
    };
    let mut have = [0u64; 3];
    for (slot, n) in have.iter_mut().zip(&numbers) {
        *slot = *n;
    }
    (have < floor).then(|| {
        format!(
            "{name} {raw} is not supported by MySqlExecutionBackend: {}.{}.{}+ is required (SKIP LOCKED, enforced CHECK constraints, JSON defaults)",
            floor[0], floor[1], floor[2]
        )
    })
}

async fn server_version(pool: &sqlx::Pool<sqlx::MySql>) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT VERSION()").fetch_one(pool).await
}

#[async_trait]
impl Dialect for MySql {
    type Db = sqlx::MySql;
    const NAME: &'static str = "mysql";
    const SCHEMA: schema::Dialect = schema::Dialect::MySql;
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    /// Two claims in flight (MySQL 8 too; measured on MariaDB), with the runner fetching once
    /// half its slots are free: a burn-down drained ~10 % faster (7 alternating rounds of 7),
    /// and at 5,000 submits a second offered the pickup p50 fell from 318 to 71 ms. One claim
    /// was as fast as two while the runner fetched at a quarter (claims of ~32 rows, each
    /// waiting for the last).
    const CONCURRENT_CLAIMS: usize = 2;
    const INSERT_ON_ITS_OWN: bool = true;

    fn quote(identifier: &str) -> String {
        format!("`{identifier}`")
    }

    fn render(sql: &str) -> String {
        sql.to_string()
    }

    fn connect_lazy(dsn: &Dsn, settings: &PoolSettings) -> Result<sqlx::Pool<sqlx::MySql>, String> {
        let options: MySqlConnectOptions = dsn
            .as_url()
            .parse()
            .map_err(|e: sqlx::Error| e.to_string())?;
        let options = options.timezone(Some("+00:00".to_string()));
        Ok(
            crate::pool_health::ping_only_when_idle(MySqlPoolOptions::new())
                .max_connections(settings.max_connections)
                .acquire_timeout(settings.acquire_timeout)
                .after_connect(|conn, _meta| Self::set_up_session(conn))
                .connect_lazy_with(options),
        )
    }

    async fn begin(
        pool: &sqlx::Pool<sqlx::MySql>,
    ) -> Result<Transaction<'static, sqlx::MySql>, sqlx::Error> {
        pool.begin().await
    }

    async fn execute_on(
        conn: &mut sqlx::MySqlConnection,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<u64, sqlx::Error> {
        Ok(query(sql, params).execute(conn).await?.rows_affected())
    }

    fn set_up_session(
        conn: &mut sqlx::MySqlConnection,
    ) -> crate::dialect::BoxFuture<'_, Result<(), sqlx::Error>> {
        Box::pin(async move {
            conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                .await?;
            Ok(())
        })
    }

    async fn fetch(
        tx: &mut Transaction<'static, sqlx::MySql>,
        sql: &str,
        params: Vec<Param>,
    ) -> Result<Vec<MySqlRow>, sqlx::Error> {
        query(sql, params).fetch_all(&mut **tx).await
    }

    /// Text, also where the server sends it as a binary string (as it may for `SHOW`
    /// statements' columns); such bytes must be UTF-8.
    fn text(row: &MySqlRow, i: usize) -> Result<Option<String>, sqlx::Error> {
        text(row, i)
    }

    fn int(row: &MySqlRow, i: usize) -> Result<Option<i32>, sqlx::Error> {
        row.try_get(i)
    }

    fn bigint(row: &MySqlRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
        row.try_get(i)
    }

    fn id(row: &MySqlRow, i: usize) -> Result<Option<uuid::Uuid>, sqlx::Error> {
        id(row, i)
    }

    fn time(row: &MySqlRow, i: usize) -> Result<Option<OffsetDateTime>, sqlx::Error> {
        time(row, i)
    }

    fn json(row: &MySqlRow, i: usize) -> Result<Option<Value>, sqlx::Error> {
        json(row, i)
    }

    async fn database_now(
        _tx: &mut Transaction<'static, sqlx::MySql>,
    ) -> Result<Option<OffsetDateTime>, sqlx::Error> {
        Ok(None)
    }

    async fn check_server(pool: &sqlx::Pool<sqlx::MySql>) -> ExecutionResult<()> {
        let raw = server_version(pool).await.map_err(|e| {
            ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
        })?;
        match unsupported(&raw) {
            Some(message) => Err(setup_error::<Self>(message)),
            None => Ok(()),
        }
    }

    async fn ensure_tables(
        pool: &sqlx::Pool<sqlx::MySql>,
        tables: &TableNames,
        auto_create: bool,
    ) -> ExecutionResult<()> {
        let open = |e: sqlx::Error| {
            ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
        };
        let mut conn = pool.acquire().await.map_err(open)?;
        if !auto_create {
            let mut missing = Vec::new();
            for table in [&tables.executions, &tables.attempts] {
                let found: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
                )
                .bind(table)
                .fetch_one(&mut *conn)
                .await
                .map_err(open)?;
                if found == 0 {
                    missing.push(table.as_str());
                }
            }
            return if missing.is_empty() {
                Ok(())
            } else {
                Err(setup_error::<Self>(format!(
                    "missing execution tables: {} (or invisible to this account, which needs \
                     SELECT, INSERT and UPDATE on them)",
                    missing.join(", ")
                )))
            };
        }
        let raw = server_version(pool).await.map_err(open)?;
        let dialect = schema::mysql_family_dialect(&raw);
        let ddl = schema::render_ddl(dialect, tables).map_err(crate::machine::schema_error)?;
        let locks = [
            schema::MYSQL_GLOBAL_DDL_LOCK_NAME.to_string(),
            schema::mysql_ddl_lock_name(tables),
        ];
        // Take the locks in order; whatever happens next, release the ones taken (a lock left
        // on a pooled session would block every other process's DDL until it is retired).
        let mut taken: Vec<&String> = Vec::new();
        let mut outcome = Ok(());
        for lock in &locks {
            let got: Result<Option<i64>, sqlx::Error> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
                .bind(lock)
                .bind(i64::from(schema::MYSQL_DDL_LOCK_TIMEOUT_SECS))
                .fetch_one(&mut *conn)
                .await;
            match got {
                Ok(Some(1)) => taken.push(lock),
                Ok(_) => {
                    outcome = Err(setup_error::<Self>(format!(
                        "could not take the DDL lock {lock} within {}s",
                        schema::MYSQL_DDL_LOCK_TIMEOUT_SECS
                    )));
                    break;
                }
                Err(e) => {
                    outcome = Err(open(e));
                    break;
                }
            }
        }
        if outcome.is_ok() {
            for statement in ddl {
                if let Err(e) = sqlx::query(&statement).execute(&mut *conn).await {
                    outcome = Err(crate::ddl_error::<Self>(tables, e));
                    break;
                }
            }
        }
        if outcome.is_ok() {
            // Also on tables that already existed (created by the reference, or by an older
            // version): the column is additive and the index is built online.
            // The column and its indexes; an index from an older version (the claim index
            // without `status`, no expiry index) is rebuilt: see `schema::MYSQL_CLAIM_INDEX_COLUMNS`.
            let mut alters = Vec::new();
            match has_claim_column(&mut conn, &tables.executions).await {
                Ok(false) => {
                    // An index left by a dropped column keeps its name (MariaDB drops only the
                    // column from it): drop it before the column and its indexes are added.
                    for (suffix, _) in schema::MYSQL_CLAIM_COLUMN_INDEXES {
                        let name = schema::mysql_claim_index_name(dialect, tables, suffix);
                        match index_columns(&mut conn, &tables.executions, &name).await {
                            Ok(columns) if columns.is_empty() => {}
                            Ok(_) => alters.push(Ok(format!(
                                "ALTER TABLE `{}` DROP INDEX `{name}`",
                                tables.executions
                            ))),
                            Err(e) => outcome = Err(open(e)),
                        }
                    }
                    alters.push(schema::mysql_claim_column_ddl(dialect, tables));
                }
                Ok(true) => {
                    for index in schema::MYSQL_CLAIM_COLUMN_INDEXES {
                        let name = schema::mysql_claim_index_name(dialect, tables, index.0);
                        match index_columns(&mut conn, &tables.executions, &name).await {
                            Ok(columns) if columns == index.1 => {}
                            Ok(columns) => alters.push(schema::mysql_claim_index_ddl(
                                dialect,
                                tables,
                                index,
                                !columns.is_empty(),
                            )),
                            Err(e) => {
                                outcome = Err(open(e));
                                break;
                            }
                        }
                    }
                }
                Err(e) => outcome = Err(open(e)),
            }
            for alter in alters {
                if outcome.is_err() {
                    break;
                }
                outcome = match alter {
                    Ok(alter) => sqlx::query(&alter)
                        .execute(&mut *conn)
                        .await
                        .map(drop)
                        .map_err(|e| crate::ddl_error::<Self>(tables, e)),
                    Err(e) => Err(crate::machine::schema_error(e)),
                };
            }
        }
        for lock in taken.iter().rev() {
            let released = sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(lock)
                .execute(&mut *conn)
                .await;
            if released.is_err() {
                // The session may still hold it: do not return this connection to the pool.
                conn.close_on_drop();
            }
        }
        outcome
    }

    async fn claim_task_column(
        pool: &sqlx::Pool<sqlx::MySql>,
        tables: &TableNames,
    ) -> ExecutionResult<&'static str> {
        let mut conn = pool.acquire().await.map_err(|e| {
            ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
        })?;
        let present = has_claim_column(&mut conn, &tables.executions)
            .await
            .map_err(|e| {
                ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
            })?;
        Ok(if present {
            schema::MYSQL_CLAIM_TASK_COLUMN
        } else {
            "task_name"
        })
    }

    /// The claim column's index ([`schema::MYSQL_CLAIM_INDEX_COLUMNS`]) where the table has it
    /// with exactly those columns: a resumed claim reads it from the key on (`FORCE INDEX`; see
    /// `machine::resume`). Tables without it (the reference's, or opened without DDL rights)
    /// claim from the front, and so does MySQL 8: no MySQL 8 runs where this is tested, and
    /// its optimizer's choice of access for the resumed claim is not checked.
    async fn claim_resume_index(
        pool: &sqlx::Pool<sqlx::MySql>,
        tables: &TableNames,
    ) -> ExecutionResult<Option<String>> {
        let open = |e: sqlx::Error| {
            ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
        };
        let dialect = schema::mysql_family_dialect(&server_version(pool).await.map_err(open)?);
        if dialect != schema::Dialect::MariaDb {
            return Ok(None);
        }
        let mut conn = pool.acquire().await.map_err(open)?;
        // The index's columns include the claim column: a table without the column has no such
        // index either.
        let name = schema::mysql_claim_index_name(dialect, tables, "claimable");
        let columns = index_columns(&mut conn, &tables.executions, &name)
            .await
            .map_err(open)?;
        Ok((columns == schema::MYSQL_CLAIM_INDEX_COLUMNS).then_some(name))
    }

    /// MariaDB (10.7+, whose `UUID` columns compare with hex text by value) with both tables
    /// keyed by `UUID`. MySQL 8 is left out: its `JSON_TABLE` columns carry their own collation,
    /// which can clash with a `CHAR(32)` key's, and no MySQL 8 runs where this is tested.
    async fn json_table_batches(
        pool: &sqlx::Pool<sqlx::MySql>,
        tables: &TableNames,
    ) -> ExecutionResult<bool> {
        let open = |e: sqlx::Error| {
            ExecutionError::Connector(Self::connector_error(ConnectorOperation::Open, e))
        };
        let raw = server_version(pool).await.map_err(open)?;
        if schema::mysql_family_dialect(&raw) != schema::Dialect::MariaDb {
            return Ok(false);
        }
        let mut conn = pool.acquire().await.map_err(open)?;
        for table in [&tables.executions, &tables.attempts] {
            let rows = show_rows(&mut conn, &format!("SHOW COLUMNS FROM `{table}` LIKE 'id'"))
                .await
                .map_err(open)?;
            let keyed_by_uuid = match rows.first() {
                Some(row) => show_text(row, "Type")
                    .map_err(open)?
                    .eq_ignore_ascii_case("uuid"),
                None => false,
            };
            if !keyed_by_uuid {
                return Ok(false);
            }
        }
        // Some MariaDB releases give back a `JSON_TABLE` string still escaped (MDEV-27412),
        // or in a character set that cannot hold every character: the batches would then
        // store other text than they were given. Ask the server to read one back first.
        let read: Option<String> = sqlx::query_scalar(JSON_TABLE_PROBE)
            .bind(JSON_TABLE_PROBE_BATCH)
            .fetch_one(&mut *conn)
            .await
            .map_err(open)?;
        if read.as_deref() != Some(JSON_TABLE_PROBE_TEXT) {
            tracing::warn!(
                read = ?read,
                "JSON_TABLE on this server does not give back the text it was given; \
                 batches use the statements every dialect runs"
            );
            return Ok(false);
        }
        Ok(true)
    }

    fn classify(err: &sqlx::Error) -> ConnectorErrorKind {
        if let Some(kind) = classify_common(err) {
            return kind;
        }
        let Some(db) = err.as_database_error() else {
            return ConnectorErrorKind::Uncertain;
        };
        let number = db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number())
            .unwrap_or(0);
        match number {
            // 1684: a `SHOW` skipped a table while another session's DDL changes it.
            1213 | 1205 | 1637 | 3572 | SKIPPED_FOR_CONCURRENT_DDL => ConnectorErrorKind::Transient,
            1040 | 1203 | 1226 => ConnectorErrorKind::Throttled,
            2006 | 2013 | 1927 | 1053 | 1077 | 1078 | 1079 | 1080 => {
                ConnectorErrorKind::Disconnected
            }
            1044 | 1045 | 1049 | 1142 | 1227 | 1698 => ConnectorErrorKind::Misconfigured,
            // 3819 / 4025: a CHECK constraint failed on MySQL / MariaDB (MariaDB checks
            // `JSON_VALID` on every JSON column); 3140 / 3157: MySQL refused a JSON document as
            // invalid / too deep. The same write fails again.
            1046 | 1054 | 1064 | 1146 | 1062 | 1452 | 3819 | 4025 | 3140 | 3157 | 1406 | 1292
            | 1366 => ConnectorErrorKind::Permanent,
            _ => ConnectorErrorKind::Transient,
        }
    }
}

/// Whether the executions table has the claim column ([`schema::MYSQL_CLAIM_TASK_COLUMN`]).
///
/// Read with `SHOW COLUMNS`, which opens the table, not from `information_schema`: right after
/// another session's `ALTER TABLE` MariaDB's `information_schema` can leave the table out and
/// answer "nothing there", and the DDL that follows then fails with a duplicate name.
async fn has_claim_column(
    conn: &mut sqlx::MySqlConnection,
    executions: &str,
) -> Result<bool, sqlx::Error> {
    let show = format!(
        "SHOW COLUMNS FROM `{executions}` LIKE '{}'",
        schema::MYSQL_CLAIM_TASK_COLUMN
    );
    Ok(!show_rows(conn, &show).await?.is_empty())
}

/// The columns of index `index` on `executions`, in index order (empty: no such index).
///
/// Read with `SHOW INDEX`, for the reason given at [`has_claim_column`]; it lists each index's
/// columns in order.
async fn index_columns(
    conn: &mut sqlx::MySqlConnection,
    executions: &str,
    index: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let rows = show_rows(conn, &format!("SHOW INDEX FROM `{executions}`")).await?;
    let mut columns = Vec::new();
    for row in rows {
        if show_text(&row, "Key_name")? == index {
            columns.push(show_text(&row, "Column_name")?);
        }
    }
    Ok(columns)
}

/// Reads [`JSON_TABLE_PROBE_BATCH`] back as the batch statements read a stored JSON text.
const JSON_TABLE_PROBE: &str =
    "SELECT r FROM JSON_TABLE(?, '$[*]' COLUMNS (r LONGTEXT PATH '$.r')) v";

/// A batch of one item whose `r` is [`JSON_TABLE_PROBE_TEXT`], escaped as the batch writer
/// escapes it (quote, backslash, `\n`, `\u0001`; other characters as they are).
pub(crate) const JSON_TABLE_PROBE_BATCH: &str =
    r#"[{"r":"{\"k\":\"\\\" \\\\ \\n \\u0001 é 😀\"}"}]"#;

/// The JSON text [`JSON_TABLE_PROBE`] must give back.
pub(crate) const JSON_TABLE_PROBE_TEXT: &str = r#"{"k":"\" \\ \n \u0001 é 😀"}"#;

/// Error 1684: a `SHOW` skipped the table because another session's DDL holds its metadata lock.
const SKIPPED_FOR_CONCURRENT_DDL: u16 = 1684;

/// The rows of a `SHOW` statement about one table. MariaDB refuses one with error 1684 while
/// another session's DDL (or a background task of the server after it) holds the table's
/// metadata lock; the moment passes, so the statement is sent again, for up to five seconds.
async fn show_rows(
    conn: &mut sqlx::MySqlConnection,
    show: &str,
) -> Result<Vec<MySqlRow>, sqlx::Error> {
    use crate::user_table::{SHOW_RETRY_DELAY, SHOW_TRIES};
    let mut tries = 0;
    loop {
        match sqlx::query(show).fetch_all(&mut *conn).await {
            Err(e) if tries + 1 < SHOW_TRIES && is_skipped_for_ddl(&e) => {
                tries += 1;
                tokio::time::sleep(SHOW_RETRY_DELAY).await;
            }
            other => return other,
        }
    }
}

/// Whether `err` is [`SKIPPED_FOR_CONCURRENT_DDL`].
fn is_skipped_for_ddl(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|db| db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|db| db.number() == SKIPPED_FOR_CONCURRENT_DDL)
}

/// A text column of a `SHOW` row (never `NULL` in the columns read here).
fn show_text(row: &MySqlRow, column: &str) -> Result<String, sqlx::Error> {
    Ok(text(row, column)?.unwrap_or_default())
}

/// Text, also where the server sends it as a binary string (as it may for `SHOW` statements'
/// columns); such bytes must be UTF-8.
fn text<I>(row: &MySqlRow, index: I) -> Result<Option<String>, sqlx::Error>
where
    I: sqlx::ColumnIndex<MySqlRow> + std::fmt::Display + Copy,
{
    match row.try_get(index) {
        Err(err @ sqlx::Error::ColumnDecode { .. }) => {
            match row.try_get::<Option<Vec<u8>>, _>(index) {
                Ok(bytes) => bytes.map(String::from_utf8).transpose().map_err(|e| {
                    sqlx::Error::ColumnDecode {
                        index: index.to_string(),
                        source: Box::new(e),
                    }
                }),
                Err(_) => Err(err),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_version_gate_accepts_mysql_8_0_16_and_mariadb_10_6() {
        assert!(unsupported("8.0.16").is_none());
        assert!(unsupported("8.4.3-0ubuntu0.24.04.1").is_none());
        assert!(unsupported("10.11.19-MariaDB-0+deb12u1").is_none());
        assert!(unsupported("5.5.5-10.6.1-MariaDB").is_none());
        let err = unsupported("8.0.15").unwrap();
        assert!(
            err.starts_with(
                "MySQL 8.0.15 is not supported by MySqlExecutionBackend: 8.0.16+ is required"
            ),
            "{err}"
        );
        assert!(unsupported("5.7.44-log").is_some());
        assert!(
            unsupported("10.5.9-MariaDB")
                .unwrap()
                .contains("10.6.0+ is required")
        );
    }
}

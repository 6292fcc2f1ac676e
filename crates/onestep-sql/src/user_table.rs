//! What the sources over a user's own table share (table queues, incremental sources): reading
//! the table's columns from the catalog, binding values for them, quoting, and turning rows into
//! JSON in the database. Identifiers are validated before they reach here and quoted; a user's
//! `where` is pasted as written (trusted configuration); every value is bound.

use std::time::Duration;

use onestep_core::{ConnectorOperation, ConnectorOperationError, Envelope, Error, Result};
use serde_json::Value;

use crate::SqlConnector;
use crate::dialect::Dialect;
use crate::param::Param;
use crate::schema::{self, validate_table_name};

/// One column of the user's table: its name and its declared type (PostgreSQL's
/// `format_type`, MySQL's `column_type`, SQLite's declared type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnInfo {
    pub(crate) name: String,
    pub(crate) declared: String,
}

/// The statement that lists `table`'s columns in order, name and declared type first, with its
/// parameters. PostgreSQL resolves the quoted name on the search path; MySQL/MariaDB read it with
/// `SHOW COLUMNS`, which [`show_table`] runs (see there why not `information_schema`).
pub(crate) fn columns_statement<D: Dialect>(table: &str) -> (String, Vec<Param>) {
    match D::SCHEMA {
        schema::Dialect::Postgres => (
            D::render(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
                 WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
            ),
            vec![Param::Text(D::quote(table))],
        ),
        schema::Dialect::MySql | schema::Dialect::MariaDb => (
            format!("SHOW COLUMNS FROM {}", quote::<D>(table)),
            Vec::new(),
        ),
        schema::Dialect::Sqlite => (
            D::render("SELECT name, type FROM pragma_table_info(?)"),
            vec![Param::Text(table.to_owned())],
        ),
    }
}

/// A value of the configuration (`claim`, `ack`, `nack`) or a key read from a row, bound for
/// `column`: on PostgreSQL as text cast to the column's type (so `'done'`, `3` or `true` reach
/// a text, integer or boolean column alike); elsewhere as the closest parameter, which MySQL
/// and SQLite convert to the column.
pub(crate) fn bind<D: Dialect>(value: &Value) -> Param {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match (D::SCHEMA, value) {
        (_, Value::Null) => Param::OptText(None),
        (schema::Dialect::Postgres, v) => Param::Text(text(v)),
        (_, Value::Bool(b)) => Param::BigInt(i64::from(*b)),
        (_, Value::Number(n)) => n
            .as_i64()
            .map_or_else(|| Param::Text(n.to_string()), Param::BigInt),
        (_, v) => Param::Text(text(v)),
    }
}

/// Quotes any identifier, doubling the quote character inside it (names read from the
/// database's catalog can hold anything).
pub(crate) fn quote<D: Dialect>(identifier: &str) -> String {
    if D::SCHEMA.is_mysql_family() {
        format!("`{}`", identifier.replace('`', "``"))
    } else {
        format!("\"{}\"", identifier.replace('"', "\"\""))
    }
}

/// `?` for a value bound into `column` ([`bind`]): `CAST(? AS <type>)` on PostgreSQL.
pub(crate) fn placeholder<D: Dialect>(column: &ColumnInfo) -> String {
    match D::SCHEMA {
        schema::Dialect::Postgres => format!("CAST(? AS {})", column.declared),
        _ => "?".to_owned(),
    }
}

/// `c1 = ?, c2 = ?` for `columns` (in the order of the configuration map).
pub(crate) fn assignments<D: Dialect>(columns: &[&ColumnInfo]) -> String {
    columns
        .iter()
        .map(|c| format!("{} = {}", quote::<D>(&c.name), placeholder::<D>(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How often, and how far apart, a `SHOW` about one table is sent again while the server skips
/// the table ([`show_table`], and the MySQL dialect's own reads of its tables).
pub(crate) const SHOW_TRIES: u32 = 50;
pub(crate) const SHOW_RETRY_DELAY: Duration = Duration::from_millis(100);

/// MySQL/MariaDB: the rows of `show`, a `SHOW … FROM <table>` statement; `None` when there is
/// no such table. `SHOW` opens the table itself, where `information_schema` can leave out a
/// table whose definition another session is changing and answer "nothing there"; in that
/// moment the server refuses the `SHOW` with a transient error (1684), and it is sent again,
/// for up to five seconds.
pub(crate) async fn show_table<D: Dialect>(
    connector: &SqlConnector<D>,
    show: &str,
    error: impl Fn(sqlx::Error) -> Error,
) -> Result<Option<Vec<crate::dialect::Row<D>>>> {
    let mut tries = 0;
    loop {
        let pool = connector.pool()?;
        let out = async {
            let mut tx = D::begin(&pool).await?;
            let rows = D::fetch(&mut tx, show, Vec::new()).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(rows)
        }
        .await;
        match out {
            Ok(rows) => return Ok(Some(rows)),
            // SQLSTATE 42S02: base table not found.
            Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("42S02") => {
                return Ok(None);
            }
            Err(e)
                if tries + 1 < SHOW_TRIES
                    && crate::pool_health::classify::<D>(&e)
                        == onestep_core::ConnectorErrorKind::Transient =>
            {
                tries += 1;
                tokio::time::sleep(SHOW_RETRY_DELAY).await;
            }
            Err(e) => return Err(error(e)),
        }
    }
}

/// The expression that turns one row of `table` (alias `alias`) into a JSON object.
pub(crate) fn row_json<D: Dialect>(alias: &str, columns: &[ColumnInfo]) -> String {
    match D::SCHEMA {
        schema::Dialect::Postgres => format!("row_to_json({alias})"),
        dialect => {
            let function = if dialect == schema::Dialect::Sqlite {
                "json_object"
            } else {
                "JSON_OBJECT"
            };
            let pairs: Vec<String> = columns
                .iter()
                .map(|c| {
                    format!(
                        "'{}', {alias}.{}",
                        c.name.replace('\'', "''"),
                        quote::<D>(&c.name)
                    )
                })
                .collect();
            format!("{function}({})", pairs.join(", "))
        }
    }
}

/// The columns of `table`, in order; an error naming `table` when the connection sees no such
/// table. `error` maps a driver error.
pub(crate) async fn read_columns<D: Dialect>(
    connector: &SqlConnector<D>,
    table: &str,
    error: impl Fn(ConnectorOperation, sqlx::Error) -> Error,
) -> Result<Vec<ColumnInfo>> {
    let op = ConnectorOperation::Open;
    let (sql, params) = columns_statement::<D>(table);
    let rows = if D::SCHEMA.is_mysql_family() {
        show_table(connector, &sql, |e| error(op, e))
            .await?
            .unwrap_or_default()
    } else {
        connector
            .fetch_alone(&sql, params, |e| error(op, e))
            .await?
    };
    let mut columns = Vec::with_capacity(rows.len());
    for row in &rows {
        let name = D::text(row, 0)
            .map_err(|e| error(op, e))?
            .unwrap_or_default();
        let declared = D::text(row, 1)
            .map_err(|e| error(op, e))?
            .unwrap_or_default();
        columns.push(ColumnInfo { name, declared });
    }
    if columns.is_empty() {
        return Err(Error::invalid(
            "table",
            format!("names no table the connection can see: {table:?}"),
        ));
    }
    Ok(columns)
}

/// Whether `configured` names the column `actual`: exactly on PostgreSQL (quoted names are
/// case-sensitive there), ignoring ASCII case on MySQL and SQLite, whose column names are not.
pub(crate) fn same_column<D: Dialect>(actual: &str, configured: &str) -> bool {
    if D::SCHEMA == schema::Dialect::Postgres {
        actual == configured
    } else {
        actual.eq_ignore_ascii_case(configured)
    }
}

/// The column of `columns` that `name` (the option `field`) names, or an error listing them.
pub(crate) fn find_column<'c, D: Dialect>(
    columns: &'c [ColumnInfo],
    table: &str,
    field: &str,
    name: &str,
) -> Result<&'c ColumnInfo> {
    columns
        .iter()
        .find(|c| same_column::<D>(&c.name, name))
        .ok_or_else(|| {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            Error::invalid(
                field,
                format!(
                    "names no column of {table}: {name:?} (columns: {})",
                    names.join(", ")
                ),
            )
        })
}

/// Checks that `name`, given as the option `field`, is an identifier the dialect takes: a field
/// error (`table must be a non-empty SQL identifier`) otherwise.
pub(crate) fn identifier(field: &str, name: &str, dialect: schema::Dialect) -> Result<()> {
    validate_table_name(field, name, dialect)
        .map_err(|e| Error::invalid(field, e.to_string().trim_start_matches(field).trim()))
}

/// A driver error of the resource `name` during `operation`, classified by the dialect, with
/// the delay the runner should wait before trying again.
pub(crate) fn connector_error<D: Dialect>(
    name: &str,
    operation: ConnectorOperation,
    err: sqlx::Error,
    retry_delay: Option<Duration>,
) -> Error {
    let mut error = ConnectorOperationError::new(
        D::NAME,
        operation,
        crate::pool_health::classify::<D>(&err),
        name,
    )
    .with_cause(err);
    error.retry_delay = retry_delay;
    Error::Connector(error)
}

/// The polling options every source over a user's table has: at least one row per fetch, and
/// a wait after an empty one.
pub(crate) fn check_polling(batch_size: usize, poll_interval: Duration) -> Result<()> {
    if batch_size < 1 {
        return Err(Error::invalid("batch_size", "must be >= 1, got 0"));
    }
    if poll_interval.is_zero() {
        return Err(Error::invalid("poll_interval_s", "must be > 0, got 0"));
    }
    Ok(())
}

/// The envelope of a row read from `table`: the row as its body, `{"table": <table>}` as its
/// metadata (the reference's).
pub(crate) fn row_envelope(row: Value, table: &str) -> Envelope {
    let mut envelope = Envelope::new(row);
    envelope
        .meta
        .insert("table".into(), Value::String(table.to_owned()));
    envelope
}

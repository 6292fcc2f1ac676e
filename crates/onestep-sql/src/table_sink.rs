//! A sink that writes envelope bodies into the user's table (`*_table_sink`), as the
//! reference's table sinks do: `insert`, `upsert` (insert, or update the row with the same
//! `keys`) or `update` (the row with the same `keys`).
//!
//! A body is one row (a JSON object of `column: value`) or a list of rows, written in one
//! transaction: all or nothing. Which columns an upsert or update writes: `update_columns`
//! (default: every column of the row but the keys), each with a policy (`overwrite`; `skip_null`,
//! which leaves the column alone when the new value is null; `backfill`, which writes only where
//! the stored value is null), plus `update_expr` (column: SQL expression, trusted text). A list or
//! object value is written as JSON text where the column is not a JSON column
//! (`serialize_json: auto`), always (`always`), or passed as it is (`never`).
//!
//! Columns are checked against the table before anything is written; values are always bound.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::execution::canonical::python_dumps;
use onestep_core::{ConnectorOperation, Envelope, Error, Resource, Result, Sink};
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use crate::SqlConnector;
use crate::dialect::Dialect;
use crate::param::Param;
use crate::schema::{self};
use crate::user_table::{self as sql, ColumnInfo, find_column};

/// How rows are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// `INSERT` every row.
    Insert,
    /// `INSERT`, or update the row whose `keys` match.
    Upsert,
    /// Update the row whose `keys` match (a row matching none changes nothing).
    Update,
}

/// How an upsert or update writes one column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnPolicy {
    /// Write the new value.
    Overwrite,
    /// Leave the column alone when the new value is null.
    SkipNull,
    /// Write the new value only where the stored one is null.
    Backfill,
}

/// Whether list and object values are written as JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SerializeJson {
    /// As JSON text, except into JSON columns.
    Auto,
    /// Always as JSON text.
    Always,
    /// As they are.
    Never,
}

/// What a table sink writes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableSinkOptions {
    /// The table.
    pub table: String,
    /// Insert, upsert or update.
    pub mode: SinkMode,
    /// The columns that find a row (upsert, update).
    pub keys: Vec<String>,
    /// The columns an upsert or update writes, with their policies; `None`: every column of the
    /// row but the keys, overwritten.
    pub update_columns: Option<Vec<(String, ColumnPolicy)>>,
    /// Columns set to SQL expressions on upsert or update (trusted text).
    pub update_expr: Vec<(String, String)>,
    /// Whether lists and objects are written as JSON text.
    pub serialize_json: SerializeJson,
    /// Most rows of a list body one `INSERT` statement holds (default 1,000); rows of one body
    /// share one transaction whatever the statement count.
    pub batch_size: usize,
}

impl TableSinkOptions {
    /// Options writing into `table` in `mode`, with no keys, every column updated and
    /// `serialize_json: auto`.
    pub fn new(table: impl Into<String>, mode: SinkMode) -> Self {
        Self {
            table: table.into(),
            mode,
            keys: Vec::new(),
            update_columns: None,
            update_expr: Vec::new(),
            serialize_json: SerializeJson::Auto,
            batch_size: 1000,
        }
    }

    /// Sets the most rows one statement holds.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the key columns.
    pub fn with_keys(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the updated columns and their policies.
    pub fn with_update_columns(mut self, columns: Vec<(String, ColumnPolicy)>) -> Self {
        self.update_columns = Some(columns);
        self
    }

    /// Sets the columns written as SQL expressions.
    pub fn with_update_expr(mut self, expr: Vec<(String, String)>) -> Self {
        self.update_expr = expr;
        self
    }

    /// Sets how lists and objects are written.
    pub fn with_serialize_json(mut self, serialize_json: SerializeJson) -> Self {
        self.serialize_json = serialize_json;
        self
    }

    /// Checks every field that needs no database, naming the field at fault, with the
    /// reference's rules.
    pub fn validate(&self, dialect: schema::Dialect) -> Result<()> {
        if self.batch_size < 1 {
            return Err(Error::invalid("batch_size", "must be >= 1, got 0"));
        }
        let identifier = |field: &str, name: &str| sql::identifier(field, name, dialect);
        identifier("table", &self.table)?;
        for (i, key) in self.keys.iter().enumerate() {
            identifier(&format!("keys[{i}]"), key)?;
        }
        for (i, (column, _)) in self.update_columns.iter().flatten().enumerate() {
            identifier(&format!("update_columns[{i}]"), column)?;
            if self.keys.contains(column) {
                return Err(Error::invalid(
                    format!("update_columns[{i}]"),
                    format!("names the key {column:?}; keys are never updated"),
                ));
            }
        }
        for (column, expr) in &self.update_expr {
            identifier(&format!("update_expr.{column}"), column)?;
            if expr.trim().is_empty() || expr.contains('\0') {
                return Err(Error::invalid(
                    format!("update_expr.{column}"),
                    "must be a non-empty SQL expression without NUL characters",
                ));
            }
        }
        match self.mode {
            SinkMode::Insert if !self.update_expr.is_empty() => Err(Error::invalid(
                "update_expr",
                "only applies to upsert or update mode",
            )),
            SinkMode::Upsert | SinkMode::Update if self.keys.is_empty() => Err(Error::invalid(
                "keys",
                format!("are required in {} mode", self.mode_name()),
            )),
            SinkMode::Upsert | SinkMode::Update
                if self.update_columns.as_ref().is_some_and(Vec::is_empty)
                    && self.update_expr.is_empty() =>
            {
                Err(Error::invalid(
                    "update_columns",
                    format!(
                        "is empty: {} mode then requires update_expr",
                        self.mode_name()
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    fn mode_name(&self) -> &'static str {
        match self.mode {
            SinkMode::Insert => "insert",
            SinkMode::Upsert => "upsert",
            SinkMode::Update => "update",
        }
    }
}

struct Inner<D: Dialect> {
    name: String,
    connector: SqlConnector<D>,
    options: TableSinkOptions,
    columns: OnceCell<Vec<ColumnInfo>>,
}

/// A [`Sink`] writing bodies into a table of the user's (see the module docs).
pub struct TableSink<D: Dialect> {
    inner: Arc<Inner<D>>,
}

impl<D: Dialect> std::fmt::Debug for TableSink<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableSink")
            .field("name", &self.inner.name)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl<D: Dialect> TableSink<D> {
    /// A sink over `connector`, named `<dialect>.table_sink:<table>`; no I/O until it opens.
    pub fn new(connector: SqlConnector<D>, options: TableSinkOptions) -> Result<Self> {
        options.validate(D::SCHEMA)?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: format!("{}.table_sink:{}", D::NAME, options.table),
                connector,
                options,
                columns: OnceCell::new(),
            }),
        })
    }
}

/// One row's write; `None` when a `skip_null` policy left nothing to write.
type Write = Option<RowWrite>;

/// Most bound values one statement carries: under every dialect's limit (SQLite's 32,766).
const MAX_PARAMS: usize = 30_000;

/// How one row is written.
enum RowWrite {
    /// One row of an `INSERT` (plain or upsert): rows with the same `head` and `tail` (the same
    /// columns) go into one multi-row statement.
    Values {
        /// `INSERT INTO t (c1, c2) VALUES `.
        head: String,
        /// `(?, ?)`.
        marks: String,
        /// The conflict clause of an upsert, or empty.
        tail: String,
        params: Vec<Param>,
        /// An upsert's key values: two rows with one key never share a statement (PostgreSQL
        /// refuses to update one row twice in one statement).
        key: Option<String>,
    },
    /// An `UPDATE` of one row.
    Statement(String, Vec<Param>),
}

/// Merges consecutive rows of one shape into multi-row statements of at most `batch_size`
/// rows; the statements, rendered, in order.
fn statements<D: Dialect>(writes: Vec<RowWrite>, batch_size: usize) -> Vec<(String, Vec<Param>)> {
    struct Open {
        head: String,
        tail: String,
        rows: Vec<String>,
        params: Vec<Param>,
        keys: std::collections::HashSet<String>,
    }
    fn close<D: Dialect>(open: Open, out: &mut Vec<(String, Vec<Param>)>) {
        let text = format!("{}{}{}", open.head, open.rows.join(", "), open.tail);
        out.push((D::render(&text), open.params));
    }
    let mut out = Vec::new();
    let mut current: Option<Open> = None;
    for write in writes {
        match write {
            RowWrite::Statement(text, params) => {
                if let Some(open) = current.take() {
                    close::<D>(open, &mut out);
                }
                out.push((D::render(&text), params));
            }
            RowWrite::Values {
                head,
                marks,
                tail,
                params,
                key,
            } => {
                let fits = current.as_ref().is_some_and(|open| {
                    open.head == head
                        && open.tail == tail
                        && open.rows.len() < batch_size.max(1)
                        && open.params.len() + params.len() <= MAX_PARAMS
                        && key.as_ref().is_none_or(|k| !open.keys.contains(k))
                });
                if !fits && let Some(open) = current.take() {
                    close::<D>(open, &mut out);
                }
                let open = current.get_or_insert_with(|| Open {
                    head,
                    tail,
                    rows: Vec::new(),
                    params: Vec::new(),
                    keys: std::collections::HashSet::new(),
                });
                open.rows.push(marks);
                open.params.extend(params);
                if let Some(key) = key {
                    open.keys.insert(key);
                }
            }
        }
    }
    if let Some(open) = current {
        close::<D>(open, &mut out);
    }
    out
}

impl<D: Dialect> Inner<D> {
    fn error(&self, err: sqlx::Error) -> Error {
        let delay = Some(std::time::Duration::from_secs(1));
        sql::connector_error::<D>(&self.name, ConnectorOperation::Send, err, delay)
    }

    async fn columns(&self) -> Result<&Vec<ColumnInfo>> {
        self.columns
            .get_or_try_init(|| async {
                let o = &self.options;
                let columns =
                    sql::read_columns(&self.connector, &o.table, |_, e| self.error(e)).await?;
                for (i, key) in o.keys.iter().enumerate() {
                    find_column::<D>(&columns, &o.table, &format!("keys[{i}]"), key)?;
                }
                for (i, (column, _)) in o.update_columns.iter().flatten().enumerate() {
                    find_column::<D>(&columns, &o.table, &format!("update_columns[{i}]"), column)?;
                }
                for (column, _) in &o.update_expr {
                    find_column::<D>(&columns, &o.table, &format!("update_expr.{column}"), column)?;
                }
                if o.mode == SinkMode::Upsert && D::SCHEMA.is_mysql_family() {
                    self.check_upsert_keys().await?;
                }
                Ok(columns)
            })
            .await
    }

    /// MySQL/MariaDB: `ON DUPLICATE KEY UPDATE` fires on any unique index, and without one on
    /// the keys an upsert silently inserts a second row. As the reference does, refuse keys that
    /// are not exactly the columns of the primary key or of a unique index. (PostgreSQL and
    /// SQLite refuse such an `ON CONFLICT` themselves.)
    async fn check_upsert_keys(&self) -> Result<()> {
        let o = &self.options;
        // `SHOW INDEX` (not `information_schema`, see `show_table`): one row per column of
        // each unique index, in the index's column order; `Key_name` and `Column_name` are its
        // third and fifth fields.
        let show = format!(
            "SHOW INDEX FROM {} WHERE Non_unique = 0",
            crate::user_table::quote::<D>(&o.table)
        );
        let rows = crate::user_table::show_table(&self.connector, &show, |e| self.error(e))
            .await?
            .unwrap_or_default();
        let mut unique: Vec<(String, String)> = Vec::new();
        for row in &rows {
            let text = |i| {
                D::text(row, i)
                    .map_err(|e| self.error(e))
                    .map(Option::unwrap_or_default)
            };
            let (name, column) = (text(2)?, text(4)?);
            match unique.iter_mut().find(|(n, _)| *n == name) {
                Some((_, columns)) => {
                    columns.push(',');
                    columns.push_str(&column);
                }
                None => unique.push((name, column)),
            }
        }
        let wanted: std::collections::BTreeSet<String> =
            o.keys.iter().map(|k| k.to_ascii_lowercase()).collect();
        let matches = unique.iter().any(|(_, columns)| {
            columns
                .split(',')
                .map(str::to_ascii_lowercase)
                .collect::<std::collections::BTreeSet<_>>()
                == wanted
        });
        if matches {
            return Ok(());
        }
        let found: Vec<String> = unique
            .iter()
            .map(|(name, columns)| format!("{name} ({columns})"))
            .collect();
        Err(Error::invalid(
            "keys",
            format!(
                "must be the columns of the primary key or of a unique index of {} for an \
                 upsert, or it inserts duplicates; its unique indexes: {}",
                o.table,
                if found.is_empty() {
                    "none".to_owned()
                } else {
                    found.join(", ")
                }
            ),
        ))
    }

    /// `value` as written into `column` under `serialize_json`.
    fn value_for(&self, value: &Value, column: &ColumnInfo) -> Value {
        let structured = value.is_array() || value.is_object();
        let json_column = column.declared.to_ascii_lowercase().starts_with("json");
        match self.options.serialize_json {
            SerializeJson::Always if structured => Value::String(python_dumps(value)),
            SerializeJson::Auto if structured && !json_column => Value::String(python_dumps(value)),
            _ => value.clone(),
        }
    }

    /// The statement writing `row`.
    fn write(&self, columns: &[ColumnInfo], row: &Map<String, Value>, at: &str) -> Result<Write> {
        let o = &self.options;
        let mut cells: Vec<(&ColumnInfo, Value)> = Vec::with_capacity(row.len());
        for (name, value) in row {
            let column = find_column::<D>(columns, &o.table, &format!("{at}.{name}"), name)?;
            cells.push((column, self.value_for(value, column)));
        }
        let quote = sql::quote::<D>;
        let t = quote(&o.table);
        let is_key = |c: &ColumnInfo| o.keys.iter().any(|k| sql::same_column::<D>(&c.name, k));
        for key in &o.keys {
            if o.mode != SinkMode::Insert
                && !cells
                    .iter()
                    .any(|(c, _)| sql::same_column::<D>(&c.name, key))
            {
                return Err(Error::invalid(
                    at,
                    format!("lacks the key column {key:?} ({} mode)", o.mode_name()),
                ));
            }
        }
        // The columns an upsert or update writes, with their policies, from this row.
        let mut updates: Vec<(&ColumnInfo, &Value, ColumnPolicy)> = Vec::new();
        let mut skipped = false;
        for (column, value) in &cells {
            if is_key(column) {
                continue;
            }
            let policy = match &o.update_columns {
                None => Some(ColumnPolicy::Overwrite),
                Some(listed) => listed
                    .iter()
                    .find(|(name, _)| sql::same_column::<D>(&column.name, name))
                    .map(|(_, policy)| *policy),
            };
            match policy {
                Some(ColumnPolicy::SkipNull) if value.is_null() => skipped = true,
                Some(policy) => updates.push((column, value, policy)),
                None => {}
            }
        }
        let exprs: Vec<(String, &String)> =
            o.update_expr.iter().map(|(c, e)| (quote(c), e)).collect();
        if o.mode != SinkMode::Insert && updates.is_empty() && exprs.is_empty() {
            if skipped {
                return Ok(None);
            }
            return Err(Error::invalid(
                at,
                format!(
                    "has no column to write in {} mode besides the keys",
                    o.mode_name()
                ),
            ));
        }
        let mut params = Vec::new();
        match o.mode {
            SinkMode::Insert | SinkMode::Upsert => {
                let names: Vec<String> = cells.iter().map(|(c, _)| quote(&c.name)).collect();
                let marks: Vec<String> = cells
                    .iter()
                    .map(|(c, _)| sql::placeholder::<D>(c))
                    .collect();
                params.extend(cells.iter().map(|(_, v)| sql::bind::<D>(v)));
                let head = format!("INSERT INTO {t} ({}) VALUES ", names.join(", "));
                let mut tail = String::new();
                let mut key = None;
                if o.mode == SinkMode::Upsert {
                    let mysql = D::SCHEMA.is_mysql_family();
                    let new = |c: &str| {
                        if mysql {
                            format!("VALUES({c})")
                        } else {
                            format!("excluded.{c}")
                        }
                    };
                    let mut sets: Vec<String> = updates
                        .iter()
                        .map(|(column, _, policy)| {
                            let c = quote(&column.name);
                            match policy {
                                ColumnPolicy::Backfill => {
                                    format!("{c} = COALESCE({t}.{c}, {})", new(&c))
                                }
                                _ => format!("{c} = {}", new(&c)),
                            }
                        })
                        .collect();
                    sets.extend(exprs.iter().map(|(c, e)| format!("{c} = {e}")));
                    if mysql {
                        tail = format!(" ON DUPLICATE KEY UPDATE {}", sets.join(", "));
                    } else {
                        let keys: Vec<String> = o.keys.iter().map(|k| quote(k)).collect();
                        tail = format!(
                            " ON CONFLICT ({}) DO UPDATE SET {}",
                            keys.join(", "),
                            sets.join(", ")
                        );
                    }
                    let values: Vec<&Value> = cells
                        .iter()
                        .filter(|(c, _)| is_key(c))
                        .map(|(_, v)| v)
                        .collect();
                    key = Some(serde_json::to_string(&values).unwrap_or_default());
                }
                Ok(Some(RowWrite::Values {
                    head,
                    marks: format!("({})", marks.join(", ")),
                    tail,
                    params,
                    key,
                }))
            }
            SinkMode::Update => {
                let mut sets = Vec::new();
                for (column, value, policy) in &updates {
                    let c = quote(&column.name);
                    let mark = sql::placeholder::<D>(column);
                    sets.push(match policy {
                        ColumnPolicy::Backfill => format!("{c} = COALESCE({c}, {mark})"),
                        _ => format!("{c} = {mark}"),
                    });
                    params.push(sql::bind::<D>(value));
                }
                sets.extend(exprs.iter().map(|(c, e)| format!("{c} = {e}")));
                let mut conditions = Vec::new();
                for (column, value) in cells.iter().filter(|(c, _)| is_key(c)) {
                    conditions.push(format!(
                        "{} = {}",
                        quote(&column.name),
                        sql::placeholder::<D>(column)
                    ));
                    params.push(sql::bind::<D>(value));
                }
                let text = format!(
                    "UPDATE {t} SET {} WHERE {}",
                    sets.join(", "),
                    conditions.join(" AND ")
                );
                Ok(Some(RowWrite::Statement(text, params)))
            }
        }
    }

    async fn send(&self, body: &Value) -> Result<()> {
        let rows: Vec<(&Map<String, Value>, String)> = match body {
            Value::Object(row) => vec![(row, "body".to_owned())],
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::Object(row) => Ok((row, format!("body[{i}]"))),
                    other => Err(Error::invalid(
                        format!("body[{i}]"),
                        format!(
                            "must be a row (a mapping of column: value), got {}",
                            kind(other)
                        ),
                    )),
                })
                .collect::<Result<_>>()?,
            other => {
                return Err(Error::invalid(
                    "body",
                    format!(
                        "must be a row (a mapping of column: value) or a list of rows, got {}",
                        kind(other)
                    ),
                ));
            }
        };
        let columns = self.columns().await?;
        // Every statement is built, and every row checked, before the transaction opens.
        let writes: Vec<Write> = rows
            .iter()
            .map(|(row, at)| self.write(columns, row, at))
            .collect::<Result<_>>()?;
        let writes = statements::<D>(
            writes.into_iter().flatten().collect(),
            self.options.batch_size,
        );
        let pool = self.connector.pool()?;
        let mut tx = D::begin(&pool).await.map_err(|e| self.error(e))?;
        for (text, params) in writes {
            D::execute(&mut tx, &text, params)
                .await
                .map_err(|e| self.error(e))?;
        }
        tx.commit().await.map_err(|e| self.error(e))
    }
}

fn kind(value: &Value) -> &'static str {
    onestep_core::catalog::type_name(value)
}

#[async_trait]
impl<D: Dialect> Resource for TableSink<D> {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Reads the table's columns and checks the configured ones exist.
    async fn open(&self) -> Result<()> {
        self.inner.columns().await.map(drop)
    }
}

#[async_trait]
impl<D: Dialect> Sink for TableSink<D> {
    async fn send(&self, envelope: Envelope) -> Result<()> {
        self.inner.send(&envelope.body).await
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    fn row(head: &str, key: Option<&str>) -> RowWrite {
        RowWrite::Values {
            head: head.to_owned(),
            marks: "(?)".to_owned(),
            tail: String::new(),
            params: vec![Param::BigInt(1)],
            key: key.map(str::to_owned),
        }
    }

    #[test]
    fn rows_of_one_shape_share_statements_up_to_the_batch_size() {
        let head = "INSERT INTO t (a) VALUES ";
        let writes = (0..7).map(|_| row(head, None)).collect();
        let out = statements::<crate::sqlite::Sqlite>(writes, 3);
        let sizes: Vec<usize> = out.iter().map(|(_, p)| p.len()).collect();
        assert_eq!(sizes, [3, 3, 1]);
        assert_eq!(out[0].0, "INSERT INTO t (a) VALUES (?), (?), (?)");
    }

    #[test]
    fn another_shape_an_update_or_a_repeated_key_starts_a_new_statement() {
        let a = "INSERT INTO t (a) VALUES ";
        let b = "INSERT INTO t (a, b) VALUES ";
        let writes = vec![
            row(a, Some("[1]")),
            row(a, Some("[2]")),
            row(a, Some("[1]")),
            row(b, None),
            RowWrite::Statement("UPDATE t SET a = ?".into(), vec![Param::BigInt(2)]),
            row(b, None),
        ];
        let out = statements::<crate::sqlite::Sqlite>(writes, 100);
        let sizes: Vec<usize> = out.iter().map(|(_, p)| p.len()).collect();
        assert_eq!(sizes, [2, 1, 1, 1, 1]);
    }
}

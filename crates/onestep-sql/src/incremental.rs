//! A source that reads new rows of the user's table in cursor order (`*_incremental`), as the
//! reference's incremental sources do: keyset polling on the `cursor` columns with the `key` as
//! the last tie-breaker, an optional `where`, and the position kept in a [`CursorStore`] under
//! `state_key`.
//!
//! Nothing in the table changes. The position is committed in waves: when the oldest row still
//! outstanding is acked, the longest acked prefix is saved as one cursor. A restart reads on
//! from the saved cursor, so a row is never skipped, and only rows fetched but not yet part of a
//! committed prefix are read again. A retried row is delivered again (after its delay) before
//! anything newer; while it waits, nothing newer is fetched. A failed row blocks the source: the
//! next fetch fails with a permanent error ("blocked at a failed cursor row"), because moving
//! past it would lose it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::state::CursorStore;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Delivery, Envelope, Error,
    FailureInfo, Resource, Result, Source,
};
use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;

use crate::SqlConnector;
use crate::dialect::Dialect;
use crate::param::Param;
use crate::schema::{self};
use crate::user_table::{self as sql, ColumnInfo, find_column};

/// The reference's tag of a `datetime` component in a saved cursor.
const CURSOR_TYPE_KEY: &str = "__onestep_cursor_type__";

/// What an incremental source reads.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct IncrementalOptions {
    /// The table.
    pub table: String,
    /// Its unique key: the last cursor column (appended when `cursor` lacks it).
    pub key: String,
    /// The columns rows are read in the order of (at least one).
    pub cursor: Vec<String>,
    /// Which rows to read at all, as SQL text; trusted configuration.
    pub where_sql: Option<String>,
    /// Most rows per fetch (default 1,000).
    pub batch_size: usize,
    /// How long a worker waits after finding nothing new (default 1 s).
    pub poll_interval: Duration,
    /// The cursor store key; default derived from the table, cursor, key and `where` as the
    /// reference derives it ([`default_state_key`]).
    pub state_key: Option<String>,
}

impl IncrementalOptions {
    /// Options for `table`, read in `cursor` order with `key` as tie-breaker.
    pub fn new(
        table: impl Into<String>,
        key: impl Into<String>,
        cursor: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            table: table.into(),
            key: key.into(),
            cursor: cursor.into_iter().map(Into::into).collect(),
            where_sql: None,
            batch_size: 1000,
            poll_interval: Duration::from_secs(1),
            state_key: None,
        }
    }

    /// Only rows matching `where_sql`.
    pub fn with_where(mut self, where_sql: impl Into<String>) -> Self {
        self.where_sql = Some(where_sql.into());
        self
    }

    /// Sets the most rows per fetch.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the wait after an empty fetch.
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Sets the cursor store key.
    pub fn with_state_key(mut self, state_key: impl Into<String>) -> Self {
        self.state_key = Some(state_key.into());
        self
    }

    /// The cursor columns with the key appended when missing.
    pub fn effective_cursor(&self) -> Vec<String> {
        let mut cursor = self.cursor.clone();
        if !cursor.contains(&self.key) {
            cursor.push(self.key.clone());
        }
        cursor
    }

    /// The key the position is saved under.
    pub fn effective_state_key(&self) -> String {
        self.state_key.clone().unwrap_or_else(|| {
            default_state_key(
                &self.table,
                &self.effective_cursor(),
                &self.key,
                self.where_sql.as_deref(),
            )
        })
    }

    /// Checks every field that needs no database, naming the field at fault.
    pub fn validate(&self, dialect: schema::Dialect) -> Result<()> {
        let identifier = |field: &str, name: &str| sql::identifier(field, name, dialect);
        identifier("table", &self.table)?;
        identifier("key", &self.key)?;
        if self.cursor.is_empty() {
            return Err(Error::invalid("cursor", "must contain at least one column"));
        }
        for (i, column) in self.cursor.iter().enumerate() {
            identifier(&format!("cursor[{i}]"), column)?;
        }
        if self.where_sql.as_ref().is_some_and(|w| w.contains('\0')) {
            return Err(Error::invalid("where", "must not contain NUL characters"));
        }
        sql::check_polling(self.batch_size, self.poll_interval)?;
        if self.state_key.as_ref().is_some_and(String::is_empty) {
            return Err(Error::invalid("state_key", "must not be empty"));
        }
        Ok(())
    }
}

/// The reference's default cursor key: `<table>:<cursor,…>:key=<key>:where=<where>`, the
/// `where` with its whitespace runs collapsed, `-` when there is none, and `sha1:<hex>` of it
/// when longer than 64 characters. Changing it would orphan saved cursors, so it is the
/// reference's to the byte.
pub fn default_state_key(
    table: &str,
    cursor: &[String],
    key: &str,
    where_sql: Option<&str>,
) -> String {
    let normalized = where_sql
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let fragment = if normalized.is_empty() {
        "-".to_owned()
    } else if normalized.chars().count() > 64 {
        format!("sha1:{}", hex::encode(Sha1::digest(normalized.as_bytes())))
    } else {
        normalized
    };
    format!("{table}:{}:key={key}:where={fragment}", cursor.join(","))
}

/// The statement of one source, rendered once the table's columns are known.
struct Reader {
    /// Rows after a cursor (its values bound after `where`), then the limit.
    after: String,
    /// The first rows (no cursor yet), then the limit.
    first: String,
    /// The cursor columns, in order.
    cursor: Vec<ColumnInfo>,
}

/// A row fetched and not yet part of a committed prefix, or waiting for a retry.
struct Retry {
    envelope: Envelope,
    ready_at: Instant,
    in_flight: bool,
}

/// Where the source is: what is committed, fetched, outstanding.
#[derive(Default)]
struct Progress {
    loaded: bool,
    committed: Option<Vec<Value>>,
    fetched: Option<Vec<Value>>,
    /// Fetched cursors in order, oldest first, until committed.
    pending: VecDeque<Vec<Value>>,
    acked: HashSet<String>,
    retries: HashMap<String, Retry>,
    blocked: Option<String>,
}

fn token_id(cursor: &[Value]) -> String {
    serde_json::to_string(cursor).unwrap_or_default()
}

impl Progress {
    /// Whether the row at `cursor` is still outstanding: fetched and not committed past. A row
    /// committed past (its handler had succeeded, and a later row's ack saved a cursor after
    /// it) is done: a late retry of it must not be recorded, or it would wait for a delivery
    /// that never comes and hold every later fetch back.
    fn outstanding(&self, cursor: &[Value]) -> bool {
        self.pending.iter().any(|c| c.as_slice() == cursor)
    }
}

struct Inner<D: Dialect> {
    name: String,
    connector: SqlConnector<D>,
    options: IncrementalOptions,
    state_key: String,
    store: Arc<dyn CursorStore>,
    reader: OnceCell<Reader>,
    progress: Mutex<Progress>,
    /// Held for the whole of a fetch.
    fetching: Mutex<()>,
}

/// A [`Source`] reading new rows of a table in cursor order (see the module docs).
pub struct IncrementalSource<D: Dialect> {
    inner: Arc<Inner<D>>,
}

impl<D: Dialect> std::fmt::Debug for IncrementalSource<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncrementalSource")
            .field("name", &self.inner.name)
            .field("state_key", &self.inner.state_key)
            .finish()
    }
}

impl<D: Dialect> IncrementalSource<D> {
    /// A source over `connector` keeping its position in `store`, named
    /// `<dialect>.incremental:<table>`; no I/O until it opens.
    pub fn new(
        connector: SqlConnector<D>,
        options: IncrementalOptions,
        store: Arc<dyn CursorStore>,
    ) -> Result<Self> {
        options.validate(D::SCHEMA)?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: format!("{}.incremental:{}", D::NAME, options.table),
                state_key: options.effective_state_key(),
                connector,
                options,
                store,
                reader: OnceCell::new(),
                progress: Mutex::default(),
                fetching: Mutex::new(()),
            }),
        })
    }

    /// The cursor store key this source saves its position under.
    pub fn state_key(&self) -> &str {
        &self.inner.state_key
    }
}

impl<D: Dialect> Inner<D> {
    fn error(&self, operation: ConnectorOperation, err: sqlx::Error) -> Error {
        sql::connector_error::<D>(&self.name, operation, err, Some(self.options.poll_interval))
    }

    async fn reader(&self) -> Result<&Reader> {
        self.reader.get_or_try_init(|| self.prepare()).await
    }

    async fn prepare(&self) -> Result<Reader> {
        let o = &self.options;
        let columns =
            sql::read_columns(&self.connector, &o.table, |op, e| self.error(op, e)).await?;
        find_column::<D>(&columns, &o.table, "key", &o.key)?;
        let mut cursor = Vec::new();
        for (i, name) in o.effective_cursor().iter().enumerate() {
            let field = if i < o.cursor.len() {
                format!("cursor[{i}]")
            } else {
                "key".to_owned()
            };
            cursor.push(find_column::<D>(&columns, &o.table, &field, name)?.clone());
        }
        let t = sql::quote::<D>(&o.table);
        let order: Vec<String> = cursor.iter().map(|c| sql::quote::<D>(&c.name)).collect();
        let marks: Vec<String> = cursor.iter().map(sql::placeholder::<D>).collect();
        let base = o.where_sql.as_ref().map(|w| format!("({w})"));
        let tuple = format!("({}) > ({})", order.join(", "), marks.join(", "));
        let conditions = |with_cursor: bool| {
            let mut parts: Vec<String> = base.iter().cloned().collect();
            if with_cursor {
                parts.push(tuple.clone());
            }
            if parts.is_empty() {
                String::new()
            } else {
                format!(" WHERE {}", parts.join(" AND "))
            }
        };
        let select = |with_cursor: bool| {
            let order = order.join(", ");
            let text = if D::SCHEMA == schema::Dialect::Postgres {
                format!(
                    "SELECT row_to_json(x) FROM (SELECT * FROM {t}{} ORDER BY {order} LIMIT ?) x \
                     ORDER BY {}",
                    conditions(with_cursor),
                    cursor
                        .iter()
                        .map(|c| format!("x.{}", sql::quote::<D>(&c.name)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!(
                    "SELECT {} FROM {t}{} ORDER BY {order} LIMIT ?",
                    sql::row_json::<D>(&t, &columns),
                    conditions(with_cursor)
                )
            };
            D::render(&text)
        };
        Ok(Reader {
            after: select(true),
            first: select(false),
            cursor,
        })
    }

    /// Loads the saved cursor once: its components as this source binds them.
    async fn load(&self, progress: &mut Progress) -> Result<()> {
        if progress.loaded {
            return Ok(());
        }
        let reader = self.reader().await?;
        // A saved cursor of another length (the cursor columns changed) is ignored, as the
        // reference ignores it.
        if let Some(Value::Array(saved)) = self.store.load(&self.state_key).await?
            && saved.len() == reader.cursor.len()
        {
            let cursor: Vec<Value> = saved
                .into_iter()
                .map(|v| decode_component(v, D::SCHEMA))
                .collect();
            progress.committed = Some(cursor.clone());
            progress.fetched = Some(cursor);
        }
        progress.loaded = true;
        Ok(())
    }

    async fn read(&self, after: Option<&[Value]>, limit: usize) -> Result<Vec<Value>> {
        let reader = self.reader().await?;
        let op = ConnectorOperation::Fetch;
        let mut params: Vec<Param> = after
            .map(|cursor| cursor.iter().map(sql::bind::<D>).collect())
            .unwrap_or_default();
        params.push(Param::BigInt(i64::try_from(limit).unwrap_or(i64::MAX)));
        let text = if after.is_some() {
            &reader.after
        } else {
            &reader.first
        };
        let rows = self
            .connector
            .fetch_alone(text, params, |e| self.error(op, e))
            .await?;
        rows.iter()
            .map(|row| {
                D::json(row, 0)
                    .map(Option::unwrap_or_default)
                    .map_err(|e| self.error(op, e))
            })
            .collect()
    }

    /// The cursor of `row`: its cursor columns' values.
    fn cursor_of(&self, reader: &Reader, row: &Value) -> Result<Vec<Value>> {
        reader
            .cursor
            .iter()
            .map(|c| match row.get(&c.name) {
                Some(v) if !v.is_null() => Ok(v.clone()),
                _ => Err(Error::invalid(
                    "cursor",
                    format!(
                        "column {:?} is NULL in a row of {}; cursor columns must not be null",
                        c.name, self.options.table
                    ),
                )),
            })
            .collect()
    }

    /// Commits the longest acked prefix of the outstanding rows, as one saved cursor.
    async fn commit(&self, progress: &mut Progress, reader: &Reader) -> Result<()> {
        let mut prefix = 0;
        while progress
            .pending
            .get(prefix)
            .is_some_and(|c| progress.acked.contains(&token_id(c)))
        {
            prefix += 1;
        }
        let Some(highest) = prefix
            .checked_sub(1)
            .and_then(|i| progress.pending.get(i))
            .cloned()
        else {
            return Ok(());
        };
        let saved: Vec<Value> = highest
            .iter()
            .zip(&reader.cursor)
            .map(|(v, c)| encode_component(v, c))
            .collect();
        self.store
            .save(&self.state_key, Value::Array(saved))
            .await?;
        for _ in 0..prefix {
            if let Some(done) = progress.pending.pop_front() {
                let id = token_id(&done);
                progress.acked.remove(&id);
                progress.retries.remove(&id);
            }
        }
        progress.committed = Some(highest.clone());
        if progress.pending.is_empty() {
            progress.fetched = Some(highest);
        }
        Ok(())
    }
}

/// A timestamp component as the reference saves it: tagged, so Python reads a `datetime`.
fn encode_component(value: &Value, column: &ColumnInfo) -> Value {
    let declared = column.declared.to_ascii_lowercase();
    match value {
        Value::String(text) if declared.contains("timestamp") || declared.contains("datetime") => {
            json!({CURSOR_TYPE_KEY: "datetime", "value": text})
        }
        other => other.clone(),
    }
}

/// A saved component as this source binds it: a tagged `datetime` becomes its ISO text. On
/// SQLite, where a timestamp is compared as text, a Python `isoformat()` (`T` separator,
/// microseconds left out when zero) is respelled as SQLAlchemy stores timestamps there
/// (`2026-01-02 03:04:05.000000`), so the cursor compares with the rows the reference wrote.
fn decode_component(value: Value, dialect: schema::Dialect) -> Value {
    match &value {
        Value::Object(map)
            if map.len() == 2
                && map.get(CURSOR_TYPE_KEY) == Some(&json!("datetime"))
                && map.get("value").is_some_and(Value::is_string) =>
        {
            let text = map["value"].as_str().unwrap_or_default();
            if dialect == schema::Dialect::Sqlite {
                Value::String(sqlalchemy_sqlite_datetime(text))
            } else {
                Value::String(text.to_owned())
            }
        }
        _ => value,
    }
}

/// `2026-01-02T03:04:05[.ffffff][offset]` as SQLAlchemy's SQLite dialect stores it:
/// `2026-01-02 03:04:05.ffffff[offset]`; other text unchanged.
fn sqlalchemy_sqlite_datetime(text: &str) -> String {
    let bytes = text.as_bytes();
    let shaped = bytes.len() >= 19
        && bytes[..19].is_ascii()
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && (bytes[10] == b'T' || bytes[10] == b' ')
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !shaped {
        return text.to_owned();
    }
    let (date_time, rest) = text.split_at(19);
    let (fraction, offset) = match rest.strip_prefix('.') {
        Some(after) => {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            (&after[..digits], &after[digits..])
        }
        None => ("", rest),
    };
    let mut micros: String = fraction.chars().take(6).collect();
    while micros.len() < 6 {
        micros.push('0');
    }
    format!("{} {}.{micros}{offset}", &date_time[..10], &date_time[11..])
}

#[async_trait]
impl<D: Dialect> Resource for IncrementalSource<D> {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Reads the table's columns, checks the cursor and key exist, loads the saved cursor.
    async fn open(&self) -> Result<()> {
        let mut progress = self.inner.progress.lock().await;
        self.inner.load(&mut progress).await
    }
}

#[async_trait]
impl<D: Dialect> Source for IncrementalSource<D> {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let inner = &self.inner;
        let reader = inner.reader().await?;
        // One fetch at a time reads on from the fetched cursor; acks only wait for the progress
        // lock, which is not held while the rows are read.
        let _fetching = inner.fetching.lock().await;
        let mut progress = inner.progress.lock().await;
        inner.load(&mut progress).await?;
        if let Some(reason) = &progress.blocked {
            return Err(Error::Connector(
                ConnectorOperationError::new(
                    D::NAME,
                    ConnectorOperation::Fetch,
                    ConnectorErrorKind::Permanent,
                    inner.name.clone(),
                )
                .with_cause(std::io::Error::other(format!(
                    "{} incremental source is blocked at a failed cursor row: {reason}",
                    D::NAME
                ))),
            ));
        }
        // A retry due is delivered first, alone; while one waits, nothing newer is read.
        let now = Instant::now();
        let due = progress.pending.iter().find_map(|cursor| {
            let id = token_id(cursor);
            progress
                .retries
                .get(&id)
                .filter(|r| !r.in_flight && r.ready_at <= now)
                .map(|_| (id, cursor.clone()))
        });
        if let Some((id, cursor)) = due
            && let Some(retry) = progress.retries.get_mut(&id)
        {
            retry.in_flight = true;
            let envelope = retry.envelope.clone();
            return Ok(vec![Box::new(IncrementalDelivery {
                source: inner.clone(),
                envelope,
                cursor,
            })]);
        }
        if !progress.retries.is_empty() {
            return Ok(Vec::new());
        }
        let limit = limit.clamp(1, inner.options.batch_size);
        let after = progress
            .fetched
            .clone()
            .or_else(|| progress.committed.clone());
        drop(progress);
        let rows = inner.read(after.as_deref(), limit).await?;
        let mut progress = inner.progress.lock().await;
        let mut deliveries: Vec<Box<dyn Delivery>> = Vec::with_capacity(rows.len());
        for row in rows {
            let cursor = inner.cursor_of(reader, &row)?;
            progress.pending.push_back(cursor.clone());
            progress.fetched = Some(cursor.clone());
            let envelope = sql::row_envelope(row, &inner.options.table);
            deliveries.push(Box::new(IncrementalDelivery {
                source: inner.clone(),
                envelope,
                cursor,
            }));
        }
        Ok(deliveries)
    }

    fn batch_size(&self) -> usize {
        self.inner.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.inner.options.poll_interval
    }

    fn describe(&self) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert(
            "table".into(),
            Value::String(self.inner.options.table.clone()),
        );
        map.insert(
            "state_key".into(),
            Value::String(self.inner.state_key.clone()),
        );
        map
    }
}

/// One fetched row.
struct IncrementalDelivery<D: Dialect> {
    source: Arc<Inner<D>>,
    envelope: Envelope,
    cursor: Vec<Value>,
}

#[async_trait]
impl<D: Dialect> Delivery for IncrementalDelivery<D> {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        let reader = self.source.reader().await?;
        let mut progress = self.source.progress.lock().await;
        if progress.outstanding(&self.cursor) {
            progress.acked.insert(token_id(&self.cursor));
        }
        self.source.commit(&mut progress, reader).await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        let mut progress = self.source.progress.lock().await;
        if !progress.outstanding(&self.cursor) {
            return Ok(());
        }
        let mut envelope = self.envelope.clone();
        envelope.attempts = envelope.attempts.saturating_add(1);
        progress.retries.insert(
            token_id(&self.cursor),
            Retry {
                envelope,
                ready_at: Instant::now() + delay.unwrap_or_default(),
                in_flight: false,
            },
        );
        Ok(())
    }

    async fn fail(&mut self, failure: &FailureInfo) -> Result<()> {
        let mut progress = self.source.progress.lock().await;
        progress.blocked = Some(format!("{}: {}", failure.exception_type, failure.message));
        if let Some(retry) = progress.retries.get_mut(&token_id(&self.cursor)) {
            retry.in_flight = false;
        }
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        let mut progress = self.source.progress.lock().await;
        if !progress.outstanding(&self.cursor) {
            return Ok(());
        }
        let id = token_id(&self.cursor);
        let retry = progress.retries.entry(id).or_insert_with(|| Retry {
            envelope: self.envelope.clone(),
            ready_at: Instant::now(),
            in_flight: false,
        });
        retry.in_flight = false;
        retry.ready_at = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_isoformat_is_respelled_as_sqlalchemy_stores_sqlite_timestamps() {
        for (python, stored) in [
            ("2026-01-02T03:04:05", "2026-01-02 03:04:05.000000"),
            ("2026-01-02T03:04:05.000006", "2026-01-02 03:04:05.000006"),
            (
                "2026-01-02T03:04:05.5+02:00",
                "2026-01-02 03:04:05.500000+02:00",
            ),
            ("2026-01-02 03:04:05.000006", "2026-01-02 03:04:05.000006"),
            ("not a time", "not a time"),
        ] {
            assert_eq!(sqlalchemy_sqlite_datetime(python), stored);
        }
    }

    #[test]
    fn the_default_state_key_is_the_reference_s() {
        let cursor = ["updated_at".to_owned(), "id".to_owned()];
        assert_eq!(
            default_state_key("orders", &cursor, "id", None),
            "orders:updated_at,id:key=id:where=-"
        );
        assert_eq!(
            default_state_key("orders", &cursor, "id", Some("  status =\n 'paid' ")),
            "orders:updated_at,id:key=id:where=status = 'paid'"
        );
        let long = "x".repeat(65);
        assert_eq!(
            default_state_key("o", &cursor, "id", Some(&long)),
            format!(
                "o:updated_at,id:key=id:where=sha1:{}",
                hex::encode(Sha1::digest(long.as_bytes()))
            )
        );
    }
}

//! A source over the user's own table (`*_table_queue`): rows matching `where` are claimed in
//! key order, a batch at a time, by setting the `claim` columns in the same transaction that
//! locks them (`FOR UPDATE SKIP LOCKED` on PostgreSQL and MySQL/MariaDB; SQLite takes the
//! database's write lock with `BEGIN IMMEDIATE`), so concurrent workers never take one row twice.
//! A delivery's body is the claimed row as a JSON object (after the claim), its metadata
//! `{"table": <table>}`. Success writes the `ack` columns; a retry (after its delay), a failure
//! and a delivery handed back unstarted write the `nack` columns, which usually put the row back
//! where `where` finds it.
//!
//! As in the reference, nothing reclaims a row whose worker died between claim and ack: write
//! `where` so that it also matches rows claimed long ago (a `claimed_at` column set by `claim`,
//! for example), or reset them by hand.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{
    ConnectorOperation, ConnectorOperationError, Delivery, Envelope, Error, FailureInfo, Resource,
    Result, Source,
};
use serde_json::{Map, Value};
use tokio::sync::{OnceCell, oneshot};

use crate::SqlConnector;
use crate::dialect::Dialect;
use crate::param::Param;
use crate::schema::{self};
use crate::user_table::{self as sql, ColumnInfo, find_column, same_column};

/// What a table queue reads and writes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableQueueOptions {
    /// The table.
    pub table: String,
    /// Its unique key column: claim order, and how a delivery finds its row again.
    pub key: String,
    /// Which rows are ready, as SQL text (`status = 'pending'`). Trusted configuration: it is
    /// pasted into the claim statement as written.
    pub where_sql: String,
    /// Column values set when a row is claimed.
    pub claim: Map<String, Value>,
    /// Column values set when its handler succeeded.
    pub ack: Map<String, Value>,
    /// Column values set on retry, failure and release (usually undoing `claim`).
    pub nack: Map<String, Value>,
    /// Most rows per claim (default 100).
    pub batch_size: usize,
    /// How long a worker waits after finding nothing (default 1 s).
    pub poll_interval: Duration,
}

impl TableQueueOptions {
    /// Options for `table` keyed by `key`, claiming rows matching `where_sql`, with empty
    /// column maps, batch size 100 and a 1 s poll interval.
    pub fn new(
        table: impl Into<String>,
        key: impl Into<String>,
        where_sql: impl Into<String>,
    ) -> Self {
        Self {
            table: table.into(),
            key: key.into(),
            where_sql: where_sql.into(),
            claim: Map::new(),
            ack: Map::new(),
            nack: Map::new(),
            batch_size: 100,
            poll_interval: Duration::from_secs(1),
        }
    }

    /// Sets the `claim` column values.
    pub fn with_claim(mut self, claim: Map<String, Value>) -> Self {
        self.claim = claim;
        self
    }

    /// Sets the `ack` column values.
    pub fn with_ack(mut self, ack: Map<String, Value>) -> Self {
        self.ack = ack;
        self
    }

    /// Sets the `nack` column values.
    pub fn with_nack(mut self, nack: Map<String, Value>) -> Self {
        self.nack = nack;
        self
    }

    /// Sets the most rows per claim.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the wait after an empty claim.
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Checks every field that needs no database, naming the field at fault.
    pub fn validate(&self, dialect: schema::Dialect) -> Result<()> {
        let identifier = |field: &str, name: &str| sql::identifier(field, name, dialect);
        identifier("table", &self.table)?;
        identifier("key", &self.key)?;
        for (map, values) in [
            ("claim", &self.claim),
            ("ack", &self.ack),
            ("nack", &self.nack),
        ] {
            for column in values.keys() {
                identifier(&format!("{map}.{column}"), column)?;
            }
        }
        if self.where_sql.trim().is_empty() {
            return Err(Error::invalid("where", "must be a non-empty SQL condition"));
        }
        if self.where_sql.contains('\0') {
            return Err(Error::invalid("where", "must not contain NUL characters"));
        }
        sql::check_polling(self.batch_size, self.poll_interval)?;
        Ok(())
    }
}

/// The statements of one queue, rendered once the table's columns are known.
struct Statements {
    /// Claims a batch: its only parameter group is the limit (and on PostgreSQL the claim
    /// values); returns one JSON object per row.
    claim: String,
    /// MySQL and SQLite: writes the claim values to the selected keys, then re-reads them.
    claim_update: Option<(String, String)>,
    /// The key column (its type casts keys on PostgreSQL).
    key: ColumnInfo,
    columns: Vec<ColumnInfo>,
}

struct Inner<D: Dialect> {
    name: String,
    connector: SqlConnector<D>,
    options: TableQueueOptions,
    statements: OnceCell<Statements>,
    /// Acks waiting to be written, each with the channel its outcome goes to.
    acks: std::sync::Mutex<Vec<(Value, oneshot::Sender<Result<()>>)>>,
    /// Held by the one task writing a batch of acks.
    ack_writer: tokio::sync::Mutex<()>,
}

/// A [`Source`] over a table of the user's (see the module docs).
pub struct TableQueueSource<D: Dialect> {
    inner: Arc<Inner<D>>,
}

impl<D: Dialect> std::fmt::Debug for TableQueueSource<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableQueueSource")
            .field("name", &self.inner.name)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl<D: Dialect> TableQueueSource<D> {
    /// A queue over `connector`, named `<dialect>.table_queue:<table>`; no I/O until it opens.
    /// Fails with the field at fault when an option is invalid.
    pub fn new(connector: SqlConnector<D>, options: TableQueueOptions) -> Result<Self> {
        options.validate(D::SCHEMA)?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: format!("{}.table_queue:{}", D::NAME, options.table),
                connector,
                options,
                statements: OnceCell::new(),
                acks: std::sync::Mutex::default(),
                ack_writer: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The options.
    pub fn options(&self) -> &TableQueueOptions {
        &self.inner.options
    }
}

impl<D: Dialect> Inner<D> {
    fn error(&self, operation: ConnectorOperation, err: sqlx::Error) -> Error {
        let delay = (operation == ConnectorOperation::Fetch).then_some(self.options.poll_interval);
        sql::connector_error::<D>(&self.name, operation, err, delay)
    }

    async fn statements(&self) -> Result<&Statements> {
        self.statements.get_or_try_init(|| self.prepare()).await
    }

    /// Reads the table's columns, checks every configured column exists, renders the
    /// statements.
    async fn prepare(&self) -> Result<Statements> {
        let o = &self.options;
        let columns =
            sql::read_columns(&self.connector, &o.table, |op, e| self.error(op, e)).await?;
        let find = |field: &str, name: &str| find_column::<D>(&columns, &o.table, field, name);
        let key = find("key", &o.key)?.clone();
        for (map, values) in [("claim", &o.claim), ("ack", &o.ack), ("nack", &o.nack)] {
            for column in values.keys() {
                find(&format!("{map}.{column}"), column)?;
            }
        }
        let claim_columns: Vec<&ColumnInfo> = o
            .claim
            .keys()
            .filter_map(|name| columns.iter().find(|c| same_column::<D>(&c.name, name)))
            .collect();
        let (t, k) = (sql::quote::<D>(&o.table), sql::quote::<D>(&key.name));
        let pick = |what: &str| {
            format!(
                "SELECT {what} FROM {t} WHERE ({}) ORDER BY {k} LIMIT ?{}",
                o.where_sql,
                D::SKIP_LOCKED
            )
        };
        let (claim, claim_update) = if D::SCHEMA == schema::Dialect::Postgres {
            let claim = if claim_columns.is_empty() {
                format!("SELECT row_to_json(x) FROM ({}) x ORDER BY {k}", pick("*"))
            } else {
                format!(
                    "WITH picked AS ({}), claimed AS (UPDATE {t} SET {} FROM picked WHERE \
                     {t}.{k} = picked.{k} RETURNING {t}.*) SELECT row_to_json(claimed) FROM \
                     claimed ORDER BY {k}",
                    pick(&k),
                    sql::assignments::<D>(&claim_columns)
                )
            };
            (D::render(&claim), None)
        } else {
            let json = sql::row_json::<D>(&t, &columns);
            let claim = pick(&json);
            let update = (!claim_columns.is_empty()).then(|| {
                (
                    format!(
                        "UPDATE {t} SET {} WHERE {k} IN ({{keys}})",
                        sql::assignments::<D>(&claim_columns)
                    ),
                    format!("SELECT {json} FROM {t} WHERE {k} IN ({{keys}}) ORDER BY {k}"),
                )
            });
            (claim, update)
        };
        Ok(Statements {
            claim,
            claim_update,
            key,
            columns,
        })
    }

    /// Claims at most `limit` rows: each one's key and its JSON object.
    async fn claim(&self, limit: usize) -> Result<Vec<(Value, Value)>> {
        let statements = self.statements().await?;
        let op = ConnectorOperation::Fetch;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let pool = self.connector.pool()?;
        let mut tx = D::begin(&pool).await.map_err(|e| self.error(op, e))?;
        let mut params = vec![Param::BigInt(limit)];
        if D::SCHEMA == schema::Dialect::Postgres {
            params.extend(self.options.claim.values().map(sql::bind::<D>));
        }
        let rows = D::fetch(&mut tx, &statements.claim, params)
            .await
            .map_err(|e| self.error(op, e))?;
        let mut objects = Vec::with_capacity(rows.len());
        for row in &rows {
            objects.push(
                D::json(row, 0)
                    .map_err(|e| self.error(op, e))?
                    .unwrap_or(Value::Null),
            );
        }
        if let (Some((update, reread)), false) = (&statements.claim_update, objects.is_empty()) {
            let keys: Vec<Value> = objects
                .iter()
                .map(|o| o.get(&statements.key.name).cloned().unwrap_or(Value::Null))
                .collect();
            let marks = vec!["?"; keys.len()].join(", ");
            let mut params: Vec<Param> = self.options.claim.values().map(sql::bind::<D>).collect();
            params.extend(keys.iter().map(sql::bind::<D>));
            D::execute(&mut tx, &update.replace("{keys}", &marks), params)
                .await
                .map_err(|e| self.error(op, e))?;
            let rows = D::fetch(
                &mut tx,
                &reread.replace("{keys}", &marks),
                keys.iter().map(sql::bind::<D>).collect(),
            )
            .await
            .map_err(|e| self.error(op, e))?;
            objects.clear();
            for row in &rows {
                objects.push(
                    D::json(row, 0)
                        .map_err(|e| self.error(op, e))?
                        .unwrap_or(Value::Null),
                );
            }
        }
        tx.commit().await.map_err(|e| self.error(op, e))?;
        let key = &statements.key.name;
        objects
            .into_iter()
            .map(|row| match row.get(key) {
                Some(value) if !value.is_null() => Ok((value.clone(), row)),
                // A NULL key cannot find its row again: an ack would write nothing.
                _ => Err(Error::invalid(
                    "key",
                    format!("column {key:?} is NULL in a claimed row of {}; the key must be unique and not null", self.options.table),
                )),
            })
            .collect()
    }

    /// Writes `values` to the rows whose keys are `keys`, in one statement and transaction
    /// (nothing for an empty map).
    async fn update(
        &self,
        keys: &[Value],
        values: &Map<String, Value>,
        operation: ConnectorOperation,
    ) -> Result<()> {
        if values.is_empty() || keys.is_empty() {
            return Ok(());
        }
        let statements = self.statements().await?;
        let columns: Vec<&ColumnInfo> = values
            .keys()
            .filter_map(|name| {
                statements
                    .columns
                    .iter()
                    .find(|c| same_column::<D>(&c.name, name))
            })
            .collect();
        let marks = vec![sql::placeholder::<D>(&statements.key); keys.len()].join(", ");
        let text = D::render(&format!(
            "UPDATE {} SET {} WHERE {} IN ({marks})",
            sql::quote::<D>(&self.options.table),
            sql::assignments::<D>(&columns),
            sql::quote::<D>(&statements.key.name),
        ));
        let mut params: Vec<Param> = values.values().map(sql::bind::<D>).collect();
        params.extend(keys.iter().map(sql::bind::<D>));
        self.connector
            .execute_alone(&text, params, |e| self.error(operation, e))
            .await
    }

    /// Writes the `ack` values to `key`'s row, together with the acks that arrive while an
    /// earlier write runs: each ack joins the waiting list; whoever holds the writer takes the
    /// whole list and writes it in one statement, and every ack in it gets that outcome. Under
    /// load a batch per round trip, alone an ack is written at once.
    async fn ack(&self, key: Value) -> Result<()> {
        if self.options.ack.is_empty() {
            return Ok(());
        }
        let (done, outcome) = oneshot::channel();
        self.acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((key, done));
        {
            let _writer = self.ack_writer.lock().await;
            let batch = std::mem::take(&mut *self.acks.lock().unwrap_or_else(|p| p.into_inner()));
            if !batch.is_empty() {
                let keys: Vec<Value> = batch.iter().map(|(k, _)| k.clone()).collect();
                let result = self
                    .update(&keys, &self.options.ack, ConnectorOperation::Ack)
                    .await;
                for (_, done) in batch {
                    let _ = done.send(match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(self.shared_error(e)),
                    });
                }
            }
        }
        outcome.await.unwrap_or_else(|_| {
            // The writer that took this ack was dropped mid-write: its transaction rolled back.
            Err(self.shared_error(&Error::other("the batched ack write was cancelled")))
        })
    }

    /// One waiter's copy of a batch write's error (errors are not `Clone`): the same kind, with
    /// the message as its cause.
    fn shared_error(&self, err: &Error) -> Error {
        let kind = match err {
            Error::Connector(c) => c.kind,
            _ => onestep_core::ConnectorErrorKind::Uncertain,
        };
        Error::Connector(
            ConnectorOperationError::new(D::NAME, ConnectorOperation::Ack, kind, self.name.clone())
                .with_cause(std::io::Error::other(err.to_string())),
        )
    }
}

#[async_trait]
impl<D: Dialect> Resource for TableQueueSource<D> {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Reads the table's columns and checks the configured ones exist.
    async fn open(&self) -> Result<()> {
        self.inner.statements().await.map(drop)
    }
}

#[async_trait]
impl<D: Dialect> Source for TableQueueSource<D> {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let limit = limit.clamp(1, self.inner.options.batch_size);
        let rows = self.inner.claim(limit).await?;
        Ok(rows
            .into_iter()
            .map(|(key, row)| {
                let envelope = sql::row_envelope(row, &self.inner.options.table);
                Box::new(TableQueueDelivery {
                    queue: self.inner.clone(),
                    envelope,
                    key,
                }) as Box<dyn Delivery>
            })
            .collect())
    }

    fn batch_size(&self) -> usize {
        self.inner.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.inner.options.poll_interval
    }

    /// A fetch dropped after its commit would leave rows claimed that nobody handles.
    fn fetch_is_cancel_safe(&self) -> bool {
        false
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.inner.options;
        let mut map = Map::new();
        map.insert("table".into(), Value::String(o.table.clone()));
        map.insert("key".into(), Value::String(o.key.clone()));
        map.insert("batch_size".into(), Value::from(o.batch_size));
        map
    }
}

/// One claimed row.
struct TableQueueDelivery<D: Dialect> {
    queue: Arc<Inner<D>>,
    envelope: Envelope,
    key: Value,
}

#[async_trait]
impl<D: Dialect> Delivery for TableQueueDelivery<D> {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        self.queue.ack(self.key.clone()).await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        if let Some(delay) = delay.filter(|d| !d.is_zero()) {
            tokio::time::sleep(delay).await;
        }
        let nack = &self.queue.options.nack;
        self.queue
            .update(
                std::slice::from_ref(&self.key),
                nack,
                ConnectorOperation::Retry,
            )
            .await
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        let nack = &self.queue.options.nack;
        self.queue
            .update(
                std::slice::from_ref(&self.key),
                nack,
                ConnectorOperation::Fail,
            )
            .await
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        let nack = &self.queue.options.nack;
        self.queue
            .update(
                std::slice::from_ref(&self.key),
                nack,
                ConnectorOperation::Retry,
            )
            .await
    }
}

//! A change-data-capture source over the MySQL/MariaDB binary log (`mysql_binlog`), as the
//! reference's: each inserted, updated or deleted row of the chosen schemas and tables is one
//! delivery, and the log position is kept in a [`CursorStore`] under `state_key` as the
//! reference keeps it (`{"file": …, "pos": …}`), so a Python and a Rust worker can hand the
//! position to each other.
//!
//! The server needs `log_bin` with `binlog_format=ROW` (and `binlog_row_image=FULL` for whole
//! before-images), and the connector's user the `REPLICATION SLAVE` and `REPLICATION CLIENT`
//! privileges. The replication protocol is spoken by `mysql_async` (see
//! `docs/binlog.md` for why that crate).
//!
//! # Delivery
//!
//! A delivery's body is `{"schema", "table", "event", "binlog": {"file", "pos", "timestamp"},
//! "values"}`, with `"before_values"` for updates; its metadata is `{"source": "mysql_binlog",
//! "binlog": …}`. The position is committed in waves: when the oldest outstanding row is acked,
//! the longest acked prefix is saved, at a place a restart can read on from (never inside a
//! statement whose rows span several events). A restart reads on from the saved position, so
//! nothing is skipped; rows after it are delivered again. A retried row is delivered again
//! after its delay, before anything newer; a failed row blocks the source, because moving the
//! position past it would lose it.

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
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::SqlConnector;
use crate::mysql::MySql;
use stream::{Position, ReadError, Reader, Token};

mod stream;
mod value;

/// Which row changes a source delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A new row (`values`).
    Insert,
    /// A changed row (`before_values` and `values`).
    Update,
    /// A removed row (`values`: the row as it was).
    Delete,
}

impl EventKind {
    /// The name in payloads and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Insert => "insert",
            Self::Update => "update",
            Self::Delete => "delete",
        }
    }

    /// A configured name, with the reference's aliases (`write`, `create`, `remove`), any case.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "insert" | "write" | "create" => Some(Self::Insert),
            "update" => Some(Self::Update),
            "delete" | "remove" => Some(Self::Delete),
            _ => None,
        }
    }
}

/// What a binlog source reads.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BinlogOptions {
    /// This client's replication server id: positive, and unique among the server's replicas.
    pub server_id: u32,
    /// Only these schemas (all when empty).
    pub schemas: Vec<String>,
    /// Only these tables, by name or `schema.table` (all when empty).
    pub tables: Vec<String>,
    /// The changes to deliver (default all three).
    pub events: Vec<EventKind>,
    /// Most rows per fetch (default 100).
    pub batch_size: usize,
    /// How long a worker waits after finding nothing new (default 1 s).
    pub poll_interval: Duration,
    /// The cursor store key; default as the reference derives it ([`default_state_key`]).
    pub state_key: Option<String>,
    /// Wait inside a fetch (up to the poll interval) for the first change, rather than briefly.
    pub blocking: bool,
}

impl BinlogOptions {
    /// Every change of every table, read as replica `server_id`.
    pub fn new(server_id: u32) -> Self {
        Self {
            server_id,
            schemas: Vec::new(),
            tables: Vec::new(),
            events: vec![EventKind::Insert, EventKind::Update, EventKind::Delete],
            batch_size: 100,
            poll_interval: Duration::from_secs(1),
            state_key: None,
            blocking: false,
        }
    }

    /// Only `schemas`.
    pub fn with_schemas(mut self, schemas: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.schemas = schemas.into_iter().map(Into::into).collect();
        self
    }

    /// Only `tables`.
    pub fn with_tables(mut self, tables: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tables = tables.into_iter().map(Into::into).collect();
        self
    }

    /// Only `events`.
    pub fn with_events(mut self, events: impl IntoIterator<Item = EventKind>) -> Self {
        self.events = events.into_iter().collect();
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

    /// Waits inside a fetch for the first change (see [`BinlogOptions::blocking`]).
    pub fn with_blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }

    /// The key the position is saved under.
    pub fn effective_state_key(&self) -> String {
        self.state_key.clone().unwrap_or_else(|| {
            let events: Vec<&str> = self.events.iter().map(|e| e.as_str()).collect();
            default_state_key(&self.schemas, &self.tables, &events)
        })
    }

    /// Checks every field that needs no server, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        if self.server_id == 0 {
            return Err(Error::invalid(
                "server_id",
                "must be a positive integer, unique among the server's replicas",
            ));
        }
        if self.events.is_empty() {
            return Err(Error::invalid(
                "events",
                "must contain at least one of insert, update, delete",
            ));
        }
        for (field, names) in [("schemas", &self.schemas), ("tables", &self.tables)] {
            for (i, name) in names.iter().enumerate() {
                if name.trim().is_empty() || name.contains('\0') {
                    return Err(Error::invalid(
                        format!("{field}[{i}]"),
                        "must be a non-empty name without NUL characters",
                    ));
                }
            }
        }
        crate::user_table::check_polling(self.batch_size, self.poll_interval)?;
        if self.state_key.as_ref().is_some_and(String::is_empty) {
            return Err(Error::invalid("state_key", "must not be empty"));
        }
        Ok(())
    }
}

/// The reference's default position key:
/// `binlog:schemas=<a,b|*>:tables=<a,b|*>:events=<insert,…|*>`, the events spelled as
/// configured (`write` stays `write`). Changing it would orphan saved
/// positions, so it is the reference's to the byte.
pub fn default_state_key(
    schemas: &[String],
    tables: &[String],
    events: &[impl AsRef<str>],
) -> String {
    let list = |items: Vec<&str>| {
        if items.is_empty() {
            "*".to_owned()
        } else {
            items.join(",")
        }
    };
    format!(
        "binlog:schemas={}:tables={}:events={}",
        list(schemas.iter().map(String::as_str).collect()),
        list(tables.iter().map(String::as_str).collect()),
        list(events.iter().map(AsRef::as_ref).collect())
    )
}

/// A row delivered and not yet part of a committed prefix, waiting for a retry.
struct Retry {
    envelope: Envelope,
    ready_at: Instant,
    in_flight: bool,
}

/// Where the source is: what is committed and outstanding.
#[derive(Default)]
struct Progress {
    loaded: bool,
    committed: Option<Position>,
    /// Delivered rows in log order, oldest first, until committed.
    pending: VecDeque<Token>,
    acked: HashSet<Token>,
    retries: HashMap<Token, Retry>,
    blocked: Option<String>,
}

struct Inner {
    name: String,
    options: BinlogOptions,
    state_key: String,
    store: Arc<dyn CursorStore>,
    reader: Mutex<Reader>,
    progress: Mutex<Progress>,
}

/// A [`Source`] of row changes from the binary log (see the module docs). Clones are handles
/// to one source: they share its connection and position, and never deliver a row twice
/// between them. Two sources built separately each read the whole log.
#[derive(Clone)]
pub struct BinlogSource {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BinlogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinlogSource")
            .field("name", &self.inner.name)
            .field("state_key", &self.inner.state_key)
            .finish()
    }
}

impl BinlogSource {
    /// A source reading the log of `connector`'s server, keeping its position in `store`,
    /// named `mysql.binlog`; no I/O until it opens.
    pub fn new(
        connector: SqlConnector<MySql>,
        options: BinlogOptions,
        store: Arc<dyn CursorStore>,
    ) -> Result<Self> {
        options.validate()?;
        let reader = Reader::new(connector.dsn().as_url(), options.clone())
            .map_err(|message| Error::invalid("dsn", message))?;
        Ok(Self {
            inner: Arc::new(Inner {
                name: "mysql.binlog".to_owned(),
                state_key: options.effective_state_key(),
                options,
                store,
                reader: Mutex::new(reader),
                progress: Mutex::default(),
            }),
        })
    }

    /// The cursor store key this source saves its position under.
    pub fn state_key(&self) -> &str {
        &self.inner.state_key
    }
}

impl Inner {
    fn error(&self, operation: ConnectorOperation, err: ReadError) -> Error {
        let (kind, cause): (ConnectorErrorKind, Box<dyn std::error::Error + Send + Sync>) =
            match err {
                ReadError::Connection(err) => (classify(&err), Box::new(err)),
                ReadError::Permanent(message) => (
                    ConnectorErrorKind::Permanent,
                    Box::new(std::io::Error::other(message)),
                ),
                ReadError::Rewind => (
                    ConnectorErrorKind::Permanent,
                    Box::new(std::io::Error::other("a rows event has no table map")),
                ),
            };
        let mut error = ConnectorOperationError::new("mysql", operation, kind, self.name.clone())
            .with_cause(cause);
        error.retry_delay = Some(self.options.poll_interval);
        Error::Connector(error)
    }

    /// Loads the saved position once, or starts at the end of the log (saved at once, as the
    /// reference does, so a restart does not skip what happened in between).
    async fn load(&self, progress: &mut Progress) -> Result<()> {
        if progress.loaded {
            return Ok(());
        }
        let mut reader = self.reader.lock().await;
        let op = ConnectorOperation::Open;
        reader.check_server().await.map_err(|e| self.error(op, e))?;
        let saved = self.store.load(&self.state_key).await?;
        let position = match saved.as_ref().and_then(saved_position) {
            Some(position) => position,
            None => {
                let position = reader
                    .current_position()
                    .await
                    .map_err(|e| self.error(op, e))?;
                self.store
                    .save(&self.state_key, position_value(&position))
                    .await?;
                position
            }
        };
        reader.start_at(position.clone());
        progress.committed = Some(position);
        progress.loaded = true;
        Ok(())
    }

    /// Saves the longest acked prefix's last safe position, then lets go of that prefix. When
    /// the save fails nothing is let go: the rows stay outstanding, so the failed ack's retry
    /// is delivered again (a retry of a row no longer outstanding would never be delivered, and
    /// would hold every later fetch back for good).
    async fn commit(&self, progress: &mut Progress) -> Result<()> {
        let done = progress
            .pending
            .iter()
            .take_while(|token| progress.acked.contains(*token))
            .count();
        let safe = progress
            .pending
            .iter()
            .take(done)
            .rfind(|token| token.row + 1 >= token.rows)
            .map(|token| token.resume.clone());
        if let Some(position) = safe {
            self.save(progress, position).await?;
        }
        for token in progress.pending.drain(..done) {
            progress.acked.remove(&token);
            progress.retries.remove(&token);
        }
        Ok(())
    }

    async fn save(&self, progress: &mut Progress, position: Position) -> Result<()> {
        if progress.committed.as_ref() == Some(&position) {
            return Ok(());
        }
        self.store
            .save(&self.state_key, position_value(&position))
            .await?;
        progress.committed = Some(position);
        Ok(())
    }

    fn blocked_error(&self, reason: &str) -> Error {
        Error::Connector(
            ConnectorOperationError::new(
                "mysql",
                ConnectorOperation::Fetch,
                ConnectorErrorKind::Permanent,
                self.name.clone(),
            )
            .with_cause(std::io::Error::other(format!(
                "mysql binlog source is blocked at a failed row: {reason}"
            ))),
        )
    }
}

/// The error kind of a replication connection's failure.
fn classify(err: &mysql_async::Error) -> ConnectorErrorKind {
    match err {
        mysql_async::Error::Server(server) => match server.code {
            // Access denied, unknown database, no REPLICATION privilege.
            1044 | 1045 | 1049 | 1227 => ConnectorErrorKind::Misconfigured,
            // The position is not in the server's logs (purged, or never there).
            1236 => ConnectorErrorKind::Permanent,
            _ => ConnectorErrorKind::Transient,
        },
        mysql_async::Error::Url(_) => ConnectorErrorKind::Misconfigured,
        _ => ConnectorErrorKind::Disconnected,
    }
}

/// A saved position as the reference writes it: `{"file": <str>, "pos": <int>}`.
fn saved_position(value: &Value) -> Option<Position> {
    let file = value.get("file")?.as_str()?;
    let pos = value.get("pos")?.as_u64()?;
    Some(Position {
        file: file.to_owned(),
        pos,
    })
}

fn position_value(position: &Position) -> Value {
    json!({"file": position.file, "pos": position.pos})
}

#[async_trait]
impl Resource for BinlogSource {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Checks the server logs rows, and loads the saved position (or saves the current one).
    async fn open(&self) -> Result<()> {
        let mut progress = self.inner.progress.lock().await;
        self.inner.load(&mut progress).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.reader.lock().await.disconnect();
        Ok(())
    }
}

#[async_trait]
impl Source for BinlogSource {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let inner = &self.inner;
        let mut progress = inner.progress.lock().await;
        inner.load(&mut progress).await?;
        if let Some(reason) = &progress.blocked {
            return Err(inner.blocked_error(reason));
        }
        // A retry due is delivered first, alone; while one waits, nothing newer is read.
        let now = Instant::now();
        let due = progress.pending.iter().find_map(|token| {
            progress
                .retries
                .get(token)
                .filter(|r| !r.in_flight && r.ready_at <= now)
                .map(|_| token.clone())
        });
        if let Some(token) = due
            && let Some(retry) = progress.retries.get_mut(&token)
        {
            retry.in_flight = true;
            let envelope = retry.envelope.clone();
            return Ok(vec![Box::new(BinlogDelivery {
                source: inner.clone(),
                envelope,
                token,
            })]);
        }
        if !progress.retries.is_empty() {
            return Ok(Vec::new());
        }
        drop(progress);

        let limit = limit.clamp(1, inner.options.batch_size);
        let wait = if inner.options.blocking {
            inner.options.poll_interval
        } else {
            inner.options.poll_interval.min(Duration::from_millis(100))
        };
        let mut reader = inner.reader.lock().await;
        let changes = match reader.read(limit, wait).await {
            Ok(changes) => changes,
            Err(err) => {
                reader.disconnect();
                return Err(inner.error(ConnectorOperation::Fetch, err));
            }
        };
        // Rows of an event partly delivered hold the position at it.
        let consumed = (!reader.has_buffered()).then(|| reader.consumed());
        drop(reader);

        let mut progress = inner.progress.lock().await;
        if changes.is_empty() {
            // Only other tables' changes went by: move the position on past them.
            if let Some(consumed) = consumed
                && progress.pending.is_empty()
                && progress
                    .committed
                    .as_ref()
                    .is_some_and(|committed| consumed > *committed)
            {
                inner.save(&mut progress, consumed).await?;
            }
            return Ok(Vec::new());
        }
        let mut deliveries: Vec<Box<dyn Delivery>> = Vec::with_capacity(changes.len());
        for change in changes {
            progress.pending.push_back(change.token.clone());
            let mut meta = Map::new();
            meta.insert("source".into(), Value::String("mysql_binlog".into()));
            meta.insert(
                "binlog".into(),
                change.payload.get("binlog").cloned().unwrap_or_default(),
            );
            let mut envelope = Envelope::new(change.payload);
            envelope.meta = meta;
            deliveries.push(Box::new(BinlogDelivery {
                source: inner.clone(),
                envelope,
                token: change.token,
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

    /// Rows read from the log are recorded as outstanding only when the fetch returns them.
    fn fetch_is_cancel_safe(&self) -> bool {
        false
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.inner.options;
        let mut map = Map::new();
        map.insert("server_id".into(), Value::from(o.server_id));
        map.insert("schemas".into(), json!(o.schemas));
        map.insert("tables".into(), json!(o.tables));
        map.insert(
            "events".into(),
            json!(o.events.iter().map(|e| e.as_str()).collect::<Vec<_>>()),
        );
        map.insert(
            "state_key".into(),
            Value::String(self.inner.state_key.clone()),
        );
        map
    }
}

/// One row change.
struct BinlogDelivery {
    source: Arc<Inner>,
    envelope: Envelope,
    token: Token,
}

#[async_trait]
impl Delivery for BinlogDelivery {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        let mut progress = self.source.progress.lock().await;
        // A row committed past already (a retry of it was under way) has nothing to record.
        if progress.pending.contains(&self.token) {
            progress.acked.insert(self.token.clone());
        }
        self.source.commit(&mut progress).await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        let mut progress = self.source.progress.lock().await;
        if !progress.pending.contains(&self.token) {
            // Committed past already (its handler had succeeded and a later ack saved a
            // position after it): there is nothing left to deliver again.
            return Ok(());
        }
        let mut envelope = self.envelope.clone();
        envelope.attempts = envelope.attempts.saturating_add(1);
        progress.retries.insert(
            self.token.clone(),
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
        if let Some(retry) = progress.retries.get_mut(&self.token) {
            retry.in_flight = false;
        }
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        let mut progress = self.source.progress.lock().await;
        if !progress.pending.contains(&self.token) {
            return Ok(());
        }
        let retry = progress
            .retries
            .entry(self.token.clone())
            .or_insert_with(|| Retry {
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
    fn the_default_state_key_is_the_reference_s() {
        let all = ["insert", "update", "delete"];
        assert_eq!(
            default_state_key(&[], &[], &all),
            "binlog:schemas=*:tables=*:events=insert,update,delete"
        );
        assert_eq!(
            default_state_key(
                &["shop".into()],
                &["orders".into(), "items".into()],
                &["write"]
            ),
            "binlog:schemas=shop:tables=orders,items:events=write"
        );
    }

    #[test]
    fn event_names_take_the_reference_s_aliases() {
        assert_eq!(EventKind::parse(" Write "), Some(EventKind::Insert));
        assert_eq!(EventKind::parse("remove"), Some(EventKind::Delete));
        assert_eq!(EventKind::parse("truncate"), None);
    }

    use onestep_testkit::state::FlakyCursorStore as FlakyStore;

    fn at(pos: u64) -> Position {
        Position {
            file: "mysql-bin.000001".into(),
            pos,
        }
    }

    /// The position `source` saved in `store`.
    async fn saved(source: &BinlogSource, store: &FlakyStore) -> Option<Value> {
        store.load(source.state_key()).await.unwrap()
    }

    /// A one-row event ending at `pos`.
    fn token(pos: u64) -> Token {
        Token {
            event: at(pos),
            row: 0,
            rows: 1,
            resume: at(pos),
        }
    }

    /// A source that has loaded position 4 and delivered the rows of events 10 and 20 (no
    /// server: nothing here reads the log).
    async fn delivered(store: Arc<FlakyStore>) -> (BinlogSource, Vec<BinlogDelivery>) {
        let connector = SqlConnector::<MySql>::new("mysql://root@127.0.0.1:9/none").unwrap();
        let source = BinlogSource::new(connector, BinlogOptions::new(7), store).unwrap();
        let mut progress = source.inner.progress.lock().await;
        progress.loaded = true;
        progress.committed = Some(at(4));
        let deliveries = [10, 20]
            .into_iter()
            .map(|pos| {
                progress.pending.push_back(token(pos));
                BinlogDelivery {
                    source: source.inner.clone(),
                    envelope: Envelope::new(json!({ "pos": pos })),
                    token: token(pos),
                }
            })
            .collect();
        drop(progress);
        (source, deliveries)
    }

    /// An ack whose position could not be saved (the server restarting) leaves its row
    /// outstanding: the retry the failed ack asks for is delivered next, and its ack commits.
    /// (It used to let go of the row first, so the retry was never delivered and every later
    /// fetch came back empty: a worker stalled for good after a restart.)
    #[tokio::test]
    async fn a_row_whose_ack_failed_is_delivered_again() {
        let store = Arc::new(FlakyStore::default());
        let (source, mut deliveries) = delivered(store.clone()).await;
        store.set_down(true);
        assert!(deliveries[0].ack().await.is_err());
        deliveries[0].retry(None).await.unwrap();
        store.set_down(false);

        let mut again = source.fetch(10).await.unwrap();
        assert_eq!(again.len(), 1, "the retried row, alone");
        assert_eq!(again[0].envelope().body, json!({ "pos": 10 }));
        assert_eq!(again[0].envelope().attempts, 1);
        again[0].ack().await.unwrap();
        assert_eq!(saved(&source, &store).await, Some(position_value(&at(10))));
        assert!(source.inner.progress.lock().await.retries.is_empty());
    }

    /// A row committed past while its retry was waiting (a later row's ack saved a position
    /// after it, its handler having succeeded) is let go with its retry, and a late retry or
    /// ack of it records nothing that could hold fetches back.
    #[tokio::test]
    async fn a_row_committed_past_leaves_no_retry_behind() {
        let store = Arc::new(FlakyStore::default());
        let (source, mut deliveries) = delivered(store.clone()).await;
        store.set_down(true);
        assert!(deliveries[0].ack().await.is_err());
        store.set_down(false);
        deliveries[0].retry(None).await.unwrap();
        deliveries[1].ack().await.unwrap();
        assert_eq!(saved(&source, &store).await, Some(position_value(&at(20))));

        deliveries[0].retry(None).await.unwrap();
        deliveries[0].ack().await.unwrap();
        let progress = source.inner.progress.lock().await;
        assert!(progress.pending.is_empty());
        assert!(progress.retries.is_empty(), "no retry of a committed row");
        assert!(progress.acked.is_empty(), "no ack of a committed row");
    }

    #[test]
    fn options_name_the_field_at_fault() {
        let err = BinlogOptions::new(0).validate().expect_err("server_id 0");
        assert!(err.to_string().contains("server_id"), "{err}");
        let err = BinlogOptions::new(7)
            .with_events([])
            .validate()
            .expect_err("no events");
        assert!(err.to_string().contains("events"), "{err}");
        let err = BinlogOptions::new(7)
            .with_tables(["orders", " "])
            .validate()
            .expect_err("blank table");
        assert!(err.to_string().contains("tables[1]"), "{err}");
    }
}

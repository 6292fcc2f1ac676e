//! The replication connection: reads row events from a position, decodes them with their
//! columns, and keeps track of where reading may safely resume.
//!
//! A statement's rows may span several rows events after one table map; only the last carries
//! the statement-end flag. Resuming after a rows event without it would start at an event whose
//! table map came earlier, so a safe position is either the end of an event after which no
//! statement is open, or the start of the open statement's first table map.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use mysql_async::binlog::EventType;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, OptsBuilder};
use serde_json::{Map, Value, json};

use super::value::{self, Column};
use super::{BinlogOptions, EventKind};

/// `log_bin`, `binlog_format`, `binlog_row_image`, `binlog_checksum`.
type ServerSettings = (Option<i64>, Option<String>, Option<String>, Option<String>);

/// `COLUMN_NAME`, `DATA_TYPE`, `COLUMN_TYPE`, `CHARACTER_SET_NAME`, `DATETIME_PRECISION`.
type SchemaColumn = (String, String, String, Option<String>, Option<u32>);

/// A place in the binary log: a file and a byte offset in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Position {
    pub(crate) file: String,
    pub(crate) pos: u64,
}

/// Where one delivered row sits: its event, its index there, and where reading may resume once
/// it and everything before it is done.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Token {
    /// The file and end offset of the row's event (the reference's `pos`).
    pub(crate) event: Position,
    pub(crate) row: usize,
    pub(crate) rows: usize,
    /// The safe resume position after the row's event.
    pub(crate) resume: Position,
}

/// One row change, decoded.
pub(crate) struct Change {
    pub(crate) payload: Value,
    pub(crate) token: Token,
}

/// Why reading stopped.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The connection failed or dropped; reading resumes on a new one.
    Connection(mysql_async::Error),
    /// The log cannot be read as configured (a message for the user).
    Permanent(String),
    /// A rows event's table map lies before where reading started: read the file again from
    /// its start, skipping what was already read.
    Rewind,
}

impl From<mysql_async::Error> for ReadError {
    fn from(err: mysql_async::Error) -> Self {
        Self::Connection(err)
    }
}

/// The reader of one source.
pub(crate) struct Reader {
    opts: Opts,
    options: BinlogOptions,
    stream: Option<BinlogStream>,
    /// Metadata queries (information_schema, the log position).
    meta: Option<Conn>,
    /// The file the stream is in.
    file: String,
    /// Where the next connection starts.
    resume: Position,
    /// The first table map of the statement still open, if any.
    statement: Option<u64>,
    /// After a reconnect: rows events ending at or before this were already handled.
    skip_through: Option<Position>,
    /// The end of the last event read.
    seen: Option<Position>,
    /// Where the current connection started.
    started: Position,
    /// The connection has seen the format description (checksums are known).
    described: bool,
    /// The server checksums its events.
    checksum: bool,
    /// Rows of the last event beyond the last fetch's limit.
    buffered: VecDeque<Change>,
    columns: HashMap<(String, String), Arc<Vec<Column>>>,
}

impl Reader {
    /// A reader for the server of `url` (an sqlx-style `mysql://` URL); no I/O yet.
    pub(crate) fn new(url: &str, options: BinlogOptions) -> Result<Self, String> {
        // Only the connection itself matters here; sqlx's query parameters mean nothing to the
        // replication client, except a socket path.
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let socket = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("socket="))
            .map(str::to_owned);
        let opts = Opts::from_url(base).map_err(|e| format!("dsn: {e}"))?;
        let mut builder = OptsBuilder::from_opts(opts).prefer_socket(false);
        if let Some(socket) = socket {
            builder = builder.socket(Some(socket));
        }
        Ok(Self {
            opts: builder.into(),
            options,
            stream: None,
            meta: None,
            file: String::new(),
            resume: Position {
                file: String::new(),
                pos: 4,
            },
            statement: None,
            skip_through: None,
            seen: None,
            started: Position {
                file: String::new(),
                pos: 4,
            },
            described: false,
            checksum: true,
            buffered: VecDeque::new(),
            columns: HashMap::new(),
        })
    }

    /// Starts reading at `at` (a saved position) on the next read.
    pub(crate) fn start_at(&mut self, at: Position) {
        self.resume = at;
        self.stream = None;
        self.skip_through = None;
    }

    /// The position reading may resume from after everything read so far.
    pub(crate) fn consumed(&self) -> Position {
        self.resume.clone()
    }

    async fn meta(&mut self) -> Result<&mut Conn, ReadError> {
        if self.meta.is_none() {
            self.meta = Some(Conn::new(self.opts.clone()).await?);
        }
        self.meta
            .as_mut()
            .ok_or_else(|| ReadError::Permanent("no metadata connection".into()))
    }

    /// The server's current end of log (`SHOW MASTER STATUS`).
    pub(crate) async fn current_position(&mut self) -> Result<Position, ReadError> {
        let conn = self.meta().await?;
        let row: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await?;
        let Some(row) = row else {
            return Err(ReadError::Permanent(
                "the server's binary log is off (SHOW MASTER STATUS is empty); start it with \
                 log_bin and binlog_format=ROW"
                    .into(),
            ));
        };
        let file: Option<String> = row.get(0);
        let pos: Option<u64> = row.get(1);
        match (file, pos) {
            (Some(file), Some(pos)) => Ok(Position { file, pos }),
            _ => Err(ReadError::Permanent(
                "SHOW MASTER STATUS returned no file and position".into(),
            )),
        }
    }

    /// Checks the server logs row images the source can read.
    pub(crate) async fn check_server(&mut self) -> Result<(), ReadError> {
        let conn = self.meta().await?;
        let row: Option<ServerSettings> = conn
            .query_first(
                "SELECT @@GLOBAL.log_bin + 0, @@GLOBAL.binlog_format, \
                 @@GLOBAL.binlog_row_image, @@GLOBAL.binlog_checksum",
            )
            .await?;
        let (log_bin, format, image, checksum) = row.unwrap_or_default();
        if log_bin != Some(1) {
            return Err(ReadError::Permanent(
                "the server's binary log is off (log_bin=OFF); start it with --log-bin and \
                 --binlog-format=ROW"
                    .into(),
            ));
        }
        self.checksum = !checksum.is_some_and(|c| c.eq_ignore_ascii_case("NONE"));
        let format = format.unwrap_or_default();
        if !format.eq_ignore_ascii_case("ROW") {
            return Err(ReadError::Permanent(format!(
                "binlog_format is {format:?}; the binlog source reads row events only, so the \
                 server needs binlog_format=ROW"
            )));
        }
        let image = image.unwrap_or_default();
        if !image.eq_ignore_ascii_case("FULL") {
            tracing::warn!(
                binlog_row_image = %image,
                "binlog_row_image is not FULL: update and delete events carry only some columns"
            );
        }
        Ok(())
    }

    async fn connect(&mut self) -> Result<(), ReadError> {
        let conn = Conn::new(self.opts.clone()).await?;
        let request = BinlogStreamRequest::new(self.options.server_id)
            .with_filename(self.resume.file.as_bytes())
            .with_pos(self.resume.pos);
        let stream = conn.get_binlog_stream(request).await?;
        self.file = self.resume.file.clone();
        self.started = self.resume.clone();
        self.described = false;
        self.statement = None;
        self.stream = Some(stream);
        Ok(())
    }

    /// Drops the connection; the next read reconnects where reading may resume, skipping rows
    /// events already read.
    pub(crate) fn disconnect(&mut self) {
        self.stream = None;
        self.meta = None;
        self.skip_through = self.seen.clone();
    }

    /// Up to `limit` row changes: waits up to `wait` for the first, then takes what is ready.
    pub(crate) async fn read(
        &mut self,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<Change>, ReadError> {
        let mut out: Vec<Change> = Vec::new();
        while out.len() < limit {
            let Some(change) = self.buffered.pop_front() else {
                break;
            };
            out.push(change);
        }
        match self.read_more(&mut out, limit, wait).await {
            Ok(()) => Ok(out),
            Err(err) if out.is_empty() => Err(err),
            Err(err) => {
                // What was read stays delivered; the failure is met again after reconnecting
                // (the failed event was not passed), by the next read.
                tracing::warn!(error = ?err, "binlog read failed after some rows; reconnecting");
                self.disconnect();
                Ok(out)
            }
        }
    }

    /// Reads events into `out` until it holds `limit` changes (see [`Reader::read`]).
    async fn read_more(
        &mut self,
        out: &mut Vec<Change>,
        limit: usize,
        wait: Duration,
    ) -> Result<(), ReadError> {
        if self.stream.is_none() {
            self.connect().await?;
        }
        let deadline = tokio::time::Instant::now() + wait;
        while out.len() < limit {
            let Some(stream) = self.stream.as_mut() else {
                break;
            };
            let next = if out.is_empty() {
                match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                }
            } else {
                match futures_util::FutureExt::now_or_never(stream.next()) {
                    Some(next) => next,
                    None => break,
                }
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(err)) => return Err(err.into()),
                None => {
                    return Err(ReadError::Connection(mysql_async::Error::Io(
                        std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the server ended the binlog stream",
                        )
                        .into(),
                    )));
                }
            };
            let changes = match self.event(&event).await {
                Err(ReadError::Rewind) if self.started.pos > 4 => {
                    // The table maps are earlier in the file: read it again from its start,
                    // passing over everything up to where this connection began.
                    tracing::info!(
                        file = %self.started.file, pos = self.started.pos,
                        "binlog position is inside a statement; reading its file from the start"
                    );
                    self.skip_through = Some(self.started.clone());
                    self.resume = Position {
                        file: self.started.file.clone(),
                        pos: 4,
                    };
                    self.stream = None;
                    self.connect().await?;
                    continue;
                }
                Err(ReadError::Rewind) => {
                    return Err(ReadError::Permanent(
                        "a rows event has no table map before it, even from the start of its file"
                            .into(),
                    ));
                }
                other => other?,
            };
            for change in changes {
                if out.len() < limit {
                    out.push(change);
                } else {
                    self.buffered.push_back(change);
                }
            }
        }
        Ok(())
    }

    /// Whether rows of an event already read wait to be delivered.
    pub(crate) fn has_buffered(&self) -> bool {
        !self.buffered.is_empty()
    }

    /// Handles one event: positions, and the row changes it carries that the source wants.
    async fn event(&mut self, event: &Event) -> Result<Vec<Change>, ReadError> {
        let header = event.header();
        let end = u64::from(header.log_pos());
        let start = end.saturating_sub(u64::from(header.event_size()));
        let raw = header.event_type_raw();
        if (0xa6..=0xab).contains(&raw) {
            return Err(ReadError::Permanent(
                "the server writes compressed rows events (log_bin_compress=ON), which the \
                 binlog source cannot read; turn log_bin_compress off"
                    .into(),
            ));
        }
        let Ok(kind) = header.event_type() else {
            // MariaDB's own events (GTID lists, checkpoints, annotations) carry no rows.
            self.advance(end);
            return Ok(Vec::new());
        };
        let mut changes = Vec::new();
        match kind {
            EventType::ROTATE_EVENT => {
                if let Some(EventData::RotateEvent(rotate)) = event.read_data().map_err(io)? {
                    let mut name = rotate.name_raw();
                    // The first rotate of a connection comes before the format description,
                    // so its checksum was not taken off.
                    if !self.described && self.checksum && name.len() > 4 {
                        name = &name[..name.len() - 4];
                    }
                    self.file = String::from_utf8_lossy(name).into_owned();
                    if self.resume.file != self.file && self.statement.is_none() {
                        self.resume = Position {
                            file: self.file.clone(),
                            pos: rotate.position(),
                        };
                    }
                }
                return Ok(changes);
            }
            EventType::FORMAT_DESCRIPTION_EVENT => self.described = true,
            EventType::TABLE_MAP_EVENT if self.statement.is_none() && end != 0 => {
                self.statement = Some(start);
            }
            EventType::WRITE_ROWS_EVENT
            | EventType::UPDATE_ROWS_EVENT
            | EventType::DELETE_ROWS_EVENT
            | EventType::WRITE_ROWS_EVENT_V1
            | EventType::UPDATE_ROWS_EVENT_V1
            | EventType::DELETE_ROWS_EVENT_V1
            | EventType::PARTIAL_UPDATE_ROWS_EVENT => {
                if let Some(EventData::RowsEvent(rows)) = event.read_data().map_err(io)? {
                    let statement_end = rows
                        .flags()
                        .contains(mysql_async::binlog::RowsEventFlags::STMT_END);
                    let resume = if statement_end {
                        Position {
                            file: self.file.clone(),
                            pos: end,
                        }
                    } else {
                        Position {
                            file: self.file.clone(),
                            pos: self.statement.unwrap_or(start),
                        }
                    };
                    let here = Position {
                        file: self.file.clone(),
                        pos: end,
                    };
                    let done = self.skip_through.as_ref().is_some_and(|s| here <= *s);
                    if !done {
                        changes = self
                            .rows(&rows, header.timestamp(), here.clone(), resume)
                            .await?;
                    }
                    if statement_end {
                        self.statement = None;
                    }
                }
            }
            EventType::XID_EVENT => self.statement = None,
            _ => {}
        }
        self.advance(end);
        Ok(changes)
    }

    /// Records that everything up to `end` of the current file has been read.
    fn advance(&mut self, end: u64) {
        if end == 0 {
            // Artificial events the server makes up on connect carry no position.
            return;
        }
        let here = Position {
            file: self.file.clone(),
            pos: end,
        };
        self.seen = Some(here.clone());
        self.resume = match self.statement {
            None => here,
            Some(start) => Position {
                file: self.file.clone(),
                pos: start,
            },
        };
        if self
            .skip_through
            .as_ref()
            .is_some_and(|s| self.seen.as_ref().is_some_and(|seen| seen >= s))
        {
            self.skip_through = None;
        }
    }

    async fn rows(
        &mut self,
        event: &RowsEventData<'_>,
        timestamp: u32,
        here: Position,
        resume: Position,
    ) -> Result<Vec<Change>, ReadError> {
        let kind = match event {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => {
                EventKind::Insert
            }
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => {
                EventKind::Delete
            }
            _ => EventKind::Update,
        };
        let Some(tme) = self
            .stream
            .as_ref()
            .and_then(|s| s.get_tme(event.table_id()))
            .cloned()
        else {
            return Err(ReadError::Rewind);
        };
        let schema = tme.database_name().into_owned();
        let table = tme.table_name().into_owned();
        let o = &self.options;
        let wanted = o.events.contains(&kind)
            && (o.schemas.is_empty() || o.schemas.contains(&schema))
            && (o.tables.is_empty()
                || o.tables
                    .iter()
                    .any(|t| *t == table || *t == format!("{schema}.{table}")));
        if !wanted {
            return Ok(Vec::new());
        }
        let columns = self.columns_of(&schema, &table, &tme).await?;
        let mut decoded = Vec::new();
        for row in event.rows(&tme) {
            let (before, after) = row.map_err(io)?;
            decoded.push((before, after));
        }
        let rows = decoded.len();
        let binlog = json!({"file": here.file, "pos": here.pos, "timestamp": timestamp});
        let mut changes = Vec::with_capacity(rows);
        for (i, (before, after)) in decoded.into_iter().enumerate() {
            let mut payload = Map::new();
            payload.insert("schema".into(), Value::String(schema.clone()));
            payload.insert("table".into(), Value::String(table.clone()));
            payload.insert("event".into(), Value::String(kind.as_str().into()));
            payload.insert("binlog".into(), binlog.clone());
            match kind {
                EventKind::Update => {
                    payload.insert("before_values".into(), image(before.as_ref(), &columns)?);
                    payload.insert("values".into(), image(after.as_ref(), &columns)?);
                }
                EventKind::Insert => {
                    payload.insert("values".into(), image(after.as_ref(), &columns)?);
                }
                EventKind::Delete => {
                    payload.insert("values".into(), image(before.as_ref(), &columns)?);
                }
            }
            changes.push(Change {
                payload: Value::Object(payload),
                token: Token {
                    event: here.clone(),
                    row: i,
                    rows,
                    resume: resume.clone(),
                },
            });
        }
        Ok(changes)
    }

    /// The columns of `schema.table`, read again when the log's table has another width.
    async fn columns_of(
        &mut self,
        schema: &str,
        table: &str,
        tme: &TableMapEvent<'_>,
    ) -> Result<Arc<Vec<Column>>, ReadError> {
        let width = usize::try_from(tme.columns_count()).unwrap_or(usize::MAX);
        let key = (schema.to_owned(), table.to_owned());
        if let Some(columns) = self.columns.get(&key)
            && columns.len() == width
        {
            return Ok(columns.clone());
        }
        let conn = self.meta().await?;
        let rows: Vec<SchemaColumn> = conn
            .exec(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, \
                 DATETIME_PRECISION FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (schema, table),
            )
            .await?;
        let mut columns: Vec<Column> = rows
            .into_iter()
            .map(|(name, data_type, column_type, charset, precision)| {
                Column::from_schema(
                    name,
                    &data_type,
                    &column_type,
                    charset.as_deref(),
                    precision,
                )
            })
            .collect();
        if columns.len() != width {
            // The table changed since the event was written (or is gone): positional names,
            // as the reference's library names columns it cannot see.
            tracing::warn!(
                schema,
                table,
                logged = width,
                now = columns.len(),
                "the table's columns differ from the logged row; naming them by position"
            );
            columns = (0..width)
                .map(|i| {
                    Column::from_schema(format!("UNKNOWN_COL{i}"), "", "", Some("utf8mb4"), None)
                })
                .collect();
        }
        let columns = Arc::new(columns);
        self.columns.insert(key, columns.clone());
        Ok(columns)
    }
}

/// One row image as a name → value object.
fn image(row: Option<&BinlogRow>, columns: &[Column]) -> Result<Value, ReadError> {
    let mut out = Map::new();
    let Some(row) = row else {
        return Ok(Value::Object(out));
    };
    for (i, column) in columns.iter().enumerate().take(row.len()) {
        let value = value::to_json(row.as_ref(i), column).map_err(ReadError::Permanent)?;
        if row.as_ref(i).is_some() {
            out.insert(column.name.clone(), value);
        }
    }
    Ok(Value::Object(out))
}

fn io(err: std::io::Error) -> ReadError {
    ReadError::Permanent(format!("unreadable binlog event: {err}"))
}

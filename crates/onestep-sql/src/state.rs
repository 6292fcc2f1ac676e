//! Durable key-value state and source cursors in the reference's tables: [`SqlStateStore`]
//! (`*_state_store`, behind `app.state` and `ctx.state()`) and [`SqlCursorStore`]
//! (`*_cursor_store`).
//!
//! The tables are the reference's (`onestep-sql` 0.7.1, `SQLAlchemyStateStore`), so a Python
//! and a Rust app can share one: a key column `VARCHAR(255)` as primary key, a value column
//! `TEXT` holding the value as Python's `json.dumps(value, ensure_ascii=False)` writes it, and
//! an `updated_at` timestamp. A value reads back as the JSON it was written as (integers of any
//! size, floats as spelled, object keys in their order), and is written in Python's spelling, so
//! a value Python saved and Rust saved again reads back in Python unchanged.
//!
//! `save` is one upsert statement (`ON CONFLICT … DO UPDATE`, MySQL's `ON DUPLICATE KEY
//! UPDATE`): the reference reads, then inserts or updates, so two first saves of one key can
//! race there; here the last one wins. Identifiers are checked like the execution tables' (bare
//! `[A-Za-z_][A-Za-z0-9_]*` names within the dialect's limit) and quoted; keys and values are
//! always bound, never pasted into SQL.

use std::marker::PhantomData;

use async_trait::async_trait;
use onestep_core::execution::canonical::python_dumps;
use onestep_core::state::{CursorStore, StateStore};
use onestep_core::{ConnectorOperation, Error, Result};
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::OnceCell;

use crate::dialect::Dialect;
use crate::param::Param;
use crate::schema::{self, SchemaError, validate_table_name};
use crate::{SqlConnector, query};

/// Longest key the key column (`VARCHAR(255)`) holds, in characters.
pub const MAX_KEY_CHARS: usize = 255;

/// Where a store keeps its values: the table, its three columns, and whether to create it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateTable {
    /// The table (`onestep_state` for state, `onestep_cursor` for cursors).
    pub table: String,
    /// The primary-key column holding the key (`state_key` / `cursor_key`).
    pub key_column: String,
    /// The column holding the JSON text of the value (`state_value` / `cursor_value`).
    pub value_column: String,
    /// The column holding the time of the last save (`updated_at`).
    pub updated_at_column: String,
    /// Create the table on first use when it is missing (default `true`).
    pub auto_create: bool,
}

impl StateTable {
    /// The reference's state table: `onestep_state (state_key, state_value, updated_at)`.
    pub fn state() -> Self {
        Self::named("onestep_state", "state_key", "state_value")
    }

    /// The reference's cursor table: `onestep_cursor (cursor_key, cursor_value, updated_at)`.
    pub fn cursor() -> Self {
        Self::named("onestep_cursor", "cursor_key", "cursor_value")
    }

    fn named(table: &str, key: &str, value: &str) -> Self {
        Self {
            table: table.to_owned(),
            key_column: key.to_owned(),
            value_column: value.to_owned(),
            updated_at_column: "updated_at".to_owned(),
            auto_create: true,
        }
    }

    /// Another table name.
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Another key column.
    pub fn with_key_column(mut self, column: impl Into<String>) -> Self {
        self.key_column = column.into();
        self
    }

    /// Another value column.
    pub fn with_value_column(mut self, column: impl Into<String>) -> Self {
        self.value_column = column.into();
        self
    }

    /// Another `updated_at` column.
    pub fn with_updated_at_column(mut self, column: impl Into<String>) -> Self {
        self.updated_at_column = column.into();
        self
    }

    /// Whether to create the table on first use.
    pub fn with_auto_create(mut self, auto_create: bool) -> Self {
        self.auto_create = auto_create;
        self
    }

    /// Checks every name for `dialect`, naming the field at fault: each is a bare identifier
    /// within the dialect's limit, and the three columns are different columns.
    pub fn validate(&self, dialect: schema::Dialect) -> Result<()> {
        let fields = [
            ("table", &self.table),
            ("key_column", &self.key_column),
            ("value_column", &self.value_column),
            ("updated_at_column", &self.updated_at_column),
        ];
        for (field, name) in fields {
            validate_table_name(field, name, dialect).map_err(|e| match e {
                SchemaError::NotAnIdentifier { field } => Error::invalid(
                    field,
                    "must be a non-empty SQL identifier ([A-Za-z_][A-Za-z0-9_]*)",
                ),
                SchemaError::TooLong { field, max_length } => {
                    Error::invalid(field, format!("must be at most {max_length} characters"))
                }
                SchemaError::SameTable => Error::invalid("table", e.to_string()),
            })?;
        }
        let columns = &fields[1..];
        for (i, (field, name)) in columns.iter().enumerate() {
            if let Some((other, _)) = columns[..i]
                .iter()
                .find(|(_, earlier)| earlier.eq_ignore_ascii_case(name))
            {
                return Err(Error::invalid(
                    *field,
                    format!("must name another column than {other} ({name:?})"),
                ));
            }
        }
        Ok(())
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement, as SQLAlchemy creates the reference's table
    /// (`TEXT` values, `DATETIME` on MySQL and SQLite), every name quoted. Validate first.
    pub fn ddl(&self, dialect: schema::Dialect) -> String {
        let quote = |name: &str| {
            if dialect.is_mysql_family() {
                format!("`{name}`")
            } else {
                format!("\"{name}\"")
            }
        };
        let timestamp = match dialect {
            schema::Dialect::Postgres => "TIMESTAMP WITH TIME ZONE",
            _ => "DATETIME",
        };
        format!(
            "CREATE TABLE IF NOT EXISTS {table} (\n\t{key} VARCHAR(255) NOT NULL,\n\t{value} TEXT \
             NOT NULL,\n\t{updated} {timestamp} NOT NULL,\n\tPRIMARY KEY ({key})\n)",
            table = quote(&self.table),
            key = quote(&self.key_column),
            value = quote(&self.value_column),
            updated = quote(&self.updated_at_column),
        )
    }
}

/// The statements of one store, rendered once.
struct Statements {
    ddl: String,
    load: String,
    delete: String,
}

/// A [`StateStore`] in a SQL table of the reference's shape (see the module docs).
///
/// Built on a [`SqlConnector`], so it shares the pool of the app's other resources.
pub struct SqlStateStore<D: Dialect> {
    connector: SqlConnector<D>,
    table: StateTable,
    statements: Statements,
    ready: OnceCell<()>,
    dialect: PhantomData<fn() -> D>,
}

impl<D: Dialect> std::fmt::Debug for SqlStateStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStateStore")
            .field("dialect", &D::NAME)
            .field("table", &self.table)
            .finish()
    }
}

impl<D: Dialect> SqlStateStore<D> {
    /// A store in `table` over `connector`; no I/O until the first call. Fails with the field
    /// at fault when a name is not a valid identifier.
    pub fn new(connector: SqlConnector<D>, table: StateTable) -> Result<Self> {
        table.validate(D::SCHEMA)?;
        let (t, k, v) = (
            D::quote(&table.table),
            D::quote(&table.key_column),
            D::quote(&table.value_column),
        );
        let statements = Statements {
            ddl: table.ddl(D::SCHEMA),
            load: D::render(&format!("SELECT {v} FROM {t} WHERE {k} = ?")),
            delete: D::render(&format!("DELETE FROM {t} WHERE {k} = ?")),
        };
        Ok(Self {
            connector,
            table,
            statements,
            ready: OnceCell::new(),
            dialect: PhantomData,
        })
    }

    /// Where this store keeps its values.
    pub fn table(&self) -> &StateTable {
        &self.table
    }

    /// Creates the table when it is missing, whatever `auto_create` says (`onestep init-db`).
    pub async fn create_table(&self) -> Result<()> {
        let pool = self.connector.pool()?;
        let op = ConnectorOperation::Open;
        let mut tx = D::begin(&pool).await.map_err(|e| self.error(op, e))?;
        if D::SCHEMA == schema::Dialect::Postgres {
            // Concurrent `CREATE TABLE IF NOT EXISTS` can collide in PostgreSQL's catalog
            // (a unique violation on pg_type); one creator at a time per table name.
            let key = lock_key(&self.table.table);
            D::execute(
                &mut tx,
                &D::render("SELECT pg_advisory_xact_lock(?)"),
                vec![key.into()],
            )
            .await
            .map_err(|e| self.error(op, e))?;
        }
        D::execute(&mut tx, &self.statements.ddl, Vec::new())
            .await
            .map_err(|e| self.error(op, e))?;
        tx.commit().await.map_err(|e| self.error(op, e))
    }

    async fn ensure_ready(&self) -> Result<()> {
        if !self.table.auto_create {
            return Ok(());
        }
        self.ready
            .get_or_try_init(|| self.create_table())
            .await
            .map(drop)
    }

    fn error(&self, operation: ConnectorOperation, err: sqlx::Error) -> Error {
        let name = format!("{}.state:{}", D::NAME, self.table.table);
        crate::user_table::connector_error::<D>(&name, operation, err, None)
    }

    fn check_key(key: &str) -> Result<()> {
        if key.contains('\0') {
            return Err(Error::invalid("key", "must not contain NUL characters"));
        }
        let chars = key.chars().count();
        if chars > MAX_KEY_CHARS {
            return Err(Error::invalid(
                "key",
                format!("must be at most {MAX_KEY_CHARS} characters, got {chars}"),
            ));
        }
        Ok(())
    }

    async fn load_value(&self, key: &str) -> Result<Option<Value>> {
        Self::check_key(key)?;
        self.ensure_ready().await?;
        let op = ConnectorOperation::Fetch;
        let rows = self
            .connector
            .fetch_alone(&self.statements.load, vec![key.into()], |e| {
                self.error(op, e)
            })
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let text = D::text(row, 0)
            .map_err(|e| self.error(op, e))?
            .unwrap_or_default();
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::other(format!(
                "{}.{} of key {key:?} in table {} is not JSON this process can read: {e}",
                self.table.table, self.table.value_column, self.table.table
            ))
        })
    }

    async fn save_value(&self, key: &str, value: &Value) -> Result<()> {
        Self::check_key(key)?;
        self.ensure_ready().await?;
        let op = ConnectorOperation::Send;
        let table = query::KeyValueTable {
            table: &self.table.table,
            key: &self.table.key_column,
            value: &self.table.value_column,
            updated_at: &self.table.updated_at_column,
        };
        let built = query::upsert_state(
            D::SCHEMA,
            &table,
            key,
            python_dumps(value),
            OffsetDateTime::now_utc(),
        )
        .map_err(|e| Error::other(e.to_string()))?;
        self.connector
            .execute_alone(&built.sql, built.params, |e| self.error(op, e))
            .await
    }

    async fn delete_value(&self, key: &str) -> Result<()> {
        Self::check_key(key)?;
        self.ensure_ready().await?;
        let op = ConnectorOperation::Send;
        self.connector
            .execute_alone(&self.statements.delete, vec![Param::from(key)], |e| {
                self.error(op, e)
            })
            .await
    }
}

/// The advisory-lock key of a table's creation: [`schema::advisory_lock_key`] of
/// `"onestep_state\0" + table`.
fn lock_key(table: &str) -> i64 {
    schema::advisory_lock_key(&[b"onestep_state\0", table.as_bytes()])
}

#[async_trait]
impl<D: Dialect> StateStore for SqlStateStore<D> {
    async fn load(&self, key: &str) -> Result<Option<Value>> {
        self.load_value(key).await
    }

    async fn save(&self, key: &str, value: Value) -> Result<()> {
        self.save_value(key, &value).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.delete_value(key).await
    }
}

/// A [`CursorStore`] in a SQL table of the reference's shape: the same table and statements as
/// [`SqlStateStore`], with the cursor defaults (`onestep_cursor`, `cursor_key`, `cursor_value`).
///
/// A cursor is stored as the JSON it is given. The reference writes a `datetime` component of a
/// list cursor as `{"__onestep_cursor_type__": "datetime", "value": "<isoformat>"}`; such a
/// value reads back here as that object, and an incremental source decodes it.
#[derive(Debug)]
pub struct SqlCursorStore<D: Dialect> {
    store: SqlStateStore<D>,
}

impl<D: Dialect> SqlCursorStore<D> {
    /// A cursor store in `table` over `connector` (see [`SqlStateStore::new`]).
    pub fn new(connector: SqlConnector<D>, table: StateTable) -> Result<Self> {
        Ok(Self {
            store: SqlStateStore::new(connector, table)?,
        })
    }

    /// Where this store keeps its cursors.
    pub fn table(&self) -> &StateTable {
        self.store.table()
    }

    /// Creates the table when it is missing, whatever `auto_create` says.
    pub async fn create_table(&self) -> Result<()> {
        self.store.create_table().await
    }
}

#[async_trait]
impl<D: Dialect> CursorStore for SqlCursorStore<D> {
    async fn load(&self, key: &str) -> Result<Option<Value>> {
        self.store.load_value(key).await
    }

    async fn save(&self, key: &str, cursor: Value) -> Result<()> {
        self.store.save_value(key, &cursor).await
    }
}

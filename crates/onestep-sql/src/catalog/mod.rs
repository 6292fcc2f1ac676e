//! This crate's resource types for declarative apps: the `postgres`, `mysql` and `sqlite`
//! connectors, and over each its `*_execution_source`, `*_state_store`, `*_cursor_store`,
//! `*_table_queue`, `*_incremental` and `*_table_sink` (one set per enabled dialect feature),
//! and `mysql_binlog` (feature `mysql-binlog`).
//!
//! ```
//! let mut catalog = onestep_core::catalog::Catalog::core();
//! onestep_sql::catalog::register(&mut catalog);
//! assert!(catalog.get("postgres_execution_source").is_some());
//! ```

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::Resource;
use onestep_core::catalog::{
    BuildContext, BuildError, Built, Catalog, FieldDoc, Fields, ResourceType, Role, type_name,
};
use onestep_core::execution::{
    ExecutionSource, ExecutionSourceOptions, LeasedExecutionBackend, Prefetch,
};
use serde_json::Value;

use crate::{BackendOptions, Dialect, PoolSettings, SqlConnector, SqlExecutionBackend};
use incremental::IncrementalType;
use state::{StoreKind, StoreType};
use table_queue::TableQueueType;
use table_sink::TableSinkType;

#[cfg(feature = "mysql-binlog")]
mod binlog;
mod incremental;
mod state;
mod table_queue;
mod table_sink;

/// Adds the connector and its resource types for every enabled dialect.
pub fn register(catalog: &mut Catalog) {
    #[cfg(feature = "postgres")]
    add::<crate::postgres::Postgres>(
        catalog,
        [
            "postgres_execution_source",
            "postgres_state_store",
            "postgres_cursor_store",
            "postgres_table_queue",
            "postgres_incremental",
            "postgres_table_sink",
        ],
    );
    #[cfg(feature = "mysql")]
    add::<crate::mysql::MySql>(
        catalog,
        [
            "mysql_execution_source",
            "mysql_state_store",
            "mysql_cursor_store",
            "mysql_table_queue",
            "mysql_incremental",
            "mysql_table_sink",
        ],
    );
    #[cfg(feature = "mysql-binlog")]
    catalog.add(binlog::BinlogType);
    #[cfg(feature = "sqlite")]
    add::<crate::sqlite::Sqlite>(
        catalog,
        [
            "sqlite_execution_source",
            "sqlite_state_store",
            "sqlite_cursor_store",
            "sqlite_table_queue",
            "sqlite_incremental",
            "sqlite_table_sink",
        ],
    );
}

/// Adds `D`'s connector (named `D::NAME`), execution source, state store, cursor store, table
/// queue, incremental source and table sink.
fn add<D: Dialect>(
    catalog: &mut Catalog,
    [source, state, cursor, queue, incremental, sink]: [&'static str; 6],
) where
    SqlExecutionBackend<D>: LeasedExecutionBackend,
{
    catalog
        .add(ConnectorType::<D>(PhantomData))
        .add(ExecutionSourceType::<D> {
            name: source,
            dialect: PhantomData,
        })
        .add(StoreType::<D> {
            name: state,
            kind: StoreKind::State,
            dialect: PhantomData,
        })
        .add(StoreType::<D> {
            name: cursor,
            kind: StoreKind::Cursor,
            dialect: PhantomData,
        })
        .add(TableQueueType::<D> {
            name: queue,
            dialect: PhantomData,
        })
        .add(IncrementalType::<D> {
            name: incremental,
            dialect: PhantomData,
        })
        .add(TableSinkType::<D> {
            name: sink,
            dialect: PhantomData,
        });
}

const CONNECTOR_FIELDS: &[FieldDoc] = &[
    FieldDoc::required(
        "dsn",
        "string",
        "connection URL (sqlx or SQLAlchemy spelling)",
    ),
    FieldDoc::optional(
        "max_connections",
        "integer",
        Some("10 (sqlite: 1)"),
        "pool size",
    ),
    FieldDoc::optional(
        "acquire_timeout_s",
        "number",
        Some("5 (sqlite: 10)"),
        "how long to wait for a connection",
    ),
];

/// `type: postgres | mysql | sqlite`: a pool other resources share (`connector: <name>`).
struct ConnectorType<D>(PhantomData<fn() -> D>);

impl<D: Dialect> ResourceType for ConnectorType<D> {
    type Options = (String, PoolSettings);

    fn name(&self) -> &'static str {
        D::NAME
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Connector]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        CONNECTOR_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some(match D::NAME {
            "postgres" => "PostgresConnector",
            "mysql" => "MySQLConnector",
            _ => "SQLiteConnector",
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let dsn = f
            .string("dsn")
            .and_then(|dsn| match crate::dsn::Dsn::parse(&dsn) {
                Ok(_) => Some(dsn),
                Err(e) => {
                    f.problem("dsn", e.trim_start_matches("dsn ").to_string());
                    None
                }
            });
        let mut settings = D::default_pool_settings();
        if let Some(n) = f.opt_integer("max_connections", 1) {
            settings.max_connections = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(t) = f.opt_number("acquire_timeout_s", false) {
            settings.acquire_timeout = Duration::from_secs_f64(t);
        }
        Some((dsn?, settings))
    }

    fn build(
        &self,
        name: &str,
        (dsn, settings): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = SqlConnector::<D>::new(&dsn)
            .and_then(|c| c.with_settings(settings))
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Connector {
            kind: D::NAME,
            value: Arc::new(connector.clone()),
            lifecycle: Arc::new(ConnectorLifecycle {
                name: name.to_string(),
                connector,
            }),
        })
    }
}

/// Closes a connector's pool at app shutdown.
struct ConnectorLifecycle<D: Dialect> {
    name: String,
    connector: SqlConnector<D>,
}

#[async_trait]
impl<D: Dialect> Resource for ConnectorLifecycle<D> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn close(&self) -> onestep_core::Result<()> {
        self.connector.close().await;
        Ok(())
    }
}

const EXECUTION_SOURCE_FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the connector resource"),
    FieldDoc::required("namespace", "string", "namespace to claim from (1..255)"),
    FieldDoc::required("task_names", "list", "exactly one task name"),
    FieldDoc::optional(
        "table",
        "string",
        Some("onestep_executions"),
        "executions table",
    ),
    FieldDoc::optional(
        "attempts_table",
        "string",
        Some("onestep_execution_attempts"),
        "attempts table",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("100"),
        "most executions per claim",
    ),
    FieldDoc::optional(
        "prefetch",
        "integer or `auto`",
        Some("0"),
        "claimed executions held beyond free slots; `auto`: what two claim round trips take at the measured pace",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("1.0"),
        "sleep after an empty claim",
    ),
    FieldDoc::optional("lease_duration_s", "number", Some("90.0"), "lease length"),
    FieldDoc::optional(
        "heartbeat_interval_s",
        "number",
        Some("30.0"),
        "lease renewal period (<= lease/3)",
    ),
    FieldDoc::optional(
        "worker_id",
        "string",
        Some("onestep-worker"),
        "worker id recorded on attempts",
    ),
    FieldDoc::optional(
        "auto_create",
        "boolean",
        Some("true"),
        "create missing tables",
    ),
    FieldDoc::optional(
        "max_payload_bytes",
        "integer",
        Some("1048576"),
        "payload size limit",
    ),
    FieldDoc::optional(
        "max_metadata_bytes",
        "integer",
        Some("65536"),
        "metadata size limit",
    ),
    FieldDoc::optional(
        "max_result_bytes",
        "integer",
        Some("1048576"),
        "result size limit",
    ),
    FieldDoc::optional(
        "reclaim_batch_size",
        "integer",
        Some("100"),
        "expired rows recovered per claim step",
    ),
];

/// `type: <dialect>_execution_source`: claims tracked executions through a connector.
struct ExecutionSourceType<D> {
    name: &'static str,
    dialect: PhantomData<fn() -> D>,
}

/// What an execution source resource reads into: the connector it names and the options of
/// its backend and worker, each starting from their own defaults.
struct ExecutionSourceSpec {
    connector: String,
    backend: BackendOptions,
    source: ExecutionSourceOptions,
}

impl<D: Dialect> ResourceType for ExecutionSourceType<D>
where
    SqlExecutionBackend<D>: LeasedExecutionBackend,
{
    type Options = ExecutionSourceSpec;

    fn name(&self) -> &'static str {
        self.name
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        EXECUTION_SOURCE_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some(match D::NAME {
            "postgres" => "PostgresExecutionSource",
            "mysql" => "MySQLExecutionSource",
            _ => "SQLiteExecutionSource",
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<ExecutionSourceSpec> {
        let connector = f.reference("connector", Role::Connector, Some(D::NAME));
        let namespace = f.string("namespace");
        let task_name = read_task_name(f);
        let mut source = ExecutionSourceOptions::new(namespace.clone().unwrap_or_default(), "");
        source.task_names = task_name.into_iter().collect();
        if let Some(n) = f.opt_count("batch_size", 1) {
            source.batch_size = n;
        }
        if let Some(prefetch) = read_prefetch(f) {
            source.prefetch = prefetch;
        }
        let seconds =
            |f: &mut Fields<'_>, key: &str| f.opt_number(key, false).map(Duration::from_secs_f64);
        if let Some(d) = seconds(f, "lease_duration_s") {
            source.lease_duration = d;
        }
        if let Some(d) = seconds(f, "heartbeat_interval_s") {
            source.heartbeat_interval = d;
        }
        if let Some(d) = seconds(f, "poll_interval_s") {
            source.poll_interval = d;
        }
        if let Some(worker) = f.opt_string("worker_id") {
            source.worker_id = worker;
        }
        let mut backend = BackendOptions::default();
        for (key, table) in [
            ("table", &mut backend.table),
            ("attempts_table", &mut backend.attempts_table),
        ] {
            if let Some(name) = f.opt_string(key) {
                match crate::schema::validate_table_name(key, &name, D::SCHEMA) {
                    Ok(()) => *table = name,
                    Err(e) => {
                        let text = e.to_string();
                        f.problem(key, text.trim_start_matches(key).trim().to_string());
                    }
                }
            }
        }
        if let Some(a) = f.opt_bool("auto_create") {
            backend.auto_create = a;
        }
        for (key, limit) in [
            ("max_payload_bytes", &mut backend.limits.max_payload_bytes),
            ("max_metadata_bytes", &mut backend.limits.max_metadata_bytes),
            ("max_result_bytes", &mut backend.limits.max_result_bytes),
            ("reclaim_batch_size", &mut backend.reclaim_batch_size),
        ] {
            if let Some(n) = f.opt_count(key, 1) {
                *limit = n;
            }
        }
        let (lease_s, beat_s) = (
            source.lease_duration.as_secs_f64(),
            source.heartbeat_interval.as_secs_f64(),
        );
        if beat_s > lease_s / 3.0 * (1.0 + 1e-9) {
            f.problem(
                "heartbeat_interval_s",
                format!(
                    "must be <= lease_duration_s / 3 ({}), got {beat_s}",
                    lease_s / 3.0
                ),
            );
        }
        if namespace.is_some_and(|ns| ns.chars().count() > 255) {
            f.problem("namespace", "must be at most 255 characters");
        }
        Some(ExecutionSourceSpec {
            connector: connector?,
            backend,
            source,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: ExecutionSourceSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SqlConnector<D>>(&spec.connector, D::NAME)?;
        let backend = SqlExecutionBackend::<D>::from_connector(&connector, spec.backend)
            .map_err(|e| BuildError::new(e.to_string()))?;
        let source = ExecutionSource::new(backend, spec.source)?;
        Ok(Built::Source(Arc::new(source)))
    }
}

/// `prefetch`: a count `>= 0` ([`Prefetch::check`]), or `auto` ([`Prefetch::Adaptive`]).
fn read_prefetch(f: &mut Fields<'_>) -> Option<Prefetch> {
    let read = match f.value("prefetch") {
        // A string is only `auto`: a count is written as a number.
        Some(Value::String(s)) => match s.parse() {
            Ok(Prefetch::Adaptive) => Ok(Prefetch::Adaptive),
            _ => Err(format!("expected an integer >= 0 or `auto`, got {s:?}")),
        },
        _ => Prefetch::Fixed(f.opt_count("prefetch", 0)?).check(),
    };
    read.map_err(|message| f.problem("prefetch", message)).ok()
}

/// `task_names`: a list of exactly one non-empty name.
fn read_task_name(f: &mut Fields<'_>) -> Option<String> {
    match f.value("task_names") {
        Some(Value::Array(items)) if items.len() == 1 => match items[0].as_str().map(str::trim) {
            Some(name) if !name.is_empty() => Some(name.to_string()),
            _ => {
                f.problem("task_names", "must list exactly one task name, got 1");
                None
            }
        },
        Some(Value::Array(items)) => {
            f.problem(
                "task_names",
                format!("must list exactly one task name, got {}", items.len()),
            );
            None
        }
        None => {
            f.problem(
                "task_names",
                "is required (a list with exactly one task name)",
            );
            None
        }
        Some(other) => {
            f.problem(
                "task_names",
                format!(
                    "expected a list with one task name, got {}",
                    type_name(other)
                ),
            );
            None
        }
    }
}

/// `key`: a column name or a list of them (empty when absent); `None`, with the problem
/// recorded, when it is neither.
fn column_names(f: &mut Fields<'_>, key: &str) -> Option<Vec<String>> {
    name_list(f, key, "column names")
}

/// `key`: one string or a list of strings (empty when absent); `None`, with the problem
/// recorded (`expected a list of <what>, got …`), when it is neither.
fn name_list(f: &mut Fields<'_>, key: &str, what: &str) -> Option<Vec<String>> {
    match f.value(key) {
        None => Some(Vec::new()),
        Some(Value::String(s)) => Some(vec![s.trim().to_owned()]),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(f.as_string(&format!("{key}[{i}]"), item)?);
            }
            Some(out)
        }
        Some(other) => {
            f.problem(
                key,
                format!("expected a list of {what}, got {}", type_name(other)),
            );
            None
        }
    }
}

/// Records the field error of an options `validate` as a problem of the resource.
fn report(f: &mut Fields<'_>, validated: onestep_core::Result<()>) {
    if let Err(onestep_core::Error::InvalidArgument { field, message }) = validated {
        f.problem(&field, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_field_is_read_and_nothing_else() {
        let mut catalog = Catalog::new();
        register(&mut catalog);
        assert_eq!(catalog.audit(), Vec::<String>::new());
        assert_eq!(
            catalog.names(),
            [
                "mysql",
                "mysql_binlog",
                "mysql_cursor_store",
                "mysql_execution_source",
                "mysql_incremental",
                "mysql_state_store",
                "mysql_table_queue",
                "mysql_table_sink",
                "postgres",
                "postgres_cursor_store",
                "postgres_execution_source",
                "postgres_incremental",
                "postgres_state_store",
                "postgres_table_queue",
                "postgres_table_sink",
                "sqlite",
                "sqlite_cursor_store",
                "sqlite_execution_source",
                "sqlite_incremental",
                "sqlite_state_store",
                "sqlite_table_queue",
                "sqlite_table_sink"
            ]
        );
    }
}

//! Built-in resource types: `memory`, `interval`, `cron`, the `sqlite` / `postgres` / `mysql`
//! connectors and their `*_execution_source`s.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::execution::{ExecutionSource, ExecutionSourceOptions, LeasedExecutionBackend};
use onestep_core::{CronSource, IntervalSource, MemoryQueue, Overlap, Resource};
use onestep_sql::{BackendOptions, Dialect, PoolSettings, SqlConnector, SqlExecutionBackend};
use serde_json::{Map, Value};

use crate::config::build::BuildContext;
use crate::config::spec::{Checker, ResourceSpec, child};
use crate::registry::{Built, FieldDoc, Registry, ResourceType};

const fn field(
    name: &'static str,
    kind: &'static str,
    required: bool,
    default: Option<&'static str>,
    help: &'static str,
) -> FieldDoc {
    FieldDoc {
        name,
        kind,
        required,
        default,
        help,
    }
}

const MEMORY_FIELDS: &[FieldDoc] = &[
    field(
        "maxsize",
        "integer",
        true,
        None,
        "the most envelopes the queue holds (sends wait when full)",
    ),
    field(
        "batch_size",
        "integer",
        false,
        Some("100"),
        "the most deliveries one fetch returns",
    ),
    field(
        "poll_interval_s",
        "number",
        false,
        Some("0.1"),
        "how long a fetch waits for the first envelope",
    ),
];

const SCHEDULE_COMMON: [FieldDoc; 6] = [
    field(
        "payload",
        "json",
        false,
        Some("null"),
        "the body of every run",
    ),
    field(
        "immediate",
        "boolean",
        false,
        Some("false"),
        "emit one run at start",
    ),
    field(
        "overlap",
        "string",
        false,
        Some("allow"),
        "allow | skip | queue: runs due while one is in flight",
    ),
    field(
        "timezone",
        "string",
        false,
        Some("system"),
        "IANA time zone of the schedule",
    ),
    field(
        "poll_interval_s",
        "number",
        false,
        None,
        "how often the runner checks the schedule",
    ),
    field(
        "max_queued_runs",
        "integer",
        false,
        Some("1000"),
        "queued runs kept with overlap: queue",
    ),
];

const INTERVAL_FIELDS: &[FieldDoc] = &[
    field(
        "name",
        "string",
        false,
        None,
        "source name (default interval:<n>s)",
    ),
    field("days", "number", false, Some("0"), "interval days"),
    field("hours", "number", false, Some("0"), "interval hours"),
    field("minutes", "number", false, Some("0"), "interval minutes"),
    field("seconds", "number", false, Some("0"), "interval seconds"),
    SCHEDULE_COMMON[0],
    SCHEDULE_COMMON[1],
    SCHEDULE_COMMON[2],
    SCHEDULE_COMMON[3],
    field("timezone_name", "string", false, None, "alias of timezone"),
    SCHEDULE_COMMON[4],
    SCHEDULE_COMMON[5],
];

const CRON_FIELDS: &[FieldDoc] = &[
    field(
        "name",
        "string",
        false,
        None,
        "source name (default cron:<expression>)",
    ),
    field(
        "expression",
        "string",
        true,
        None,
        "5-field cron expression or @hourly … @yearly",
    ),
    SCHEDULE_COMMON[0],
    SCHEDULE_COMMON[1],
    SCHEDULE_COMMON[2],
    SCHEDULE_COMMON[3],
    field("timezone_name", "string", false, None, "alias of timezone"),
    SCHEDULE_COMMON[4],
    SCHEDULE_COMMON[5],
];

const CONNECTOR_FIELDS: &[FieldDoc] = &[
    field(
        "dsn",
        "string",
        true,
        None,
        "connection URL (sqlx or SQLAlchemy spelling)",
    ),
    field("max_connections", "integer", false, Some("10"), "pool size"),
    field(
        "acquire_timeout_s",
        "number",
        false,
        Some("5"),
        "how long to wait for a connection",
    ),
];

const EXECUTION_SOURCE_FIELDS: &[FieldDoc] = &[
    field("connector", "string", true, None, "the connector resource"),
    field(
        "namespace",
        "string",
        true,
        None,
        "namespace to claim from (1..255)",
    ),
    field("task_names", "list", true, None, "exactly one task name"),
    field(
        "table",
        "string",
        false,
        Some("onestep_executions"),
        "executions table",
    ),
    field(
        "attempts_table",
        "string",
        false,
        Some("onestep_execution_attempts"),
        "attempts table",
    ),
    field(
        "batch_size",
        "integer",
        false,
        Some("100"),
        "most executions per claim",
    ),
    field(
        "prefetch",
        "integer",
        false,
        Some("0"),
        "claimed executions held beyond free slots (short tasks)",
    ),
    field(
        "poll_interval_s",
        "number",
        false,
        Some("1.0"),
        "sleep after an empty claim",
    ),
    field(
        "lease_duration_s",
        "number",
        false,
        Some("90.0"),
        "lease length",
    ),
    field(
        "heartbeat_interval_s",
        "number",
        false,
        Some("30.0"),
        "lease renewal period (<= lease/3)",
    ),
    field(
        "worker_id",
        "string",
        false,
        Some("onestep-worker"),
        "worker id recorded on attempts",
    ),
    field(
        "auto_create",
        "boolean",
        false,
        Some("true"),
        "create missing tables",
    ),
    field(
        "max_payload_bytes",
        "integer",
        false,
        Some("1048576"),
        "payload size limit",
    ),
    field(
        "max_metadata_bytes",
        "integer",
        false,
        Some("65536"),
        "metadata size limit",
    ),
    field(
        "max_result_bytes",
        "integer",
        false,
        Some("1048576"),
        "result size limit",
    ),
    field(
        "reclaim_batch_size",
        "integer",
        false,
        Some("100"),
        "expired rows recovered per claim step",
    ),
];

const WEBHOOK_FIELDS: &[FieldDoc] = &[
    field(
        "name",
        "string",
        false,
        None,
        "source name (default webhook:<path>)",
    ),
    field(
        "path",
        "string",
        true,
        None,
        "the URL path to accept, e.g. /hooks/github",
    ),
    field(
        "methods",
        "list",
        false,
        Some("[POST]"),
        "accepted HTTP methods",
    ),
    field("host", "string", false, Some("127.0.0.1"), "listen address"),
    field(
        "port",
        "integer",
        false,
        Some("8080"),
        "listen port (shared by webhooks on the same host and port)",
    ),
    field(
        "parser",
        "string",
        false,
        Some("auto"),
        "auto | json | form | text | raw",
    ),
    field(
        "auth",
        "json",
        false,
        None,
        "a bearer token string, or {type: bearer, token, header, scheme, realm}",
    ),
    field(
        "response",
        "json",
        false,
        Some("{status_code: 202, body: {accepted: true}}"),
        "{status_code, body, headers}",
    ),
    field(
        "max_body_bytes",
        "integer",
        false,
        Some("1048576"),
        "larger requests get 413",
    ),
    field(
        "read_timeout_s",
        "number",
        false,
        Some("5"),
        "time to read a request body",
    ),
    field(
        "queue_maxsize",
        "integer",
        false,
        Some("1000"),
        "buffered requests before 503",
    ),
    field(
        "batch_size",
        "integer",
        false,
        Some("100"),
        "most deliveries per fetch",
    ),
    field(
        "poll_interval_s",
        "number",
        false,
        Some("0.1"),
        "fetch wait for the first request",
    ),
];

/// Adds the built-in types.
pub fn register(r: &mut Registry) {
    r.add_resource_type(ResourceType {
        name: "webhook",
        roles: &["source"],
        fields: WEBHOOK_FIELDS,
        validate: validate_webhook,
        build: build_webhook,
    });
    r.add_resource_type(ResourceType {
        name: "memory",
        roles: &["source", "sink"],
        fields: MEMORY_FIELDS,
        validate: validate_memory,
        build: build_memory,
    });
    r.add_resource_type(ResourceType {
        name: "interval",
        roles: &["source"],
        fields: INTERVAL_FIELDS,
        validate: validate_interval,
        build: build_interval,
    });
    r.add_resource_type(ResourceType {
        name: "cron",
        roles: &["source"],
        fields: CRON_FIELDS,
        validate: validate_cron,
        build: build_cron,
    });
    r.add_resource_type(ResourceType {
        name: "postgres",
        roles: &["connector"],
        fields: CONNECTOR_FIELDS,
        validate: validate_connector,
        build: build_connector::<onestep_sql::postgres::Postgres>,
    });
    r.add_resource_type(ResourceType {
        name: "mysql",
        roles: &["connector"],
        fields: CONNECTOR_FIELDS,
        validate: validate_connector,
        build: build_connector::<onestep_sql::mysql::MySql>,
    });
    r.add_resource_type(ResourceType {
        name: "sqlite",
        roles: &["connector"],
        fields: CONNECTOR_FIELDS,
        validate: validate_connector,
        build: build_connector::<onestep_sql::sqlite::Sqlite>,
    });
    r.add_resource_type(ResourceType {
        name: "postgres_execution_source",
        roles: &["source"],
        fields: EXECUTION_SOURCE_FIELDS,
        validate: validate_execution_source,
        build: build_execution_source::<onestep_sql::postgres::Postgres>,
    });
    r.add_resource_type(ResourceType {
        name: "mysql_execution_source",
        roles: &["source"],
        fields: EXECUTION_SOURCE_FIELDS,
        validate: validate_execution_source,
        build: build_execution_source::<onestep_sql::mysql::MySql>,
    });
    r.add_resource_type(ResourceType {
        name: "sqlite_execution_source",
        roles: &["source"],
        fields: EXECUTION_SOURCE_FIELDS,
        validate: validate_execution_source,
        build: build_execution_source::<onestep_sql::sqlite::Sqlite>,
    });
}

fn validate_memory(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    if f.get("maxsize").is_none_or(Value::is_null) {
        if c.strict {
            c.problem(&child(path, "maxsize"), "is required (a positive integer)");
        }
    } else {
        c.opt_integer(f, "maxsize", path, 1);
    }
    c.opt_integer(f, "batch_size", path, 1);
    c.opt_number(f, "poll_interval_s", path, false);
}

fn build_memory(spec: &ResourceSpec, _ctx: &mut BuildContext<'_>) -> Result<Built, String> {
    let f = &spec.fields;
    let maxsize = f.get("maxsize").and_then(Value::as_u64).unwrap_or(0);
    let mut queue = if maxsize == 0 {
        MemoryQueue::unbounded(&spec.name)
    } else {
        MemoryQueue::new(&spec.name, usize::try_from(maxsize).unwrap_or(usize::MAX))
            .map_err(|e| e.to_string())?
    };
    if let Some(b) = f.get("batch_size").and_then(Value::as_u64) {
        queue = queue
            .with_batch_size(usize::try_from(b).unwrap_or(1))
            .map_err(|e| e.to_string())?;
    }
    if let Some(p) = f.get("poll_interval_s").and_then(Value::as_f64) {
        queue = queue
            .with_poll_interval(Duration::from_secs_f64(p))
            .map_err(|e| e.to_string())?;
    }
    Ok(Built::Queue(Arc::new(queue)))
}

fn validate_schedule(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    c.opt_bool(f, "immediate", path);
    if let Some(o) = c.opt_string(f, "overlap", path)
        && o.parse::<Overlap>().is_err()
    {
        c.problem(
            &child(path, "overlap"),
            format!("must be one of allow, skip, queue; got {o:?}"),
        );
    }
    for key in ["timezone", "timezone_name"] {
        if let Some(tz) = c.opt_string(f, key, path)
            && jiff_zone(&tz).is_err()
        {
            c.problem(
                &child(path, key),
                format!("{tz:?} is not a known IANA time zone"),
            );
        }
    }
    c.opt_number(f, "poll_interval_s", path, false);
    c.opt_integer(f, "max_queued_runs", path, 1);
}

fn jiff_zone(name: &str) -> Result<(), String> {
    IntervalSource::every(Duration::from_secs(1))
        .and_then(|b| b.time_zone(name))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn interval_of(f: &Map<String, Value>) -> f64 {
    let n = |k: &str| f.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    n("days") * 86_400.0 + n("hours") * 3_600.0 + n("minutes") * 60.0 + n("seconds")
}

fn validate_interval(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    for k in ["days", "hours", "minutes", "seconds"] {
        c.opt_number(f, k, path, true);
    }
    if interval_of(f) > onestep_core::clock::MAX_SECONDS {
        c.problem(path, "interval must be at most 100 years");
    }
    if interval_of(f) <= 0.0 {
        c.problem(
            path,
            "interval must be greater than zero: set days, hours, minutes or seconds",
        );
    }
    validate_schedule(f, path, c);
}

fn validate_cron(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    if let Some(expr) = c.string(f, "expression", path)
        && let Err(e) = CronSource::on(&expr)
    {
        c.problem(
            &child(path, "expression"),
            e.to_string().trim_start_matches("expression ").to_string(),
        );
    }
    validate_schedule(f, path, c);
}

macro_rules! apply_schedule {
    ($builder:expr, $spec:expr) => {{
        let f = &$spec.fields;
        let mut b = $builder;
        b = b.name(f.get("name").and_then(Value::as_str).unwrap_or(&$spec.name));
        if let Some(p) = f.get("payload") {
            b = b.payload(p.clone());
        }
        if let Some(i) = f.get("immediate").and_then(Value::as_bool) {
            b = b.immediate(i);
        }
        if let Some(o) = f.get("overlap").and_then(Value::as_str) {
            b = b.overlap(o.parse::<Overlap>().map_err(|e| e.to_string())?);
        }
        if let Some(tz) = f
            .get("timezone")
            .or_else(|| f.get("timezone_name"))
            .and_then(Value::as_str)
        {
            b = b.time_zone(tz).map_err(|e| e.to_string())?;
        }
        if let Some(p) = f.get("poll_interval_s").and_then(Value::as_f64) {
            b = b.poll_interval(Duration::from_secs_f64(p));
        }
        if let Some(m) = f.get("max_queued_runs").and_then(Value::as_u64) {
            b = b
                .max_queued_runs(usize::try_from(m).unwrap_or(usize::MAX))
                .map_err(|e| e.to_string())?;
        }
        b.build()
    }};
}

fn build_interval(spec: &ResourceSpec, _ctx: &mut BuildContext<'_>) -> Result<Built, String> {
    let every = IntervalSource::every(Duration::from_secs_f64(interval_of(&spec.fields).max(0.0)))
        .map_err(|e| e.to_string())?;
    Ok(Built::Source(Arc::new(apply_schedule!(every, spec))))
}

fn build_cron(spec: &ResourceSpec, _ctx: &mut BuildContext<'_>) -> Result<Built, String> {
    let expr = spec
        .fields
        .get("expression")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let builder = CronSource::on(expr).map_err(|e| e.to_string())?;
    Ok(Built::Source(Arc::new(apply_schedule!(builder, spec))))
}

fn validate_connector(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    if let Some(dsn) = c.string(f, "dsn", path)
        && let Err(e) = onestep_sql::dsn::Dsn::parse(&dsn)
    {
        c.problem(
            &child(path, "dsn"),
            e.trim_start_matches("dsn ").to_string(),
        );
    }
    c.opt_integer(f, "max_connections", path, 1);
    c.opt_number(f, "acquire_timeout_s", path, false);
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

fn build_connector<D: Dialect>(
    spec: &ResourceSpec,
    _ctx: &mut BuildContext<'_>,
) -> Result<Built, String> {
    let f = &spec.fields;
    let dsn = f.get("dsn").and_then(Value::as_str).unwrap_or_default();
    let mut settings = PoolSettings::default();
    if let Some(n) = f.get("max_connections").and_then(Value::as_u64) {
        settings.max_connections = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(t) = f.get("acquire_timeout_s").and_then(Value::as_f64) {
        settings.acquire_timeout = Duration::from_secs_f64(t);
    }
    let connector = SqlConnector::<D>::new(dsn)
        .and_then(|c| c.with_settings(settings))
        .map_err(|e| e.to_string())?;
    Ok(Built::Connector {
        kind: D::NAME,
        value: Arc::new(connector.clone()) as Arc<dyn Any + Send + Sync>,
        lifecycle: Arc::new(ConnectorLifecycle {
            name: spec.name.clone(),
            connector,
        }),
    })
}

/// The worker options of an execution source resource.
pub fn source_options(f: &Map<String, Value>) -> ExecutionSourceOptions {
    let s = |k: &str| f.get(k).and_then(Value::as_str).map(str::to_string);
    let n = |k: &str| f.get(k).and_then(Value::as_f64);
    let mut o = ExecutionSourceOptions::new(s("namespace").unwrap_or_default(), "");
    o.task_names = match f.get("task_names") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_string())
            .collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    if let Some(b) = f.get("batch_size").and_then(Value::as_u64) {
        o.batch_size = usize::try_from(b).unwrap_or(usize::MAX);
    }
    if let Some(p) = f.get("prefetch").and_then(Value::as_u64) {
        o.prefetch = usize::try_from(p).unwrap_or(usize::MAX);
    }
    o.poll_interval_s = n("poll_interval_s").unwrap_or(o.poll_interval_s);
    o.lease_duration_s = n("lease_duration_s").unwrap_or(o.lease_duration_s);
    o.heartbeat_interval_s = n("heartbeat_interval_s").unwrap_or(o.heartbeat_interval_s);
    if let Some(w) = s("worker_id") {
        o.worker_id = w;
    }
    o
}

/// The backend options of an execution source resource.
pub fn backend_options(f: &Map<String, Value>) -> BackendOptions {
    let mut b = BackendOptions::default();
    if let Some(t) = f.get("table").and_then(Value::as_str) {
        b.table = t.to_string();
    }
    if let Some(t) = f.get("attempts_table").and_then(Value::as_str) {
        b.attempts_table = t.to_string();
    }
    if let Some(a) = f.get("auto_create").and_then(Value::as_bool) {
        b.auto_create = a;
    }
    let size = |k: &str| {
        f.get(k)
            .and_then(Value::as_u64)
            .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
    };
    if let Some(v) = size("max_payload_bytes") {
        b.limits.max_payload_bytes = v;
    }
    if let Some(v) = size("max_metadata_bytes") {
        b.limits.max_metadata_bytes = v;
    }
    if let Some(v) = size("max_result_bytes") {
        b.limits.max_result_bytes = v;
    }
    if let Some(v) = size("reclaim_batch_size") {
        b.reclaim_batch_size = v;
    }
    b
}

fn validate_execution_source(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    c.string(f, "connector", path);
    c.string(f, "namespace", path);
    match f.get("task_names") {
        Some(Value::Array(items))
            if items.len() == 1 && items[0].as_str().is_some_and(|s| !s.trim().is_empty()) => {}
        Some(Value::Array(items)) => c.problem(
            &child(path, "task_names"),
            format!("must list exactly one task name, got {}", items.len()),
        ),
        None | Some(Value::Null) => c.problem(
            &child(path, "task_names"),
            "is required (a list with exactly one task name)",
        ),
        Some(other) => c.problem(
            &child(path, "task_names"),
            format!(
                "expected a list with one task name, got {}",
                crate::config::spec::type_name(other)
            ),
        ),
    }
    c.opt_integer(f, "batch_size", path, 1);
    c.opt_integer(f, "prefetch", path, 0);
    for k in [
        "poll_interval_s",
        "lease_duration_s",
        "heartbeat_interval_s",
    ] {
        c.opt_number(f, k, path, false);
    }
    c.opt_string(f, "worker_id", path);
    for k in ["table", "attempts_table"] {
        c.opt_string(f, k, path);
    }
    c.opt_bool(f, "auto_create", path);
    for k in [
        "max_payload_bytes",
        "max_metadata_bytes",
        "max_result_bytes",
        "reclaim_batch_size",
    ] {
        c.opt_integer(f, k, path, 1);
    }
    let lease = f
        .get("lease_duration_s")
        .and_then(Value::as_f64)
        .unwrap_or(90.0);
    let beat = f
        .get("heartbeat_interval_s")
        .and_then(Value::as_f64)
        .unwrap_or(30.0);
    if lease.is_finite() && beat.is_finite() && lease > 0.0 && beat > lease / 3.0 * (1.0 + 1e-9) {
        c.problem(
            &child(path, "heartbeat_interval_s"),
            format!(
                "must be <= lease_duration_s / 3 ({}), got {beat}",
                lease / 3.0
            ),
        );
    }
    if let Some(ns) = f.get("namespace").and_then(Value::as_str)
        && ns.trim().chars().count() > 255
    {
        c.problem(&child(path, "namespace"), "must be at most 255 characters");
    }
}

fn build_execution_source<D: Dialect>(
    spec: &ResourceSpec,
    ctx: &mut BuildContext<'_>,
) -> Result<Built, String>
where
    SqlExecutionBackend<D>: LeasedExecutionBackend,
{
    let connector_name = spec
        .fields
        .get("connector")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let built = ctx.get(connector_name)?;
    let Built::Connector { kind, value, .. } = built else {
        return Err(format!(
            "resource {connector_name:?} must be a {} connector, but it is not a connector",
            D::NAME
        ));
    };
    let Some(connector) = value.downcast_ref::<SqlConnector<D>>() else {
        return Err(format!(
            "resource {connector_name:?} must be a {} connector, got a {kind} connector",
            D::NAME
        ));
    };
    let backend =
        SqlExecutionBackend::<D>::from_connector(connector, backend_options(&spec.fields))
            .map_err(|e| e.to_string())?;
    let source = ExecutionSource::new(backend, source_options(&spec.fields))
        .map_err(|e| format!("{}.{e}", spec.path))?;
    Ok(Built::Source(Arc::new(source)))
}

/// The webhook options a resource describes; errors are field-qualified.
fn webhook_options(
    f: &Map<String, Value>,
    resource: &str,
    path: &str,
) -> Result<onestep_http::webhook::WebhookOptions, Vec<(String, String)>> {
    use onestep_http::webhook::{BearerAuth, WebhookOptions, WebhookResponse};
    let mut errors = Vec::new();
    let mut o = WebhookOptions::new(f.get("path").and_then(Value::as_str).unwrap_or_default());
    o.name = Some(
        f.get("name")
            .and_then(Value::as_str)
            .unwrap_or(resource)
            .to_string(),
    );
    if let Some(m) = f.get("methods") {
        match m.as_array().map(|a| {
            a.iter()
                .map(|v| v.as_str().map(str::to_ascii_uppercase))
                .collect::<Option<Vec<_>>>()
        }) {
            Some(Some(methods)) => o.methods = methods,
            _ => errors.push((
                child(path, "methods"),
                "expected a list of method names".to_string(),
            )),
        }
    }
    if let Some(h) = f.get("host").and_then(Value::as_str) {
        o.host = h.to_string();
    }
    if let Some(p) = f.get("port") {
        match p.as_u64().and_then(|p| u16::try_from(p).ok()) {
            Some(port) => o.port = port,
            None => errors.push((
                child(path, "port"),
                format!("must be a port number 0..65535, got {p}"),
            )),
        }
    }
    if let Some(p) = f.get("parser").and_then(Value::as_str) {
        match p.parse() {
            Ok(parser) => o.parser = parser,
            Err(e) => errors.push((
                child(path, "parser"),
                e.to_string().trim_start_matches("parser ").to_string(),
            )),
        }
    }
    match f.get("auth") {
        None | Some(Value::Null) => {}
        Some(Value::String(token)) => o.auth = Some(BearerAuth::new(token.clone())),
        Some(Value::Object(a)) => {
            let kind = a.get("type").and_then(Value::as_str).unwrap_or("bearer");
            if !kind.eq_ignore_ascii_case("bearer") {
                errors.push((
                    child(path, "auth.type"),
                    format!("must be bearer, got {kind:?}"),
                ));
            }
            if let Some(unknown) = a
                .keys()
                .find(|k| !["type", "token", "header", "scheme", "realm"].contains(&k.as_str()))
            {
                errors.push((
                    child(path, &format!("auth.{unknown}")),
                    "unknown field; expected type, token, header, scheme, realm".into(),
                ));
            }
            let mut auth =
                BearerAuth::new(a.get("token").and_then(Value::as_str).unwrap_or_default());
            if let Some(h) = a.get("header").and_then(Value::as_str) {
                auth.header = h.to_string();
            }
            if let Some(s) = a.get("scheme").and_then(Value::as_str) {
                auth.scheme = s.to_string();
            }
            if let Some(r) = a.get("realm").and_then(Value::as_str) {
                auth.realm = r.to_string();
            }
            o.auth = Some(auth);
        }
        Some(other) => errors.push((
            child(path, "auth"),
            format!(
                "expected a token string or a mapping, got {}",
                crate::config::spec::type_name(other)
            ),
        )),
    }
    if let Some(r) = f.get("response") {
        match r {
            Value::Object(m) => {
                let mut response = WebhookResponse::default();
                if let Some(unknown) = m
                    .keys()
                    .find(|k| !["status_code", "body", "headers"].contains(&k.as_str()))
                {
                    errors.push((
                        child(path, &format!("response.{unknown}")),
                        "unknown field; expected status_code, body, headers".into(),
                    ));
                }
                if let Some(code) = m.get("status_code") {
                    match code.as_u64().and_then(|c| u16::try_from(c).ok()) {
                        Some(c) => response.status_code = c,
                        None => errors.push((
                            child(path, "response.status_code"),
                            format!("must be an HTTP status, got {code}"),
                        )),
                    }
                }
                if let Some(body) = m.get("body") {
                    response.body = body.clone();
                }
                if let Some(Value::Object(h)) = m.get("headers") {
                    response.headers = h
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect();
                }
                o.response = response;
            }
            other => errors.push((
                child(path, "response"),
                format!(
                    "expected a mapping, got {}",
                    crate::config::spec::type_name(other)
                ),
            )),
        }
    }
    let size = |k: &str| {
        f.get(k)
            .and_then(Value::as_u64)
            .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
    };
    if let Some(v) = size("max_body_bytes") {
        o.max_body_bytes = v;
    }
    if let Some(v) = size("queue_maxsize") {
        o.queue_maxsize = v;
    }
    if let Some(v) = size("batch_size") {
        o.batch_size = v;
    }
    if let Some(v) = f.get("read_timeout_s").and_then(Value::as_f64) {
        o.read_timeout_s = v;
    }
    if let Some(v) = f.get("poll_interval_s").and_then(Value::as_f64) {
        o.poll_interval_s = v;
    }
    if errors.is_empty()
        && let Err(e) = o.validate(&format!("{path}."))
    {
        let text = e.to_string();
        let (field, message) = text.split_once(' ').unwrap_or((path, text.as_str()));
        errors.push((field.to_string(), message.to_string()));
    }
    if errors.is_empty() {
        Ok(o)
    } else {
        Err(errors)
    }
}

fn validate_webhook(f: &Map<String, Value>, path: &str, c: &mut Checker<'_>) {
    c.string(f, "path", path);
    for k in ["max_body_bytes", "queue_maxsize", "batch_size"] {
        c.opt_integer(f, k, path, 1);
    }
    for k in ["read_timeout_s", "poll_interval_s"] {
        c.opt_number(f, k, path, false);
    }
    let resource = path.rsplit('.').next().unwrap_or(path);
    if let Err(errors) = webhook_options(f, resource, path) {
        for (p, m) in errors {
            c.problem(&p, m);
        }
    }
}

fn build_webhook(spec: &ResourceSpec, ctx: &mut BuildContext<'_>) -> Result<Built, String> {
    let options = webhook_options(&spec.fields, &spec.name, &spec.path).map_err(|errors| {
        errors
            .into_iter()
            .map(|(p, m)| format!("{p} {m}"))
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let servers = ctx.shared::<onestep_http::webhook::WebhookServers>();
    let source = servers.source(options).map_err(|e| e.to_string())?;
    Ok(Built::Source(Arc::new(source)))
}

//! The log subscriber `onestep run` installs: text lines, or with `--log-format json` one JSON
//! object per line in the reference's shape (`onestep.jsonlog.JsonLogFormatter`), so a log
//! pipeline built for the Python worker parses this one unchanged:
//!
//! ```json
//! {"ts": "2026-12-02T20:37:50.123456+00:00", "level": "INFO", "logger": "onestep.events",
//!  "message": "task succeeded", "event_kind": "succeeded", "app_name": "w", "task_name": "t",
//!  "source_name": "jobs", "attempts": 0, "duration_s": 0.01, "emitted_at": "…",
//!  "failure_kind": null, "failure_exception_type": null, "failure_message": null,
//!  "task_event_meta": {"onestep.execution": {…}}, "extra": {"attempt": 1, "execution_id": "…"}}
//! ```
//!
//! `ts` is the task event's own time when there is one; `logger` is the `tracing` target with
//! `::` as `.` (a Python handler's `logger` as it named it); task-event fields are at the top
//! level, every other field under `extra`.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry, layer::SubscriberExt, util::SubscriberInitExt};

/// The fields the reference's `StructuredEventLogger` attaches and its formatter promotes.
const TASK_EVENT_FIELDS: [&str; 11] = [
    "event_kind",
    "app_name",
    "task_name",
    "source_name",
    "attempts",
    "duration_s",
    "emitted_at",
    "failure_kind",
    "failure_exception_type",
    "failure_message",
    "task_event_meta",
];

/// Installs the subscriber on stdout: `format` is `text` or `json`; `level` a reference level
/// name (`warning` and `critical` included). `RUST_LOG` wins when set.
pub fn init(level: &str, format: &str) {
    let _ = install(level, format, None);
}

/// [`init`], plus the OpenTelemetry trace export when the environment asks for one (feature
/// `otel`; see the `telemetry` module), with `service` as the default `service.name`. `Err`
/// says which variable is wrong; nothing is installed then.
pub fn init_with_telemetry(level: &str, format: &str, service: &str) -> Result<Telemetry, String> {
    install(level, format, Some(service))
}

/// What [`init_with_telemetry`] started; [`Telemetry::shutdown`] flushes it.
#[cfg(feature = "otel")]
pub use crate::telemetry::Telemetry;

/// Without the `otel` feature nothing is exported, and there is nothing to flush.
#[cfg(not(feature = "otel"))]
#[derive(Debug, Default)]
pub struct Telemetry {
    _nothing: (),
}

#[cfg(not(feature = "otel"))]
impl Telemetry {
    /// Nothing to flush.
    pub async fn shutdown(self) {}
}

type Layers = Vec<Box<dyn Layer<Registry> + Send + Sync>>;

fn install(level: &str, format: &str, service: Option<&str>) -> Result<Telemetry, String> {
    let level = match level {
        "warning" => "warn",
        "critical" => "error",
        other => other,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},sqlx=warn")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_ansi(ansi);
    let fmt = if format == "json" {
        fmt.with_ansi(false)
            .event_format(ReferenceJson)
            .with_filter(filter)
            .boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    let mut layers: Layers = vec![fmt];
    let telemetry = match service {
        Some(service) => telemetry(&mut layers, service)?,
        None => Telemetry::default(),
    };
    let _ = tracing_subscriber::registry().with(layers).try_init();
    Ok(telemetry)
}

#[cfg(feature = "otel")]
use crate::telemetry::install as telemetry;

#[cfg(not(feature = "otel"))]
fn telemetry(_layers: &mut Layers, _service: &str) -> Result<Telemetry, String> {
    Ok(Telemetry::default())
}

/// Formats an event as the reference's `JsonLogFormatter` formats a log record.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceJson;

impl<S, N> FormatEvent<S, N> for ReferenceJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = reference_line(
            *event.metadata().level(),
            event.metadata().target(),
            fields.0,
        );
        writeln!(writer, "{line}")
    }
}

/// The JSON object for one event with `fields`.
fn reference_line(level: Level, target: &str, mut fields: Map<String, Value>) -> Value {
    let message = fields
        .remove("message")
        .unwrap_or(Value::String(String::new()));
    let logger = match fields.remove("logger") {
        Some(Value::String(name)) if target == "python" => name,
        Some(other) => {
            fields.insert("logger".into(), other);
            target.replace("::", ".")
        }
        None => target.replace("::", "."),
    };
    let ts = match fields.get("emitted_at") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => now_isoformat(),
    };
    let mut line = Map::new();
    line.insert("ts".into(), Value::String(ts));
    line.insert("level".into(), Value::String(level_name(level).into()));
    line.insert("logger".into(), Value::String(logger));
    line.insert("message".into(), message);
    let is_task_event = target == "onestep.events";
    for name in TASK_EVENT_FIELDS {
        match fields.remove(name) {
            Some(Value::String(meta)) if name == "task_event_meta" => {
                let parsed = serde_json::from_str(&meta).unwrap_or(Value::String(meta));
                line.insert(name.into(), parsed);
            }
            Some(value) => {
                line.insert(name.into(), value);
            }
            None if is_task_event => {
                line.insert(name.into(), Value::Null);
            }
            None => {}
        }
    }
    if let Some(exc) = fields.remove("exc_info") {
        line.insert("exc_info".into(), exc);
    }
    if !fields.is_empty() {
        line.insert("extra".into(), Value::Object(fields));
    }
    Value::Object(line)
}

/// Python's `logging` level names.
fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

/// Now, as Python's `datetime.now(timezone.utc).isoformat()` writes it.
fn now_isoformat() -> String {
    time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]+00:00"
        ))
        .unwrap_or_default()
}

/// An event's fields as JSON values.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().into(), Value::String(value.into()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::Bool(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        let number = serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
        self.0.insert(field.name().into(), number);
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::String(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_event_has_the_reference_shape_with_every_promoted_field() {
        let fields = json!({
            "message": "task succeeded",
            "event_kind": "succeeded",
            "app_name": "w",
            "task_name": "t",
            "attempts": 0,
            "emitted_at": "2026-12-02T20:37:50.123456+00:00",
            "task_event_meta": "{\"onestep.execution\":{\"id\":\"x\"}}",
            "attempt": 1,
        });
        let Value::Object(fields) = fields else {
            unreachable!()
        };
        let line = reference_line(Level::INFO, "onestep.events", fields);
        assert_eq!(
            line,
            json!({
                "ts": "2026-12-02T20:37:50.123456+00:00",
                "level": "INFO",
                "logger": "onestep.events",
                "message": "task succeeded",
                "event_kind": "succeeded",
                "app_name": "w",
                "task_name": "t",
                "source_name": null,
                "attempts": 0,
                "duration_s": null,
                "emitted_at": "2026-12-02T20:37:50.123456+00:00",
                "failure_kind": null,
                "failure_exception_type": null,
                "failure_message": null,
                "task_event_meta": {"onestep.execution": {"id": "x"}},
                "extra": {"attempt": 1},
            })
        );
        let keys: Vec<&String> = line.as_object().unwrap().keys().collect();
        assert_eq!(keys[..4], ["ts", "level", "logger", "message"]);
    }

    #[test]
    fn other_logs_keep_their_fields_under_extra_and_a_python_logger_its_name() {
        let Value::Object(fields) = json!({"message": "hello", "logger": "app.handlers", "n": 3})
        else {
            unreachable!()
        };
        let line = reference_line(Level::WARN, "python", fields);
        assert_eq!(line["logger"], "app.handlers");
        assert_eq!(line["level"], "WARNING");
        assert_eq!(line["extra"], json!({"n": 3}));
        assert!(line.get("event_kind").is_none());
        let Value::Object(fields) = json!({"message": "m"}) else {
            unreachable!()
        };
        let line = reference_line(Level::TRACE, "onestep_core::runtime::runner", fields);
        assert_eq!(line["logger"], "onestep_core.runtime.runner");
        assert_eq!(line["level"], "DEBUG");
        assert!(line.get("extra").is_none());
    }
}

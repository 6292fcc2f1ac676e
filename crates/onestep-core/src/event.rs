//! Task events: what happened to each delivery, for subscribers, logs and metrics.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::failure::FailureInfo;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEventKind {
    /// The runner fetched the delivery.
    Fetched,
    /// The executor started the delivery.
    Started,
    /// The attempt succeeded and the delivery was acknowledged.
    Succeeded,
    /// The attempt failed and the delivery was scheduled again.
    Retried,
    /// The attempt failed for good.
    Failed,
    /// The failed delivery was published to the dead-letter sinks.
    DeadLettered,
    /// The attempt was cancelled.
    Cancelled,
}

impl TaskEventKind {
    /// The snake_case name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fetched => "fetched",
            Self::Started => "started",
            Self::Succeeded => "succeeded",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::DeadLettered => "dead_lettered",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event in a delivery's life.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskEvent {
    /// What happened.
    pub kind: TaskEventKind,
    /// The app's name.
    pub app: String,
    /// The task's name.
    pub task: String,
    /// The source's name, when the task has one.
    pub source: Option<String>,
    /// The number of the attempt the event is about, from 1: the envelope's previous attempts
    /// plus one. For a tracked execution it is the execution's `attempts` once this attempt
    /// started, the number the HTTP API and `onestep executions` show.
    pub attempt: u32,
    /// When the event was emitted (UTC).
    #[serde(with = "time::serde::rfc3339")]
    pub emitted_at: OffsetDateTime,
    /// Time since the delivery started, for outcome events.
    pub duration: Option<Duration>,
    /// The failure, for retried, failed, dead-lettered and cancelled events.
    pub failure: Option<FailureInfo>,
    /// A copy of the envelope's metadata (tracked executions carry `onestep.execution`).
    pub meta: Map<String, Value>,
}

/// A subscriber called synchronously for every event; keep it fast.
pub type EventHandler = Arc<dyn Fn(&TaskEvent) + Send + Sync>;

/// Where a task's events go: the structured log (when it is on) and the app's subscribers.
#[derive(Clone)]
pub(crate) struct EventRoute {
    /// Whether events are logged ([`log`]) before the subscribers get them.
    pub(crate) log: bool,
    /// The app's [`on_event`](crate::AppBuilder::on_event) subscribers.
    pub(crate) handlers: Arc<[EventHandler]>,
}

impl EventRoute {
    /// Builds an event of `kind` with `build`, logs it when logging is on and its level is
    /// enabled, then calls the subscribers. Building an event copies the envelope's metadata
    /// and logging one formats it, so an event nobody takes (no subscriber, and a log level
    /// that drops it) is not built at all.
    pub(crate) fn emit(&self, kind: TaskEventKind, build: impl FnOnce() -> TaskEvent) {
        let logged = self.log && log_enabled(kind);
        if !logged && self.handlers.is_empty() {
            return;
        }
        let event = build();
        if logged {
            log(&event);
        }
        dispatch(&self.handlers, &event);
    }
}

/// Whether [`log`] would write an event of `kind` (its level is enabled for `onestep.events`).
fn log_enabled(kind: TaskEventKind) -> bool {
    use tracing::Level;
    match kind {
        TaskEventKind::Fetched | TaskEventKind::Started => {
            tracing::enabled!(target: "onestep.events", Level::DEBUG)
        }
        TaskEventKind::Succeeded => tracing::enabled!(target: "onestep.events", Level::INFO),
        TaskEventKind::Retried | TaskEventKind::Cancelled => {
            tracing::enabled!(target: "onestep.events", Level::WARN)
        }
        TaskEventKind::Failed | TaskEventKind::DeadLettered => {
            tracing::enabled!(target: "onestep.events", Level::ERROR)
        }
    }
}

/// Delivers an event to subscribers and the structured log. A panicking subscriber is logged and
/// does not affect the task.
pub(crate) fn dispatch(handlers: &[EventHandler], event: &TaskEvent) {
    for handler in handlers {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(event)));
        if outcome.is_err() {
            tracing::error!(task = %event.task, event_kind = %event.kind, "task event subscriber panicked");
        }
    }
}

/// Logs `event` as the reference's `StructuredEventLogger` does: target `onestep.events`, message
/// `task <kind>`, its fields (`attempts` counts previous attempts, as the envelope does;
/// `task_event_meta` is the metadata as JSON text), plus `attempt` and `execution_id`.
pub(crate) fn log(event: &TaskEvent) {
    let duration_s = event.duration.map(|d| d.as_secs_f64());
    let (failure_kind, failure_type, failure_message) = match &event.failure {
        Some(f) => (
            Some(f.kind.as_str()),
            Some(f.exception_type.as_str()),
            Some(f.message.as_str()),
        ),
        None => (None, None, None),
    };
    // A tracked execution's id, so that a failure's message (which the execution's stored
    // error does not keep) can be found by it.
    let execution_id = event
        .meta
        .get("onestep.execution")
        .and_then(|execution| execution.get("id"))
        .and_then(Value::as_str);
    // As Python's `datetime.isoformat()` writes an aware UTC time.
    let emitted_at = event
        .emitted_at
        .to_offset(time::UtcOffset::UTC)
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]+00:00"
        ))
        .unwrap_or_default();
    let meta = Value::Object(event.meta.clone()).to_string();
    let attempts = event.attempt.saturating_sub(1);
    macro_rules! emit {
        ($level:ident) => {
            tracing::$level!(
                target: "onestep.events",
                event_kind = event.kind.as_str(),
                app_name = %event.app,
                task_name = %event.task,
                source_name = event.source.as_deref(),
                attempts,
                attempt = event.attempt,
                execution_id,
                duration_s,
                emitted_at = %emitted_at,
                failure_kind,
                failure_exception_type = failure_type,
                failure_message,
                task_event_meta = %meta,
                "task {}",
                event.kind
            )
        };
    }
    match event.kind {
        TaskEventKind::Fetched | TaskEventKind::Started => emit!(debug),
        TaskEventKind::Succeeded => emit!(info),
        TaskEventKind::Retried | TaskEventKind::Cancelled => emit!(warn),
        TaskEventKind::Failed | TaskEventKind::DeadLettered => emit!(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn route(log: bool, handlers: usize) -> EventRoute {
        let handler: EventHandler = Arc::new(|_: &TaskEvent| {});
        EventRoute {
            log,
            handlers: vec![handler; handlers].into(),
        }
    }

    /// Whether `route` builds an event of `kind`.
    fn builds(route: &EventRoute, kind: TaskEventKind) -> bool {
        let mut built = false;
        route.emit(kind, || {
            built = true;
            TaskEvent {
                kind,
                app: "a".into(),
                task: "t".into(),
                source: None,
                attempt: 1,
                emitted_at: OffsetDateTime::UNIX_EPOCH,
                duration: None,
                failure: None,
                meta: Map::new(),
            }
        });
        built
    }

    #[test]
    fn an_event_is_built_only_for_a_subscriber_or_an_enabled_log_level() {
        let at_info = tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::INFO)
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink));
        tracing::subscriber::with_default(at_info, || {
            let logged = route(true, 0);
            assert!(!builds(&logged, TaskEventKind::Started), "DEBUG is off");
            assert!(!builds(&logged, TaskEventKind::Fetched), "DEBUG is off");
            assert!(builds(&logged, TaskEventKind::Succeeded));
            assert!(builds(&logged, TaskEventKind::Failed));
            assert!(
                !builds(&route(false, 0), TaskEventKind::Failed),
                "logging is off"
            );
            assert!(
                builds(&route(false, 1), TaskEventKind::Started),
                "a subscriber takes all"
            );
        });
    }
}

//! The machinery that runs tasks: one [`runner`] per task fetching deliveries, one [`executor`]
//! run per delivery.

pub(crate) mod control;
pub(crate) mod executor;
pub(crate) mod runner;

use std::sync::Arc;

use serde_json::{Map, Value};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::envelope::Envelope;
use crate::event::{EventRoute, TaskEvent, TaskEventKind};
use crate::failure::FailureInfo;
use crate::source::Sink;
use crate::state::{ScopedState, StateStore};
use crate::task::{ErasedHandler, Task, TaskContext};

/// Everything a runner and its executors need about one task, shared.
pub(crate) struct TaskRuntime {
    pub(crate) app_name: Arc<str>,
    pub(crate) task: Task,
    pub(crate) task_name: Arc<str>,
    pub(crate) handler: ErasedHandler,
    pub(crate) config: Arc<Value>,
    pub(crate) task_config: Arc<Value>,
    /// The task's view of the app's state store (`<app>:<task>`), cloned into each context.
    pub(crate) state: ScopedState,
    pub(crate) sinks: Arc<[Arc<dyn Sink>]>,
    pub(crate) events: EventRoute,
    pub(crate) capture: Option<Arc<crate::capture::FailureCaptureConfig>>,
    pub(crate) metrics: Option<Arc<crate::metrics::PrometheusExporter>>,
}

impl TaskRuntime {
    pub(crate) fn new(
        app_name: Arc<str>,
        task: Task,
        config: Arc<Value>,
        state: Arc<dyn StateStore>,
        events: EventRoute,
        capture: Option<Arc<crate::capture::FailureCaptureConfig>>,
        metrics: Option<Arc<crate::metrics::PrometheusExporter>>,
    ) -> Self {
        let handler = task.handler.clone().unwrap_or_else(Task::passthrough);
        let sinks: Vec<Arc<dyn Sink>> = task.emit.iter().flat_map(|e| e.sinks()).collect();
        let state = ScopedState::new(state, format!("{app_name}:{}", task.name));
        Self {
            state,
            task_name: Arc::from(task.name.as_str()),
            task_config: Arc::new(task.config.clone()),
            app_name,
            handler,
            config,
            sinks: sinks.into(),
            events,
            capture,
            metrics,
            task,
        }
    }

    pub(crate) fn source_name(&self) -> Option<String> {
        self.task.source.as_ref().map(|s| s.name().to_string())
    }

    pub(crate) fn context(
        &self,
        envelope: Arc<Envelope>,
        cancellation: CancellationToken,
        execution: Option<crate::execution::ExecutionInfo>,
    ) -> TaskContext {
        TaskContext {
            app_name: self.app_name.clone(),
            task_name: self.task_name.clone(),
            config: self.config.clone(),
            task_config: self.task_config.clone(),
            envelope,
            cancellation,
            state: self.state.clone(),
            sinks: self.sinks.clone(),
            execution,
            metrics: self.metrics.clone(),
        }
    }

    pub(crate) fn emit(
        &self,
        kind: TaskEventKind,
        envelope: &Envelope,
        duration: Option<std::time::Duration>,
        failure: Option<&FailureInfo>,
    ) {
        self.events.emit(kind, || TaskEvent {
            kind,
            app: self.app_name.to_string(),
            task: self.task_name.to_string(),
            source: self.source_name(),
            attempt: envelope.attempts.saturating_add(1),
            emitted_at: OffsetDateTime::now_utc(),
            duration,
            failure: failure.cloned(),
            meta: envelope.meta.clone(),
        });
    }

    /// The dead-letter envelope for a failed delivery, in the reference's shape.
    pub(crate) fn dead_letter_envelope(
        &self,
        envelope: &Envelope,
        failure: &FailureInfo,
    ) -> Envelope {
        let mut failure_body = Map::new();
        failure_body.insert("kind".into(), Value::from(failure.kind.as_str()));
        failure_body.insert(
            "exception_type".into(),
            Value::from(failure.exception_type.clone()),
        );
        failure_body.insert("message".into(), Value::from(failure.message.clone()));
        if let Some(traceback) = &failure.traceback {
            failure_body.insert("traceback".into(), Value::from(traceback.clone()));
        }
        let mut body = Map::new();
        body.insert("payload".into(), envelope.body.clone());
        body.insert("failure".into(), Value::Object(failure_body));
        let mut meta = Map::new();
        meta.insert("app".into(), Value::from(self.app_name.to_string()));
        meta.insert("task".into(), Value::from(self.task_name.to_string()));
        meta.insert(
            "source".into(),
            self.source_name().map(Value::from).unwrap_or(Value::Null),
        );
        meta.insert("original_meta".into(), Value::Object(envelope.meta.clone()));
        meta.insert("original_attempts".into(), Value::from(envelope.attempts));
        Envelope::new(Value::Object(body)).with_meta(meta)
    }
}

//! Runs one delivery of one task through the real executor: a one-shot source hands it over, a
//! delivery records the action the runtime takes instead of taking it, and every sink is
//! wrapped so what the attempt sends is recorded (and sent only with `--send`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use onestep_core::execution::codec::encode_value;
use onestep_core::{
    Delivery, Envelope, FailureInfo, Resource, Sink, Source, TaskEvent, TaskEventKind,
};
use onestep_python::PythonConfig;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::config::AppSpec;
use crate::config::build::{BuildOptions, Diagnostic, SinkUse, build_app};
use crate::registry::Registry;

/// The reference's warning, printed with every report.
pub const SIDE_EFFECT_WARNING: &str = "handler and task hooks may perform external side effects";

/// What to run.
pub struct Request<'a> {
    /// `run` or `replay`.
    pub operation: &'static str,
    /// The task's name.
    pub task: &'a str,
    /// The delivery's envelope.
    pub envelope: Envelope,
    /// Whether sinks are really sent to.
    pub send: bool,
    /// How long the attempt may take.
    pub timeout: Duration,
}

/// The outcome, as the reference's `DiagnosticReport` holds it.
pub struct Report {
    pub operation: &'static str,
    pub app: String,
    pub task: String,
    pub send: bool,
    pub completion: String,
    pub attempts: u32,
    pub selected_sinks: Vec<String>,
    pub delivery_action: Option<&'static str>,
    pub dead_letter_attempted: bool,
    pub dead_letter_published: Option<bool>,
    pub events: Vec<TaskEvent>,
    pub duration_s: f64,
    pub outputs: Vec<Value>,
    pub failure: Option<FailureInfo>,
    pub failure_stage: Option<String>,
    pub real_sends: usize,
}

/// What the recording delivery and sinks saw.
#[derive(Default)]
struct Observed {
    action: Mutex<Option<&'static str>>,
    settled: Notify,
    outputs: Mutex<Vec<Value>>,
    real_sends: AtomicUsize,
    dead_letter_failed: AtomicBool,
    events: Mutex<Vec<TaskEvent>>,
}

/// Runs `request` against the app `spec` describes.
pub async fn diagnose(
    spec: &AppSpec,
    registry: &Registry,
    python: &PythonConfig,
    request: Request<'_>,
) -> Result<Report, String> {
    let observed = Arc::new(Observed::default());
    let envelope = request.envelope.clone();
    let (o_source, o_sinks, o_events) = (observed.clone(), observed.clone(), observed.clone());
    let send = request.send;
    let diagnostic = Diagnostic {
        task: request.task.to_owned(),
        source: Arc::new(move |name: Option<String>| {
            Arc::new(OneShot {
                name: name.unwrap_or_else(|| "diagnostic".into()),
                envelope: Mutex::new(Some(envelope.clone())),
                observed: o_source.clone(),
            }) as Arc<dyn Source>
        }),
        wrap: Arc::new(move |inner: Arc<dyn Sink>, used: SinkUse| {
            Arc::new(Recording {
                inner,
                used,
                send,
                opened: tokio::sync::OnceCell::new(),
                observed: o_sinks.clone(),
            }) as Arc<dyn Sink>
        }),
        observe: Arc::new(move |event: &TaskEvent| {
            if event.kind != TaskEventKind::Fetched
                && let Ok(mut events) = o_events.events.lock()
            {
                events.push(event.clone());
            }
        }),
    };
    let options = BuildOptions {
        python: python.clone(),
        log_task_events: false,
        diagnostic: Some(diagnostic),
        metrics_addr: None,
    };
    let app = build_app(spec, registry, &options)?;
    let handle = app.handle();
    let started = Instant::now();
    let worker = tokio::spawn(async move { app.serve().await });
    let settled = tokio::time::timeout(request.timeout, observed.settled.notified()).await;
    let duration_s = started.elapsed().as_secs_f64();
    handle.request_shutdown();
    let served = worker.await.map_err(|e| e.to_string())?;
    if let Err(e) = served {
        return Err(format!("the app failed: {e}"));
    }
    let events = observed
        .events
        .lock()
        .map(|e| e.clone())
        .unwrap_or_default();
    let last_failure = events.iter().rev().find_map(|e| e.failure.clone());
    let completion = match () {
        () if settled.is_err() => "timed_out",
        () if events.iter().any(|e| e.kind == TaskEventKind::Succeeded) => "succeeded",
        () if events.iter().any(|e| e.kind == TaskEventKind::Cancelled) => "cancelled",
        () => "failed",
    };
    let outputs = observed
        .outputs
        .lock()
        .map(|o| o.clone())
        .unwrap_or_default();
    let dead_letter_attempted = outputs.iter().any(|o| o["kind"] == "dead_letter");
    let dead_lettered = events.iter().any(|e| e.kind == TaskEventKind::DeadLettered);
    let action = *observed.action.lock().map_err(|e| e.to_string())?;
    Ok(Report {
        operation: request.operation,
        app: spec.name.clone(),
        task: request.task.to_owned(),
        send: request.send,
        completion: completion.to_owned(),
        attempts: request.envelope.attempts,
        selected_sinks: outputs
            .iter()
            .filter(|o| o["kind"] == "emit")
            .filter_map(|o| o["sink"].as_str().map(str::to_owned))
            .collect(),
        delivery_action: if dead_lettered {
            Some("would_dead_letter")
        } else {
            action
        },
        dead_letter_attempted,
        dead_letter_published: dead_letter_attempted.then(|| {
            request.send && dead_lettered && !observed.dead_letter_failed.load(Ordering::Relaxed)
        }),
        failure_stage: last_failure.as_ref().map(|f| f.stage.as_str().to_owned()),
        failure: last_failure,
        events,
        duration_s,
        outputs,
        real_sends: observed.real_sends.load(Ordering::Relaxed),
    })
}

impl Report {
    /// `dry-run` or `send`.
    pub fn mode(&self) -> &'static str {
        if self.send { "send" } else { "dry-run" }
    }

    /// Whether a sink was really sent to.
    pub fn side_effect_outcome(&self) -> &'static str {
        if self.real_sends > 0 {
            "completed"
        } else {
            "not_attempted"
        }
    }

    /// The report as the reference's `DiagnosticReport.to_dict()`.
    pub fn to_json(&self) -> Value {
        let failure = self.failure.as_ref().map(|f| {
            let mut public = Map::new();
            public.insert("failure_kind".into(), f.kind.as_str().into());
            public.insert("exception_type".into(), f.exception_type.clone().into());
            if let Some(c) = &f.connector {
                public.insert("backend".into(), c.backend.clone().into());
                public.insert("operation".into(), c.operation.clone().into());
                public.insert("connector_kind".into(), c.kind.clone().into());
            }
            if f.stage.as_str() == "sink" {
                public.insert("sinks_succeeded".into(), f.sinks_succeeded.join(",").into());
                public.insert("sinks_remaining".into(), f.sinks_remaining.join(",").into());
            }
            Value::Object(public)
        });
        json!({
            "schema": "onestep/diagnostic-result",
            "version": 1,
            "operation": self.operation,
            "app": self.app,
            "task": self.task,
            "mode": self.mode(),
            "completion": self.completion,
            "attempts": self.attempts,
            "selected_sinks": self.selected_sinks,
            "delivery_action": self.delivery_action,
            "delivery_action_basis": "predicted",
            "dead_letter": {
                "attempted": self.dead_letter_attempted,
                "published": self.dead_letter_published,
            },
            "events": self.events.iter().map(event_json).collect::<Vec<_>>(),
            "duration_s": self.duration_s,
            "outputs": self.outputs,
            "warning": SIDE_EFFECT_WARNING,
            "failure": failure,
            "failure_stage": self.failure_stage,
            "cleanup": "complete",
            "side_effect_outcome": self.side_effect_outcome(),
            "last_checkpoint": null,
        })
    }
}

/// An event as the reference's diagnostic report writes it.
fn event_json(event: &TaskEvent) -> Value {
    let emitted_at = event
        .emitted_at
        .to_offset(time::UtcOffset::UTC)
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]+00:00"
        ))
        .unwrap_or_default();
    json!({
        "kind": event.kind.as_str(),
        "app": event.app,
        "task": event.task,
        "source": event.source,
        "attempts": event.attempt.saturating_sub(1),
        "emitted_at": emitted_at,
        "duration_s": event.duration.map(|d| d.as_secs_f64()),
        "failure": event.failure.as_ref().map(|f| json!({
            "kind": f.kind.as_str(),
            "exception_type": f.exception_type,
        })),
        "meta": encode_value(&Value::Object(event.meta.clone())).unwrap_or(Value::Null),
    })
}

/// The task's source for the diagnostic: the one delivery, then nothing.
struct OneShot {
    name: String,
    envelope: Mutex<Option<Envelope>>,
    observed: Arc<Observed>,
}

#[async_trait]
impl Resource for OneShot {
    fn name(&self) -> &str {
        &self.name
    }
}

#[async_trait]
impl Source for OneShot {
    async fn fetch(&self, _limit: usize) -> onestep_core::Result<Vec<Box<dyn Delivery>>> {
        let next = self.envelope.lock().ok().and_then(|mut e| e.take());
        match next {
            Some(envelope) => Ok(vec![Box::new(Recorder {
                envelope,
                observed: self.observed.clone(),
            })]),
            None => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(Vec::new())
            }
        }
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(50)
    }
}

/// The delivery: records the action the runtime takes and takes none.
struct Recorder {
    envelope: Envelope,
    observed: Arc<Observed>,
}

impl Recorder {
    fn record(&self, action: &'static str) {
        if let Ok(mut slot) = self.observed.action.lock() {
            *slot = Some(action);
        }
        self.observed.settled.notify_one();
    }
}

#[async_trait]
impl Delivery for Recorder {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> onestep_core::Result<()> {
        self.record("would_ack");
        Ok(())
    }

    async fn retry(&mut self, _delay: Option<Duration>) -> onestep_core::Result<()> {
        self.record("would_retry");
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> onestep_core::Result<()> {
        self.record("would_fail");
        Ok(())
    }
}

/// A sink that records what it is sent, and sends it on with `--send` (opening the real sink
/// on first use, as the reference does).
struct Recording {
    inner: Arc<dyn Sink>,
    used: SinkUse,
    send: bool,
    opened: tokio::sync::OnceCell<()>,
    observed: Arc<Observed>,
}

#[async_trait]
impl Resource for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn close(&self) -> onestep_core::Result<()> {
        if self.opened.initialized() {
            self.inner.close().await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for Recording {
    async fn send(&self, envelope: Envelope) -> onestep_core::Result<()> {
        let kind = match self.used {
            SinkUse::Emit => "emit",
            SinkUse::DeadLetter => "dead_letter",
        };
        let mut body = envelope.body.clone();
        if self.used == SinkUse::DeadLetter
            && let Some(failure) = body.get_mut("failure").and_then(Value::as_object_mut)
        {
            failure.remove("message");
            failure.remove("traceback");
        }
        let output = json!({
            "sink": self.inner.name(),
            "kind": kind,
            "envelope": {
                "body": encode_value(&body).unwrap_or(Value::Null),
                "meta": encode_value(&Value::Object(envelope.meta.clone())).unwrap_or(Value::Null),
                "attempts": envelope.attempts,
            },
        });
        if let Ok(mut outputs) = self.observed.outputs.lock() {
            outputs.push(output);
        }
        if !self.send {
            return Ok(());
        }
        self.opened
            .get_or_try_init(|| async { self.inner.open().await })
            .await?;
        let sent = self.inner.send(envelope).await;
        match &sent {
            Ok(()) => {
                self.observed.real_sends.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) if self.used == SinkUse::DeadLetter => {
                self.observed
                    .dead_letter_failed
                    .store(true, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        sent
    }
}

//! Runs one delivery through the stages of a task and settles it.
//!
//! Stages, in order: `delivery_action` (start processing) → `before_hook` → `handler` (under the
//! task timeout) → `after_success_hook` → `route` → `transform` (every transform computed before
//! any send) → `result_validation` (tracked executions: the result must be storable before
//! anything is emitted) → `sink` (each binding, up to two attempts on retryable connector errors)
//! → `ack`. Everything up to the sinks races the attempt's cancellation; settling (ack or the
//! execution's completion) does not, so a completion is never dropped half-way.
//!
//! A failure goes to the failure path (on_failure hook, retry policy, dead letters); a
//! cancellation goes to the cancel path (retried; a tracked execution whose cancel was requested
//! ends cancelled).

use crate::capture::{CaptureError, CaptureMode, CaptureRecord, write_capture};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::TaskRuntime;
use crate::delivery::Delivery;
use crate::envelope::Envelope;
use crate::event::TaskEventKind;
use crate::execution::{
    ExecutionCompletion, ExecutionError, ExecutionErrorDetail, ExecutionStatus,
};
use crate::failure::{FailureInfo, FailureKind, Stage, TaskError};
use crate::retry::RetryAction;
use crate::task::{Emit, EmitBinding, TaskContext};

/// The stage currently running, readable after the processing future was dropped.
struct StageCell(AtomicU8);

const STAGES: [Stage; 9] = [
    Stage::DeliveryAction,
    Stage::BeforeHook,
    Stage::Handler,
    Stage::AfterSuccessHook,
    Stage::Route,
    Stage::Transform,
    Stage::ResultValidation,
    Stage::Sink,
    Stage::Ack,
];

impl StageCell {
    fn new() -> Self {
        Self(AtomicU8::new(0))
    }

    fn set(&self, stage: Stage) {
        let index = STAGES.iter().position(|s| *s == stage).unwrap_or(0);
        self.0.store(index as u8, Ordering::Relaxed);
    }

    fn get(&self) -> Stage {
        STAGES
            .get(self.0.load(Ordering::Relaxed) as usize)
            .copied()
            .unwrap_or(Stage::DeliveryAction)
    }
}

/// How an attempt ended.
enum Outcome {
    /// Everything before settling succeeded; the value is the handler's result.
    Ready(Value),
    Succeeded,
    Failed(FailureInfo),
    Cancelled(Stage),
}

/// Processes one delivery to the end. Never panics on user code: a panicking handler is a failure.
///
/// `slot` is the runner's concurrency slot, held until the delivery is settled; for a delivery
/// that [frees its slot before the ack](Delivery::frees_slot_before_ack) it is given back as
/// soon as the attempt succeeded (handler, hooks and sinks done), so the next delivery can start
/// while this one's completion is committed in a batch, and taken again if that completion fails
/// (its failure path runs hooks).
pub(crate) async fn execute(
    rt: Arc<TaskRuntime>,
    mut delivery: Box<dyn Delivery>,
    cancel: CancellationToken,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let execution = delivery.as_managed().map(|m| m.info());
    let span = delivery_span(&rt, delivery.envelope(), execution.as_ref());
    execute_in_span(rt, delivery, execution, cancel, slot)
        .instrument(span)
        .await;
}

/// The span one delivery runs in, named `onestep.delivery` (target `onestep::delivery`), with the
/// ids an operator looks a trace up by. It is a DEBUG span, so it costs nothing unless a
/// subscriber asks for it (the OpenTelemetry export of the `onestep` binary does, and
/// `RUST_LOG=debug`). The `otel.*` fields are read by `tracing-opentelemetry`: the span is
/// exported as a consumer span named `<task> process`, with an error status when the attempt
/// failed. `onestep.outcome` is `succeeded`, `failed` or `cancelled`.
fn delivery_span(
    rt: &TaskRuntime,
    envelope: &Envelope,
    execution: Option<&crate::execution::ExecutionInfo>,
) -> Span {
    let span = tracing::debug_span!(
        target: "onestep::delivery",
        "onestep.delivery",
        "otel.name" = %format_args!("{} process", rt.task_name),
        "otel.kind" = "consumer",
        "otel.status_code" = Empty,
        "otel.status_description" = Empty,
        "onestep.app" = %rt.app_name,
        "onestep.task" = %rt.task_name,
        "onestep.source" = Empty,
        "onestep.attempt" = execution.map_or(envelope.attempts + 1, |e| e.attempt()),
        "onestep.execution.id" = Empty,
        "onestep.attempt.id" = Empty,
        "onestep.outcome" = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(source) = rt.task.source.as_ref() {
        span.record("onestep.source", source.name());
    }
    if let Some(execution) = execution {
        span.record("onestep.execution.id", execution.id().to_string());
        span.record("onestep.attempt.id", execution.attempt_id().to_string());
    }
    span
}

/// Records how the attempt ended on the current delivery span.
fn record_outcome(outcome: &Outcome) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    match outcome {
        Outcome::Ready(_) | Outcome::Succeeded => {
            span.record("onestep.outcome", "succeeded");
        }
        Outcome::Failed(failure) => {
            span.record("onestep.outcome", "failed");
            span.record("otel.status_code", "ERROR");
            span.record(
                "otel.status_description",
                format!("{}: {}", failure.exception_type, failure.message),
            );
        }
        Outcome::Cancelled(_) => {
            span.record("onestep.outcome", "cancelled");
        }
    }
}

async fn execute_in_span(
    rt: Arc<TaskRuntime>,
    mut delivery: Box<dyn Delivery>,
    execution: Option<crate::execution::ExecutionInfo>,
    cancel: CancellationToken,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let started = Instant::now();
    let envelope = delivery.shared_envelope();
    let attempt = cancel.child_token();
    let ctx = rt.context(envelope.clone(), attempt.clone(), execution);
    let stage = StageCell::new();
    let managed_cancel = delivery.as_managed().map(|m| m.cancellation());

    let outcome = {
        let work = AssertUnwindSafe(process(&rt, delivery.as_mut(), &ctx, &stage)).catch_unwind();
        let managed = async {
            match &managed_cancel {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = attempt.cancelled() => Outcome::Cancelled(stage.get()),
            _ = managed => {
                attempt.cancel();
                Outcome::Cancelled(stage.get())
            }
            result = work => match result {
                Ok(outcome) => outcome,
                Err(panic) => Outcome::Failed(FailureInfo {
                    kind: FailureKind::Error,
                    exception_type: "Panic".to_string(),
                    message: panic_message(panic.as_ref()),
                    stage: stage.get(),
                    connector: None,
                    sinks_succeeded: Vec::new(),
                    sinks_remaining: Vec::new(),
                    traceback: None,
                }),
            },
        }
    };

    let mut slot = Some(slot);
    let mut freed_from = None;
    if matches!(outcome, Outcome::Ready(_)) && delivery.frees_slot_before_ack() {
        freed_from = slot.take().map(|permit| permit.semaphore().clone());
    }
    let outcome = match outcome {
        Outcome::Ready(result) => settle(&rt, delivery.as_mut(), result).await,
        other => other,
    };
    // The ack failed after the slot was given back: the failure path runs user code
    // (`on_failure`, dead-letter sinks), so it takes a slot again. A closed semaphore (the
    // runner is gone) has no slots to respect, and a shutdown that cancels in-flight work does
    // not wait for one: the failure is recorded at once.
    let _slot_again = match (&freed_from, &outcome) {
        (Some(semaphore), Outcome::Failed(_) | Outcome::Cancelled(_)) => {
            tokio::select! {
                permit = semaphore.clone().acquire_owned() => permit.ok(),
                _ = cancel.cancelled() => None,
            }
        }
        _ => None,
    };
    record_outcome(&outcome);
    match outcome {
        Outcome::Ready(_) | Outcome::Succeeded => rt.emit(
            TaskEventKind::Succeeded,
            &envelope,
            Some(started.elapsed()),
            None,
        ),
        Outcome::Failed(failure) => {
            handle_failure(&rt, delivery.as_mut(), &ctx, &envelope, failure, started).await
        }
        Outcome::Cancelled(at) => {
            handle_cancel(&rt, delivery.as_mut(), &envelope, at, started).await
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("handler panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("handler panicked: {s}")
    } else {
        "handler panicked".to_string()
    }
}

fn fail_at(stage: Stage, err: &TaskError) -> Outcome {
    Outcome::Failed(FailureInfo::from_error(FailureKind::Error, stage, err))
}

fn execution_failure(stage: Stage, err: &ExecutionError) -> Outcome {
    let kind = match err {
        // A result that cannot be stored (too large, a U+0000, nested too deep).
        ExecutionError::Encoding(_) => "ExecutionEncodingError",
        ExecutionError::InvalidArgument { field, .. } if field == "result" => {
            "ExecutionEncodingError"
        }
        ExecutionError::LeaseLost(_) => "ExecutionLeaseLost",
        _ => "ExecutionError",
    };
    fail_at(stage, &TaskError::new(kind, err.to_string()))
}

async fn process(
    rt: &TaskRuntime,
    delivery: &mut dyn Delivery,
    ctx: &TaskContext,
    stage: &StageCell,
) -> Outcome {
    let task = &rt.task;
    stage.set(Stage::DeliveryAction);
    if let Err(err) = delivery.start_processing().await {
        return fail_at(Stage::DeliveryAction, &TaskError::from(err));
    }
    rt.emit(TaskEventKind::Started, ctx.envelope(), None, None);
    // Each hook gets its own copy of the payload, cloned from the envelope where it is used (no
    // base copy kept for the whole attempt); the handler reads it from its context's envelope.
    let payload = &ctx.envelope().body;

    if let Some(before) = &task.hooks.before {
        stage.set(Stage::BeforeHook);
        if let Err(err) = before(ctx.clone(), payload.clone()).await {
            return fail_at(Stage::BeforeHook, &err);
        }
    }

    stage.set(Stage::Handler);
    let call = (rt.handler)(ctx.clone());
    let result = match task.timeout {
        Some(limit) => match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => return Outcome::Failed(FailureInfo::timeout(limit)),
        },
        None => call.await,
    };
    let result = match result {
        Ok(value) => value,
        Err(err) => return fail_at(Stage::Handler, &err),
    };

    if let Some(after) = &task.hooks.after_success {
        stage.set(Stage::AfterSuccessHook);
        if let Err(err) = after(ctx.clone(), payload.clone(), result.clone()).await {
            return fail_at(Stage::AfterSuccessHook, &err);
        }
    }

    let mut sends = Vec::new();
    if !result.is_null() && !task.emit.is_empty() {
        stage.set(Stage::Route);
        let bindings = match select_bindings(&task.emit, ctx, payload, &result).await {
            Ok(b) => b,
            Err(err) => return fail_at(Stage::Route, &err),
        };
        stage.set(Stage::Transform);
        for binding in bindings {
            let body = match &binding.transform {
                Some(transform) => {
                    match transform(ctx.clone(), payload.clone(), result.clone()).await {
                        Ok(body) => body,
                        Err(err) => return fail_at(Stage::Transform, &err),
                    }
                }
                None => result.clone(),
            };
            sends.push((binding, body));
        }
    }

    if let Some(managed) = delivery.as_managed() {
        stage.set(Stage::ResultValidation);
        if let Err(err) = managed.validate_execution_result(&result).await {
            return execution_failure(Stage::ResultValidation, &err);
        }
    }

    stage.set(Stage::Sink);
    let names: Vec<String> = sends
        .iter()
        .map(|(b, _)| b.sink.name().to_string())
        .collect();
    for (done, (binding, body)) in sends.into_iter().enumerate() {
        if let Err(err) = send_with_retry(binding, body, ctx).await {
            let mut failure = FailureInfo::from_error(FailureKind::Error, Stage::Sink, &err);
            failure.sinks_succeeded = names[..done].to_vec();
            failure.sinks_remaining = names[done..].to_vec();
            return Outcome::Failed(failure);
        }
    }
    stage.set(Stage::Ack);
    Outcome::Ready(result)
}

/// Acknowledges, or completes the execution with the handler's result. A success that lost to a
/// cancel request becomes a cancellation; a lost lease is logged and otherwise ignored.
async fn settle(rt: &TaskRuntime, delivery: &mut dyn Delivery, result: Value) -> Outcome {
    if let Some(managed) = delivery.as_managed() {
        return match managed
            .complete_execution(ExecutionCompletion::Succeeded { result })
            .await
        {
            Ok(ExecutionStatus::Cancelled) => Outcome::Cancelled(Stage::Ack),
            Ok(_) => Outcome::Succeeded,
            Err(err) if err.is_lease_lost() => {
                tracing::warn!(task = %rt.task_name, execution_id = %managed.execution_id(), "lease lost before the success was stored");
                Outcome::Succeeded
            }
            Err(err) => execution_failure(Stage::Ack, &err),
        };
    }
    match delivery.ack().await {
        Ok(()) => Outcome::Succeeded,
        Err(err) => fail_at(Stage::Ack, &TaskError::from(err)),
    }
}

async fn select_bindings<'a>(
    emit: &'a [Emit],
    ctx: &TaskContext,
    payload: &Value,
    result: &Value,
) -> Result<Vec<&'a EmitBinding>, TaskError> {
    let mut selected = Vec::new();
    for target in emit {
        match target {
            Emit::Binding(binding) => selected.push(binding),
            Emit::Route(route) => {
                let holds = (route.when)(ctx.clone(), payload.clone(), result.clone()).await?;
                let branch = if holds { &route.then } else { &route.otherwise };
                selected.extend(branch.iter());
            }
        }
    }
    Ok(selected)
}

/// Sends to one sink; a retryable connector error is tried once more after its back-off.
async fn send_with_retry(
    binding: &EmitBinding,
    body: Value,
    ctx: &TaskContext,
) -> Result<(), TaskError> {
    let envelope = Envelope::new(body);
    match binding.sink.send(envelope.clone()).await {
        Ok(()) => Ok(()),
        Err(err) => match err.as_connector() {
            Some(c) if c.is_retryable() && !ctx.cancellation().is_cancelled() => {
                tokio::time::sleep(c.backoff(Duration::from_millis(100))).await;
                binding.sink.send(envelope).await.map_err(TaskError::from)
            }
            _ => Err(TaskError::from(err)),
        },
    }
}

/// Retries a delivery after a failure: `delivery.retry`, or a retrying completion.
async fn retry_delivery(
    rt: &TaskRuntime,
    delivery: &mut dyn Delivery,
    delay: Option<Duration>,
    failure: &FailureInfo,
) {
    if let Some(managed) = delivery.as_managed() {
        let completion = ExecutionCompletion::Retrying {
            error: Some(ExecutionErrorDetail::from_failure(failure)),
            delay_s: delay.map(|d| d.as_secs_f64()),
        };
        log_completion(rt, managed.complete_execution(completion).await.map(|_| ()));
        return;
    }
    if let Err(err) = delivery.retry(delay).await {
        tracing::error!(task = %rt.task_name, error = %err, "could not schedule a retry");
    }
}

fn log_completion(rt: &TaskRuntime, outcome: Result<(), ExecutionError>) {
    match outcome {
        Ok(()) => {}
        Err(err) if err.is_lease_lost() => {
            tracing::warn!(task = %rt.task_name, "lease lost before the completion was stored; another worker owns it")
        }
        Err(err) => {
            tracing::error!(task = %rt.task_name, error = %err, "could not complete the execution")
        }
    }
}

async fn handle_cancel(
    rt: &TaskRuntime,
    delivery: &mut dyn Delivery,
    envelope: &Envelope,
    at: Stage,
    started: Instant,
) {
    let failure = FailureInfo::cancelled(at, "the attempt was cancelled");
    rt.emit(
        TaskEventKind::Cancelled,
        envelope,
        Some(started.elapsed()),
        Some(&failure),
    );
    if let Some(managed) = delivery.as_managed()
        && managed.cancel_requested()
    {
        let outcome = managed
            .complete_execution(ExecutionCompletion::Cancelled)
            .await
            .map(|_| ());
        log_completion(rt, outcome);
        capture_failure(rt, envelope, &failure, true).await;
        return;
    }
    retry_delivery(rt, delivery, None, &failure).await;
    rt.emit(
        TaskEventKind::Retried,
        envelope,
        Some(started.elapsed()),
        Some(&failure),
    );
    capture_failure(rt, envelope, &failure, false).await;
}

async fn handle_failure(
    rt: &TaskRuntime,
    delivery: &mut dyn Delivery,
    ctx: &TaskContext,
    envelope: &Envelope,
    failure: FailureInfo,
    started: Instant,
) {
    tracing::debug!(
        task = %rt.task_name,
        failure_kind = failure.kind.as_str(),
        stage = failure.stage.as_str(),
        exception_type = %failure.exception_type,
        attempt = envelope.attempts.saturating_add(1),
        "task attempt failed: {}",
        failure.message
    );
    if let Some(hook) = &rt.task.hooks.on_failure {
        let call = AssertUnwindSafe(hook(ctx.clone(), envelope.body.clone(), failure.clone()))
            .catch_unwind();
        if call.await.is_err() {
            tracing::error!(task = %rt.task_name, "on_failure hook panicked");
        }
    }
    match rt.task.retry.on_error(envelope, &failure) {
        RetryAction::Retry { delay } => {
            retry_delivery(rt, delivery, delay, &failure).await;
            rt.emit(
                TaskEventKind::Retried,
                envelope,
                Some(started.elapsed()),
                Some(&failure),
            );
            capture_failure(rt, envelope, &failure, false).await;
        }
        RetryAction::Fail => {
            if !rt.task.dead_letter.is_empty() {
                let letter = rt.dead_letter_envelope(envelope, &failure);
                for sink in &rt.task.dead_letter {
                    if let Err(err) = sink.send(letter.clone()).await {
                        tracing::error!(
                            task = %rt.task_name, sink = sink.name(), error = %err,
                            "dead-letter publish failed; retrying the original delivery"
                        );
                        retry_delivery(rt, delivery, None, &failure).await;
                        rt.emit(
                            TaskEventKind::Retried,
                            envelope,
                            Some(started.elapsed()),
                            Some(&failure),
                        );
                        capture_failure(rt, envelope, &failure, false).await;
                        return;
                    }
                }
                rt.emit(
                    TaskEventKind::DeadLettered,
                    envelope,
                    Some(started.elapsed()),
                    Some(&failure),
                );
            }
            let terminal = fail_delivery(rt, delivery, &failure).await;
            let kind = if terminal {
                TaskEventKind::Failed
            } else {
                TaskEventKind::Retried
            };
            rt.emit(kind, envelope, Some(started.elapsed()), Some(&failure));
            capture_failure(rt, envelope, &failure, terminal).await;
        }
    }
}

/// Writes the failed attempt's envelope when the app captures failures (`terminal` tells
/// whether the delivery is finished); a capture that cannot be written is logged, never fails
/// the delivery.
async fn capture_failure(
    rt: &TaskRuntime,
    envelope: &Envelope,
    failure: &FailureInfo,
    terminal: bool,
) {
    let Some(config) = rt.capture.clone() else {
        return;
    };
    if config.mode == CaptureMode::Terminal && !terminal {
        return;
    }
    let (app, task) = (rt.app_name.clone(), rt.task_name.clone());
    let (failure, envelope) = (failure.clone(), envelope.clone());
    let written = tokio::task::spawn_blocking(move || {
        let record = CaptureRecord {
            app: &app,
            task: &task,
            terminal,
            failure: &failure,
            envelope: &envelope,
        };
        write_capture(&config, &record)
    })
    .await;
    match written {
        Ok(Ok(path)) => {
            tracing::info!(task = %rt.task_name, path = %path.display(), terminal, "failure captured");
        }
        Ok(Err(CaptureError::Encoding(e))) => {
            tracing::error!(task = %rt.task_name, error = %e, "failure capture encoding failed");
        }
        Ok(Err(e)) => {
            tracing::error!(task = %rt.task_name, error = %e, "failure capture persistence failed");
        }
        Err(e) => {
            tracing::error!(task = %rt.task_name, error = %e, "failure capture persistence failed");
        }
    }
}

/// Fails the delivery; when that errors (other than a lost lease) it is retried instead, so it is
/// never dropped. Returns whether the failure is final.
async fn fail_delivery(
    rt: &TaskRuntime,
    delivery: &mut dyn Delivery,
    failure: &FailureInfo,
) -> bool {
    if let Some(managed) = delivery.as_managed() {
        let completion = ExecutionCompletion::Failed {
            error: Some(ExecutionErrorDetail::from_failure(failure)),
        };
        match managed.complete_execution(completion).await {
            Ok(_) => return true,
            Err(err) if err.is_lease_lost() => {
                log_completion(rt, Err(err));
                return true;
            }
            Err(err) => {
                tracing::error!(task = %rt.task_name, error = %err, "could not fail the execution; retrying it instead");
            }
        }
        retry_delivery(rt, delivery, None, failure).await;
        return false;
    }
    if let Err(err) = delivery.fail(failure).await {
        tracing::error!(task = %rt.task_name, error = %err, "could not fail the delivery; retrying it instead");
        retry_delivery(rt, delivery, None, failure).await;
        return false;
    }
    true
}

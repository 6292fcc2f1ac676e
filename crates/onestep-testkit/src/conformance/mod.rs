//! The tracked-execution contract as test cases. Each case builds its own isolated backend with
//! [`BackendFactory::create`], drives it, and panics with a message
//! on any deviation. Time moves only through the [`Setup`] clock.
// A test suite: panicking on an unexpected error is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod claim;
mod complete;
mod lease;
mod prefetch;
mod side_by_side;
mod submit;
mod worker;

pub use api::*;
pub use claim::*;
pub use complete::*;
pub use lease::*;
pub use prefetch::*;
pub use side_by_side::*;
pub use submit::*;
pub use worker::*;

use std::time::Duration;

use onestep_core::execution::{
    ExecutionBackend, ExecutionCompletion, ExecutionErrorDetail, ExecutionLease, ExecutionLimits,
    ExecutionQuery, ExecutionRequest, ExecutionStatus, LeasedExecutionBackend, SubmitOptions,
};
use serde_json::{Map, Value};

use crate::{BackendFactory, Setup};

/// The namespace every case uses unless it tests namespaces.
pub const NS: &str = "conformance";

async fn backend<F: BackendFactory>(f: &F) -> (F::Backend, Setup) {
    let setup = Setup::default();
    (f.create(&setup).await, setup)
}

async fn backend_with<F: BackendFactory>(f: &F, setup: Setup) -> (F::Backend, Setup) {
    (f.create(&setup).await, setup)
}

/// A backend that stores results of at most `max_result_bytes` (the other limits default).
async fn backend_with_result_limit<F: BackendFactory>(
    f: &F,
    max_result_bytes: usize,
) -> (F::Backend, Setup) {
    let limits = ExecutionLimits {
        max_result_bytes,
        ..ExecutionLimits::default()
    };
    backend_with(
        f,
        Setup {
            limits,
            ..Setup::default()
        },
    )
    .await
}

fn request(task: &str, payload: Value, options: SubmitOptions) -> ExecutionRequest {
    ExecutionRequest::new(NS, task, payload, options).unwrap()
}

async fn submit<B: ExecutionBackend>(
    b: &B,
    task: &str,
    payload: Value,
) -> onestep_core::execution::Execution {
    b.submit(request(task, payload, SubmitOptions::default()))
        .await
        .unwrap()
}

fn secs(n: f64) -> Duration {
    Duration::from_secs_f64(n)
}

/// The setup clock's time `s` seconds from now.
fn after(setup: &Setup, s: f64) -> time::OffsetDateTime {
    use onestep_core::clock::Clock;
    setup.clock.now() + secs(s)
}

async fn claim<B: LeasedExecutionBackend>(
    b: &B,
    task: &str,
    limit: usize,
    lease_s: f64,
) -> Vec<ExecutionLease> {
    b.claim(NS, &[task.to_string()], limit, secs(lease_s), "worker-1")
        .await
        .unwrap()
}

async fn claim_to_run<B: LeasedExecutionBackend>(
    b: &B,
    task: &str,
    limit: usize,
    lease_s: f64,
) -> Vec<onestep_core::execution::ClaimedExecution> {
    b.claim_to_run(NS, &[task.to_string()], limit, secs(lease_s), "worker-1")
        .await
        .unwrap()
}

async fn claim_one<B: LeasedExecutionBackend>(b: &B, task: &str, lease_s: f64) -> ExecutionLease {
    let mut leases = claim(b, task, 1, lease_s).await;
    assert_eq!(
        leases.len(),
        1,
        "expected one claimable execution of {task}"
    );
    leases.remove(0)
}

async fn complete<B: LeasedExecutionBackend>(
    b: &B,
    lease: &ExecutionLease,
    completion: ExecutionCompletion,
) -> Result<onestep_core::execution::Execution, onestep_core::execution::ExecutionError> {
    b.complete(
        lease.execution.id,
        lease.attempt_id,
        lease.lease_token,
        completion,
    )
    .await
}

/// One item of a `complete_many` batch: `lease`'s ids and token with `completion`.
fn batch_item(
    lease: &ExecutionLease,
    completion: ExecutionCompletion,
) -> (uuid::Uuid, uuid::Uuid, uuid::Uuid, ExecutionCompletion) {
    (
        lease.execution.id,
        lease.attempt_id,
        lease.lease_token,
        completion,
    )
}

/// `depth` arrays around a number: a value `depth` levels deep, as stored too.
fn nested(depth: usize) -> Value {
    (0..depth).fold(Value::from(1), |inner, _| Value::Array(vec![inner]))
}

/// The NUL message of a text field.
const NUL: &str = "must not contain the NUL character (\\u0000)";

/// Asserts `err` is an invalid argument for `field` whose message starts with `message`.
#[track_caller]
fn assert_invalid(err: onestep_core::execution::ExecutionError, field: &str, message: &str) {
    match &err {
        onestep_core::execution::ExecutionError::InvalidArgument {
            field: f,
            message: m,
        } if f == field && m.starts_with(message) => {}
        other => panic!("expected InvalidArgument {field} {message}…, got {other:?}"),
    }
}

fn detail(kind: &str, exception_type: &str) -> ExecutionErrorDetail {
    let mut d = ExecutionErrorDetail::new(kind, exception_type).unwrap();
    d.stage = Some("handler".into());
    d
}

/// How many executions of `task` the first list page (up to 50) shows.
async fn listed<B: ExecutionBackend>(b: &B, task: &str) -> usize {
    b.list(&query(Some(task), None, 50))
        .await
        .unwrap()
        .items
        .len()
}

/// A list query in [`NS`].
fn query(task: Option<&str>, status: Option<ExecutionStatus>, limit: u32) -> ExecutionQuery {
    ExecutionQuery {
        namespace: NS.into(),
        task_name: task.map(str::to_string),
        status,
        limit,
        cursor: None,
    }
}

/// A request built field by field, as a direct backend user may, bypassing
/// `ExecutionRequest::new`.
fn built(
    task: &str,
    payload: Value,
    key: Option<&str>,
    metadata: Map<String, Value>,
) -> ExecutionRequest {
    ExecutionRequest {
        namespace: NS.into(),
        task_name: task.into(),
        payload,
        idempotency_key: key.map(str::to_string),
        metadata,
        delay_s: None,
        expires_at: None,
    }
}

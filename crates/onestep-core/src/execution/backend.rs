//! The storage contract: [`ExecutionBackend`] for the API side, [`LeasedExecutionBackend`] for
//! workers.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::error::{ExecutionError, ExecutionResult};
use super::record::{
    ClaimedExecution, Execution, ExecutionCompletion, ExecutionLease, ExecutionPage,
    ExecutionQuery, ExecutionRequest, HeartbeatResult,
};
use super::status::ExecutionStatus;

/// Stores executions: submit, read, list and cancel. What an API process needs.
///
/// Every method validates its input before I/O and may be called without `open` (backends make
/// themselves ready lazily). Snapshots returned carry decoded payloads.
///
/// # Example
/// ```
/// use onestep_core::execution::{ExecutionBackend, ExecutionRequest, MemoryExecutionBackend, SubmitOptions};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let backend = MemoryExecutionBackend::new();
/// let request = ExecutionRequest::new("billing", "charge", serde_json::json!({"invoice": 7}), SubmitOptions::default())?;
/// let execution = backend.submit(request).await?;
/// assert_eq!(backend.get("billing", execution.id).await?.unwrap().status.as_str(), "queued");
/// assert!(backend.get("other", execution.id).await?.is_none(), "namespaces are isolated");
/// # Ok::<(), onestep_core::execution::ExecutionError>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait ExecutionBackend: Send + Sync {
    /// A short backend name for source names and errors (`"postgres"`, `"memory"`).
    fn backend_name(&self) -> &str;

    /// Makes the backend ready (connects, creates tables when configured). Reference-counted with
    /// [`close`](ExecutionBackend::close).
    async fn open(&self) -> ExecutionResult<()> {
        Ok(())
    }

    /// Releases what `open` acquired once every opener closed.
    async fn close(&self) -> ExecutionResult<()> {
        Ok(())
    }

    /// Stores a new execution, or returns the existing one for a repeated idempotency key with
    /// the same submission ([`Conflict`](super::ExecutionError::Conflict) when it differs).
    async fn submit(&self, request: ExecutionRequest) -> ExecutionResult<Execution>;

    /// Submits a batch in as few round trips as the backend allows; each item follows the rules
    /// of [`submit`](ExecutionBackend::submit) and fails on its own.
    async fn submit_many(
        &self,
        requests: Vec<ExecutionRequest>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        let mut out = Vec::with_capacity(requests.len());
        for request in requests {
            out.push(self.submit(request).await);
        }
        Ok(out)
    }

    /// The execution `id` in `namespace`, if it exists there.
    async fn get(&self, namespace: &str, id: Uuid) -> ExecutionResult<Option<Execution>>;

    /// A page of executions, newest first.
    async fn list(&self, query: &ExecutionQuery) -> ExecutionResult<ExecutionPage>;

    /// Cancels: queued/retrying → cancelled, running → cancel_requested, anything else unchanged.
    /// `None` when the execution does not exist in `namespace`.
    async fn request_cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<&str>,
    ) -> ExecutionResult<Option<Execution>>;

    /// Waits up to `timeout` for a change to execution `id`. Backends without notifications return
    /// `false` at once and callers poll; the memory backend wakes early.
    async fn wait_for_change(
        &self,
        _namespace: &str,
        _id: Uuid,
        _timeout: Duration,
    ) -> ExecutionResult<bool> {
        Ok(false)
    }

    /// The last progress a handler reported for execution `id` of `namespace`
    /// ([`ExecutionInfo::report_progress`](super::ExecutionInfo::report_progress)); `None` when
    /// none was (or the backend keeps none).
    async fn progress(&self, _namespace: &str, _id: Uuid) -> ExecutionResult<Option<Value>> {
        Ok(None)
    }

    /// The waiting executions of `task_names` in `namespace`, one entry per task that has any,
    /// for the queue-depth metrics; `None` when the backend cannot tell cheaply.
    async fn backlog(
        &self,
        _namespace: &str,
        _task_names: &[String],
    ) -> ExecutionResult<Option<Vec<super::record::TaskBacklog>>> {
        Ok(None)
    }
}

/// Claims executions under a lease and completes them. What a worker needs.
///
/// Leases are fenced by token: heartbeat, complete and release succeed only with the current
/// token while the lease has not expired (`lease_expires_at > now`, strictly), else they fail with
/// [`LeaseLost`](super::ExecutionError::LeaseLost). Expired leases are recovered by later claims.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use onestep_core::execution::*;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let backend = MemoryExecutionBackend::new();
/// backend.submit(ExecutionRequest::new("ns", "report", serde_json::json!({}), SubmitOptions::default())?).await?;
/// let leases = backend.claim("ns", &["report".to_string()], 10, Duration::from_secs(90), "worker-1").await?;
/// let lease = &leases[0];
/// let done = backend
///     .complete(lease.execution.id, lease.attempt_id, lease.lease_token,
///               ExecutionCompletion::Succeeded { result: serde_json::json!({"rows": 3}) })
///     .await?;
/// assert_eq!(done.status, ExecutionStatus::Succeeded);
/// # Ok::<(), ExecutionError>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait LeasedExecutionBackend: ExecutionBackend {
    /// Recovers expired work (bounded batches, all namespaces), then claims up to `limit` ready
    /// executions of `task_names` in `namespace`, oldest `available_at` first, starting a new
    /// attempt for each.
    async fn claim(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ExecutionLease>>;

    /// [`claim`](LeasedExecutionBackend::claim), answering only what a worker needs to run each
    /// execution ([`ClaimedExecution`]); the claim itself is the same (the same rows, leases and
    /// attempts). The default converts `claim`'s answer. A backend that can read fewer columns
    /// of each claimed row overrides it: the execution source claims through this method.
    async fn claim_to_run(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ClaimedExecution>> {
        let leases = self
            .claim(namespace, task_names, limit, lease_duration, worker_id)
            .await?;
        Ok(leases.into_iter().map(ClaimedExecution::from).collect())
    }

    /// How many claims one worker's runner may have under way at once (at least one; default
    /// one). A server that runs claims side by side (row locks that skip each other) gains from
    /// two: the next claim's round trip overlaps the last one's, for slots freed meanwhile.
    fn concurrent_claims(&self) -> usize {
        1
    }

    /// Renews a lease; reports whether a cancel was requested.
    async fn heartbeat(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_duration: Duration,
    ) -> ExecutionResult<HeartbeatResult>;

    /// Ends an attempt. A success racing a cancel request ends cancelled (no result, no error). A
    /// repeated terminal completion with the same outcome returns the stored snapshot.
    async fn complete(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution>;

    /// Returns a claimed but unstarted execution to the queue (the attempt counts as lease lost).
    async fn release(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
    ) -> ExecutionResult<Execution>;

    /// How long until `lease_expires_at`, by the backend's clock (zero when past).
    async fn lease_remaining(&self, lease_expires_at: OffsetDateTime) -> ExecutionResult<Duration>;

    /// Checks a result can be stored (encodable, within the size limit) without writing anything.
    fn validate_result(&self, result: &Value) -> ExecutionResult<()>;

    /// Stores `progress` as the execution's latest progress while the lease holds; `Ok(false)`
    /// when it was not stored (the lease is gone, or the backend keeps no progress).
    async fn report_progress(
        &self,
        _execution_id: Uuid,
        _attempt_id: Uuid,
        _lease_token: Uuid,
        _progress: &Value,
    ) -> ExecutionResult<bool> {
        Ok(false)
    }

    /// Waits up to `timeout` for work that `task_names` in `namespace` may claim (a submit, a
    /// release, a retry due now). The default sleeps `timeout`; backends with a wake-up channel
    /// return early. A wake-up is a hint: the next claim decides.
    async fn wait_for_work(&self, _namespace: &str, _task_names: &[String], timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }

    /// Renews several leases; the default calls [`heartbeat`](LeasedExecutionBackend::heartbeat)
    /// for each.
    async fn heartbeat_many(
        &self,
        leases: &[(Uuid, Uuid, Uuid)],
        lease_duration: Duration,
    ) -> ExecutionResult<Vec<ExecutionResult<HeartbeatResult>>> {
        Ok(heartbeat_each(self, leases, lease_duration).await)
    }

    /// Completes several attempts; the default calls [`complete`](LeasedExecutionBackend::complete)
    /// for each.
    async fn complete_many(
        &self,
        completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        Ok(complete_each(self, completions).await)
    }

    /// Completes several attempts as [`complete_many`](LeasedExecutionBackend::complete_many)
    /// does, answering each with the status its execution was left in instead of the whole
    /// execution: all a worker needs (a success that lost to a cancel answers `Cancelled`, a
    /// retry `Retrying`). The default maps `complete_many`; a backend that can skip reading the
    /// written rows back overrides it.
    async fn complete_many_statuses(
        &self,
        completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
    ) -> ExecutionResult<Vec<ExecutionResult<ExecutionStatus>>> {
        Ok(self
            .complete_many(completions)
            .await?
            .into_iter()
            .map(|answer| answer.map(|execution| execution.status))
            .collect())
    }
}

/// Renews `leases` one after another with [`LeasedExecutionBackend::heartbeat`], each answered on
/// its own: the default of `heartbeat_many`, and the one fallback of a backend whose batch
/// cannot take these leases.
pub async fn heartbeat_each<B: LeasedExecutionBackend + ?Sized>(
    backend: &B,
    leases: &[(Uuid, Uuid, Uuid)],
    lease_duration: Duration,
) -> Vec<ExecutionResult<HeartbeatResult>> {
    let mut out = Vec::with_capacity(leases.len());
    for &(execution_id, attempt_id, token) in leases {
        out.push(
            backend
                .heartbeat(execution_id, attempt_id, token, lease_duration)
                .await,
        );
    }
    out
}

/// Completes one after another, in order, with [`LeasedExecutionBackend::complete`], each
/// answered on its own: the default of `complete_many`, and the one fallback of a backend whose
/// batch failed or cannot take these completions.
pub async fn complete_each<B: LeasedExecutionBackend + ?Sized>(
    backend: &B,
    completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
) -> Vec<ExecutionResult<Execution>> {
    let mut out = Vec::with_capacity(completions.len());
    for (execution_id, attempt_id, token, completion) in completions {
        out.push(
            backend
                .complete(execution_id, attempt_id, token, completion)
                .await,
        );
    }
    out
}

/// Checks a cancel reason as a backend receives it (at most 500 characters, no U+0000), before
/// any I/O; the client also strips it and treats blank as none (see `normalize_reason`).
pub fn validate_cancel_reason(reason: Option<&str>) -> ExecutionResult<()> {
    let Some(reason) = reason else {
        return Ok(());
    };
    if reason.chars().count() > 500 {
        return Err(ExecutionError::invalid(
            "reason",
            "must be at most 500 characters",
        ));
    }
    super::stored::reject_nul("reason", reason)
}

/// Checks claim arguments as the reference does, before any I/O.
pub fn validate_claim(
    task_names: &[String],
    limit: usize,
    lease_duration: Duration,
    worker_id: &str,
) -> ExecutionResult<()> {
    use super::error::ExecutionError;
    if task_names.is_empty() {
        return Err(ExecutionError::invalid(
            "task_names",
            "must contain at least one task name",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for name in task_names {
        super::record::name("task_names", name, 255)?;
        if !seen.insert(name.trim()) {
            return Err(ExecutionError::invalid(
                "task_names",
                format!("contains {name:?} twice"),
            ));
        }
    }
    if limit < 1 {
        return Err(ExecutionError::invalid("limit", "must be >= 1, got 0"));
    }
    if lease_duration.is_zero() {
        return Err(ExecutionError::invalid(
            "lease_duration_s",
            "must be > 0, got 0",
        ));
    }
    if lease_duration.as_secs_f64() > crate::clock::MAX_SECONDS {
        return Err(ExecutionError::invalid(
            "lease_duration_s",
            format!(
                "must be at most {} (100 years), got {}",
                crate::clock::MAX_SECONDS,
                lease_duration.as_secs_f64()
            ),
        ));
    }
    super::record::name("worker_id", worker_id, 255)?;
    Ok(())
}

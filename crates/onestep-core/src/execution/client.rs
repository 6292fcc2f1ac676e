//! [`ExecutionClient`]: what an API process uses to submit, inspect, cancel and read executions.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::backend::{ExecutionBackend, LeasedExecutionBackend};
use super::error::{ExecutionError, ExecutionResult};
use super::record::{
    Execution, ExecutionPage, ExecutionQuery, ExecutionRequest, SubmitOptions, name,
};
use super::source::{ExecutionSource, ExecutionSourceOptions};
use super::status::ExecutionStatus;
use crate::args::TaskArgs;

/// Submits and inspects executions in one namespace.
///
/// Validation errors (blank names, a reason over 500 characters, a limit outside 1..=200) are
/// returned before anything reaches the backend.
///
/// # Example
/// ```
/// use onestep_core::execution::{ExecutionClient, MemoryExecutionBackend, SubmitOptions};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let client = ExecutionClient::new(MemoryExecutionBackend::new(), "reports")?;
/// let first = client.submit("monthly", &serde_json::json!({"month": "2026-11"}),
///                           SubmitOptions::default().idempotency_key("nov")).await?;
/// let again = client.submit("monthly", &serde_json::json!({"month": "2026-11"}),
///                           SubmitOptions::default().idempotency_key("nov")).await?;
/// assert_eq!(first.id, again.id, "same key, same submission: same execution");
/// assert!(client.result::<serde_json::Value>(first.id).await.is_err(), "not ready yet");
/// # Ok::<(), onestep_core::execution::ExecutionError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct ExecutionClient<B> {
    backend: B,
    namespace: String,
    wait_backoff: WaitBackoff,
}

/// The polling schedule of [`ExecutionClient::wait`]: `initial`, doubling, capped at `max`
/// (default 1, 2, 4, 8, 10, 10, … seconds, as the seed documents advise). Backends with
/// notifications wake earlier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitBackoff {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
}

impl Default for WaitBackoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl<B: ExecutionBackend> ExecutionClient<B> {
    /// A client for `namespace` (1..=255 characters, stripped).
    pub fn new(backend: B, namespace: &str) -> ExecutionResult<Self> {
        Ok(Self {
            backend,
            namespace: name("namespace", namespace, 255)?,
            wait_backoff: WaitBackoff::default(),
        })
    }

    /// Changes the polling schedule of [`wait`](ExecutionClient::wait).
    pub fn with_wait_backoff(mut self, backoff: WaitBackoff) -> Self {
        self.wait_backoff = backoff;
        self
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Opens the backend (optional: backends open lazily).
    pub async fn open(&self) -> ExecutionResult<()> {
        self.backend.open().await
    }

    /// Closes the backend.
    pub async fn close(&self) -> ExecutionResult<()> {
        self.backend.close().await
    }

    /// Submits `payload` for `task_name`.
    pub async fn submit<P: Serialize + ?Sized>(
        &self,
        task_name: &str,
        payload: &P,
        options: SubmitOptions,
    ) -> ExecutionResult<Execution> {
        let request = self.request(task_name, payload, options)?;
        let execution = self.backend.submit(request).await?;
        crate::metrics::execution::execution_metrics().submitted(
            &self.namespace,
            &execution.task_name,
            1,
        );
        Ok(execution)
    }

    /// Submits `args` under [`A::TASK_NAME`](TaskArgs::TASK_NAME), the name the worker's
    /// [`Task::of`](crate::Task::of) handles.
    pub async fn submit_args<A: TaskArgs>(
        &self,
        args: &A,
        options: SubmitOptions,
    ) -> ExecutionResult<Execution> {
        self.submit(A::TASK_NAME, args, options).await
    }

    /// Submits a batch; each item succeeds or fails on its own. Validation errors of any item are
    /// returned before anything is sent.
    pub async fn submit_many<P: Serialize>(
        &self,
        items: impl IntoIterator<Item = (String, P, SubmitOptions)>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        let requests = items
            .into_iter()
            .map(|(task, payload, options)| self.request(&task, &payload, options))
            .collect::<ExecutionResult<Vec<_>>>()?;
        let answers = self.backend.submit_many(requests).await?;
        let metrics = crate::metrics::execution::execution_metrics();
        let mut by_task: std::collections::BTreeMap<&str, u64> = Default::default();
        for execution in answers.iter().flatten() {
            *by_task.entry(execution.task_name.as_str()).or_default() += 1;
        }
        for (task, n) in by_task {
            metrics.submitted(&self.namespace, task, n);
        }
        Ok(answers)
    }

    fn request<P: Serialize + ?Sized>(
        &self,
        task: &str,
        payload: &P,
        options: SubmitOptions,
    ) -> ExecutionResult<ExecutionRequest> {
        let payload = serde_json::to_value(payload).map_err(|e| {
            ExecutionError::Encoding(format!("cannot encode execution payload: {e}"))
        })?;
        ExecutionRequest::new(&self.namespace, task, payload, options)
    }

    /// The last progress the handler of execution `id` reported (`None` when none was, or the
    /// backend keeps none).
    pub async fn progress(&self, id: Uuid) -> ExecutionResult<Option<Value>> {
        self.backend.progress(&self.namespace, id).await
    }

    /// The execution, or `None` when it does not exist in this namespace.
    pub async fn get(&self, id: Uuid) -> ExecutionResult<Option<Execution>> {
        self.backend.get(&self.namespace, id).await
    }

    /// Parses `id` and gets the execution; a malformed id is an invalid argument.
    pub async fn get_str(&self, id: &str) -> ExecutionResult<Option<Execution>> {
        self.get(parse_id(id)?).await
    }

    /// A page of executions, newest first, optionally filtered by task and status.
    pub async fn list(
        &self,
        task_name: Option<&str>,
        status: Option<ExecutionStatus>,
        limit: u32,
        cursor: Option<&str>,
    ) -> ExecutionResult<ExecutionPage> {
        let query = ExecutionQuery {
            namespace: self.namespace.clone(),
            task_name: task_name.map(str::to_string),
            status,
            limit,
            cursor: cursor.map(str::to_string),
        };
        query.validate()?;
        self.backend.list(&query).await
    }

    /// Cancels: queued/retrying end cancelled at once, running becomes cancel_requested and the
    /// worker stops cooperatively; finished executions are returned unchanged. `reason` is
    /// stripped (blank means none), at most 500 characters and free of U+0000. `None` when not
    /// found.
    pub async fn cancel(
        &self,
        id: Uuid,
        reason: Option<&str>,
    ) -> ExecutionResult<Option<Execution>> {
        let reason = normalize_reason(reason)?;
        self.backend
            .request_cancel(&self.namespace, id, reason.as_deref())
            .await
    }

    /// The result of a succeeded execution, deserialized into `T` with
    /// [`codec::from_value`](super::codec::from_value) (Python tuples and sets read into `Vec`s
    /// and sets, a `Value` keeps every tag); never waits.
    ///
    /// Errors: NotFound, NotReady (queued, running, retrying, cancel_requested), Failed,
    /// Cancelled, Expired; Encoding when the stored result does not fit `T`. A succeeded
    /// execution without a result reads as JSON `null`.
    pub async fn result<T: DeserializeOwned>(&self, id: Uuid) -> ExecutionResult<T> {
        let execution = self.get(id).await?.ok_or(ExecutionError::NotFound(id))?;
        let value = outcome(execution)?;
        super::codec::from_value(&value).map_err(|e| {
            ExecutionError::Encoding(format!("cannot decode the result of execution {id}: {e}"))
        })
    }

    /// The result of a succeeded execution of `A`, as `A::Output`; as [`result`](Self::result).
    pub async fn output<A: TaskArgs>(&self, id: Uuid) -> ExecutionResult<A::Output> {
        self.result::<A::Output>(id).await
    }

    /// Waits until the execution is terminal or `timeout` passes, polling with the
    /// [`WaitBackoff`] schedule (or waking on the backend's change notifications). Returns the
    /// terminal snapshot; NotReady with the latest snapshot on timeout.
    pub async fn wait(&self, id: Uuid, timeout: Duration) -> ExecutionResult<Execution> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut delay = self.wait_backoff.initial;
        loop {
            let execution = self.get(id).await?.ok_or(ExecutionError::NotFound(id))?;
            if execution.is_terminal() {
                return Ok(execution);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ExecutionError::NotReady(Box::new(execution)));
            }
            let pause = delay.min(deadline - now);
            if !self
                .backend
                .wait_for_change(&self.namespace, id, pause)
                .await?
            {
                tokio::time::sleep_until((now + pause).min(deadline)).await;
            }
            delay = (delay * 2).min(self.wait_backoff.max);
        }
    }
}

/// The outcome of an execution as the client reports it.
fn outcome(execution: Execution) -> ExecutionResult<Value> {
    match execution.status {
        ExecutionStatus::Succeeded => Ok(execution.result.unwrap_or(Value::Null)),
        ExecutionStatus::Failed => Err(ExecutionError::Failed(Box::new(execution))),
        ExecutionStatus::Cancelled => Err(ExecutionError::Cancelled(Box::new(execution))),
        ExecutionStatus::Expired => Err(ExecutionError::Expired(Box::new(execution))),
        _ => Err(ExecutionError::NotReady(Box::new(execution))),
    }
}

/// Parses an execution id in any form `Uuid` accepts.
pub fn parse_id(id: &str) -> ExecutionResult<Uuid> {
    Uuid::parse_str(id.trim())
        .map_err(|_| ExecutionError::invalid("execution_id", format!("must be a UUID, got {id:?}")))
}

/// Strips a cancel reason; blank means none; more than 500 characters, or a U+0000 anywhere, is
/// an error.
pub fn normalize_reason(reason: Option<&str>) -> ExecutionResult<Option<String>> {
    let Some(reason) = reason.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    super::stored::reject_nul("reason", reason)?;
    let len = reason.chars().count();
    if len > 500 {
        return Err(ExecutionError::invalid(
            "reason",
            format!("must be at most 500 characters, got {len}"),
        ));
    }
    Ok(Some(reason.to_string()))
}

impl<B: LeasedExecutionBackend + Clone + 'static> ExecutionClient<B> {
    /// A worker source over this client's backend (so the two share one pool).
    pub fn source(&self, options: ExecutionSourceOptions) -> crate::Result<ExecutionSource<B>> {
        ExecutionSource::new(self.backend.clone(), options)
    }

    /// A worker source for the executions of `A` in this client's namespace, with default
    /// options, over this client's backend.
    pub fn source_for<A: TaskArgs>(&self) -> crate::Result<ExecutionSource<B>> {
        self.source(ExecutionSourceOptions::new(&self.namespace, A::TASK_NAME))
    }
}

//! [`ExecutionSource`]: claims tracked executions for one task and keeps their leases alive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::backend::LeasedExecutionBackend;
use super::error::{ExecutionError, ExecutionResult};
use super::record::{ClaimedExecution, ExecutionCompletion, ExecutionErrorDetail, name};
use super::status::ExecutionStatus;
use super::stored::RESERVED_METADATA_KEY;
use crate::connector::ConnectorOperation;
use crate::delivery::Delivery;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::failure::FailureInfo;
use crate::source::{Resource, Source};

/// What the executor needs from a delivery that is a tracked execution.
///
/// Completions replace ack/retry/fail: the executor stores the handler's return value on success,
/// a [`ExecutionErrorDetail`] on failure, and tells a business cancel (ends `cancelled`) from a
/// worker cancel (shutdown or lost lease: ends `retrying` with no delay).
///
/// # Example
/// ```
/// use onestep_core::execution::ManagedDelivery;
///
/// fn describe(d: &dyn ManagedDelivery) -> String {
///     format!("execution {} attempt {}", d.execution_id(), d.attempt_id())
/// }
/// ```
#[async_trait]
pub trait ManagedDelivery: Send + Sync {
    /// The execution id.
    fn execution_id(&self) -> Uuid;
    /// The attempt id.
    fn attempt_id(&self) -> Uuid;
    /// Whether a cancel was requested (seen by a heartbeat, or a success that lost to a cancel).
    fn cancel_requested(&self) -> bool;
    /// Fires when the handler must stop: a cancel request or a lost lease.
    fn cancellation(&self) -> CancellationToken;
    /// What the handler sees of the execution ([`TaskContext::execution`](crate::TaskContext::execution)).
    fn info(&self) -> ExecutionInfo;
    /// Checks the result can be stored, before anything is emitted (stage `result_validation`).
    async fn validate_execution_result(&self, result: &Value) -> ExecutionResult<()>;
    /// Ends the attempt and answers the status the execution was left in (`Cancelled` for a
    /// success that lost to a cancel request); a second call returns the first outcome without
    /// writing.
    async fn complete_execution(
        &mut self,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<ExecutionStatus>;
}

mod buffer;
mod completer;
mod delivery;
mod info;
mod options;
mod pace;
mod progress;
mod renewer;

use buffer::Buffer;
use completer::*;
use delivery::*;
pub use info::ExecutionInfo;
pub use options::{ExecutionSourceOptions, Prefetch};
use progress::Progress;
pub use progress::{MAX_PROGRESS_BYTES, PROGRESS_INTERVAL};
use renewer::*;

/// A [`Source`] that claims tracked executions of one task under a lease.
///
/// Each delivery's envelope carries the decoded payload, the metadata plus
/// `onestep.execution = {id, attempt_id}`, and `attempts = execution.attempts - 1`, so retry
/// policies count every started attempt (lost leases and releases included). Its fetch is not
/// cancel-safe: a shutdown waits for a claim in flight and releases what it returned.
///
/// # Example
/// ```
/// use onestep_core::execution::{ExecutionSource, ExecutionSourceOptions, MemoryExecutionBackend};
///
/// let backend = MemoryExecutionBackend::new();
/// let mut options = ExecutionSourceOptions::new("reports", "monthly");
/// options.worker_id = "worker-a".into();
/// let source = ExecutionSource::new(backend, options)?;
/// assert_eq!(onestep_core::Resource::name(&source), "memory.execution:reports");
/// # Ok::<(), onestep_core::Error>(())
/// ```
pub struct ExecutionSource<B> {
    backend: B,
    options: Arc<ExecutionSourceOptions>,
    name: String,
    completer: OnceLock<Completer>,
    heartbeater: OnceLock<Arc<Heartbeater<B>>>,
    /// Claimed ahead of the runner's free slots (`options.prefetch`).
    buffer: Arc<Buffer>,
    /// The backlog probe of the queue-depth metrics, from `open` to `close`.
    backlog_probe: Mutex<Option<crate::metrics::execution::ProbeRegistration>>,
}

/// The largest prefetch buffer ([`ExecutionSourceOptions::prefetch`]).
pub const MAX_PREFETCH: usize = 10_000;

impl<B: LeasedExecutionBackend + Clone + 'static> ExecutionSource<B> {
    /// A source over `backend`; options are validated here.
    pub fn new(backend: B, mut options: ExecutionSourceOptions) -> Result<Self> {
        options.validate("")?;
        options.namespace = options.namespace.trim().to_string();
        options.task_names = options
            .task_names
            .iter()
            .map(|t| t.trim().to_string())
            .collect();
        options.worker_id = options.worker_id.trim().to_string();
        let name = format!("{}.execution:{}", backend.backend_name(), options.namespace);
        Ok(Self {
            buffer: Buffer::new(options.prefetch, options.batch_size),
            backend,
            options: Arc::new(options),
            name,
            completer: OnceLock::new(),
            heartbeater: OnceLock::new(),
            backlog_probe: Mutex::new(None),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The options.
    pub fn options(&self) -> &ExecutionSourceOptions {
        &self.options
    }

    /// The batch writer's queue, started on first use (inside the runtime).
    fn completions(&self) -> tokio::sync::mpsc::UnboundedSender<CompletionJob> {
        self.completer
            .get_or_init(|| {
                let (jobs, rx) = tokio::sync::mpsc::unbounded_channel();
                let task = tokio::spawn(completion_loop(self.backend.clone(), rx));
                Completer {
                    jobs,
                    _task: AbortOnDropHandle::new(task),
                }
            })
            .jobs
            .clone()
    }

    /// The lease renewer (its task starts with the first lease it keeps).
    fn heartbeater(&self) -> Arc<Heartbeater<B>> {
        self.heartbeater
            .get_or_init(|| {
                Heartbeater::new(
                    self.backend.clone(),
                    self.options.heartbeat_interval,
                    self.options.lease_duration,
                    (
                        self.options.namespace.clone(),
                        self.options.task_names[0].clone(),
                    ),
                )
            })
            .clone()
    }

    /// Hands claimed, unstarted executions back (each is queued again, claimable at once).
    async fn hand_back(&self, leases: Vec<ClaimedExecution>) {
        for lease in leases {
            if let Err(err) = self
                .backend
                .release(lease.id, lease.attempt_id, lease.lease_token)
                .await
            {
                tracing::warn!(source = %self.name, execution_id = %lease.id, error = %err, "could not hand back a prefetched execution; its lease will expire");
            }
        }
    }

    /// Claims up to `want` executions, as a future that borrows nothing from the source (a
    /// refill runs it in the background).
    fn claim(
        &self,
        want: usize,
    ) -> impl std::future::Future<Output = Result<Vec<ClaimedExecution>>> + Send + 'static {
        let (backend, options, buffer) = (
            self.backend.clone(),
            self.options.clone(),
            self.buffer.clone(),
        );
        let name = self.name.clone();
        async move {
            let started = std::time::Instant::now();
            let claimed = backend
                .claim_to_run(
                    &options.namespace,
                    &options.task_names,
                    want,
                    options.lease_duration,
                    &options.worker_id,
                )
                .await
                .map_err(|err| match err {
                    ExecutionError::Connector(mut c) => {
                        c.operation = ConnectorOperation::Fetch;
                        c.source_name = name;
                        c.retry_delay.get_or_insert(options.poll_interval);
                        Error::Connector(c)
                    }
                    other => other.into(),
                })?;
            buffer.claimed_in(started.elapsed());
            if !claimed.is_empty() {
                let now = OffsetDateTime::now_utc();
                crate::metrics::execution::execution_metrics().claimed(
                    &options.namespace,
                    &options.task_names[0],
                    claimed.iter().map(|claimed| (claimed.available_at, now)),
                );
            }
            Ok(claimed)
        }
    }

    /// The deliveries of what a fetch hands to the runner, counted for an adaptive buffer.
    fn handing_out(&self, leases: Vec<ClaimedExecution>) -> Vec<Box<dyn Delivery>> {
        self.buffer.handed_out(leases.len());
        self.deliveries(leases)
    }

    fn deliveries(&self, leases: Vec<ClaimedExecution>) -> Vec<Box<dyn Delivery>> {
        leases
            .into_iter()
            .map(|lease| Box::new(self.delivery(lease)) as Box<dyn Delivery>)
            .collect()
    }

    fn delivery(&self, execution: ClaimedExecution) -> ExecutionDelivery<B> {
        // The claim is ours: its payload and metadata move into the envelope.
        let mut meta = execution.metadata;
        meta.insert(
            RESERVED_METADATA_KEY.into(),
            reserved_metadata(execution.id, execution.attempt_id),
        );
        let envelope = Envelope {
            body: execution.payload,
            meta,
            attempts: execution.attempts.saturating_sub(1),
        };
        let (backend, ids) = (
            self.backend.clone(),
            (execution.id, execution.attempt_id, execution.lease_token),
        );
        let progress = Progress::new(Arc::new(move |value| {
            let backend = backend.clone();
            Box::pin(async move { backend.report_progress(ids.0, ids.1, ids.2, &value).await })
        }));
        ExecutionDelivery {
            progress,
            backend: self.backend.clone(),
            envelope: Arc::new(envelope),
            execution_id: execution.id,
            namespace: execution.namespace,
            task_name: execution.task_name,
            attempt_id: execution.attempt_id,
            lease_token: execution.lease_token,
            lease: Arc::new(LeaseState {
                expires_at: Mutex::new(execution.lease_expires_at),
                cancel_requested: AtomicBool::new(false),
                cancel: CancellationToken::new(),
            }),
            heartbeats: self.heartbeater(),
            heartbeating: false,
            completed: None,
            completions: Some(self.completions()),
        }
    }
}

/// What a delivery's envelope holds under [`RESERVED_METADATA_KEY`]: the execution's and the
/// attempt's ids, as the reference puts them there. Built for every delivery, so sized up front
/// and the ids written without the formatter (a map grown key by key hashed each key three
/// times: a third of building a delivery).
fn reserved_metadata(id: Uuid, attempt_id: Uuid) -> Value {
    let text = |id: Uuid| {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        Value::String(id.hyphenated().encode_lower(&mut buf).to_owned())
    };
    let mut ids = Map::with_capacity(2);
    ids.insert("id".into(), text(id));
    ids.insert("attempt_id".into(), text(attempt_id));
    Value::Object(ids)
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> Resource for ExecutionSource<B> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn open(&self) -> Result<()> {
        self.backend.open().await.map_err(Error::from)?;
        let (backend, namespace, tasks) = (
            self.backend.clone(),
            self.options.namespace.clone(),
            self.options.task_names.clone(),
        );
        let probe: crate::metrics::execution::BacklogProbe = Arc::new(move || {
            let (backend, namespace, tasks) = (backend.clone(), namespace.clone(), tasks.clone());
            Box::pin(async move { backend.backlog(&namespace, &tasks).await })
        });
        let registration = crate::metrics::execution::execution_metrics().register_backlog(
            &self.options.namespace,
            &self.options.task_names,
            probe,
        );
        *self
            .backlog_probe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(registration);
        Ok(())
    }

    async fn close(&self) -> Result<()> {
        drop(
            self.backlog_probe
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        self.backend.close().await.map_err(Error::from)
    }
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> Source for ExecutionSource<B> {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let limit = limit.clamp(1, self.options.batch_size);
        let (leases, stale) = self.buffer.take(limit, self.options.heartbeat_interval);
        self.hand_back(stale).await;
        if !leases.is_empty() {
            // The runner does not wait for a claim: one refills the buffer behind it.
            self.buffer.refill_behind(|want| self.claim(want));
            return Ok(self.handing_out(leases));
        }
        // Claim what the runner wants plus what refills the buffer, at most a batch.
        let refill = self.buffer.reserve();
        let want = (limit + refill.room()).min(self.options.batch_size);
        let mut claimed = self.claim(want).await?.into_iter();
        let leases: Vec<ClaimedExecution> = claimed.by_ref().take(limit).collect();
        self.buffer.put(claimed, refill);
        Ok(self.handing_out(leases))
    }

    async fn return_unstarted(&self) -> Result<()> {
        self.buffer.settle().await;
        self.hand_back(self.buffer.drain()).await;
        Ok(())
    }

    fn batch_size(&self) -> usize {
        self.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        self.options.poll_interval
    }

    fn fetch_is_cancel_safe(&self) -> bool {
        false
    }

    fn concurrent_fetches(&self) -> usize {
        self.backend.concurrent_claims()
    }

    async fn wait_ready(&self, max: Duration) {
        self.backend
            .wait_for_work(&self.options.namespace, &self.options.task_names, max)
            .await;
    }

    fn validate_task(&self, task_name: &str) -> Result<()> {
        let expected = &self.options.task_names[0];
        if expected != task_name {
            return Err(Error::Configuration(format!(
                "`{}` is configured for task '{expected}', not '{task_name}'",
                self.name
            )));
        }
        Ok(())
    }

    fn describe(&self) -> Map<String, Value> {
        let o = &self.options;
        let mut m = Map::new();
        m.insert(
            "type".into(),
            Value::from(format!("{}_execution_source", self.backend.backend_name())),
        );
        m.insert("namespace".into(), Value::from(o.namespace.clone()));
        m.insert("task_names".into(), json!(o.task_names));
        m.insert("batch_size".into(), Value::from(o.batch_size));
        m.insert("prefetch".into(), json!(o.prefetch));
        m.insert(
            "poll_interval_s".into(),
            Value::from(o.poll_interval.as_secs_f64()),
        );
        m.insert(
            "lease_duration_s".into(),
            Value::from(o.lease_duration.as_secs_f64()),
        );
        m.insert(
            "heartbeat_interval_s".into(),
            Value::from(o.heartbeat_interval.as_secs_f64()),
        );
        m.insert("worker_id".into(), Value::from(o.worker_id.clone()));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::{ConnectorErrorKind, ConnectorOperationError};
    use crate::execution::record::{
        Execution, ExecutionLease, ExecutionPage, ExecutionQuery, ExecutionRequest, SubmitOptions,
    };
    use crate::execution::{ExecutionBackend, MemoryExecutionBackend};

    #[test]
    fn the_reserved_metadata_holds_both_ids_as_hyphenated_text_in_order() {
        let (id, attempt) = (Uuid::now_v7(), Uuid::new_v4());
        let reserved = reserved_metadata(id, attempt);
        let expected = json!({"id": id.to_string(), "attempt_id": attempt.to_string()});
        assert_eq!(reserved, expected);
        assert_eq!(
            serde_json::to_string(&reserved).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    }

    /// The memory backend whose heartbeats fail (retryably, as a dropped connection does) until
    /// a moment, whose claims first wait `claim_delay` (a round trip), and whose batched
    /// completions fail as a whole when `failing_batches`.
    #[derive(Clone)]
    struct FlakyHeartbeats {
        inner: MemoryExecutionBackend,
        failing_until: std::time::Instant,
        claim_delay: Duration,
        failing_batches: bool,
    }

    fn disconnected(op: ConnectorOperation) -> ExecutionError {
        ExecutionError::Connector(ConnectorOperationError::new(
            "flaky",
            op,
            ConnectorErrorKind::Disconnected,
            "flaky.execution",
        ))
    }

    #[async_trait]
    impl ExecutionBackend for FlakyHeartbeats {
        fn backend_name(&self) -> &str {
            "flaky"
        }
        async fn submit(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
            self.inner.submit(request).await
        }
        async fn get(&self, namespace: &str, id: Uuid) -> ExecutionResult<Option<Execution>> {
            self.inner.get(namespace, id).await
        }
        async fn list(&self, query: &ExecutionQuery) -> ExecutionResult<ExecutionPage> {
            self.inner.list(query).await
        }
        async fn request_cancel(
            &self,
            namespace: &str,
            id: Uuid,
            reason: Option<&str>,
        ) -> ExecutionResult<Option<Execution>> {
            self.inner.request_cancel(namespace, id, reason).await
        }
    }

    #[async_trait]
    impl LeasedExecutionBackend for FlakyHeartbeats {
        async fn claim(
            &self,
            namespace: &str,
            task_names: &[String],
            limit: usize,
            lease_duration: Duration,
            worker_id: &str,
        ) -> ExecutionResult<Vec<ExecutionLease>> {
            tokio::time::sleep(self.claim_delay).await;
            self.inner
                .claim(namespace, task_names, limit, lease_duration, worker_id)
                .await
        }
        async fn heartbeat(
            &self,
            execution_id: Uuid,
            attempt_id: Uuid,
            lease_token: Uuid,
            lease_duration: Duration,
        ) -> ExecutionResult<super::super::record::HeartbeatResult> {
            if std::time::Instant::now() < self.failing_until {
                return Err(disconnected(ConnectorOperation::Heartbeat));
            }
            self.inner
                .heartbeat(execution_id, attempt_id, lease_token, lease_duration)
                .await
        }
        async fn complete(
            &self,
            execution_id: Uuid,
            attempt_id: Uuid,
            lease_token: Uuid,
            completion: ExecutionCompletion,
        ) -> ExecutionResult<Execution> {
            self.inner
                .complete(execution_id, attempt_id, lease_token, completion)
                .await
        }
        async fn complete_many_statuses(
            &self,
            completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
        ) -> ExecutionResult<Vec<ExecutionResult<ExecutionStatus>>> {
            if self.failing_batches {
                return Err(disconnected(ConnectorOperation::Ack));
            }
            self.inner.complete_many_statuses(completions).await
        }
        async fn release(
            &self,
            execution_id: Uuid,
            attempt_id: Uuid,
            lease_token: Uuid,
        ) -> ExecutionResult<Execution> {
            self.inner
                .release(execution_id, attempt_id, lease_token)
                .await
        }
        async fn lease_remaining(
            &self,
            lease_expires_at: OffsetDateTime,
        ) -> ExecutionResult<Duration> {
            self.inner.lease_remaining(lease_expires_at).await
        }
        fn validate_result(&self, result: &Value) -> ExecutionResult<()> {
            self.inner.validate_result(result)
        }
    }

    /// Heartbeats that fail until shortly before the lease ends are retried on their own timer
    /// (a quarter of what remains, and less each time), not on the renewer's half-interval
    /// ticks: the renewal that finally succeeds lands before the lease ends, so the handler
    /// keeps running and nobody else can claim the execution.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewal_failing_until_just_before_expiry_is_retried_in_time() {
        let inner = MemoryExecutionBackend::new();
        let backend = FlakyHeartbeats {
            inner: inner.clone(),
            // Lease 6 s, interval 2 s: the ticks fall at 1, 2 … 6 s, so a retry waiting for a
            // tick after 5.2 s would come at 6 s, when the lease has ended.
            failing_until: std::time::Instant::now() + Duration::from_millis(5200),
            claim_delay: Duration::ZERO,
            failing_batches: false,
        };
        let request = ExecutionRequest::new("ns", "t", json!(1), SubmitOptions::default()).unwrap();
        let id = backend.submit(request).await.unwrap().id;
        let mut o = ExecutionSourceOptions::new("ns", "t");
        o.lease_duration = Duration::from_secs(6);
        o.heartbeat_interval = Duration::from_secs(2);
        let source = ExecutionSource::new(backend, o).unwrap();
        let mut deliveries = source.fetch(1).await.unwrap();
        deliveries[0].start_processing().await.unwrap();
        let cancel = deliveries[0].as_managed().unwrap().cancellation();
        tokio::time::sleep(Duration::from_millis(7000)).await;
        assert!(
            !cancel.is_cancelled(),
            "the handler was cancelled: its lease ran out while renewals were retried"
        );
        let stolen = inner
            .claim("ns", &["t".into()], 1, Duration::from_secs(30), "thief")
            .await
            .unwrap();
        assert!(stolen.is_empty(), "the lease was renewed in time");
        deliveries[0].ack().await.unwrap();
        let done = inner.get("ns", id).await.unwrap().unwrap();
        assert_eq!(done.status, ExecutionStatus::Succeeded);
    }

    /// A batch of completions that fails as a whole loses none of them: each delivery then
    /// writes its own completion, and is answered by it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn completions_of_a_failed_batch_are_each_written_on_their_own() {
        let inner = MemoryExecutionBackend::new();
        let backend = FlakyHeartbeats {
            inner: inner.clone(),
            failing_until: std::time::Instant::now(),
            claim_delay: Duration::ZERO,
            failing_batches: true,
        };
        for n in 0..8 {
            let request =
                ExecutionRequest::new("ns", "t", json!(n), SubmitOptions::default()).unwrap();
            backend.submit(request).await.unwrap();
        }
        let source = ExecutionSource::new(backend, ExecutionSourceOptions::new("ns", "t")).unwrap();
        let deliveries = source.fetch(8).await.unwrap();
        assert_eq!(deliveries.len(), 8);
        let ids: Vec<Uuid> = deliveries
            .iter()
            .map(|d| {
                Uuid::parse_str(
                    d.envelope().meta[RESERVED_METADATA_KEY]["id"]
                        .as_str()
                        .unwrap(),
                )
                .unwrap()
            })
            .collect();
        let acks = deliveries
            .into_iter()
            .map(|mut d| async move { d.ack().await });
        for ack in futures_util::future::join_all(acks).await {
            ack.unwrap();
        }
        for id in ids {
            let done = inner.get("ns", id).await.unwrap().unwrap();
            assert_eq!(done.status, ExecutionStatus::Succeeded, "{id}");
        }
    }

    /// Two fetches side by side (a runner with two claims in flight) refill the prefetch buffer
    /// together: the first claim takes the buffer's room, the second only what it was asked for.
    #[tokio::test(start_paused = true)]
    async fn fetches_side_by_side_fill_the_prefetch_buffer_once() {
        let inner = MemoryExecutionBackend::new();
        let backend = FlakyHeartbeats {
            inner: inner.clone(),
            failing_until: std::time::Instant::now(),
            claim_delay: Duration::from_millis(10),
            failing_batches: false,
        };
        for n in 0..20 {
            let request =
                ExecutionRequest::new("ns", "t", json!(n), SubmitOptions::default()).unwrap();
            backend.submit(request).await.unwrap();
        }
        let source = ExecutionSource::new(
            backend,
            ExecutionSourceOptions::new("ns", "t").with_prefetch(Prefetch::Fixed(4)),
        )
        .unwrap();
        let (a, b) = tokio::join!(source.fetch(1), source.fetch(1));
        assert_eq!((a.unwrap().len(), b.unwrap().len()), (1, 1));
        assert_eq!(
            source.buffer.drain().len(),
            4,
            "the buffer holds `prefetch`, not twice it"
        );
        assert_eq!(
            source.buffer.reserve().room(),
            4,
            "no room is left reserved"
        );
        let queued = inner
            .claim("ns", &["t".into()], 100, Duration::from_secs(30), "other")
            .await
            .unwrap();
        assert_eq!(queued.len(), 14, "claimed: 1 + 1 + 4 of 20");
    }

    /// The renewer's ticking task dies with the runtime that started it; a source used on from
    /// another runtime starts a new one with the next lease it keeps, which renews every lease
    /// the source holds (without the restart, both leases here expire and are claimed).
    #[test]
    fn a_renewer_whose_runtime_shut_down_is_started_again() {
        let inner = MemoryExecutionBackend::new();
        let mut o = ExecutionSourceOptions::new("ns", "t");
        o.lease_duration = Duration::from_millis(1200);
        o.heartbeat_interval = Duration::from_millis(300);
        let source = Arc::new(ExecutionSource::new(inner.clone(), o).unwrap());
        let runtime = || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap()
        };
        let submit_and_start = |rt: &tokio::runtime::Runtime| {
            let (inner, source) = (inner.clone(), source.clone());
            rt.block_on(async move {
                let request =
                    ExecutionRequest::new("ns", "t", json!(1), SubmitOptions::default()).unwrap();
                inner.submit(request).await.unwrap();
                let mut deliveries = source.fetch(1).await.unwrap();
                deliveries[0].start_processing().await.unwrap();
                deliveries.remove(0)
            })
        };
        let first = runtime();
        let old = submit_and_start(&first);
        drop(first);
        let second = runtime();
        let new = submit_and_start(&second);
        second.block_on(async {
            tokio::time::sleep(Duration::from_millis(2000)).await;
            let stolen = inner
                .claim("ns", &["t".into()], 2, Duration::from_secs(30), "thief")
                .await
                .unwrap();
            assert!(
                stolen.is_empty(),
                "leases went unrenewed after the first runtime shut down: {:?}",
                stolen.iter().map(|l| l.execution.id).collect::<Vec<_>>()
            );
        });
        drop((old, new));
    }
}

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
use super::record::{Execution, ExecutionCompletion, ExecutionErrorDetail, ExecutionLease, name};
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
    /// Checks the result can be stored, before anything is emitted (stage `result_validation`).
    async fn validate_execution_result(&self, result: &Value) -> ExecutionResult<()>;
    /// Ends the attempt; a second call returns the first outcome without writing.
    async fn complete_execution(
        &mut self,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution>;
}

/// Options of an [`ExecutionSource`], with the reference's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionSourceOptions {
    /// The namespace to claim from (1..=255).
    pub namespace: String,
    /// Exactly one task name.
    pub task_names: Vec<String>,
    /// The most executions one claim takes (default 100).
    pub batch_size: usize,
    /// How many claimed executions the source may hold beyond what its runner asked for
    /// (default 0: claim only for free slots, as the reference does). With a prefetch buffer a
    /// busy runner finds its next executions already claimed when slots free up, so short tasks
    /// do not wait a claim round trip; a claim still takes at most `batch_size`. Buffered
    /// executions are leased to this worker and run by nobody else until started or handed
    /// back: one still unstarted after `heartbeat_interval_s` is handed back (it is queued
    /// again, claimable at once, its attempt counted), and the runner hands the whole buffer
    /// back when it pauses or stops. Use it for short tasks; keep 0 for long ones.
    pub prefetch: usize,
    /// Seconds between claims when nothing is ready (default 1).
    pub poll_interval_s: f64,
    /// Seconds a lease lasts unless renewed (default 90).
    pub lease_duration_s: f64,
    /// Seconds between heartbeats; at most a third of the lease (default 30).
    pub heartbeat_interval_s: f64,
    /// This worker's id, recorded on attempts (default `onestep-worker`; make it unique per replica).
    pub worker_id: String,
}

impl ExecutionSourceOptions {
    /// Defaults for `namespace` and one `task_name`.
    pub fn new(namespace: impl Into<String>, task_name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            task_names: vec![task_name.into()],
            batch_size: 100,
            prefetch: 0,
            poll_interval_s: 1.0,
            lease_duration_s: 90.0,
            heartbeat_interval_s: 30.0,
            worker_id: "onestep-worker".to_string(),
        }
    }

    /// Checks every option; `prefix` qualifies field names (e.g. `resources.jobs.`).
    pub fn validate(&self, prefix: &str) -> Result<()> {
        let field = |f: &str| format!("{prefix}{f}");
        let invalid = |f: &str, m: String| Error::invalid(field(f), m);
        name("namespace", &self.namespace, 255).map_err(|e| requalify(e, prefix))?;
        if self.task_names.len() != 1 {
            return Err(invalid(
                "task_names",
                format!(
                    "must contain exactly one task name, got {}",
                    self.task_names.len()
                ),
            ));
        }
        name("task_names", &self.task_names[0], 255).map_err(|e| requalify(e, prefix))?;
        if self.batch_size < 1 {
            return Err(invalid("batch_size", "must be >= 1, got 0".into()));
        }
        if self.prefetch > MAX_PREFETCH {
            return Err(invalid(
                "prefetch",
                format!("must be <= {MAX_PREFETCH}, got {}", self.prefetch),
            ));
        }
        for (name, value) in [
            ("poll_interval_s", self.poll_interval_s),
            ("lease_duration_s", self.lease_duration_s),
            ("heartbeat_interval_s", self.heartbeat_interval_s),
        ] {
            if !(value.is_finite() && value > 0.0 && value <= crate::clock::MAX_SECONDS) {
                return Err(invalid(
                    name,
                    format!("must be a finite number > 0, got {value}"),
                ));
            }
        }
        let third = self.lease_duration_s / 3.0;
        let close = (self.heartbeat_interval_s - third).abs()
            <= 1e-9 * third.abs().max(self.heartbeat_interval_s.abs());
        if self.heartbeat_interval_s > third && !close {
            return Err(invalid(
                "heartbeat_interval_s",
                format!(
                    "must be <= lease_duration_s / 3 ({third}), got {}",
                    self.heartbeat_interval_s
                ),
            ));
        }
        name("worker_id", &self.worker_id, 255).map_err(|e| requalify(e, prefix))?;
        Ok(())
    }
}

fn requalify(err: ExecutionError, prefix: &str) -> Error {
    match err {
        ExecutionError::InvalidArgument { field, message } => {
            Error::invalid(format!("{prefix}{field}"), message)
        }
        other => other.into(),
    }
}

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
    options: ExecutionSourceOptions,
    name: String,
    completer: OnceLock<Completer>,
    heartbeater: OnceLock<Arc<Heartbeater<B>>>,
    /// Claimed, not yet handed to the runner (`options.prefetch`), with when each was claimed.
    prefetched: Mutex<std::collections::VecDeque<(ExecutionLease, std::time::Instant)>>,
}

/// The largest prefetch buffer ([`ExecutionSourceOptions::prefetch`]).
pub const MAX_PREFETCH: usize = 10_000;

/// The most completions one batch carries.
const COMPLETION_BATCH: usize = 256;

/// A completion waiting for the batch writer, with where to send its outcome.
struct CompletionJob {
    ids: (Uuid, Uuid, Uuid),
    completion: ExecutionCompletion,
    reply: tokio::sync::oneshot::Sender<ExecutionResult<Execution>>,
}

/// The per-source task that writes completions in batches, and the way to reach it.
struct Completer {
    jobs: tokio::sync::mpsc::UnboundedSender<CompletionJob>,
    _task: AbortOnDropHandle<()>,
}

/// How many completion batches one source writes at the same time. A batch is one transaction
/// and one commit; while one waits for its commit the next can be on its way, so handlers that
/// finish during a write do not wait for it before theirs starts.
const COMPLETION_WRITERS: usize = 2;

/// Writes completions in batches: waits for one, lets the other in-flight completions arrive,
/// takes up to [`COMPLETION_BATCH`], and completes them with one `complete_many`, with up to
/// [`COMPLETION_WRITERS`] batches in flight (distinct executions: their row locks never meet).
/// Each completion keeps its own lease fencing; only the transaction and the commit are shared.
/// When the queue closes, what is queued is written and every batch in flight finishes.
async fn completion_loop<B: LeasedExecutionBackend + Clone + 'static>(
    backend: B,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<CompletionJob>,
) {
    let mut writing = tokio::task::JoinSet::new();
    let mut batch: Vec<CompletionJob> = Vec::new();
    let mut open = true;
    while open || !batch.is_empty() {
        if batch.is_empty() {
            tokio::select! {
                job = jobs.recv() => match job {
                    Some(job) => batch.push(job),
                    None => open = false,
                },
                Some(_) = writing.join_next(), if !writing.is_empty() => {}
            }
            if batch.is_empty() {
                continue;
            }
            // Let the other completions of this burst arrive.
            tokio::task::yield_now().await;
        }
        while open && batch.len() < COMPLETION_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        if writing.len() >= COMPLETION_WRITERS {
            // Every writer is busy: keep gathering until one is free.
            tokio::select! {
                _ = writing.join_next() => {}
                job = jobs.recv(), if open && batch.len() < COMPLETION_BATCH => match job {
                    Some(job) => batch.push(job),
                    None => open = false,
                },
            }
            continue;
        }
        writing.spawn(write_completions(
            backend.clone(),
            std::mem::take(&mut batch),
        ));
    }
    while writing.join_next().await.is_some() {}
}

/// Writes one batch of completions and answers each; if the batch fails as a whole, each
/// completion is written on its own so it gets its own answer.
async fn write_completions<B: LeasedExecutionBackend>(backend: B, batch: Vec<CompletionJob>) {
    let items = batch
        .iter()
        .map(|j| (j.ids.0, j.ids.1, j.ids.2, j.completion.clone()))
        .collect();
    match backend.complete_many(items).await {
        Ok(results) if results.len() == batch.len() => {
            for (job, result) in batch.into_iter().zip(results) {
                let _ = job.reply.send(result);
            }
        }
        _ => {
            for job in batch {
                let (e, a, t) = job.ids;
                let _ = job
                    .reply
                    .send(backend.complete(e, a, t, job.completion).await);
            }
        }
    }
}

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
            backend,
            options,
            name,
            completer: OnceLock::new(),
            heartbeater: OnceLock::new(),
            prefetched: Mutex::new(std::collections::VecDeque::new()),
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
                    Duration::from_secs_f64(self.options.heartbeat_interval_s),
                    Duration::from_secs_f64(self.options.lease_duration_s),
                )
            })
            .clone()
    }

    fn buffer(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(ExecutionLease, std::time::Instant)>>
    {
        // A panic while the lock was held cannot leave the queue half-changed.
        self.prefetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes up to `limit` prefetched leases, oldest first, and every buffered lease claimed more
    /// than a heartbeat interval ago (stale: to hand back, not to start).
    fn take_prefetched(&self, limit: usize) -> (Vec<ExecutionLease>, Vec<ExecutionLease>) {
        let fresh_for = Duration::from_secs_f64(self.options.heartbeat_interval_s);
        let mut buffer = self.buffer();
        let (mut take, mut stale) = (Vec::new(), Vec::new());
        while let Some((lease, claimed_at)) = buffer.pop_front() {
            if claimed_at.elapsed() > fresh_for {
                stale.push(lease);
            } else if take.len() < limit {
                take.push(lease);
            } else {
                buffer.push_front((lease, claimed_at));
                break;
            }
        }
        (take, stale)
    }

    /// Hands claimed, unstarted executions back (each is queued again, claimable at once).
    async fn hand_back(&self, leases: Vec<ExecutionLease>) {
        for lease in leases {
            if let Err(err) = self
                .backend
                .release(lease.execution.id, lease.attempt_id, lease.lease_token)
                .await
            {
                tracing::warn!(source = %self.name, execution_id = %lease.execution.id, error = %err, "could not hand back a prefetched execution; its lease will expire");
            }
        }
    }

    fn deliveries(&self, leases: Vec<ExecutionLease>) -> Vec<Box<dyn Delivery>> {
        leases
            .into_iter()
            .map(|lease| Box::new(self.delivery(lease)) as Box<dyn Delivery>)
            .collect()
    }

    fn delivery(&self, lease: ExecutionLease) -> ExecutionDelivery<B> {
        let mut meta = lease.execution.metadata.clone();
        meta.insert(
            RESERVED_METADATA_KEY.into(),
            json!({"id": lease.execution.id.to_string(), "attempt_id": lease.attempt_id.to_string()}),
        );
        let envelope = Envelope {
            body: lease.execution.payload.clone(),
            meta,
            attempts: lease.execution.attempts.saturating_sub(1),
        };
        ExecutionDelivery {
            backend: self.backend.clone(),
            envelope,
            execution_id: lease.execution.id,
            attempt_id: lease.attempt_id,
            lease_token: lease.lease_token,
            lease: Arc::new(LeaseState {
                expires_at: Mutex::new(lease.lease_expires_at),
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

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> Resource for ExecutionSource<B> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn open(&self) -> Result<()> {
        self.backend.open().await.map_err(Error::from)
    }

    async fn close(&self) -> Result<()> {
        self.backend.close().await.map_err(Error::from)
    }
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> Source for ExecutionSource<B> {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        let limit = limit.clamp(1, self.options.batch_size);
        let (mut leases, stale) = self.take_prefetched(limit);
        self.hand_back(stale).await;
        if leases.len() == limit {
            return Ok(self.deliveries(leases));
        }
        // Claim what the runner still wants plus what refills the buffer, at most a batch.
        let want = (limit - leases.len() + self.options.prefetch).min(self.options.batch_size);
        let claimed = self
            .backend
            .claim(
                &self.options.namespace,
                &self.options.task_names,
                want,
                Duration::from_secs_f64(self.options.lease_duration_s),
                &self.options.worker_id,
            )
            .await
            .map_err(|err| match err {
                ExecutionError::Connector(mut c) => {
                    c.operation = ConnectorOperation::Fetch;
                    c.source_name = self.name.clone();
                    c.retry_delay
                        .get_or_insert(Duration::from_secs_f64(self.options.poll_interval_s));
                    Error::Connector(c)
                }
                other => other.into(),
            });
        let claimed = match claimed {
            Ok(claimed) => claimed,
            // What came from the buffer is claimed already: run it, report the error next time.
            Err(err) if leases.is_empty() => return Err(err),
            Err(err) => {
                tracing::warn!(source = %self.name, error = %err, "claim failed; running the prefetched executions");
                Vec::new()
            }
        };
        let mut claimed = claimed.into_iter();
        let missing = limit - leases.len();
        leases.extend(claimed.by_ref().take(missing));
        let now = std::time::Instant::now();
        self.buffer().extend(claimed.map(|lease| (lease, now)));
        Ok(self.deliveries(leases))
    }

    async fn return_unstarted(&self) -> Result<()> {
        let buffered: Vec<ExecutionLease> = self.buffer().drain(..).map(|(l, _)| l).collect();
        self.hand_back(buffered).await;
        Ok(())
    }

    fn batch_size(&self) -> usize {
        self.options.batch_size
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_secs_f64(self.options.poll_interval_s)
    }

    fn fetch_is_cancel_safe(&self) -> bool {
        false
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
        m.insert("prefetch".into(), Value::from(o.prefetch));
        m.insert("poll_interval_s".into(), Value::from(o.poll_interval_s));
        m.insert("lease_duration_s".into(), Value::from(o.lease_duration_s));
        m.insert(
            "heartbeat_interval_s".into(),
            Value::from(o.heartbeat_interval_s),
        );
        m.insert("worker_id".into(), Value::from(o.worker_id.clone()));
        m
    }
}

/// State shared between a delivery and the source's lease renewer.
struct LeaseState {
    expires_at: Mutex<OffsetDateTime>,
    cancel_requested: AtomicBool,
    /// Fired on a cancel request or a lost lease: the handler must stop.
    cancel: CancellationToken,
}

/// One claimed execution.
struct ExecutionDelivery<B> {
    backend: B,
    envelope: Envelope,
    execution_id: Uuid,
    attempt_id: Uuid,
    lease_token: Uuid,
    lease: Arc<LeaseState>,
    /// The source's lease renewer.
    heartbeats: Arc<Heartbeater<B>>,
    /// Whether the renewer holds this delivery's lease (from start until completion).
    heartbeating: bool,
    completed: Option<Execution>,
    /// The source's batch writer; `None` completes directly.
    completions: Option<tokio::sync::mpsc::UnboundedSender<CompletionJob>>,
}

impl<B: LeasedExecutionBackend + Clone + 'static> ExecutionDelivery<B> {
    fn stop_heartbeat(&mut self) {
        if std::mem::take(&mut self.heartbeating) {
            self.heartbeats.stop(self.attempt_id);
        }
    }

    async fn complete(&mut self, completion: ExecutionCompletion) -> Result<()> {
        self.complete_execution(completion)
            .await
            .map(|_| ())
            .map_err(Error::from)
    }
}

impl<B> Drop for ExecutionDelivery<B> {
    /// A delivery dropped before its completion (a runner that gave up on it) stops renewing
    /// its lease, so the lease expires and the work is reclaimed.
    fn drop(&mut self) {
        if self.heartbeating {
            self.heartbeats.stop(self.attempt_id);
        }
    }
}

/// The most leases one `heartbeat_many` renews.
const HEARTBEAT_BATCH: usize = 500;

/// A started delivery's lease, as the source's renewer keeps it.
struct Renewal {
    ids: (Uuid, Uuid, Uuid),
    lease: Arc<LeaseState>,
    /// When it is renewed next.
    due: tokio::time::Instant,
    /// Renewals in a row that failed with a retryable error.
    failures: u32,
    /// A renewal of it is in flight (a round, its own heartbeat or a retry): ticks skip it.
    busy: bool,
}

/// The leases a [`Heartbeater`] keeps, by attempt id.
type Renewals = std::collections::HashMap<Uuid, Renewal>;

fn renewals(m: &Mutex<Renewals>) -> std::sync::MutexGuard<'_, Renewals> {
    // Every change under the lock is an insert, a remove or a few field writes of one entry.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One task per source that keeps every started delivery's lease alive. It ticks every half
/// interval and renews all leases due before the next tick with one
/// [`heartbeat_many`](LeasedExecutionBackend::heartbeat_many) per round, so each lease is renewed
/// between half an interval and one interval after its start or last renewal, and a worker
/// running 500 long executions sends two renewal transactions per interval, not 500. Starting
/// and finishing a delivery only touch a map.
///
/// A round runs in a task of its own, so the tick never waits for the database. A round that
/// fails, or has no answer within half an interval (a row lock held elsewhere), is retried as one
/// heartbeat per lease, each in its own task, so one stuck lease cannot hold up the others. A
/// lease whose renewal fails with a retryable error is retried on its own timer (after the
/// interval, doubling, at most a quarter of what remains of the lease), as long as the lease
/// lasts. On a lost lease or a cancel request it fires that delivery's cancellation token and
/// stops renewing it.
struct Heartbeater<B> {
    renewer: Renewer<B>,
    /// The ticking task, (re)started by [`Heartbeater::keep`] when it is not running.
    task: Mutex<Option<AbortOnDropHandle<()>>>,
}

impl<B: LeasedExecutionBackend + Clone + 'static> Heartbeater<B> {
    fn new(backend: B, interval: Duration, lease_duration: Duration) -> Arc<Self> {
        Arc::new(Self {
            renewer: Renewer {
                backend,
                renewals: Arc::new(Mutex::new(Renewals::new())),
                interval,
                lease_duration,
            },
            task: Mutex::new(None),
        })
    }

    /// Starts renewing a lease: first between half an interval and one interval from now.
    fn keep(&self, ids: (Uuid, Uuid, Uuid), lease: Arc<LeaseState>) {
        let due = tokio::time::Instant::now() + self.renewer.interval;
        renewals(&self.renewer.renewals).insert(
            ids.1,
            Renewal {
                ids,
                lease,
                due,
                failures: 0,
                busy: false,
            },
        );
        // The ticking task runs in the runtime that kept the first lease; if it is gone (that
        // runtime shut down), start another here.
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_none_or(|t| t.is_finished()) {
            *task = Some(AbortOnDropHandle::new(tokio::spawn(renew_loop(
                self.renewer.clone(),
            ))));
        }
    }
}

impl<B> Heartbeater<B> {
    /// Stops renewing the lease of an attempt.
    fn stop(&self, attempt_id: Uuid) {
        renewals(&self.renewer.renewals).remove(&attempt_id);
    }
}

/// What the renewer's tasks share.
#[derive(Clone)]
struct Renewer<B> {
    backend: B,
    renewals: Arc<Mutex<Renewals>>,
    interval: Duration,
    lease_duration: Duration,
}

/// The renewer's ticks (see [`Heartbeater`]).
async fn renew_loop<B: LeasedExecutionBackend + Clone + 'static>(r: Renewer<B>) {
    // A period of zero would panic; validation only asks for a positive interval.
    let half = (r.interval / 2).max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + half, half);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Times are the ticks' schedule, not the clock after a round trip: a lease renewed at a
        // tick is due again exactly two ticks later, so leases renewed together stay together.
        let tick = ticks.tick().await;
        let horizon = tick + half;
        let due: Vec<(Uuid, Uuid, Uuid)> = renewals(&r.renewals)
            .values_mut()
            .filter(|l| !l.busy && l.due < horizon)
            .map(|l| {
                l.busy = true;
                l.ids
            })
            .collect();
        for chunk in due.chunks(HEARTBEAT_BATCH) {
            tokio::spawn(renew_round(r.clone(), chunk.to_vec(), tick, half));
        }
    }
}

/// Renews one round of leases together; falls back to one heartbeat per lease when the round
/// fails or takes longer than `limit`.
async fn renew_round<B: LeasedExecutionBackend + Clone + 'static>(
    r: Renewer<B>,
    leases: Vec<(Uuid, Uuid, Uuid)>,
    tick: tokio::time::Instant,
    limit: Duration,
) {
    let batch =
        tokio::time::timeout(limit, r.backend.heartbeat_many(&leases, r.lease_duration)).await;
    match batch {
        Ok(Ok(results)) if results.len() == leases.len() => {
            for (ids, result) in leases.into_iter().zip(results) {
                settle_renewal(&r, ids, result, tick).await;
            }
        }
        failed => {
            if let Ok(Err(err)) = &failed {
                tracing::debug!(error = %err, leases = leases.len(), "batched heartbeat failed; renewing one by one");
            } else {
                tracing::debug!(
                    leases = leases.len(),
                    "batched heartbeat too slow; renewing one by one"
                );
            }
            for ids in leases {
                tokio::spawn(renew_one(r.clone(), ids));
            }
        }
    }
}

/// Renews one lease on its own. (Boxed: a retry spawns it again from `settle_renewal`, and the
/// compiler cannot see through that cycle that the future is `Send`.)
fn renew_one<B: LeasedExecutionBackend + Clone + 'static>(
    r: Renewer<B>,
    ids: (Uuid, Uuid, Uuid),
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let result = r
            .backend
            .heartbeat(ids.0, ids.1, ids.2, r.lease_duration)
            .await;
        settle_renewal(&r, ids, result, tokio::time::Instant::now()).await;
    })
}

/// Applies one lease's renewal: a new expiry, a cancel request, a lost lease, or a retry on its
/// own timer (a retryable error while the lease still has time).
async fn settle_renewal<B: LeasedExecutionBackend + Clone + 'static>(
    r: &Renewer<B>,
    ids: (Uuid, Uuid, Uuid),
    result: ExecutionResult<super::record::HeartbeatResult>,
    renewed_at: tokio::time::Instant,
) {
    let (execution_id, attempt_id, _) = ids;
    // The lease may have been completed or dropped while its renewal was in flight.
    let Some((lease, failures)) = renewals(&r.renewals)
        .get(&attempt_id)
        .map(|l| (l.lease.clone(), l.failures))
    else {
        return;
    };
    let lost = |lease: &LeaseState| {
        renewals(&r.renewals).remove(&attempt_id);
        lease.cancel.cancel();
    };
    match result {
        Ok(renewed) => {
            *lease.expires_at.lock().unwrap_or_else(|p| p.into_inner()) = renewed.lease_expires_at;
            if renewed.cancel_requested {
                tracing::info!(execution_id = %execution_id, "cancel requested; stopping the handler");
                lease.cancel_requested.store(true, Ordering::SeqCst);
                lost(&lease);
                return;
            }
            if let Some(l) = renewals(&r.renewals).get_mut(&attempt_id) {
                l.due = renewed_at + r.interval;
                l.failures = 0;
                l.busy = false;
            }
        }
        Err(err) if err.is_retryable() => {
            let expires = *lease.expires_at.lock().unwrap_or_else(|p| p.into_inner());
            let remaining = match r.backend.lease_remaining(expires).await {
                Ok(remaining) if !remaining.is_zero() => remaining,
                _ => {
                    tracing::warn!(execution_id = %execution_id, error = %err, "lease ran out while heartbeats failed; cancelling the attempt");
                    lost(&lease);
                    return;
                }
            };
            let backoff = r
                .interval
                .saturating_mul(2u32.saturating_pow(failures.min(10)))
                .min(remaining / 4);
            tracing::warn!(execution_id = %execution_id, error = %err, retry_in_s = backoff.as_secs_f64(), "heartbeat failed; retrying");
            match renewals(&r.renewals).get_mut(&attempt_id) {
                Some(l) => l.failures = failures + 1,
                None => return,
            }
            // Still busy: the ticks leave it to its own retry.
            let r = r.clone();
            tokio::spawn(async move {
                tokio::time::sleep(backoff).await;
                let kept = renewals(&r.renewals).contains_key(&ids.1);
                if kept {
                    renew_one(r, ids).await;
                }
            });
        }
        Err(err) => {
            tracing::warn!(execution_id = %execution_id, error = %err, "lease lost; cancelling the attempt");
            lost(&lease);
        }
    }
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> Delivery for ExecutionDelivery<B> {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn start_processing(&mut self) -> Result<()> {
        if !self.heartbeating && self.completed.is_none() {
            self.heartbeats.keep(
                (self.execution_id, self.attempt_id, self.lease_token),
                self.lease.clone(),
            );
            self.heartbeating = true;
        }
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.stop_heartbeat();
        self.backend
            .release(self.execution_id, self.attempt_id, self.lease_token)
            .await
            .map(|_| ())
            .map_err(Error::from)
    }

    async fn ack(&mut self) -> Result<()> {
        self.complete(ExecutionCompletion::Succeeded {
            result: Value::Null,
        })
        .await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        self.complete(ExecutionCompletion::Retrying {
            error: None,
            delay_s: delay.map(|d| d.as_secs_f64()),
        })
        .await
    }

    async fn fail(&mut self, failure: &FailureInfo) -> Result<()> {
        self.complete(ExecutionCompletion::Failed {
            error: Some(ExecutionErrorDetail::from_failure(failure)),
        })
        .await
    }

    fn as_managed(&mut self) -> Option<&mut dyn ManagedDelivery> {
        Some(self)
    }

    /// A completion is a batched write with no user code in it.
    fn frees_slot_before_ack(&self) -> bool {
        true
    }
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> ManagedDelivery for ExecutionDelivery<B> {
    fn execution_id(&self) -> Uuid {
        self.execution_id
    }

    fn attempt_id(&self) -> Uuid {
        self.attempt_id
    }

    fn cancel_requested(&self) -> bool {
        self.lease.cancel_requested.load(Ordering::SeqCst)
    }

    fn cancellation(&self) -> CancellationToken {
        self.lease.cancel.clone()
    }

    async fn validate_execution_result(&self, result: &Value) -> ExecutionResult<()> {
        self.backend.validate_result(result)
    }

    async fn complete_execution(
        &mut self,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution> {
        if let Some(done) = &self.completed {
            return Ok(done.clone());
        }
        self.stop_heartbeat();
        let succeeded = matches!(completion, ExecutionCompletion::Succeeded { .. });
        let ids = (self.execution_id, self.attempt_id, self.lease_token);
        if let Some(queue) = &self.completions {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let job = CompletionJob {
                ids,
                completion: completion.clone(),
                reply,
            };
            if queue.send(job).is_ok()
                && let Ok(outcome) = answer.await
            {
                let execution = outcome?;
                if succeeded && execution.status == ExecutionStatus::Cancelled {
                    self.lease.cancel_requested.store(true, Ordering::SeqCst);
                }
                self.completed = Some(execution.clone());
                return Ok(execution);
            }
        }
        let execution = self
            .backend
            .complete(ids.0, ids.1, ids.2, completion)
            .await?;
        if succeeded && execution.status == ExecutionStatus::Cancelled {
            self.lease.cancel_requested.store(true, Ordering::SeqCst);
        }
        self.completed = Some(execution.clone());
        Ok(execution)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::{ConnectorErrorKind, ConnectorOperationError};
    use crate::execution::record::{
        ExecutionPage, ExecutionQuery, ExecutionRequest, SubmitOptions,
    };
    use crate::execution::{ExecutionBackend, MemoryExecutionBackend};

    /// The memory backend whose heartbeats fail (retryably, as a dropped connection does) until
    /// a moment.
    #[derive(Clone)]
    struct FlakyHeartbeats {
        inner: MemoryExecutionBackend,
        failing_until: std::time::Instant,
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
                return Err(ExecutionError::Connector(ConnectorOperationError::new(
                    "flaky",
                    ConnectorOperation::Heartbeat,
                    ConnectorErrorKind::Disconnected,
                    "flaky.execution",
                )));
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
        };
        let request = ExecutionRequest::new("ns", "t", json!(1), SubmitOptions::default()).unwrap();
        let id = backend.submit(request).await.unwrap().id;
        let mut o = ExecutionSourceOptions::new("ns", "t");
        o.lease_duration_s = 6.0;
        o.heartbeat_interval_s = 2.0;
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

    /// The renewer's ticking task dies with the runtime that started it; a source used on from
    /// another runtime starts a new one with the next lease it keeps, which renews every lease
    /// the source holds (without the restart, both leases here expire and are claimed).
    #[test]
    fn a_renewer_whose_runtime_shut_down_is_started_again() {
        let inner = MemoryExecutionBackend::new();
        let mut o = ExecutionSourceOptions::new("ns", "t");
        o.lease_duration_s = 1.2;
        o.heartbeat_interval_s = 0.3;
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

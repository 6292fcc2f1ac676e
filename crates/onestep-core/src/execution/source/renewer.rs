//! The source's lease renewer: one task per source renews every started delivery's lease due
//! before its next tick with one `heartbeat_many`, and falls back to one heartbeat per lease.

use super::*;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The most leases one `heartbeat_many` renews.
pub(super) const HEARTBEAT_BATCH: usize = 500;

/// A started delivery's lease, as the source's renewer keeps it.
pub(super) struct Renewal {
    pub(super) ids: (Uuid, Uuid, Uuid),
    pub(super) lease: Arc<LeaseState>,
    /// When it is renewed next.
    pub(super) due: tokio::time::Instant,
    /// Renewals in a row that failed with a retryable error.
    pub(super) failures: u32,
    /// A renewal of it is in flight (a round, its own heartbeat or a retry): ticks skip it.
    pub(super) busy: bool,
}

/// The leases a [`Heartbeater`] keeps, by attempt id.
pub(super) type Renewals = std::collections::HashMap<Uuid, Renewal>;

pub(super) fn renewals(m: &Mutex<Renewals>) -> std::sync::MutexGuard<'_, Renewals> {
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
///
/// Every task it starts is owned: the ticks by `task` (aborted on drop), rounds, single
/// heartbeats and retry timers by the renewer's tracker, stopped when the heartbeater is dropped.
pub(super) struct Heartbeater<B> {
    pub(super) renewer: Renewer<B>,
    /// The ticking task, (re)started by [`Heartbeater::keep`] when it is not running.
    pub(super) task: Mutex<Option<AbortOnDropHandle<()>>>,
}

impl<B: LeasedExecutionBackend + Clone + 'static> Heartbeater<B> {
    pub(super) fn new(
        backend: B,
        interval: Duration,
        lease_duration: Duration,
        labels: (String, String),
    ) -> Arc<Self> {
        Arc::new(Self {
            renewer: Renewer {
                backend,
                labels: Arc::new(labels),
                renewals: Arc::new(Mutex::new(Renewals::new())),
                interval,
                lease_duration,
                tasks: TaskTracker::new(),
                stop: CancellationToken::new(),
            },
            task: Mutex::new(None),
        })
    }

    /// Starts renewing a lease: first between half an interval and one interval from now.
    pub(super) fn keep(&self, ids: (Uuid, Uuid, Uuid), lease: Arc<LeaseState>) {
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
    pub(super) fn stop(&self, attempt_id: Uuid) {
        renewals(&self.renewer.renewals).remove(&attempt_id);
    }
}

impl<B> Drop for Heartbeater<B> {
    fn drop(&mut self) {
        self.renewer.stop.cancel();
    }
}

/// What the renewer's tasks share.
#[derive(Clone)]
pub(super) struct Renewer<B> {
    pub(super) backend: B,
    pub(super) renewals: Arc<Mutex<Renewals>>,
    pub(super) interval: Duration,
    pub(super) lease_duration: Duration,
    /// The source's namespace and task, the labels of its lost-lease counter.
    pub(super) labels: Arc<(String, String)>,
    /// Rounds, single heartbeats and retry timers in flight.
    tasks: TaskTracker,
    /// Cancelled when the heartbeater goes: its tasks stop at their next await.
    stop: CancellationToken,
}

impl<B> Renewer<B> {
    /// Runs `work` in a task of the renewer's own, until it ends or the heartbeater goes.
    fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            stop.run_until_cancelled(work).await;
        });
    }
}

/// The renewer's ticks (see [`Heartbeater`]).
pub(super) async fn renew_loop<B: LeasedExecutionBackend + Clone + 'static>(r: Renewer<B>) {
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
            r.spawn(renew_round(r.clone(), chunk.to_vec(), tick, half));
        }
    }
}

/// Renews one round of leases together; falls back to one heartbeat per lease when the round
/// fails or takes longer than `limit`.
pub(super) async fn renew_round<B: LeasedExecutionBackend + Clone + 'static>(
    r: Renewer<B>,
    leases: Vec<(Uuid, Uuid, Uuid)>,
    tick: tokio::time::Instant,
    limit: Duration,
) {
    crate::metrics::execution::execution_metrics().heartbeat_batch(leases.len());
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
                r.spawn(renew_one(r.clone(), ids));
            }
        }
    }
}

/// Renews one lease on its own. (Boxed: a retry spawns it again from `settle_renewal`, and the
/// compiler cannot see through that cycle that the future is `Send`.)
pub(super) fn renew_one<B: LeasedExecutionBackend + Clone + 'static>(
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
pub(super) async fn settle_renewal<B: LeasedExecutionBackend + Clone + 'static>(
    r: &Renewer<B>,
    ids: (Uuid, Uuid, Uuid),
    result: ExecutionResult<super::super::record::HeartbeatResult>,
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
    let cancel = |lease: &LeaseState| {
        renewals(&r.renewals).remove(&attempt_id);
        lease.cancel.cancel();
    };
    let lost = |lease: &LeaseState| {
        crate::metrics::execution::execution_metrics().lease_lost(&r.labels.0, &r.labels.1);
        cancel(lease);
    };
    match result {
        Ok(renewed) => {
            *lease.expires_at.lock().unwrap_or_else(|p| p.into_inner()) = renewed.lease_expires_at;
            if renewed.cancel_requested {
                tracing::info!(execution_id = %execution_id, "cancel requested; stopping the handler");
                lease.cancel_requested.store(true, Ordering::SeqCst);
                cancel(&lease);
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
            let again = r.clone();
            r.spawn(async move {
                tokio::time::sleep(backoff).await;
                let kept = renewals(&again.renewals).contains_key(&ids.1);
                if kept {
                    renew_one(again, ids).await;
                }
            });
        }
        Err(err) => {
            tracing::warn!(execution_id = %execution_id, error = %err, "lease lost; cancelling the attempt");
            lost(&lease);
        }
    }
}

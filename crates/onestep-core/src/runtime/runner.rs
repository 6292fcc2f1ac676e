//! One task runner: fetch into free slots, execute, back off on retryable errors, stop gracefully.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::TaskRuntime;
use super::control::{Control, ControlState, RunnerStatus};
use super::executor::execute;
use crate::delivery::Delivery;
use crate::error::{Error, Result};
use crate::event::TaskEventKind;
use crate::source::Source;

/// How long a busy runner waits for more slots to free up before fetching anyway.
const COALESCE_WAIT: Duration = Duration::from_millis(20);

/// How many deliveries a runner keeps in flight (running or settling) per slot. A delivery that
/// frees its slot before its ack (see `Delivery::frees_slot_before_ack`) stays in flight until
/// settled; this bounds the work a runner holds while its backend commits.
const IN_FLIGHT_PER_SLOT: usize = 2;

/// How long a runner waits for in-flight work at shutdown, and for cancelled work to clean up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShutdownBudget {
    pub(crate) timeout: Option<Duration>,
    pub(crate) cleanup: Duration,
}

pub(crate) struct Runner {
    rt: Arc<TaskRuntime>,
    source: Arc<dyn Source>,
    control: Arc<Control>,
    budget: ShutdownBudget,
    /// Every delivery this runner started and has not finished settling.
    inflight: JoinSet<()>,
    /// The task's concurrency: one permit per delivery whose attempt is still running.
    slots: Arc<Semaphore>,
    /// Cancels every in-flight attempt of this runner (shutdown past its timeout).
    attempts: CancellationToken,
}

impl Runner {
    pub(crate) fn new(
        rt: Arc<TaskRuntime>,
        source: Arc<dyn Source>,
        control: Arc<Control>,
        budget: ShutdownBudget,
    ) -> Self {
        Self {
            source,
            control,
            budget,
            inflight: JoinSet::new(),
            slots: Arc::new(Semaphore::new(concurrency(&rt))),
            attempts: CancellationToken::new(),
            rt,
        }
    }

    fn task(&self) -> &str {
        &self.rt.task_name
    }

    /// How many deliveries may start now: free slots, within the bound on settling work.
    fn free(&self) -> usize {
        let bound = concurrency(&self.rt).saturating_mul(IN_FLIGHT_PER_SLOT);
        self.slots
            .available_permits()
            .min(bound.saturating_sub(self.inflight.len()))
    }

    /// Whether the slots (not the bound on settling work) are what holds the runner back from
    /// starting `wanted` more deliveries.
    fn short_of_slots(&self, wanted: usize) -> bool {
        self.slots.available_permits() < wanted
    }

    /// Runs until shutdown (Ok) or a non-retryable source error (Err, after in-flight work ended).
    pub(crate) async fn run(mut self) -> Result<()> {
        let mut control = self.control.state.subscribe();
        self.control.set_status(self.task(), RunnerStatus::Running);
        let result = self.fetch_loop(&mut control).await;
        self.return_unstarted().await;
        self.finish().await;
        self.control.set_status(self.task(), RunnerStatus::Stopped);
        result
    }

    async fn fetch_loop(&mut self, control: &mut watch::Receiver<ControlState>) -> Result<()> {
        let task = self.rt.task_name.clone();
        let concurrency = concurrency(&self.rt);
        // Whether the runner already waited for more free slots since its last fetch.
        let mut gathered = false;
        loop {
            self.reap();
            let state = control.borrow_and_update().clone();
            if state.shutdown {
                return Ok(());
            }
            if state.stops_fetching(&task) {
                self.park(control).await;
                continue;
            }
            let free = self.free();
            if free == 0 {
                let slots = self.slots.clone();
                let short_of_slots = self.short_of_slots(1);
                tokio::select! {
                    _ = self.inflight.join_next() => {}
                    _ = slots.acquire(), if short_of_slots => {}
                    _ = control.changed() => {}
                }
                continue;
            }
            // A fetch costs about the same for one delivery as for many (a claim is one
            // transaction), so while work is in flight, wait briefly for a quarter of the slots
            // to free up before fetching; idle runners fetch at once.
            let worth_fetching = (concurrency / 4).clamp(1, self.source.batch_size().max(1));
            if free < worth_fetching && !self.inflight.is_empty() && !gathered {
                gathered = true;
                let gather = COALESCE_WAIT.min(self.source.poll_interval());
                let deadline = tokio::time::Instant::now() + gather;
                while self.free() < worth_fetching {
                    let slots = self.slots.clone();
                    let short_of_slots = self.short_of_slots(worth_fetching);
                    let wanted = u32::try_from(worth_fetching).unwrap_or(u32::MAX);
                    tokio::select! {
                        done = self.inflight.join_next() => match done {
                            Some(done) => log_join(&task, done),
                            None => break,
                        },
                        _ = slots.acquire_many(wanted), if short_of_slots => {}
                        _ = tokio::time::sleep_until(deadline) => break,
                        _ = control.changed() => break,
                    }
                }
                continue;
            }

            gathered = false;
            let fetched = {
                let fetch = self.source.fetch(free);
                tokio::pin!(fetch);
                tokio::select! {
                    biased;
                    result = &mut fetch => Some(result),
                    _ = wait_stop(control, &task) => {
                        if self.source.fetch_is_cancel_safe() {
                            None
                        } else {
                            // The fetch may have claimed work: let it finish, then hand it back.
                            if let Ok(deliveries) = fetch.await {
                                self.release_all(deliveries).await;
                            }
                            None
                        }
                    }
                }
            };
            let Some(fetched) = fetched else { continue };

            match fetched {
                Err(err) => match err.as_connector() {
                    Some(c) if c.is_retryable() => {
                        let delay = c.backoff(self.source.poll_interval());
                        tracing::warn!(task = %task, error = %err, delay_s = delay.as_secs_f64(), "fetch failed; backing off");
                        sleep_unless_stopped(delay, control, &task).await;
                    }
                    _ => {
                        tracing::error!(task = %task, error = %err, "fetch failed; stopping the app");
                        return Err(err);
                    }
                },
                Ok(deliveries) if deliveries.is_empty() => {
                    tokio::select! {
                        _ = self.source.wait_ready(self.source.poll_interval()) => {}
                        _ = wait_stop(control, &task) => {}
                    }
                }
                Ok(deliveries) => {
                    if control.borrow().stops_fetching(&task) {
                        self.release_all(deliveries).await;
                        continue;
                    }
                    let mut deliveries = deliveries;
                    if deliveries.len() > free {
                        tracing::error!(task = %task, asked = free, got = deliveries.len(), "the source returned more deliveries than it was asked for; handing the rest back");
                        let extra = deliveries.split_off(free);
                        self.release_all(extra).await;
                    }
                    let mut deliveries = deliveries.into_iter();
                    for delivery in deliveries.by_ref() {
                        // `free` counted the permits. Only this loop takes new ones, except an
                        // execution whose ack failed after it freed its slot early: it takes one
                        // back for its failure path, and then a fetched delivery is handed back.
                        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                            tracing::error!(task = %task, "no free slot for a fetched delivery; handing it back");
                            self.release_all(std::iter::once(delivery).collect()).await;
                            break;
                        };
                        self.rt
                            .emit(TaskEventKind::Fetched, delivery.envelope(), None, None);
                        let token = self.attempts.child_token();
                        self.inflight
                            .spawn(execute(self.rt.clone(), delivery, token, slot));
                    }
                    self.release_all(deliveries.collect()).await;
                }
            }
        }
    }

    /// Drops finished executions from the in-flight set without waiting.
    fn reap(&mut self) {
        while let Some(done) = self.inflight.try_join_next() {
            log_join(&self.rt.task_name, done);
        }
    }

    /// Waits for in-flight work, reports Parked, and waits until fetching may resume or shutdown.
    async fn park(&mut self, control: &mut watch::Receiver<ControlState>) {
        let task = self.rt.task_name.clone();
        self.return_unstarted().await;
        while !self.inflight.is_empty() {
            tokio::select! {
                done = self.inflight.join_next() => if let Some(done) = done { log_join(&task, done) },
                _ = control.changed() => {
                    if control.borrow().shutdown { return; }
                }
            }
        }
        self.control.set_status(&task, RunnerStatus::Parked);
        let _ = control
            .wait_for(|s| s.shutdown || !s.stops_fetching(&task))
            .await;
        if !control.borrow().shutdown {
            self.source.resume_after_pause();
            self.control.set_status(&task, RunnerStatus::Running);
        }
    }

    /// Lets the source hand back work it claimed ahead and never returned.
    async fn return_unstarted(&self) {
        if let Err(err) = self.source.return_unstarted().await {
            tracing::error!(task = %self.rt.task_name, error = %err, "could not hand back prefetched deliveries");
        }
    }

    async fn release_all(&self, deliveries: Vec<Box<dyn Delivery>>) {
        for mut delivery in deliveries {
            if let Err(err) = delivery.release_unstarted().await {
                tracing::error!(task = %self.rt.task_name, error = %err, "could not release an unstarted delivery");
            }
        }
    }

    /// Waits for in-flight work within the shutdown timeout, then cancels what is left and gives it
    /// the cleanup budget to settle (cancelled deliveries are retried), then aborts.
    async fn finish(&mut self) {
        let task = self.rt.task_name.clone();
        if self.inflight.is_empty() {
            return;
        }
        tracing::info!(task = %task, inflight = self.inflight.len(), "waiting for in-flight deliveries");
        let finished = match self.budget.timeout {
            None => {
                join_all(&mut self.inflight, &task).await;
                true
            }
            Some(limit) => tokio::time::timeout(limit, join_all(&mut self.inflight, &task))
                .await
                .is_ok(),
        };
        if finished {
            return;
        }
        tracing::warn!(task = %task, inflight = self.inflight.len(), "shutdown timeout reached; cancelling in-flight deliveries");
        self.attempts.cancel();
        if tokio::time::timeout(self.budget.cleanup, join_all(&mut self.inflight, &task))
            .await
            .is_err()
        {
            tracing::error!(task = %task, inflight = self.inflight.len(), "in-flight cleanup exceeded its budget; aborting");
            self.inflight.abort_all();
            join_all(&mut self.inflight, &task).await;
        }
    }
}

/// The task's concurrency (at least one slot).
fn concurrency(rt: &TaskRuntime) -> usize {
    rt.task.concurrency.clamp(1, Semaphore::MAX_PERMITS)
}

async fn join_all(set: &mut JoinSet<()>, task: &str) {
    while let Some(done) = set.join_next().await {
        log_join(task, done);
    }
}

fn log_join(task: &str, done: Result<(), tokio::task::JoinError>) {
    if let Err(err) = done
        && err.is_panic()
    {
        tracing::error!(task = %task, "a delivery's execution panicked outside the handler");
    }
}

async fn wait_stop(control: &mut watch::Receiver<ControlState>, task: &str) {
    let _ = control.wait_for(|s| s.stops_fetching(task)).await;
}

async fn sleep_unless_stopped(
    delay: Duration,
    control: &mut watch::Receiver<ControlState>,
    task: &str,
) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = wait_stop(control, task) => {}
    }
}

impl From<tokio::task::JoinError> for Error {
    fn from(err: tokio::task::JoinError) -> Self {
        Error::other(err)
    }
}

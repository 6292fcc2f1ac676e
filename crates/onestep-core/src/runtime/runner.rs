//! One task runner: fetch into free slots, execute, back off on retryable errors, stop gracefully.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::TaskRuntime;
use super::control::{Control, ControlState, RunnerStatus};
use super::executor::execute;
use crate::delivery::Delivery;
use crate::error::{Error, Result};
use crate::event::TaskEventKind;
use crate::source::Source;
use tracing::Instrument;

/// How long a busy runner waits for more slots to free up before fetching anyway.
const COALESCE_WAIT: Duration = Duration::from_millis(20);

/// How many deliveries a runner keeps in flight (running or settling) per slot. A delivery that
/// frees its slot before its ack (see `Delivery::frees_slot_before_ack`) stays in flight until
/// settled; this bounds the work a runner holds while its backend commits. Three, not two: in a
/// burn-down at 128 slots the one completion writer was busy ~75 % of the time, and with two
/// per slot the claims stopped while it wrote; three drained PostgreSQL 3–8 % and MariaDB 2–5 %
/// faster (every alternating round) with fewer, fuller batches. Four, five and six measured no
/// better (five and six: 4 alternating rounds on PostgreSQL, 2026-12-05), and every delivery held
/// past the running slots has run but is not stored: a killed worker's are run again.
const IN_FLIGHT_PER_SLOT: usize = 3;

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
    /// Fetches under way ([`Source::concurrent_fetches`] at most).
    fetches: JoinSet<Fetched>,
    /// Free slots promised to the fetches under way: what they asked for.
    reserved: usize,
    /// A fetch under way answered empty: no new fetch until the others have answered too.
    quiet: bool,
}

/// A fetch's answer, with how many deliveries it asked for.
struct Fetched {
    asked: usize,
    result: Result<Vec<Box<dyn Delivery>>>,
}

/// What holds the next fetch back: a backoff, or a wait for work after an empty fetch.
type Pause = Pin<Box<dyn Future<Output = ()> + Send>>;

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
            fetches: JoinSet::new(),
            reserved: 0,
            quiet: false,
            rt,
        }
    }

    fn task(&self) -> &str {
        &self.rt.task_name
    }

    /// How many more deliveries a new fetch may ask for, with `available` free slots: those not
    /// promised to a fetch under way, within the bound on settling work.
    fn free(&self, available: usize) -> usize {
        let unpromised = self
            .in_flight_bound()
            .saturating_sub(self.inflight.len() + self.reserved);
        available.saturating_sub(self.reserved).min(unpromised)
    }

    /// The most deliveries in flight, running or settling.
    fn in_flight_bound(&self) -> usize {
        concurrency(&self.rt).saturating_mul(IN_FLIGHT_PER_SLOT)
    }

    /// Runs until shutdown (Ok) or a non-retryable source error (Err, after in-flight work ended).
    pub(crate) async fn run(mut self) -> Result<()> {
        let mut control = self.control.state.subscribe();
        self.control.set_status(self.task(), RunnerStatus::Running);
        let result = self.fetch_loop(&mut control).await;
        self.settle_fetches().await;
        self.return_unstarted().await;
        self.finish().await;
        self.control.set_status(self.task(), RunnerStatus::Stopped);
        result
    }

    async fn fetch_loop(&mut self, control: &mut watch::Receiver<ControlState>) -> Result<()> {
        let task = self.rt.task_name.clone();
        let concurrency = concurrency(&self.rt);
        let most_fetches = self.source.concurrent_fetches().max(1);
        let batch_size = self.source.batch_size().max(1);
        // With fetches side by side, one asks for at most a batch, so the slots it cannot fill
        // stay free for the next. (With one, a source's own batch size may be a default it
        // does not keep to, and nothing else could use the slots anyway.)
        let most_asked = match most_fetches {
            1 => usize::MAX,
            _ => batch_size,
        };
        // A fetch costs about the same for one delivery as for many (a claim is one
        // transaction), so while work is in flight, wait briefly for half of the slots to free
        // up before fetching; idle runners fetch at once. Half rather than a quarter: a
        // quarter sent claims of ~32 rows at 128 slots, a third more write transactions per
        // execution on PostgreSQL for no faster drain, and on MariaDB two claims of that size
        // overlapped no better than one. Three quarters, or all of them, drained slower in
        // every round: larger claims, but the slots wait longer for them.
        let worth_fetching = (concurrency / 2).clamp(1, batch_size);
        let gather = COALESCE_WAIT.min(self.source.poll_interval());
        // When the runner fetches with fewer than `worth_fetching` free slots anyway.
        let mut gather_until: Option<Instant> = None;
        // After an empty fetch or a failed one: no new fetch until this resolves.
        let mut waiting: Option<Pause> = None;
        loop {
            self.reap();
            let state = control.borrow_and_update().clone();
            if state.stops_fetching(&task) {
                self.settle_fetches().await;
                waiting = None;
                gather_until = None;
                if state.shutdown {
                    return Ok(());
                }
                self.park(control).await;
                continue;
            }

            // One reading of the free slots decides both whether to fetch and what to wait for
            // below. Read twice, a slot freed in between (every slot busy at the first reading,
            // one free at the second) left the runner waiting for nothing, and nothing woke it.
            let available = self.slots.available_permits();
            let free = self.free(available);
            let may_fetch = waiting.is_none() && !self.quiet && self.fetches.len() < most_fetches;
            if may_fetch && free > 0 {
                let busy = !self.inflight.is_empty() || !self.fetches.is_empty();
                let now = Instant::now();
                if free >= worth_fetching || !busy || gather_until.is_some_and(|t| now >= t) {
                    gather_until = None;
                    self.start_fetch(free.min(most_asked));
                    continue;
                }
                gather_until.get_or_insert(now + gather);
            }

            // Wait for whatever lets the runner move on: a fetch's answer, a finished delivery,
            // enough free slots for the next fetch, the end of a pause, or a control change.
            // Permits count the slots promised to fetches under way as free. While it waits, this
            // acquire holds the permits it got so far; an executor taking a slot back for a
            // failed ack's failure path (see `fetched`) queues behind it until the select ends.
            let wanted = if free == 0 { 1 } else { worth_fetching };
            let permits = (self.reserved + wanted).min(concurrency);
            let short_of_slots = may_fetch && available < permits;
            let permits = u32::try_from(permits).unwrap_or(u32::MAX);
            let gathering = may_fetch && free > 0;
            // Finished deliveries wake the runner only when the bound on settling work is what
            // holds the next fetch back: otherwise freed slots do (above), and the finished
            // ones are reaped at the top of the loop. A wake-up per delivery cost a task switch
            // for every execution.
            let held_by_bound =
                may_fetch && self.inflight.len() + self.reserved + wanted > self.in_flight_bound();
            let slots = self.slots.clone();
            tokio::select! {
                Some(done) = self.fetches.join_next(), if !self.fetches.is_empty() => {
                    // A backoff already running is kept: it outranks a wait for work.
                    if let Some(pause) = self.fetched(done, control).await?
                        && waiting.is_none()
                    {
                        waiting = Some(pause);
                    }
                }
                Some(done) = self.inflight.join_next(), if held_by_bound && !self.inflight.is_empty() => {
                    log_join(&task, done);
                }
                _ = slots.acquire_many(permits), if short_of_slots => {}
                _ = sleep_until_some(gather_until), if gathering => {}
                _ = until_resumed(&mut waiting), if waiting.is_some() => waiting = None,
                _ = control.changed() => {}
            }
        }
    }

    /// Starts a fetch of up to `limit` deliveries, reserving that many free slots for it.
    fn start_fetch(&mut self, limit: usize) {
        let source = self.source.clone();
        self.reserved += limit;
        let fetch = async move {
            let result = source.fetch(limit).await;
            Fetched {
                asked: limit,
                result,
            }
        };
        self.fetches.spawn(fetch.in_current_span());
    }

    /// Handles a fetch's answer: starts its deliveries, or says how long to wait before the next
    /// fetch (after an empty answer or a retryable error). A fatal error ends the loop.
    async fn fetched(
        &mut self,
        done: std::result::Result<Fetched, tokio::task::JoinError>,
        control: &watch::Receiver<ControlState>,
    ) -> Result<Option<Pause>> {
        let task = self.rt.task_name.clone();
        let Fetched { asked, result } = match done {
            Ok(fetched) => fetched,
            Err(err) => {
                // Only a panic ends a fetch task early: fetches are aborted only once settled.
                tracing::error!(task = %task, error = %err, "a fetch panicked; stopping the app");
                return Err(err.into());
            }
        };
        self.reserved -= asked;
        // The last answer of a quiet spell ends it, whatever it says.
        let last = self.fetches.is_empty();
        if last {
            self.quiet = false;
        }
        let deliveries = match result {
            Ok(deliveries) => deliveries,
            Err(err) => match err.as_connector() {
                Some(c) if c.is_retryable() => {
                    let delay = c.backoff(self.source.poll_interval());
                    tracing::warn!(task = %task, error = %err, delay_s = delay.as_secs_f64(), "fetch failed; backing off");
                    return Ok(Some(Box::pin(tokio::time::sleep(delay))));
                }
                _ => {
                    tracing::error!(task = %task, error = %err, "fetch failed; stopping the app");
                    return Err(err);
                }
            },
        };
        if deliveries.is_empty() {
            // Nothing is ready: let the fetches under way answer, then wait for work.
            if !last {
                self.quiet = true;
                return Ok(None);
            }
            let source = self.source.clone();
            let max = source.poll_interval();
            return Ok(Some(Box::pin(async move { source.wait_ready(max).await })));
        }
        if control.borrow().stops_fetching(&task) {
            self.release_all(deliveries).await;
            return Ok(None);
        }
        let mut deliveries = deliveries;
        if deliveries.len() > asked {
            tracing::error!(task = %task, asked, got = deliveries.len(), "the source returned more deliveries than it was asked for; handing the rest back");
            let extra = deliveries.split_off(asked);
            self.release_all(extra).await;
        }
        let mut deliveries = deliveries.into_iter();
        for delivery in deliveries.by_ref() {
            // The fetch reserved its permits. Only this loop takes new ones, except an execution
            // whose ack failed after it freed its slot early: it takes one back for its failure
            // path, and then a fetched delivery is handed back.
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
        Ok(None)
    }

    /// Ends every fetch under way and hands back what they claimed: a cancel-safe source's
    /// fetches are dropped, any other's are awaited (they may have claimed work). No fetch is
    /// then under way, so no slot is promised and no quiet spell lasts.
    async fn settle_fetches(&mut self) {
        if self.source.fetch_is_cancel_safe() {
            self.fetches.abort_all();
        }
        while let Some(done) = self.fetches.join_next().await {
            match done {
                Ok(Fetched {
                    result: Ok(deliveries),
                    ..
                }) => self.release_all(deliveries).await,
                Ok(Fetched { result: Err(_), .. }) => {}
                Err(err) if err.is_cancelled() => {}
                Err(err) => {
                    tracing::error!(task = %self.rt.task_name, error = %err, "a fetch panicked");
                }
            }
        }
        self.reserved = 0;
        self.quiet = false;
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

/// Sleeps until `until`; never returns without one.
async fn sleep_until_some(until: Option<Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// Waits for the pause to end; never returns without one.
async fn until_resumed(pause: &mut Option<Pause>) {
    match pause {
        Some(pause) => pause.await,
        None => std::future::pending().await,
    }
}

impl From<tokio::task::JoinError> for Error {
    fn from(err: tokio::task::JoinError) -> Self {
        Error::other(err)
    }
}

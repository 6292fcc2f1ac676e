//! The engine behind [`IntervalSource`](super::interval::IntervalSource) and
//! [`CronSource`](super::cron::CronSource): due runs, overlap policy, queued runs, retries.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use serde_json::{Map, Value};

use super::{Resource, Source};
use crate::clock::{SharedClock, SystemClock};
use crate::delivery::Delivery;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::failure::FailureInfo;

/// What a schedule does when a run is due while an earlier run is still in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Overlap {
    /// Start the due run anyway (runs may overlap up to the task's concurrency).
    #[default]
    Allow,
    /// Drop due runs while one is in flight; when free, start only the latest due run.
    Skip,
    /// Keep due runs (at most `max_queued_runs`, oldest dropped first) and start them one at a time.
    Queue,
}

impl std::str::FromStr for Overlap {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "allow" => Ok(Self::Allow),
            "skip" => Ok(Self::Skip),
            "queue" => Ok(Self::Queue),
            other => Err(Error::invalid(
                "overlap",
                format!("must be one of: allow, skip, queue; got {other:?}"),
            )),
        }
    }
}

/// When runs are due.
pub trait Schedule: Send + Sync + 'static {
    /// The first run at or after `now`.
    fn initial_fire_at(&self, now: &Zoned) -> Option<Zoned>;
    /// The run after `fire`.
    fn next_fire_after(&self, fire: &Zoned) -> Option<Zoned>;
    /// The default source name.
    fn default_name(&self) -> String;
    /// Details for `describe()`.
    fn describe(&self, out: &mut Map<String, Value>);
}

type PayloadFn = Arc<dyn Fn() -> Value + Send + Sync>;

#[derive(Default)]
struct State {
    initialized: bool,
    pending_immediate: bool,
    next_fire_at: Option<Zoned>,
    inflight: usize,
    sequence: u64,
    queued: VecDeque<Zoned>,
    retries: BTreeMap<(Timestamp, u64), Envelope>,
    retry_sequence: u64,
}

struct Core<S> {
    name: String,
    schedule: S,
    payload: PayloadFn,
    immediate: bool,
    overlap: Overlap,
    max_queued_runs: usize,
    time_zone: TimeZone,
    poll_interval: Duration,
    clock: SharedClock,
    state: Mutex<State>,
}

const MAX_DUE_PER_FETCH: usize = 1000;

impl<S: Schedule> Core<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Zoned {
        let now = self.clock.now();
        let ts =
            Timestamp::from_nanosecond(now.unix_timestamp_nanos()).unwrap_or(Timestamp::UNIX_EPOCH);
        ts.to_zoned(self.time_zone.clone())
    }

    fn initialize(&self, state: &mut State, now: &Zoned) {
        if !state.initialized {
            state.next_fire_at = self.schedule.initial_fire_at(now);
            state.pending_immediate = self.immediate;
            state.initialized = true;
        }
    }

    fn make(self: &Arc<Self>, state: &mut State, scheduled_at: &Zoned) -> Box<dyn Delivery> {
        let mut meta = Map::new();
        meta.insert("source".into(), Value::from(self.name.clone()));
        meta.insert(
            "scheduled_at".into(),
            Value::from(python_isoformat(scheduled_at)),
        );
        meta.insert("sequence".into(), Value::from(state.sequence));
        state.sequence += 1;
        state.inflight += 1;
        Box::new(ScheduleDelivery::<S> {
            core: self.clone(),
            envelope: Envelope::new((self.payload)()).with_meta(meta),
        })
    }

    fn queue_runs(&self, state: &mut State, runs: impl IntoIterator<Item = Zoned>) {
        state.queued.extend(runs);
        while state.queued.len() > self.max_queued_runs {
            state.queued.pop_front();
        }
    }

    fn handle_due(
        self: &Arc<Self>,
        state: &mut State,
        due: Vec<Zoned>,
        limit: usize,
    ) -> Vec<Box<dyn Delivery>> {
        if due.is_empty() {
            return Vec::new();
        }
        match self.overlap {
            Overlap::Allow => due
                .iter()
                .take(limit)
                .map(|at| self.make(state, at))
                .collect(),
            Overlap::Skip => {
                if state.inflight > 0 {
                    Vec::new()
                } else {
                    due.last()
                        .map(|at| vec![self.make(state, at)])
                        .unwrap_or_default()
                }
            }
            Overlap::Queue => {
                if state.inflight > 0 {
                    self.queue_runs(state, due);
                    return Vec::new();
                }
                let mut due = due.into_iter();
                let first = due.next().map(|at| self.make(state, &at));
                self.queue_runs(state, due);
                first.into_iter().collect()
            }
        }
    }

    fn fetch(self: &Arc<Self>, limit: usize) -> Vec<Box<dyn Delivery>> {
        let limit = limit.max(1);
        let now = self.now();
        let mut state = self.lock();
        self.initialize(&mut state, &now);

        let mut out: Vec<Box<dyn Delivery>> = Vec::new();
        while out.len() < limit {
            let Some((&key, _)) = state.retries.iter().next() else {
                break;
            };
            if key.0 > now.timestamp() {
                break;
            }
            if let Some(envelope) = state.retries.remove(&key) {
                state.inflight += 1;
                out.push(Box::new(ScheduleDelivery::<S> {
                    core: self.clone(),
                    envelope,
                }));
            }
        }
        if !out.is_empty() {
            return out;
        }
        if state.pending_immediate {
            state.pending_immediate = false;
            let immediate = self.handle_due(&mut state, vec![now.clone()], limit);
            if !immediate.is_empty() {
                return immediate;
            }
        }
        if self.overlap == Overlap::Queue
            && state.inflight == 0
            && let Some(at) = state.queued.pop_front()
        {
            return vec![self.make(&mut state, &at)];
        }
        let mut due = Vec::new();
        while let Some(next) = state.next_fire_at.clone() {
            if next.timestamp() > now.timestamp() || due.len() >= MAX_DUE_PER_FETCH {
                break;
            }
            state.next_fire_at = self.schedule.next_fire_after(&next);
            due.push(next);
        }
        self.handle_due(&mut state, due, limit)
    }

    fn finish(&self) {
        let mut state = self.lock();
        state.inflight = state.inflight.saturating_sub(1);
    }

    fn finish_retry(&self, envelope: &Envelope, delay: Option<Duration>) {
        self.requeue(envelope, envelope.attempts.saturating_add(1), delay);
    }

    /// Ends an in-flight run and keeps its envelope for a later fetch, with `attempts`.
    fn requeue(&self, envelope: &Envelope, attempts: u32, delay: Option<Duration>) {
        let now = self.now().timestamp();
        let ready_at = now.checked_add(delay.unwrap_or_default()).unwrap_or(now);
        let mut again = envelope.clone();
        again.attempts = attempts;
        let mut state = self.lock();
        state.inflight = state.inflight.saturating_sub(1);
        state.retry_sequence += 1;
        let seq = state.retry_sequence;
        state.retries.insert((ready_at, seq), again);
    }

    fn resume_after_pause(&self) {
        let now = self.now();
        let mut state = self.lock();
        state.pending_immediate = false;
        state.queued.clear();
        state.next_fire_at = self.schedule.initial_fire_at(&now);
        state.initialized = true;
    }
}

/// Python's `datetime.isoformat()` for an aware datetime: microseconds only when non-zero.
pub(crate) fn python_isoformat(at: &Zoned) -> String {
    let micros = at.subsec_nanosecond() / 1000;
    let base = at.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let offset = at.strftime("%:z").to_string();
    if micros == 0 {
        format!("{base}{offset}")
    } else {
        format!("{base}.{micros:06}{offset}")
    }
}

/// A source that emits a delivery whenever its [`Schedule`] says a run is due.
///
/// Use it through [`IntervalSource`](super::interval::IntervalSource) or
/// [`CronSource`](super::cron::CronSource). Each delivery's metadata carries `source`,
/// `scheduled_at` (ISO 8601 in the source's time zone) and `sequence` (0, 1, 2, …). Retries are
/// kept in memory and re-emitted when their delay has passed; after a pause, missed runs are not
/// backfilled.
pub struct ScheduleSource<S: Schedule> {
    core: Arc<Core<S>>,
}

impl<S: Schedule> Clone for ScheduleSource<S> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

/// Options shared by schedule sources, applied with the builder methods of [`ScheduleSource`].
pub struct ScheduleOptions {
    pub(crate) name: Option<String>,
    pub(crate) payload: PayloadFn,
    pub(crate) immediate: bool,
    pub(crate) overlap: Overlap,
    pub(crate) max_queued_runs: usize,
    pub(crate) time_zone: TimeZone,
    pub(crate) poll_interval: Duration,
    pub(crate) clock: SharedClock,
}

impl ScheduleOptions {
    pub(crate) fn new(poll_interval: Duration) -> Self {
        Self {
            name: None,
            payload: Arc::new(|| Value::Null),
            immediate: false,
            overlap: Overlap::Allow,
            max_queued_runs: 1000,
            time_zone: TimeZone::system(),
            poll_interval,
            clock: Arc::new(SystemClock),
        }
    }
}

impl<S: Schedule> ScheduleSource<S> {
    pub(crate) fn from_parts(schedule: S, options: ScheduleOptions) -> Self {
        let name = options.name.unwrap_or_else(|| schedule.default_name());
        Self {
            core: Arc::new(Core {
                name,
                schedule,
                payload: options.payload,
                immediate: options.immediate,
                overlap: options.overlap,
                max_queued_runs: options.max_queued_runs,
                time_zone: options.time_zone,
                poll_interval: options.poll_interval.max(Duration::from_millis(10)),
                clock: options.clock,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The schedule.
    pub fn schedule(&self) -> &S {
        &self.core.schedule
    }

    /// The time zone runs are computed in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.core.time_zone
    }

    /// How many runs wait for an earlier one to finish (overlap `queue`).
    pub fn queued_runs(&self) -> usize {
        self.core.lock().queued.len()
    }
}

#[async_trait]
impl<S: Schedule> Resource for ScheduleSource<S> {
    fn name(&self) -> &str {
        &self.core.name
    }

    async fn open(&self) -> Result<()> {
        let now = self.core.now();
        let mut state = self.core.lock();
        self.core.initialize(&mut state, &now);
        Ok(())
    }
}

#[async_trait]
impl<S: Schedule> Source for ScheduleSource<S> {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        Ok(self.core.fetch(limit))
    }

    fn batch_size(&self) -> usize {
        usize::MAX
    }

    fn poll_interval(&self) -> Duration {
        self.core.poll_interval
    }

    fn resume_after_pause(&self) {
        self.core.resume_after_pause();
    }

    fn describe(&self) -> Map<String, Value> {
        let mut out = Map::new();
        self.core.schedule.describe(&mut out);
        out.insert(
            "overlap".into(),
            Value::from(format!("{:?}", self.core.overlap).to_lowercase()),
        );
        out.insert("immediate".into(), Value::from(self.core.immediate));
        out.insert(
            "timezone".into(),
            Value::from(self.core.time_zone.iana_name().unwrap_or("local")),
        );
        out
    }
}

struct ScheduleDelivery<S: Schedule> {
    core: Arc<Core<S>>,
    envelope: Envelope,
}

#[async_trait]
impl<S: Schedule> Delivery for ScheduleDelivery<S> {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    async fn ack(&mut self) -> Result<()> {
        self.core.finish();
        Ok(())
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        self.core.finish_retry(&self.envelope, delay);
        Ok(())
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        self.core.finish();
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.core
            .requeue(&self.envelope, self.envelope.attempts, None);
        Ok(())
    }
}

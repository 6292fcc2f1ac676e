//! [`IntervalSource`]: a run every fixed interval.

use std::sync::Arc;
use std::time::Duration;

use jiff::Zoned;
use serde_json::{Map, Value};

use super::schedule::{Schedule, ScheduleOptions, ScheduleSource};
use crate::error::{Error, Result};

/// Runs every `every`, the first one `every` after the source opens (or at once with
/// `immediate`).
#[derive(Debug, Clone)]
pub struct IntervalSchedule {
    every: Duration,
}

impl Schedule for IntervalSchedule {
    fn initial_fire_at(&self, now: &Zoned) -> Option<Zoned> {
        now.checked_add(self.every).ok()
    }

    fn next_fire_after(&self, fire: &Zoned) -> Option<Zoned> {
        fire.checked_add(self.every).ok()
    }

    fn default_name(&self) -> String {
        format!("interval:{}s", self.every.as_secs())
    }

    fn describe(&self, out: &mut Map<String, Value>) {
        out.insert("type".into(), Value::from("interval"));
        out.insert("interval_s".into(), Value::from(self.every.as_secs_f64()));
    }
}

/// A source that emits a run every fixed interval.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use onestep_core::{IntervalSource, Overlap};
///
/// let every_minute = IntervalSource::every(Duration::from_secs(60))
///     .unwrap()
///     .immediate(true)
///     .overlap(Overlap::Skip)
///     .payload(serde_json::json!({"job": "refresh"}))
///     .build();
/// assert_eq!(onestep_core::Resource::name(&every_minute), "interval:60s");
/// ```
pub type IntervalSource = ScheduleSource<IntervalSchedule>;

impl IntervalSource {
    /// Starts building a source that runs every `every` (> 0). Polls every `every / 10`, between
    /// 10 ms and 1 s.
    pub fn every(every: Duration) -> Result<ScheduleBuilder<IntervalSchedule>> {
        if every.is_zero() {
            return Err(Error::invalid("interval", "must be greater than zero"));
        }
        let poll = (every / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        Ok(ScheduleBuilder {
            schedule: IntervalSchedule { every },
            options: ScheduleOptions::new(poll),
        })
    }
}

/// Builds a [`ScheduleSource`]; shared by interval and cron sources.
pub struct ScheduleBuilder<S: Schedule> {
    pub(crate) schedule: S,
    pub(crate) options: ScheduleOptions,
}

impl<S: Schedule> ScheduleBuilder<S> {
    /// The source's name (default `interval:<n>s` or `cron:<expression>`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Some(name.into());
        self
    }

    /// The body of every run (default `null`).
    pub fn payload(mut self, payload: Value) -> Self {
        self.options.payload = Arc::new(move || payload.clone());
        self
    }

    /// Computes the body of each run when it is emitted.
    pub fn payload_fn(mut self, payload: impl Fn() -> Value + Send + Sync + 'static) -> Self {
        self.options.payload = Arc::new(payload);
        self
    }

    /// Emits one run as soon as the source is first fetched.
    pub fn immediate(mut self, immediate: bool) -> Self {
        self.options.immediate = immediate;
        self
    }

    /// What to do with runs that fall due while one is in flight.
    pub fn overlap(mut self, overlap: super::Overlap) -> Self {
        self.options.overlap = overlap;
        self
    }

    /// How many due runs `Overlap::Queue` keeps (>= 1, default 1000).
    pub fn max_queued_runs(mut self, max: usize) -> Result<Self> {
        if max < 1 {
            return Err(Error::invalid("max_queued_runs", "must be >= 1, got 0"));
        }
        self.options.max_queued_runs = max;
        Ok(self)
    }

    /// The IANA time zone runs are computed and reported in (default: the system's).
    pub fn time_zone(mut self, name: &str) -> Result<Self> {
        self.options.time_zone = jiff::tz::TimeZone::get(name).map_err(|e| {
            Error::invalid(
                "timezone",
                format!("{name:?} is not a known IANA time zone: {e}"),
            )
        })?;
        Ok(self)
    }

    /// How often the runner polls (at least 10 ms).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.options.poll_interval = every;
        self
    }

    /// The clock deciding what is due; tests pass a [`ManualClock`](crate::clock::ManualClock).
    pub fn clock(mut self, clock: crate::clock::SharedClock) -> Self {
        self.options.clock = clock;
        self
    }

    /// Builds the source.
    pub fn build(self) -> ScheduleSource<S> {
        ScheduleSource::from_parts(self.schedule, self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::source::{Overlap, Resource, Source};
    use time::macros::datetime;

    fn source(clock: &ManualClock, overlap: Overlap) -> IntervalSource {
        IntervalSource::every(Duration::from_secs(10))
            .unwrap()
            .overlap(overlap)
            .time_zone("UTC")
            .unwrap()
            .clock(Arc::new(clock.clone()))
            .build()
    }

    #[tokio::test]
    async fn first_run_is_one_interval_after_open_with_schedule_meta() {
        let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
        let s = source(&clock, Overlap::Allow);
        s.open().await.unwrap();
        assert!(s.fetch(10).await.unwrap().is_empty());
        clock.advance(Duration::from_secs(10));
        let runs = s.fetch(10).await.unwrap();
        assert_eq!(runs.len(), 1);
        let meta = &runs[0].envelope().meta;
        assert_eq!(meta["scheduled_at"], "2026-01-01T00:00:10+00:00");
        assert_eq!(meta["sequence"], 0);
        assert_eq!(meta["source"], "interval:10s");
    }

    #[tokio::test]
    async fn allow_emits_every_due_run_up_to_the_limit() {
        let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
        let s = source(&clock, Overlap::Allow);
        s.open().await.unwrap();
        clock.advance(Duration::from_secs(35));
        assert_eq!(s.fetch(10).await.unwrap().len(), 3);
    }

    #[tokio::test]
    async fn skip_drops_runs_while_one_is_in_flight_then_takes_the_latest() {
        let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
        let s = source(&clock, Overlap::Skip);
        s.open().await.unwrap();
        clock.advance(Duration::from_secs(10));
        let mut first = s.fetch(10).await.unwrap();
        assert_eq!(first.len(), 1);
        clock.advance(Duration::from_secs(20));
        assert!(
            s.fetch(10).await.unwrap().is_empty(),
            "in flight: due runs are skipped"
        );
        first[0].ack().await.unwrap();
        clock.advance(Duration::from_secs(25));
        let runs = s.fetch(10).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(
            runs[0].envelope().meta["scheduled_at"],
            "2026-01-01T00:00:50+00:00"
        );
    }

    #[tokio::test]
    async fn queue_keeps_due_runs_and_starts_them_one_at_a_time() {
        let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
        let s = IntervalSource::every(Duration::from_secs(10))
            .unwrap()
            .overlap(Overlap::Queue)
            .max_queued_runs(2)
            .unwrap()
            .time_zone("UTC")
            .unwrap()
            .clock(Arc::new(clock.clone()))
            .build();
        s.open().await.unwrap();
        clock.advance(Duration::from_secs(10));
        let mut first = s.fetch(10).await.unwrap();
        clock.advance(Duration::from_secs(30));
        assert!(s.fetch(10).await.unwrap().is_empty());
        assert_eq!(
            s.queued_runs(),
            2,
            "three runs were due, the oldest was dropped"
        );
        first[0].ack().await.unwrap();
        let next = s.fetch(10).await.unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(
            next[0].envelope().meta["scheduled_at"],
            "2026-01-01T00:00:30+00:00"
        );
    }

    #[tokio::test]
    async fn retried_runs_come_back_after_their_delay_with_one_more_attempt() {
        let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
        let s = source(&clock, Overlap::Allow);
        s.open().await.unwrap();
        clock.advance(Duration::from_secs(10));
        let mut run = s.fetch(1).await.unwrap().pop().unwrap();
        run.retry(Some(Duration::from_secs(3))).await.unwrap();
        assert!(s.fetch(1).await.unwrap().is_empty());
        clock.advance(Duration::from_secs(3));
        let again = s.fetch(1).await.unwrap().pop().unwrap();
        assert_eq!(again.envelope().attempts, 1);
        assert_eq!(again.envelope().meta["sequence"], 0);
    }

    #[tokio::test]
    async fn immediate_emits_a_run_on_first_fetch() {
        let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
        let s = IntervalSource::every(Duration::from_secs(60))
            .unwrap()
            .immediate(true)
            .time_zone("Asia/Shanghai")
            .unwrap()
            .clock(Arc::new(clock.clone()))
            .build();
        let runs = s.fetch(1).await.unwrap();
        assert_eq!(
            runs[0].envelope().meta["scheduled_at"],
            "2026-01-01T08:00:00+08:00"
        );
    }

    #[test]
    fn zero_interval_and_unknown_zone_are_rejected() {
        assert_eq!(
            IntervalSource::every(Duration::ZERO)
                .err()
                .unwrap()
                .to_string(),
            "interval must be greater than zero"
        );
        let err = IntervalSource::every(Duration::from_secs(1))
            .unwrap()
            .time_zone("Mars/Olympus")
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .starts_with("timezone \"Mars/Olympus\" is not a known IANA time zone")
        );
    }
}

//! [`Pace`]: how fast a source's runner takes executions and how long a claim takes, which size
//! the adaptive prefetch buffer ([`Prefetch::Adaptive`](super::Prefetch::Adaptive)).
//!
//! A slot that waits for a claim runs nothing for the claim's round trip. The buffer that hides
//! that wait holds what the runner takes during two round trips (`rate × round trip`, by
//! Little's law, twice: it is refilled once half empty, and that half must last the refill), so
//! a buffered execution waits one to two round trips for its slot. Tasks longer than two round
//! trips per slot give less than one, so none is held: a worker of long tasks claims only for
//! free slots, as the reference does.

use std::time::{Duration, Instant};

/// How quickly the taken-rate estimate forgets: a count taken `TAU` ago weighs `1/e`. Short, so
/// a runner whose tasks turn long stops holding executions within a second or so.
const TAU: Duration = Duration::from_millis(250);

/// How many round trips' worth the buffer holds. It is refilled once half empty
/// (`Buffer::refill_behind`), so that half must last the refill's round trip.
const ROUND_TRIPS: f64 = 2.0;

/// The weight of the newest claim in the round-trip average.
const ROUND_TRIP_WEIGHT: f64 = 0.2;

/// The taken rate (an exponentially decayed count) and the claims' average round trip.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// Executions handed to the runner, each weighed `e^(-age/TAU)`, as of `counted_at`.
    taken: f64,
    counted_at: Option<Instant>,
    /// The claims' round trip in seconds (a moving average), `None` before the first claim.
    round_trip: Option<f64>,
}

impl Pace {
    /// Counts `n` executions handed to the runner at `now`.
    pub(super) fn took(&mut self, n: usize, now: Instant) {
        self.taken = self.decayed(now) + n as f64;
        self.counted_at = Some(now);
    }

    /// Records a claim that took `elapsed`.
    pub(super) fn claimed_in(&mut self, elapsed: Duration) {
        let s = elapsed.as_secs_f64();
        self.round_trip = Some(match self.round_trip {
            Some(avg) => avg + ROUND_TRIP_WEIGHT * (s - avg),
            None => s,
        });
    }

    /// How many executions to hold at `now`: what the runner takes in [`ROUND_TRIPS`] claim
    /// round trips at its current rate, rounded down, at most `most`.
    pub(super) fn target(&self, now: Instant, most: usize) -> usize {
        let Some(round_trip) = self.round_trip else {
            return 0;
        };
        let rate = self.decayed(now) / TAU.as_secs_f64();
        // A float → usize cast saturates, and NaN becomes 0.
        ((ROUND_TRIPS * rate * round_trip).floor() as usize).min(most)
    }

    fn decayed(&self, now: Instant) -> f64 {
        match self.counted_at {
            Some(at) => {
                let age = now.saturating_duration_since(at).as_secs_f64();
                self.taken * (-age / TAU.as_secs_f64()).exp()
            }
            None => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A steady rate for `seconds`, taken in fetches of `per_fetch` every `every`.
    fn steady(pace: &mut Pace, start: Instant, per_fetch: usize, every: Duration, seconds: u64) {
        let mut at = start;
        while at < start + Duration::from_secs(seconds) {
            pace.took(per_fetch, at);
            at += every;
        }
    }

    #[test]
    fn holds_what_two_round_trips_take_at_the_current_rate() {
        let (mut pace, start) = (Pace::default(), Instant::now());
        // 64 every 5 ms: 12,800/s; claims of 6 ms → ~154.
        steady(&mut pace, start, 64, Duration::from_millis(5), 2);
        pace.claimed_in(Duration::from_millis(6));
        let target = pace.target(start + Duration::from_secs(2), 1_000);
        assert!((140..=170).contains(&target), "{target}");
        assert_eq!(
            pace.target(start + Duration::from_secs(2), 50),
            50,
            "capped"
        );
    }

    #[test]
    fn holds_nothing_for_tasks_longer_than_a_round_trip_per_slot() {
        let (mut pace, start) = (Pace::default(), Instant::now());
        // 128 slots of 1 s tasks: 128/s, in fetches of 64 every half second; claims of 5 ms.
        steady(&mut pace, start, 64, Duration::from_millis(500), 10);
        pace.claimed_in(Duration::from_millis(5));
        assert_eq!(pace.target(start + Duration::from_secs(10), 1_000), 0);
    }

    #[test]
    fn holds_nothing_before_the_first_claim_or_after_the_runner_stops_taking() {
        let (mut pace, start) = (Pace::default(), Instant::now());
        steady(&mut pace, start, 64, Duration::from_millis(5), 1);
        assert_eq!(pace.target(start + Duration::from_secs(1), 1_000), 0);
        pace.claimed_in(Duration::from_millis(6));
        assert!(pace.target(start + Duration::from_secs(1), 1_000) > 0);
        // The tasks turned long: nothing taken for 2 s.
        assert_eq!(pace.target(start + Duration::from_secs(3), 1_000), 0);
    }

    #[test]
    fn the_round_trip_is_a_moving_average() {
        let mut pace = Pace::default();
        pace.claimed_in(Duration::from_millis(10));
        pace.claimed_in(Duration::from_millis(20));
        let avg = pace.round_trip.unwrap();
        assert!((avg - 0.012).abs() < 1e-9, "{avg}");
    }
}

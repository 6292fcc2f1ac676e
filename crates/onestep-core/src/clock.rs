//! Time sources. Schedules and leases take a [`Clock`] so tests can move time instead of sleeping.

use std::sync::{Arc, Mutex};

use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

/// Something that says what time it is, in UTC.
///
/// # Example
/// ```
/// use onestep_core::clock::{Clock, ManualClock};
/// use time::macros::datetime;
///
/// let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
/// clock.advance(std::time::Duration::from_secs(90));
/// assert_eq!(clock.now(), datetime!(2026-01-01 00:01:30 UTC));
/// ```
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant, in UTC.
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<OffsetDateTime>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The longest duration accepted from users, in seconds (100 years). Longer values are rejected
/// at validation: they would overflow time arithmetic, and no schedule needs them.
pub const MAX_SECONDS: f64 = 3_155_760_000.0;

/// `t` in UTC, without panicking: an instant whose UTC form lies outside the years `time` can
/// represent (±9999, reachable only with an extreme offset at the very edge of that range)
/// saturates to the nearest representable UTC instant, where `to_offset` would panic.
///
/// ```
/// use time::macros::datetime;
///
/// let edge = datetime!(9999-12-31 23:59:59 -23:59);
/// assert_eq!(onestep_core::clock::utc(edge).year(), 9999);
/// assert_eq!(onestep_core::clock::utc(datetime!(2026-01-01 02:00 +02:00)), datetime!(2026-01-01 00:00 UTC));
/// ```
pub fn utc(t: OffsetDateTime) -> OffsetDateTime {
    t.checked_to_offset(UtcOffset::UTC).unwrap_or_else(|| {
        if t.offset().is_negative() {
            PrimitiveDateTime::MAX.assume_utc()
        } else {
            PrimitiveDateTime::MIN.assume_utc()
        }
    })
}

/// `t` without its sub-microsecond part: what every stored timestamp column keeps (PostgreSQL
/// `timestamptz`, MySQL `DATETIME(6)`, the SQLite text form), so an execution returned by a write
/// equals the one read back.
///
/// ```
/// use time::macros::datetime;
/// let t = datetime!(2026-01-01 00:00:00.123456789 UTC);
/// assert_eq!(onestep_core::clock::whole_micros(t), datetime!(2026-01-01 00:00:00.123456 UTC));
/// ```
pub fn whole_micros(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(t.nanosecond() / 1_000 * 1_000)
        .unwrap_or(t)
}

/// `now` plus `d` as every backend stores it (whole microseconds): when a lease ends, when a
/// delayed retry is due. A sum past the end of time gives `now` (delays and leases are
/// validated far below that).
///
/// ```
/// use std::time::Duration;
/// use time::macros::datetime;
///
/// let t = datetime!(2026-01-01 00:00:00 UTC);
/// assert_eq!(onestep_core::clock::after(t, Duration::from_nanos(1_500)), datetime!(2026-01-01 00:00:00.000001 UTC));
/// assert_eq!(onestep_core::clock::after(t, Duration::MAX), t, "beyond the end of time: unchanged");
/// ```
pub fn after(now: OffsetDateTime, d: std::time::Duration) -> OffsetDateTime {
    whole_micros(
        now.checked_add(time::Duration::try_from(d).unwrap_or(time::Duration::MAX))
            .unwrap_or(now),
    )
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

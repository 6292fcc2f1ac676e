//! Retry policies: what happens after a failed attempt.
//!
//! A policy looks at the envelope (its `attempts` counts previous attempts, so the first failure
//! sees `attempts == 0`) and the [`FailureInfo`], and answers [`RetryAction::Retry`] with an
//! optional delay or [`RetryAction::Fail`]. With `max_attempts = 3` a message runs at most three
//! times: attempts 0 and 1 may retry, attempt 2 fails.
//!
//! | policy | schedule for `max_attempts = 4` |
//! |---|---|
//! | [`NoRetry`] | fail on the first error |
//! | [`MaxAttempts`] with `delay = 2s` | retry after 2 s, 2 s, 2 s, then fail |
//! | [`ExponentialBackoff`] (`min 1s, max 60s, ×2`) | retry after 1 s, 2 s, 4 s, then fail |
//!
//! Cancelled attempts never consult the policy: a cancelled delivery is always retried (or, for a
//! tracked execution whose cancel was requested, ends cancelled).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::failure::{FailureInfo, FailureKind};

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RetryAction {
    /// Try again after `delay` (immediately when `None`).
    Retry {
        /// How long to wait before the next attempt.
        delay: Option<Duration>,
    },
    /// Give up: dead-letter and fail the delivery.
    Fail,
}

/// Decides whether a failed attempt is retried.
///
/// # Example
/// ```
/// use onestep_core::retry::{RetryAction, RetryPolicy};
/// use onestep_core::{Envelope, FailureInfo};
///
/// /// Retries timeouts forever, fails everything else.
/// #[derive(Debug)]
/// struct RetryTimeouts;
///
/// impl RetryPolicy for RetryTimeouts {
///     fn on_error(&self, _envelope: &Envelope, failure: &FailureInfo) -> RetryAction {
///         if failure.kind == onestep_core::FailureKind::Timeout {
///             RetryAction::Retry { delay: None }
///         } else {
///             RetryAction::Fail
///         }
///     }
/// }
/// ```
pub trait RetryPolicy: Send + Sync + fmt::Debug {
    /// Decides what happens after `failure` on `envelope`.
    fn on_error(&self, envelope: &Envelope, failure: &FailureInfo) -> RetryAction;

    /// A short description for `describe()` output, e.g. `max_attempts(3, delay=2s)`.
    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

/// Never retries: the first failure is final. The default policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoRetry;

impl RetryPolicy for NoRetry {
    fn on_error(&self, _envelope: &Envelope, _failure: &FailureInfo) -> RetryAction {
        RetryAction::Fail
    }

    fn describe(&self) -> String {
        "no_retry".to_string()
    }
}

/// Retries until a message has run `max_attempts` times, waiting a fixed `delay` in between.
///
/// With `max_attempts = 3, delay = 2s`: attempt 0 fails → retry in 2 s; attempt 1 fails → retry in
/// 2 s; attempt 2 fails → fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxAttempts {
    max_attempts: u32,
    delay: Option<Duration>,
}

impl MaxAttempts {
    /// A policy allowing `max_attempts` runs in all; `max_attempts` must be at least 1.
    pub fn new(max_attempts: u32) -> Result<Self> {
        if max_attempts < 1 {
            return Err(Error::invalid(
                "max_attempts",
                format!("must be >= 1, got {max_attempts}"),
            ));
        }
        Ok(Self {
            max_attempts,
            delay: None,
        })
    }

    /// Waits `delay` before each retry.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The number of runs allowed.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}

impl RetryPolicy for MaxAttempts {
    fn on_error(&self, envelope: &Envelope, _failure: &FailureInfo) -> RetryAction {
        if envelope.attempts.saturating_add(1) < self.max_attempts {
            RetryAction::Retry { delay: self.delay }
        } else {
            RetryAction::Fail
        }
    }

    fn describe(&self) -> String {
        match self.delay {
            Some(d) => format!(
                "max_attempts({}, delay={}s)",
                self.max_attempts,
                d.as_secs_f64()
            ),
            None => format!("max_attempts({})", self.max_attempts),
        }
    }
}

/// Randomization applied to an exponential back-off delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Jitter {
    /// The delay as computed.
    #[default]
    None,
    /// Uniform in `[0, delay]`.
    Full,
    /// Uniform in `[delay / 2, min(max_delay, 1.5 × delay)]`.
    Equal,
}

impl std::str::FromStr for Jitter {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Self::None),
            "full" => Ok(Self::Full),
            "equal" => Ok(Self::Equal),
            other => Err(Error::invalid(
                "jitter",
                format!("must be one of none, full, equal; got {other:?}"),
            )),
        }
    }
}

/// Retries with a delay that grows geometrically: `min(max_delay, min_delay × multiplier^attempts)`.
///
/// The default (`max_attempts 3, min_delay 1s, max_delay 60s, multiplier 2, no jitter`) retries
/// after 1 s, then 2 s, then fails. With `max_attempts 8` the delays are 1, 2, 4, 8, 16, 32, 60 s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialBackoff {
    max_attempts: u32,
    min_delay: Duration,
    max_delay: Duration,
    multiplier: f64,
    jitter: Jitter,
}

impl Default for ExponentialBackoff {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            min_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: Jitter::None,
        }
    }
}

impl ExponentialBackoff {
    /// Validates and builds a policy. `max_attempts >= 1`, `max_delay >= min_delay`,
    /// `multiplier` finite and `> 0`.
    pub fn new(
        max_attempts: u32,
        min_delay: Duration,
        max_delay: Duration,
        multiplier: f64,
        jitter: Jitter,
    ) -> Result<Self> {
        if max_attempts < 1 {
            return Err(Error::invalid(
                "max_attempts",
                format!("must be >= 1, got {max_attempts}"),
            ));
        }
        if max_delay < min_delay {
            return Err(Error::invalid(
                "max_delay_s",
                format!(
                    "must be >= min_delay_s ({}), got {}",
                    min_delay.as_secs_f64(),
                    max_delay.as_secs_f64()
                ),
            ));
        }
        if !(multiplier.is_finite() && multiplier > 0.0) {
            return Err(Error::invalid(
                "multiplier",
                format!("must be a finite number > 0, got {multiplier}"),
            ));
        }
        Ok(Self {
            max_attempts,
            min_delay,
            max_delay,
            multiplier,
            jitter,
        })
    }

    /// Validates and builds a policy from seconds, as YAML gives them.
    pub fn from_secs(
        max_attempts: u32,
        min_delay_s: f64,
        max_delay_s: f64,
        multiplier: f64,
        jitter: Jitter,
    ) -> Result<Self> {
        let min_delay = secs("min_delay_s", min_delay_s)?;
        let max_delay = secs("max_delay_s", max_delay_s)?;
        Self::new(max_attempts, min_delay, max_delay, multiplier, jitter)
    }

    /// The delay before the retry that follows attempt number `attempts` (0-based), before jitter.
    pub fn base_delay(&self, attempts: u32) -> Duration {
        let raw = self.min_delay.as_secs_f64()
            * self.multiplier.powi(attempts.min(i32::MAX as u32) as i32);
        let capped = if raw.is_finite() {
            raw.min(self.max_delay.as_secs_f64())
        } else {
            self.max_delay.as_secs_f64()
        };
        Duration::from_secs_f64(capped.max(0.0))
    }

    /// The delay for attempt `attempts` with jitter applied.
    pub fn delay(&self, attempts: u32) -> Duration {
        let base = self.base_delay(attempts).as_secs_f64();
        let secs = match self.jitter {
            Jitter::None => base,
            Jitter::Full => fastrand::f64() * base,
            Jitter::Equal => {
                let low = base / 2.0;
                let high = (1.5 * base).min(self.max_delay.as_secs_f64()).max(low);
                low + fastrand::f64() * (high - low)
            }
        };
        Duration::from_secs_f64(secs.max(0.0))
    }
}

fn secs(field: &str, value: f64) -> Result<Duration> {
    if !value.is_finite() || !(0.0..=crate::clock::MAX_SECONDS).contains(&value) {
        return Err(Error::invalid(
            field,
            format!("must be a finite number >= 0, got {value}"),
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

impl RetryPolicy for ExponentialBackoff {
    fn on_error(&self, envelope: &Envelope, _failure: &FailureInfo) -> RetryAction {
        if envelope.attempts.saturating_add(1) >= self.max_attempts {
            RetryAction::Fail
        } else {
            RetryAction::Retry {
                delay: Some(self.delay(envelope.attempts)),
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "exponential_backoff(max_attempts={}, min_delay={}s, max_delay={}s, multiplier={}, jitter={:?})",
            self.max_attempts,
            self.min_delay.as_secs_f64(),
            self.max_delay.as_secs_f64(),
            self.multiplier,
            self.jitter
        )
    }
}

/// Routes to a different policy per [`FailureKind`], falling back to `default`, else failing.
#[derive(Debug, Default)]
pub struct ByFailureKind {
    policies: HashMap<FailureKind, Box<dyn RetryPolicy>>,
    default: Option<Box<dyn RetryPolicy>>,
}

impl ByFailureKind {
    /// An empty router; add at least one policy before [`build`](ByFailureKind::build).
    pub fn builder() -> Self {
        Self::default()
    }

    /// Uses `policy` for failures of `kind`.
    pub fn on(mut self, kind: FailureKind, policy: impl RetryPolicy + 'static) -> Self {
        self.policies.insert(kind, Box::new(policy));
        self
    }

    /// Uses `policy` for kinds without their own policy.
    pub fn default_policy(mut self, policy: impl RetryPolicy + 'static) -> Self {
        self.default = Some(Box::new(policy));
        self
    }

    /// Checks at least one policy was given.
    pub fn build(self) -> Result<Self> {
        if self.policies.is_empty() && self.default.is_none() {
            return Err(Error::invalid(
                "by_failure_kind",
                "needs at least one of default, error, timeout, cancelled",
            ));
        }
        Ok(self)
    }
}

impl RetryPolicy for ByFailureKind {
    fn on_error(&self, envelope: &Envelope, failure: &FailureInfo) -> RetryAction {
        match self.policies.get(&failure.kind).or(self.default.as_ref()) {
            Some(policy) => policy.on_error(envelope, failure),
            None => RetryAction::Fail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Stage;

    fn failure(kind: FailureKind) -> FailureInfo {
        FailureInfo {
            kind,
            exception_type: "E".into(),
            message: "m".into(),
            stage: Stage::Handler,
            connector: None,
            sinks_succeeded: Vec::new(),
            sinks_remaining: Vec::new(),
            traceback: None,
        }
    }

    fn attempt(n: u32) -> Envelope {
        Envelope::new(1).with_attempts(n)
    }

    #[test]
    fn max_attempts_three_allows_two_retries() {
        let p = MaxAttempts::new(3)
            .unwrap()
            .with_delay(Duration::from_secs(2));
        let f = failure(FailureKind::Error);
        assert_eq!(
            p.on_error(&attempt(0), &f),
            RetryAction::Retry {
                delay: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            p.on_error(&attempt(1), &f),
            RetryAction::Retry {
                delay: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(p.on_error(&attempt(2), &f), RetryAction::Fail);
    }

    #[test]
    fn zero_max_attempts_is_rejected_with_field_name() {
        let err = MaxAttempts::new(0).unwrap_err().to_string();
        assert_eq!(err, "max_attempts must be >= 1, got 0");
        let err = ExponentialBackoff::from_secs(3, 5.0, 1.0, 2.0, Jitter::None)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "max_delay_s must be >= min_delay_s (5), got 1");
        let err = ExponentialBackoff::from_secs(3, 1.0, 2.0, 0.0, Jitter::None)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "multiplier must be a finite number > 0, got 0");
        let err = ExponentialBackoff::from_secs(3, -1.0, 2.0, 2.0, Jitter::None)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "min_delay_s must be a finite number >= 0, got -1");
        assert!(
            "sideways"
                .parse::<Jitter>()
                .unwrap_err()
                .to_string()
                .starts_with("jitter must be one of")
        );
    }

    #[test]
    fn exponential_backoff_schedule_doubles_and_caps() {
        let p = ExponentialBackoff::from_secs(8, 1.0, 60.0, 2.0, Jitter::None).unwrap();
        let delays: Vec<u64> = (0..8).map(|n| p.base_delay(n).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        let f = failure(FailureKind::Error);
        assert_eq!(
            p.on_error(&attempt(2), &f),
            RetryAction::Retry {
                delay: Some(Duration::from_secs(4))
            }
        );
        assert_eq!(p.on_error(&attempt(7), &f), RetryAction::Fail);
    }

    #[test]
    fn jitter_stays_within_documented_bounds() {
        let full = ExponentialBackoff::from_secs(10, 1.0, 10.0, 2.0, Jitter::Full).unwrap();
        let equal = ExponentialBackoff::from_secs(10, 1.0, 10.0, 2.0, Jitter::Equal).unwrap();
        for _ in 0..2000 {
            for n in 0..6 {
                let base = full.base_delay(n).as_secs_f64();
                let d = full.delay(n).as_secs_f64();
                assert!(
                    (0.0..=base).contains(&d),
                    "full jitter {d} outside [0, {base}]"
                );
                let d = equal.delay(n).as_secs_f64();
                let high = (1.5 * base).min(10.0);
                assert!(
                    d >= base / 2.0 - 1e-9 && d <= high + 1e-9,
                    "equal jitter {d} outside [{}, {high}]",
                    base / 2.0
                );
            }
        }
    }

    #[test]
    fn by_failure_kind_routes_then_falls_back_then_fails() {
        let p = ByFailureKind::builder()
            .on(FailureKind::Timeout, MaxAttempts::new(5).unwrap())
            .build()
            .unwrap();
        assert_eq!(
            p.on_error(&attempt(0), &failure(FailureKind::Timeout)),
            RetryAction::Retry { delay: None }
        );
        assert_eq!(
            p.on_error(&attempt(0), &failure(FailureKind::Error)),
            RetryAction::Fail
        );
        let p = ByFailureKind::builder()
            .default_policy(MaxAttempts::new(2).unwrap())
            .build()
            .unwrap();
        assert_eq!(
            p.on_error(&attempt(0), &failure(FailureKind::Error)),
            RetryAction::Retry { delay: None }
        );
        assert!(ByFailureKind::builder().build().is_err());
    }
}

//! [`ExecutionSourceOptions`]: what a source claims, how long it leases, how it renews and polls.

use super::*;

/// Options of an [`ExecutionSource`], with the reference's defaults.
///
/// ```
/// use std::time::Duration;
/// use onestep_core::execution::ExecutionSourceOptions;
///
/// let options = ExecutionSourceOptions::new("billing", "monthly-report")
///     .with_lease_duration(Duration::from_secs(60))
///     .with_heartbeat_interval(Duration::from_secs(15))
///     .with_worker_id("worker-1");
/// assert!(options.validate("").is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ExecutionSourceOptions {
    /// The namespace to claim from (1..=255).
    pub namespace: String,
    /// Exactly one task name.
    pub task_names: Vec<String>,
    /// The most executions one claim takes (default 100).
    pub batch_size: usize,
    /// How many claimed executions the source may hold beyond what its runner asked for
    /// (default [`Prefetch::Fixed`]`(0)`: claim only for free slots, as the reference does). With
    /// a prefetch buffer a busy runner finds its next executions already claimed when slots
    /// free up, so short tasks do not wait a claim round trip: a fetch the buffer can serve
    /// answers at once, and a claim refills the buffer in the background once it is half
    /// empty (at most `batch_size` per claim). Buffered executions are leased to this worker
    /// and run by nobody else until started or handed back: one still unstarted after
    /// `heartbeat_interval` is handed back (it is queued again, claimable at once, its attempt
    /// counted), and the runner hands the whole buffer back when it pauses or stops.
    /// [`Prefetch::Adaptive`] (`auto`) sizes the buffer from the measured pace, so it holds
    /// nothing for long tasks.
    pub prefetch: Prefetch,
    /// The wait between claims when nothing is ready (default 1 s; YAML `poll_interval_s`).
    pub poll_interval: Duration,
    /// How long a lease lasts unless renewed (default 90 s; YAML `lease_duration_s`).
    pub lease_duration: Duration,
    /// The time between heartbeats; at most a third of the lease (default 30 s; YAML
    /// `heartbeat_interval_s`).
    pub heartbeat_interval: Duration,
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
            prefetch: Prefetch::Fixed(0),
            poll_interval: Duration::from_secs(1),
            lease_duration: Duration::from_secs(90),
            heartbeat_interval: Duration::from_secs(30),
            worker_id: "onestep-worker".to_string(),
        }
    }

    /// Sets [`batch_size`](Self::batch_size).
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets [`prefetch`](Self::prefetch).
    pub fn with_prefetch(mut self, prefetch: Prefetch) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets [`poll_interval`](Self::poll_interval).
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Sets [`lease_duration`](Self::lease_duration).
    pub fn with_lease_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration;
        self
    }

    /// Sets [`heartbeat_interval`](Self::heartbeat_interval).
    pub fn with_heartbeat_interval(mut self, heartbeat_interval: Duration) -> Self {
        self.heartbeat_interval = heartbeat_interval;
        self
    }

    /// Sets [`worker_id`](Self::worker_id).
    pub fn with_worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = worker_id.into();
        self
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
        self.prefetch
            .check()
            .map_err(|message| invalid("prefetch", message))?;
        let max = Duration::from_secs_f64(crate::clock::MAX_SECONDS);
        for (name, value) in [
            ("poll_interval", self.poll_interval),
            ("lease_duration", self.lease_duration),
            ("heartbeat_interval", self.heartbeat_interval),
        ] {
            if value.is_zero() || value > max {
                return Err(invalid(
                    name,
                    format!(
                        "must be longer than 0 s and at most 100 years, got {} s",
                        value.as_secs_f64()
                    ),
                ));
            }
        }
        if self.heartbeat_interval > self.lease_duration / 3 {
            return Err(invalid(
                "heartbeat_interval",
                format!(
                    "must be <= lease_duration / 3 ({} s), got {} s",
                    self.lease_duration.as_secs_f64() / 3.0,
                    self.heartbeat_interval.as_secs_f64()
                ),
            ));
        }
        name("worker_id", &self.worker_id, 255).map_err(|e| requalify(e, prefix))?;
        Ok(())
    }
}

/// How many claimed executions an [`ExecutionSource`] holds beyond what its runner asked for
/// ([`ExecutionSourceOptions::prefetch`]). Written as a count, or `auto` for
/// [`Adaptive`](Self::Adaptive) (YAML `prefetch`, `--prefetch`).
///
/// ```
/// use onestep_core::execution::Prefetch;
///
/// assert_eq!("auto".parse::<Prefetch>(), Ok(Prefetch::Adaptive));
/// assert_eq!("64".parse::<Prefetch>(), Ok(Prefetch::Fixed(64)));
/// assert_eq!(Prefetch::Adaptive.to_string(), "auto");
/// assert!("many".parse::<Prefetch>().is_err());
/// assert_eq!(serde_json::json!(Prefetch::Adaptive), "auto");
/// assert_eq!(serde_json::json!(Prefetch::Fixed(64)), 64);
/// assert!(Prefetch::Fixed(10_001).check().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Up to this many, refilled with each claim (0: claim only for free slots).
    Fixed(usize),
    /// What the runner takes in two claim round trips at its current rate, at most
    /// `batch_size`, measured as the worker runs. A buffered execution then waits one to two
    /// round trips for its slot, and tasks longer than two round trips per slot get no buffer
    /// (at 128 slots and 5 ms claims: tasks of 1.3 s or more).
    Adaptive,
}

impl Prefetch {
    /// Checks a count is at most [`MAX_PREFETCH`]; the error says what was expected.
    pub fn check(self) -> std::result::Result<Self, String> {
        match self {
            Self::Fixed(n) if n > MAX_PREFETCH => {
                Err(format!("must be <= {MAX_PREFETCH} or `auto`, got {n}"))
            }
            valid => Ok(valid),
        }
    }
}

/// A count as a number, `Adaptive` as `"auto"` (how a source describes it).
impl serde::Serialize for Prefetch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Fixed(n) => serde::Serialize::serialize(n, s),
            Self::Adaptive => s.collect_str(self),
        }
    }
}

impl Default for Prefetch {
    fn default() -> Self {
        Self::Fixed(0)
    }
}

impl std::fmt::Display for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Adaptive => f.write_str("auto"),
        }
    }
}

impl std::str::FromStr for Prefetch {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(Self::Adaptive),
            n => n
                .parse()
                .map(Self::Fixed)
                .map_err(|_| format!("expected a count of executions or `auto`, got {s:?}")),
        }
    }
}

pub(super) fn requalify(err: ExecutionError, prefix: &str) -> Error {
    match err {
        ExecutionError::InvalidArgument { field, message } => {
            Error::invalid(format!("{prefix}{field}"), message)
        }
        other => other.into(),
    }
}

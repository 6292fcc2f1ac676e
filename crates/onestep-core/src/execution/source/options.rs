//! [`ExecutionSourceOptions`]: what a source claims, how long it leases, how it renews and polls.

use super::*;

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

pub(super) fn requalify(err: ExecutionError, prefix: &str) -> Error {
    match err {
        ExecutionError::InvalidArgument { field, message } => {
            Error::invalid(format!("{prefix}{field}"), message)
        }
        other => other.into(),
    }
}

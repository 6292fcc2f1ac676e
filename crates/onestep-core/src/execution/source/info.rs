//! [`ExecutionInfo`]: what a handler sees of the tracked execution it runs.

use super::*;

/// The tracked execution an attempt runs, as [`TaskContext::execution`](crate::TaskContext::execution)
/// gives it: ids, the attempt number, and the lease and cancel state as the source's renewer
/// last saw them.
///
/// ```
/// use onestep_core::{TaskContext, TaskError};
///
/// async fn report(ctx: TaskContext, _input: serde_json::Value) -> Result<(), TaskError> {
///     if let Some(execution) = ctx.execution() {
///         println!("execution {} attempt {}", execution.id(), execution.attempt());
///         if execution.cancel_requested() {
///             return Err(TaskError::new("CancelledError", "asked to stop"));
///         }
///     }
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct ExecutionInfo {
    pub(super) id: Uuid,
    pub(super) attempt_id: Uuid,
    pub(super) attempt: u32,
    pub(super) lease: Arc<LeaseState>,
    pub(super) progress: Arc<super::progress::Progress>,
}

impl ExecutionInfo {
    /// The execution id (what the submitter got back).
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// This attempt's id.
    pub fn attempt_id(&self) -> Uuid {
        self.attempt_id
    }

    /// This attempt's number, 1 for the first (the execution's `attempts` once claimed).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the lease runs out unless renewed; the renewer moves it on every heartbeat.
    pub fn lease_expires_at(&self) -> OffsetDateTime {
        *self
            .lease
            .expires_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a cancel was requested and seen by a heartbeat; the attempt's
    /// [cancellation](crate::TaskContext::cancellation) fires then too.
    pub fn cancel_requested(&self) -> bool {
        self.lease.cancel_requested.load(Ordering::SeqCst)
    }

    /// Reports how far the attempt got, as any JSON value (`{"done": 40, "total": 100}`): the
    /// API, the CLI and the dashboard show the latest one. Reports are cheap: the store is
    /// written at most once per [`PROGRESS_INTERVAL`](super::PROGRESS_INTERVAL), with the latest
    /// value, and the last one before the attempt completes. Refused (nothing kept) when the
    /// value is larger than [`MAX_PROGRESS_BYTES`](super::MAX_PROGRESS_BYTES) as JSON or holds
    /// U+0000. Tables without the progress column (created by the reference, without
    /// `auto_create`) keep nothing.
    pub fn report_progress(&self, progress: Value) -> ExecutionResult<()> {
        self.progress.report(progress)
    }
}

impl std::fmt::Debug for ExecutionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionInfo")
            .field("id", &self.id)
            .field("attempt_id", &self.attempt_id)
            .field("attempt", &self.attempt)
            .field("lease_expires_at", &self.lease_expires_at())
            .field("cancel_requested", &self.cancel_requested())
            .finish()
    }
}

//! Tracked execution: an API process submits work and gets an id back; workers claim it under a
//! lease, heartbeat, honour cooperative cancellation, retry with back-off and store the result;
//! the caller polls status and reads the result.
//!
//! - [`ExecutionClient`] (API side): submit, get, list, cancel, result, wait.
//! - [`ExecutionSource`] (worker side): a [`Source`](crate::Source) that claims executions of one
//!   task; plug it into an [`OneStepApp`](crate::OneStepApp) task.
//! - [`ExecutionBackend`] / [`LeasedExecutionBackend`]: the storage contract, implemented here by
//!   [`MemoryExecutionBackend`] and by the SQL backends in `onestep-sql`.
//! - Payloads, metadata and results use the reference's tagged JSON ([`codec`]); idempotency
//!   digests ([`digest`]) and list cursors ([`cursor`]) are byte-compatible with it.
//!
//! At-least-once: a handler may run again after a crash or a lost lease, so its side effects must
//! be idempotent on the execution id (`ctx.meta().get("onestep.execution")`, field `id`).

pub mod backend;
pub mod canonical;
pub mod client;
pub mod codec;
pub mod cursor;
pub mod digest;
pub mod error;
pub mod inspect;
pub mod memory;
mod pycompat;
pub mod record;
pub mod snapshot;
pub mod source;
pub mod state;
pub mod status;
pub mod stored;

pub use backend::{ExecutionBackend, LeasedExecutionBackend};
pub use client::{ExecutionClient, WaitBackoff};
pub use error::{ExecutionError, ExecutionResult};
pub use inspect::ExecutionInspector;
pub use memory::MemoryExecutionBackend;
pub use record::{
    ClaimedExecution, Execution, ExecutionCompletion, ExecutionErrorDetail, ExecutionLease,
    ExecutionLimits, ExecutionPage, ExecutionQuery, ExecutionRequest, HeartbeatResult,
    SubmitOptions,
};
pub use source::{
    ExecutionInfo, ExecutionSource, ExecutionSourceOptions, ManagedDelivery, Prefetch,
};
pub use status::{AttemptStatus, ExecutionStatus, ParseStatusError};

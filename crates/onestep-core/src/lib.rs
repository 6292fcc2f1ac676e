//! # onestep-core
//!
//! An async task runtime: tasks consume deliveries from [sources](Source), run a typed handler,
//! emit results to [sinks](Sink), and retry or dead-letter failures according to a
//! [retry policy](retry). Tracked execution (an API submits, workers claim under a lease and store
//! the result) lives in [`execution`]; SQL backends are in `onestep-sql` and `onestep-postgres`.
//!
//! ```no_run
//! use std::time::Duration;
//! use onestep_core::{ExponentialBackoff, Jitter, MemoryQueue, OneStepApp, Task, TaskArgs, TaskContext, TaskError};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Resize { url: String, width: u32 }
//!
//! impl TaskArgs for Resize {
//!     const TASK_NAME: &'static str = "resize";
//!     type Output = String;
//! }
//!
//! async fn resize(_ctx: TaskContext, job: Resize) -> Result<String, TaskError> {
//!     Ok(format!("{} at {}px", job.url, job.width))
//! }
//!
//! # async fn main_() -> Result<(), onestep_core::Error> {
//! let jobs = MemoryQueue::new("resize", 1_000)?;
//! let retry = ExponentialBackoff::new(5, Duration::from_secs(1), Duration::from_secs(30), 2.0, Jitter::Full)?;
//! let app = OneStepApp::builder("images")
//!     .task(Task::of(resize).source(jobs).concurrency(8).retry(retry))
//!     .build()?;
//! app.run().await // until Ctrl-C or SIGTERM
//! # }
//! ```

pub mod app;
pub mod args;
pub mod capture;
pub mod catalog;
pub mod clock;
pub mod connector;
pub mod delivery;
pub mod envelope;
pub mod error;
pub mod event;
pub mod execution;
pub mod failure;
pub mod metrics;
pub mod retry;
mod runtime;
pub mod source;
pub mod state;
pub mod task;
pub mod wire;

pub use app::{AppBuilder, AppHandle, OneStepApp};
pub use args::TaskArgs;
pub use connector::{BoxError, ConnectorErrorKind, ConnectorOperation, ConnectorOperationError};
pub use delivery::Delivery;
pub use envelope::Envelope;
pub use error::{Error, Result};
pub use event::{TaskEvent, TaskEventKind};
pub use failure::{FailureInfo, FailureKind, Stage, TaskError};
pub use retry::{
    ByFailureKind, ExponentialBackoff, Jitter, MaxAttempts, NoRetry, RetryAction, RetryPolicy,
};
pub use runtime::control::RunnerStatus;
pub use source::buffer::EnvelopeBuffer;
pub use source::cron::CronSource;
pub use source::interval::IntervalSource;
pub use source::memory::MemoryQueue;
pub use source::{IntoSink, IntoSource, Overlap, Resource, Sink, Source};
pub use state::{CursorStore, InMemoryCursorStore, InMemoryStateStore, StateStore};
pub use task::{Emit, EmitBinding, EmitRoute, Task, TaskContext};

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

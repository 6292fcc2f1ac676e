//! [`TaskArgs`]: a task defined once as a type, so a submit and a handler cannot disagree on its
//! name or on what goes in and comes out.
//!
//! ```no_run
//! use onestep_core::execution::{ExecutionClient, MemoryExecutionBackend, SubmitOptions};
//! use onestep_core::{OneStepApp, Task, TaskArgs, TaskContext, TaskError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct MonthlyReport { month: String }
//!
//! #[derive(Serialize, Deserialize)]
//! struct Report { rows: u32 }
//!
//! impl TaskArgs for MonthlyReport {
//!     const TASK_NAME: &'static str = "monthly-report";
//!     type Output = Report;
//! }
//!
//! async fn build(_ctx: TaskContext, args: MonthlyReport) -> Result<Report, TaskError> {
//!     Ok(Report { rows: args.month.len() as u32 })
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ExecutionClient::new(MemoryExecutionBackend::new(), "billing")?;
//! let submitted = client
//!     .submit_args(&MonthlyReport { month: "2026-11".into() }, SubmitOptions::default())
//!     .await?;
//! let app = OneStepApp::builder("worker")
//!     .task(Task::of(build).source(client.source_for::<MonthlyReport>()?))
//!     .build()?;
//! # let _ = app;
//! let report: Report = client.output::<MonthlyReport>(submitted.id).await?;
//! # Ok(()) }
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The arguments of one kind of task, and the name and result type that come with them
/// (compare River's `JobArgs`).
///
/// [`Task::of`](crate::Task::of) builds the worker's task from a handler of `Self`,
/// [`ExecutionClient::submit_args`](crate::execution::ExecutionClient::submit_args) submits
/// under [`TASK_NAME`](Self::TASK_NAME), and
/// [`ExecutionClient::output`](crate::execution::ExecutionClient::output) reads the result as
/// [`Output`](Self::Output). The untyped API (a name and a JSON payload) stays for dynamic
/// cases, such as the CLI and the HTTP API.
pub trait TaskArgs: Serialize + DeserializeOwned + Send + 'static {
    /// The task name submits and workers agree on.
    const TASK_NAME: &'static str;

    /// What the handler returns and a caller reads back.
    type Output: Serialize + DeserializeOwned + Send + 'static;
}

//! # onestep-postgres
//!
//! The PostgreSQL face of onestep's tracked execution: add `onestep-core` and this crate.
//! These are the same types as `onestep_sql::postgres` (one implementation), re-exported so a
//! PostgreSQL user depends on one small name.
//!
//! - [`PostgresExecutionBackend`]: submit, read, list, cancel (API side) and claim, heartbeat,
//!   complete (worker side) on the reference's tables.
//! - [`PostgresExecutionSource`] / [`execution_source`]: the worker source for one task.
//! - [`PostgresConnector`]: a shared, lazily built pool for several backends and sources.
//!
//! Leases are decided with the transaction's database time, so clock skew between workers does
//! not matter. See `docs/deployment-postgres.md` for roles, grants and operations.
//!
//! ```no_run
//! use onestep_core::execution::{ExecutionClient, SubmitOptions};
//! use onestep_core::{OneStepApp, Task, TaskArgs, TaskContext, TaskError};
//! use onestep_postgres::{BackendOptions, PostgresExecutionBackend};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Monthly { month: String }
//!
//! impl TaskArgs for Monthly {
//!     const TASK_NAME: &'static str = "monthly";
//!     type Output = u32;
//! }
//!
//! async fn monthly(_ctx: TaskContext, report: Monthly) -> Result<u32, TaskError> {
//!     Ok(report.month.len() as u32)
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let backend = PostgresExecutionBackend::new("postgres://app@127.0.0.1/app", BackendOptions::default())?;
//! let client = ExecutionClient::new(backend, "reports")?;
//! // API side: submit and get an id back.
//! let submitted = client.submit_args(&Monthly { month: "2026-11".into() }, SubmitOptions::default()).await?;
//!
//! // Worker side (here on the same pool): claim, run, store the result.
//! let app = OneStepApp::builder("report-worker")
//!     .task(Task::of(monthly).source(client.source_for::<Monthly>()?))
//!     .build()?;
//! app.run().await?;
//! let rows: u32 = client.output::<Monthly>(submitted.id).await?;
//! # let _ = rows;
//! # Ok(()) }
//! ```

pub use onestep_sql::postgres::{
    Postgres, PostgresConnector, PostgresExecutionBackend, PostgresExecutionSource,
    execution_source,
};
pub use onestep_sql::{BackendOptions, PoolSettings};

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

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
//! use std::sync::Arc;
//! use onestep_core::execution::{ExecutionClient, ExecutionSourceOptions, SubmitOptions};
//! use onestep_core::{OneStepApp, Task, TaskContext, TaskError};
//! use onestep_postgres::{BackendOptions, PostgresExecutionBackend, execution_source};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dsn = "postgres://app@127.0.0.1/app";
//! // API process: submit and get an id back.
//! let client = ExecutionClient::new(PostgresExecutionBackend::new(dsn, BackendOptions::default())?, "reports")?;
//! let submitted = client.submit("monthly", &serde_json::json!({"month": "2026-11"}), SubmitOptions::default()).await?;
//!
//! // Worker process: claim, run, store the result.
//! let source = execution_source(dsn, BackendOptions::default(), ExecutionSourceOptions::new("reports", "monthly"))?;
//! let app = OneStepApp::builder("report-worker")
//!     .task(Task::new("monthly").source(Arc::new(source)).handler(|_ctx: TaskContext, input: serde_json::Value| async move {
//!         Ok::<_, TaskError>(serde_json::json!({"rows": 42, "month": input["month"]}))
//!     }))
//!     .build()?;
//! app.run().await?;
//! # let _ = submitted;
//! # Ok(()) }
//! ```

pub use onestep_sql::postgres::{
    Postgres, PostgresConnector, PostgresExecutionBackend, PostgresExecutionSource,
    execution_source,
};
pub use onestep_sql::{BackendOptions, PoolSettings};

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

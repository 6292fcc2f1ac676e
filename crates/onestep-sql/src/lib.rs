//! # onestep-sql
//!
//! Durable tracked execution on SQL databases: one state machine ([`SqlExecutionBackend`])
//! over three dialects behind features — [`postgres`], [`mysql`] (MySQL 8.0.16+ and MariaDB
//! 10.6+) and [`sqlite`]. The tables are the Python reference's, so a Python API and a Rust worker
//! can share one database.
//!
//! ```no_run
//! use onestep_core::execution::{ExecutionClient, ExecutionSourceOptions, SubmitOptions};
//! use onestep_sql::postgres::{self, PostgresExecutionBackend};
//! use onestep_sql::BackendOptions;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // API process
//! let backend = PostgresExecutionBackend::new("postgres://app@127.0.0.1/app", BackendOptions::default())?;
//! let client = ExecutionClient::new(backend, "billing")?;
//! let execution = client.submit("monthly-report", &serde_json::json!({"month": "2026-11"}),
//!                               SubmitOptions::default().idempotency_key("report-2026-11")).await?;
//!
//! // Worker process: plug the source into an OneStepApp task named "monthly-report".
//! let source = postgres::execution_source(
//!     "postgres://app@127.0.0.1/app",
//!     BackendOptions::default(),
//!     ExecutionSourceOptions::new("billing", "monthly-report"),
//! )?;
//! # let _ = (execution, source);
//! # Ok(()) }
//! ```

#[cfg(feature = "mysql-binlog")]
pub mod binlog;
pub mod catalog;
mod connector;
mod decode;
pub mod dialect;
pub mod dsn;
pub mod incremental;
mod machine;
pub mod param;
mod pool_health;
mod query;
pub mod schema;
mod solo;
mod sql;
pub mod state;
pub mod table_queue;
pub mod table_sink;
mod user_table;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use connector::SqlConnector;
pub use dialect::{Dialect, PoolSettings};
pub use machine::{BackendOptions, PROGRESS_COLUMN, SqlExecutionBackend, StatusCount};

use onestep_core::execution::ExecutionError;
use onestep_core::{ConnectorErrorKind, ConnectorOperation, ConnectorOperationError};

/// A setup failure (missing tables, unsupported server) as a misconfiguration.
pub(crate) fn setup_error<D: Dialect>(message: String) -> ExecutionError {
    ExecutionError::Connector(
        ConnectorOperationError::new(
            D::NAME,
            ConnectorOperation::Open,
            ConnectorErrorKind::Misconfigured,
            format!("{}.execution", D::NAME),
        )
        .with_cause(std::io::Error::other(message)),
    )
}

/// A failed `auto_create` statement: names the tables and the option, keeps the driver's error
/// (and its classification) as the cause.
pub(crate) fn ddl_error<D: Dialect>(
    tables: &schema::TableNames,
    err: sqlx::Error,
) -> ExecutionError {
    ExecutionError::Connector(
        ConnectorOperationError::new(
            D::NAME,
            ConnectorOperation::Open,
            pool_health::classify::<D>(&err),
            format!("{}.execution", D::NAME),
        )
        .with_cause(DdlError {
            executions: tables.executions.clone(),
            attempts: tables.attempts.clone(),
            source: err,
        }),
    )
}

/// Creating the tables failed; a runtime role without DDL rights needs `auto_create = false`.
#[derive(Debug, thiserror::Error)]
#[error(
    "creating the execution tables {executions}, {attempts} failed (auto_create is on; a role \
     without DDL rights needs auto_create = false and tables created beforehand): {source}"
)]
struct DdlError {
    executions: String,
    attempts: String,
    source: sqlx::Error,
}

/// This crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

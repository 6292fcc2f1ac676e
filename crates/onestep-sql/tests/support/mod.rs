//! Backend factories for the conformance suite on real servers.
//!
//! Servers come from `ONESTEP_POSTGRES_URL` / `ONESTEP_MYSQL_URL` (what `cargo xtask test` sets:
//! a fresh database per run), else the local default servers. A server that does not answer
//! fails the test with a message saying how to start one.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use onestep_core::execution::ExecutionBackend;
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use onestep_testkit::{BackendFactory, Setup};

pub mod live;
pub mod privilege;
pub mod raw;

/// The PostgreSQL URL tests use.
pub fn postgres_url() -> String {
    std::env::var("ONESTEP_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The MySQL/MariaDB URL tests use.
pub fn mysql_url() -> String {
    std::env::var("ONESTEP_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// The URL of a MariaDB/MySQL server writing a row-format binary log (the binlog tests'):
/// `ONESTEP_MYSQL_BINLOG_URL`, which `cargo xtask test` sets (to a throwaway server started
/// with `--log-bin --binlog-format=ROW` when the local one logs no rows), else the MySQL URL.
pub fn mysql_binlog_url() -> String {
    std::env::var("ONESTEP_MYSQL_BINLOG_URL").unwrap_or_else(|_| mysql_url())
}

/// A directory for one test's SQLite databases, removed (with them) when the guard is dropped,
/// whether the test passed or panicked.
pub fn sqlite_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("onestep-sqlite-tests-")
        .tempdir()
        .unwrap()
}

/// A connector to a SQLite database `file` in a directory of its own, and the directory, which
/// removes the database when the test drops it.
pub fn sqlite_connected(
    file: &str,
) -> (
    onestep_sql::SqlConnector<onestep_sql::sqlite::Sqlite>,
    Option<tempfile::TempDir>,
) {
    let dir = sqlite_dir();
    let dsn = format!("sqlite://{}?mode=rwc", dir.path().join(file).display());
    let connector = onestep_sql::SqlConnector::new(&dsn).unwrap();
    (connector, Some(dir))
}

/// Builds backends of dialect `D` whose tables are named after the case's store.
pub struct SqlFactory<D: Dialect> {
    dsn: Box<dyn Fn(&str) -> String + Send + Sync>,
    cache: Mutex<HashMap<String, SqlExecutionBackend<D>>>,
    /// The SQLite databases' directory, removed when the factory (one per test) is dropped.
    _dir: Option<tempfile::TempDir>,
}

impl<D: Dialect> SqlFactory<D> {
    /// A factory for the DSN `dsn(store)`.
    pub fn new(dsn: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        Self {
            dsn: Box::new(dsn),
            cache: Mutex::new(HashMap::new()),
            _dir: None,
        }
    }
}

/// PostgreSQL backends over per-case tables.
pub fn postgres() -> SqlFactory<onestep_sql::postgres::Postgres> {
    SqlFactory::new(|_| postgres_url())
}

/// MySQL/MariaDB backends over per-case tables.
pub fn mysql() -> SqlFactory<onestep_sql::mysql::MySql> {
    SqlFactory::new(|_| mysql_url())
}

/// SQLite backends, one database file per case, in a directory the factory removes.
pub fn sqlite() -> SqlFactory<onestep_sql::sqlite::Sqlite> {
    let dir = sqlite_dir();
    let path = dir.path().to_path_buf();
    SqlFactory {
        _dir: Some(dir),
        ..SqlFactory::new(move |store| format!("sqlite://{}/{store}.db", path.display()))
    }
}

/// Backend options for a case's store.
pub fn options(setup: &Setup) -> BackendOptions {
    BackendOptions::default()
        .with_table(format!("{}_executions", setup.store))
        .with_attempts_table(format!("{}_attempts", setup.store))
        .with_auto_create(true)
        .with_limits(setup.limits)
        .with_reclaim_batch_size(setup.reclaim_batch_size)
        .with_clock(Arc::new(setup.clock.clone()))
        .with_maintenance_interval(std::time::Duration::ZERO)
        .with_expiry_sweep_interval(std::time::Duration::ZERO)
}

#[async_trait]
impl<D: Dialect> BackendFactory for SqlFactory<D> {
    type Backend = SqlExecutionBackend<D>;

    async fn create(&self, setup: &Setup) -> SqlExecutionBackend<D> {
        if let Some(b) = self.cache.lock().unwrap().get(&setup.store) {
            return b.clone();
        }
        let dsn = (self.dsn)(&setup.store);
        let backend =
            SqlExecutionBackend::<D>::new(&dsn, options(setup)).expect("valid backend options");
        if let Err(err) = backend.open().await {
            panic!(
                "the {} server for the conformance suite is not reachable ({err}). Start one, set \
                 ONESTEP_POSTGRES_URL / ONESTEP_MYSQL_URL, or run `cargo xtask test`, which starts throwaway servers.",
                D::NAME
            );
        }
        self.cache
            .lock()
            .unwrap()
            .insert(setup.store.clone(), backend.clone());
        backend
    }
}

//! [`SqlConnector`]: a lazily built connection pool that backends and sources can share.

use std::sync::{Arc, Mutex};

use onestep_core::execution::{ExecutionError, ExecutionResult};
use onestep_core::{ConnectorErrorKind, ConnectorOperation, ConnectorOperationError};

use crate::dialect::{Dialect, PoolSettings, Row};
use crate::dsn::Dsn;
use crate::param::Param;
use crate::solo::{Lent, Solo};

struct Inner<D: Dialect> {
    dsn: Dsn,
    settings: PoolSettings,
    pool: Mutex<Option<sqlx::Pool<D::Db>>>,
    /// The connection kept for one-statement writes of one caller at a time.
    solo: Solo<D>,
}

/// A database connection pool for one dialect, built on first use (no I/O before).
///
/// Clones share the pool. Pass one connector to several backends and sources so a worker holds
/// one pool; a backend built from a connector never closes it.
pub struct SqlConnector<D: Dialect> {
    inner: Arc<Inner<D>>,
}

impl<D: Dialect> Clone for SqlConnector<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlConnector<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConnector")
            .field("dsn", &self.inner.dsn)
            .field("settings", &self.inner.settings)
            .finish()
    }
}

impl<D: Dialect> SqlConnector<D> {
    /// A connector for `dsn` with the dialect's default [`PoolSettings`]
    /// ([`Dialect::default_pool_settings`]: 10 connections and a 5 s acquire timeout, on SQLite
    /// one connection and 10 s). The DSN may use the reference's SQLAlchemy spelling
    /// (`postgresql+psycopg://…`); its scheme must match the dialect.
    pub fn new(dsn: &str) -> ExecutionResult<Self> {
        let dsn = Dsn::parse(dsn).map_err(|m| {
            ExecutionError::invalid("dsn", m.trim_start_matches("dsn ").to_string())
        })?;
        if dsn.scheme() != D::NAME {
            return Err(ExecutionError::invalid(
                "dsn",
                format!(
                    "must be a {} URL, got a {} URL ({})",
                    D::NAME,
                    dsn.scheme(),
                    dsn.redacted()
                ),
            ));
        }
        Ok(Self::build(dsn, D::default_pool_settings()))
    }

    fn build(dsn: Dsn, settings: PoolSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                dsn,
                settings,
                pool: Mutex::new(None),
                solo: Solo::default(),
            }),
        }
    }

    /// Replaces the pool settings (`max_connections >= 1`, `acquire_timeout > 0`).
    pub fn with_settings(self, settings: PoolSettings) -> ExecutionResult<Self> {
        if settings.max_connections < 1 {
            return Err(ExecutionError::invalid(
                "max_connections",
                "must be >= 1, got 0",
            ));
        }
        if settings.acquire_timeout.is_zero() {
            return Err(ExecutionError::invalid(
                "acquire_timeout_s",
                "must be > 0, got 0",
            ));
        }
        Ok(Self::build(self.inner.dsn.clone(), settings))
    }

    /// The DSN (prints redacted).
    pub fn dsn(&self) -> &Dsn {
        &self.inner.dsn
    }

    /// The pool, built on first call.
    pub fn pool(&self) -> ExecutionResult<sqlx::Pool<D::Db>> {
        let mut slot = self.inner.pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pool) = slot.as_ref().filter(|p| !p.is_closed()) {
            return Ok(pool.clone());
        }
        let pool = D::connect_lazy(&self.inner.dsn, &self.inner.settings).map_err(|message| {
            ExecutionError::Connector(
                ConnectorOperationError::new(
                    D::NAME,
                    ConnectorOperation::Open,
                    ConnectorErrorKind::Misconfigured,
                    self.inner.dsn.redacted(),
                )
                .with_cause(std::io::Error::other(message)),
            )
        })?;
        *slot = Some(pool.clone());
        Ok(pool)
    }

    /// A connection for one statement that commits by itself: the connector's own when no other
    /// caller holds it (see `solo.rs`: it is not handed back through the pool), else one of
    /// `pool`'s. Give it back with [`Lent::keep`] once the statement succeeded.
    pub(crate) async fn lend<'a>(
        &'a self,
        pool: &sqlx::Pool<D::Db>,
    ) -> Result<Lent<'a, D::Db>, sqlx::Error> {
        self.inner.solo.lend(pool).await
    }

    /// Closes the pool and the connector's own connection; the next use opens new ones.
    pub async fn close(&self) {
        let pool = self
            .inner
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // Marked closed at once, so that no submit opens the connector's own connection anew
        // while it is being closed.
        let closing = pool.as_ref().map(sqlx::Pool::close);
        self.inner.solo.close().await;
        if let Some(closing) = closing {
            closing.await;
        }
    }

    /// Runs one query in a transaction of its own and returns its rows; `error` maps a driver
    /// error (the stores and the sources over a user's table name themselves in it).
    pub(crate) async fn fetch_alone(
        &self,
        sql: &str,
        params: Vec<Param>,
        error: impl Fn(sqlx::Error) -> onestep_core::Error,
    ) -> onestep_core::Result<Vec<Row<D>>> {
        let pool = self.pool()?;
        let mut tx = D::begin(&pool).await.map_err(&error)?;
        let rows = D::fetch(&mut tx, sql, params).await.map_err(&error)?;
        tx.commit().await.map_err(&error)?;
        Ok(rows)
    }

    /// Runs one statement in a transaction of its own; see [`SqlConnector::fetch_alone`].
    pub(crate) async fn execute_alone(
        &self,
        sql: &str,
        params: Vec<Param>,
        error: impl Fn(sqlx::Error) -> onestep_core::Error,
    ) -> onestep_core::Result<()> {
        let pool = self.pool()?;
        let mut tx = D::begin(&pool).await.map_err(&error)?;
        D::execute(&mut tx, sql, params).await.map_err(&error)?;
        tx.commit().await.map_err(&error)
    }
}

//! [`Solo`]: one connection a connector keeps between one-statement submits of one caller at a
//! time (PostgreSQL's `BatchPaths::insert_one`, MySQL's insert on its own, `Dialect::execute_on`), so that a caller
//! submitting one by one does not pay sqlx's hand-back for every statement.
//!
//! sqlx gives a pooled connection back in a task it spawns, which pings the server before the
//! connection is idle again: every one-statement submit cost a task, a wake-up of another
//! runtime thread and a second round trip, on the same two cores as the server. The connection
//! here never goes back to a pool: the next caller takes it as it is. Sequential submits
//! (`burndown --submit-batch 0`, N = 5,000, alternating rounds against the binary before):
//! PostgreSQL from a median 2,660/s to 3,023/s, faster in all 8 rounds (median +22 %), where
//! `pgbench` with one client commits ~3,100/s on this machine, and with this file's final checks
//! in a slower hour 2,006/s to 2,287/s, faster in 10 of 12 (median +9 %); MariaDB from 2,014/s
//! to 2,285/s, faster in 12 of 16 rounds (median +18 %).
//!
//! One caller at a time: a caller that finds the connection taken uses the pool, as before. The
//! connection is the connector's own, opened on first use with the pool's connect options and
//! set up as the pool sets up its own (`Dialect::set_up_session`), so it
//! comes on top of [`PoolSettings::max_connections`](crate::PoolSettings::max_connections) and
//! never holds back a pool's caller. It is tested as the pool tests its own (a ping after it sat
//! idle for `PING_IF_IDLE_FOR`, or for a while after any connection broke), within the pool's
//! acquire timeout, and replaced past the pool's `max_lifetime` and `idle_timeout` (checked when
//! it is next used) or when the caller runs on another tokio runtime than the one that opened it
//! (whose reactor drives its socket). It is closed when a statement on it fails (the failure may
//! have left it mid-protocol) or its caller gave up mid-statement, and with the connector. When
//! it cannot be opened or tested in time (a server at its connection limit, say), callers use
//! the pool for a second before trying again.

use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, Database};

use crate::dialect::Dialect;
use crate::pool_health::trusted_without_ping;

/// How long after a failed open (or a test that ran past the acquire timeout) callers use the
/// pool instead of trying again: a server at its connection limit refuses the one more
/// connection while the pool's are open and idle.
const RETRY_OPEN_AFTER: Duration = Duration::from_secs(1);

/// The connection, with when it was opened and last used and the runtime whose reactor drives
/// its socket.
pub(crate) struct Kept<DB: Database> {
    conn: DB::Connection,
    opened: Instant,
    used: Instant,
    runtime: Option<tokio::runtime::Id>,
}

/// What the lock guards: the connection while no caller holds it, and the last failed open.
pub(crate) struct Slot<DB: Database> {
    kept: Option<Kept<DB>>,
    failed_open: Option<Instant>,
}

/// The connector's own connection, while no caller holds it.
pub(crate) struct Solo<D: Dialect> {
    slot: tokio::sync::Mutex<Slot<D::Db>>,
}

impl<D: Dialect> Default for Solo<D> {
    fn default() -> Self {
        Self {
            slot: tokio::sync::Mutex::new(Slot {
                kept: None,
                failed_open: None,
            }),
        }
    }
}

/// A connection lent for one statement: the connector's own, or the pool's when another caller
/// holds that (or it cannot be opened).
pub(crate) enum Lent<'a, DB: Database> {
    /// The connector's own; given back by [`Lent::keep`], closed if dropped without it.
    Own {
        slot: tokio::sync::MutexGuard<'a, Slot<DB>>,
        kept: Kept<DB>,
    },
    /// A pool's, handed back as sqlx does.
    Pooled(PoolConnection<DB>),
}

impl<DB: Database> Lent<'_, DB> {
    /// The connection to run the statement on.
    pub(crate) fn conn(&mut self) -> &mut DB::Connection {
        match self {
            Lent::Own { kept, .. } => &mut kept.conn,
            Lent::Pooled(conn) => conn,
        }
    }

    /// Gives the connection back after a statement that succeeded: the connector's own for the
    /// next caller, a pool's to its pool. Drop it instead after a failure.
    pub(crate) fn keep(self) {
        if let Lent::Own { mut slot, mut kept } = self {
            kept.used = Instant::now();
            slot.kept = Some(kept);
        }
    }
}

/// The runtime the caller runs on, if any.
fn current_runtime() -> Option<tokio::runtime::Id> {
    tokio::runtime::Handle::try_current().ok().map(|h| h.id())
}

impl<D: Dialect> Solo<D> {
    /// The own connection if no caller holds it (tested, or opened with `pool`'s connect
    /// options, within the pool's acquire timeout), else one of `pool`'s.
    pub(crate) async fn lend(
        &self,
        pool: &sqlx::Pool<D::Db>,
    ) -> Result<Lent<'_, D::Db>, sqlx::Error> {
        let Ok(mut slot) = self.slot.try_lock() else {
            return pool.acquire().await.map(Lent::Pooled);
        };
        if pool.is_closed() {
            // The connector is closing: no new session may outlive it.
            return Err(sqlx::Error::PoolClosed);
        }
        if slot
            .failed_open
            .is_some_and(|at| at.elapsed() < RETRY_OPEN_AFTER)
        {
            drop(slot);
            return pool.acquire().await.map(Lent::Pooled);
        }
        let timeout = pool.options().get_acquire_timeout();
        let kept = slot.kept.take();
        match tokio::time::timeout(timeout, Self::ready(kept, pool)).await {
            Ok(Ok(kept)) => {
                slot.failed_open = None;
                Ok(Lent::Own { slot, kept })
            }
            // Not to be had now: the pool serves, as it did before there was a connection of
            // the connector's own.
            Ok(Err(_)) | Err(_) => {
                slot.failed_open = Some(Instant::now());
                drop(slot);
                pool.acquire().await.map(Lent::Pooled)
            }
        }
    }

    /// `kept` if it is still good, else a new connection.
    async fn ready(
        kept: Option<Kept<D::Db>>,
        pool: &sqlx::Pool<D::Db>,
    ) -> Result<Kept<D::Db>, sqlx::Error> {
        if let Some(kept) = kept
            && let Some(kept) = Self::still_good(kept, pool.options()).await
        {
            return Ok(kept);
        }
        let mut conn = pool.connect_options().connect().await?;
        D::set_up_session(&mut conn).await?;
        let now = Instant::now();
        Ok(Kept {
            conn,
            opened: now,
            used: now,
            runtime: current_runtime(),
        })
    }

    /// `kept` if the pool would hand it out: opened on the caller's runtime, not past the
    /// pool's lifetime or idle timeout, and used lately or answering a ping. Else it is closed.
    async fn still_good(
        kept: Kept<D::Db>,
        options: &sqlx::pool::PoolOptions<D::Db>,
    ) -> Option<Kept<D::Db>> {
        if kept.runtime != current_runtime() {
            // Its socket belongs to another runtime's reactor, which may be gone or stalled:
            // dropped without a goodbye that could wait on it.
            return None;
        }
        let past = |limit: Option<Duration>, since: Instant| {
            limit.is_some_and(|limit| since.elapsed() >= limit)
        };
        if past(options.get_max_lifetime(), kept.opened)
            || past(options.get_idle_timeout(), kept.used)
        {
            // A connection that cannot say goodbye is closed all the same.
            let _ = kept.conn.close().await;
            return None;
        }
        let mut kept = kept;
        if trusted_without_ping(kept.used.elapsed()) || kept.conn.ping().await.is_ok() {
            return Some(kept);
        }
        // Broken while it sat idle: dropped.
        None
    }

    /// Closes the own connection (waiting for a caller that holds it). Call it once the pool is
    /// marked closed, so that no caller opens another.
    pub(crate) async fn close(&self) {
        let kept = {
            let mut slot = self.slot.lock().await;
            slot.failed_open = None;
            slot.kept.take()
        };
        if let Some(kept) = kept {
            // A connection that cannot say goodbye is closed all the same.
            let _ = tokio::time::timeout(Duration::from_secs(1), kept.conn.close()).await;
        }
    }
}

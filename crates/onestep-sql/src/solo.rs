//! [`Solo`]: one connection a connector keeps between one-statement submits of one caller at a
//! time (PostgreSQL's `BatchPaths::insert_one`, MySQL's insert on its own), so that a caller
//! submitting one by one does not pay sqlx's hand-back for every statement.
//!
//! sqlx gives a pooled connection back in a task it spawns, which pings the server before the
//! connection is idle again: every one-statement submit cost a task, a wake-up of another
//! runtime thread and a second round trip, on the same two cores as the server. The connection
//! here never goes back to a pool: the next caller takes it as it is. Sequential submits
//! (`burndown --submit-batch 0`, N = 5,000, alternating rounds against the binary before):
//! PostgreSQL from a median 2,660/s to 3,023/s, faster in all 8 rounds (median +22 %), where
//! `pgbench` with one client commits ~3,100/s on this machine; MariaDB from 2,014/s to 2,285/s,
//! faster in 12 of 16 rounds (median +18 %).
//!
//! One caller at a time: a caller that finds the connection taken uses the pool, as before. The
//! connection is the connector's own, opened on first use with the pool's connect options and
//! set up as the pool sets up its own (`Dialect::set_up_session`), so it
//! comes on top of [`PoolSettings::max_connections`](crate::PoolSettings::max_connections) and
//! never holds back a pool's caller. It is tested as the pool tests its own (a ping after it sat
//! idle for `PING_IF_IDLE_FOR`, or for a while after any connection broke), replaced past the
//! pool's `max_lifetime` and `idle_timeout` (checked when it is next used), closed when a
//! statement on it fails (the failure may have left it mid-protocol) or its caller gave up
//! mid-statement, and closed with the connector.

use std::time::Instant;

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, Database};

use crate::dialect::Dialect;

use crate::pool_health::trusted_without_ping;

/// The kept connection, while no caller holds it.
type Kept<DB> = Option<Idle<DB>>;

/// The connection, with when it was opened and last used.
pub(crate) struct Idle<DB: Database> {
    conn: DB::Connection,
    opened: Instant,
    used: Instant,
}

/// The connector's own connection, while no caller holds it.
pub(crate) struct Solo<D: Dialect> {
    slot: tokio::sync::Mutex<Kept<D::Db>>,
}

impl<D: Dialect> Default for Solo<D> {
    fn default() -> Self {
        Self {
            slot: tokio::sync::Mutex::new(None),
        }
    }
}

/// A connection lent for one statement: the connector's own, or the pool's when another caller
/// holds that.
pub(crate) enum Lent<'a, DB: Database> {
    /// The connector's own; given back by [`Lent::keep`], closed if dropped without it.
    Own {
        slot: tokio::sync::MutexGuard<'a, Kept<DB>>,
        conn: DB::Connection,
        opened: Instant,
    },
    /// A pool's, handed back as sqlx does.
    Pooled(PoolConnection<DB>),
}

impl<DB: Database> Lent<'_, DB> {
    /// The connection to run the statement on.
    pub(crate) fn conn(&mut self) -> &mut DB::Connection {
        match self {
            Lent::Own { conn, .. } => conn,
            Lent::Pooled(conn) => conn,
        }
    }

    /// Gives the connection back after a statement that succeeded: the connector's own for the
    /// next caller, a pool's to its pool. Drop it instead after a failure.
    pub(crate) fn keep(self) {
        if let Lent::Own {
            mut slot,
            conn,
            opened,
        } = self
        {
            *slot = Some(Idle {
                conn,
                opened,
                used: Instant::now(),
            });
        }
    }
}

impl<D: Dialect> Solo<D> {
    /// The own connection if no caller holds it (tested, or opened with `pool`'s connect
    /// options), else one of `pool`'s.
    pub(crate) async fn lend(
        &self,
        pool: &sqlx::Pool<D::Db>,
    ) -> Result<Lent<'_, D::Db>, sqlx::Error> {
        let Ok(mut slot) = self.slot.try_lock() else {
            return pool.acquire().await.map(Lent::Pooled);
        };
        if let Some(idle) = slot.take()
            && let Some((conn, opened)) = Self::still_good(idle, pool.options()).await
        {
            return Ok(Lent::Own { slot, conn, opened });
        }
        let timeout = pool.options().get_acquire_timeout();
        let connect = async {
            let mut conn = pool.connect_options().connect().await?;
            D::set_up_session(&mut conn).await?;
            Ok::<_, sqlx::Error>(conn)
        };
        let conn = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        Ok(Lent::Own {
            slot,
            conn,
            opened: Instant::now(),
        })
    }

    /// `idle`'s connection if the pool would hand it out: not past the pool's lifetime or idle
    /// timeout, and used lately or answering a ping. Else it is closed.
    async fn still_good(
        idle: Idle<D::Db>,
        options: &sqlx::pool::PoolOptions<D::Db>,
    ) -> Option<(<D::Db as Database>::Connection, Instant)> {
        let Idle {
            mut conn,
            opened,
            used,
        } = idle;
        let past = |limit: Option<std::time::Duration>, since: Instant| {
            limit.is_some_and(|limit| since.elapsed() >= limit)
        };
        if past(options.get_max_lifetime(), opened) || past(options.get_idle_timeout(), used) {
            // A connection that cannot say goodbye is closed all the same.
            let _ = conn.close().await;
            return None;
        }
        if trusted_without_ping(used.elapsed()) || conn.ping().await.is_ok() {
            return Some((conn, opened));
        }
        // Broken while it sat idle: dropped.
        None
    }

    /// Closes the own connection (waiting for a caller that holds it).
    pub(crate) async fn close(&self) {
        let kept = self.slot.lock().await.take();
        if let Some(idle) = kept {
            // A connection that cannot say goodbye is closed all the same.
            let _ = idle.conn.close().await;
        }
    }
}

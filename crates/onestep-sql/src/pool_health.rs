//! When a pooled PostgreSQL or MariaDB connection is tested before it is handed out, and how a
//! broken connection widens that for a moment.
//!
//! sqlx's default pings before every hand-out; ours pings only a connection that sat idle, and
//! every one for a second after any operation failed on a broken connection. Every sqlx error
//! classification in this crate goes through [`classify`], which notes such failures.

use onestep_core::ConnectorErrorKind;

use crate::dialect::{BoxFuture, Dialect};

/// How long a pooled connection may sit idle and still be handed out without a ping first.
///
/// sqlx pings a connection when it is given back to the pool (a broken one is closed then), and
/// by default again before handing it out: a second round trip for every operation, which cost
/// sequential submits on PostgreSQL ~15 % of their rate and the worker ~20 % of its CPU on them.
/// The acquire ping is for a connection that broke while it sat idle (a server restart, a
/// proxy's idle timeout, a killed session), so only a connection idle this long gets it: a busy
/// pool hands its connections out again within milliseconds, and one that broke in the short
/// window left fails its operation as a broken connection does mid-statement. (HikariCP skips
/// its aliveness check the same way, for connections used within the last 500 ms.)
pub(crate) const PING_IF_IDLE_FOR: std::time::Duration = std::time::Duration::from_millis(100);

/// How long after a connection turned out broken every hand-out is pinged: the other idle
/// connections of its pool most likely ended with it (a restart, or every session killed).
const PING_ALL_AFTER_A_DISCONNECT: std::time::Duration = std::time::Duration::from_secs(1);

/// When an operation last failed on a broken connection, in nanoseconds since [`process_epoch`]
/// plus one (0: never). Process-wide: a disconnect is rare, and a second of pings is cheap.
static LAST_DISCONNECT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn process_epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

fn nanos_since_epoch() -> u64 {
    u64::try_from(process_epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Whether an operation failed on a broken connection within [`PING_ALL_AFTER_A_DISCONNECT`].
fn disconnected_lately() -> bool {
    disconnected_within(
        LAST_DISCONNECT.load(std::sync::atomic::Ordering::Relaxed),
        nanos_since_epoch(),
    )
}

/// [`disconnected_lately`] for a stored `last` (see [`LAST_DISCONNECT`]) at `now`.
fn disconnected_within(last: u64, now: u64) -> bool {
    let window = u64::try_from(PING_ALL_AFTER_A_DISCONNECT.as_nanos()).unwrap_or(u64::MAX);
    last != 0 && now.saturating_sub(last - 1) < window
}

/// [`Dialect::classify`], noting a broken connection so that
/// the next hand-outs are pinged.
pub(crate) fn classify<D: Dialect>(err: &sqlx::Error) -> ConnectorErrorKind {
    let kind = D::classify(err);
    if kind == ConnectorErrorKind::Disconnected && broke_a_connection(err) {
        LAST_DISCONNECT.store(
            nanos_since_epoch().saturating_add(1),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    kind
}

/// Whether a disconnect came from a connection that was open: not the pool's own errors (a
/// saturated pool's timeout, a closed pool), which say nothing of the connections it holds.
fn broke_a_connection(err: &sqlx::Error) -> bool {
    !matches!(
        err,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed
    )
}

/// `options` with the hand-out test of every networked pool here: sqlx's ping before each
/// hand-out off, [`ping_if_idle`] instead.
pub(crate) fn ping_only_when_idle<DB: sqlx::Database>(
    options: sqlx::pool::PoolOptions<DB>,
) -> sqlx::pool::PoolOptions<DB> {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| ping_if_idle(conn, meta))
}

/// The pools' `before_acquire` test: a connection used within [`PING_IF_IDLE_FOR`] is handed
/// out at once, unless an operation failed on a broken connection lately; any other only if it
/// answers a ping (else the pool closes it and takes or opens another).
fn ping_if_idle<C: sqlx::Connection>(
    conn: &mut C,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
    Box::pin(async move { Ok(trusted_without_ping(meta.idle_for) || conn.ping().await.is_ok()) })
}

/// Whether a connection idle for `idle_for` is handed out without a ping: used within
/// [`PING_IF_IDLE_FOR`], and no operation failed on a broken connection lately.
pub(crate) fn trusted_without_ping(idle_for: std::time::Duration) -> bool {
    idle_for < PING_IF_IDLE_FOR && !disconnected_lately()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_open_connection_that_broke_counts_as_a_disconnect() {
        assert!(!broke_a_connection(&sqlx::Error::PoolTimedOut));
        assert!(!broke_a_connection(&sqlx::Error::PoolClosed));
        assert!(!broke_a_connection(&sqlx::Error::WorkerCrashed));
        let reset = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(broke_a_connection(&reset));
    }

    #[test]
    fn every_hand_out_is_pinged_for_a_second_after_a_disconnect() {
        let second = 1_000_000_000;
        assert!(!disconnected_within(0, 0), "never");
        assert!(disconnected_within(1, 0), "at the epoch itself");
        assert!(disconnected_within(5 + 1, 5));
        assert!(disconnected_within(5 + 1, 5 + second - 1));
        assert!(!disconnected_within(5 + 1, 5 + second));
        // A store that raced ahead of `now` still counts.
        assert!(disconnected_within(9 + 1, 5));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn classifying_a_broken_connection_sets_the_window() {
        use crate::postgres::Postgres;
        // Process-wide: nextest runs each test in its own process.
        LAST_DISCONNECT.store(0, std::sync::atomic::Ordering::Relaxed);
        let kind = classify::<Postgres>(&sqlx::Error::PoolTimedOut);
        assert_eq!(kind, ConnectorErrorKind::Disconnected);
        assert!(
            !disconnected_lately(),
            "a saturated pool is not a broken connection"
        );
        let reset = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert_eq!(
            classify::<Postgres>(&reset),
            ConnectorErrorKind::Disconnected
        );
        assert!(disconnected_lately());
    }
}

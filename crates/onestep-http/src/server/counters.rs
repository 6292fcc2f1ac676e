//! What the server's limits turned away: counters for metrics, and WARN lines that say so
//! without flooding the log.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most one WARN line per kind this often; it carries the count since the previous one.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// One counter and its log throttle.
#[derive(Debug, Default)]
struct Counter {
    total: AtomicU64,
    /// When the last line was logged, and the count then.
    logged: Mutex<Option<(Instant, u64)>>,
}

impl Counter {
    /// Counts one; returns the count to report when a line is due.
    fn add(&self) -> Option<u64> {
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match *logged {
            Some((at, _)) if now.duration_since(at) < LOG_EVERY => None,
            Some((_, before)) => {
                *logged = Some((now, total));
                Some(total - before)
            }
            None => {
                *logged = Some((now, total));
                Some(1)
            }
        }
    }

    fn get(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// Counts of what the limits of [`ServerLimits`](super::ServerLimits) turned away, since the
/// server started. Share one with [`serve_counted`](super::serve_counted) to read them.
#[derive(Debug, Default)]
pub struct ServerCounters {
    refused: Counter,
    header_timeouts: Counter,
    idle_closed: Counter,
    busy: Counter,
    malformed: Counter,
    accept_errors: Counter,
}

impl ServerCounters {
    /// Connections answered 503 because `max_connections` were open.
    pub fn refused_connections(&self) -> u64 {
        self.refused.get()
    }

    /// Connections closed because a request head did not arrive within `header_timeout`.
    pub fn header_timeouts(&self) -> u64 {
        self.header_timeouts.get()
    }

    /// Kept-alive connections closed after `idle_timeout` without a request.
    pub fn idle_closed(&self) -> u64 {
        self.idle_closed.get()
    }

    /// Requests answered 503 because `max_in_flight` were being handled.
    pub fn busy_rejections(&self) -> u64 {
        self.busy.get()
    }

    /// Requests that were not valid HTTP/1.1 (400, 414, 431 before the router).
    pub fn malformed_requests(&self) -> u64 {
        self.malformed.get()
    }

    /// Failed `accept` calls (out of file descriptors, most often).
    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.get()
    }

    pub(super) fn record_refused(&self) {
        if let Some(n) = self.refused.add() {
            tracing::warn!(
                refused = n,
                total = self.refused.get(),
                "connection limit reached: refused {n} connection(s) with 503 (--max-connections)"
            );
        }
    }

    pub(super) fn record_header_timeout(&self) {
        if let Some(n) = self.header_timeouts.add() {
            tracing::warn!(
                closed = n,
                total = self.header_timeouts.get(),
                "closed {n} connection(s) whose request head did not arrive in time (--header-timeout-s)"
            );
        }
    }

    pub(super) fn record_idle_close(&self) {
        if let Some(n) = self.idle_closed.add() {
            tracing::debug!(
                closed = n,
                total = self.idle_closed.get(),
                "closed {n} idle kept-alive connection(s) (--idle-timeout-s)"
            );
        }
    }

    pub(super) fn record_busy(&self) {
        if let Some(n) = self.busy.add() {
            tracing::warn!(
                rejected = n,
                total = self.busy.get(),
                "in-flight limit reached: answered {n} request(s) with 503 (--max-in-flight)"
            );
        }
    }

    pub(super) fn record_malformed(&self) {
        if let Some(n) = self.malformed.add() {
            tracing::info!(
                rejected = n,
                total = self.malformed.get(),
                "answered {n} malformed HTTP request(s) before routing"
            );
        }
    }

    pub(super) fn record_accept_error(&self, err: &std::io::Error) {
        if let Some(n) = self.accept_errors.add() {
            tracing::warn!(
                failed = n,
                total = self.accept_errors.get(),
                error = %err,
                "accepting connections failed {n} time(s) (out of file descriptors? lower --max-connections or raise the open-file limit)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trigger_is_counted_and_lines_are_throttled() {
        let counter = Counter::default();
        assert_eq!(counter.add(), Some(1), "the first one is logged");
        assert_eq!(counter.add(), None, "the next ones within 10 s are not");
        assert_eq!(counter.add(), None);
        assert_eq!(counter.get(), 3);
    }
}

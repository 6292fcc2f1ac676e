//! Serving a router to clients that may be slow, idle, many or hostile.
//!
//! [`serve_with`] accepts connections itself (hyper's HTTP/1.1 server under axum's router) and
//! keeps every client's share bounded:
//!
//! | limit ([`ServerLimits`]) | default | when it triggers |
//! |---|---|---|
//! | `header_timeout` | 10 s | a client took longer than this to send a request head (request line and headers), or to start one after connecting: 408 with a JSON body, connection closed |
//! | `idle_timeout` | 60 s | a kept-alive connection sent no next request for this long: closed |
//! | `max_connections` | 4096 (at most the open-file limit less 256) | a new connection beyond it is answered 503 with `Retry-After: 1` and closed |
//! | `max_in_flight` | 512 | a request beyond this many being handled at once is answered 503 with `Retry-After: 1` |
//! | `max_header_bytes` | 64 KiB | a request head larger than this: 431 |
//!
//! The request body has its own deadline ([`ExecutionApi::body_timeout`](crate::ExecutionApi::body_timeout)).
//! Every error answer, including those hyper gives a request it cannot parse, has a
//! `{"detail": …}` body. Each trigger is counted in [`ServerCounters`] and logged (a WARN line at
//! most every 10 s per kind, with the count since the last one).
//!
//! ```no_run
//! use std::time::Duration;
//! use onestep_http::server::{ServerLimits, serve_with};
//!
//! # async fn demo(router: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
//! let limits = ServerLimits::default()
//!     .header_timeout(Duration::from_secs(5))?
//!     .max_connections(1000)?;
//! let listener = onestep_http::bind("127.0.0.1:8080").await?;
//! serve_with(listener, router, limits, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod counters;
mod guard;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

pub use counters::ServerCounters;

use crate::ApiError;

/// Bounds on what one client can hold; see the [module documentation](self) for the defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerLimits {
    /// The time a client has to send a request head (from its first byte, or from connecting).
    pub header_timeout: Duration,
    /// The time a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Requests handled at once.
    pub max_in_flight: usize,
    /// The largest request head (request line and headers), in bytes (at least 8192).
    pub max_header_bytes: usize,
}

/// Descriptors kept free of connections for the database pool, logs and files.
const RESERVED_FILES: usize = 256;

impl Default for ServerLimits {
    fn default() -> Self {
        let max_connections = match open_file_limit() {
            Some(files) => 4096.min(files.saturating_sub(RESERVED_FILES)).max(16),
            None => 4096,
        };
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections,
            max_in_flight: 512,
            max_header_bytes: 64 * 1024,
        }
    }
}

/// An invalid limit: which one, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {expected}, got {got}")]
pub struct LimitError {
    /// The limit's name, e.g. `max_connections`.
    pub field: &'static str,
    /// What it must be.
    pub expected: &'static str,
    /// What it was.
    pub got: String,
}

fn positive_duration(field: &'static str, value: Duration) -> Result<Duration, LimitError> {
    if value.is_zero() {
        return Err(LimitError {
            field,
            expected: "longer than 0 s",
            got: format!("{} s", value.as_secs_f64()),
        });
    }
    Ok(value)
}

fn at_least(field: &'static str, value: usize, min: usize) -> Result<usize, LimitError> {
    if value < min {
        return Err(LimitError {
            field,
            expected: if min == 1 {
                "at least 1"
            } else {
                "at least 8192"
            },
            got: value.to_string(),
        });
    }
    Ok(value)
}

impl ServerLimits {
    /// Sets [`header_timeout`](Self::header_timeout); it must be longer than 0.
    pub fn header_timeout(mut self, value: Duration) -> Result<Self, LimitError> {
        self.header_timeout = positive_duration("header_timeout", value)?;
        Ok(self)
    }

    /// Sets [`idle_timeout`](Self::idle_timeout); it must be longer than 0.
    pub fn idle_timeout(mut self, value: Duration) -> Result<Self, LimitError> {
        self.idle_timeout = positive_duration("idle_timeout", value)?;
        Ok(self)
    }

    /// Sets [`max_connections`](Self::max_connections); at least 1.
    pub fn max_connections(mut self, value: usize) -> Result<Self, LimitError> {
        self.max_connections = at_least("max_connections", value, 1)?;
        Ok(self)
    }

    /// Sets [`max_in_flight`](Self::max_in_flight); at least 1.
    pub fn max_in_flight(mut self, value: usize) -> Result<Self, LimitError> {
        self.max_in_flight = at_least("max_in_flight", value, 1)?;
        Ok(self)
    }

    /// Sets [`max_header_bytes`](Self::max_header_bytes); at least 8192 (hyper's floor).
    pub fn max_header_bytes(mut self, value: usize) -> Result<Self, LimitError> {
        self.max_header_bytes = at_least("max_header_bytes", value, 8192)?;
        Ok(self)
    }
}

/// The soft limit on open files of this process (`Max open files` in `/proc/self/limits`).
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Serves `router` on `listener` with [`ServerLimits::default`] until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, ServerLimits::default(), shutdown).await
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes: then no new
/// connection is taken, idle ones are closed, and requests being handled finish.
/// Handlers can read the client address with `axum::extract::ConnectInfo<SocketAddr>`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_counted(listener, router, limits, Arc::default(), shutdown).await
}

/// [`serve_with`], counting what the limits turned away in `counters`.
pub async fn serve_counted(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ServerLimits,
    counters: Arc<ServerCounters>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let in_flight = Arc::new(Semaphore::new(limits.max_in_flight));
    let router = router.layer(axum::middleware::from_fn({
        let in_flight = in_flight.clone();
        let counters = counters.clone();
        let limit = limits.max_in_flight;
        move |request: Request, next: Next| {
            let in_flight = in_flight.clone();
            let counters = counters.clone();
            async move {
                let Ok(_permit) = in_flight.try_acquire_owned() else {
                    counters.record_busy();
                    return busy(limit);
                };
                next.run(request).await
            }
        }
    }));
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let tasks = TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of descriptors or a connection reset before accept: the listener stays up.
                counters.record_accept_error(&err);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            counters.record_refused();
            let answer = guard::too_many_connections(limits.max_connections);
            tasks.spawn(async move {
                let mut stream = stream;
                let write = async {
                    stream.write_all(&answer).await?;
                    stream.shutdown().await
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
            });
            continue;
        };
        let dispatched = Arc::new(AtomicBool::new(false));
        let io = TokioIo::new(guard::Guarded::new(
            stream,
            &limits,
            counters.clone(),
            dispatched.clone(),
        ));
        let routed = TowerToHyperService::new(router.clone());
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            dispatched.store(true, Ordering::Relaxed);
            // What axum's `ConnectInfo<SocketAddr>` extractor reads.
            request.extensions_mut().insert(ConnectInfo(peer));
            routed.call(request)
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .keep_alive(true)
            .max_header_size(limits.max_header_bytes);
        let connection = graceful.watch(builder.serve_connection(io, service));
        tasks.spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// The answer beyond `max_in_flight`.
fn busy(limit: usize) -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the server is handling its limit of {limit} requests; retry in a moment"),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_validated_with_their_names() {
        let err = ServerLimits::default().max_connections(0).unwrap_err();
        assert_eq!(err.to_string(), "max_connections must be at least 1, got 0");
        let err = ServerLimits::default()
            .header_timeout(Duration::ZERO)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "header_timeout must be longer than 0 s, got 0 s"
        );
        let err = ServerLimits::default().max_header_bytes(100).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_header_bytes must be at least 8192, got 100"
        );
        let defaults = ServerLimits::default();
        assert!(defaults.max_connections >= 16 && defaults.max_connections <= 4096);
    }
}

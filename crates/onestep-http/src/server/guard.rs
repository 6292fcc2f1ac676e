//! One connection's guard: deadlines on the time a client spends before and inside a request
//! head, and JSON bodies for the errors hyper answers on its own.
//!
//! The guard sits between the socket and hyper and watches the bytes go by:
//!
//! - **waiting**: between requests (and from the accept until the first byte). A client that sends
//!   nothing for [`ServerLimits::idle_timeout`](super::ServerLimits) after a response (or for
//!   [`ServerLimits::header_timeout`](super::ServerLimits) before its first request) is
//!   disconnected;
//! - **head**: from the first byte of a request to the blank line that ends its head. A head that
//!   takes longer than the header timeout is answered 408 (with a JSON body) and the connection
//!   closed;
//! - **busy**: the head arrived; the body (bounded by the API's own body timeout), the handler and
//!   the response run without a deadline from here, and the first flushed response makes the
//!   connection wait again.
//!
//! hyper answers a request it cannot parse (a `<` in the path, an oversized head) itself, with an
//! empty body, then closes. The guard knows such an answer by its shape (a head-only error with
//! `content-length: 0`) and by the service not having been called for the request, and gives it
//! the API's `{"detail": …}` body.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::{ServerCounters, ServerLimits};

/// The blank line that ends a request head.
const HEAD_END: &[u8; 4] = b"\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Head,
    Busy,
}

/// Bytes the guard writes itself (a 408, or an error body for hyper's own answer), and what it
/// reports once they are out.
struct Outgoing {
    bytes: Vec<u8>,
    written: usize,
}

/// A socket wrapped in the guard.
pub(super) struct Guarded<IO> {
    io: IO,
    header_timeout: Duration,
    idle_timeout: Duration,
    max_header_bytes: usize,
    counters: Arc<ServerCounters>,
    /// Set by the connection's service when hyper hands it a request: an answer written while
    /// it is unset is hyper's own.
    dispatched: Arc<AtomicBool>,
    phase: Phase,
    /// When the current phase (or the last write while waiting) began.
    since: Instant,
    /// How much of [`HEAD_END`] the last bytes of the head matched.
    matched: usize,
    /// Whether a response was sent on this connection (idle timeout instead of header timeout).
    served: bool,
    /// Whether something was written since the head arrived.
    wrote: bool,
    timer: Pin<Box<Sleep>>,
    outgoing: Option<Outgoing>,
    /// Set once the guard gave up on the connection: every later read fails.
    timed_out: bool,
}

impl<IO> Guarded<IO> {
    pub(super) fn new(
        io: IO,
        limits: &ServerLimits,
        counters: Arc<ServerCounters>,
        dispatched: Arc<AtomicBool>,
    ) -> Self {
        let now = Instant::now();
        Self {
            io,
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            max_header_bytes: limits.max_header_bytes,
            counters,
            dispatched,
            phase: Phase::Waiting,
            since: now,
            matched: 0,
            served: false,
            wrote: false,
            timer: Box::pin(tokio::time::sleep_until(now + limits.header_timeout)),
            outgoing: None,
            timed_out: false,
        }
    }

    /// Follows the request head through bytes just read.
    fn observe_read(&mut self, bytes: &[u8]) {
        if bytes.is_empty() || self.phase == Phase::Busy {
            return;
        }
        let mut rest = bytes;
        if self.phase == Phase::Waiting {
            // hyper skips empty lines before a request; so does the guard.
            let start = rest.iter().position(|b| *b != b'\r' && *b != b'\n');
            let Some(start) = start else {
                return;
            };
            rest = &rest[start..];
            self.phase = Phase::Head;
            self.since = Instant::now();
            self.matched = 0;
            self.dispatched.store(false, Ordering::Relaxed);
        }
        for byte in rest {
            self.matched = if *byte == HEAD_END[self.matched] {
                self.matched + 1
            } else if *byte == HEAD_END[0] {
                1
            } else {
                0
            };
            if self.matched == HEAD_END.len() {
                self.phase = Phase::Busy;
                self.wrote = false;
                return;
            }
        }
    }

    /// The deadline of the current phase, if it has one.
    fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting if self.served => Some(self.since + self.idle_timeout),
            Phase::Waiting | Phase::Head => Some(self.since + self.header_timeout),
            Phase::Busy => None,
        }
    }
}

impl<IO: AsyncWrite + Unpin> Guarded<IO> {
    /// Writes what the guard queued itself; `Ready(Ok)` once all of it is out.
    fn poll_outgoing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(out) = self.outgoing.as_mut() {
            if out.written == out.bytes.len() {
                ready!(Pin::new(&mut self.io).poll_flush(cx))?;
                self.outgoing = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &out.bytes[out.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            out.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.timed_out {
            ready!(this.poll_outgoing(cx))?;
            return Poll::Ready(Err(timed_out("the connection timed out")));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let filled = buf.filled();
                this.observe_read(&filled[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(deadline) = this.deadline() else {
                    return Poll::Pending;
                };
                if this.timer.deadline() != deadline {
                    this.timer.as_mut().reset(deadline);
                }
                if this.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.timed_out = true;
                if this.phase == Phase::Waiting && this.served {
                    this.counters.record_idle_close();
                    return Poll::Ready(Err(timed_out("the connection was idle too long")));
                }
                this.counters.record_header_timeout();
                let detail = format!(
                    "the request head (request line and headers) did not arrive within {} s",
                    this.header_timeout.as_secs_f64()
                );
                this.outgoing = Some(Outgoing {
                    bytes: problem(408, "Request Timeout", &detail, &[]),
                    written: 0,
                });
                ready!(this.poll_outgoing(cx))?;
                Poll::Ready(Err(timed_out("the request head timed out")))
            }
        }
    }
}

/// The status of hyper's own answer to an unparsable request: a head-only response with
/// `content-length: 0`. `None` for anything else.
fn automatic_error(buf: &[u8]) -> Option<u16> {
    let head = buf.strip_prefix(b"HTTP/1.1 ")?;
    if !buf.ends_with(HEAD_END) {
        return None;
    }
    let lower = buf.to_ascii_lowercase();
    if !lower.windows(19).any(|w| w == b"\r\ncontent-length: 0") {
        return None;
    }
    let code: u16 = std::str::from_utf8(head.get(..3)?).ok()?.parse().ok()?;
    (400..600).contains(&code).then_some(code)
}

/// A complete `{"detail": …}` response that closes the connection.
fn problem(code: u16, reason: &str, detail: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let body = serde_json::json!({ "detail": detail }).to_string();
    let mut head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n",
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// The refusal a connection beyond the connection limit gets.
pub(super) fn too_many_connections(limit: usize) -> Vec<u8> {
    problem(
        503,
        "Service Unavailable",
        &format!("the server holds its limit of {limit} connections; retry in a moment"),
        &[("retry-after", "1")],
    )
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Guarded<IO> {
    /// The body for hyper's automatic answer `code`.
    fn automatic_detail(&self, code: u16) -> String {
        match code {
            414 => "the request line is too long".to_owned(),
            431 => format!(
                "the request head is too large (at most {} bytes of request line and headers)",
                self.max_header_bytes
            ),
            _ => "malformed HTTP request: the request line or a header is not valid HTTP/1.1 \
                  (a path must be percent-encoded: characters such as < > \" { } and spaces are \
                  not allowed in it)"
                .to_owned(),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.outgoing.is_some() {
            // The rest of an answer the guard replaced; hyper offers the same bytes again.
            ready!(this.poll_outgoing(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        if !this.dispatched.load(Ordering::Relaxed)
            && let Some(code) = automatic_error(buf)
        {
            this.counters.record_malformed();
            let reason = match code {
                414 => "URI Too Long",
                431 => "Request Header Fields Too Large",
                _ => "Bad Request",
            };
            let detail = this.automatic_detail(code);
            this.outgoing = Some(Outgoing {
                bytes: problem(code, reason, &detail, &[]),
                written: 0,
            });
            ready!(this.poll_outgoing(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        match this.phase {
            Phase::Busy => this.wrote = true,
            Phase::Waiting => this.since = Instant::now(),
            Phase::Head => {}
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_outgoing(cx))?;
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        if this.phase == Phase::Busy && this.wrote {
            this.phase = Phase::Waiting;
            this.served = true;
            this.since = Instant::now();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_outgoing(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        // hyper then flattens each message into one buffer, which `automatic_error` reads whole.
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_empty_error_answers_are_recognised_and_nothing_else() {
        let automatic = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n";
        assert_eq!(automatic_error(automatic), Some(400));
        let large = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error(large), Some(431));
        let api = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n";
        assert_eq!(automatic_error(api), None);
        let ok = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error(ok), None);
    }

    #[test]
    fn problem_answers_are_complete_json_responses() {
        let bytes = too_many_connections(10);
        let text = String::from_utf8(bytes).expect("UTF-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head");
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nretry-after: 1"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let detail: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert!(
            detail["detail"]
                .as_str()
                .is_some_and(|d| d.contains("10 connections"))
        );
    }

    #[tokio::test]
    async fn the_head_is_followed_across_reads_and_the_phase_changes_at_its_end() {
        let (client, _server) = tokio::io::duplex(64);
        let counters = Arc::new(ServerCounters::default());
        let dispatched = Arc::new(AtomicBool::new(false));
        let mut guard = Guarded::new(client, &ServerLimits::default(), counters, dispatched);
        guard.observe_read(b"\r\n");
        assert_eq!(guard.phase, Phase::Waiting, "empty lines before a request");
        guard.observe_read(b"GET / HTTP/1.1\r\nHost: x\r");
        assert_eq!(guard.phase, Phase::Head);
        guard.observe_read(b"\n\r");
        assert_eq!(guard.phase, Phase::Head);
        guard.observe_read(b"\nbody bytes");
        assert_eq!(guard.phase, Phase::Busy);
    }
}

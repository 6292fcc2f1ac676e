//! [`EnvelopeBuffer`]: envelopes waiting in process memory, ready or parked until a time.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::envelope::Envelope;

#[derive(Default)]
struct State {
    ready: VecDeque<Envelope>,
    /// Parked envelopes by (ready time, sequence), so equal ready times keep their order.
    parked: BTreeMap<(Instant, u64), Envelope>,
    sequence: u64,
}

/// The queue behind in-process sources ([`MemoryQueue`](crate::MemoryQueue), the webhook
/// source): a FIFO of ready envelopes and a set of envelopes parked until a time (delayed
/// retries), with wake-ups for readers and for writers waiting for room.
///
/// The buffer itself has no limit; each method that adds says what it counts against the
/// capacity it is given, so a source picks its own back-pressure rule.
///
/// ```
/// use std::time::Duration;
/// use onestep_core::{Envelope, EnvelopeBuffer};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let buffer = EnvelopeBuffer::new();
/// assert!(buffer.offer(Envelope::new(serde_json::json!(1)), 1).is_ok());
/// assert!(buffer.offer(Envelope::new(serde_json::json!(2)), 1).is_err(), "full");
/// let batch = buffer.next_batch(10, Duration::from_millis(10)).await;
/// assert_eq!(batch.len(), 1);
/// # });
/// ```
#[derive(Default)]
pub struct EnvelopeBuffer {
    state: Mutex<State>,
    readable: Notify,
    writable: Notify,
}

impl std::fmt::Debug for EnvelopeBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("EnvelopeBuffer")
            .field("ready", &state.ready.len())
            .field("parked", &state.parked.len())
            .finish()
    }
}

impl EnvelopeBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many envelopes wait, ready or parked.
    pub fn len(&self) -> usize {
        let state = self.lock();
        state.ready.len() + state.parked.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `envelope` to the ready envelopes, whatever their number.
    pub fn push(&self, envelope: Envelope) {
        self.lock().ready.push_back(envelope);
        self.readable.notify_one();
    }

    /// Appends `envelope` unless `capacity` envelopes (ready and parked together) already wait;
    /// a refused envelope is handed back.
    pub fn offer(&self, envelope: Envelope, capacity: usize) -> Result<(), Box<Envelope>> {
        let mut state = self.lock();
        if state.ready.len() + state.parked.len() >= capacity {
            return Err(Box::new(envelope));
        }
        state.ready.push_back(envelope);
        drop(state);
        self.readable.notify_one();
        Ok(())
    }

    /// Appends `envelope`, first waiting while `capacity` ready envelopes wait (parked ones do
    /// not count).
    pub async fn push_within(&self, envelope: Envelope, capacity: usize) {
        loop {
            let room = self.writable.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = self.lock();
                if state.ready.len() < capacity {
                    state.ready.push_back(envelope);
                    drop(state);
                    self.readable.notify_one();
                    return;
                }
            }
            room.await;
        }
    }

    /// Parks `envelope` until `ready_at`; it is then taken before the ready envelopes.
    pub fn park(&self, envelope: Envelope, ready_at: Instant) {
        let mut state = self.lock();
        state.sequence += 1;
        let key = (ready_at, state.sequence);
        state.parked.insert(key, envelope);
        drop(state);
        // A reader waiting for a later wake-up recomputes it.
        self.readable.notify_one();
    }

    /// Takes due parked envelopes, then ready ones, up to `limit`; returns the time the next
    /// parked envelope is due.
    fn take(&self, limit: usize) -> (Vec<Envelope>, Option<Instant>) {
        let now = Instant::now();
        let mut state = self.lock();
        let mut out = Vec::new();
        while out.len() < limit {
            match state.parked.first_entry() {
                Some(entry) if entry.key().0 <= now => out.push(entry.remove()),
                _ => break,
            }
        }
        let ready = (limit - out.len()).min(state.ready.len());
        out.extend(state.ready.drain(..ready));
        let next = state.parked.first_key_value().map(|(k, _)| k.0);
        let more = !state.ready.is_empty();
        drop(state);
        if ready > 0 {
            self.writable.notify_waiters();
        }
        if more {
            self.readable.notify_one();
        }
        (out, next)
    }

    /// Up to `limit` envelopes (at least one asked for), waiting at most `wait` for the first;
    /// empty when none became ready in time.
    pub async fn next_batch(&self, limit: usize, wait: Duration) -> Vec<Envelope> {
        let limit = limit.max(1);
        let deadline = Instant::now() + wait;
        loop {
            let ready = self.readable.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let (items, next_parked) = self.take(limit);
            if !items.is_empty() {
                return items;
            }
            let wake = next_parked.map_or(deadline, |at| at.min(deadline));
            tokio::select! {
                _ = ready => {}
                _ = tokio::time::sleep_until(wake) => {
                    if wake == deadline {
                        return Vec::new();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(n: i64) -> Envelope {
        Envelope::new(json!(n))
    }

    fn bodies(batch: &[Envelope]) -> Vec<serde_json::Value> {
        batch.iter().map(|e| e.body.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn due_parked_envelopes_come_before_ready_ones_in_their_order() {
        let buffer = EnvelopeBuffer::new();
        buffer.push(envelope(1));
        let at = Instant::now() + Duration::from_secs(1);
        buffer.park(envelope(2), at);
        buffer.park(envelope(3), at);
        let first = buffer.next_batch(10, Duration::from_millis(10)).await;
        assert_eq!(
            bodies(&first),
            [json!(1)],
            "parked ones wait for their time"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        buffer.push(envelope(4));
        let second = buffer.next_batch(10, Duration::from_millis(10)).await;
        assert_eq!(bodies(&second), [json!(2), json!(3), json!(4)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_wakes_when_a_parked_envelope_falls_due() {
        let buffer = EnvelopeBuffer::new();
        buffer.park(envelope(1), Instant::now() + Duration::from_secs(2));
        let started = Instant::now();
        let batch = buffer.next_batch(1, Duration::from_secs(5)).await;
        assert_eq!(bodies(&batch), [json!(1)]);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert!(
            buffer
                .next_batch(1, Duration::from_secs(1))
                .await
                .is_empty()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn offer_counts_parked_envelopes_and_push_within_does_not() {
        let buffer = EnvelopeBuffer::new();
        buffer.park(envelope(1), Instant::now() + Duration::from_secs(60));
        assert!(buffer.offer(envelope(2), 1).is_err());
        buffer.push_within(envelope(3), 1).await;
        assert_eq!(buffer.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn push_within_waits_until_a_reader_makes_room() {
        let buffer = std::sync::Arc::new(EnvelopeBuffer::new());
        buffer.push(envelope(1));
        let writer = tokio::spawn({
            let buffer = buffer.clone();
            async move { buffer.push_within(envelope(2), 1).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!writer.is_finished());
        let batch = buffer.next_batch(1, Duration::from_millis(10)).await;
        assert_eq!(bodies(&batch), [json!(1)]);
        writer.await.unwrap();
        assert_eq!(buffer.len(), 1);
    }
}

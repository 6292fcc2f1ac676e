//! [`Buffer`]: executions claimed ahead of the runner's free slots
//! ([`ExecutionSourceOptions::prefetch`]), and the claim that refills it behind the runner.
//!
//! A fetch the buffer can serve answers at once, and a claim refills the buffer in the
//! background, so a runner of short tasks never waits a claim's round trip while the buffer
//! holds work. Only a fetch that finds the buffer empty claims itself (for the runner and the
//! buffer at once). The runner's `return_unstarted` waits for a refill under way, then hands
//! everything buffered back.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::Prefetch;
use super::pace::Pace;
use crate::execution::record::ClaimedExecution;

/// The executions a source claimed and has not handed to its runner, with what sizes them.
pub(super) struct Buffer {
    /// Claimed, not yet handed out, with when each was claimed (oldest first).
    queue: Mutex<VecDeque<(ClaimedExecution, Instant)>>,
    /// Room that claims under way will fill (claims can run side by side: together they fill
    /// the buffer to its target, not each of them). Changed only under `queue`'s lock.
    refilling: AtomicUsize,
    /// What sizes an adaptive buffer (kept only for [`Prefetch::Adaptive`]).
    pace: Mutex<Pace>,
    /// The claim refilling the buffer behind the runner, if one was started.
    behind: Mutex<Option<JoinHandle<()>>>,
    prefetch: Prefetch,
    /// The most one claim takes, and the most an adaptive buffer holds.
    batch_size: usize,
}

/// Buffer room one claim may fill ([`Buffer::reserve`]). The room is given back under the
/// buffer's lock: by [`Buffer::put`] once the claim's executions are in, or on drop when the
/// claim failed.
pub(super) struct Refill {
    buffer: Arc<Buffer>,
    room: usize,
}

impl Refill {
    /// How many executions the claim may buffer.
    pub(super) fn room(&self) -> usize {
        self.room
    }
}

impl Drop for Refill {
    fn drop(&mut self) {
        if self.room > 0 {
            let _queue = self.buffer.queue();
            self.buffer.refilling.fetch_sub(self.room, Relaxed);
        }
    }
}

/// Locks `m`; a panic while it was held cannot have left its value half-changed.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Buffer {
    pub(super) fn new(prefetch: Prefetch, batch_size: usize) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::new(VecDeque::new()),
            refilling: AtomicUsize::new(0),
            pace: Mutex::new(Pace::default()),
            behind: Mutex::new(None),
            prefetch,
            batch_size,
        })
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<(ClaimedExecution, Instant)>> {
        lock(&self.queue)
    }

    /// Takes up to `limit` buffered executions, oldest first, and every one claimed more than
    /// `fresh_for` ago (stale: to hand back, not to start).
    pub(super) fn take(
        &self,
        limit: usize,
        fresh_for: Duration,
    ) -> (Vec<ClaimedExecution>, Vec<ClaimedExecution>) {
        let mut queue = self.queue();
        let (mut take, mut stale) = (Vec::new(), Vec::new());
        while let Some((lease, claimed_at)) = queue.pop_front() {
            if claimed_at.elapsed() > fresh_for {
                stale.push(lease);
            } else if take.len() < limit {
                take.push(lease);
            } else {
                queue.push_front((lease, claimed_at));
                break;
            }
        }
        (take, stale)
    }

    /// Everything buffered, to hand back.
    pub(super) fn drain(&self) -> Vec<ClaimedExecution> {
        self.queue().drain(..).map(|(lease, _)| lease).collect()
    }

    /// How many executions the buffer should hold now.
    fn target(&self) -> usize {
        match self.prefetch {
            Prefetch::Fixed(n) => n,
            Prefetch::Adaptive => lock(&self.pace).target(Instant::now(), self.batch_size),
        }
    }

    /// Takes the room no claim under way will fill yet, for one claim to fill.
    pub(super) fn reserve(self: &Arc<Self>) -> Refill {
        self.reserve_up_to(self.target())
    }

    /// [`Self::reserve`] for a buffer of `target`.
    fn reserve_up_to(self: &Arc<Self>, target: usize) -> Refill {
        let queue = self.queue();
        let taken = queue.len() + self.refilling.load(Relaxed);
        let room = target.saturating_sub(taken);
        self.refilling.fetch_add(room, Relaxed);
        drop(queue);
        Refill {
            buffer: self.clone(),
            room,
        }
    }

    /// Buffers what a claim brought beyond what the runner asked for, and gives its room back.
    pub(super) fn put(&self, claimed: impl Iterator<Item = ClaimedExecution>, mut refill: Refill) {
        let now = Instant::now();
        let mut queue = self.queue();
        queue.extend(claimed.map(|lease| (lease, now)));
        self.refilling
            .fetch_sub(std::mem::take(&mut refill.room), Relaxed);
    }

    /// Counts `n` executions handed to the runner (for an adaptive buffer; every fetch passes
    /// here, so a fixed buffer keeps no pace).
    pub(super) fn handed_out(&self, n: usize) {
        if self.prefetch == Prefetch::Adaptive {
            lock(&self.pace).took(n, Instant::now());
        }
    }

    /// Records a claim's round trip (for an adaptive buffer).
    pub(super) fn claimed_in(&self, elapsed: Duration) {
        if self.prefetch == Prefetch::Adaptive {
            lock(&self.pace).claimed_in(elapsed);
        }
    }

    /// Starts a claim that refills the buffer in the background, unless one is under way or
    /// the buffer is still more than half full. `claim` claims up to its argument.
    pub(super) fn refill_behind<F, C>(self: &Arc<Self>, claim: C)
    where
        C: FnOnce(usize) -> F,
        F: Future<Output = crate::error::Result<Vec<ClaimedExecution>>> + Send + 'static,
    {
        let mut behind = lock(&self.behind);
        if behind.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let target = self.target();
        let refill = self.reserve_up_to(target);
        if refill.room == 0 || refill.room * 2 < target {
            return;
        }
        let claimed = claim(refill.room.min(self.batch_size));
        let buffer = self.clone();
        *behind = Some(tokio::spawn(async move {
            match claimed.await {
                Ok(claimed) => buffer.put(claimed.into_iter(), refill),
                // The next fetch that finds the buffer empty claims itself and reports it.
                Err(err) => {
                    tracing::warn!(error = %err, "a claim refilling the prefetch buffer failed")
                }
            }
        }));
    }

    /// Waits for the refill under way, if any (its claim may have committed: what it claimed
    /// must be buffered before the buffer is handed back).
    pub(super) async fn settle(&self) {
        let task = lock(&self.behind).take();
        if let Some(task) = task
            && let Err(err) = task.await
        {
            tracing::error!(error = %err, "a claim refilling the prefetch buffer panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::OffsetDateTime;
    use tokio::sync::Notify;
    use uuid::Uuid;

    fn claimed(n: usize) -> Vec<ClaimedExecution> {
        (0..n)
            .map(|_| ClaimedExecution {
                id: Uuid::now_v7(),
                namespace: "ns".into(),
                task_name: "t".into(),
                payload: serde_json::Value::Null,
                metadata: serde_json::Map::new(),
                attempts: 1,
                available_at: OffsetDateTime::UNIX_EPOCH,
                attempt_id: Uuid::now_v7(),
                lease_token: Uuid::now_v7(),
                lease_expires_at: OffsetDateTime::UNIX_EPOCH,
            })
            .collect()
    }

    /// A buffer of `prefetch` holding `held` executions.
    fn holding(prefetch: usize, held: usize) -> Arc<Buffer> {
        let buffer = Buffer::new(Prefetch::Fixed(prefetch), 100);
        let refill = buffer.reserve();
        buffer.put(claimed(held).into_iter(), refill);
        buffer
    }

    #[tokio::test]
    async fn a_refill_behind_claims_the_room_and_settle_waits_for_it() {
        let buffer = holding(10, 4);
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (gate, record) = (Arc::new(Notify::new()), asked.clone());
        let opened = gate.clone();
        buffer.refill_behind(|want| {
            record.lock().unwrap().push(want);
            async move {
                opened.notified().await;
                Ok(claimed(want))
            }
        });
        // Under way: no second refill, and a new claim gets no room.
        buffer.refill_behind(|want| {
            record.lock().unwrap().push(want);
            async move { Ok(claimed(want)) }
        });
        assert_eq!(buffer.reserve().room(), 0);
        assert_eq!(*asked.lock().unwrap(), vec![6]);
        gate.notify_one();
        buffer.settle().await;
        assert_eq!(buffer.drain().len(), 10, "the refill filled the buffer");
        assert_eq!(buffer.reserve().room(), 10, "its room was given back");
    }

    #[tokio::test]
    async fn no_refill_while_the_buffer_is_more_than_half_full() {
        let buffer = holding(10, 6);
        let asked = Arc::new(Mutex::new(0));
        let record = asked.clone();
        buffer.refill_behind(|_| {
            *record.lock().unwrap() += 1;
            async move { Ok(Vec::new()) }
        });
        assert_eq!(*asked.lock().unwrap(), 0);
        assert_eq!(buffer.reserve().room(), 4, "the room was given back");
    }

    #[tokio::test]
    async fn a_failed_refill_gives_its_room_back() {
        let buffer = holding(10, 0);
        buffer.refill_behind(
            |_| async move { Err(crate::error::Error::Configuration("down".into())) },
        );
        buffer.settle().await;
        assert!(buffer.drain().is_empty());
        assert_eq!(buffer.reserve().room(), 10);
    }

    #[test]
    fn take_hands_out_the_oldest_and_sets_the_stale_apart() {
        let buffer = holding(10, 5);
        let (taken, stale) = buffer.take(3, Duration::from_secs(60));
        assert_eq!((taken.len(), stale.len()), (3, 0));
        std::thread::sleep(Duration::from_millis(5));
        let (taken, stale) = buffer.take(3, Duration::from_millis(1));
        assert_eq!((taken.len(), stale.len()), (0, 2));
    }

    #[test]
    fn an_adaptive_buffer_holds_nothing_before_it_has_a_pace() {
        let buffer = Buffer::new(Prefetch::Adaptive, 100);
        assert_eq!(buffer.reserve().room(), 0);
        buffer.claimed_in(Duration::from_millis(5));
        for _ in 0..50 {
            buffer.handed_out(64);
        }
        assert_eq!(
            buffer.reserve().room(),
            100,
            "a fast runner's buffer is capped at a batch"
        );
    }
}

//! The delivery contract every [`Source`] keeps, as test cases (the reference's
//! `onestep.testing.connector_conformance`): what an ack, a retry and a hand-back do, and that
//! consumers sharing one queue never take one message twice.
//!
//! A connector crate implements [`SourceFactory`] over its real server and runs every case with
//! [`connector_conformance!`](crate::connector_conformance):
//!
//! ```ignore
//! onestep_testkit::connector_conformance!(MyQueueFactory::new());
//! ```
// A test suite: panicking on an unexpected result is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{Delivery, Envelope, Resource, Source};

/// Makes sources over fresh, isolated queues of a connector.
#[async_trait]
pub trait SourceFactory: Send + Sync {
    /// The source type.
    type Source: Source + 'static;

    /// `consumers` sources over one new queue (a table, a stream, a broker queue) that holds
    /// `messages` messages, each with its own id, and nothing else.
    async fn create(&self, messages: usize, consumers: usize) -> Vec<Self::Source>;

    /// The id of the message a delivery carries (`body["id"]`, a column, a header).
    fn id(&self, envelope: &Envelope) -> String;

    /// How long a retried or handed-back message may take to be delivered again (a visibility
    /// timeout, a retry delay). Default: 5 s.
    fn redelivery_within(&self) -> Duration {
        Duration::from_secs(5)
    }
}

/// The most deliveries a drain takes before it stops: a source that hands out the same messages
/// again and again fails its case instead of running forever.
const DRAIN_CAP: usize = 1000;

/// Fetches until nothing comes for `quiet` (or [`DRAIN_CAP`] deliveries came); every delivery
/// is passed to `handle`, and what it returns is kept.
async fn drain<S: Source + ?Sized>(
    source: &S,
    quiet: Duration,
    mut handle: impl FnMut(Box<dyn Delivery>) -> Option<Box<dyn Delivery>>,
) -> Vec<Box<dyn Delivery>> {
    let mut kept = Vec::new();
    let mut taken = 0;
    let mut idle_since = tokio::time::Instant::now();
    while idle_since.elapsed() < quiet && taken < DRAIN_CAP {
        let batch = source.fetch(source.batch_size().max(1)).await.unwrap();
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        idle_since = tokio::time::Instant::now();
        taken += batch.len();
        for delivery in batch {
            if let Some(delivery) = handle(delivery) {
                kept.push(delivery);
            }
        }
    }
    kept
}

/// Every message is delivered, and once acked it is not delivered again.
pub async fn each_message_is_delivered_once_when_acked<F: SourceFactory>(f: &F) {
    let sources = f.create(25, 1).await;
    let source = &sources[0];
    source.open().await.unwrap();
    let mut seen: Vec<String> = Vec::new();
    let mut to_ack = Vec::new();
    let kept = drain(source, Duration::from_millis(500), |d| {
        seen.push(f.id(d.envelope()));
        to_ack.push(d);
        None
    })
    .await;
    assert!(kept.is_empty());
    for mut delivery in to_ack {
        delivery.ack().await.unwrap();
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), 25, "every message, once: {seen:?}");
    assert_eq!(seen.len(), 25, "no message twice before its ack: {seen:?}");
    let again = drain(source, Duration::from_millis(300), Some).await;
    let ids: Vec<String> = again.iter().map(|d| f.id(d.envelope())).collect();
    assert!(ids.is_empty(), "acked messages came again: {ids:?}");
    source.close().await.unwrap();
}

/// A retried message is delivered again (after the retry delay), and is the same message.
pub async fn a_retried_message_comes_again<F: SourceFactory>(f: &F) {
    let sources = f.create(3, 1).await;
    let source = &sources[0];
    source.open().await.unwrap();
    let mut first = source.fetch(1).await.unwrap();
    assert_eq!(first.len(), 1, "a fetch of one returns one delivery");
    let mut delivery = first.pop().unwrap();
    let id = f.id(delivery.envelope());
    delivery
        .retry(Some(Duration::from_millis(50)))
        .await
        .unwrap();
    assert!(
        redelivered(f, source, &id).await,
        "message {id} was not delivered again within {:?} of its retry",
        f.redelivery_within()
    );
    source.close().await.unwrap();
}

/// A delivery handed back unstarted (at shutdown) is delivered again.
pub async fn a_released_message_comes_again<F: SourceFactory>(f: &F) {
    let sources = f.create(3, 1).await;
    let source = &sources[0];
    source.open().await.unwrap();
    let mut first = source.fetch(1).await.unwrap();
    let mut delivery = first.pop().expect("one delivery");
    let id = f.id(delivery.envelope());
    delivery.release_unstarted().await.unwrap();
    assert!(
        redelivered(f, source, &id).await,
        "message {id} was not delivered again within {:?} of its release",
        f.redelivery_within()
    );
    source.close().await.unwrap();
}

/// Fetches (acking everything else) until `id` comes again or the factory's redelivery time
/// passes.
async fn redelivered<F: SourceFactory>(f: &F, source: &F::Source, id: &str) -> bool {
    let deadline = tokio::time::Instant::now() + f.redelivery_within();
    while tokio::time::Instant::now() < deadline {
        for mut delivery in source.fetch(source.batch_size().max(1)).await.unwrap() {
            let found = f.id(delivery.envelope()) == id;
            delivery.ack().await.unwrap();
            if found {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Four consumers of one queue, fetching and acking at once, get every message exactly once
/// between them.
pub async fn concurrent_consumers_never_share_a_message<F: SourceFactory>(f: &F)
where
    F::Source: Send + Sync,
{
    let sources = f.create(200, 4).await;
    let mut tasks = tokio::task::JoinSet::new();
    for source in sources {
        source.open().await.unwrap();
        let source = Arc::new(source);
        tasks.spawn({
            let source = source.clone();
            async move {
                let mut idle_since = tokio::time::Instant::now();
                let mut got = Vec::new();
                while idle_since.elapsed() < Duration::from_millis(500) && got.len() < DRAIN_CAP {
                    let batch = source.fetch(7).await.unwrap();
                    if batch.is_empty() {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    idle_since = tokio::time::Instant::now();
                    for mut delivery in batch {
                        got.push(delivery.envelope().clone());
                        delivery.ack().await.unwrap();
                    }
                }
                (source, got)
            }
        });
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        let (source, got) = done.unwrap();
        for envelope in got {
            *counts.entry(f.id(&envelope)).or_default() += 1;
        }
        source.close().await.unwrap();
    }
    let twice: Vec<&String> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(
        twice.is_empty(),
        "delivered to more than one consumer: {twice:?}"
    );
    assert_eq!(counts.len(), 200, "every message delivered");
}

/// Generates one `#[tokio::test]` per connector conformance case, each calling the case with
/// `$factory`.
#[macro_export]
macro_rules! connector_conformance {
    ($factory:expr) => {
        $crate::connector_conformance!(@cases $factory;
            each_message_is_delivered_once_when_acked,
            a_retried_message_comes_again,
            a_released_message_comes_again,
            concurrent_consumers_never_share_a_message,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::connector::$case(&$factory).await;
            }
        )*
    };
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The connections to the SQS endpoint are cut (a TCP proxy in front of it drops every
//! connection) every 300 ms while a queue is sent to, received from (long polls in flight
//! included) and acked: the operations cut fail with a retryable error or succeed on a new
//! connection, every message is delivered, and once all are acked the queue is empty. A send whose answer was cut may be
//! stored twice (SQS sends are not idempotent): duplicates are counted, losses fail the test.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::{Envelope, Error, Resource, Sink, Source};
use onestep_sqs::{AwsSettings, SqsConnector, SqsQueue, SqsQueueOptions};
use onestep_testkit::proxy::Proxy;
use serde_json::json;
use support::{counts, create_queue, endpoint, name};

/// `future`, which must finish within 60 s (a hang after a cut is a bug).
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("{what} hung after a cut"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_lose_nothing() {
    let direct = endpoint();
    let target = direct.trim_start_matches("http://").to_owned();
    let proxy = Arc::new(Proxy::start(target).await);
    let url = create_queue(&name("cut"), 3).await;
    let settings = AwsSettings::new()
        .with_region("us-east-1")
        .with_endpoint_url(format!("http://127.0.0.1:{}", proxy.port()))
        .with_credentials("testing", "testing-secret", None);
    let q = SqsQueue::new(
        SqsConnector::new(settings).unwrap(),
        SqsQueueOptions::new(&url)
            .with_wait_time_s(1)
            .with_deletes(10, Duration::ZERO),
    )
    .unwrap();
    q.open().await.unwrap();
    let cutter = {
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let mut cuts = 0u32;
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                proxy.cut();
                cuts += 1;
                if cuts == u32::MAX {
                    return;
                }
            }
        })
    };
    const N: i64 = 120;
    let mut sent = 0;
    let mut acked = BTreeSet::new();
    let (mut deliveries, mut errors) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while (acked.len() as i64) < N {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {N} acked after 120 s",
            acked.len()
        );
        // Send in steps, so that cuts fall between sends as well as between receives.
        while sent < N && sent < acked.len() as i64 + 30 {
            match within("send", q.send(Envelope::new(json!({"id": sent})))).await {
                Ok(()) => sent += 1,
                Err(Error::Connector(c)) if c.kind.is_retryable() => errors += 1,
                Err(other) => panic!("send: {other}"),
            }
        }
        match within("fetch", q.fetch(10)).await {
            Ok(batch) => {
                for mut d in batch {
                    deliveries += 1;
                    let id = d.envelope().body["id"].as_i64().unwrap();
                    match within("ack", d.ack()).await {
                        Ok(()) => {}
                        // Staged and kept: the next delete sends it again.
                        Err(Error::Connector(c)) if c.kind.is_retryable() => errors += 1,
                        Err(other) => panic!("ack: {other}"),
                    }
                    acked.insert(id);
                }
            }
            Err(Error::Connector(c)) if c.kind.is_retryable() => errors += 1,
            Err(other) => panic!("fetch: {other}"),
        }
    }
    cutter.abort();
    // Whatever is still in the queue (duplicated sends, deletes lost in a cut) comes again
    // after its 3 s visibility timeout; take it until the queue is empty.
    let mut again = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while within("flush", q.flush_deletes()).await.is_err() || counts(&url).await != (0, 0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queue never emptied"
        );
        for mut d in q.fetch(10).await.unwrap_or_default() {
            let id = d.envelope().body["id"].as_i64().unwrap();
            assert!(acked.contains(&id), "an unknown message {id} appeared");
            again += 1;
            let _ = d.ack().await;
        }
    }
    let connections = proxy.accepted();
    eprintln!(
        "cut every 300 ms: {N} messages, {deliveries} deliveries (+{again} after), {errors} retryable \
         errors, {connections} connections"
    );
    assert_eq!(acked.len() as i64, N, "nothing lost");
    q.close().await.unwrap();
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The connection to the broker is cut (a TCP proxy in front of it drops every connection)
//! twice while a queue is read, acked and published to: the operations in between fail with a
//! retryable error or succeed after reconnecting, every message is still delivered, and once
//! all are acked the queue is empty.

use std::collections::BTreeSet;
use std::time::Duration;

use onestep_core::{Envelope, Error, Resource, Sink, Source};
use onestep_rabbitmq::{RabbitMqConnector, RabbitMqQueue, RabbitMqQueueOptions};
use onestep_testkit::proxy::Proxy;
use serde_json::{Map, json};

fn url() -> String {
    std::env::var("ONESTEP_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// The broker's `host:port` in `url`.
fn broker_addr(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split('/').next().unwrap();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5672")
    }
}

/// `future`, which must finish within 20 s (a hang after a cut is a bug).
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what} hung after a cut"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_lose_nothing() {
    let direct = url();
    let proxy = Proxy::start(broker_addr(&direct)).await;
    let proxied = direct.replacen(
        &broker_addr(&direct),
        &format!("127.0.0.1:{}", proxy.port()),
        1,
    );
    let name = format!("onestep-test.cut.{}", uuid::Uuid::new_v4().simple());
    let mut arguments = Map::new();
    arguments.insert("x-expires".into(), json!(60_000));
    let q = RabbitMqQueue::new(
        RabbitMqConnector::new(&proxied).unwrap(),
        RabbitMqQueueOptions::new(&name)
            .with_arguments(arguments)
            .with_prefetch(10)
            .with_batch_size(10)
            .with_poll_interval(Duration::from_millis(50)),
    )
    .unwrap();
    q.open().await.unwrap();
    const N: i64 = 120;
    let mut sent = 0;
    let mut acked = BTreeSet::new();
    let mut deliveries = 0;
    let mut errors = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while (acked.len() as i64) < N {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {N} acked after 60 s",
            acked.len()
        );
        // Publish in steps, so that cuts fall between sends as well as between fetches.
        while sent < N && sent < acked.len() as i64 + 30 {
            match within("send", q.send(Envelope::new(json!({"id": sent})))).await {
                Ok(()) => sent += 1,
                Err(Error::Connector(c)) if c.kind.is_retryable() => {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(other) => panic!("send: {other}"),
            }
        }
        match within("fetch", q.fetch(10)).await {
            Ok(batch) => {
                for mut d in batch {
                    deliveries += 1;
                    let id = d.envelope().body["id"].as_i64().unwrap();
                    if deliveries == 25 || deliveries == 70 {
                        proxy.cut();
                    }
                    within("ack", d.ack()).await.unwrap();
                    acked.insert(id);
                }
            }
            Err(Error::Connector(c)) if c.kind.is_retryable() => {
                errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("fetch: {other}"),
        }
    }
    let connections = proxy.accepted();
    eprintln!(
        "cut twice: {N} messages, {deliveries} deliveries, {errors} retryable errors, \
         {connections} connections"
    );
    assert!(
        connections >= 3,
        "did not reconnect after both cuts: {connections} connections"
    );
    assert_eq!(acked.len() as i64, N);
    // Nothing comes again once everything is acked and the acks reached the broker.
    let extra = q.fetch(10).await.unwrap_or_default();
    let mut late = Vec::new();
    for mut d in extra {
        late.push(d.envelope().body["id"].as_i64().unwrap());
        d.ack().await.unwrap();
    }
    assert!(
        late.iter().all(|id| acked.contains(id)),
        "an unknown message appeared: {late:?}"
    );
    q.close().await.unwrap();
}

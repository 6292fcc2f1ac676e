#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The server cuts every client connection (`CLIENT KILL TYPE normal`) while a stream is read
//! and written: the next operations fail with a retryable error or succeed on a new connection,
//! and every entry is still delivered once it is acked. Alone in its test binary, because it cuts
//! every connection on the server.

use std::collections::BTreeSet;
use std::time::Duration;

use onestep_core::{Envelope, Resource, Sink, Source};
use onestep_redis::{RedisConnector, RedisStream, RedisStreamOptions};
use serde_json::json;

fn url() -> String {
    std::env::var("ONESTEP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

async fn kill_all_clients() {
    let mut conn = redis::Client::open(url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // SKIPME yes (the default) keeps this connection.
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_lose_nothing() {
    let name = format!("onestep-test:cut:{}", uuid::Uuid::new_v4().simple());
    let s = RedisStream::new(
        RedisConnector::new(&url()).unwrap(),
        RedisStreamOptions::new(&name)
            .with_group("cut")
            .with_start_id("0")
            .with_block(Duration::from_millis(100)),
    )
    .unwrap();
    s.open().await.unwrap();
    let mut sent = 0;
    let mut seen = BTreeSet::new();
    let mut errors = 0;
    for round in 0..6 {
        for _ in 0..5 {
            sent += 1;
            let envelope = Envelope::new(json!({"id": sent}));
            // A send on a cut connection fails once; the retry goes over a new one.
            if s.send(envelope.clone()).await.is_err() {
                errors += 1;
                s.send(envelope).await.unwrap();
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen.len() < sent && tokio::time::Instant::now() < deadline {
            match s.fetch(10).await {
                Ok(batch) => {
                    for mut d in batch {
                        let id = d.envelope().body["id"].as_i64().unwrap();
                        if d.ack().await.is_ok() {
                            seen.insert(id);
                        } else {
                            errors += 1;
                        }
                    }
                }
                Err(err) => {
                    assert!(err.to_string().contains("redis"), "{err}");
                    errors += 1;
                }
            }
        }
        if round % 2 == 0 {
            kill_all_clients().await;
        }
    }
    assert_eq!(
        seen,
        (1..=sent as i64).collect(),
        "after {errors} failed operations"
    );
}

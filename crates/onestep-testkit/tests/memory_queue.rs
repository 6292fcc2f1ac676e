//! The connector conformance kit against `MemoryQueue`: the delivery contract of the core's
//! queue, and a check that the kit's cases pass where they should.

use async_trait::async_trait;
use onestep_core::{Envelope, MemoryQueue, Sink};
use onestep_testkit::connector::SourceFactory;

struct MemoryQueues;

#[async_trait]
impl SourceFactory for MemoryQueues {
    type Source = MemoryQueue;

    async fn create(&self, messages: usize, consumers: usize) -> Vec<MemoryQueue> {
        let queue = MemoryQueue::new("conformance", messages.max(1)).expect("a valid queue");
        for id in 0..messages {
            queue
                .publish(serde_json::json!({ "id": id }), Default::default())
                .await
                .expect("room for every message");
        }
        // Clones share one buffer: they are consumers of one queue.
        (0..consumers).map(|_| queue.clone()).collect()
    }

    fn id(&self, envelope: &Envelope) -> String {
        envelope.body["id"].to_string()
    }
}

onestep_testkit::connector_conformance!(MemoryQueues);

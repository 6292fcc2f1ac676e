//! # onestep-rabbitmq
//!
//! RabbitMQ for onestep: [`RabbitMqQueue`] consumes a queue (a
//! [`Source`](onestep_core::Source)) and publishes to it or through its exchange (a
//! [`Sink`](onestep_core::Sink)), as the Python reference's `onestep-mq` plugin does, with the
//! same wire format (the message body is the JSON envelope `{"body", "meta", "attempts"}`,
//! [`onestep_core::wire`]), so Python and Rust producers and consumers share one queue. YAML
//! types `rabbitmq` and `rabbitmq_queue`: [`catalog`]. Semantics: [`queue`].
//!
//! ```no_run
//! use onestep_core::{OneStepApp, Sink, Task, TaskContext, TaskError};
//! use onestep_rabbitmq::{RabbitMqConnector, RabbitMqQueue, RabbitMqQueueOptions};
//! use serde_json::{Value, json};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = RabbitMqConnector::new("amqp://guest:guest@127.0.0.1:5672/%2f")?;
//! let jobs = RabbitMqQueue::new(broker, RabbitMqQueueOptions::new("jobs").with_prefetch(50))?;
//! jobs.publish(json!({"order": 7}), Default::default()).await?;
//!
//! async fn handle(_ctx: TaskContext, job: Value) -> Result<Value, TaskError> {
//!     Ok(job)
//! }
//! let app = OneStepApp::builder("workers")
//!     .task(Task::new("handle").source(jobs).concurrency(8).handler(handle))
//!     .build()?;
//! app.run().await?;
//! # Ok(()) }
//! ```

mod arguments;
pub mod catalog;
pub mod connector;
mod delivery;
mod link;
pub mod options;
pub mod queue;

pub use connector::{RabbitMqConnector, RabbitMqOptions};
pub use options::RabbitMqQueueOptions;
pub use queue::RabbitMqQueue;

//! # onestep-redis
//!
//! Redis Streams for onestep: [`RedisStream`] reads a stream through a consumer group (a
//! [`Source`](onestep_core::Source)) and appends to it (a [`Sink`](onestep_core::Sink)), as the
//! Python reference's `onestep-redis` plugin does, with the same wire format (an entry's `body`
//! field holds the JSON envelope `{"body", "meta", "attempts"}`, [`onestep_core::wire`]), so Python and Rust producers
//! and consumers share one stream. YAML types `redis` and `redis_stream`: [`catalog`].
//!
//! ```no_run
//! use onestep_core::{OneStepApp, Sink, Task, TaskContext, TaskError};
//! use onestep_redis::{RedisConnector, RedisStream, RedisStreamOptions};
//! use serde_json::{Value, json};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = RedisConnector::new("redis://127.0.0.1:6379")?;
//! let jobs = RedisStream::new(redis, RedisStreamOptions::new("jobs").with_group("workers"))?;
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

pub mod catalog;
pub mod connector;
pub mod stream;

pub use connector::{RedisConnector, RedisOptions};
pub use stream::{RedisStream, RedisStreamOptions};

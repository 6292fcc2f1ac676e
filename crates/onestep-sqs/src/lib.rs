//! # onestep-sqs
//!
//! Amazon SQS and SNS for onestep: [`SqsQueue`] receives from a queue with long polling (a
//! [`Source`](onestep_core::Source)) and sends to it (a [`Sink`](onestep_core::Sink)), and
//! [`SnsTopic`] publishes to a topic (a sink), as the Python reference's `onestep-sqs` plugin
//! does, with the same wire format (the message body is the JSON envelope `{"body", "meta",
//! "attempts"}`, [`onestep_core::wire`]), so Python and Rust producers and consumers share one
//! queue. YAML types `sqs`, `sqs_queue`, `sns` and `sns_topic`: [`catalog`]. Semantics:
//! [`queue`].
//!
//! Built on the AWS SDK for Rust ([`aws_sdk_sqs`], [`aws_sdk_sns`], re-exported), with rustls
//! (ring) for HTTPS and the SDK's default credential and region chains.
//!
//! ```no_run
//! use onestep_core::{OneStepApp, Sink, Task, TaskContext, TaskError};
//! use onestep_sqs::{AwsSettings, SqsConnector, SqsQueue, SqsQueueOptions};
//! use serde_json::{Value, json};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let sqs = SqsConnector::new(AwsSettings::new().with_region("eu-west-1"))?;
//! let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs";
//! let jobs = SqsQueue::new(sqs, SqsQueueOptions::new(url).with_visibility_timeout(60))?;
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

mod aws;
pub mod catalog;
pub mod connector;
mod delivery;
pub mod options;
pub mod queue;
mod shared;
pub mod sns;

pub use aws::AwsSettings;
pub use connector::SqsConnector;
pub use options::{DeduplicationId, OnFail, SqsQueueOptions};
pub use queue::SqsQueue;
pub use sns::{AttributeValue, MessageAttribute, SnsConnector, SnsTopic, SnsTopicOptions};
pub use {aws_sdk_sns, aws_sdk_sqs};

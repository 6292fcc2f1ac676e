//! The state an `SqsQueue` shares with its deliveries: the client, error mapping, visibility
//! changes, and the acks waiting to be deleted.
//!
//! Acks become deletes, sent in groups with `DeleteMessageBatch`, as the reference does: a
//! group goes out when it is full (`delete_batch_size`) or when the flusher comes by (every
//! `delete_flush_interval_s`), and whatever is left when the queue closes. An ack therefore
//! returns before its message is deleted. A crash in between costs a duplicate, never a loss:
//! the message becomes visible again and is delivered again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Result,
};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::aws::connector_error;
use crate::connector::SqsConnector;
use crate::options::SqsQueueOptions;

/// The queue's state, shared with its deliveries.
pub(crate) struct Inner {
    pub(crate) options: SqsQueueOptions,
    connector: SqsConnector,
    pub(crate) deletes: Deletes,
    /// Cancelled on close: stops the flusher.
    pub(crate) closing: CancellationToken,
    /// The flusher, heartbeats and hand-backs of dropped deliveries.
    pub(crate) tasks: TaskTracker,
    /// Whether the flusher was started.
    flusher: AtomicBool,
}

impl Inner {
    pub(crate) fn new(connector: SqsConnector, options: SqsQueueOptions) -> Self {
        Self {
            options,
            connector,
            deletes: Deletes::default(),
            closing: CancellationToken::new(),
            tasks: TaskTracker::new(),
            flusher: AtomicBool::new(false),
        }
    }

    /// The retry delay of connector errors: the reference's `max(poll_interval_s, wait_time_s)`.
    fn retry_delay(&self) -> Duration {
        self.options
            .poll_interval
            .max(Duration::from_secs(u64::from(self.options.wait_time_s)))
            .max(Duration::from_secs(1))
    }

    pub(crate) async fn client(&self) -> Result<aws_sdk_sqs::Client> {
        self.connector.client(&self.options.url).await
    }

    pub(crate) fn error<E, R>(&self, operation: ConnectorOperation, err: &SdkError<E, R>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        connector_error(
            "sqs",
            operation,
            &self.options.url,
            err,
            &self.connector.secrets(),
            self.retry_delay(),
        )
    }

    pub(crate) fn error_text(
        &self,
        operation: ConnectorOperation,
        kind: ConnectorErrorKind,
        text: &str,
    ) -> Error {
        let mut error = ConnectorOperationError::new("sqs", operation, kind, &self.options.url)
            .with_cause(std::io::Error::other(text.to_owned()));
        error.retry_delay = Some(self.retry_delay());
        Error::Connector(error)
    }

    pub(crate) fn invalid(&self, text: &str) -> Error {
        self.error_text(
            ConnectorOperation::Send,
            ConnectorErrorKind::Permanent,
            text,
        )
    }

    /// Sets the visibility timeout of the message `receipt`.
    pub(crate) async fn change_visibility(
        &self,
        receipt: &str,
        seconds: u32,
        operation: ConnectorOperation,
    ) -> Result<()> {
        let client = self.client().await?;
        client
            .change_message_visibility()
            .queue_url(&self.options.url)
            .receipt_handle(receipt)
            .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX))
            .send()
            .await
            .map(drop)
            .map_err(|e| self.error(operation, &e))
    }

    /// Starts the flusher once (when deletes are grouped by time).
    pub(crate) fn start_flusher(self: &Arc<Self>) {
        if self.options.delete_flush_interval.is_zero() || self.closing.is_cancelled() {
            return;
        }
        if self.flusher.swap(true, Ordering::AcqRel) {
            return;
        }
        let queue = Arc::downgrade(self);
        let closing = self.closing.clone();
        let interval = self.options.delete_flush_interval;
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = closing.cancelled() => return,
                }
                let Some(queue) = queue.upgrade() else { return };
                if let Err(err) = queue.deletes.flush(&queue).await {
                    tracing::warn!(queue = %queue.options.url, error = %err,
                        "deleting acked SQS messages failed; trying again");
                }
            }
        });
    }
}

/// The receipt handles acked but not yet deleted.
#[derive(Default)]
pub(crate) struct Deletes {
    pending: Mutex<Vec<String>>,
}

impl Deletes {
    /// Adds `receipt`; sends the pending deletes when a group is full (or grouping is off).
    pub(crate) async fn stage(&self, queue: &Inner, receipt: String) -> Result<()> {
        let mut pending = self.pending.lock().await;
        pending.push(receipt);
        if pending.len() >= queue.options.delete_batch_size
            || queue.options.delete_flush_interval.is_zero()
        {
            flush_locked(queue, &mut pending).await?;
        }
        Ok(())
    }

    /// Sends every pending delete.
    pub(crate) async fn flush(&self, queue: &Inner) -> Result<()> {
        let mut pending = self.pending.lock().await;
        flush_locked(queue, &mut pending).await
    }

    /// How many deletes wait.
    pub(crate) async fn len(&self) -> usize {
        self.pending.lock().await.len()
    }
}

/// Sends `pending` in groups. A group the service refused as a whole goes back to the front
/// (the error is returned; the next flush tries again). Entries it refused one by one are kept
/// for another try when the fault was the service's, and dropped when it was ours (a receipt
/// handle that expired: the message is visible again and comes again), each with a warning.
async fn flush_locked(queue: &Inner, pending: &mut Vec<String>) -> Result<()> {
    let client = queue.client().await?;
    while !pending.is_empty() {
        let take = pending.len().min(queue.options.delete_batch_size);
        let group: Vec<String> = pending.drain(..take).collect();
        let entries = group
            .iter()
            .enumerate()
            .map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("msg_{i}"))
                    .receipt_handle(receipt)
                    .build()
                    .map_err(|e| queue.invalid(&e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let answer = client
            .delete_message_batch()
            .queue_url(&queue.options.url)
            .set_entries(Some(entries))
            .send()
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(err) => {
                pending.splice(0..0, group);
                return Err(queue.error(ConnectorOperation::Ack, &err));
            }
        };
        let mut retry = Vec::new();
        for failed in answer.failed() {
            let index = failed
                .id()
                .strip_prefix("msg_")
                .and_then(|i| i.parse::<usize>().ok());
            let Some(receipt) = index.and_then(|i| group.get(i)) else {
                continue;
            };
            if failed.sender_fault() {
                tracing::warn!(queue = %queue.options.url, code = failed.code(),
                    message = failed.message(),
                    "SQS refused a delete (the receipt expired?); the message comes again");
            } else {
                tracing::warn!(queue = %queue.options.url, code = failed.code(),
                    "SQS could not delete a message now; trying again at the next flush");
                retry.push(receipt.clone());
            }
        }
        if !retry.is_empty() {
            let count = retry.len();
            pending.splice(0..0, retry);
            return Err(queue.error_text(
                ConnectorOperation::Ack,
                onestep_core::ConnectorErrorKind::Transient,
                &format!("SQS batch delete partially failed for {count} entries"),
            ));
        }
    }
    Ok(())
}

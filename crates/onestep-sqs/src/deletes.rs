//! Acks become deletes, sent in groups with `DeleteMessageBatch`, as the reference does: a
//! group goes out when it is full (`delete_batch_size`) or when the flusher comes by (every
//! `delete_flush_interval_s`), and whatever is left when the queue closes.
//!
//! An ack therefore returns before its message is deleted. A crash in between costs a
//! duplicate, never a loss: the message becomes visible again and is delivered again.

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use onestep_core::{ConnectorOperation, Result};
use tokio::sync::Mutex;

use crate::queue::Inner;

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

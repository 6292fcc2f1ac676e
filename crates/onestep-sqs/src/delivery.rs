//! One received SQS message and how it is settled (see [`crate::queue`] for the semantics).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{ConnectorOperation, Delivery, Envelope, FailureInfo, Result};
use tokio::task::JoinHandle;

use crate::options::{MAX_VISIBILITY_TIMEOUT, OnFail};
use crate::shared::Inner;

/// A received message, settled once.
pub(crate) struct SqsDelivery {
    queue: Arc<Inner>,
    receipt: String,
    envelope: Envelope,
    heartbeat: Option<JoinHandle<()>>,
    done: bool,
}

impl SqsDelivery {
    pub(crate) fn new(queue: Arc<Inner>, receipt: String, envelope: Envelope) -> Self {
        Self {
            queue,
            receipt,
            envelope,
            heartbeat: None,
            done: false,
        }
    }

    /// Stops extending the visibility and marks the message settled.
    fn settle(&mut self) {
        self.done = true;
        if let Some(beat) = self.heartbeat.take() {
            beat.abort();
        }
    }
}

/// Whole seconds of `delay` (as the reference's `int(delay_s)`), at most 12 hours.
fn visibility_of(delay: Option<Duration>) -> u32 {
    let seconds = delay.map_or(0, |d| d.as_secs());
    u32::try_from(seconds)
        .unwrap_or(MAX_VISIBILITY_TIMEOUT)
        .min(MAX_VISIBILITY_TIMEOUT)
}

#[async_trait]
impl Delivery for SqsDelivery {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// Starts the visibility heartbeat, when the queue has one.
    async fn start_processing(&mut self) -> Result<()> {
        let Some(interval) = self.queue.options.heartbeat_interval else {
            return Ok(());
        };
        if self.heartbeat.is_some() {
            return Ok(());
        }
        let queue = self.queue.clone();
        let receipt = self.receipt.clone();
        let timeout = queue.options.effective_heartbeat_visibility_timeout();
        self.heartbeat = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                if let Err(err) = queue
                    .change_visibility(&receipt, timeout, ConnectorOperation::Heartbeat)
                    .await
                {
                    tracing::warn!(queue = %queue.options.url, error = %err,
                        "could not extend a running SQS message's visibility");
                }
            }
        }));
        Ok(())
    }

    async fn ack(&mut self) -> Result<()> {
        self.settle();
        let receipt = std::mem::take(&mut self.receipt);
        self.queue.deletes.stage(&self.queue, receipt).await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        self.settle();
        self.queue
            .change_visibility(
                &self.receipt,
                visibility_of(delay),
                ConnectorOperation::Retry,
            )
            .await
    }

    async fn fail(&mut self, _failure: &FailureInfo) -> Result<()> {
        self.settle();
        match self.queue.options.on_fail {
            OnFail::Leave => Ok(()),
            OnFail::Release => {
                self.queue
                    .change_visibility(&self.receipt, 0, ConnectorOperation::Fail)
                    .await
            }
            OnFail::Delete => {
                let receipt = std::mem::take(&mut self.receipt);
                self.queue.deletes.stage(&self.queue, receipt).await
            }
        }
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.settle();
        self.queue
            .change_visibility(&self.receipt, 0, ConnectorOperation::Retry)
            .await
    }
}

impl Drop for SqsDelivery {
    fn drop(&mut self) {
        if let Some(beat) = self.heartbeat.take() {
            beat.abort();
        }
        // Dropped without an outcome (a cancelled handler): make it visible again at once.
        if self.done {
            return;
        }
        let (queue, receipt) = (self.queue.clone(), std::mem::take(&mut self.receipt));
        if tokio::runtime::Handle::try_current().is_ok() && !queue.tasks.is_closed() {
            let tasks = queue.tasks.clone();
            tasks.spawn(async move {
                if let Err(err) = queue
                    .change_visibility(&receipt, 0, ConnectorOperation::Retry)
                    .await
                {
                    tracing::debug!(error = %err, "handing back a dropped SQS message");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_become_whole_seconds_within_the_limit() {
        assert_eq!(visibility_of(None), 0);
        assert_eq!(visibility_of(Some(Duration::from_millis(1900))), 1);
        assert_eq!(
            visibility_of(Some(Duration::from_secs(100_000))),
            MAX_VISIBILITY_TIMEOUT
        );
    }
}

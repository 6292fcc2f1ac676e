//! One claimed execution as a [`Delivery`] and a [`ManagedDelivery`].

use super::*;

/// State shared between a delivery and the source's lease renewer.
pub(super) struct LeaseState {
    pub(super) expires_at: Mutex<OffsetDateTime>,
    pub(super) cancel_requested: AtomicBool,
    /// Fired on a cancel request or a lost lease: the handler must stop.
    pub(super) cancel: CancellationToken,
}

/// One claimed execution.
pub(super) struct ExecutionDelivery<B> {
    pub(super) backend: B,
    /// Shared with the executor (the handler's context and events), never copied.
    pub(super) envelope: Arc<Envelope>,
    pub(super) execution_id: Uuid,
    /// The execution's namespace and task, for the completion metrics.
    pub(super) namespace: String,
    pub(super) task_name: String,
    pub(super) attempt_id: Uuid,
    pub(super) lease_token: Uuid,
    pub(super) lease: Arc<LeaseState>,
    /// The handler's progress reports.
    pub(super) progress: Arc<Progress>,
    /// The source's lease renewer.
    pub(super) heartbeats: Arc<Heartbeater<B>>,
    /// Whether the renewer holds this delivery's lease (from start until completion).
    pub(super) heartbeating: bool,
    /// The status the completion left the execution in, once completed.
    pub(super) completed: Option<ExecutionStatus>,
    /// The source's batch writer; `None` completes directly.
    pub(super) completions: Option<tokio::sync::mpsc::UnboundedSender<CompletionJob>>,
}

impl<B: LeasedExecutionBackend + Clone + 'static> ExecutionDelivery<B> {
    /// Keeps the stored outcome of the attempt (a success that lost to a cancel marks the cancel
    /// requested) and counts it.
    fn finished(&mut self, succeeded: bool, status: ExecutionStatus) -> ExecutionStatus {
        if succeeded && status == ExecutionStatus::Cancelled {
            self.lease.cancel_requested.store(true, Ordering::SeqCst);
        }
        crate::metrics::execution::execution_metrics().completed(
            &self.namespace,
            &self.task_name,
            status.as_str(),
        );
        self.completed = Some(status);
        status
    }

    pub(super) fn stop_heartbeat(&mut self) {
        if std::mem::take(&mut self.heartbeating) {
            self.heartbeats.stop(self.attempt_id);
        }
    }

    pub(super) async fn complete(&mut self, completion: ExecutionCompletion) -> Result<()> {
        self.complete_execution(completion)
            .await
            .map(|_| ())
            .map_err(Error::from)
    }
}

impl<B> Drop for ExecutionDelivery<B> {
    /// A delivery dropped before its completion (a runner that gave up on it) stops renewing
    /// its lease, so the lease expires and the work is reclaimed.
    fn drop(&mut self) {
        if self.heartbeating {
            self.heartbeats.stop(self.attempt_id);
        }
    }
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> Delivery for ExecutionDelivery<B> {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    fn shared_envelope(&self) -> Arc<Envelope> {
        self.envelope.clone()
    }

    async fn start_processing(&mut self) -> Result<()> {
        if !self.heartbeating && self.completed.is_none() {
            self.heartbeats.keep(
                (self.execution_id, self.attempt_id, self.lease_token),
                self.lease.clone(),
            );
            self.heartbeating = true;
        }
        Ok(())
    }

    async fn release_unstarted(&mut self) -> Result<()> {
        self.stop_heartbeat();
        self.backend
            .release(self.execution_id, self.attempt_id, self.lease_token)
            .await
            .map(|_| ())
            .map_err(Error::from)
    }

    async fn ack(&mut self) -> Result<()> {
        self.complete(ExecutionCompletion::Succeeded {
            result: Value::Null,
        })
        .await
    }

    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        self.complete(ExecutionCompletion::Retrying {
            error: None,
            delay_s: delay.map(|d| d.as_secs_f64()),
        })
        .await
    }

    async fn fail(&mut self, failure: &FailureInfo) -> Result<()> {
        self.complete(ExecutionCompletion::Failed {
            error: Some(ExecutionErrorDetail::from_failure(failure)),
        })
        .await
    }

    fn as_managed(&mut self) -> Option<&mut dyn ManagedDelivery> {
        Some(self)
    }

    /// A completion is a batched write with no user code in it.
    fn frees_slot_before_ack(&self) -> bool {
        true
    }
}

#[async_trait]
impl<B: LeasedExecutionBackend + Clone + 'static> ManagedDelivery for ExecutionDelivery<B> {
    fn execution_id(&self) -> Uuid {
        self.execution_id
    }

    fn attempt_id(&self) -> Uuid {
        self.attempt_id
    }

    fn cancel_requested(&self) -> bool {
        self.lease.cancel_requested.load(Ordering::SeqCst)
    }

    fn cancellation(&self) -> CancellationToken {
        self.lease.cancel.clone()
    }

    fn info(&self) -> ExecutionInfo {
        ExecutionInfo {
            id: self.execution_id,
            attempt_id: self.attempt_id,
            attempt: self.envelope.attempts.saturating_add(1),
            lease: self.lease.clone(),
            progress: self.progress.clone(),
        }
    }

    async fn validate_execution_result(&self, result: &Value) -> ExecutionResult<()> {
        self.backend.validate_result(result)
    }

    async fn complete_execution(
        &mut self,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<ExecutionStatus> {
        if let Some(done) = self.completed {
            return Ok(done);
        }
        // The last report is written while the lease still holds.
        self.progress.flush().await;
        self.stop_heartbeat();
        let succeeded = matches!(completion, ExecutionCompletion::Succeeded { .. });
        let ids = (self.execution_id, self.attempt_id, self.lease_token);
        // The batch writer gets a copy: a batch that fails as a whole (or a writer stopped
        // mid-batch) leaves its completions unanswered, and each is then written here.
        if let Some(queue) = &self.completions {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let job = CompletionJob {
                ids,
                completion: completion.clone(),
                reply,
            };
            if queue.send(job).is_ok()
                && let Ok(outcome) = answer.await
            {
                return Ok(self.finished(succeeded, outcome?));
            }
        }
        let execution = self
            .backend
            .complete(ids.0, ids.1, ids.2, completion)
            .await?;
        Ok(self.finished(succeeded, execution.status))
    }
}

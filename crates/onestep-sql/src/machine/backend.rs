//! The contract: [`ExecutionBackend`] and [`LeasedExecutionBackend`] over the operations of the
//! sibling modules, with their retries of transient errors and one-by-one fallbacks.

use onestep_core::execution::ClaimedExecution;
use onestep_core::execution::backend::heartbeat_each;
use onestep_core::execution::stored::ClaimedRow;

use super::*;

#[async_trait]
impl<D: Dialect> ExecutionBackend for SqlExecutionBackend<D> {
    fn backend_name(&self) -> &str {
        D::NAME
    }

    /// Connects and creates or checks the tables. A transient failure is tried again, as every
    /// transaction's is: on SQLite, a process opening a brand-new database file at the same
    /// moment as another (a CLI submit racing a starting worker) can get `database is locked`
    /// at once, without the busy timeout's wait, and the worker used to exit on it.
    async fn open(&self) -> ExecutionResult<()> {
        retry_transient(|| self.pool()).await?;
        self.inner.opens.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn close(&self) -> ExecutionResult<()> {
        let before = self
            .inner
            .opens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            });
        if before == Ok(1) && self.inner.owns_connector {
            *self.inner.ready.lock().await = false;
            self.inner.connector.close().await;
        }
        Ok(())
    }

    async fn submit(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
        if D::GROUP_SUBMITS {
            return self.submit_grouped(request).await;
        }
        self.submit_alone(&request).await
    }

    async fn submit_many(
        &self,
        requests: Vec<ExecutionRequest>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        if requests.len() < 2 {
            return Ok(self.submit_one_by_one(&requests).await);
        }
        self.submit_together(&requests).await
    }

    async fn get(&self, namespace: &str, id: Uuid) -> ExecutionResult<Option<Execution>> {
        if namespace.contains('\0') {
            // No namespace holding U+0000 can be stored (PostgreSQL would refuse the query).
            return Ok(None);
        }
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let row = Self::one(
            &mut tx,
            &self.inner.statements.get,
            vec![namespace.into(), id.into()],
            op,
        )
        .await?;
        Self::commit(tx, op).await?;
        row.map(|r| r.to_execution()).transpose()
    }

    async fn list(&self, query: &ExecutionQuery) -> ExecutionResult<ExecutionPage> {
        query.validate()?;
        let after = query
            .cursor
            .as_deref()
            .map(decode_cursor)
            .transpose()
            .map_err(|e| ExecutionError::invalid("cursor", format!("is rejected: {e}")))?;
        let built = crate::query::list(D::SCHEMA, &self.inner.tables.executions, query, after)?;
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let rows = crate::decode::executions::<D>(&mut tx, &built.sql, built.params)
            .await
            .map_err(db::<D>(op))?;
        Self::commit(tx, op).await?;
        page_of(rows, query.limit as usize)
    }

    async fn request_cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<&str>,
    ) -> ExecutionResult<Option<Execution>> {
        validate_cancel_reason(reason)?;
        if namespace.contains('\0') {
            return Ok(None);
        }
        let op = ConnectorOperation::Send;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let Some(mut row) = Self::one(
                &mut tx,
                &self.inner.statements.get_in_namespace_for_update,
                vec![namespace.into(), id.into()],
                op,
            )
            .await?
            else {
                return Ok(None);
            };
            if let Some(target) = cancel_target(row.status) {
                let finished = (target == ExecutionStatus::Cancelled).then_some(now);
                D::execute(
                    &mut tx,
                    &self.inner.statements.cancel,
                    vec![
                        target.as_str().into(),
                        reason.map(str::to_string).into(),
                        now.into(),
                        finished.or(row.finished_at).into(),
                        now.into(),
                        id.into(),
                        row.version.into(),
                    ],
                )
                .await
                .map_err(db::<D>(op))?;
                row.status = target;
                row.cancel_reason = reason.map(str::to_string);
                row.cancel_requested_at = Some(now);
                row.finished_at = finished.or(row.finished_at);
                row.updated_at = now;
                row.version += 1;
            }
            row.to_execution().map(Some)
        }
        .await;
        Self::finish(tx, out, op).await
    }

    async fn progress(&self, namespace: &str, id: Uuid) -> ExecutionResult<Option<Value>> {
        self.read_progress(namespace, id).await
    }

    async fn backlog(
        &self,
        namespace: &str,
        task_names: &[String],
    ) -> ExecutionResult<Option<Vec<onestep_core::execution::inspect::TaskBacklog>>> {
        self.backlog_at(namespace, task_names).await.map(Some)
    }
}

#[async_trait]
impl<D: Dialect> LeasedExecutionBackend for SqlExecutionBackend<D> {
    async fn report_progress(
        &self,
        execution_id: Uuid,
        _attempt_id: Uuid,
        lease_token: Uuid,
        progress: &Value,
    ) -> ExecutionResult<bool> {
        self.write_progress(execution_id, lease_token, progress)
            .await
    }

    async fn claim(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ExecutionLease>> {
        self.claim_checked::<ExecutionRow>(namespace, task_names, limit, lease_duration, worker_id)
            .await
    }

    /// The same claim as [`claim`](LeasedExecutionBackend::claim); where the dialect claims in
    /// one statement (PostgreSQL) that statement answers only the columns a worker runs each
    /// execution with, so the rest of each row is neither sent nor decoded.
    async fn claim_to_run(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ClaimedExecution>> {
        self.claim_checked::<ClaimedRow>(namespace, task_names, limit, lease_duration, worker_id)
            .await
    }

    async fn heartbeat(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_duration: Duration,
    ) -> ExecutionResult<HeartbeatResult> {
        self.heartbeat_once(execution_id, attempt_id, lease_token, lease_duration)
            .await
    }

    /// Renews distinct leases in one transaction, three statements whatever their number (the
    /// leases of one execution twice, or a zero lease, go one by one); each lease is decided on
    /// its own, as [`heartbeat`](LeasedExecutionBackend::heartbeat) decides it.
    async fn heartbeat_many(
        &self,
        leases: &[(Uuid, Uuid, Uuid)],
        lease_duration: Duration,
    ) -> ExecutionResult<Vec<ExecutionResult<HeartbeatResult>>> {
        if leases.len() < 2
            || !distinct_executions(leases.iter().map(|l| l.0))
            || lease_duration.is_zero()
        {
            return Ok(heartbeat_each(self, leases, lease_duration).await);
        }
        self.heartbeat_batch(leases, lease_duration).await
    }

    async fn complete(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution> {
        let done = retry_transient(|| {
            self.complete_once(execution_id, attempt_id, lease_token, completion.clone())
        })
        .await?;
        if done.status == ExecutionStatus::Retrying {
            self.wake_local();
        }
        Ok(done)
    }

    async fn complete_many(
        &self,
        completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        self.complete_batch(completions).await
    }

    async fn complete_many_statuses(
        &self,
        completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
    ) -> ExecutionResult<Vec<ExecutionResult<ExecutionStatus>>> {
        self.complete_batch(completions).await
    }

    async fn release(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
    ) -> ExecutionResult<Execution> {
        let released =
            retry_transient(|| self.release_once(execution_id, attempt_id, lease_token)).await?;
        self.wake_local();
        Ok(released)
    }

    async fn lease_remaining(&self, lease_expires_at: OffsetDateTime) -> ExecutionResult<Duration> {
        let op = ConnectorOperation::Heartbeat;
        let mut tx = self.begin(op).await?;
        let now = self.now(&mut tx, op).await?;
        Self::commit(tx, op).await?;
        Ok(Duration::try_from(lease_expires_at - now).unwrap_or(Duration::ZERO))
    }

    fn concurrent_claims(&self) -> usize {
        D::CONCURRENT_CLAIMS
    }

    fn validate_result(&self, result: &Value) -> ExecutionResult<()> {
        encode_result(result, &self.inner.options.limits).map(|_| ())
    }

    async fn wait_for_work(&self, _namespace: &str, _task_names: &[String], timeout: Duration) {
        let mut work = self.inner.work.subscribe();
        if self.inner.listener.get().is_none()
            && let Ok(pool) = self.inner.connector.pool()
            && let Some(task) = D::listen(pool, self.inner.channel.clone(), self.inner.work.clone())
        {
            let _ = self
                .inner
                .listener
                .set(tokio_util::task::AbortOnDropHandle::new(task));
        }
        let _ = tokio::time::timeout(timeout, work.changed()).await;
    }
}

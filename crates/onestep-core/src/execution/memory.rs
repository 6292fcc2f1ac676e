//! [`MemoryExecutionBackend`]: the whole execution contract in process memory, with an injected
//! clock. For tests, examples and single-process apps; nothing survives the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::watch;
use uuid::Uuid;

use super::backend::{
    ExecutionBackend, LeasedExecutionBackend, validate_cancel_reason, validate_claim,
};
use super::cursor::decode_cursor;
use super::error::{ExecutionError, ExecutionResult};
use super::record::{
    Execution, ExecutionCompletion, ExecutionLease, ExecutionLimits, ExecutionPage, ExecutionQuery,
    ExecutionRequest, HeartbeatResult,
};
use super::state::{CompletionDecision, cancel_target, decide_completion};
use super::status::{AttemptStatus, ExecutionStatus};
use super::stored::{AttemptRow, ExecutionRow, encode_result, encode_submission, page_of};
use crate::clock::{SharedClock, SystemClock};

#[derive(Default)]
struct Tables {
    executions: HashMap<Uuid, ExecutionRow>,
    attempts: HashMap<Uuid, AttemptRow>,
    attempt_by_no: HashMap<(Uuid, i32), Uuid>,
    by_key: HashMap<(String, String, String), Uuid>,
}

impl Tables {
    /// `status = retrying` and the latest attempt lost its lease: still claimable after expiry.
    fn lease_lost_retry(&self, row: &ExecutionRow) -> bool {
        row.status == ExecutionStatus::Retrying
            && self
                .attempt_by_no
                .get(&(row.id, row.attempts))
                .and_then(|id| self.attempts.get(id))
                .is_some_and(|a| a.status == AttemptStatus::LeaseLost)
    }

    /// The running attempt `attempt_id` of `execution_id` holding `token`.
    fn running_attempt(
        &mut self,
        attempt_id: Uuid,
        execution_id: Uuid,
        token: Uuid,
    ) -> Option<&mut AttemptRow> {
        self.attempts.get_mut(&attempt_id).filter(|a| {
            a.execution_id == execution_id
                && a.lease_token == token
                && a.status == AttemptStatus::Running
        })
    }

    /// Ends the running attempt of `execution_id` holding `token`, if any.
    fn finish_attempt_by_token(
        &mut self,
        execution_id: Uuid,
        token: Uuid,
        status: AttemptStatus,
        now: OffsetDateTime,
    ) {
        for attempt in self.attempts.values_mut() {
            if attempt.execution_id == execution_id
                && attempt.lease_token == token
                && attempt.status == AttemptStatus::Running
            {
                attempt.status = status;
                attempt.finished_at = Some(now);
            }
        }
    }
}

struct Inner {
    tables: Mutex<Tables>,
    clock: SharedClock,
    limits: ExecutionLimits,
    reclaim_batch_size: usize,
    changes: watch::Sender<u64>,
}

/// The execution contract in memory. Clones share the same store, so an API half and a worker
/// half of one process can each hold one.
///
/// Claim-time maintenance is the same as the SQL backends': each claim expires queued work past
/// `expires_at`, turns expired cancel requests into cancellations and reclaims expired leases,
/// each step bounded by `reclaim_batch_size` and across all namespaces.
#[derive(Clone)]
pub struct MemoryExecutionBackend {
    inner: Arc<Inner>,
}

impl Default for MemoryExecutionBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryExecutionBackend {
    /// A backend with the system clock, default limits and reclaim batches of 100.
    pub fn new() -> Self {
        Self::build(Arc::new(SystemClock), ExecutionLimits::default(), 100)
    }

    fn build(clock: SharedClock, limits: ExecutionLimits, reclaim_batch_size: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                tables: Mutex::new(Tables::default()),
                clock,
                limits,
                reclaim_batch_size,
                changes: watch::Sender::new(0),
            }),
        }
    }

    /// A backend reading time from `clock` (tests pass a [`ManualClock`](crate::clock::ManualClock)).
    pub fn with_clock(clock: SharedClock) -> Self {
        Self::build(clock, ExecutionLimits::default(), 100)
    }

    /// A backend with every option: clock, size limits (positive) and reclaim batch size (>= 1).
    pub fn with_options(
        clock: SharedClock,
        limits: ExecutionLimits,
        reclaim_batch_size: usize,
    ) -> ExecutionResult<Self> {
        let limits = limits.validate()?;
        if reclaim_batch_size < 1 {
            return Err(ExecutionError::invalid(
                "reclaim_batch_size",
                "must be a positive integer, got 0",
            ));
        }
        Ok(Self::build(clock, limits, reclaim_batch_size))
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.inner.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> OffsetDateTime {
        crate::clock::utc(self.inner.clock.now())
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The attempts history of an execution, oldest first (for tests and admin views).
    pub fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow> {
        let tables = self.lock();
        let mut out: Vec<AttemptRow> = tables
            .attempts
            .values()
            .filter(|a| a.execution_id == execution_id)
            .cloned()
            .collect();
        out.sort_by_key(|a| a.attempt_no);
        out
    }

    fn maintain(&self, tables: &mut Tables, now: OffsetDateTime) {
        let batch = self.inner.reclaim_batch_size;
        // 1. queued or handler-retrying work past its latest start time expires.
        let mut expiring: Vec<(OffsetDateTime, Uuid)> = tables
            .executions
            .values()
            .filter(|r| {
                matches!(
                    r.status,
                    ExecutionStatus::Queued | ExecutionStatus::Retrying
                )
            })
            .filter(|r| r.expires_at.is_some_and(|e| e <= now))
            .filter(|r| !tables.lease_lost_retry(r))
            .filter_map(|r| r.expires_at.map(|e| (e, r.id)))
            .collect();
        expiring.sort();
        for (_, id) in expiring.into_iter().take(batch) {
            if let Some(row) = tables.executions.get_mut(&id) {
                row.status = ExecutionStatus::Expired;
                row.finished_at = Some(now);
                row.updated_at = now;
                row.version += 1;
            }
        }
        // 2. cancel requests whose worker's lease expired become cancelled.
        let mut cancelling: Vec<(OffsetDateTime, Uuid)> = tables
            .executions
            .values()
            .filter(|r| r.status == ExecutionStatus::CancelRequested)
            .filter_map(|r| r.lease_expires_at.filter(|e| *e <= now).map(|e| (e, r.id)))
            .collect();
        cancelling.sort();
        for (_, id) in cancelling.into_iter().take(batch) {
            let token = tables.executions.get_mut(&id).and_then(|row| {
                let token = row.lease_token.take();
                row.status = ExecutionStatus::Cancelled;
                row.finished_at = Some(now);
                row.updated_at = now;
                row.lease_expires_at = None;
                row.worker_id = None;
                row.version += 1;
                token
            });
            if let Some(token) = token {
                tables.finish_attempt_by_token(id, token, AttemptStatus::Cancelled, now);
            }
        }
        // 3. running work whose lease expired goes back to retrying; the attempt lost its lease.
        let mut reclaiming: Vec<(OffsetDateTime, Uuid)> = tables
            .executions
            .values()
            .filter(|r| r.status == ExecutionStatus::Running)
            .filter_map(|r| r.lease_expires_at.filter(|e| *e <= now).map(|e| (e, r.id)))
            .collect();
        reclaiming.sort();
        for (_, id) in reclaiming.into_iter().take(batch) {
            let token = tables.executions.get_mut(&id).and_then(|row| {
                let token = row.lease_token.take();
                row.status = ExecutionStatus::Retrying;
                row.available_at = now;
                row.updated_at = now;
                row.lease_expires_at = None;
                row.worker_id = None;
                row.version += 1;
                token
            });
            if let Some(token) = token {
                tables.finish_attempt_by_token(id, token, AttemptStatus::LeaseLost, now);
            }
        }
    }
}

#[async_trait]
impl ExecutionBackend for MemoryExecutionBackend {
    fn backend_name(&self) -> &str {
        "memory"
    }

    async fn submit(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
        let encoded = encode_submission(&request, &self.inner.limits)?;
        let now = self.now();
        let mut tables = self.lock();
        if let Some(key) = &request.idempotency_key {
            let scope = (
                request.namespace.clone(),
                request.task_name.clone(),
                key.clone(),
            );
            if let Some(existing) = tables
                .by_key
                .get(&scope)
                .and_then(|id| tables.executions.get(id))
            {
                if existing.submission_digest != encoded.digest {
                    return Err(ExecutionError::Conflict(
                        "idempotency key was already used with a different submission".into(),
                    ));
                }
                return existing.to_execution();
            }
        }
        let id = Uuid::new_v4();
        let row = ExecutionRow::queued(&request, encoded, id, now);
        let snapshot = row.to_execution()?;
        if let Some(key) = &request.idempotency_key {
            tables.by_key.insert(
                (
                    request.namespace.clone(),
                    request.task_name.clone(),
                    key.clone(),
                ),
                id,
            );
        }
        tables.executions.insert(id, row);
        drop(tables);
        self.changed();
        Ok(snapshot)
    }

    async fn get(&self, namespace: &str, id: Uuid) -> ExecutionResult<Option<Execution>> {
        let tables = self.lock();
        tables
            .executions
            .get(&id)
            .filter(|r| r.namespace == namespace)
            .map(ExecutionRow::to_execution)
            .transpose()
    }

    async fn list(&self, query: &ExecutionQuery) -> ExecutionResult<ExecutionPage> {
        query.validate()?;
        let after = query
            .cursor
            .as_deref()
            .map(decode_cursor)
            .transpose()
            .map_err(|e| ExecutionError::invalid("cursor", format!("is rejected: {e}")))?;
        let tables = self.lock();
        let mut rows: Vec<&ExecutionRow> = tables
            .executions
            .values()
            .filter(|r| r.namespace == query.namespace)
            .filter(|r| query.task_name.as_ref().is_none_or(|t| &r.task_name == t))
            .filter(|r| query.status.is_none_or(|s| r.status == s))
            .filter(|r| after.is_none_or(|(c, i)| (r.created_at, r.id) < (c, i)))
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id)));
        page_of(rows, query.limit as usize)
    }

    async fn request_cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<&str>,
    ) -> ExecutionResult<Option<Execution>> {
        validate_cancel_reason(reason)?;
        let now = self.now();
        let mut tables = self.lock();
        let Some(row) = tables
            .executions
            .get_mut(&id)
            .filter(|r| r.namespace == namespace)
        else {
            return Ok(None);
        };
        let changed = match cancel_target(row.status) {
            Some(target) => {
                row.status = target;
                row.cancel_reason = reason.map(str::to_string);
                row.cancel_requested_at = Some(now);
                if target == ExecutionStatus::Cancelled {
                    row.finished_at = Some(now);
                }
                row.updated_at = now;
                row.version += 1;
                true
            }
            None => false,
        };
        let snapshot = row.to_execution()?;
        drop(tables);
        if changed {
            self.changed();
        }
        Ok(Some(snapshot))
    }

    async fn wait_for_change(
        &self,
        _namespace: &str,
        _id: Uuid,
        timeout: Duration,
    ) -> ExecutionResult<bool> {
        let mut changes = self.inner.changes.subscribe();
        Ok(tokio::time::timeout(timeout, changes.changed())
            .await
            .is_ok())
    }
}

#[async_trait]
impl LeasedExecutionBackend for MemoryExecutionBackend {
    async fn claim(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<ExecutionLease>> {
        super::stored::reject_nul("namespace", namespace)?;
        validate_claim(task_names, limit, lease_duration, worker_id)?;
        let now = self.now();
        let lease_expires_at = crate::clock::after(now, lease_duration);
        let worker_id = worker_id.trim().to_string();
        let mut tables = self.lock();
        self.maintain(&mut tables, now);
        let mut ready: Vec<(OffsetDateTime, OffsetDateTime, Uuid)> = tables
            .executions
            .values()
            .filter(|r| {
                r.namespace == namespace && task_names.iter().any(|t| t.trim() == r.task_name)
            })
            .filter(|r| {
                matches!(
                    r.status,
                    ExecutionStatus::Queued | ExecutionStatus::Retrying
                )
            })
            .filter(|r| r.available_at <= now)
            .filter(|r| r.expires_at.is_none_or(|e| e > now) || tables.lease_lost_retry(r))
            .map(|r| (r.available_at, r.created_at, r.id))
            .collect();
        ready.sort();
        let mut leases = Vec::new();
        for (_, _, id) in ready.into_iter().take(limit) {
            let attempt_id = Uuid::new_v4();
            let lease_token = Uuid::new_v4();
            let Some(row) = tables.executions.get_mut(&id) else {
                continue;
            };
            row.status = ExecutionStatus::Running;
            row.attempts += 1;
            row.lease_token = Some(lease_token);
            row.lease_expires_at = Some(lease_expires_at);
            row.worker_id = Some(worker_id.clone());
            row.started_at = row.started_at.or(Some(now));
            row.updated_at = now;
            row.version += 1;
            let attempt_no = row.attempts;
            let execution = row.to_execution()?;
            tables.attempts.insert(
                attempt_id,
                AttemptRow {
                    id: attempt_id,
                    execution_id: id,
                    attempt_no,
                    lease_token,
                    worker_id: worker_id.clone(),
                    status: AttemptStatus::Running,
                    error: None,
                    started_at: now,
                    heartbeat_at: now,
                    finished_at: None,
                },
            );
            tables.attempt_by_no.insert((id, attempt_no), attempt_id);
            leases.push(ExecutionLease {
                execution,
                attempt_id,
                lease_token,
                lease_expires_at,
            });
        }
        drop(tables);
        if !leases.is_empty() {
            self.changed();
        }
        Ok(leases)
    }

    async fn heartbeat(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_duration: Duration,
    ) -> ExecutionResult<HeartbeatResult> {
        if lease_duration.is_zero() {
            return Err(ExecutionError::invalid(
                "lease_duration_s",
                "must be > 0, got 0",
            ));
        }
        let now = self.now();
        let expires = crate::clock::after(now, lease_duration);
        let mut tables = self.lock();
        let live = tables.executions.get(&execution_id).is_some_and(|r| {
            r.lease_token == Some(lease_token)
                && matches!(
                    r.status,
                    ExecutionStatus::Running | ExecutionStatus::CancelRequested
                )
                && r.lease_expires_at.is_some_and(|e| e > now)
        });
        if !live
            || tables
                .running_attempt(attempt_id, execution_id, lease_token)
                .is_none()
        {
            return Err(ExecutionError::lease_lost());
        }
        if let Some(attempt) = tables.running_attempt(attempt_id, execution_id, lease_token) {
            attempt.heartbeat_at = now;
        }
        let Some(row) = tables.executions.get_mut(&execution_id) else {
            return Err(ExecutionError::lease_lost());
        };
        row.lease_expires_at = Some(expires);
        row.updated_at = now;
        Ok(HeartbeatResult {
            lease_expires_at: expires,
            cancel_requested: row.status == ExecutionStatus::CancelRequested,
        })
    }

    async fn complete(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution> {
        let completion = completion.validate()?;
        let now = self.now();
        let mut tables = self.lock();
        let Some(current) = tables.executions.get(&execution_id) else {
            return Err(ExecutionError::LeaseLost("execution does not exist".into()));
        };
        let change =
            match decide_completion(current, lease_token, &completion, now, &self.inner.limits)? {
                CompletionDecision::Replay => return current.to_execution(),
                CompletionDecision::Write(change) => change,
            };
        let Some(attempt) = tables.running_attempt(attempt_id, execution_id, lease_token) else {
            return Err(ExecutionError::LeaseLost(
                "execution attempt is no longer valid".into(),
            ));
        };
        attempt.status = change.attempt_status;
        attempt.error = change.error.clone();
        attempt.finished_at = Some(now);
        let Some(row) = tables.executions.get_mut(&execution_id) else {
            return Err(ExecutionError::lease_lost());
        };
        change.apply(row, now);
        let snapshot = row.to_execution()?;
        drop(tables);
        self.changed();
        Ok(snapshot)
    }

    async fn release(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
    ) -> ExecutionResult<Execution> {
        let now = self.now();
        let mut tables = self.lock();
        let Some(current) = tables.executions.get(&execution_id) else {
            return Err(ExecutionError::LeaseLost("execution does not exist".into()));
        };
        let fenced = current.status == ExecutionStatus::Running
            && current.lease_token == Some(lease_token)
            && current.lease_expires_at.is_some_and(|e| e > now);
        if !fenced
            || tables
                .running_attempt(attempt_id, execution_id, lease_token)
                .is_none()
        {
            return Err(ExecutionError::lease_lost());
        }
        if let Some(attempt) = tables.running_attempt(attempt_id, execution_id, lease_token) {
            attempt.status = AttemptStatus::LeaseLost;
            attempt.finished_at = Some(now);
        }
        let Some(row) = tables.executions.get_mut(&execution_id) else {
            return Err(ExecutionError::lease_lost());
        };
        row.status = ExecutionStatus::Queued;
        row.available_at = now;
        row.lease_token = None;
        row.lease_expires_at = None;
        row.worker_id = None;
        row.updated_at = now;
        row.version += 1;
        let snapshot = row.to_execution()?;
        drop(tables);
        self.changed();
        Ok(snapshot)
    }

    async fn lease_remaining(&self, lease_expires_at: OffsetDateTime) -> ExecutionResult<Duration> {
        let left = lease_expires_at - self.now();
        Ok(Duration::try_from(left).unwrap_or(Duration::ZERO))
    }

    async fn wait_for_work(&self, _namespace: &str, _task_names: &[String], timeout: Duration) {
        let mut changes = self.inner.changes.subscribe();
        let _ = tokio::time::timeout(timeout, changes.changed()).await;
    }

    fn validate_result(&self, result: &Value) -> ExecutionResult<()> {
        encode_result(result, &self.inner.limits).map(|_| ())
    }
}

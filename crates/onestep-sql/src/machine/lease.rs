//! Holding a lease: checking, renewing (one by one or in a batch) and releasing it.

use std::collections::HashMap;

use super::json_batch;
use super::*;

/// The executions of a batch of leases, locked by [`SqlExecutionBackend::lock_batch`].
pub(super) struct LockedBatch {
    /// The transaction's time (or the injected clock's).
    pub(super) now: OffsetDateTime,
    /// Each locked execution by id, with whether the attempt its caller named is still
    /// `running` under the execution's lease token.
    pub(super) rows: HashMap<Uuid, (ExecutionRow, bool)>,
}

impl<D: Dialect> SqlExecutionBackend<D> {
    /// Whether the running attempt of a lease exists.
    pub(super) async fn attempt_is_running(
        &self,
        tx: &mut Tx<D>,
        execution_id: Uuid,
        attempt_id: Uuid,
        token: Uuid,
        op: ConnectorOperation,
    ) -> ExecutionResult<bool> {
        let rows = crate::decode::attempts::<D>(
            tx,
            &self.inner.statements.get_running_attempt,
            vec![attempt_id.into(), execution_id.into(), token.into()],
        )
        .await
        .map_err(db::<D>(op))?;
        Ok(!rows.is_empty())
    }

    pub(super) async fn heartbeat_once(
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
        let op = ConnectorOperation::Heartbeat;
        let s = &self.inner.statements;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let expires = later(now, lease_duration);
            let renewed = D::execute(
                &mut tx,
                &s.heartbeat,
                vec![
                    expires.into(),
                    now.into(),
                    execution_id.into(),
                    lease_token.into(),
                    now.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            let beat = D::execute(
                &mut tx,
                &s.heartbeat_attempt,
                vec![
                    now.into(),
                    attempt_id.into(),
                    execution_id.into(),
                    lease_token.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if renewed != 1 || beat != 1 {
                return Err(ExecutionError::lease_lost());
            }
            let row = Self::one(
                &mut tx,
                &s.get_for_update.replace(D::FOR_UPDATE, ""),
                vec![execution_id.into()],
                op,
            )
            .await?;
            let cancel_requested =
                row.is_some_and(|r| r.status == ExecutionStatus::CancelRequested);
            Ok(HeartbeatResult {
                lease_expires_at: expires,
                cancel_requested,
            })
        }
        .await;
        Self::finish(tx, out, op).await
    }

    /// Locks the executions of a batch of (execution, attempt) pairs, in id order, and reads
    /// what batched heartbeats and completions decide on: the transaction's time and, per
    /// locked execution, whether its paired attempt still runs under the execution's lease
    /// token. One statement (and, where the dialect reads no time from the database, nothing
    /// more): [`BatchPaths::lock_leases`](crate::dialect::BatchPaths::lock_leases) where the
    /// dialect has it, else [`sql::LOCK_LEASES_MANY`].
    /// The pairs name distinct executions (the callers send repeated ones one by one).
    ///
    /// The attempts are read in the locking statement's snapshot, taken before any
    /// wait for a row lock; that is enough because every transaction that ends or moves an
    /// attempt also changes its execution's lease token, which the locked row is re-read with.
    pub(super) async fn lock_batch(
        &self,
        tx: &mut Tx<D>,
        op: ConnectorOperation,
        pairs: impl ExactSizeIterator<Item = (Uuid, Uuid)> + Clone,
    ) -> ExecutionResult<LockedBatch> {
        // Where the statement reads the transaction's time, it is taken from the rows; else
        // (an injected clock, or a dialect whose time is the client's) it is known beforehand.
        let reads_time =
            self.inner.statements.lock_leases.is_some() && self.inner.options.clock.is_none();
        let known_now = match reads_time {
            true => None,
            false => Some(self.now(tx, op).await?),
        };
        let (statement, params) = match (&self.inner.statements.lock_leases, self.json_batches()) {
            (_, Some(json)) => {
                // In id order: the rows are locked in the array's order.
                let mut pairs: Vec<(Uuid, Uuid)> = pairs.collect();
                pairs.sort_unstable();
                let list = json_batch::batch(pairs, |f, (execution, attempt)| {
                    f.id("i", execution).id("a", attempt);
                });
                (json.lock_leases.clone(), vec![Param::Text(list)])
            }
            (Some(template), None) => {
                let list = |ids: &mut dyn Iterator<Item = Uuid>| {
                    ids.map(|id| id.to_string()).collect::<Vec<_>>().join(",")
                };
                let params = vec![
                    Param::Text(list(&mut pairs.clone().map(|p| p.0))),
                    Param::Text(list(&mut pairs.map(|p| p.1))),
                ];
                (template.clone(), params)
            }
            (None, None) => {
                let attempt_ids: Vec<Param> = pairs.clone().map(|p| Param::from(p.1)).collect();
                let template = sql::LOCK_LEASES_MANY.replace(
                    "{attempt_ids}",
                    &format!("IN ({})", vec!["?"; attempt_ids.len()].join(", ")),
                );
                let (lock, execution_ids) = self.over_ids(&template, pairs.map(|p| p.0));
                (lock, [attempt_ids, execution_ids].concat())
            }
        };
        let fetched = D::fetch(tx, &statement, params)
            .await
            .map_err(db::<D>(op))?;
        let mut read_now = None;
        let mut rows = HashMap::with_capacity(fetched.len());
        for row in &fetched {
            let locked = crate::decode::execution::<D>(row).map_err(db::<D>(op))?;
            let running = D::bigint(row, 23).map_err(db::<D>(op))? == Some(1);
            if reads_time {
                let at = D::time(row, 24)
                    .and_then(|at| crate::decode::required(at, "CURRENT_TIMESTAMP"));
                read_now = Some(at.map_err(db::<D>(op))?);
            }
            rows.insert(locked.id, (locked, running));
        }
        let now = match (known_now, read_now) {
            (Some(now), _) => now,
            (None, Some(at)) => onestep_core::clock::whole_micros(onestep_core::clock::utc(at)),
            // Nothing locked: no row to read the time from.
            (None, None) => self.now(tx, op).await?,
        };
        Ok(LockedBatch { now, rows })
    }

    /// Renews distinct leases in one transaction: lock their executions (in id order) and read
    /// their running attempts, decide each lease with the rules of
    /// [`heartbeat`](LeasedExecutionBackend::heartbeat), renew the held ones with one UPDATE per
    /// table, commit once. A lease that is not held is reported lost and left unchanged.
    pub(super) async fn heartbeat_batch(
        &self,
        leases: &[(Uuid, Uuid, Uuid)],
        lease_duration: Duration,
    ) -> ExecutionResult<Vec<ExecutionResult<HeartbeatResult>>> {
        let op = ConnectorOperation::Heartbeat;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let LockedBatch { now, rows } = self
                .lock_batch(&mut tx, op, leases.iter().map(|l| (l.0, l.1)))
                .await?;
            let expires = later(now, lease_duration);
            let mut held = Vec::with_capacity(leases.len());
            let results: Vec<ExecutionResult<HeartbeatResult>> = leases
                .iter()
                .map(|&(execution_id, attempt_id, token)| {
                    let row = rows.get(&execution_id).filter(|(r, _)| {
                        r.lease_token == Some(token)
                            && matches!(
                                r.status,
                                ExecutionStatus::Running | ExecutionStatus::CancelRequested
                            )
                            && r.lease_expires_at.is_some_and(|e| e > now)
                    });
                    match row {
                        Some((row, true)) => {
                            held.push((execution_id, attempt_id));
                            Ok(HeartbeatResult {
                                lease_expires_at: expires,
                                cancel_requested: row.status == ExecutionStatus::CancelRequested,
                            })
                        }
                        _ => Err(ExecutionError::lease_lost()),
                    }
                })
                .collect();
            if !held.is_empty() {
                let n = held.len() as u64;
                let (renew, renew_params, beat, beat_params) = match self.json_batches() {
                    Some(json) => {
                        let executions = json_batch::ids(held.iter().map(|h| h.0));
                        let attempts = json_batch::ids(held.iter().map(|h| h.1));
                        (
                            json.heartbeat.clone(),
                            vec![executions.into(), expires.into(), now.into()],
                            json.heartbeat_attempts.clone(),
                            vec![attempts.into(), now.into()],
                        )
                    }
                    None => {
                        let (renew, ids) =
                            self.over_ids(sql::HEARTBEAT_MANY, held.iter().map(|h| h.0));
                        let (beat, attempt_ids) =
                            self.over_ids(sql::HEARTBEAT_ATTEMPTS_MANY, held.iter().map(|h| h.1));
                        (
                            renew,
                            [vec![expires.into(), now.into()], ids].concat(),
                            beat,
                            [vec![now.into()], attempt_ids].concat(),
                        )
                    }
                };
                let renewed = D::execute(&mut tx, &renew, renew_params)
                    .await
                    .map_err(db::<D>(op))?;
                let beaten = D::execute(&mut tx, &beat, beat_params)
                    .await
                    .map_err(db::<D>(op))?;
                if renewed != n || beaten != n {
                    return Err(ExecutionError::Backend(
                        format!(
                            "batched heartbeat renewed {renewed} executions and {beaten} attempts \
                             of {n} locked leases"
                        )
                        .into(),
                    ));
                }
            }
            Ok(results)
        }
        .await;
        Self::finish(tx, out, op).await
    }

    pub(super) async fn release_once(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
    ) -> ExecutionResult<Execution> {
        let op = ConnectorOperation::Retry;
        let s = &self.inner.statements;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let Some(mut row) =
                Self::one(&mut tx, &s.get_for_update, vec![execution_id.into()], op).await?
            else {
                return Err(ExecutionError::LeaseLost("execution does not exist".into()));
            };
            let fenced = row.status == ExecutionStatus::Running
                && row.lease_token == Some(lease_token)
                && row.lease_expires_at.is_some_and(|e| e > now);
            if !fenced
                || !self
                    .attempt_is_running(&mut tx, execution_id, attempt_id, lease_token, op)
                    .await?
            {
                return Err(ExecutionError::lease_lost());
            }
            D::execute(
                &mut tx,
                &s.release,
                vec![
                    now.into(),
                    now.into(),
                    execution_id.into(),
                    row.version.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            D::execute(
                &mut tx,
                &s.finish_attempt,
                vec![
                    AttemptStatus::LeaseLost.as_str().into(),
                    Param::OptJson(None),
                    now.into(),
                    attempt_id.into(),
                    execution_id.into(),
                    lease_token.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            row.status = ExecutionStatus::Queued;
            row.available_at = now;
            row.lease_token = None;
            row.lease_expires_at = None;
            row.worker_id = None;
            row.updated_at = now;
            row.version += 1;
            row.to_execution()
        }
        .await;
        Self::finish(tx, out, op).await
    }
}

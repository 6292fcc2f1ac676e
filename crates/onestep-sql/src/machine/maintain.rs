//! Claim-time maintenance: expiring what waited past `expires_at`, reclaiming leases that ran out, at most every `maintenance_interval`.

use super::*;

impl<D: Dialect> SqlExecutionBackend<D> {
    /// Whether a claim should run maintenance now; marks it done when it should.
    pub(super) fn maintenance_due(&self) -> bool {
        Self::due(
            &self.inner.last_maintenance,
            self.inner.options.maintenance_interval,
        )
    }

    /// Whether `last` is at least `interval` ago (or never); marks it now when it is.
    pub(super) fn due(
        last: &std::sync::Mutex<Option<std::time::Instant>>,
        interval: Duration,
    ) -> bool {
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= interval);
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }

    /// Runs one maintenance pass in `tx`; returns what it changed, for the metrics once `tx`
    /// commits.
    pub(super) async fn maintain(
        &self,
        tx: &mut Tx<D>,
        now: OffsetDateTime,
    ) -> ExecutionResult<Swept> {
        let mut swept = Swept::default();
        let s = &self.inner.statements;
        let batch = i64::try_from(self.inner.options.reclaim_batch_size).unwrap_or(i64::MAX);
        let op = ConnectorOperation::Fetch;
        let expiring = if Self::due(
            &self.inner.last_expiry_sweep,
            self.inner.options.expiry_sweep_interval,
        ) {
            let sweep = match self.inner.claim_column.get() {
                Some(c) => &c.expire_candidates,
                None => &s.expire_candidates,
            };
            crate::decode::candidates::<D>(tx, sweep, vec![now.into(), batch.into()])
                .await
                .map_err(db::<D>(op))?
        } else {
            Vec::new()
        };
        if expiring.len() as u64 >= batch.max(0) as u64 {
            // A full batch: there may be more, so sweep again on the next maintenance pass.
            *self
                .inner
                .last_expiry_sweep
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
        }
        for (id, version, _) in expiring {
            swept.expired += D::execute(
                tx,
                &s.expire,
                vec![
                    now.into(),
                    now.into(),
                    id.into(),
                    version.into(),
                    now.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
        }
        // Lapsed cancel requests become cancelled; lapsed leases go back to retrying.
        swept.cancelled = self
            .sweep_leases(
                tx,
                &s.cancel_expiry_candidates,
                &s.cancel_expiry,
                AttemptStatus::Cancelled,
                now,
                batch,
            )
            .await?;
        swept.reclaimed = self
            .sweep_leases(
                tx,
                &s.reclaim_candidates,
                &s.reclaim,
                AttemptStatus::LeaseLost,
                now,
                batch,
            )
            .await?;
        Ok(swept)
    }

    /// One lease sweep of maintenance: selects up to `batch` candidates with `candidates`, applies
    /// `apply` to each (fenced by version and lease token), and ends the attempt holding the token
    /// with `attempt_status` where `apply` changed the row. Returns how many rows it changed.
    pub(super) async fn sweep_leases(
        &self,
        tx: &mut Tx<D>,
        candidates: &str,
        apply: &str,
        attempt_status: AttemptStatus,
        now: OffsetDateTime,
        batch: i64,
    ) -> ExecutionResult<u64> {
        let op = ConnectorOperation::Fetch;
        let mut swept = 0;
        let rows = crate::decode::candidates::<D>(tx, candidates, vec![now.into(), batch.into()])
            .await
            .map_err(db::<D>(op))?;
        for (id, version, token) in rows {
            let changed = D::execute(
                tx,
                apply,
                vec![
                    now.into(),
                    now.into(),
                    id.into(),
                    version.into(),
                    token.into(),
                    now.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if changed == 1 {
                swept += 1;
                D::execute(
                    tx,
                    &self.inner.statements.finish_attempt_by_token,
                    vec![
                        attempt_status.as_str().into(),
                        now.into(),
                        id.into(),
                        token.into(),
                    ],
                )
                .await
                .map_err(db::<D>(op))?;
            }
        }
        Ok(swept)
    }
}

/// What one maintenance pass changed.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Swept {
    /// Waiting executions ended `expired`.
    pub(super) expired: u64,
    /// Lapsed cancel requests ended `cancelled`.
    pub(super) cancelled: u64,
    /// Lapsed leases handed back to the queue.
    pub(super) reclaimed: u64,
}

impl Swept {
    /// Counts what a committed pass changed.
    pub(super) fn record(self) {
        let metrics = onestep_core::metrics::execution::execution_metrics();
        metrics.expired(self.expired);
        metrics.reclaimed(self.reclaimed);
    }
}

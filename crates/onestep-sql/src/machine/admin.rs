//! Reading and administering executions: one execution's attempts, counts per status, pruning.

use super::*;

impl<D: Dialect> SqlExecutionBackend<D> {
    /// The attempts history of an execution, oldest first.
    pub async fn attempts(&self, execution_id: Uuid) -> ExecutionResult<Vec<AttemptRow>> {
        let mut tx = self.begin(ConnectorOperation::Fetch).await?;
        let rows = crate::decode::attempts::<D>(
            &mut tx,
            &self.inner.statements.attempts,
            vec![execution_id.into()],
        )
        .await
        .map_err(db::<D>(ConnectorOperation::Fetch))?;
        Self::commit(tx, ConnectorOperation::Fetch).await?;
        Ok(rows)
    }

    /// Counts executions by status in `namespace` (all namespaces when `None`), with the oldest
    /// `created_at` of each status: the numbers to alert on.
    pub async fn stats(&self, namespace: Option<&str>) -> ExecutionResult<Vec<StatusCount>> {
        namespace.map_or(Ok(()), |ns| reject_nul("namespace", ns))?;
        let op = ConnectorOperation::Fetch;
        let built = crate::query::stats(D::SCHEMA, &self.inner.tables.executions, namespace)?;
        let mut tx = self.begin(op).await?;
        let rows = crate::decode::status_counts::<D>(&mut tx, &built.sql, built.params)
            .await
            .map_err(db::<D>(op))?;
        Self::commit(tx, op).await?;
        let mut out: Vec<StatusCount> = ExecutionStatus::ALL
            .into_iter()
            .map(|status| StatusCount {
                status,
                count: 0,
                oldest_created_at: None,
            })
            .collect();
        for (status, count, oldest) in rows {
            // The table's CHECK constraint admits only known statuses; a table without it
            // (created by hand) reports the stranger instead of hiding its rows.
            let known: ExecutionStatus = status.parse().map_err(|_| {
                ExecutionError::Backend(
                    format!("column status holds {status:?}, which is not an execution status")
                        .into(),
                )
            })?;
            if let Some(entry) = out.iter_mut().find(|s| s.status == known) {
                entry.count = usize::try_from(count).unwrap_or(0);
                entry.oldest_created_at = oldest;
            }
        }
        Ok(out)
    }

    /// Deletes terminal executions (and their attempts) finished before `before`, in `namespace`
    /// (every namespace when `None`), at most
    /// `batch` per transaction, until none is left; with `dry_run` only counts them. Returns how
    /// many were (or would be) deleted.
    pub async fn prune(
        &self,
        namespace: Option<&str>,
        before: OffsetDateTime,
        batch: usize,
        dry_run: bool,
    ) -> ExecutionResult<usize> {
        if batch < 1 {
            return Err(ExecutionError::invalid("batch", "must be >= 1, got 0"));
        }
        namespace.map_or(Ok(()), |ns| reject_nul("namespace", ns))?;
        let op = ConnectorOperation::Send;
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let delete_attempts = D::render(&format!("DELETE FROM {a} WHERE execution_id = ?"));
        let delete = D::render(&format!(
            "DELETE FROM {e} WHERE id = ? AND status IN ('succeeded', 'failed', 'cancelled', 'expired')"
        ));
        let limit = if dry_run {
            u64::MAX
        } else {
            u64::try_from(batch).unwrap_or(u64::MAX)
        };
        let select = crate::query::prune_candidates(
            D::SCHEMA,
            &self.inner.tables.executions,
            namespace,
            before,
            limit,
        )?;
        let mut total = 0;
        loop {
            let mut tx = self.begin(op).await?;
            let rows = crate::decode::candidates::<D>(&mut tx, &select.sql, select.params.clone())
                .await
                .map_err(db::<D>(op))?;
            if dry_run || rows.is_empty() {
                Self::commit(tx, op).await?;
                return Ok(total + if dry_run { rows.len() } else { 0 });
            }
            for (id, _, _) in &rows {
                D::execute(&mut tx, &delete_attempts, vec![(*id).into()])
                    .await
                    .map_err(db::<D>(op))?;
                total += D::execute(&mut tx, &delete, vec![(*id).into()])
                    .await
                    .map_err(db::<D>(op))? as usize;
            }
            Self::commit(tx, op).await?;
        }
    }
}

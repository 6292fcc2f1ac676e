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
        // One pass over the table, whatever the number of statuses (was two queries per
        // status, each a scan where no index leads with `status`).
        let mut sql = format!(
            "SELECT status, COUNT(*), MIN(created_at) FROM {e}",
            e = D::quote(&self.inner.tables.executions)
        );
        let mut params: Vec<Param> = Vec::new();
        if let Some(ns) = namespace {
            sql.push_str(" WHERE namespace = ?");
            params.push(ns.into());
        }
        sql.push_str(" GROUP BY status");
        let mut tx = self.begin(op).await?;
        let rows = crate::decode::status_counts::<D>(&mut tx, &D::render(&sql), params)
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
        let ns = if namespace.is_some() {
            " AND namespace = ?"
        } else {
            ""
        };
        let select = D::render(&format!(
            "SELECT id, version, lease_token FROM {e} WHERE status IN ('succeeded', 'failed', 'cancelled', 'expired') \
             AND finished_at IS NOT NULL AND finished_at < ?{ns} ORDER BY finished_at, id LIMIT ?"
        ));
        let delete_attempts = D::render(&format!("DELETE FROM {a} WHERE execution_id = ?"));
        let delete = D::render(&format!(
            "DELETE FROM {e} WHERE id = ? AND status IN ('succeeded', 'failed', 'cancelled', 'expired')"
        ));
        let mut total = 0;
        loop {
            let mut tx = self.begin(op).await?;
            let limit = if dry_run {
                i64::MAX
            } else {
                i64::try_from(batch).unwrap_or(i64::MAX)
            };
            let rows = crate::decode::candidates::<D>(&mut tx, &select, {
                let mut params: Vec<Param> = vec![before.into()];
                params.extend(namespace.map(Param::from));
                params.push(limit.into());
                params
            })
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

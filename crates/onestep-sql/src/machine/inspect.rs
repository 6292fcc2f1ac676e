//! [`ExecutionInspector`]: what a dashboard and the queue-depth metrics read. Every statement
//! reads only, in a transaction of its own.
//!
//! Costs, on a table with a long history: the backlog reads only waiting rows (the claim index);
//! the counts per task and status read every row of the namespace (one pass); the throughput
//! buckets read the rows of the namespace (the list index) keeping those finished in the window;
//! the leases read the running rows (the lease index).

use onestep_core::execution::inspect::{
    ActiveLease, ExecutionInspector, ExecutionSearch, FinishedBucket, TaskBacklog, TaskStatusCount,
    bucket_starts, check_buckets,
};

use super::*;
use crate::decode::required;

/// The terminal statuses the throughput buckets count, in [`FinishedBucket`]'s field order.
const FINISHED: [ExecutionStatus; 4] = [
    ExecutionStatus::Succeeded,
    ExecutionStatus::Failed,
    ExecutionStatus::Cancelled,
    ExecutionStatus::Expired,
];

/// The most leases one [`ExecutionInspector::active_leases`] call returns.
const MAX_ACTIVE_LEASES: u32 = 1000;

impl<D: Dialect> SqlExecutionBackend<D> {
    /// Runs one read-only query in its own transaction.
    async fn read<T>(
        &self,
        sql: &str,
        params: Vec<Param>,
        decode: impl Fn(&crate::dialect::Row<D>) -> Result<T, sqlx::Error>,
    ) -> ExecutionResult<Vec<T>> {
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let rows = D::fetch(&mut tx, sql, params)
            .await
            .and_then(|rows| rows.iter().map(&decode).collect::<Result<Vec<T>, _>>())
            .map_err(db::<D>(op));
        Self::finish(tx, rows, op).await
    }

    /// The backlog of `task_names` in `namespace` at `now`.
    pub(super) async fn backlog_at(
        &self,
        namespace: &str,
        task_names: &[String],
    ) -> ExecutionResult<Vec<TaskBacklog>> {
        reject_nul("namespace", namespace)?;
        if task_names.is_empty() {
            return Ok(Vec::new());
        }
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<Vec<TaskBacklog>> = async {
            let now = self.now(&mut tx, op).await?;
            let tasks = vec!["?"; task_names.len()].join(", ");
            let sql = D::render(&format!(
                "SELECT task_name, COUNT(*), COUNT(CASE WHEN available_at <= ? THEN 1 END), \
                 MIN(CASE WHEN available_at <= ? THEN available_at END) FROM {} \
                 WHERE namespace = ? AND task_name IN ({tasks}) AND status IN ('queued', 'retrying') \
                 GROUP BY task_name",
                D::quote(&self.inner.tables.executions)
            ));
            let mut params: Vec<Param> = vec![now.into(), now.into(), namespace.into()];
            params.extend(task_names.iter().map(|t| Param::from(t.as_str())));
            let rows = D::fetch(&mut tx, &sql, params).await.map_err(db::<D>(op))?;
            rows.iter()
                .map(|row| {
                    Ok(TaskBacklog {
                        task_name: required(D::text(row, 0)?, "task_name")?,
                        depth: count(D::bigint(row, 1)?),
                        ready: count(D::bigint(row, 2)?),
                        oldest_ready_at: D::time(row, 3)?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(db::<D>(op))
        }
        .await;
        Self::finish(tx, out, op).await
    }
}

fn count(n: Option<i64>) -> u64 {
    n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

#[async_trait]
impl<D: Dialect> ExecutionInspector for SqlExecutionBackend<D> {
    async fn task_counts(&self, namespace: &str) -> ExecutionResult<Vec<TaskStatusCount>> {
        reject_nul("namespace", namespace)?;
        let sql = D::render(&format!(
            "SELECT task_name, status, COUNT(*), MIN(created_at) FROM {} WHERE namespace = ? \
             GROUP BY task_name, status ORDER BY task_name, status",
            D::quote(&self.inner.tables.executions)
        ));
        let rows = self
            .read(&sql, vec![namespace.into()], |row| {
                Ok((
                    required(D::text(row, 0)?, "task_name")?,
                    required(D::text(row, 1)?, "status")?,
                    count(D::bigint(row, 2)?),
                    D::time(row, 3)?,
                ))
            })
            .await?;
        rows.into_iter()
            .map(|(task_name, status, count, oldest_created_at)| {
                Ok(TaskStatusCount {
                    status: stored_status(&status)?,
                    task_name,
                    count,
                    oldest_created_at,
                })
            })
            .collect()
    }

    async fn finished_per_bucket(
        &self,
        namespace: &str,
        until: OffsetDateTime,
        count_of: u32,
        width: Duration,
    ) -> ExecutionResult<Vec<FinishedBucket>> {
        reject_nul("namespace", namespace)?;
        check_buckets(count_of, width)?;
        let starts = bucket_starts(until, count_of, width);
        let columns: Vec<&str> =
            vec!["COUNT(CASE WHEN finished_at >= ? AND finished_at < ? THEN 1 END)"; starts.len()];
        let statuses = FINISHED
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = D::render(&format!(
            "SELECT status, {} FROM {} WHERE namespace = ? AND status IN ({statuses}) \
             AND finished_at >= ? AND finished_at < ? GROUP BY status",
            columns.join(", "),
            D::quote(&self.inner.tables.executions)
        ));
        let mut params: Vec<Param> = Vec::with_capacity(starts.len() * 2 + 3);
        for (i, start) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(until);
            params.extend([Param::from(*start), Param::from(end)]);
        }
        params.extend([namespace.into(), starts[0].into(), until.into()]);
        let n = starts.len();
        let rows = self
            .read(&sql, params, |row| {
                let status = required(D::text(row, 0)?, "status")?;
                let counts = (0..n)
                    .map(|i| Ok(count(D::bigint(row, i + 1)?)))
                    .collect::<Result<Vec<u64>, sqlx::Error>>()?;
                Ok((status, counts))
            })
            .await?;
        let mut buckets: Vec<FinishedBucket> = starts
            .into_iter()
            .map(|start| FinishedBucket {
                start,
                succeeded: 0,
                failed: 0,
                cancelled: 0,
                expired: 0,
            })
            .collect();
        for (status, counts) in rows {
            let status = stored_status(&status)?;
            for (bucket, n) in buckets.iter_mut().zip(counts) {
                match status {
                    ExecutionStatus::Succeeded => bucket.succeeded = n,
                    ExecutionStatus::Failed => bucket.failed = n,
                    ExecutionStatus::Cancelled => bucket.cancelled = n,
                    ExecutionStatus::Expired => bucket.expired = n,
                    _ => {}
                }
            }
        }
        Ok(buckets)
    }

    async fn active_leases(
        &self,
        namespace: &str,
        limit: u32,
    ) -> ExecutionResult<Vec<ActiveLease>> {
        reject_nul("namespace", namespace)?;
        let limit = limit.clamp(1, MAX_ACTIVE_LEASES);
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let sql = D::render(&format!(
            "SELECT e.id, e.task_name, e.status, e.worker_id, e.attempts, a.started_at, \
             e.lease_expires_at, a.heartbeat_at FROM {e} e LEFT JOIN {a} a \
             ON a.execution_id = e.id AND a.lease_token = e.lease_token \
             WHERE e.namespace = ? AND e.status IN ('running', 'cancel_requested') \
             ORDER BY a.started_at ASC, e.id ASC LIMIT ?"
        ));
        let rows = self
            .read(
                &sql,
                vec![namespace.into(), i64::from(limit).into()],
                |row| {
                    Ok((
                        required(D::id(row, 0)?, "id")?,
                        required(D::text(row, 1)?, "task_name")?,
                        required(D::text(row, 2)?, "status")?,
                        D::text(row, 3)?,
                        D::int(row, 4)?,
                        D::time(row, 5)?,
                        D::time(row, 6)?,
                        D::time(row, 7)?,
                    ))
                },
            )
            .await?;
        rows.into_iter()
            .map(
                |(id, task, status, worker, attempts, started, expires, beat)| {
                    Ok(ActiveLease {
                        execution_id: id,
                        task_name: task,
                        status: stored_status(&status)?,
                        worker_id: worker,
                        attempt: attempts.and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
                        started_at: started,
                        lease_expires_at: expires,
                        heartbeat_at: beat,
                    })
                },
            )
            .collect()
    }

    async fn attempts_of(&self, namespace: &str, id: Uuid) -> ExecutionResult<Vec<AttemptRow>> {
        if self.get(namespace, id).await?.is_none() {
            return Ok(Vec::new());
        }
        self.attempts(id).await
    }

    async fn search(&self, search: &ExecutionSearch) -> ExecutionResult<ExecutionPage> {
        search.validate()?;
        let after = search
            .query
            .cursor
            .as_deref()
            .map(decode_cursor)
            .transpose()
            .map_err(|e| ExecutionError::invalid("cursor", format!("is rejected: {e}")))?;
        let built = crate::query::search(D::SCHEMA, &self.inner.tables.executions, search, after)?;
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let rows = crate::decode::executions::<D>(&mut tx, &built.sql, built.params)
            .await
            .map_err(db::<D>(op));
        let rows = Self::finish(tx, rows, op).await?;
        page_of(rows, search.query.limit as usize)
    }
}

/// A status read from the table (its CHECK constraint admits only known ones; a table without
/// it reports the stranger).
fn stored_status(text: &str) -> ExecutionResult<ExecutionStatus> {
    text.parse().map_err(|_| {
        ExecutionError::Backend(
            format!("column status holds {text:?}, which is not an execution status").into(),
        )
    })
}

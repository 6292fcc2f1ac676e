//! Progress: the additive nullable column [`PROGRESS_COLUMN`] on the executions table, added
//! when the backend creates tables (`auto_create`), written by handlers' progress reports and
//! read by the API, the CLI and the dashboard. The reference never names it, so it reads and
//! writes its tables as before; a table without it (created by the reference, opened without
//! `auto_create`) keeps no progress and says so once in the log.

use super::*;

/// The progress column's name (prefixed, so that it never meets a column the reference may add;
/// a plain lower-case identifier, written unquoted).
pub const PROGRESS_COLUMN: &str = "onestep_progress";

impl<D: Dialect> SqlExecutionBackend<D> {
    /// The column type progress is stored in.
    fn progress_type() -> &'static str {
        match D::SCHEMA {
            crate::schema::Dialect::Postgres => "JSONB",
            crate::schema::Dialect::MySql | crate::schema::Dialect::MariaDb => "JSON",
            crate::schema::Dialect::Sqlite => "JSON",
        }
    }

    /// Whether the executions table has the progress column (a query that reads it, no row).
    /// A transaction that cannot start (the database is away, the pool's wait timed out) is an
    /// error, not a missing column, so it never switches progress off for the process.
    async fn has_progress_column(
        pool: &sqlx::Pool<D::Db>,
        executions: &str,
    ) -> ExecutionResult<bool> {
        let mut tx = D::begin(pool)
            .await
            .map_err(db::<D>(ConnectorOperation::Open))?;
        // Unquoted: SQLite reads a double-quoted name that is no column as a string literal.
        let sql = format!(
            "SELECT {PROGRESS_COLUMN} FROM {} WHERE 1 = 0",
            D::quote(executions)
        );
        let found = D::fetch(&mut tx, &sql, Vec::new()).await.is_ok();
        let _ = tx.rollback().await;
        Ok(found)
    }

    /// Makes sure of the progress column when the backend creates tables; returns whether the
    /// table has it. Two processes adding it at once: the loser sees it afterwards.
    pub(super) async fn ensure_progress_column(
        &self,
        pool: &sqlx::Pool<D::Db>,
    ) -> ExecutionResult<bool> {
        let executions = &self.inner.tables.executions;
        if Self::has_progress_column(pool, executions).await? {
            return Ok(true);
        }
        if !self.inner.options.auto_create {
            tracing::info!(
                table = %executions,
                "the executions table has no {PROGRESS_COLUMN} column (open once with auto_create \
                 or run `onestep init-db` to add it): progress reports are not kept"
            );
            return Ok(false);
        }
        let alter = format!(
            "ALTER TABLE {} ADD COLUMN {PROGRESS_COLUMN} {}",
            D::quote(executions),
            Self::progress_type()
        );
        let op = ConnectorOperation::Open;
        let mut tx = D::begin(pool).await.map_err(db::<D>(op))?;
        let added = D::execute(&mut tx, &alter, Vec::new()).await;
        match added {
            Ok(_) => tx.commit().await.map_err(db::<D>(op))?,
            Err(err) => {
                let _ = tx.rollback().await;
                if !Self::has_progress_column(pool, executions).await? {
                    return Err(db::<D>(op)(err));
                }
            }
        }
        Ok(true)
    }

    /// Writes an attempt's progress, fenced by its lease (its checks in a `CASE`: see the
    /// `sql` module's docs).
    pub(super) async fn write_progress(
        &self,
        execution_id: Uuid,
        lease_token: Uuid,
        progress: &Value,
    ) -> ExecutionResult<bool> {
        if !self.inner.progress_column.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let sql = D::render(&format!(
            "UPDATE {} SET {PROGRESS_COLUMN} = ? WHERE id = ? AND CASE WHEN lease_token = ? \
             AND status IN ('running', 'cancel_requested') THEN 1 ELSE 0 END = 1",
            D::quote(&self.inner.tables.executions),
        ));
        let op = ConnectorOperation::Send;
        let mut tx = self.begin(op).await?;
        let changed = D::execute(
            &mut tx,
            &sql,
            vec![
                Param::Json(progress.clone()),
                execution_id.into(),
                lease_token.into(),
            ],
        )
        .await
        .map_err(db::<D>(op));
        Ok(Self::finish(tx, changed, op).await? == 1)
    }

    /// The stored progress of execution `id` in `namespace`.
    pub(super) async fn read_progress(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> ExecutionResult<Option<Value>> {
        if namespace.contains('\0') {
            return Ok(None);
        }
        // Opens the backend (which learns whether the column exists) before asking.
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        if !self.inner.progress_column.load(Ordering::Relaxed) {
            let _ = tx.rollback().await;
            return Ok(None);
        }
        let sql = D::render(&format!(
            "SELECT {PROGRESS_COLUMN} FROM {} WHERE namespace = ? AND id = ?",
            D::quote(&self.inner.tables.executions)
        ));
        let rows = D::fetch(&mut tx, &sql, vec![namespace.into(), id.into()])
            .await
            .and_then(|rows| rows.first().map(|row| D::json(row, 0)).transpose())
            .map(Option::flatten)
            .map_err(db::<D>(op));
        Self::finish(tx, rows, op).await
    }
}

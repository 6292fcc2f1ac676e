//! Claiming: the claim statement, in one statement where the dialect has one, else in steps.

use super::claim_row::{ClaimRow, Started};
use super::resume::Scan;
use super::statements::{ClaimAnswer, claim_in_steps_for};
use super::*;

impl<D: Dialect> SqlExecutionBackend<D> {
    /// The claim statement for `task_count` task names, with the dialect's placeholders; for
    /// checking its plan with `EXPLAIN` (it must walk the claim index without a filesort).
    pub fn claim_sql(&self, task_count: usize) -> String {
        let column = self.inner.claim_column.get();
        if task_count == 1 {
            return match column {
                Some(c) => c.claim_one_task.clone(),
                None => self.inner.statements.claim_one_task.clone(),
            };
        }
        let statement = {
            let marks = vec!["?"; task_count].join(", ");
            let t = &self.inner.tables;
            D::render(&sql::render(
                &sql::CLAIM.replace("{tasks}", &format!("IN ({marks})")),
                &D::quote(&t.executions),
                &D::quote(&t.attempts),
                D::FOR_UPDATE,
                D::SKIP_LOCKED,
            ))
        };
        match column {
            Some(c) => c.claim(&statement),
            None => statement,
        }
    }

    /// The claim in steps for `task_count` task names resuming after a claim key (see the
    /// `resume` module), with the dialect's placeholders: the claim's parameters with the key's
    /// five after the first time bound. `None` where claims do not resume (every server but
    /// MariaDB, and its tables without the claim column's index). For checking its plan
    /// with `EXPLAIN`: it must read the claim index as a range from the key.
    pub fn resumed_claim_sql(&self, task_count: usize) -> Option<String> {
        let column = self.inner.claim_column.get()?;
        match task_count {
            1 => column.claim_one_task_resumed.clone(),
            _ => column.resumed(&self.claim_sql(task_count)),
        }
    }

    /// The dialect's one-statement claim for `task_count` task names (`None` where the dialect
    /// claims in steps), with the dialect's placeholders; for checking its plan with `EXPLAIN`.
    pub fn claim_in_one_statement_sql(&self, task_count: usize) -> Option<String> {
        self.one_statement_claim_sql(task_count, ClaimAnswer::Execution)
    }

    /// [`Self::claim_in_one_statement_sql`] answering only the columns a worker runs each
    /// execution with (id, namespace, task, payload, metadata, attempts, `available_at`, the
    /// lease token and the claim's time): the statement `claim_to_run` sends.
    pub fn claim_to_run_in_one_statement_sql(&self, task_count: usize) -> Option<String> {
        self.one_statement_claim_sql(task_count, ClaimAnswer::ToRun)
    }

    fn one_statement_claim_sql(&self, task_count: usize, answer: ClaimAnswer) -> Option<String> {
        let template = D::BATCH_PATHS?.claim;
        if task_count == 1 {
            let statements = &self.inner.statements;
            return match answer {
                ClaimAnswer::Execution => statements.claim_one_task_in_one_statement.clone(),
                ClaimAnswer::ToRun => statements.claim_one_task_to_run_in_one_statement.clone(),
            };
        }
        let marks = vec!["?"; task_count].join(", ");
        let t = &self.inner.tables;
        Some(D::render(&sql::render(
            &one_statement_claim(template, &format!("IN ({marks})"), answer),
            &D::quote(&t.executions),
            &D::quote(&t.attempts),
            D::FOR_UPDATE,
            D::SKIP_LOCKED,
        )))
    }

    /// A claim, its arguments checked first, answering each claimed row as `R` does (`claim`
    /// and `claim_to_run`); a transient failure is tried again.
    pub(super) async fn claim_checked<R: ClaimRow>(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<R::Claimed>> {
        reject_nul("namespace", namespace)?;
        validate_claim(task_names, limit, lease_duration, worker_id)?;
        retry_transient(|| {
            self.claim_once::<R>(namespace, task_names, limit, lease_duration, worker_id)
        })
        .await
    }

    /// One claim transaction: maintenance when it is due, then the batch, in one statement
    /// where the dialect has one, else in steps.
    pub(super) async fn claim_once<R: ClaimRow>(
        &self,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<R::Claimed>> {
        let worker_id = worker_id.trim();
        let maintain = self.maintenance_due();
        if let Some(sql) = self.one_statement_claim_sql(task_names.len(), R::ANSWER) {
            let claimed = self
                .claim_in_one_statement::<R>(
                    &sql,
                    maintain,
                    namespace,
                    task_names,
                    limit,
                    lease_duration,
                    worker_id,
                )
                .await?;
            if let Some(leases) = claimed {
                return Ok(leases);
            }
            // A claimed row's stored values do not decode. That transaction rolled back (with
            // its maintenance); the claim in steps runs both again, fails that row without
            // starting it and claims the rest.
        }
        self.claim_in_steps::<R>(
            maintain,
            namespace,
            task_names,
            limit,
            lease_duration,
            worker_id,
        )
        .await
    }

    /// [`Self::claim_once`] with the dialect's one-statement claim `sql`. `None`: a claimed row
    /// does not decode, and the transaction was rolled back.
    #[allow(clippy::too_many_arguments)] // the claim's arguments, plus the statement and maintenance
    pub(super) async fn claim_in_one_statement<R: ClaimRow>(
        &self,
        sql: &str,
        maintain: bool,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Option<Vec<R::Claimed>>> {
        let op = ConnectorOperation::Fetch;
        let mut tx = self.begin(op).await?;
        let mut swept = super::maintain::Swept::default();
        let out: ExecutionResult<_> = async {
            // The statement reads the transaction's time itself (one round trip fewer); `now` is
            // bound only when it is known anyway: an injected clock, or read for maintenance.
            let now = if maintain || self.inner.options.clock.is_some() {
                let now = self.now(&mut tx, op).await?;
                if maintain {
                    swept = self.maintain(&mut tx, now).await?;
                }
                Some(now)
            } else {
                None
            };
            let limit = limit.min(MAX_CLAIM_ROWS);
            let fresh: Vec<(Uuid, Uuid)> =
                (0..limit).map(|_| (Uuid::new_v4(), new_row_id())).collect();
            let list = |pick: fn(&(Uuid, Uuid)) -> Uuid| {
                fresh
                    .iter()
                    .map(|f| pick(f).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let micros = i64::try_from(lease_duration.as_micros()).unwrap_or(i64::MAX);
            let mut params: Vec<Param> = vec![namespace.into()];
            params.extend(task_names.iter().map(|t| Param::from(t.trim())));
            params.extend([
                now.into(),
                now.into(),
                i64::try_from(limit).unwrap_or(1000).into(),
                list(|f| f.0).into(),
                list(|f| f.1).into(),
                now.map(|now| later(now, lease_duration)).into(),
                now.into(),
                micros.into(),
                worker_id.into(),
                now.into(),
                now.into(),
            ]);
            let rows = crate::decode::rows::<D, R>(&mut tx, sql, params, R::decode::<D>)
                .await
                .map_err(db::<D>(op))?;
            let attempt_ids: std::collections::HashMap<Uuid, Uuid> = fresh.into_iter().collect();
            let mut leases = Vec::with_capacity(rows.len());
            for row in rows {
                let Some((lease_token, attempt_id)) = row
                    .lease_token()
                    .and_then(|t| attempt_ids.get(&t).map(|a| (t, *a)))
                else {
                    return Err(ExecutionError::Backend(
                        format!(
                            "claim returned execution {} without a lease of its own",
                            row.id()
                        )
                        .into(),
                    ));
                };
                // `updated_at` is the transaction's time when `now` was not bound; the lease ends
                // exactly where the claim in steps puts it.
                let lease_expires_at = later(now.unwrap_or(row.claimed_at()), lease_duration);
                let Ok(claimed) = row.into_claimed(attempt_id, lease_token, lease_expires_at)
                else {
                    return Ok(None);
                };
                leases.push(claimed);
            }
            Ok(Some(leases))
        }
        .await;
        match out {
            Ok(None) => {
                if let Err(rollback) = tx.rollback().await {
                    tracing::debug!(error = %rollback, "rollback of a claim with an undecodable row failed");
                }
                Ok(None)
            }
            out => {
                let out = Self::finish(tx, out, op).await;
                if out.is_ok() {
                    swept.record();
                }
                out
            }
        }
    }

    /// [`Self::claim_once`] in steps: the locking select, one `UPDATE` and one multi-row `INSERT`.
    pub(super) async fn claim_in_steps<R: ClaimRow>(
        &self,
        maintain: bool,
        namespace: &str,
        task_names: &[String],
        limit: usize,
        lease_duration: Duration,
        worker_id: &str,
    ) -> ExecutionResult<Vec<R::Claimed>> {
        let op = ConnectorOperation::Fetch;
        let worker_id = worker_id.to_string();
        let queue = super::resume::queue_of(namespace, task_names);
        // Where the table lets claims resume (see the `resume` module).
        let resumed_claim = self.resumed_claim_sql(task_names.len());
        // How the claim read the index, whether it came back full and its last row's key:
        // recorded once the claim committed.
        let mut outcome = None;
        let mut tx = self.begin(op).await?;
        let mut swept = super::maintain::Swept::default();
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            if maintain {
                swept = self.maintain(&mut tx, now).await?;
            }
            let limit = limit.min(MAX_CLAIM_ROWS);
            let mut scan = match resumed_claim {
                Some(_) => self.inner.claim_resumes.scan(&queue),
                None => Scan::FromFront,
            };
            let select = |scan: Scan| {
                let mut params: Vec<Param> = vec![namespace.into()];
                params.extend(task_names.iter().map(|t| Param::from(t.trim())));
                params.push(now.into());
                let claim = match (scan, &resumed_claim) {
                    (Scan::After(key), Some(resumed)) => {
                        params.extend(key.params());
                        resumed.clone()
                    }
                    _ => self.claim_sql(task_names.len()),
                };
                params.extend([now.into(), i64::try_from(limit).unwrap_or(1000).into()]);
                (claim_in_steps_for(claim, R::ANSWER), params)
            };
            let (claim, params) = select(scan);
            let mut rows = crate::decode::rows::<D, R>(&mut tx, &claim, params, R::decode::<D>)
                .await
                .map_err(db::<D>(op))?;
            if rows.len() < limit && scan != Scan::FromFront {
                // Short after the key: rows behind it (a release, a submit that committed late)
                // are read too, from the front, so no claim answers fewer rows than are ready.
                // The rows read after the key come back again (this transaction holds them).
                scan = Scan::FromFront;
                let (claim, params) = select(scan);
                rows = crate::decode::rows::<D, R>(&mut tx, &claim, params, R::decode::<D>)
                    .await
                    .map_err(db::<D>(op))?;
            }
            let full = rows.len() >= limit;
            let last = rows.last().map(R::claim_key);
            outcome = Some((scan, full, last));
            // Each row is started in memory and decoded once, as the execution it becomes
            // (decoding reads none of what starting changes). A row whose stored values do not
            // decode would fail every claim of its task forever: fail it (it never started) and
            // claim the rest.
            let lease_expires_at = later(now, lease_duration);
            let mut started = Vec::with_capacity(rows.len());
            let mut leases = Vec::with_capacity(rows.len());
            let mut poisoned = Vec::new();
            for row in rows {
                let id = row.id();
                let start = Started {
                    id,
                    attempt_no: row.attempts().saturating_add(1),
                    attempt_id: new_row_id(),
                    lease_token: Uuid::new_v4(),
                };
                match row.start(&start, lease_expires_at, &worker_id, now) {
                    Ok(claimed) => {
                        started.push(start);
                        leases.push(claimed);
                    }
                    Err(err) => poisoned.push((id, err.to_string())),
                }
            }
            for (id, why) in poisoned {
                tracing::error!(execution_id = %id, error = %why, "failing an execution whose stored values cannot be decoded");
                let mut detail = onestep_core::execution::ExecutionErrorDetail::new("error", "ExecutionEncodingError")?;
                detail.stage = Some("delivery_action".into());
                let fail = D::render(&format!(
                    "UPDATE {} SET status = 'failed', finished_at = ?, updated_at = ?, error = ?, \
                     version = version + 1 WHERE id = ?",
                    D::quote(&self.inner.tables.executions)
                ));
                D::execute(&mut tx, &fail, vec![now.into(), now.into(), Param::Json(detail.to_json()), id.into()])
                    .await
                    .map_err(db::<D>(op))?;
            }
            if leases.is_empty() {
                return Ok(Vec::new());
            }
            // The rows are locked (FOR UPDATE SKIP LOCKED, or SQLite's write transaction), so
            // the whole batch starts in two statements: one UPDATE and one INSERT.
            let (start, start_params, insert, insert_params) = match self.json_batches() {
                Some(json) => self.start_statements_json(json, &started, lease_expires_at, &worker_id, now),
                None => self.start_statements(&started, lease_expires_at, &worker_id, now),
            };
            let updated = D::execute(&mut tx, &start, start_params).await.map_err(db::<D>(op))?;
            if updated != started.len() as u64 {
                return Err(ExecutionError::Backend(
                    format!("claim updated {updated} of {} locked rows", started.len()).into(),
                ));
            }
            D::execute(&mut tx, &insert, insert_params).await.map_err(db::<D>(op))?;
            Ok(leases)
        }
        .await;
        let out = Self::finish(tx, out, op).await;
        if out.is_ok() {
            swept.record();
            if let (Some(_), Some((scan, full, last))) = (&resumed_claim, outcome) {
                self.inner.claim_resumes.record(&queue, scan, full, last);
            }
        }
        out
    }

    /// The statements that start a claimed batch and insert its attempts, with their
    /// parameters: an `UPDATE … CASE` and a multi-row `INSERT`, which grow with the batch.
    fn start_statements(
        &self,
        leases: &[Started],
        lease_expires_at: OffsetDateTime,
        worker_id: &str,
        now: OffsetDateTime,
    ) -> (String, Vec<Param>, String, Vec<Param>) {
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let n = leases.len();
        let marks = vec!["?"; n].join(", ");
        let cases = vec!["WHEN ? THEN ?"; n].join(" ");
        let start = D::render(&format!(
            "UPDATE {e} SET status = 'running', attempts = attempts + 1, lease_token = CASE id {cases} END, \
             lease_expires_at = ?, worker_id = ?, started_at = COALESCE(started_at, ?), updated_at = ?, \
             version = version + 1 WHERE id IN ({marks})"
        ));
        let insert = D::render(&format!(
            "INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, error, started_at, \
             heartbeat_at, finished_at) VALUES {}",
            vec!["(?, ?, ?, ?, ?, 'running', NULL, ?, ?, NULL)"; n].join(", ")
        ));
        let mut start_params: Vec<Param> = Vec::with_capacity(n * 3 + 4);
        let mut insert_params: Vec<Param> = Vec::with_capacity(n * 7);
        for lease in leases {
            start_params.extend([lease.id.into(), lease.lease_token.into()]);
            insert_params.extend([
                lease.attempt_id.into(),
                lease.id.into(),
                lease.attempt_no.into(),
                lease.lease_token.into(),
                worker_id.into(),
                now.into(),
                now.into(),
            ]);
        }
        start_params.extend([
            lease_expires_at.into(),
            worker_id.into(),
            now.into(),
            now.into(),
        ]);
        start_params.extend(leases.iter().map(|l| Param::from(l.id)));
        (start, start_params, insert, insert_params)
    }

    /// [`Self::start_statements`] as MariaDB's statements of one shape, the batch as JSON.
    fn start_statements_json(
        &self,
        json: &super::json_batch::JsonStatements,
        leases: &[Started],
        lease_expires_at: OffsetDateTime,
        worker_id: &str,
        now: OffsetDateTime,
    ) -> (String, Vec<Param>, String, Vec<Param>) {
        use super::json_batch::batch;
        let started = batch(leases, |f, l| {
            f.id("i", l.id).id("t", l.lease_token);
        });
        let attempts = batch(leases, |f, l| {
            f.id("a", l.attempt_id)
                .id("i", l.id)
                .int("n", i64::from(l.attempt_no))
                .id("t", l.lease_token);
        });
        (
            json.start.clone(),
            vec![
                started.into(),
                lease_expires_at.into(),
                worker_id.into(),
                now.into(),
                now.into(),
            ],
            json.attempts.clone(),
            vec![worker_id.into(), now.into(), now.into(), attempts.into()],
        )
    }
}

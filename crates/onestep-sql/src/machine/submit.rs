//! Submitting: one request, or a batch in one transaction, and the wake-up of idle workers.

use super::*;

impl<D: Dialect> SqlExecutionBackend<D> {
    pub(super) fn insert_params(row: &ExecutionRow) -> Vec<Param> {
        vec![
            row.id.into(),
            row.namespace.clone().into(),
            row.task_name.clone().into(),
            row.status.as_str().into(),
            Param::Json(row.payload.clone()),
            Param::Json(row.metadata.clone()),
            Param::OptJson(row.result.clone()),
            Param::OptJson(row.error.clone()),
            row.idempotency_key.clone().into(),
            row.submission_digest.clone().into(),
            row.attempts.into(),
            row.available_at.into(),
            row.lease_token.into(),
            row.lease_expires_at.into(),
            row.worker_id.clone().into(),
            row.cancel_reason.clone().into(),
            row.cancel_requested_at.into(),
            row.expires_at.into(),
            row.created_at.into(),
            row.updated_at.into(),
            row.started_at.into(),
            row.finished_at.into(),
            row.version.into(),
        ]
    }

    /// Submits one request in its own transaction, run again after transient failures: `submit`
    /// without a group, and how a group's members are written when they are not written
    /// together.
    pub(super) async fn submit_alone(
        &self,
        request: &ExecutionRequest,
    ) -> ExecutionResult<Execution> {
        retry_transient(|| self.submit_one(request.clone())).await
    }

    /// Submits each request alone ([`Self::submit_alone`]), in order.
    pub(super) async fn submit_one_by_one(
        &self,
        requests: &[ExecutionRequest],
    ) -> Vec<ExecutionResult<Execution>> {
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            out.push(self.submit_alone(r).await);
        }
        out
    }

    /// Submits two or more requests in one transaction (`submit_many`, and a group of
    /// submits), falling back to one by one when a concurrent submit took one of their keys.
    pub(super) async fn submit_together(
        &self,
        requests: &[ExecutionRequest],
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        // Where the dialect's batch insert skips taken keys, first try the batch as all new
        // (no look-up); a batch that turns out to repeat a stored key goes again with one. After
        // a batch whose look-up found stored keys (a client resubmitting), batches read their
        // keys first until one finds none, so retries do not pay for an insert and a rollback.
        let optimistic = self.inner.statements.insert_many.is_some()
            && !self.inner.batch_keys_were_stored.load(Ordering::Relaxed);
        let mut out = retry_transient(|| self.submit_batch(requests, !optimistic)).await;
        if optimistic && matches!(out, Ok(None)) {
            out = retry_transient(|| self.submit_batch(requests, true)).await;
        }
        // A concurrent submit took one of the keys between our check and the insert (a skipped
        // row, or a unique violation): the transaction rolled back, so submitting one by one
        // resolves each key on its own.
        let raced = match out {
            Ok(Some(out)) => {
                self.wake_local();
                return Ok(out);
            }
            Ok(None) => None,
            Err(err) if is_unique_violation(&err) => Some(err),
            // Any other failure (including a lost COMMIT reply) leaves the outcome unknown:
            // report it rather than submitting again, which could duplicate keyless requests.
            Err(err) => return Err(err),
        };
        tracing::debug!(error = ?raced, "batched submit raced on a key; submitting one by one");
        Ok(self.submit_one_by_one(requests).await)
    }

    pub(super) async fn submit_one(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
        let encoded = encode_submission(&request, &self.inner.options.limits)?;
        // An injected clock decides the row's times, so only the database's clock allows the
        // statement that reads it itself.
        if let (Some(sql), Some(paths), None) = (
            &self.inner.statements.insert_one,
            D::BATCH_PATHS,
            &self.inner.options.clock,
        ) {
            return self
                .submit_in_one_statement(&request, encoded, sql, paths.run_insert_one)
                .await;
        }
        let op = ConnectorOperation::Send;
        let (row, inserted) = if D::INSERT_ON_ITS_OWN {
            let row = ExecutionRow::queued(&request, encoded, new_row_id(), self.process_now());
            let pool = self.pool().await?;
            let params = Self::insert_params(&row);
            let mut conn = self.lend(&pool, op).await?;
            let inserted = D::execute_on(conn.conn(), &self.inner.statements.insert, params).await;
            // A taken key is an answer, not a broken connection: keep it for the next submit.
            if inserted.as_ref().map_or_else(is_unique, |_| true) {
                conn.keep();
            }
            (row, inserted.map(|_| ()))
        } else {
            let mut tx = self.begin(op).await?;
            let now = self.now(&mut tx, op).await?;
            let row = ExecutionRow::queued(&request, encoded, new_row_id(), now);
            let params = Self::insert_params(&row);
            let inserted = match D::execute(&mut tx, &self.inner.statements.insert, params).await {
                Ok(_) => {
                    let signalled = self.signal_work(&mut tx).await;
                    Self::finish(tx, signalled, op).await?;
                    Ok(())
                }
                Err(err) => {
                    let _ = tx.rollback().await;
                    Err(err)
                }
            };
            (row, inserted)
        };
        match inserted {
            Ok(()) => {
                self.wake_local();
                row.to_execution()
            }
            Err(err) => {
                let unique = is_unique(&err);
                let Some(key) = request.idempotency_key.as_ref().filter(|_| unique) else {
                    return Err(db::<D>(op)(err));
                };
                match self.repeated_submit(&request, key, &row).await? {
                    Some(existing) => Ok(existing),
                    None => Err(db::<D>(op)(err)),
                }
            }
        }
    }

    /// A connection for a one-statement submit ([`SqlConnector::lend`]); keep it with
    /// [`Lent::keep`](crate::solo::Lent::keep) once the statement succeeded.
    async fn lend<'a>(
        &'a self,
        pool: &sqlx::Pool<D::Db>,
        op: ConnectorOperation,
    ) -> ExecutionResult<crate::solo::Lent<'a, D::Db>> {
        self.inner.connector.lend(pool).await.map_err(db::<D>(op))
    }

    /// Submits one request with the dialect's one-statement insert (`BatchPaths::insert_one`):
    /// one round trip that reads the database's time, inserts, notifies and commits. A taken
    /// key is answered from the stored row; if that row is gone by the time it is read (pruned
    /// or deleted in between), the insert runs again.
    async fn submit_in_one_statement(
        &self,
        request: &ExecutionRequest,
        encoded: EncodedSubmission,
        sql: &str,
        insert_one: crate::dialect::InsertOne<D>,
    ) -> ExecutionResult<Execution> {
        const TRIES: usize = 3;
        let op = ConnectorOperation::Send;
        let pool = self.pool().await?;
        // The statement sets the times from the database's clock; a row built at the epoch
        // carries only the delay (whole microseconds, as the columns keep it).
        let mut row =
            ExecutionRow::queued(request, encoded, new_row_id(), OffsetDateTime::UNIX_EPOCH);
        let delay_us = i64::try_from((row.available_at - row.created_at).whole_microseconds())
            .unwrap_or(i64::MAX);
        for _ in 0..TRIES {
            let channel = self.notify_due().then_some(self.inner.channel.as_str());
            let mut conn = self.lend(&pool, op).await?;
            let stored = insert_one(conn.conn(), sql, &row, delay_us, channel)
                .await
                .map_err(db::<D>(op))?;
            conn.keep();
            if let Some(stored) = stored {
                self.wake_local();
                return stored.to_execution();
            }
            if let Some(key) = &request.idempotency_key
                && let Some(existing) = self.repeated_submit(request, key, &row).await?
            {
                return Ok(existing);
            }
            // The id was taken (a UUIDv7 collision), or the key's row was deleted since.
            row.id = new_row_id();
        }
        Err(ExecutionError::Conflict(format!(
            "submit of task {:?} in namespace {:?} found its idempotency key or id taken, \
             and the row holding it gone, {TRIES} times in a row; submit again",
            request.task_name, request.namespace
        )))
    }

    /// The stored execution a repeated submit of `key` answers with: `None` when no row holds
    /// the key (any more), a conflict when it was stored for a different submission.
    async fn repeated_submit(
        &self,
        request: &ExecutionRequest,
        key: &str,
        row: &ExecutionRow,
    ) -> ExecutionResult<Option<Execution>> {
        let op = ConnectorOperation::Send;
        let mut tx = self.begin(op).await?;
        let existing = Self::one(
            &mut tx,
            &self.inner.statements.get_by_key,
            vec![
                request.namespace.clone().into(),
                request.task_name.clone().into(),
                key.to_string().into(),
            ],
            op,
        )
        .await?;
        Self::commit(tx, op).await?;
        let Some(existing) = existing else {
            return Ok(None);
        };
        if existing.submission_digest != row.submission_digest {
            return Err(ExecutionError::Conflict(
                "idempotency key was already used with a different submission".into(),
            ));
        }
        existing.to_execution().map(Some)
    }

    /// Wakes this process's idle workers; called after the commit that made work claimable.
    pub(super) fn wake_local(&self) {
        self.inner.work.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether a submit now should notify other processes (at most every 5 ms per backend);
    /// `true` also counts as the notification sent.
    fn notify_due(&self) -> bool {
        let mut last = self
            .inner
            .last_notify
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= Duration::from_millis(5));
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }

    /// Wakes other processes' idle workers through NOTIFY (at most every 5 ms per backend,
    /// inside the caller's transaction so it is delivered at commit).
    pub(super) async fn signal_work(&self, tx: &mut Tx<D>) -> ExecutionResult<()> {
        let Some(notify) = D::notify_sql() else {
            return Ok(());
        };
        if self.notify_due() {
            D::execute(tx, notify, vec![self.inner.channel.clone().into()])
                .await
                .map_err(db::<D>(ConnectorOperation::Send))?;
        }
        Ok(())
    }

    /// Submits a batch in one transaction: existing rows for the batch's keys are read once,
    /// repeated submissions are answered from them (or rejected as conflicts), and every new row
    /// goes in with multi-row INSERTs (or the dialect's [`BatchPaths::insert_many`](crate::dialect::BatchPaths::insert_many)). Fails as a
    /// whole on a unique violation (a concurrent submit of the same key); the caller then falls
    /// back to one-by-one submits.
    ///
    /// With `look_up_keys` false (only where the dialect has `BatchPaths::insert_many`) the keys
    /// are not read first: every request is taken for new, which saves the look-up on a bulk
    /// import of new keys. `Ok(None)` (rolled back) when a key was taken after all (the insert
    /// failed on it, or skipped a row).
    pub(super) async fn submit_batch(
        &self,
        requests: &[ExecutionRequest],
        look_up_keys: bool,
    ) -> ExecutionResult<Option<Vec<ExecutionResult<Execution>>>> {
        const CHUNK: usize = 500;
        let op = ConnectorOperation::Send;
        let e = D::quote(&self.inner.tables.executions);
        // Encoding validates each request first, so an invalid one (a U+0000 in its key, say)
        // fails on its own and never reaches a statement.
        let encoded: Vec<ExecutionResult<EncodedSubmission>> = requests
            .iter()
            .map(|r| encode_submission(r, &self.inner.options.limits))
            .collect();
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let mut results: Vec<Option<ExecutionResult<Execution>>> =
                Vec::with_capacity(requests.len());
            let mut fresh: Vec<(usize, ExecutionRow)> = Vec::new();
            // Keys seen earlier in this batch, so a key repeated inside the batch behaves as two
            // sequential submits.
            let mut batch_keys: std::collections::HashMap<(String, String, String), usize> =
                std::collections::HashMap::new();
            // Existing rows for the batch's keys, read per (namespace, task) with a plain
            // `idempotency_key IN (…)` list: every dialect plans that in about a millisecond,
            // where 500 OR-ed (namespace, task, key) triples take PostgreSQL ~60 ms to plan.
            let mut scopes: std::collections::BTreeMap<(&str, &str), Vec<&str>> =
                std::collections::BTreeMap::new();
            for (r, _) in requests.iter().zip(&encoded).filter(|(_, e)| e.is_ok()) {
                if let Some(key) = &r.idempotency_key {
                    scopes
                        .entry((r.namespace.as_str(), r.task_name.as_str()))
                        .or_default()
                        .push(key.as_str());
                }
            }
            let mut existing: Vec<ExecutionRow> = Vec::new();
            if !look_up_keys {
                scopes.clear();
            }
            for ((namespace, task_name), keys) in &scopes {
                for chunk in keys.chunks(CHUNK) {
                    if let Some(by_keys) = &self.inner.statements.rows_by_keys {
                        let params = vec![
                            Param::from(Value::from(chunk.to_vec()).to_string()),
                            Param::from(namespace.to_string()),
                            Param::from(task_name.to_string()),
                        ];
                        existing.extend(
                            crate::decode::executions::<D>(&mut tx, by_keys, params)
                                .await
                                .map_err(db::<D>(op))?,
                        );
                        continue;
                    }
                    let marks = vec!["?"; chunk.len()].join(", ");
                    let sql = D::render(&format!(
                        "SELECT {} FROM {e} WHERE namespace = ? AND task_name = ? \
                         AND idempotency_key IN ({marks})",
                        sql::EXECUTION_COLUMNS
                    ));
                    let mut params = Vec::with_capacity(chunk.len() + 2);
                    params.push(Param::from(namespace.to_string()));
                    params.push(Param::from(task_name.to_string()));
                    params.extend(chunk.iter().map(|k| Param::from(k.to_string())));
                    existing.extend(
                        crate::decode::executions::<D>(&mut tx, &sql, params)
                            .await
                            .map_err(db::<D>(op))?,
                    );
                }
            }
            if look_up_keys {
                self.inner
                    .batch_keys_were_stored
                    .store(!existing.is_empty(), Ordering::Relaxed);
            }
            let existing: std::collections::HashMap<(&str, &str, &str), &ExecutionRow> = existing
                .iter()
                .filter_map(|r| {
                    let key = r.idempotency_key.as_deref()?;
                    Some(((r.namespace.as_str(), r.task_name.as_str(), key), r))
                })
                .collect();
            for (index, (request, encoded)) in requests.iter().zip(encoded).enumerate() {
                let encoded = match encoded {
                    Ok(encoded) => encoded,
                    Err(err) => {
                        results.push(Some(Err(err)));
                        continue;
                    }
                };
                if let Some(key) = &request.idempotency_key {
                    let scope = (
                        request.namespace.clone(),
                        request.task_name.clone(),
                        key.clone(),
                    );
                    let prior = existing
                        .get(&(scope.0.as_str(), scope.1.as_str(), key.as_str()))
                        .map(|r| (*r).clone())
                        .or_else(|| {
                            batch_keys
                                .get(&scope)
                                .and_then(|i| fresh.iter().find(|(j, _)| j == i))
                                .map(|(_, r)| r.clone())
                        });
                    if let Some(prior) = prior {
                        results.push(Some(if prior.submission_digest == encoded.digest {
                            prior.to_execution()
                        } else {
                            Err(ExecutionError::Conflict(
                                "idempotency key was already used with a different submission"
                                    .into(),
                            ))
                        }));
                        continue;
                    }
                    batch_keys.insert(scope, index);
                }
                let row = ExecutionRow::queued(request, encoded, new_row_id(), now);
                fresh.push((index, row));
                results.push(None);
            }
            // Rows go in ordered by key, so concurrent batches with overlapping keys take the
            // key index's entries in one order and wait on each other instead of deadlocking.
            let mut ordered: Vec<&(usize, ExecutionRow)> = fresh.iter().collect();
            ordered.sort_by(|(_, a), (_, b)| {
                (&a.namespace, &a.task_name, &a.idempotency_key).cmp(&(
                    &b.namespace,
                    &b.task_name,
                    &b.idempotency_key,
                ))
            });
            for chunk in ordered.chunks(CHUNK) {
                if let (Some(sql), Some(paths)) =
                    (&self.inner.statements.insert_many, D::BATCH_PATHS)
                {
                    let rows: Vec<&ExecutionRow> = chunk.iter().map(|(_, row)| row).collect();
                    let inserted = match (paths.run_insert_many)(&mut tx, sql, &rows).await {
                        Ok(inserted) => inserted,
                        // A stored key, found without the look-up: go again with it.
                        Err(err) if !look_up_keys && is_unique(&err) => return Ok(None),
                        Err(err) => return Err(db::<D>(op)(err)),
                    };
                    if inserted != chunk.len() as u64 {
                        return Ok(None);
                    }
                    continue;
                }
                let values = vec![
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
                    chunk.len()
                ]
                .join(", ");
                let insert = D::render(&format!(
                    "INSERT INTO {e} ({}) VALUES {values}",
                    sql::EXECUTION_COLUMNS
                ));
                let params: Vec<Param> = chunk
                    .iter()
                    .flat_map(|(_, row)| Self::insert_params(row))
                    .collect();
                D::execute(&mut tx, &insert, params)
                    .await
                    .map_err(db::<D>(op))?;
            }
            if !fresh.is_empty() {
                self.signal_work(&mut tx).await?;
            }
            let mut fresh = fresh.into_iter().peekable();
            let mut out = Vec::with_capacity(requests.len());
            for (index, result) in results.into_iter().enumerate() {
                match result {
                    Some(r) => out.push(r),
                    None => match fresh.next_if(|(i, _)| *i == index) {
                        Some((_, row)) => out.push(row.to_execution()),
                        None => {
                            return Err(ExecutionError::Backend(
                                "batched submit lost track of a row".into(),
                            ));
                        }
                    },
                }
            }
            Ok(Some(out))
        }
        .await;
        if let Ok(None) = out {
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %rollback, "rollback after a skipped batch insert failed");
            }
            return Ok(None);
        }
        Self::finish(tx, out, op).await
    }
}

//! Completing an attempt: one completion, or a batch written with a fixed number of statements
//! (one on PostgreSQL, one per table elsewhere).

use super::json_batch;
use super::lease::LockedBatch;
use super::*;
use crate::dialect::RunningCompletion;

/// The longest retry delay the one-statement completion adds to its time (a century, in
/// microseconds); longer ones take the locked path.
const MAX_RETRY_DELAY_US: i64 = 100 * 366 * 24 * 3600 * 1_000_000;

/// What a batched completion answers each completion with: the whole execution
/// (`complete_many`) or only the status it was left in (`complete_many_statuses`, a worker's).
pub(super) trait Answer: Sized + Send {
    /// Whether the one-statement completion returns only ids and statuses
    /// (`BatchPaths::complete_running_status`) instead of whole rows.
    const STATUS_ONLY: bool;
    /// The answer for an execution a completion left as `execution`.
    fn of(execution: Execution) -> Self;
    /// The answer for what the one-statement completion returned of a row it wrote.
    fn written(row: Written) -> ExecutionResult<Self>;
    /// The status the completion left the execution in.
    fn status(&self) -> ExecutionStatus;
}

/// What the one-statement completion returned of one row it wrote.
pub(super) enum Written {
    /// The whole row, after the write.
    Row(Box<ExecutionRow>),
    /// Its new status.
    Status(ExecutionStatus),
}

impl Answer for Execution {
    const STATUS_ONLY: bool = false;

    fn of(execution: Execution) -> Self {
        execution
    }

    fn written(row: Written) -> ExecutionResult<Self> {
        match row {
            Written::Row(row) => row.to_execution(),
            Written::Status(_) => Err(ExecutionError::Backend(
                "a batched completion read back a status where it needed the row".into(),
            )),
        }
    }

    fn status(&self) -> ExecutionStatus {
        self.status
    }
}

impl Answer for ExecutionStatus {
    const STATUS_ONLY: bool = true;

    fn of(execution: Execution) -> Self {
        execution.status
    }

    fn written(row: Written) -> ExecutionResult<Self> {
        Ok(match row {
            Written::Row(row) => row.status,
            Written::Status(status) => status,
        })
    }

    fn status(&self) -> ExecutionStatus {
        *self
    }
}

/// Fails unless a batched completion's statement `verb` all `n` of its `what` (`done` rows).
fn all_written(verb: &str, done: u64, what: &str, n: usize) -> ExecutionResult<()> {
    if done == n as u64 {
        return Ok(());
    }
    Err(ExecutionError::Backend(
        format!("batched completion {verb} {done} of {n} {what}").into(),
    ))
}

/// Where [`SqlExecutionBackend::complete_running`] writes.
enum RunningPath<'s, D: Dialect> {
    /// The dialect's one statement that commits by itself (PostgreSQL).
    OneStatement(&'s str, crate::dialect::BatchPaths<D>),
    /// MariaDB's two fenced writes in one transaction.
    Fenced(&'s json_batch::JsonStatements),
}

/// Completes one after another with `complete`, each answered on its own as `A`.
async fn complete_each<D: Dialect, A: Answer>(
    backend: &SqlExecutionBackend<D>,
    completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
) -> Vec<ExecutionResult<A>> {
    onestep_core::execution::backend::complete_each(backend, completions)
        .await
        .into_iter()
        .map(|answer| answer.map(A::of))
        .collect()
}

/// A row running under a lease that ends after the epoch: what a completion is decided against
/// before the one-statement completion checks, row by row, that the execution is so.
fn running_at_epoch() -> ExecutionRow {
    let epoch = OffsetDateTime::UNIX_EPOCH;
    ExecutionRow {
        id: Uuid::nil(),
        namespace: String::new(),
        task_name: String::new(),
        status: ExecutionStatus::Running,
        payload: Value::Null,
        metadata: Value::Null,
        result: None,
        error: None,
        idempotency_key: None,
        submission_digest: None,
        attempts: 1,
        available_at: epoch,
        lease_token: None,
        lease_expires_at: Some(epoch + time::Duration::DAY),
        worker_id: None,
        cancel_reason: None,
        cancel_requested_at: None,
        expires_at: None,
        created_at: epoch,
        updated_at: epoch,
        started_at: Some(epoch),
        finished_at: None,
        version: 1,
    }
}

impl<D: Dialect> SqlExecutionBackend<D> {
    pub(super) async fn complete_once(
        &self,
        execution_id: Uuid,
        attempt_id: Uuid,
        lease_token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<Execution> {
        let completion = completion.validate()?;
        let op = ConnectorOperation::Ack;
        let s = &self.inner.statements;
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let now = self.now(&mut tx, op).await?;
            let Some(mut row) =
                Self::one(&mut tx, &s.get_for_update, vec![execution_id.into()], op).await?
            else {
                return Err(ExecutionError::LeaseLost("execution does not exist".into()));
            };
            let change = match decide_completion(
                &row,
                lease_token,
                &completion,
                now,
                &self.inner.options.limits,
            )? {
                CompletionDecision::Replay => return row.to_execution(),
                CompletionDecision::Write(change) => change,
            };
            let changed = D::execute(
                &mut tx,
                &s.complete,
                vec![
                    change.status.as_str().into(),
                    now.into(),
                    Param::OptJson(change.result.clone()),
                    Param::OptJson(change.error.clone()),
                    change.available_at.into(),
                    change.finished_at.into(),
                    execution_id.into(),
                    row.version.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if changed != 1 {
                return Err(ExecutionError::lease_lost());
            }
            let attempt = D::execute(
                &mut tx,
                &s.finish_attempt,
                vec![
                    change.attempt_status.as_str().into(),
                    Param::OptJson(change.error.clone()),
                    now.into(),
                    attempt_id.into(),
                    execution_id.into(),
                    lease_token.into(),
                ],
            )
            .await
            .map_err(db::<D>(op))?;
            if attempt != 1 {
                return Err(ExecutionError::LeaseLost(
                    "execution attempt is no longer valid".into(),
                ));
            }
            change.apply(&mut row, now);
            row.to_execution()
        }
        .await;
        Self::finish(tx, out, op).await
    }

    /// A statement over a batch of ids and its id parameters: `template`'s `{ids}` becomes the
    /// dialect's fixed-shape match with the ids as one text ([`BatchPaths::id_in_text_list`](crate::dialect::BatchPaths::id_in_text_list)),
    /// planned per call (a plan kept from the start of a drain, when the attempts table was
    /// nearly empty, would scan the whole table for every batch once it has grown), or
    /// `IN (?, …)` with one parameter per id (kept prepared only while short, see
    /// [`crate::param::is_stable`]).
    pub(super) fn over_ids(
        &self,
        template: &str,
        ids: impl ExactSizeIterator<Item = Uuid>,
    ) -> (String, Vec<Param>) {
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let (prefix, matcher, params) = match D::BATCH_PATHS.map(|b| b.id_in_text_list) {
            Some(matcher) => {
                let list = ids.map(|id| id.to_string()).collect::<Vec<_>>().join(",");
                (PLAN_PER_CALL, matcher.to_string(), vec![Param::Text(list)])
            }
            None => (
                "",
                format!("IN ({})", vec!["?"; ids.len()].join(", ")),
                ids.map(Param::from).collect(),
            ),
        };
        let statement = sql::render(
            &template.replace("{ids}", &matcher),
            &e,
            &a,
            D::FOR_UPDATE,
            D::SKIP_LOCKED,
        );
        (format!("{prefix}{}", D::render(&statement)), params)
    }

    /// Wakes this process's idle workers when a completion made its execution claimable again
    /// (a retry); returns `answers`.
    pub(super) fn woken_by<A: Answer>(
        &self,
        answers: Vec<ExecutionResult<A>>,
    ) -> Vec<ExecutionResult<A>> {
        if answers.iter().any(|r| {
            r.as_ref()
                .is_ok_and(|a| a.status() == ExecutionStatus::Retrying)
        }) {
            self.wake_local();
        }
        answers
    }

    /// `complete_many` and `complete_many_statuses`: the executions still running under their
    /// leases in one statement where the dialect has one, the rest on their locked rows, each
    /// answered as `A`.
    pub(super) async fn complete_batch<A: Answer>(
        &self,
        completions: Vec<(Uuid, Uuid, Uuid, ExecutionCompletion)>,
    ) -> ExecutionResult<Vec<ExecutionResult<A>>> {
        if completions.len() < 2 || !distinct_executions(completions.iter().map(|c| c.0)) {
            // One completion, or the same execution twice: complete them one by one, in order.
            return Ok(complete_each::<D, A>(self, completions).await);
        }
        // The executions still running under their leases first, in one statement; each part
        // is retried, or completed one by one, on its own, so a part that committed is never
        // run again (a retry completion run twice would answer a lost lease).
        let mut answers = match retry_transient(|| self.complete_running::<A>(&completions)).await {
            Ok(Some(answers)) => answers,
            Ok(None) => completions.iter().map(|_| None).collect(),
            Err(err) => {
                // Each `complete` wakes the local workers for its own retry.
                tracing::debug!(error = %err, "batched completion failed; completing one by one");
                return Ok(complete_each::<D, A>(self, completions).await);
            }
        };
        let rest: Vec<usize> = (0..answers.len())
            .filter(|i| answers[*i].is_none())
            .collect();
        let locked: Vec<_> = rest.iter().map(|i| completions[*i].clone()).collect();
        let decided = match locked.len() {
            0 => Vec::new(),
            1 => complete_each::<D, A>(self, locked).await,
            _ => match retry_transient(|| self.complete_locked(&locked)).await {
                Ok(decided) => decided.into_iter().map(|d| d.map(A::of)).collect(),
                Err(err) => {
                    // The locked part failed as a whole: each of its completions gets its own answer.
                    tracing::debug!(error = %err, "batched completion failed; completing one by one");
                    complete_each::<D, A>(self, locked).await
                }
            },
        };
        for (index, answer) in rest.into_iter().zip(decided) {
            answers[index] = Some(answer);
        }
        let answers = answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Err(ExecutionError::Backend(
                        "batched completion lost track of a completion".into(),
                    ))
                })
            })
            .collect();
        Ok(self.woken_by(answers))
    }

    /// Completes the distinct executions that still run under their leases (nearly all, in a
    /// drain) with the dialect's one statement (`BatchPaths::complete_running`), which fences
    /// each row in its own `WHERE` and commits by itself. Answers each completion it wrote, and
    /// each that is invalid whatever its row holds; `None` for the rest (a cancel requested, a
    /// lost or ended lease, a repeated completion, a missing row, a result it cannot store),
    /// which [`Self::complete_locked`] decides on their locked rows. `Ok(None)`: the dialect has
    /// no such statement.
    pub(super) async fn complete_running<A: Answer>(
        &self,
        completions: &[(Uuid, Uuid, Uuid, ExecutionCompletion)],
    ) -> ExecutionResult<Option<Vec<Option<ExecutionResult<A>>>>> {
        let statements = &self.inner.statements;
        let one_statement = if A::STATUS_ONLY {
            &statements.complete_running_status
        } else {
            &statements.complete_running
        };
        let path = match (one_statement, D::BATCH_PATHS, self.json_batches()) {
            (Some(sql), Some(paths), _) => RunningPath::OneStatement(sql, paths),
            // MariaDB answers no written rows, so only statuses come from its fenced writes.
            (_, None, Some(json)) if A::STATUS_ONLY => RunningPath::Fenced(json),
            _ => return Ok(None),
        };
        let limits = &self.inner.options.limits;
        let mut results: Vec<Option<ExecutionResult<A>>> =
            completions.iter().map(|_| None).collect();
        // Each completion decided as if its execution still runs under its lease; the time is
        // the statement's, so the decision is made at the epoch and only the retry delay is
        // kept from its times.
        let mut presumed = running_at_epoch();
        let mut changes: Vec<(usize, RowChange, Option<i64>)> =
            Vec::with_capacity(completions.len());
        for (index, (_, _, token, completion)) in completions.iter().enumerate() {
            presumed.lease_token = Some(*token);
            // An invalid completion fails whatever the row holds; what the decision itself
            // refuses may depend on the row (a result too large to store is no error when a
            // cancel request wins over the success), so the locked path decides those.
            // A success or a cancel has nothing to validate (a drain's completions): it is
            // decided as it stands, not copied.
            let validated;
            let completion = if completion.needs_no_validation() {
                completion
            } else {
                match completion.clone().validate() {
                    Ok(completion) => {
                        validated = completion;
                        &validated
                    }
                    Err(err) => {
                        results[index] = Some(Err(err));
                        continue;
                    }
                }
            };
            let decided = decide_completion(
                &presumed,
                *token,
                completion,
                OffsetDateTime::UNIX_EPOCH,
                limits,
            );
            match decided {
                Ok(CompletionDecision::Write(change)) => {
                    let retry_after_us = match change.finished_at {
                        Some(_) => None,
                        None => {
                            let us = (change.available_at - OffsetDateTime::UNIX_EPOCH)
                                .whole_microseconds();
                            // A delay past a century is left to the locked path, which adds it
                            // to the real time (and saturates where that overflows).
                            match i64::try_from(us) {
                                Ok(us) if us <= MAX_RETRY_DELAY_US => Some(us),
                                _ => continue,
                            }
                        }
                    };
                    changes.push((index, change, retry_after_us));
                }
                // A replay is not reached for a running row; the locked path decides both.
                Ok(CompletionDecision::Replay) | Err(_) => {}
            }
        }
        // In id order, the order batched heartbeats lock in. The plan decides the order in which
        // the `UPDATE` takes its row locks, so this makes a deadlock with a concurrent heartbeat
        // batch over the same rows unlikely, not impossible; one rolls the statement back as a
        // transient error, and `complete_many` runs it again.
        changes.sort_by_key(|(index, ..)| completions[*index].0);
        let items: Vec<RunningCompletion<'_>> = changes
            .iter()
            .map(|(index, change, retry_after_us)| {
                let (execution_id, attempt_id, lease_token, _) = &completions[*index];
                RunningCompletion {
                    execution_id: *execution_id,
                    attempt_id: *attempt_id,
                    lease_token: *lease_token,
                    status: change.status.as_str(),
                    attempt_status: change.attempt_status.as_str(),
                    result: change.result.as_ref(),
                    error: change.error.as_ref(),
                    retry_after_us: *retry_after_us,
                }
            })
            .collect();
        if !items.is_empty() {
            let op = ConnectorOperation::Ack;
            let mut written: std::collections::HashMap<Uuid, Written> = match path {
                RunningPath::OneStatement(sql, paths) => {
                    let pool = self.pool().await?;
                    let now = self
                        .inner
                        .options
                        .clock
                        .as_ref()
                        .map(|_| self.process_now());
                    if A::STATUS_ONLY {
                        (paths.run_complete_running_status)(&pool, sql, now, &items)
                            .await
                            .map_err(db::<D>(op))?
                            .into_iter()
                            .map(|(id, status)| (id, Written::Status(status)))
                            .collect()
                    } else {
                        (paths.run_complete_running)(&pool, sql, now, &items)
                            .await
                            .map_err(db::<D>(op))?
                            .into_iter()
                            .map(|row| (row.id, Written::Row(Box::new(row))))
                            .collect()
                    }
                }
                RunningPath::Fenced(json) => {
                    match self.complete_running_fenced(json, &items).await? {
                        true => changes
                            .iter()
                            .map(|(index, change, _)| {
                                (completions[*index].0, Written::Status(change.status))
                            })
                            .collect(),
                        false => std::collections::HashMap::new(),
                    }
                }
            };
            for (index, ..) in &changes {
                if let Some(row) = written.remove(&completions[*index].0) {
                    results[*index] = Some(A::written(row));
                }
            }
        }
        Ok(Some(results))
    }

    /// MariaDB's form of [`Self::complete_running`]: one transaction with two fenced writes of
    /// one shape, the executions, then their attempts. It commits only when every item was
    /// written (`true`); otherwise it rolls back (`false`), and [`Self::complete_locked`]
    /// decides them all on their locked rows.
    async fn complete_running_fenced(
        &self,
        json: &json_batch::JsonStatements,
        items: &[RunningCompletion<'_>],
    ) -> ExecutionResult<bool> {
        use json_batch::batch;
        let op = ConnectorOperation::Ack;
        let n = items.len();
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<bool> = async {
            let now = self.now(&mut tx, op).await?;
            let executions = batch(items, |f, c| {
                let retry_at = c
                    .retry_after_us
                    .map(|us| later(now, Duration::from_micros(u64::try_from(us).unwrap_or(0))));
                f.id("i", c.execution_id)
                    .id("t", c.lease_token)
                    .text("s", c.status)
                    .document("r", c.result)
                    .document("x", c.error)
                    .datetime("v", retry_at)
                    .datetime("f", c.retry_after_us.is_none().then_some(now));
            });
            let params = vec![executions.into(), now.into(), now.into()];
            let changed = D::execute(&mut tx, &json.complete_running_executions, params)
                .await
                .map_err(db::<D>(op))?;
            if changed != n as u64 {
                return Ok(false);
            }
            let attempts = batch(items, |f, c| {
                f.id("a", c.attempt_id)
                    .id("i", c.execution_id)
                    .id("t", c.lease_token)
                    .text("s", c.attempt_status)
                    .document("x", c.error);
            });
            let finished = D::execute(
                &mut tx,
                &json.complete_running_attempts,
                vec![attempts.into(), now.into()],
            )
            .await
            .map_err(db::<D>(op))?;
            Ok(finished == n as u64)
        }
        .await;
        if let Ok(false) = out {
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %rollback, "rollback of a partly fenced completion failed");
            }
            return Ok(false);
        }
        Self::finish(tx, out, op).await
    }

    /// Completes distinct executions in one transaction: lock them all (in id order), decide each
    /// with the same rules as [`complete`](LeasedExecutionBackend::complete), write the accepted
    /// ones with one UPDATE per table, commit once.
    pub(super) async fn complete_locked(
        &self,
        completions: &[(Uuid, Uuid, Uuid, ExecutionCompletion)],
    ) -> ExecutionResult<Vec<ExecutionResult<Execution>>> {
        let op = ConnectorOperation::Ack;
        let (e, a) = (
            D::quote(&self.inner.tables.executions),
            D::quote(&self.inner.tables.attempts),
        );
        let mut tx = self.begin(op).await?;
        let out: ExecutionResult<_> = async {
            let LockedBatch { now, mut rows } = self.lock_batch(&mut tx, op, completions.iter().map(|c| (c.0, c.1))).await?;
            // Each completion's own answer, or `None` where its write is in `accepted`.
            let mut results: Vec<Option<ExecutionResult<Execution>>> = Vec::with_capacity(completions.len());
            let mut accepted: Vec<(usize, ExecutionRow, RowChange)> = Vec::new();
            for (index, (execution_id, _, token, completion)) in completions.iter().enumerate() {
                let decided = completion.clone().validate().and_then(|completion| {
                    let Some((row, attempt_running)) = rows.get(execution_id) else {
                        return Err(ExecutionError::LeaseLost("execution does not exist".into()));
                    };
                    // A write needs the row's lease token to be `token`, so the attempt's
                    // check against the row's token is the check against `token`.
                    let decision = decide_completion(row, *token, &completion, now, &self.inner.options.limits)?;
                    if matches!(decision, CompletionDecision::Write(_)) && !attempt_running {
                        return Err(ExecutionError::LeaseLost("execution attempt is no longer valid".into()));
                    }
                    Ok(decision)
                });
                match decided {
                    // The batch's executions are distinct, so the accepted row is taken, not copied.
                    Ok(CompletionDecision::Write(change)) => {
                        let Some((row, _)) = rows.remove(execution_id) else {
                            return Err(ExecutionError::Backend("batched completion lost track of a row".into()));
                        };
                        accepted.push((index, row, change));
                        results.push(None);
                    }
                    Ok(CompletionDecision::Replay) => results.push(Some(match rows.get(execution_id) {
                        Some((row, _)) => row.to_execution(),
                        None => Err(ExecutionError::Backend("batched completion lost track of a row".into())),
                    })),
                    Err(err) => results.push(Some(Err(err))),
                }
            }
            if let (false, Some(statements), Some(paths)) = (accepted.is_empty(), &self.inner.statements.complete_many, D::BATCH_PATHS) {
                let n = accepted.len();
                let writes: Vec<CompletionWrite<'_>> = accepted
                    .iter()
                    .map(|(index, row, change)| CompletionWrite {
                        execution_id: row.id,
                        attempt_id: completions[*index].1,
                        status: change.status.as_str(),
                        attempt_status: change.attempt_status.as_str(),
                        result: change.result.as_ref(),
                        error: change.error.as_ref(),
                        available_at: change.available_at,
                        finished_at: change.finished_at,
                    })
                    .collect();
                let (changed, finished) = (paths.run_complete_many)(&mut tx, statements, now, &writes).await.map_err(db::<D>(op))?;
                all_written("updated", changed, "locked rows", n)?;
                all_written("finished", finished, "attempts", n)?;
            } else if let (false, Some(json)) = (accepted.is_empty(), self.json_batches()) {
                use json_batch::batch;
                let n = accepted.len();
                let executions = batch(&accepted, |f, (_, row, change)| {
                    f.id("i", row.id)
                        .text("s", change.status.as_str())
                        .document("r", change.result.as_ref())
                        .document("x", change.error.as_ref())
                        .datetime("v", Some(change.available_at))
                        .datetime("f", change.finished_at);
                });
                let changed = D::execute(&mut tx, &json.complete_executions, vec![executions.into(), now.into()])
                    .await
                    .map_err(db::<D>(op))?;
                all_written("updated", changed, "locked rows", n)?;
                let attempts = batch(&accepted, |f, (index, _, change)| {
                    f.id("a", completions[*index].1)
                        .text("s", change.attempt_status.as_str())
                        .document("x", change.error.as_ref());
                });
                let finished = D::execute(&mut tx, &json.complete_attempts, vec![attempts.into(), now.into()])
                    .await
                    .map_err(db::<D>(op))?;
                all_written("finished", finished, "attempts", n)?;
            } else if !accepted.is_empty() {
                let n = accepted.len();
                let when = vec!["WHEN ? THEN ?"; n].join(" ");
                let in_marks = vec!["?"; n].join(", ");
                let update = D::render(&format!(
                    "UPDATE {e} SET status = CASE id {when} END, result = CASE id {when} END, \
                     error = CASE id {when} END, available_at = CASE id {when} END, \
                     finished_at = CASE id {when} END, updated_at = ?, version = version + 1, \
                     lease_token = NULL, lease_expires_at = NULL, worker_id = NULL WHERE id IN ({in_marks})"
                ));
                let mut p: Vec<Param> = Vec::with_capacity(n * 10 + n + 1);
                for (_, row, change) in &accepted {
                    p.extend([Param::from(row.id), Param::from(change.status.as_str())]);
                }
                for (_, row, change) in &accepted {
                    p.extend([Param::from(row.id), Param::OptJson(change.result.clone())]);
                }
                for (_, row, change) in &accepted {
                    p.extend([Param::from(row.id), Param::OptJson(change.error.clone())]);
                }
                for (_, row, change) in &accepted {
                    p.extend([Param::from(row.id), Param::from(change.available_at)]);
                }
                for (_, row, change) in &accepted {
                    p.extend([Param::from(row.id), Param::from(change.finished_at)]);
                }
                p.push(now.into());
                p.extend(accepted.iter().map(|(_, row, _)| Param::from(row.id)));
                let changed = D::execute(&mut tx, &update, p).await.map_err(db::<D>(op))?;
                all_written("updated", changed, "locked rows", n)?;
                let finish = D::render(&format!(
                    "UPDATE {a} SET status = CASE id {when} END, error = CASE id {when} END, finished_at = ? \
                     WHERE id IN ({in_marks}) AND status = 'running'"
                ));
                let mut p: Vec<Param> = Vec::with_capacity(n * 5 + 1);
                for (index, _, change) in &accepted {
                    p.extend([Param::from(completions[*index].1), Param::from(change.attempt_status.as_str())]);
                }
                for (index, _, change) in &accepted {
                    p.extend([Param::from(completions[*index].1), Param::OptJson(change.error.clone())]);
                }
                p.push(now.into());
                p.extend(accepted.iter().map(|(index, ..)| Param::from(completions[*index].1)));
                let finished = D::execute(&mut tx, &finish, p).await.map_err(db::<D>(op))?;
                all_written("finished", finished, "attempts", n)?;
            }
            let mut out = Vec::with_capacity(completions.len());
            let mut accepted_iter = accepted.into_iter().peekable();
            for (index, result) in results.into_iter().enumerate() {
                match result {
                    Some(r) => out.push(r),
                    None => {
                        let Some((_, mut row, change)) = accepted_iter.next_if(|(i, ..)| *i == index) else {
                            return Err(ExecutionError::Backend("batched completion lost track of a row".into()));
                        };
                        change.apply(&mut row, now);
                        out.push(row.to_execution());
                    }
                }
            }
            Ok(out)
        }
        .await;
        Self::finish(tx, out, op).await
    }
}

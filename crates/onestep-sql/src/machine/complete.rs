//! Completing an attempt: one completion, or a batch written with a fixed number of statements
//! (one on PostgreSQL, one per table elsewhere).

use super::lease::LockedBatch;
use super::*;

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

    /// Completes distinct executions in one transaction: lock them all (in id order), decide each
    /// with the same rules as [`complete`](LeasedExecutionBackend::complete), write the accepted
    /// ones with one UPDATE per table, commit once.
    pub(super) async fn complete_batch(
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
                if changed != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion updated {changed} of {n} locked rows").into()));
                }
                if finished != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion finished {finished} of {n} attempts").into()));
                }
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
                if changed != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion updated {changed} of {n} locked rows").into()));
                }
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
                if finished != n as u64 {
                    return Err(ExecutionError::Backend(format!("batched completion finished {finished} of {n} attempts").into()));
                }
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

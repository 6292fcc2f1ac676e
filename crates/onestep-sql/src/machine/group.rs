//! Group commit of submits ([`Dialect::GROUP_SUBMITS`], SQLite): submits that arrive while
//! another is being written wait, and then go in together, in one transaction, each answered on
//! its own as if it had been submitted alone.
//!
//! SQLite has one writer and a commit waits for the disk's flush, so one transaction per submit
//! makes a thousand submits a second a thousand commits, and on a busy machine the one
//! connection falls behind for as long as the load lasts. Grouped, a burst of submits costs one
//! commit. A lone submit is written at once, as before: a group forms only from the submits that
//! arrive while the connection is busy.
//!
//! The writes run in a task of their own, so a caller that stops waiting does not cancel the
//! others' write. If that task is dropped (its runtime shut down) the submits it had not taken
//! yet are handed back to their callers, who write them themselves; the callers of the group in
//! flight learn that its outcome is unknown, as after a lost `COMMIT` reply.

use std::sync::Mutex;

use tokio::sync::oneshot;

use super::*;

/// The most submits one group writes: a group is one transaction, and every member waits for
/// all of it.
const MAX_GROUP: usize = 500;

/// The submits waiting to be written, and whether a writer task is running.
#[derive(Default)]
pub(super) struct SubmitGroup {
    state: Mutex<GroupState>,
}

#[derive(Default)]
struct GroupState {
    waiting: Vec<Waiting>,
    /// A writer task is running; it takes every waiting submit before it ends.
    writing: bool,
}

/// A submit waiting for the writer, and where its answer goes.
struct Waiting {
    request: ExecutionRequest,
    answer: oneshot::Sender<Answer>,
}

/// What a waiting submit is told (boxed: a request and an execution are large, and the answer
/// moves through a channel).
enum Answer {
    /// The submit was written (or failed) in a group.
    Written(Box<ExecutionResult<Execution>>),
    /// The writer went away (its runtime shut down, or it panicked) before it took this
    /// submit: the caller writes it.
    HandedBack(Box<ExecutionRequest>),
}

impl SubmitGroup {
    fn state(&self) -> std::sync::MutexGuard<'_, GroupState> {
        // Every change under the lock is a push, a drain or a flag write.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Clears the writer's flag and hands the waiting submits back when the writer task is dropped
/// before it finished: its runtime shut down, or it panicked (see the module's documentation).
struct WriterGone<'a> {
    group: &'a SubmitGroup,
    finished: bool,
}

impl Drop for WriterGone<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.group.state();
        state.writing = false;
        for waiting in state.waiting.drain(..) {
            let _ = waiting
                .answer
                .send(Answer::HandedBack(Box::new(waiting.request)));
        }
    }
}

impl<D: Dialect> SqlExecutionBackend<D> {
    /// Submits one request through the group: written with whatever else waits for the
    /// connection, or at once when nothing does.
    pub(super) async fn submit_grouped(
        &self,
        request: ExecutionRequest,
    ) -> ExecutionResult<Execution> {
        let (answer, answered) = oneshot::channel();
        let start_writer = {
            let mut state = self.inner.group.state();
            state.waiting.push(Waiting { request, answer });
            !std::mem::replace(&mut state.writing, true)
        };
        if start_writer {
            tokio::spawn(self.clone().write_groups());
        }
        match answered.await {
            Ok(Answer::Written(result)) => *result,
            Ok(Answer::HandedBack(request)) => {
                retry_transient(|| self.submit_one((*request).clone())).await
            }
            Err(_) => Err(ExecutionError::Backend(
                "the task writing this submit together with others stopped before it answered \
                 (its tokio runtime shut down, or it panicked): the submit may or may not be \
                 stored; look it up by its idempotency key, or submit again with one"
                    .into(),
            )),
        }
    }

    /// The writer task: writes the waiting submits group by group until none wait.
    async fn write_groups(self) {
        let mut gone = WriterGone {
            group: &self.inner.group,
            finished: false,
        };
        loop {
            let group: Vec<Waiting> = {
                let mut state = self.inner.group.state();
                if state.waiting.is_empty() {
                    state.writing = false;
                    gone.finished = true;
                    return;
                }
                let n = state.waiting.len().min(MAX_GROUP);
                state.waiting.drain(..n).collect()
            };
            let (requests, answers): (Vec<_>, Vec<_>) =
                group.into_iter().map(|w| (w.request, w.answer)).unzip();
            let results = self.write_group(requests).await;
            for (answer, result) in answers.into_iter().zip(results) {
                // A caller that stopped waiting drops its receiver; its submit stands.
                let _ = answer.send(Answer::Written(Box::new(result)));
            }
        }
    }

    /// Writes one group: a lone submit as `submit` writes it, more in one transaction. A group
    /// that fails as a whole gives each member the error.
    async fn write_group(
        &self,
        requests: Vec<ExecutionRequest>,
    ) -> Vec<ExecutionResult<Execution>> {
        if let [request] = requests.as_slice() {
            return vec![retry_transient(|| self.submit_one(request.clone())).await];
        }
        let n = requests.len();
        match self.submit_together(requests).await {
            Ok(results) => results,
            Err(err) => {
                let mut results: Vec<_> = (1..n).map(|_| Err(shared_error(&err))).collect();
                results.insert(0, Err(err));
                results
            }
        }
    }
}

/// A copy of a group's error for each member: the same variant and message (a cause is kept
/// as its text).
fn shared_error(err: &ExecutionError) -> ExecutionError {
    match err {
        ExecutionError::Connector(c) => {
            let mut copy = onestep_core::ConnectorOperationError::new(
                c.backend.clone(),
                c.operation,
                c.kind,
                c.source_name.clone(),
            );
            copy.retry_delay = c.retry_delay;
            copy.cause = c.cause.as_ref().map(|cause| cause.to_string().into());
            ExecutionError::Connector(copy)
        }
        ExecutionError::Conflict(m) => ExecutionError::Conflict(m.clone()),
        ExecutionError::Encoding(m) => ExecutionError::Encoding(m.clone()),
        ExecutionError::InvalidArgument { field, message } => {
            ExecutionError::invalid(field.clone(), message.clone())
        }
        other => ExecutionError::Backend(other.to_string().into()),
    }
}

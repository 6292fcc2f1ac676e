//! Group commit of submits ([`Dialect::GROUP_SUBMITS`]): submits that arrive while another is
//! being written wait, and then go in together, in one transaction, each answered on its own as
//! if it had been submitted alone.
//!
//! One transaction per submit makes a thousand submits a second a thousand commits, each with
//! its statement, its round trips and its flush; on a busy machine the writes fall behind, and
//! the claims waiting for the same server or (SQLite) the same connection with them. Grouped, a
//! burst of submits costs one multi-row insert and one commit. A lone submit is written at once,
//! by its own caller, as before: a group forms only from the submits that arrive while another
//! is being written.
//!
//! The leader's write runs in its own caller, later groups in a writer task, so a caller that
//! stops waiting does not cancel the others' write. Only callers on the writer's tokio runtime
//! wait for it: a submit from another runtime is written alone, so it never depends on a runtime
//! that may stop running. If the leader stops waiting, or the writer task is dropped (its runtime
//! shut down, before it ever ran too) or panics, the submits not taken yet are handed back to
//! their callers, who write them themselves; the callers of the group in flight learn that its
//! outcome is unknown, as after a lost `COMMIT` reply.

use std::sync::Mutex;

use tokio::sync::oneshot;

use super::*;

/// The most submits one group writes: a group is one transaction, every member waits for all of
/// it, and its rows are held in memory while it is written (100 payloads at the 1 MiB limit are
/// what a `submit_many` of 100 holds). Under a steady load groups stay far smaller: they hold what
/// arrived during one write.
const MAX_GROUP: usize = 100;

/// The submits waiting to be written, and the runtime of the leader or writer task writing.
#[derive(Default)]
pub(super) struct SubmitGroup {
    state: Mutex<GroupState>,
}

#[derive(Default)]
struct GroupState {
    waiting: Vec<Waiting>,
    /// The runtime of the leader or writer task, while one writes: the leader starts a writer
    /// task for the waiting submits, and a writer takes every waiting submit before it ends.
    writer: Option<tokio::runtime::Id>,
}

/// A submit waiting for the writer, and where its answer goes.
struct Waiting {
    request: ExecutionRequest,
    answer: oneshot::Sender<Answer>,
}

/// A caller's turn: lead (write its own submit, then start a writer for the others), wait for
/// the writer, or write alone.
enum Turn {
    Lead(ExecutionRequest),
    Wait(oneshot::Receiver<Answer>),
    Alone(ExecutionRequest),
}

/// Which turn a submit takes (see [`decide`]).
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Lead,
    Wait,
    Alone,
}

/// The turn of a submit made on runtime `here` (`None`: not on a tokio runtime) while a writer
/// runs on runtime `writer` (`None`: no writer runs). Only a submit on the writer's own runtime
/// waits for it: a runtime may stop running (shut down, or a current-thread runtime between its
/// `block_on` calls), and a submit must not depend on another's.
fn decide(writer: Option<tokio::runtime::Id>, here: Option<tokio::runtime::Id>) -> Decision {
    match (writer, here) {
        (None, Some(_)) => Decision::Lead,
        (Some(writer), Some(here)) if writer == here => Decision::Wait,
        _ => Decision::Alone,
    }
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

/// Owned by the writer task from its spawning on: when the task is dropped before it finished
/// (its runtime shut down, even before the task first ran, or it panicked), clears the writer and
/// hands the waiting submits back to their callers (see the module's documentation).
struct WriterGone<D: Dialect> {
    backend: SqlExecutionBackend<D>,
    finished: bool,
}

impl<D: Dialect> Drop for WriterGone<D> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut state = self.backend.inner.group.state();
        state.writer = None;
        for waiting in state.waiting.drain(..) {
            let _ = waiting
                .answer
                .send(Answer::HandedBack(Box::new(waiting.request)));
        }
    }
}

impl<D: Dialect> SqlExecutionBackend<D> {
    /// Submits one request through the group. With no writer running, this caller leads: it
    /// writes its own submit at once, as a lone submit is written, and hands the submits that
    /// arrived meanwhile to a writer task. Otherwise it waits for the writer, which writes it with
    /// whatever else waits.
    pub(super) async fn submit_grouped(
        &self,
        request: ExecutionRequest,
    ) -> ExecutionResult<Execution> {
        let here = tokio::runtime::Handle::try_current().map(|h| h.id()).ok();
        let turn = {
            let mut state = self.inner.group.state();
            match decide(state.writer, here) {
                Decision::Lead => {
                    state.writer = here;
                    Turn::Lead(request)
                }
                Decision::Wait => {
                    let (answer, answered) = oneshot::channel();
                    state.waiting.push(Waiting { request, answer });
                    Turn::Wait(answered)
                }
                Decision::Alone => Turn::Alone(request),
            }
        };
        match turn {
            Turn::Alone(request) => self.submit_alone(&request).await,
            Turn::Lead(request) => self.lead(request).await,
            Turn::Wait(answered) => match answered.await {
                Ok(Answer::Written(result)) => *result,
                Ok(Answer::HandedBack(request)) => self.submit_alone(&request).await,
                Err(_) => Err(ExecutionError::Backend(
                    "the task writing this submit together with others stopped before it \
                     answered (its tokio runtime shut down, or it panicked): the submit may or \
                     may not be stored; look it up by its idempotency key, or submit again with \
                     one"
                    .into(),
                )),
            },
        }
    }

    /// Writes the leader's own submit, then starts a writer task for the submits that arrived
    /// meanwhile, if any. If the leader stops waiting mid-write, they are handed back.
    async fn lead(&self, request: ExecutionRequest) -> ExecutionResult<Execution> {
        let mut gone = WriterGone {
            backend: self.clone(),
            finished: false,
        };
        let result = self.submit_alone(&request).await;
        let others_wait = {
            let mut state = self.inner.group.state();
            let others_wait = !state.waiting.is_empty();
            if !others_wait {
                state.writer = None;
            }
            others_wait
        };
        if others_wait {
            tokio::spawn(self.clone().write_groups(gone));
        } else {
            gone.finished = true;
        }
        result
    }

    /// The writer task: writes the waiting submits group by group until none wait.
    async fn write_groups(self, mut gone: WriterGone<D>) {
        loop {
            let group: Vec<Waiting> = {
                let mut state = self.inner.group.state();
                if state.waiting.is_empty() {
                    state.writer = None;
                    gone.finished = true;
                    return;
                }
                let n = state.waiting.len().min(MAX_GROUP);
                state.waiting.drain(..n).collect()
            };
            // A caller that stopped waiting before its group was taken is not written, as a
            // submit dropped before it reached the database never was.
            let (requests, answers): (Vec<_>, Vec<_>) = group
                .into_iter()
                .filter(|w| !w.answer.is_closed())
                .map(|w| (w.request, w.answer))
                .unzip();
            if requests.is_empty() {
                continue;
            }
            let results = self.write_group(requests).await;
            for (answer, result) in answers.into_iter().zip(results) {
                // A caller that stopped waiting meanwhile drops its receiver; its submit stands.
                let _ = answer.send(Answer::Written(Box::new(result)));
            }
        }
    }

    /// Writes one group: a lone submit as `submit` writes it, more in one transaction. A group
    /// that fails as a whole was rolled back (the database is embedded: a failed commit is no
    /// lost reply), so each member is then written alone and gets its own answer: an invalid
    /// request its own error, a valid one stored if it can be.
    async fn write_group(
        &self,
        requests: Vec<ExecutionRequest>,
    ) -> Vec<ExecutionResult<Execution>> {
        if let [request] = requests.as_slice() {
            return vec![self.submit_alone(request).await];
        }
        match self.submit_together(&requests).await {
            Ok(results) => results,
            Err(err) => {
                tracing::debug!(error = %err, "a group of submits failed; writing each alone");
                self.submit_one_by_one(&requests).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_submit_on_the_writers_runtime_waits_for_it() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime")
        };
        let (a, b) = (runtime(), runtime());
        let (a, b) = (a.handle().id(), b.handle().id());
        assert_eq!(decide(None, Some(a)), Decision::Lead);
        assert_eq!(decide(Some(a), Some(a)), Decision::Wait);
        assert_eq!(decide(Some(a), Some(b)), Decision::Alone);
        assert_eq!(decide(Some(a), None), Decision::Alone);
        assert_eq!(decide(None, None), Decision::Alone);
    }
}

//! The source's batch writer: completions of its deliveries, written up to 256 at once by one
//! writer ([`COMPLETION_WRITERS`]).

use super::*;

/// The most completions one batch carries.
pub(super) const COMPLETION_BATCH: usize = 256;

/// A completion waiting for the batch writer, with where to send its outcome.
pub(super) struct CompletionJob {
    pub(super) ids: (Uuid, Uuid, Uuid),
    pub(super) completion: ExecutionCompletion,
    pub(super) reply: tokio::sync::oneshot::Sender<ExecutionResult<ExecutionStatus>>,
}

/// The per-source task that writes completions in batches, and the way to reach it.
pub(super) struct Completer {
    pub(super) jobs: tokio::sync::mpsc::UnboundedSender<CompletionJob>,
    pub(super) _task: AbortOnDropHandle<()>,
}

/// How many completion batches one source writes at the same time. One: while a batch is
/// written the next one gathers, so batches grow with the load. Handlers do not wait for it
/// (a slot is given back when the attempt succeeded, before its completion is written). Two
/// writers halved PostgreSQL's batches (~47 completions instead of ~100 in a burn-down), and the
/// server spent more on parsing, planning and committing the extra statements than the overlap
/// saved: the drain was 8 % slower and used ~20 % more server CPU.
pub(super) const COMPLETION_WRITERS: usize = 1;

/// Writes completions in batches: waits for one, lets the other in-flight completions arrive,
/// takes up to [`COMPLETION_BATCH`], and completes them with one `complete_many`, with up to
/// [`COMPLETION_WRITERS`] batches in flight (distinct executions: their row locks never meet).
/// Each completion keeps its own lease fencing; only the transaction and the commit are shared.
/// When the queue closes, what is queued is written and every batch in flight finishes.
pub(super) async fn completion_loop<B: LeasedExecutionBackend + Clone + 'static>(
    backend: B,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<CompletionJob>,
) {
    let mut writing = tokio::task::JoinSet::new();
    let mut batch: Vec<CompletionJob> = Vec::new();
    let mut open = true;
    while open || !batch.is_empty() {
        if batch.is_empty() {
            tokio::select! {
                job = jobs.recv() => match job {
                    Some(job) => batch.push(job),
                    None => open = false,
                },
                Some(_) = writing.join_next(), if !writing.is_empty() => {}
            }
            if batch.is_empty() {
                continue;
            }
            // Let the other completions of this burst arrive.
            tokio::task::yield_now().await;
        }
        while open && batch.len() < COMPLETION_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        if writing.len() >= COMPLETION_WRITERS {
            // Every writer is busy: the next completions wait in the queue until one is free,
            // and are taken from it then. (Taking each as it came woke this loop once per
            // completion while a batch was written, which is nearly always.)
            writing.join_next().await;
            continue;
        }
        writing.spawn(write_completions(
            backend.clone(),
            std::mem::take(&mut batch),
        ));
    }
    while writing.join_next().await.is_some() {}
}

/// Writes one batch of completions and answers each. If the batch fails as a whole, no
/// completion is answered: each delivery then writes its own on its own (the fallback of
/// `complete_execution`, which kept its completion), so the batch's completions move into the
/// write instead of being copied for a second try here.
pub(super) async fn write_completions<B: LeasedExecutionBackend>(
    backend: B,
    batch: Vec<CompletionJob>,
) {
    crate::metrics::execution::execution_metrics().completion_batch(batch.len());
    let (replies, items): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|job| {
            let (e, a, t) = job.ids;
            (job.reply, (e, a, t, job.completion))
        })
        .unzip();
    if let Ok(results) = backend.complete_many_statuses(items).await
        && results.len() == replies.len()
    {
        for (reply, result) in replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }
}

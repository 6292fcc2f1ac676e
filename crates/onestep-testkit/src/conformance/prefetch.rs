//! The prefetch buffer's cases: what a source claims ahead of its runner's free slots
//! (`ExecutionSourceOptions::prefetch`), serves, refills and hands back.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onestep_core::execution::{
    ExecutionBackend, ExecutionSource, ExecutionSourceOptions, ExecutionStatus, Prefetch,
};
use onestep_core::{OneStepApp, Source, Task, TaskContext, TaskError};
use serde_json::{Value, json};
use uuid::Uuid;

use super::worker::{Running, options};
use super::*;

/// How many of `ids` have `status` now.
async fn count_status<B: ExecutionBackend>(b: &B, ids: &[Uuid], status: ExecutionStatus) -> usize {
    let mut n = 0;
    for id in ids {
        if b.get(NS, *id).await.unwrap().unwrap().status == status {
            n += 1;
        }
    }
    n
}

/// `n` queued executions of `task` and source options with a claim batch of 10, a prefetch
/// buffer of `prefetch` and a 5 s heartbeat interval (the prefetch cases).
async fn prefetch_setup<F: BackendFactory>(
    f: &F,
    task: &str,
    n: usize,
    prefetch: usize,
) -> (F::Backend, Vec<Uuid>, ExecutionSourceOptions) {
    let (b, _) = backend(f).await;
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(submit(&b, task, json!(i)).await.id);
    }
    let mut o = options(task);
    o.batch_size = 10;
    o.prefetch = Prefetch::Fixed(prefetch);
    o.heartbeat_interval = Duration::from_secs(5);
    (b, ids, o)
}

/// A prefetch buffer claims ahead (at most a batch per claim), serves later fetches from what
/// it claimed (refilling behind them), hands back what is stale (older than a heartbeat
/// interval) before claiming again, and hands back everything on `return_unstarted`, a refill
/// under way included.
pub async fn source_prefetch_holds_claims_and_hands_them_back<F: BackendFactory>(f: &F) {
    let (b, ids, mut o) = prefetch_setup(f, "t", 10, 5).await;
    let source = ExecutionSource::new(b.clone(), o.clone()).unwrap();
    assert_eq!(source.fetch(2).await.unwrap().len(), 2);
    let mut claimed = Vec::new();
    for id in &ids {
        if b.get(NS, *id).await.unwrap().unwrap().status == ExecutionStatus::Running {
            claimed.push(id.to_string());
        }
    }
    assert_eq!(claimed.len(), 7, "two handed out and five buffered");
    let served = source.fetch(3).await.unwrap();
    assert_eq!(served.len(), 3);
    for delivery in &served {
        let id = &delivery.envelope().meta["onestep.execution"]["id"];
        assert!(
            claimed.iter().any(|c| id == c),
            "{id} was served from the buffer"
        );
    }
    // The buffer (2 left) was refilled behind the fetch; handing back waits for that claim.
    source.return_unstarted().await.unwrap();
    assert_eq!(count_status(&b, &ids, ExecutionStatus::Running).await, 5);
    assert_eq!(count_status(&b, &ids, ExecutionStatus::Queued).await, 5);

    o.heartbeat_interval = Duration::from_millis(50);
    let quick = ExecutionSource::new(b.clone(), o).unwrap();
    assert_eq!(quick.fetch(1).await.unwrap().len(), 1);
    assert_eq!(count_status(&b, &ids, ExecutionStatus::Queued).await, 0);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let again = quick.fetch(1).await.unwrap();
    assert_eq!(again.len(), 1);
    assert!(
        again[0].envelope().attempts >= 1,
        "the stale buffer was handed back and claimed again as a new attempt"
    );
    quick.return_unstarted().await.unwrap();
    assert_eq!(count_status(&b, &ids, ExecutionStatus::Running).await, 7);
    assert_eq!(count_status(&b, &ids, ExecutionStatus::Queued).await, 3);
}

/// A worker with a prefetch buffer finishes everything, and when it stops, what it claimed ahead
/// and never started goes back to the queue (nothing is left `running`).
pub async fn worker_with_prefetch_hands_back_its_buffer_at_shutdown<F: BackendFactory>(f: &F) {
    let (b, ids, o) = prefetch_setup(f, "slow", 20, 8).await;
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let app = OneStepApp::builder("prefetching")
        .task(
            Task::new("slow")
                .source(Arc::new(ExecutionSource::new(b.clone(), o).unwrap()))
                .concurrency(2)
                .handler(move |_ctx: TaskContext, v: Value| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, TaskError>(v)
                    }
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while started.load(Ordering::SeqCst) < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker starts work"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.stop().await;
    let succeeded = count_status(&b, &ids, ExecutionStatus::Succeeded).await;
    let queued = count_status(&b, &ids, ExecutionStatus::Queued).await;
    assert_eq!(
        count_status(&b, &ids, ExecutionStatus::Running).await,
        0,
        "nothing claimed ahead is left running"
    );
    assert_eq!(
        succeeded + queued,
        20,
        "every execution either finished or went back"
    );
    assert!(
        (4..20).contains(&succeeded),
        "stopped midway: {succeeded} succeeded"
    );
}

/// An adaptive buffer (`prefetch: auto`) holds nothing for tasks that last longer than two claim
/// round trips per slot: no execution stays claimed and unstarted (a buffered one would wait for
/// a slot, a whole task's length), and every one finishes.
pub async fn adaptive_prefetch_holds_nothing_for_long_tasks<F: BackendFactory>(f: &F) {
    const TASK: Duration = Duration::from_secs(1);
    let (b, ids, mut o) = prefetch_setup(f, "long", 4, 0).await;
    o.prefetch = Prefetch::Adaptive;
    // When each execution's handler started.
    let started = Arc::new(std::sync::Mutex::new(HashMap::<Uuid, Instant>::new()));
    let recorded = started.clone();
    let app = OneStepApp::builder("adaptive")
        .task(
            Task::new("long")
                .source(Arc::new(ExecutionSource::new(b.clone(), o).unwrap()))
                .concurrency(2)
                .handler(move |ctx: TaskContext, v: Value| {
                    let id = ctx.execution().unwrap().id();
                    recorded.lock().unwrap().insert(id, Instant::now());
                    async move {
                        tokio::time::sleep(TASK).await;
                        Ok::<_, TaskError>(v)
                    }
                }),
        )
        .build()
        .unwrap();
    let running = Running::start(app);
    // When each execution was first seen running with its handler not started yet.
    let mut unstarted_since = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut succeeded = 0;
        for id in &ids {
            match b.get(NS, *id).await.unwrap().unwrap().status {
                ExecutionStatus::Running if !started.lock().unwrap().contains_key(id) => {
                    unstarted_since.entry(*id).or_insert_with(Instant::now);
                }
                ExecutionStatus::Succeeded => succeeded += 1,
                _ => {}
            }
        }
        if succeeded == ids.len() {
            break;
        }
        assert!(Instant::now() < deadline, "the worker finishes");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.stop().await;
    let started = started.lock().unwrap();
    assert_eq!(started.len(), ids.len(), "each ran");
    for (id, since) in unstarted_since {
        let waited = started[&id].saturating_duration_since(since);
        assert!(
            waited < TASK / 2,
            "{id} stayed claimed and unstarted for {waited:?}: it was buffered"
        );
    }
}

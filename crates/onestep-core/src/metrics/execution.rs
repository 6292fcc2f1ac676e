//! The tracked-execution families: what the claim, heartbeat and completion paths of an
//! [`ExecutionSource`](crate::execution::ExecutionSource) see, what an
//! [`ExecutionClient`](crate::execution::ExecutionClient) submits, and the backlog sampled from
//! the store. The reference has none of these; they are named after the same conventions.
//!
//! | family | type | labels | what |
//! |---|---|---|---|
//! | `onestep_executions_submitted_total` | counter | `namespace`, `task` | submissions answered with an execution (idempotent repeats included) |
//! | `onestep_executions_claimed_total` | counter | `namespace`, `task` | executions claimed under a lease |
//! | `onestep_executions_completed_total` | counter | `namespace`, `task`, `status` | attempts ended, by the execution's new status: `succeeded`, `failed`, `cancelled`, `retrying` |
//! | `onestep_execution_leases_lost_total` | counter | `namespace`, `task` | leases a heartbeat found taken or expired (the handler was stopped) |
//! | `onestep_executions_reclaimed_total` | counter | | expired leases handed back to the queue by this process's maintenance (every namespace of its tables) |
//! | `onestep_executions_expired_total` | counter | | waiting executions past `expires_at` ended `expired` by this process's maintenance (every namespace) |
//! | `onestep_execution_pickup_latency_seconds` | histogram | `namespace`, `task` | from `available_at` (submission, or the retry's due time) to the claim |
//! | `onestep_execution_heartbeat_batch_size` | histogram | | leases renewed by one batched heartbeat |
//! | `onestep_execution_completion_batch_size` | histogram | | attempts ended by one batched completion |
//! | `onestep_execution_queue_depth` | gauge | `namespace`, `task`, `state` | waiting executions, `ready` or `delayed`, sampled |
//! | `onestep_execution_oldest_ready_age_seconds` | gauge | `namespace`, `task` | how long the oldest ready execution has waited, sampled |
//!
//! Counting is cheap (one short lock per batch). The backlog gauges come from a query per
//! worker's tasks that reads only waiting rows (the claim index), run at most once per
//! [`SAMPLE_INTERVAL`] when a scrape asks for it ([`ExecutionMetrics::sample_backlog`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use super::{family, sample};
use crate::execution::ExecutionResult;
use crate::execution::inspect::TaskBacklog;

/// The pickup-latency buckets, in seconds: from a hot worker's few milliseconds to a backlog's
/// minutes.
pub const PICKUP_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The batch-size buckets.
pub const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// The least time between two backlog samples.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// How long one backlog probe may take before its sample is skipped.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(2);

/// A backlog query of one source's tasks.
pub type BacklogProbe = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = ExecutionResult<Option<Vec<TaskBacklog>>>> + Send>>
        + Send
        + Sync,
>;

type Key = (String, String);

#[derive(Debug, Clone)]
struct Histogram {
    count: u64,
    sum: f64,
    buckets: Vec<u64>,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Self {
        Self {
            count: 0,
            sum: 0.0,
            buckets: vec![0; bounds.len()],
        }
    }

    fn observe(&mut self, bounds: &[f64], value: f64) {
        self.count += 1;
        self.sum += value;
        if let Some(i) = bounds.iter().position(|b| value <= *b) {
            self.buckets[i] += 1;
        }
    }
}

#[derive(Default)]
struct State {
    submitted: BTreeMap<Key, u64>,
    claimed: BTreeMap<Key, u64>,
    completed: BTreeMap<(String, String, String), u64>,
    leases_lost: BTreeMap<Key, u64>,
    reclaimed: u64,
    expired: u64,
    pickup: BTreeMap<Key, Histogram>,
    heartbeat_batches: Option<Histogram>,
    completion_batches: Option<Histogram>,
    /// The last sample of each probed (namespace, task): depth, ready, oldest ready age.
    backlog: BTreeMap<Key, (u64, u64, Option<f64>)>,
}

struct Probe {
    namespace: String,
    tasks: Vec<String>,
    probe: BacklogProbe,
}

/// The process's tracked-execution counters ([`execution_metrics`]).
pub struct ExecutionMetrics {
    enabled: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    probes: Mutex<BTreeMap<u64, Probe>>,
    next_probe: AtomicU64,
    last_sample: Mutex<Option<Instant>>,
    sampling: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for ExecutionMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionMetrics").finish_non_exhaustive()
    }
}

/// The process-wide registry every execution source and client records into; a metrics
/// endpoint renders it beside the task families.
pub fn execution_metrics() -> &'static ExecutionMetrics {
    static METRICS: OnceLock<ExecutionMetrics> = OnceLock::new();
    METRICS.get_or_init(|| ExecutionMetrics {
        enabled: std::sync::atomic::AtomicBool::new(true),
        state: Mutex::default(),
        probes: Mutex::default(),
        next_probe: AtomicU64::new(1),
        last_sample: Mutex::new(None),
        sampling: tokio::sync::Mutex::new(()),
    })
}

/// Unregisters a backlog probe when dropped.
#[derive(Debug)]
pub struct ProbeRegistration(u64);

impl Drop for ProbeRegistration {
    fn drop(&mut self) {
        let metrics = execution_metrics();
        let removed = lock(&metrics.probes).remove(&self.0);
        if let Some(probe) = removed {
            let mut state = lock(&metrics.state);
            for task in probe.tasks {
                state.backlog.remove(&(probe.namespace.clone(), task));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn add(map: &mut BTreeMap<Key, u64>, namespace: &str, task: &str, n: u64) {
    *map.entry((namespace.to_owned(), task.to_owned()))
        .or_default() += n;
}

impl ExecutionMetrics {
    /// Turns counting on (the default) or off for the whole process; off, every record call
    /// returns at once (what the benchmark's `--metrics off` measures against).
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    fn off(&self) -> bool {
        !self.enabled.load(Ordering::Relaxed)
    }

    /// Counts `n` submissions answered with an execution.
    pub fn submitted(&self, namespace: &str, task: &str, n: u64) {
        if self.off() {
            return;
        }
        add(&mut lock(&self.state).submitted, namespace, task, n);
    }

    /// Counts one claimed batch of `task`, given each execution's `(available_at, claimed_at)`:
    /// its pickup latency is the difference (never below 0).
    pub fn claimed(
        &self,
        namespace: &str,
        task: &str,
        claims: impl IntoIterator<Item = (OffsetDateTime, OffsetDateTime)>,
    ) {
        if self.off() {
            return;
        }
        let mut state = lock(&self.state);
        let key = (namespace.to_owned(), task.to_owned());
        let histogram = state
            .pickup
            .entry(key.clone())
            .or_insert_with(|| Histogram::new(&PICKUP_BUCKETS));
        let mut n = 0;
        for (at, claimed_at) in claims {
            let waited = (claimed_at - at).as_seconds_f64().max(0.0);
            histogram.observe(&PICKUP_BUCKETS, waited);
            n += 1;
        }
        *state.claimed.entry(key).or_default() += n;
    }

    /// Counts an attempt of `task` that ended with the execution in `status`.
    pub fn completed(&self, namespace: &str, task: &str, status: &str) {
        if self.off() {
            return;
        }
        *lock(&self.state)
            .completed
            .entry((namespace.to_owned(), task.to_owned(), status.to_owned()))
            .or_default() += 1;
    }

    /// Counts a lease a heartbeat found lost.
    pub fn lease_lost(&self, namespace: &str, task: &str) {
        if self.off() {
            return;
        }
        add(&mut lock(&self.state).leases_lost, namespace, task, 1);
    }

    /// Counts `n` expired leases handed back to the queue by maintenance (which sweeps every
    /// namespace of its tables).
    pub fn reclaimed(&self, n: u64) {
        if n > 0 && !self.off() {
            lock(&self.state).reclaimed += n;
        }
    }

    /// Counts `n` waiting executions ended `expired` by maintenance.
    pub fn expired(&self, n: u64) {
        if n > 0 && !self.off() {
            lock(&self.state).expired += n;
        }
    }

    /// Observes one batched heartbeat of `n` leases.
    pub fn heartbeat_batch(&self, n: usize) {
        if self.off() {
            return;
        }
        lock(&self.state)
            .heartbeat_batches
            .get_or_insert_with(|| Histogram::new(&BATCH_BUCKETS))
            .observe(&BATCH_BUCKETS, n as f64);
    }

    /// Observes one batched completion of `n` attempts.
    pub fn completion_batch(&self, n: usize) {
        if self.off() {
            return;
        }
        lock(&self.state)
            .completion_batches
            .get_or_insert_with(|| Histogram::new(&BATCH_BUCKETS))
            .observe(&BATCH_BUCKETS, n as f64);
    }

    /// Registers the backlog query of a source's `tasks` in `namespace`; it is asked by
    /// [`sample_backlog`](Self::sample_backlog) until the registration is dropped.
    pub fn register_backlog(
        &self,
        namespace: &str,
        tasks: &[String],
        probe: BacklogProbe,
    ) -> ProbeRegistration {
        let id = self.next_probe.fetch_add(1, Ordering::Relaxed);
        lock(&self.probes).insert(
            id,
            Probe {
                namespace: namespace.to_owned(),
                tasks: tasks.to_vec(),
                probe,
            },
        );
        ProbeRegistration(id)
    }

    /// Refreshes the backlog gauges, unless a sample younger than [`SAMPLE_INTERVAL`] exists or
    /// one is running: each registered probe runs once, for at most [`SAMPLE_TIMEOUT`]. A probe
    /// that fails or times out removes its tasks' gauges (a stale backlog misleads more than a
    /// missing one).
    pub async fn sample_backlog(&self) {
        let Ok(_running) = self.sampling.try_lock() else {
            return;
        };
        {
            let mut last = lock(&self.last_sample);
            if last.is_some_and(|at| at.elapsed() < SAMPLE_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
        }
        let probes: Vec<(String, Vec<String>, BacklogProbe)> = lock(&self.probes)
            .values()
            .map(|p| (p.namespace.clone(), p.tasks.clone(), p.probe.clone()))
            .collect();
        for (namespace, tasks, probe) in probes {
            let answer = tokio::time::timeout(SAMPLE_TIMEOUT, probe()).await;
            let now = OffsetDateTime::now_utc();
            let mut state = lock(&self.state);
            for task in &tasks {
                state.backlog.remove(&(namespace.clone(), task.clone()));
            }
            match answer {
                Ok(Ok(Some(rows))) => {
                    for task in &tasks {
                        let row = rows.iter().find(|r| &r.task_name == task);
                        let value = row.map_or((0, 0, None), |r| {
                            let age = r
                                .oldest_ready_at
                                .map(|at| (now - at).as_seconds_f64().max(0.0));
                            (r.depth, r.ready, age)
                        });
                        state
                            .backlog
                            .insert((namespace.clone(), task.clone()), value);
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(err)) => {
                    tracing::debug!(namespace = %namespace, error = %err, "backlog sample failed");
                }
                Err(_) => {
                    tracing::debug!(namespace = %namespace, "backlog sample timed out");
                }
            }
        }
    }

    /// The Prometheus text of the execution families that have samples.
    pub fn render(&self) -> String {
        let state = lock(&self.state);
        let mut out = String::new();
        let pairs = |out: &mut String, name: &str, help: &str, map: &BTreeMap<Key, u64>| {
            if map.is_empty() {
                return;
            }
            family(out, name, help, "counter");
            for ((namespace, task), n) in map {
                sample(
                    out,
                    name,
                    &[("namespace", namespace), ("task", task)],
                    *n as f64,
                );
            }
        };
        let single = |out: &mut String, name: &str, help: &str, n: u64| {
            if n > 0 {
                family(out, name, help, "counter");
                sample(out, name, &[], n as f64);
            }
        };
        pairs(
            &mut out,
            "onestep_executions_submitted_total",
            "Execution submissions answered with an execution",
            &state.submitted,
        );
        pairs(
            &mut out,
            "onestep_executions_claimed_total",
            "Executions claimed under a lease",
            &state.claimed,
        );
        if !state.completed.is_empty() {
            let name = "onestep_executions_completed_total";
            family(
                &mut out,
                name,
                "Attempts ended, by the execution's new status",
                "counter",
            );
            for ((namespace, task, status), n) in &state.completed {
                sample(
                    &mut out,
                    name,
                    &[("namespace", namespace), ("task", task), ("status", status)],
                    *n as f64,
                );
            }
        }
        pairs(
            &mut out,
            "onestep_execution_leases_lost_total",
            "Leases found lost by a heartbeat",
            &state.leases_lost,
        );
        single(
            &mut out,
            "onestep_executions_reclaimed_total",
            "Expired leases handed back to the queue",
            state.reclaimed,
        );
        single(
            &mut out,
            "onestep_executions_expired_total",
            "Waiting executions ended expired",
            state.expired,
        );
        if !state.pickup.is_empty() {
            let name = "onestep_execution_pickup_latency_seconds";
            family(
                &mut out,
                name,
                "Seconds from available_at to the claim",
                "histogram",
            );
            for ((namespace, task), h) in &state.pickup {
                histogram(
                    &mut out,
                    name,
                    &[("namespace", namespace), ("task", task)],
                    &PICKUP_BUCKETS,
                    h,
                );
            }
        }
        for (name, help, h) in [
            (
                "onestep_execution_heartbeat_batch_size",
                "Leases renewed by one batched heartbeat",
                &state.heartbeat_batches,
            ),
            (
                "onestep_execution_completion_batch_size",
                "Attempts ended by one batched completion",
                &state.completion_batches,
            ),
        ] {
            if let Some(h) = h {
                family(&mut out, name, help, "histogram");
                histogram(&mut out, name, &[], &BATCH_BUCKETS, h);
            }
        }
        if !state.backlog.is_empty() {
            let name = "onestep_execution_queue_depth";
            family(&mut out, name, "Waiting executions (sampled)", "gauge");
            for ((namespace, task), (depth, ready, _)) in &state.backlog {
                for (kind, n) in [("ready", *ready), ("delayed", depth.saturating_sub(*ready))] {
                    sample(
                        &mut out,
                        name,
                        &[("namespace", namespace), ("task", task), ("state", kind)],
                        n as f64,
                    );
                }
            }
            let name = "onestep_execution_oldest_ready_age_seconds";
            family(
                &mut out,
                name,
                "Seconds the oldest ready execution has waited (sampled)",
                "gauge",
            );
            for ((namespace, task), (_, _, age)) in &state.backlog {
                sample(
                    &mut out,
                    name,
                    &[("namespace", namespace), ("task", task)],
                    age.unwrap_or(0.0),
                );
            }
        }
        out
    }
}

fn histogram(out: &mut String, name: &str, labels: &[(&str, &str)], bounds: &[f64], h: &Histogram) {
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0;
    for (bound, n) in bounds.iter().zip(&h.buckets) {
        cumulative += n;
        let le = format!("{bound}");
        let mut with_le = labels.to_vec();
        with_le.push(("le", &le));
        sample(out, &bucket, &with_le, cumulative as f64);
    }
    let mut with_le = labels.to_vec();
    with_le.push(("le", "+Inf"));
    sample(out, &bucket, &with_le, h.count as f64);
    sample(out, &format!("{name}_count"), labels, h.count as f64);
    sample(out, &format!("{name}_sum"), labels, h.sum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn claims_count_and_observe_their_pickup_latency() {
        let metrics = execution_metrics();
        let at = datetime!(2026-01-01 12:00:00 UTC);
        metrics.claimed(
            "ns-claims",
            "t",
            [
                (at - Duration::from_millis(20), at),
                (at + Duration::from_secs(1), at),
            ],
        );
        let text = metrics.render();
        assert!(
            text.contains("onestep_executions_claimed_total{namespace=\"ns-claims\",task=\"t\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("onestep_execution_pickup_latency_seconds_bucket{namespace=\"ns-claims\",task=\"t\",le=\"0.005\"} 1"),
            "a claim before available_at (clock skew) counts as 0 s: {text}"
        );
        assert!(
            text.contains("onestep_execution_pickup_latency_seconds_bucket{namespace=\"ns-claims\",task=\"t\",le=\"0.025\"} 2"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_probe_feeds_the_backlog_gauges_until_it_is_dropped() {
        let metrics = execution_metrics();
        let registration = metrics.register_backlog(
            "ns-backlog",
            &["a".into(), "b".into()],
            Arc::new(|| {
                Box::pin(async {
                    Ok(Some(vec![TaskBacklog {
                        task_name: "a".into(),
                        depth: 7,
                        ready: 5,
                        oldest_ready_at: Some(OffsetDateTime::now_utc() - Duration::from_secs(30)),
                    }]))
                })
            }),
        );
        *lock(&metrics.last_sample) = None;
        metrics.sample_backlog().await;
        let text = metrics.render();
        for line in [
            "onestep_execution_queue_depth{namespace=\"ns-backlog\",task=\"a\",state=\"ready\"} 5",
            "onestep_execution_queue_depth{namespace=\"ns-backlog\",task=\"a\",state=\"delayed\"} 2",
            "onestep_execution_queue_depth{namespace=\"ns-backlog\",task=\"b\",state=\"ready\"} 0",
            "onestep_execution_oldest_ready_age_seconds{namespace=\"ns-backlog\",task=\"b\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
        let age = text
            .lines()
            .find(|l| l.starts_with("onestep_execution_oldest_ready_age_seconds{namespace=\"ns-backlog\",task=\"a\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .expect("an age for task a");
        assert!((30.0..40.0).contains(&age), "age {age}");
        drop(registration);
        assert!(
            !metrics.render().contains("ns-backlog"),
            "a dropped probe leaves no gauge"
        );
    }

    #[test]
    fn batch_sizes_fall_into_their_buckets() {
        let metrics = execution_metrics();
        metrics.completion_batch(3);
        let text = metrics.render();
        assert!(
            text.contains("# TYPE onestep_execution_completion_batch_size histogram"),
            "{text}"
        );
        assert!(
            text.contains("onestep_execution_completion_batch_size_count "),
            "{text}"
        );
    }
}

//! Prometheus metrics from the task-event stream, named and labelled as the reference's
//! `onestep.observability.PrometheusExporter` names them, so its dashboards and alerts work
//! unchanged:
//!
//! | family | type | labels | counts |
//! |---|---|---|---|
//! | `onestep_deliveries_fetched_total` | counter | `app`, `task` | deliveries fetched |
//! | `onestep_tasks_processed_total` | counter | `app`, `task`, `status` | terminal outcomes: `succeeded`, `failed` |
//! | `onestep_task_duration_seconds` | histogram | `app`, `task` | attempt durations |
//! | `onestep_inflight_tasks` | gauge | `app`, `task` | attempts running now |
//! | `onestep_tasks_retried_total` | counter | `app`, `task` | attempts scheduled for retry |
//! | `onestep_tasks_dead_lettered_total` | counter | `app`, `task` | deliveries dead-lettered |
//! | `onestep_tasks_cancelled_total` | counter | `app`, `task` | attempts cancelled |
//! | `onestep_task_failures_total` | counter | `app`, `task`, `failure_kind` | failures: `error`, `timeout`, `cancelled` |
//! | `onestep_build_info` | gauge | `version` | always 1 |
//!
//! Register [`PrometheusExporter::record`] with [`AppBuilder::on_event`](crate::AppBuilder::on_event)
//! and serve [`PrometheusExporter::render`].

pub mod execution;
pub mod handler;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::event::{TaskEvent, TaskEventKind};
use crate::failure::FailureKind;

/// The duration buckets, in seconds (the reference's and Prometheus' defaults).
pub const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

type Series = (String, String);

/// A custom family's values by their labels (`task` first).
type CustomSeries = BTreeMap<Vec<(String, String)>, f64>;

#[derive(Default)]
struct Histogram {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

#[derive(Default)]
struct State {
    fetched: BTreeMap<Series, u64>,
    processed: BTreeMap<(String, String, &'static str), u64>,
    durations: BTreeMap<Series, Histogram>,
    inflight: BTreeMap<Series, u64>,
    retried: BTreeMap<Series, u64>,
    dead_lettered: BTreeMap<Series, u64>,
    cancelled: BTreeMap<Series, u64>,
    failures: BTreeMap<(String, String, &'static str), u64>,
    /// Custom series (handlers' `ctx.metrics`): by name, its kind and values by labels
    /// (`task` first, then the user's, sorted).
    custom: BTreeMap<String, (CustomKind, CustomSeries)>,
}

/// A custom series' kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomKind {
    /// Only grows: updates are increments.
    Counter,
    /// Set to a value.
    Gauge,
}

impl CustomKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
        }
    }
}

/// The families the exporter owns; a custom series may not take one of these names.
const RESERVED: [&str; 12] = [
    "onestep_tasks_processed_total",
    "onestep_task_duration_seconds",
    "onestep_task_duration_seconds_bucket",
    "onestep_task_duration_seconds_count",
    "onestep_task_duration_seconds_sum",
    "onestep_inflight_tasks",
    "onestep_tasks_retried_total",
    "onestep_tasks_dead_lettered_total",
    "onestep_tasks_cancelled_total",
    "onestep_deliveries_fetched_total",
    "onestep_task_failures_total",
    "onestep_build_info",
];

/// Counts task events into the reference's metric families.
pub struct PrometheusExporter {
    version: String,
    state: Mutex<State>,
}

impl Default for PrometheusExporter {
    fn default() -> Self {
        Self::new(crate::VERSION)
    }
}

impl std::fmt::Debug for PrometheusExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusExporter")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl PrometheusExporter {
    /// An exporter whose `onestep_build_info` carries `version`.
    pub fn new(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            state: Mutex::default(),
        }
    }

    /// Accounts one event. An attempt opens with `started` and closes with one of
    /// `succeeded`, `failed`, `cancelled` or `retried`; the `retried` that follows a
    /// `cancelled` (a cancelled attempt handed back) counts a retry and closes nothing twice,
    /// and `dead_lettered` (always followed by `failed`) has only its own counter.
    pub fn record(&self, event: &TaskEvent) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let series = (event.app.clone(), event.task.clone());
        let duration = event.duration.map(|d| d.as_secs_f64());
        match event.kind {
            TaskEventKind::Fetched => *state.fetched.entry(series).or_default() += 1,
            TaskEventKind::Started => *state.inflight.entry(series).or_default() += 1,
            TaskEventKind::Succeeded => {
                *state
                    .processed
                    .entry((series.0.clone(), series.1.clone(), "succeeded"))
                    .or_default() += 1;
                state.finish(series, duration);
            }
            TaskEventKind::Retried => {
                *state.retried.entry(series.clone()).or_default() += 1;
                let after_cancel = event
                    .failure
                    .as_ref()
                    .is_some_and(|f| f.kind == FailureKind::Cancelled);
                if !after_cancel {
                    state.finish(series, duration);
                }
            }
            TaskEventKind::Failed => {
                *state
                    .processed
                    .entry((series.0.clone(), series.1.clone(), "failed"))
                    .or_default() += 1;
                if let Some(f) = &event.failure {
                    *state
                        .failures
                        .entry((series.0.clone(), series.1.clone(), f.kind.as_str()))
                        .or_default() += 1;
                }
                state.finish(series, duration);
            }
            TaskEventKind::DeadLettered => *state.dead_lettered.entry(series).or_default() += 1,
            TaskEventKind::Cancelled => {
                *state.cancelled.entry(series.clone()).or_default() += 1;
                state.finish(series, duration);
            }
        }
    }

    /// Updates a handler's custom series (the reference's `ctx.metrics.counter(…).inc(n)` and
    /// `gauge(…).set(v)`): a counter grows by `value`, a gauge becomes `value`. Rendered after
    /// the runtime's families with a `task` label first; a reserved name is ignored.
    pub fn update_custom(
        &self,
        task: &str,
        name: &str,
        kind: CustomKind,
        labels: &BTreeMap<String, String>,
        value: f64,
    ) {
        if RESERVED.contains(&name) || !value.is_finite() {
            return;
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let family = state
            .custom
            .entry(name.to_owned())
            .or_insert_with(|| (kind, BTreeMap::new()));
        if family.0 != kind {
            return;
        }
        let key: Vec<(String, String)> = std::iter::once(("task".to_owned(), task.to_owned()))
            .chain(labels.iter().map(|(k, v)| (k.clone(), v.clone())))
            .collect();
        let slot = family.1.entry(key).or_insert(0.0);
        match kind {
            CustomKind::Counter => *slot += value,
            CustomKind::Gauge => *slot = value,
        }
    }

    /// Attempts of `task` running now.
    pub fn inflight(&self, app: &str, task: &str) -> u64 {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state
            .inflight
            .get(&(app.to_owned(), task.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// The Prometheus text exposition (version 0.0.4) of every family.
    pub fn render(&self) -> String {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        counter(
            &mut out,
            "onestep_deliveries_fetched_total",
            "Deliveries fetched from sources",
            &state.fetched,
        );
        family(
            &mut out,
            "onestep_tasks_processed_total",
            "Terminal task outcomes",
            "counter",
        );
        for ((app, task, status), value) in &state.processed {
            sample(
                &mut out,
                "onestep_tasks_processed_total",
                &[("app", app), ("task", task), ("status", status)],
                *value as f64,
            );
        }
        family(
            &mut out,
            "onestep_task_duration_seconds",
            "Task attempt duration in seconds",
            "histogram",
        );
        for ((app, task), h) in &state.durations {
            let mut cumulative = 0;
            for (bound, count) in BUCKETS.iter().zip(h.buckets) {
                cumulative += count;
                let le = format!("{bound}");
                sample(
                    &mut out,
                    "onestep_task_duration_seconds_bucket",
                    &[("app", app), ("task", task), ("le", &le)],
                    cumulative as f64,
                );
            }
            sample(
                &mut out,
                "onestep_task_duration_seconds_bucket",
                &[("app", app), ("task", task), ("le", "+Inf")],
                h.count as f64,
            );
            sample(
                &mut out,
                "onestep_task_duration_seconds_count",
                &[("app", app), ("task", task)],
                h.count as f64,
            );
            sample(
                &mut out,
                "onestep_task_duration_seconds_sum",
                &[("app", app), ("task", task)],
                h.sum,
            );
        }
        family(
            &mut out,
            "onestep_inflight_tasks",
            "Task attempts currently in flight",
            "gauge",
        );
        for ((app, task), value) in &state.inflight {
            sample(
                &mut out,
                "onestep_inflight_tasks",
                &[("app", app), ("task", task)],
                *value as f64,
            );
        }
        counter(
            &mut out,
            "onestep_tasks_retried_total",
            "Task attempts scheduled for retry",
            &state.retried,
        );
        counter(
            &mut out,
            "onestep_tasks_dead_lettered_total",
            "Deliveries published to dead-letter sinks",
            &state.dead_lettered,
        );
        counter(
            &mut out,
            "onestep_tasks_cancelled_total",
            "Task attempts cancelled",
            &state.cancelled,
        );
        family(
            &mut out,
            "onestep_task_failures_total",
            "Task failures by failure kind",
            "counter",
        );
        for ((app, task, kind), value) in &state.failures {
            sample(
                &mut out,
                "onestep_task_failures_total",
                &[("app", app), ("task", task), ("failure_kind", kind)],
                *value as f64,
            );
        }
        family(&mut out, "onestep_build_info", "Build metadata", "gauge");
        sample(
            &mut out,
            "onestep_build_info",
            &[("version", &self.version)],
            1.0,
        );
        for (name, (kind, series)) in &state.custom {
            let _ = writeln!(out, "# TYPE {name} {}", kind.as_str());
            for (labels, value) in series {
                let labels: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                sample(&mut out, name, &labels, *value);
            }
        }
        out
    }
}

impl State {
    /// Closes an attempt of `series`: its duration observed, the in-flight gauge lowered.
    fn finish(&mut self, series: Series, duration: Option<f64>) {
        if let Some(seconds) = duration {
            let h = self.durations.entry(series.clone()).or_default();
            h.count += 1;
            h.sum += seconds;
            for (bound, count) in BUCKETS.iter().zip(h.buckets.iter_mut()) {
                if seconds <= *bound {
                    *count += 1;
                }
            }
        }
        if let Some(n) = self.inflight.get_mut(&series) {
            *n = n.saturating_sub(1);
        }
    }
}

pub(crate) fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, values: &BTreeMap<Series, u64>) {
    family(out, name, help, "counter");
    for ((app, task), value) in values {
        sample(out, name, &[("app", app), ("task", task)], *value as f64);
    }
}

/// One sample line; label values escaped as the exposition format requires.
pub(crate) fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    let value = if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    };
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{FailureInfo, Stage, TaskError};
    use std::time::Duration;

    fn event(kind: TaskEventKind, failure: Option<FailureKind>) -> TaskEvent {
        TaskEvent {
            kind,
            app: "a".into(),
            task: "t\"1".into(),
            source: None,
            attempt: 1,
            emitted_at: time::OffsetDateTime::now_utc(),
            duration: Some(Duration::from_millis(30)),
            failure: failure
                .map(|k| FailureInfo::from_error(k, Stage::Handler, &TaskError::msg("x"))),
            meta: serde_json::Map::new(),
        }
    }

    #[test]
    fn events_count_into_the_reference_families() {
        let exporter = PrometheusExporter::new("9.9.9");
        for (kind, failure) in [
            (TaskEventKind::Fetched, None),
            (TaskEventKind::Started, None),
            (TaskEventKind::Succeeded, None),
            (TaskEventKind::Started, None),
            (TaskEventKind::Cancelled, Some(FailureKind::Cancelled)),
            (TaskEventKind::Retried, Some(FailureKind::Cancelled)),
            (TaskEventKind::Started, None),
            (TaskEventKind::DeadLettered, Some(FailureKind::Timeout)),
            (TaskEventKind::Failed, Some(FailureKind::Timeout)),
        ] {
            exporter.record(&event(kind, failure));
        }
        let labels = r#"app="a",task="t\"1""#;
        let mut user = BTreeMap::new();
        user.insert("kind".to_owned(), "x".to_owned());
        exporter.update_custom("t", "handled_total", CustomKind::Counter, &user, 2.0);
        exporter.update_custom("t", "handled_total", CustomKind::Counter, &user, 1.0);
        exporter.update_custom("t", "depth", CustomKind::Gauge, &BTreeMap::new(), 7.5);
        exporter.update_custom(
            "t",
            "onestep_build_info",
            CustomKind::Gauge,
            &BTreeMap::new(),
            3.0,
        );
        let text = exporter.render();
        for line in [
            "# TYPE handled_total counter".to_owned(),
            r#"handled_total{task="t",kind="x"} 3"#.to_owned(),
            r#"depth{task="t"} 7.5"#.to_owned(),
            format!("onestep_deliveries_fetched_total{{{labels}}} 1"),
            format!("onestep_tasks_processed_total{{{labels},status=\"failed\"}} 1"),
            format!("onestep_tasks_processed_total{{{labels},status=\"succeeded\"}} 1"),
            format!("onestep_task_duration_seconds_bucket{{{labels},le=\"0.025\"}} 0"),
            format!("onestep_task_duration_seconds_bucket{{{labels},le=\"0.05\"}} 3"),
            format!("onestep_task_duration_seconds_bucket{{{labels},le=\"+Inf\"}} 3"),
            format!("onestep_task_duration_seconds_count{{{labels}}} 3"),
            format!("onestep_inflight_tasks{{{labels}}} 0"),
            format!("onestep_tasks_retried_total{{{labels}}} 1"),
            format!("onestep_tasks_dead_lettered_total{{{labels}}} 1"),
            format!("onestep_tasks_cancelled_total{{{labels}}} 1"),
            format!("onestep_task_failures_total{{{labels},failure_kind=\"timeout\"}} 1"),
            "onestep_build_info{version=\"9.9.9\"} 1".to_owned(),
            "# TYPE onestep_task_duration_seconds histogram".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(text.matches("onestep_build_info{").count(), 1, "{text}");
    }
}

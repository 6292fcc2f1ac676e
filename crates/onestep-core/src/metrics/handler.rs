//! A handler's own series: [`TaskContext::metrics`](crate::TaskContext::metrics), the reference's
//! `ctx.metrics.counter(name, labels=…).inc(n)` and `ctx.metrics.gauge(name, labels=…).set(v)`.
//!
//! The series go to the app's [`PrometheusExporter`] (set with
//! [`AppBuilder::metrics`](crate::AppBuilder::metrics); `onestep run --metrics-addr` sets it) and
//! are rendered after the runtime's families with a `task` label first. Without an exporter the
//! updates are checked and dropped. Names and labels are checked as the reference checks them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{CustomKind, PrometheusExporter};
use crate::error::{Error, Result};

/// Label keys the reference reserves for its own use.
const RESERVED_LABELS: [&str; 5] = ["service", "environment", "task", "instance_id", "metric"];

/// The custom series of one task, from [`TaskContext::metrics`](crate::TaskContext::metrics).
///
/// ```
/// # fn handler(ctx: onestep_core::TaskContext) -> onestep_core::Result<()> {
/// ctx.metrics().counter("rows_imported", &[("table", "orders")])?.inc(120.0)?;
/// ctx.metrics().gauge("queue_lag_seconds", &[])?.set(2.5)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TaskMetrics {
    pub(crate) exporter: Option<Arc<PrometheusExporter>>,
    pub(crate) task: Arc<str>,
}

impl TaskMetrics {
    /// The counter `name` with `labels`. Fails on a name that is not a Prometheus metric name
    /// (`[a-zA-Z_:][a-zA-Z0-9_:]*`), a label key that is not a label name
    /// (`[a-zA-Z_][a-zA-Z0-9_]*`) or is reserved (`service`, `environment`, `task`,
    /// `instance_id`, `metric`).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Result<Counter> {
        Ok(Counter(self.series(name, labels, CustomKind::Counter)?))
    }

    /// The gauge `name` with `labels`; the same checks as [`counter`](Self::counter).
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Result<Gauge> {
        Ok(Gauge(self.series(name, labels, CustomKind::Gauge)?))
    }

    fn series(&self, name: &str, labels: &[(&str, &str)], kind: CustomKind) -> Result<Series> {
        let name = name.trim();
        if !is_name(name, true) {
            return Err(Error::invalid(
                "metric name",
                format!("must match [a-zA-Z_:][a-zA-Z0-9_:]*, got {name:?}"),
            ));
        }
        let mut keyed = BTreeMap::new();
        for (key, value) in labels {
            let key = key.trim();
            if !is_name(key, false) {
                return Err(Error::invalid(
                    format!("metric {name} label"),
                    format!("must match [a-zA-Z_][a-zA-Z0-9_]*, got {key:?}"),
                ));
            }
            if RESERVED_LABELS.contains(&key) {
                return Err(Error::invalid(
                    format!("metric {name} label {key:?}"),
                    format!("is reserved ({})", RESERVED_LABELS.join(", ")),
                ));
            }
            keyed.insert(key.to_owned(), (*value).to_owned());
        }
        Ok(Series {
            exporter: self.exporter.clone(),
            task: self.task.clone(),
            name: name.to_owned(),
            kind,
            labels: keyed,
        })
    }
}

/// A Prometheus metric name (`colons`) or label name.
fn is_name(text: &str, colons: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (colons && c == ':')
            || (!first && c.is_ascii_digit())
    };
    let mut chars = text.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

#[derive(Debug, Clone)]
struct Series {
    exporter: Option<Arc<PrometheusExporter>>,
    task: Arc<str>,
    name: String,
    kind: CustomKind,
    labels: BTreeMap<String, String>,
}

impl Series {
    fn update(&self, value: f64) {
        if let Some(exporter) = &self.exporter {
            exporter.update_custom(&self.task, &self.name, self.kind, &self.labels, value);
        }
    }
}

fn finite(field: &str, value: f64) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::invalid(
            field,
            format!("must be finite, got {value}"),
        ))
    }
}

/// A custom counter; see [`TaskMetrics::counter`].
#[derive(Debug, Clone)]
pub struct Counter(Series);

impl Counter {
    /// Adds `amount` (finite, >= 0).
    pub fn inc(&self, amount: f64) -> Result<()> {
        let amount = finite("counter increment", amount)?;
        if amount < 0.0 {
            return Err(Error::invalid(
                "counter increment",
                format!("must be >= 0, got {amount}"),
            ));
        }
        self.0.update(amount);
        Ok(())
    }
}

/// A custom gauge; see [`TaskMetrics::gauge`].
#[derive(Debug, Clone)]
pub struct Gauge(Series);

impl Gauge {
    /// Sets the gauge to `value` (finite).
    pub fn set(&self, value: f64) -> Result<()> {
        self.0.update(finite("gauge value", value)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(exporter: &Arc<PrometheusExporter>) -> TaskMetrics {
        TaskMetrics {
            exporter: Some(exporter.clone()),
            task: Arc::from("import"),
        }
    }

    #[test]
    fn series_reach_the_exporter_with_the_task_label_first() {
        let exporter = Arc::new(PrometheusExporter::new("test"));
        let m = metrics(&exporter);
        let rows = m.counter("rows_imported", &[("table", "orders")]).unwrap();
        rows.inc(2.0).unwrap();
        rows.inc(3.0).unwrap();
        m.gauge("lag_seconds", &[]).unwrap().set(1.5).unwrap();
        let text = exporter.render();
        assert!(
            text.contains("rows_imported{task=\"import\",table=\"orders\"} 5"),
            "{text}"
        );
        assert!(text.contains("lag_seconds{task=\"import\"} 1.5"), "{text}");
    }

    #[test]
    fn bad_names_labels_and_values_are_refused_by_field() {
        let exporter = Arc::new(PrometheusExporter::new("test"));
        let m = metrics(&exporter);
        let err = |r: Result<()>| r.unwrap_err().to_string();
        assert_eq!(
            m.counter("9lives", &[]).unwrap_err().to_string(),
            "metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*, got \"9lives\""
        );
        assert_eq!(
            m.gauge("ok", &[("bad-key", "v")]).unwrap_err().to_string(),
            "metric ok label must match [a-zA-Z_][a-zA-Z0-9_]*, got \"bad-key\""
        );
        assert!(
            m.counter("ok", &[("task", "x")])
                .unwrap_err()
                .to_string()
                .starts_with("metric ok label \"task\" is reserved")
        );
        let c = m.counter("ok_total", &[]).unwrap();
        assert_eq!(err(c.inc(-1.0)), "counter increment must be >= 0, got -1");
        assert_eq!(
            err(m.gauge("g", &[]).unwrap().set(f64::NAN)),
            "gauge value must be finite, got NaN"
        );
        assert!(!exporter.render().contains("ok_total"), "nothing recorded");
    }

    #[test]
    fn without_an_exporter_updates_are_checked_and_dropped() {
        let m = TaskMetrics {
            exporter: None,
            task: Arc::from("t"),
        };
        m.counter("c", &[]).unwrap().inc(1.0).unwrap();
        assert!(m.counter("c", &[]).unwrap().inc(f64::INFINITY).is_err());
    }
}

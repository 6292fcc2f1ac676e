//! This crate's resource types: `memory`, `interval` and `cron`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{BuildContext, BuildError, Built, Catalog, FieldDoc, Fields, ResourceType, Role};
use crate::source::interval::ScheduleBuilder;
use crate::source::schedule::Schedule;
use crate::{CronSource, IntervalSource, MemoryQueue, Overlap};

/// Adds `memory`, `interval` and `cron`.
pub(super) fn register(catalog: &mut Catalog) {
    catalog.add(MemoryType).add(IntervalType).add(CronType);
}

const MEMORY_FIELDS: &[FieldDoc] = &[
    FieldDoc::required(
        "maxsize",
        "integer",
        "the most envelopes the queue holds (sends wait when full)",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("100"),
        "the most deliveries one fetch returns",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("0.1"),
        "how long a fetch waits for the first envelope",
    ),
];

/// `type: memory`: a [`MemoryQueue`], source and sink.
struct MemoryType;

/// The fields of a `memory` resource.
struct MemoryOptions {
    /// `None`: unbounded (allowed without `--strict`, as the reference does).
    maxsize: Option<usize>,
    batch_size: Option<usize>,
    poll_interval: Option<Duration>,
}

impl ResourceType for MemoryType {
    type Options = MemoryOptions;

    fn name(&self) -> &'static str {
        "memory"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source, Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        MEMORY_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("MemoryQueue")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<MemoryOptions> {
        if !f.has("maxsize") && f.strict() {
            f.problem("maxsize", "is required (a positive integer)");
        }
        Some(MemoryOptions {
            maxsize: f.opt_count("maxsize", 1),
            batch_size: f.opt_count("batch_size", 1),
            poll_interval: f
                .opt_number("poll_interval_s", false)
                .map(Duration::from_secs_f64),
        })
    }

    fn build(
        &self,
        name: &str,
        o: MemoryOptions,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let mut queue = match o.maxsize {
            Some(maxsize) => MemoryQueue::new(name, maxsize)?,
            None => MemoryQueue::unbounded(name),
        };
        if let Some(b) = o.batch_size {
            queue = queue.with_batch_size(b)?;
        }
        if let Some(p) = o.poll_interval {
            queue = queue.with_poll_interval(p)?;
        }
        Ok(Built::both(Arc::new(queue)))
    }
}

const SCHEDULE_COMMON: [FieldDoc; 6] = [
    FieldDoc::optional("payload", "json", Some("null"), "the body of every run"),
    FieldDoc::optional(
        "immediate",
        "boolean",
        Some("false"),
        "emit one run at start",
    ),
    FieldDoc::optional(
        "overlap",
        "string",
        Some("allow"),
        "allow | skip | queue: runs due while one is in flight",
    ),
    FieldDoc::optional(
        "timezone",
        "string",
        Some("system"),
        "IANA time zone of the schedule",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        None,
        "how often the runner checks the schedule",
    ),
    FieldDoc::optional(
        "max_queued_runs",
        "integer",
        Some("1000"),
        "queued runs kept with overlap: queue",
    ),
];

const TIMEZONE_NAME: FieldDoc =
    FieldDoc::optional("timezone_name", "string", None, "alias of timezone");

const INTERVAL_FIELDS: &[FieldDoc] = &[
    FieldDoc::optional(
        "name",
        "string",
        None,
        "source name (default interval:<n>s)",
    ),
    FieldDoc::optional("days", "number", Some("0"), "interval days"),
    FieldDoc::optional("hours", "number", Some("0"), "interval hours"),
    FieldDoc::optional("minutes", "number", Some("0"), "interval minutes"),
    FieldDoc::optional("seconds", "number", Some("0"), "interval seconds"),
    SCHEDULE_COMMON[0],
    SCHEDULE_COMMON[1],
    SCHEDULE_COMMON[2],
    SCHEDULE_COMMON[3],
    TIMEZONE_NAME,
    SCHEDULE_COMMON[4],
    SCHEDULE_COMMON[5],
];

const CRON_FIELDS: &[FieldDoc] = &[
    FieldDoc::optional(
        "name",
        "string",
        None,
        "source name (default cron:<expression>)",
    ),
    FieldDoc::required(
        "expression",
        "string",
        "5-field cron expression or @hourly … @yearly",
    ),
    SCHEDULE_COMMON[0],
    SCHEDULE_COMMON[1],
    SCHEDULE_COMMON[2],
    SCHEDULE_COMMON[3],
    TIMEZONE_NAME,
    SCHEDULE_COMMON[4],
    SCHEDULE_COMMON[5],
];

/// The fields `interval` and `cron` share.
struct ScheduleOptions {
    name: String,
    payload: Option<Value>,
    immediate: Option<bool>,
    overlap: Option<Overlap>,
    time_zone: Option<String>,
    poll_interval: Option<Duration>,
    max_queued_runs: Option<usize>,
}

impl ScheduleOptions {
    fn read(f: &mut Fields<'_>) -> Self {
        let immediate = f.opt_bool("immediate");
        let overlap = f.opt_string("overlap").and_then(|o| match o.parse() {
            Ok(overlap) => Some(overlap),
            Err(_) => {
                f.problem(
                    "overlap",
                    format!("must be one of allow, skip, queue; got {o:?}"),
                );
                None
            }
        });
        let mut time_zone = None;
        for key in ["timezone", "timezone_name"] {
            if let Some(tz) = f.opt_string(key) {
                if known_time_zone(&tz) {
                    time_zone = time_zone.or(Some(tz));
                } else {
                    f.problem(key, format!("{tz:?} is not a known IANA time zone"));
                }
            }
        }
        Self {
            name: f
                .value("name")
                .and_then(Value::as_str)
                .unwrap_or(f.resource_name())
                .to_string(),
            payload: f.value("payload").cloned(),
            immediate,
            overlap,
            time_zone,
            poll_interval: f
                .opt_number("poll_interval_s", false)
                .map(Duration::from_secs_f64),
            max_queued_runs: f.opt_count("max_queued_runs", 1),
        }
    }

    fn apply<S: Schedule>(self, mut b: ScheduleBuilder<S>) -> Result<Built, BuildError> {
        b = b.name(self.name);
        if let Some(p) = self.payload {
            b = b.payload(p);
        }
        if let Some(i) = self.immediate {
            b = b.immediate(i);
        }
        if let Some(o) = self.overlap {
            b = b.overlap(o);
        }
        if let Some(tz) = &self.time_zone {
            b = b.time_zone(tz)?;
        }
        if let Some(p) = self.poll_interval {
            b = b.poll_interval(p);
        }
        if let Some(m) = self.max_queued_runs {
            b = b.max_queued_runs(m)?;
        }
        Ok(Built::Source(Arc::new(b.build())))
    }
}

fn known_time_zone(name: &str) -> bool {
    IntervalSource::every(Duration::from_secs(1))
        .and_then(|b| b.time_zone(name))
        .is_ok()
}

/// `type: interval`: runs every `days`/`hours`/`minutes`/`seconds`.
struct IntervalType;

impl ResourceType for IntervalType {
    type Options = (Duration, ScheduleOptions);

    fn name(&self) -> &'static str {
        "interval"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        INTERVAL_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("IntervalSource")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let mut total = 0.0;
        for (key, unit) in [
            ("days", 86_400.0),
            ("hours", 3_600.0),
            ("minutes", 60.0),
            ("seconds", 1.0),
        ] {
            total += f.opt_number(key, true).unwrap_or(0.0) * unit;
        }
        if total > crate::clock::MAX_SECONDS {
            f.problem("", "interval must be at most 100 years");
        }
        if total <= 0.0 {
            f.problem(
                "",
                "interval must be greater than zero: set days, hours, minutes or seconds",
            );
        }
        let schedule = ScheduleOptions::read(f);
        let every = (total > 0.0 && total <= crate::clock::MAX_SECONDS)
            .then(|| Duration::from_secs_f64(total))?;
        Some((every, schedule))
    }

    fn build(
        &self,
        _name: &str,
        (every, schedule): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        schedule.apply(IntervalSource::every(every)?)
    }
}

/// `type: cron`: runs on a cron expression.
struct CronType;

impl ResourceType for CronType {
    type Options = (String, ScheduleOptions);

    fn name(&self) -> &'static str {
        "cron"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        CRON_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("CronSource")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<Self::Options> {
        let expression = f
            .string("expression")
            .and_then(|expr| match CronSource::on(&expr) {
                Ok(_) => Some(expr),
                Err(e) => {
                    let text = e.to_string();
                    f.problem(
                        "expression",
                        text.trim_start_matches("expression ").to_string(),
                    );
                    None
                }
            });
        let schedule = ScheduleOptions::read(f);
        Some((expression?, schedule))
    }

    fn build(
        &self,
        _name: &str,
        (expression, schedule): Self::Options,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        schedule.apply(CronSource::on(&expression)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CatalogEntry, ResourceSpec};

    fn spec(type_name: &str, fields: Value) -> ResourceSpec {
        ResourceSpec {
            name: "r".into(),
            type_name: type_name.into(),
            fields: fields.as_object().cloned().unwrap_or_default(),
            path: "resources.r".into(),
        }
    }

    fn problems(rtype: &dyn CatalogEntry, fields: Value, strict: bool) -> Vec<String> {
        rtype
            .check(&spec(rtype.name(), fields), strict)
            .0
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn every_documented_field_is_read_and_nothing_else() {
        assert_eq!(Catalog::core().audit(), Vec::<String>::new());
    }

    #[test]
    fn memory_problems_keep_their_messages() {
        let memory = &MemoryType as &dyn CatalogEntry;
        assert_eq!(
            problems(memory, serde_json::json!({}), true),
            ["resources.r.maxsize is required (a positive integer)"]
        );
        assert!(problems(memory, serde_json::json!({}), false).is_empty());
        assert_eq!(
            problems(
                memory,
                serde_json::json!({"maxsize": 0, "poll_interval_s": "x"}),
                false
            ),
            [
                "resources.r.maxsize must be an integer >= 1, got 0",
                "resources.r.poll_interval_s expected a number > 0, got a string"
            ]
        );
    }

    #[test]
    fn schedules_report_every_problem() {
        let interval = &IntervalType as &dyn CatalogEntry;
        assert_eq!(
            problems(
                interval,
                serde_json::json!({"seconds": -1, "overlap": "never", "timezone": "Mars/Base"}),
                false
            ),
            [
                "resources.r.seconds must be a finite number >= 0, got -1",
                "resources.r interval must be greater than zero: set days, hours, minutes or seconds",
                "resources.r.overlap must be one of allow, skip, queue; got \"never\"",
                "resources.r.timezone \"Mars/Base\" is not a known IANA time zone",
            ]
        );
        let cron = &CronType as &dyn CatalogEntry;
        assert_eq!(
            problems(cron, serde_json::json!({}), false),
            ["resources.r.expression is required (a non-empty string)"]
        );
    }
}

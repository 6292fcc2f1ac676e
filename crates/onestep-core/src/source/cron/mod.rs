//! [`CronSource`]: runs on a 5-field cron schedule in an IANA time zone.

pub mod expr;

use std::time::Duration;

use jiff::Zoned;
use serde_json::{Map, Value};

pub use expr::{CronError, CronExpression};

use super::interval::ScheduleBuilder;
use super::schedule::{Schedule, ScheduleOptions, ScheduleSource};
use crate::error::{Error, Result};

/// A cron expression as a [`Schedule`], evaluated in the source's time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: CronExpression,
}

impl CronSchedule {
    /// The parsed expression.
    pub fn expression(&self) -> &CronExpression {
        &self.expression
    }
}

impl Schedule for CronSchedule {
    fn initial_fire_at(&self, now: &Zoned) -> Option<Zoned> {
        let tz = now.time_zone();
        self.expression
            .first_at_or_after(now.timestamp(), tz)
            .map(|ts| ts.to_zoned(tz.clone()))
    }

    fn next_fire_after(&self, fire: &Zoned) -> Option<Zoned> {
        let tz = fire.time_zone();
        self.expression
            .next_after(fire.timestamp(), tz)
            .map(|ts| ts.to_zoned(tz.clone()))
    }

    fn default_name(&self) -> String {
        format!("cron:{}", self.expression.as_str())
    }

    fn describe(&self, out: &mut Map<String, Value>) {
        out.insert("type".into(), Value::from("cron"));
        out.insert("expression".into(), Value::from(self.expression.as_str()));
    }
}

/// A source that emits a run whenever a cron expression matches, in its time zone.
///
/// Standard 5-field expressions (`minute hour day-of-month month day-of-week`) with lists, ranges,
/// steps, month and weekday names, and the macros `@hourly`, `@daily`, `@weekly`, `@monthly`,
/// `@yearly`. When both day fields are restricted a day matches if either does.
///
/// # Example
/// ```
/// use onestep_core::CronSource;
///
/// let nightly = CronSource::on("30 2 * * mon-fri")?
///     .time_zone("Europe/London")?
///     .payload(serde_json::json!({"report": "daily"}))
///     .build();
/// assert_eq!(onestep_core::Resource::name(&nightly), "cron:30 2 * * mon-fri");
/// # Ok::<(), onestep_core::Error>(())
/// ```
pub type CronSource = ScheduleSource<CronSchedule>;

impl CronSource {
    /// Starts building a source for `expression`; a malformed expression fails here, naming the
    /// field and the allowed range. Polls every second.
    pub fn on(expression: &str) -> Result<ScheduleBuilder<CronSchedule>> {
        let expression = CronExpression::parse(expression)
            .map_err(|e| Error::invalid("expression", e.to_string()))?;
        if !expression.is_satisfiable() {
            return Err(Error::invalid(
                "expression",
                format!("{:?} never matches a real date", expression.as_str()),
            ));
        }
        Ok(ScheduleBuilder {
            schedule: CronSchedule { expression },
            options: ScheduleOptions::new(Duration::from_secs(1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::source::{Resource, Source};
    use time::macros::datetime;

    #[tokio::test]
    async fn cron_source_fires_on_matching_minutes_in_its_time_zone() {
        let clock = ManualClock::new(datetime!(2026-03-07 23:59:30 UTC));
        let s = CronSource::on("0 8 * * *")
            .unwrap()
            .time_zone("Asia/Shanghai")
            .unwrap()
            .clock(Arc::new(clock.clone()))
            .build();
        s.open().await.unwrap();
        assert!(s.fetch(5).await.unwrap().is_empty());
        clock.advance(Duration::from_secs(30));
        let runs = s.fetch(5).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(
            runs[0].envelope().meta["scheduled_at"],
            "2026-03-08T08:00:00+08:00"
        );
        assert_eq!(runs[0].envelope().meta["source"], "cron:0 8 * * *");
    }

    #[test]
    fn malformed_and_impossible_expressions_are_rejected_at_construction() {
        let err = CronSource::on("0 24 * * *").err().unwrap().to_string();
        assert!(
            err.contains("'hour' value 24 is out of range 0..=23"),
            "{err}"
        );
        let err = CronSource::on("0 0 30 2 *").err().unwrap().to_string();
        assert!(err.contains("never matches a real date"), "{err}");
    }
}

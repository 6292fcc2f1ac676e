//! [`Progress`]: a handler's progress reports, written to the store at most once per
//! [`PROGRESS_INTERVAL`] per attempt (the latest value wins; the last one is written before the
//! attempt completes).

use std::future::Future;
use std::pin::Pin;

use super::*;

/// The least time between two progress writes of one attempt.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The largest progress value, as JSON text.
pub const MAX_PROGRESS_BYTES: usize = 65_536;

/// Stores one progress value for the attempt; `false` when it was not stored (the lease is gone,
/// or the table has no progress column).
pub(super) type ProgressWriter =
    Arc<dyn Fn(Value) -> Pin<Box<dyn Future<Output = ExecutionResult<bool>> + Send>> + Send + Sync>;

#[derive(Default)]
struct Pending {
    value: Option<Value>,
    last_write: Option<std::time::Instant>,
    flusher: bool,
}

/// One attempt's progress: the latest report not yet written, and the writer.
pub(super) struct Progress {
    writer: ProgressWriter,
    pending: Mutex<Pending>,
    /// Held while a value is taken and written, so writes land in report order.
    writing: tokio::sync::Mutex<()>,
}

impl Progress {
    pub(super) fn new(writer: ProgressWriter) -> Arc<Self> {
        Arc::new(Self {
            writer,
            pending: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `value` as the latest report and makes sure a write follows within
    /// [`PROGRESS_INTERVAL`] of the previous one.
    pub(super) fn report(self: &Arc<Self>, value: Value) -> ExecutionResult<()> {
        let text = serde_json::to_string(&value)
            .map_err(|e| ExecutionError::invalid("progress", format!("is not JSON: {e}")))?;
        if text.len() > MAX_PROGRESS_BYTES {
            return Err(ExecutionError::invalid(
                "progress",
                format!(
                    "must be at most {MAX_PROGRESS_BYTES} bytes as JSON, got {}",
                    text.len()
                ),
            ));
        }
        if text.contains("\\u0000") {
            return Err(ExecutionError::invalid(
                "progress",
                "must not contain the NUL character (\\u0000)",
            ));
        }
        let wait = {
            let mut pending = self.pending();
            pending.value = Some(value);
            if pending.flusher {
                return Ok(());
            }
            pending.flusher = true;
            pending.last_write.map_or(Duration::ZERO, |at| {
                PROGRESS_INTERVAL.saturating_sub(at.elapsed())
            })
        };
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            this.pending().flusher = false;
            this.flush().await;
        });
        Ok(())
    }

    /// Writes the latest report now, if one is waiting.
    pub(super) async fn flush(&self) {
        let _order = self.writing.lock().await;
        let Some(value) = self.pending().value.take() else {
            return;
        };
        if let Err(err) = (self.writer)(value).await {
            tracing::debug!(error = %err, "progress write failed");
        }
        self.pending().last_write = Some(std::time::Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recording() -> (Arc<Progress>, Arc<Mutex<Vec<Value>>>) {
        let written = Arc::new(Mutex::new(Vec::new()));
        let log = written.clone();
        let progress = Progress::new(Arc::new(move |value| {
            let log = log.clone();
            Box::pin(async move {
                log.lock().unwrap().push(value);
                Ok(true)
            })
        }));
        (progress, written)
    }

    #[tokio::test(start_paused = true)]
    async fn reports_are_coalesced_to_one_write_per_interval_latest_value_first() {
        let (progress, written) = recording();
        for done in 0..50 {
            progress.report(json!({"done": done})).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            *written.lock().unwrap(),
            vec![json!({"done": 49})],
            "the first write is at once, with the latest"
        );
        for done in 50..60 {
            progress.report(json!({"done": done})).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            written.lock().unwrap().len(),
            1,
            "the next waits for the interval"
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(written.lock().unwrap().last(), Some(&json!({"done": 59})));
        assert_eq!(written.lock().unwrap().len(), 2);
        progress.report(json!({"done": 60})).unwrap();
        progress.flush().await;
        assert_eq!(
            written.lock().unwrap().last(),
            Some(&json!({"done": 60})),
            "a flush writes at once"
        );
        progress.flush().await;
        assert_eq!(
            written.lock().unwrap().len(),
            3,
            "nothing pending, nothing written"
        );
    }

    #[tokio::test]
    async fn oversized_and_nul_reports_are_refused_and_keep_nothing() {
        let (progress, written) = recording();
        let big = "x".repeat(MAX_PROGRESS_BYTES);
        assert_eq!(
            progress.report(json!(big)).unwrap_err().to_string(),
            format!(
                "progress must be at most {MAX_PROGRESS_BYTES} bytes as JSON, got {}",
                MAX_PROGRESS_BYTES + 2
            )
        );
        assert!(
            progress
                .report(json!({"s": "a\u{0}b"}))
                .unwrap_err()
                .to_string()
                .contains("NUL")
        );
        progress.flush().await;
        assert!(written.lock().unwrap().is_empty());
    }
}

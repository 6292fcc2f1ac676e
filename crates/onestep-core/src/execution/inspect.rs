//! Reading a namespace as an operator does: counts per task and status, the ready backlog,
//! throughput over time, who holds leases now, and the attempts of one execution.
//!
//! [`ExecutionInspector`] is what a dashboard or a metrics sampler needs beyond
//! [`ExecutionBackend`]; the SQL backends of `onestep-sql` implement it (and the
//! [`MemoryExecutionBackend`](super::MemoryExecutionBackend), for tests). Every method reads; none
//! changes a row.

use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use uuid::Uuid;

use super::backend::ExecutionBackend;
use super::error::{ExecutionError, ExecutionResult};
pub use super::record::TaskBacklog;
use super::record::{ExecutionPage, ExecutionQuery};
use super::status::ExecutionStatus;
use super::stored::AttemptRow;

/// How many executions of one task have one status, and when the oldest of them was submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatusCount {
    /// The task.
    pub task_name: String,
    /// The status.
    pub status: ExecutionStatus,
    /// How many executions of the task have it.
    pub count: u64,
    /// The oldest `created_at` among them.
    pub oldest_created_at: Option<OffsetDateTime>,
}

/// Executions that reached a terminal status within one time bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedBucket {
    /// Where the bucket starts (inclusive); it ends where the next one starts.
    pub start: OffsetDateTime,
    /// Ended `succeeded`.
    pub succeeded: u64,
    /// Ended `failed`.
    pub failed: u64,
    /// Ended `cancelled`.
    pub cancelled: u64,
    /// Ended `expired`.
    pub expired: u64,
}

/// An execution that holds a lease now (`running` or `cancel_requested`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveLease {
    /// The execution.
    pub execution_id: Uuid,
    /// Its task.
    pub task_name: String,
    /// `running` or `cancel_requested`.
    pub status: ExecutionStatus,
    /// The worker holding the lease.
    pub worker_id: Option<String>,
    /// The attempt number it runs.
    pub attempt: u32,
    /// When the attempt started.
    pub started_at: Option<OffsetDateTime>,
    /// When the lease ends unless renewed.
    pub lease_expires_at: Option<OffsetDateTime>,
    /// The attempt's last heartbeat.
    pub heartbeat_at: Option<OffsetDateTime>,
}

/// A list query with the filters an operator adds to [`ExecutionQuery`]'s.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionSearch {
    /// Namespace, task, status, page size and cursor, as the list API takes them.
    pub query: ExecutionQuery,
    /// Only executions submitted at or after this instant.
    pub created_after: Option<OffsetDateTime>,
    /// Only executions submitted before this instant.
    pub created_before: Option<OffsetDateTime>,
    /// Only executions whose metadata has this key with this value (compared as text: a string
    /// by its characters, any other JSON value by its JSON text).
    pub metadata: Option<(String, String)>,
}

/// The longest metadata key a search accepts.
pub const MAX_METADATA_KEY_CHARS: usize = 128;

impl ExecutionSearch {
    /// A search that is just `query`.
    pub fn new(query: ExecutionQuery) -> Self {
        Self {
            query,
            created_after: None,
            created_before: None,
            metadata: None,
        }
    }

    /// Checks the query as [`ExecutionQuery::validate`] does, and the added filters: the
    /// metadata key is 1 to [`MAX_METADATA_KEY_CHARS`] letters, digits, `_`, `-` or `.`, (it is
    /// spelled into a JSON path), the value has no NUL, and the time range is not empty.
    ///
    /// ```
    /// use onestep_core::execution::ExecutionQuery;
    /// use onestep_core::execution::inspect::ExecutionSearch;
    ///
    /// let mut search = ExecutionSearch::new(ExecutionQuery::new("billing"));
    /// search.metadata = Some(("tenant id".into(), "acme".into()));
    /// assert_eq!(
    ///     search.validate().unwrap_err().to_string(),
    ///     "metadata_key must be 1 to 128 letters, digits, '_', '-' or '.', got \"tenant id\""
    /// );
    /// ```
    pub fn validate(&self) -> ExecutionResult<()> {
        self.query.validate()?;
        if let Some((key, value)) = &self.metadata {
            let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
            if key.is_empty()
                || key.chars().count() > MAX_METADATA_KEY_CHARS
                || !key.chars().all(fine)
            {
                return Err(ExecutionError::invalid(
                    "metadata_key",
                    format!(
                        "must be 1 to {MAX_METADATA_KEY_CHARS} letters, digits, '_', '-' or '.', got {key:?}"
                    ),
                ));
            }
            super::record::reject_nul("metadata_value", value)?;
        }
        if let (Some(after), Some(before)) = (self.created_after, self.created_before)
            && after >= before
        {
            return Err(ExecutionError::invalid(
                "created_before",
                format!("must be later than created_after ({after}), got {before}"),
            ));
        }
        Ok(())
    }
}

/// The bucket boundaries of `count` buckets of `width` ending at `until`: the first starts at
/// `until - count * width`.
///
/// ```
/// use std::time::Duration;
/// use onestep_core::execution::inspect::bucket_starts;
/// use time::macros::datetime;
///
/// let starts = bucket_starts(datetime!(2026-01-01 12:00 UTC), 3, Duration::from_secs(60));
/// assert_eq!(starts[0], datetime!(2026-01-01 11:57 UTC));
/// assert_eq!(starts[2], datetime!(2026-01-01 11:59 UTC));
/// ```
pub fn bucket_starts(until: OffsetDateTime, count: u32, width: Duration) -> Vec<OffsetDateTime> {
    (0..count).map(|i| until - width * (count - i)).collect()
}

/// The most buckets [`ExecutionInspector::finished_per_bucket`] counts in one call.
pub const MAX_BUCKETS: u32 = 120;

/// What a dashboard reads of a namespace. Every method reads only.
#[async_trait]
pub trait ExecutionInspector: ExecutionBackend {
    /// Counts per task and status in `namespace` (only the pairs that have executions).
    async fn task_counts(&self, namespace: &str) -> ExecutionResult<Vec<TaskStatusCount>>;

    /// Executions that reached a terminal status in each of `count` buckets of `width` ending at
    /// `until` (at most [`MAX_BUCKETS`]), oldest bucket first, one entry per bucket.
    async fn finished_per_bucket(
        &self,
        namespace: &str,
        until: OffsetDateTime,
        count: u32,
        width: Duration,
    ) -> ExecutionResult<Vec<FinishedBucket>>;

    /// The executions holding a lease now, longest-running first, at most `limit`.
    async fn active_leases(&self, namespace: &str, limit: u32)
    -> ExecutionResult<Vec<ActiveLease>>;

    /// The attempts of one execution of `namespace`, oldest first (empty when there is none).
    async fn attempts_of(&self, namespace: &str, id: Uuid) -> ExecutionResult<Vec<AttemptRow>>;

    /// One page of a search, newest first, with the list API's cursor.
    async fn search(&self, search: &ExecutionSearch) -> ExecutionResult<ExecutionPage>;
}

/// Refuses a bucket request the inspector will not count.
pub fn check_buckets(count: u32, width: Duration) -> ExecutionResult<()> {
    if count == 0 || count > MAX_BUCKETS {
        return Err(ExecutionError::invalid(
            "buckets",
            format!("must be between 1 and {MAX_BUCKETS}, got {count}"),
        ));
    }
    if width < Duration::from_secs(1) || width > Duration::from_secs(86_400) {
        return Err(ExecutionError::invalid(
            "bucket_width",
            format!("must be between 1 s and 1 day, got {width:?}"),
        ));
    }
    Ok(())
}

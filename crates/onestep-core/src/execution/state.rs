//! The rules of the execution state machine, as pure functions every backend applies.
//!
//! | from | event | to |
//! |---|---|---|
//! | queued, retrying | claim (available, not expired) | running (attempts + 1, new lease) |
//! | queued, retrying (not lease-lost) | claim maintenance, `expires_at <= now` | expired |
//! | running | lease expired, seen by a claim | retrying (attempt → lease_lost) |
//! | cancel_requested | lease expired, seen by a claim | cancelled (attempt → cancelled) |
//! | queued, retrying | cancel | cancelled |
//! | running | cancel | cancel_requested |
//! | running | complete succeeded / retrying / failed / cancelled | that status |
//! | cancel_requested | complete succeeded | cancelled (cancel wins: no result, no error) |
//! | cancel_requested | complete cancelled | cancelled |
//! | running | release | queued (attempt → lease_lost; attempts not decremented) |
//!
//! A completion is decided here once for every backend ([`decide_completion`]): the backends
//! (memory, SQL one by one, SQL in batches) only read the row, ask, and write or answer what the
//! decision says.

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::canonical::canonical_json;
use super::error::{ExecutionError, ExecutionResult};
use super::record::{ExecutionCompletion, ExecutionLimits};
use super::status::{AttemptStatus, ExecutionStatus};
use super::stored::{ExecutionRow, encode_result};

/// The statuses a completion may start from.
pub fn completion_sources(status: ExecutionStatus) -> &'static [ExecutionStatus] {
    use ExecutionStatus::*;
    match status {
        Succeeded | Cancelled => &[Running, CancelRequested],
        Retrying | Failed => &[Running],
        _ => &[],
    }
}

/// Whether a success arriving while a cancel is requested turns into a cancellation.
pub fn cancel_wins(completion: &ExecutionCompletion, current: ExecutionStatus) -> bool {
    matches!(completion, ExecutionCompletion::Succeeded { .. })
        && current == ExecutionStatus::CancelRequested
}

/// The status a cancel request moves `current` to; `None` leaves it unchanged.
pub fn cancel_target(current: ExecutionStatus) -> Option<ExecutionStatus> {
    match current {
        ExecutionStatus::Queued | ExecutionStatus::Retrying => Some(ExecutionStatus::Cancelled),
        ExecutionStatus::Running => Some(ExecutionStatus::CancelRequested),
        _ => None,
    }
}

/// The attempt status recorded for a completion's effective execution status.
pub fn attempt_status_for(status: ExecutionStatus) -> AttemptStatus {
    match status {
        ExecutionStatus::Succeeded => AttemptStatus::Succeeded,
        ExecutionStatus::Retrying => AttemptStatus::Retrying,
        ExecutionStatus::Failed => AttemptStatus::Failed,
        _ => AttemptStatus::Cancelled,
    }
}

/// Whether a completion that found the row already moved on is an idempotent replay: same
/// terminal status, same result and same error, compared as Python reads them (canonical JSON:
/// key order does not matter, and a number is its value, however the store spells it back, so
/// jsonb's `0.00001` is the `1e-05` that was written). Retrying completions are never replays.
pub fn is_replay(
    requested: ExecutionStatus,
    current_status: ExecutionStatus,
    current_result: Option<&Value>,
    current_error: Option<&Value>,
    expected_result: Option<&Value>,
    expected_error: Option<&Value>,
) -> bool {
    let terminal = matches!(
        requested,
        ExecutionStatus::Succeeded | ExecutionStatus::Failed | ExecutionStatus::Cancelled
    );
    let null_is_none = |v: Option<&Value>| v.filter(|v| !v.is_null()).map(canonical_json);
    terminal
        && current_status == requested
        && null_is_none(current_result) == null_is_none(expected_result)
        && null_is_none(current_error) == null_is_none(expected_error)
}

/// What a completion does to an execution, decided by [`decide_completion`] from the row as it
/// stands: every backend asks it and then only writes (or answers) what it says.
#[derive(Debug, Clone, PartialEq)]
pub enum CompletionDecision {
    /// Write this change to the row and finish the attempt with
    /// [`attempt_status`](RowChange::attempt_status).
    Write(RowChange),
    /// The same terminal completion was stored already: answer the row as it is.
    Replay,
}

/// The fields a completion writes, to the execution and to its attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange {
    /// The execution's new status (`cancelled` when a cancel request won over a success).
    pub status: ExecutionStatus,
    /// The status the attempt ends with.
    pub attempt_status: AttemptStatus,
    /// The encoded result (a success only).
    pub result: Option<Value>,
    /// The error detail JSON (a failure, a retry or a cancellation with a detail).
    pub error: Option<Value>,
    /// When the execution may be claimed again (later for a delayed retry, else unchanged).
    pub available_at: OffsetDateTime,
    /// The terminal time; `None` for a retry.
    pub finished_at: Option<OffsetDateTime>,
}

impl RowChange {
    /// Applies the change to `row` at `now`: the fields above, `updated_at`, the version counter,
    /// and the lease cleared.
    pub fn apply(&self, row: &mut ExecutionRow, now: OffsetDateTime) {
        row.status = self.status;
        row.result = self.result.clone();
        row.error = self.error.clone();
        row.available_at = self.available_at;
        row.finished_at = self.finished_at;
        row.updated_at = now;
        row.version += 1;
        row.lease_token = None;
        row.lease_expires_at = None;
        row.worker_id = None;
    }
}

/// Decides a (validated) completion of the attempt holding `lease_token` against the execution
/// `row` at `now`:
///
/// - the lease must be the row's, unexpired, and the row in a status the completion may start
///   from ([`completion_sources`]); a success while a cancel is requested becomes a
///   cancellation without result or error ([`cancel_wins`]);
/// - otherwise a repeated terminal completion is a [`Replay`](CompletionDecision::Replay)
///   ([`is_replay`]), and anything else [`ExecutionError::LeaseLost`];
/// - a result that cannot be stored fails with its encoding error, before any of that.
///
/// Whether the attempt itself is still running is the caller's check, against its attempts.
pub fn decide_completion(
    row: &ExecutionRow,
    lease_token: Uuid,
    completion: &ExecutionCompletion,
    now: OffsetDateTime,
    limits: &ExecutionLimits,
) -> ExecutionResult<CompletionDecision> {
    let requested = completion.status();
    let (status, result, error) = if cancel_wins(completion, row.status) {
        (ExecutionStatus::Cancelled, None, None)
    } else {
        match completion {
            ExecutionCompletion::Succeeded { result } => {
                (requested, Some(encode_result(result, limits)?), None)
            }
            other => (requested, None, other.error().map(|e| e.to_json())),
        }
    };
    let fenced = row.lease_token == Some(lease_token)
        && completion_sources(requested).contains(&row.status)
        && row.lease_expires_at.is_some_and(|e| e > now);
    if !fenced {
        if is_replay(
            requested,
            row.status,
            row.result.as_ref(),
            row.error.as_ref(),
            result.as_ref(),
            error.as_ref(),
        ) {
            return Ok(CompletionDecision::Replay);
        }
        return Err(ExecutionError::lease_lost());
    }
    let (available_at, finished_at) = match completion {
        ExecutionCompletion::Retrying { delay_s, .. } if status == ExecutionStatus::Retrying => {
            let delay = std::time::Duration::from_secs_f64(delay_s.unwrap_or(0.0));
            (crate::clock::after(now, delay), None)
        }
        _ => (row.available_at, Some(now)),
    };
    Ok(CompletionDecision::Write(RowChange {
        status,
        attempt_status: attempt_status_for(status),
        result,
        error,
        available_at,
        finished_at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::record::{ExecutionErrorDetail, ExecutionRequest, SubmitOptions};
    use crate::execution::stored::encode_submission;
    use serde_json::json;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-12-01 12:00:00 UTC);

    /// A row running under `token` until a minute after [`NOW`].
    fn running(token: Uuid) -> ExecutionRow {
        let request =
            ExecutionRequest::new("ns", "task", json!(1), SubmitOptions::default()).unwrap();
        let encoded = encode_submission(&request, &ExecutionLimits::default()).unwrap();
        let mut row = ExecutionRow::queued(&request, encoded, Uuid::new_v4(), NOW);
        row.status = ExecutionStatus::Running;
        row.attempts = 1;
        row.lease_token = Some(token);
        row.lease_expires_at = Some(NOW + time::Duration::minutes(1));
        row
    }

    fn decide(
        row: &ExecutionRow,
        token: Uuid,
        completion: ExecutionCompletion,
    ) -> ExecutionResult<CompletionDecision> {
        decide_completion(row, token, &completion, NOW, &ExecutionLimits::default())
    }

    #[test]
    fn a_held_lease_writes_its_completion_and_a_cancel_request_wins_over_success() {
        let token = Uuid::new_v4();
        let mut row = running(token);
        let success = ExecutionCompletion::Succeeded {
            result: json!({"n": 1}),
        };
        let Ok(CompletionDecision::Write(change)) = decide(&row, token, success.clone()) else {
            panic!("a held lease writes");
        };
        assert_eq!(
            (change.status, change.attempt_status),
            (ExecutionStatus::Succeeded, AttemptStatus::Succeeded)
        );
        assert_eq!(
            (change.result, change.finished_at),
            (Some(json!({"n": 1})), Some(NOW))
        );
        row.status = ExecutionStatus::CancelRequested;
        let Ok(CompletionDecision::Write(change)) = decide(&row, token, success) else {
            panic!("a cancel-requested row takes a success");
        };
        assert_eq!(
            (change.status, change.result, change.error),
            (ExecutionStatus::Cancelled, None, None)
        );
    }

    #[test]
    fn a_retry_is_due_after_its_delay_and_stays_unfinished() {
        let token = Uuid::new_v4();
        let row = running(token);
        let retry = ExecutionCompletion::Retrying {
            error: Some(ExecutionErrorDetail::new("error", "ValueError").unwrap()),
            delay_s: Some(1.5),
        };
        let Ok(CompletionDecision::Write(change)) = decide(&row, token, retry) else {
            panic!("a held lease writes");
        };
        assert_eq!(
            change.available_at,
            NOW + time::Duration::milliseconds(1500)
        );
        assert_eq!(change.finished_at, None);
        let mut applied = row.clone();
        change.apply(&mut applied, NOW);
        assert_eq!(
            (applied.status, applied.version, applied.lease_token),
            (ExecutionStatus::Retrying, row.version + 1, None)
        );
    }

    #[test]
    fn another_token_or_an_expired_lease_is_lost_unless_the_completion_repeats() {
        let token = Uuid::new_v4();
        let row = running(token);
        let success = ExecutionCompletion::Succeeded { result: json!(7) };
        assert!(matches!(
            decide(&row, Uuid::new_v4(), success.clone()),
            Err(ExecutionError::LeaseLost(_))
        ));
        let mut expired = row.clone();
        expired.lease_expires_at = Some(NOW);
        assert!(matches!(
            decide(&expired, token, success.clone()),
            Err(ExecutionError::LeaseLost(_))
        ));
        let Ok(CompletionDecision::Write(change)) = decide(&row, token, success.clone()) else {
            panic!("a held lease writes");
        };
        let mut done = row.clone();
        change.apply(&mut done, NOW);
        assert!(matches!(
            decide(&done, token, success),
            Ok(CompletionDecision::Replay)
        ));
        assert!(matches!(
            decide(
                &done,
                token,
                ExecutionCompletion::Succeeded { result: json!(8) }
            ),
            Err(ExecutionError::LeaseLost(_))
        ));
    }

    #[test]
    fn cancel_moves_waiting_work_to_cancelled_and_running_work_to_cancel_requested() {
        use ExecutionStatus::*;
        assert_eq!(cancel_target(Queued), Some(Cancelled));
        assert_eq!(cancel_target(Retrying), Some(Cancelled));
        assert_eq!(cancel_target(Running), Some(CancelRequested));
        for s in [CancelRequested, Succeeded, Failed, Cancelled, Expired] {
            assert_eq!(cancel_target(s), None);
        }
    }

    #[test]
    fn only_success_and_cancel_complete_a_cancel_requested_execution() {
        use ExecutionStatus::*;
        assert!(completion_sources(Succeeded).contains(&CancelRequested));
        assert!(completion_sources(Cancelled).contains(&CancelRequested));
        assert!(!completion_sources(Failed).contains(&CancelRequested));
        assert!(!completion_sources(Retrying).contains(&CancelRequested));
    }

    #[test]
    fn replays_need_the_same_terminal_status_result_and_error() {
        use ExecutionStatus::*;
        let a = json!({"x": 1, "y": 2});
        let b = json!({"y": 2, "x": 1});
        assert!(is_replay(
            Succeeded,
            Succeeded,
            Some(&a),
            None,
            Some(&b),
            None
        ));
        assert!(!is_replay(
            Succeeded,
            Succeeded,
            Some(&a),
            None,
            Some(&json!(3)),
            None
        ));
        assert!(!is_replay(Retrying, Retrying, None, None, None, None));
        assert!(is_replay(
            Succeeded,
            Succeeded,
            Some(&Value::Null),
            None,
            None,
            None
        ));
        let stored: Value = serde_json::from_str(r#"{"f": 0.00001, "n": 2}"#).unwrap();
        let written: Value = serde_json::from_str(r#"{"n": 2, "f": 1e-05}"#).unwrap();
        assert!(
            is_replay(
                Succeeded,
                Succeeded,
                Some(&stored),
                None,
                Some(&written),
                None
            ),
            "the store's spelling of a number is the number"
        );
    }
}

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

use serde_json::Value;

use super::canonical::canonical_json;
use super::record::ExecutionCompletion;
use super::status::{AttemptStatus, ExecutionStatus};

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

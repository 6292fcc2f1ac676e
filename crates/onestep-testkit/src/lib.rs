//! Test support for onestep backends.
//!
//! [`connector`] is the delivery contract every source keeps (ack, retry, hand-back, no message
//! shared by two consumers), over a [`connector::SourceFactory`], run with
//! [`connector_conformance!`]. [`proxy::Proxy`] cuts a client's connections for fault tests.
//!
//! [`conformance`] pins every rule of the tracked-execution contract as a generic async function
//! over a [`BackendFactory`]; [`execution_conformance!`] turns them into one `#[tokio::test]` per
//! case for a backend. A new backend is done when the whole suite passes against the real server.
//!
//! ```ignore
//! use onestep_testkit::{execution_conformance, MemoryFactory};
//! execution_conformance!(MemoryFactory::default());
//! ```

pub mod conformance;
pub mod connector;
mod factory;
pub mod proxy;
pub mod reference;
pub mod state;

pub use factory::{BackendFactory, MemoryFactory, Setup};

/// Generates one `#[tokio::test]` per conformance case, each calling the case with `$factory`.
#[macro_export]
macro_rules! execution_conformance {
    ($factory:expr) => {
        $crate::execution_conformance!(@cases $factory;
            submit_get_and_successful_none_result_round_trip,
            submit_rejects_payload_and_metadata_over_their_limits,
            submit_rejects_the_reserved_metadata_key,
            nul_characters_are_rejected_on_every_entry_point_before_any_write,
            submit_rejects_values_nested_deeper_than_the_stored_depth_limit,
            expires_at_at_the_edges_of_years_1_to_9999_round_trips,
            tagged_values_round_trip_through_the_store,
            top_level_numbers_round_trip_exactly,
            same_idempotency_key_and_digest_returns_the_original_execution,
            same_idempotency_key_with_a_different_submission_conflicts,
            idempotent_resubmit_returns_the_execution_whatever_its_status,
            executions_without_a_key_never_conflict,
            submit_many_applies_the_rules_to_each_item,
            submit_many_stores_each_row_as_returned,
            submits_side_by_side_are_each_answered_as_if_alone,
            get_in_another_namespace_returns_none,
            cancel_of_queued_and_retrying_work_is_immediate,
            cancel_of_running_work_requests_cooperative_cancellation,
            cancel_of_finished_work_changes_nothing,
            cancel_of_a_missing_execution_returns_none,
            list_pages_newest_first_with_filters_and_a_keyset_cursor,
            list_rejects_a_cursor_with_an_unknown_version,
            list_rejects_malformed_and_non_canonical_cursors,
            client_result_reports_each_status,
            client_validates_arguments_before_any_io,
            claim_skips_delayed_execution_until_available_at,
            claim_starts_a_running_attempt_with_envelope_attempts_zero,
            claim_to_run_answers_what_a_worker_runs_with,
            claim_orders_by_available_at_then_created_at_and_respects_the_limit,
            claim_validates_its_arguments,
            claim_expires_queued_work_past_expires_at,
            claim_expires_handler_retrying_work_past_expires_at,
            heartbeat_extends_only_the_matching_lease,
            expired_lease_rejects_heartbeat_complete_and_release,
            expired_running_lease_is_reclaimed_as_a_new_attempt_and_fences_the_old_token,
            lease_lost_work_is_reclaimed_even_after_its_expires_at,
            claim_reclaims_stale_leases_in_bounded_batches,
            claim_maintenance_spans_every_namespace,
            expired_cancel_requested_lease_becomes_cancelled,
            complete_success_updates_the_execution_and_its_attempt,
            cancel_request_wins_over_a_late_success,
            failure_or_retry_after_a_cancel_request_is_rejected_as_stale,
            terminal_success_replay_requires_an_identical_result,
            terminal_failure_replay_requires_an_identical_error,
            retrying_completion_schedules_the_next_claim_and_clears_the_lease,
            stale_lease_cannot_complete_success_failure_or_retry,
            oversized_or_unencodable_results_are_rejected_without_writing,
            complete_rejects_results_with_nul_or_nested_too_deep_without_writing,
            release_returns_an_unstarted_claim_to_the_queue,
            version_counts_every_state_change_but_heartbeats,
            complete_many_fences_each_completion_on_its_own,
            complete_many_decides_cancels_and_ended_leases_on_their_own,
            complete_many_refuses_an_attempt_of_another_execution,
            complete_many_lets_a_cancel_win_over_an_unstorable_result,
            complete_many_statuses_answers_the_status_each_completion_left,
            complete_many_stores_every_json_value_exactly,
            heartbeat_many_renews_each_held_lease_on_its_own,
            worker_stores_the_handler_result,
            worker_retries_with_backoff_then_fails_with_the_error_detail,
            worker_records_a_timeout_as_kind_timeout,
            worker_cancel_while_running_ends_cancelled_without_result,
            worker_cancel_racing_a_success_ends_cancelled,
            worker_shutdown_mid_handler_leaves_retrying_for_another_worker,
            worker_result_preflight_prevents_emit_on_every_attempt,
            worker_fails_unstorable_results_at_result_validation,
            execution_source_rejects_invalid_options_with_field_names,
            execution_source_rejects_a_task_with_another_name,
            execution_source_fetch_carries_correlation_meta,
            source_release_unstarted_returns_claims_to_the_queue,
            source_prefetch_holds_claims_and_hands_them_back,
            worker_with_prefetch_hands_back_its_buffer_at_shutdown,
            adaptive_prefetch_holds_nothing_for_long_tasks,
            worker_that_loses_its_lease_stops_and_a_new_attempt_finishes,
            idle_workers_wake_up_on_submit,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::conformance::$case(&$factory).await;
            }
        )*
    };
}

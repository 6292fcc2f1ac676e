//! What a claim reads of each claimed row and what it answers for it: a whole execution for
//! `claim`, or what a worker runs it with for `claim_to_run` ([`sql::CLAIMED_COLUMNS`]: 10
//! columns of the 23, so the rest of each row is neither sent nor decoded).

use onestep_core::execution::ClaimedExecution;
use onestep_core::execution::stored::ClaimedRow;

use super::resume::ClaimKey;
use super::statements::ClaimAnswer;
use super::*;
use crate::dialect::Row;

/// A claimed row's start in a claim in steps: its new attempt and lease.
pub(super) struct Started {
    pub(super) id: Uuid,
    pub(super) attempt_no: i32,
    pub(super) attempt_id: Uuid,
    pub(super) lease_token: Uuid,
}

/// A row as a claim reads it, and the answer it becomes.
pub(super) trait ClaimRow: Sized {
    /// The answer for one claimed row.
    type Claimed;
    /// What the claim answers of each row (and so selects, in steps).
    const ANSWER: ClaimAnswer;
    /// Reads one row, from the one-statement claim's answer or the claim in steps' select.
    fn decode<D: Dialect>(row: &Row<D>) -> Result<Self, sqlx::Error>;
    /// The execution's id.
    fn id(&self) -> Uuid;
    /// Attempts started, as read.
    fn attempts(&self) -> i32;
    /// The row's place in claim order.
    fn claim_key(&self) -> ClaimKey;
    /// The lease token the one-statement claim gave the row.
    fn lease_token(&self) -> Option<Uuid>;
    /// The one-statement claim's time, as the row stored it (where the lease starts when the
    /// statement read the time itself).
    fn claimed_at(&self) -> OffsetDateTime;
    /// The answer for a row the one-statement claim started; an error for stored values that do
    /// not decode.
    fn into_claimed(
        self,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_expires_at: OffsetDateTime,
    ) -> ExecutionResult<Self::Claimed>;
    /// The answer for a row the claim in steps read and is about to start as `start` says, at
    /// `now`, leased to `worker_id`; an error for stored values that do not decode.
    fn start(
        self,
        start: &Started,
        lease_expires_at: OffsetDateTime,
        worker_id: &str,
        now: OffsetDateTime,
    ) -> ExecutionResult<Self::Claimed>;
}

impl ClaimRow for ExecutionRow {
    type Claimed = ExecutionLease;
    const ANSWER: ClaimAnswer = ClaimAnswer::Execution;

    fn decode<D: Dialect>(row: &Row<D>) -> Result<Self, sqlx::Error> {
        crate::decode::execution::<D>(row)
    }

    fn id(&self) -> Uuid {
        self.id
    }

    fn attempts(&self) -> i32 {
        self.attempts
    }

    fn claim_key(&self) -> ClaimKey {
        ClaimKey {
            available_at: self.available_at,
            created_at: self.created_at,
            id: self.id,
        }
    }

    fn lease_token(&self) -> Option<Uuid> {
        self.lease_token
    }

    fn claimed_at(&self) -> OffsetDateTime {
        self.updated_at
    }

    fn into_claimed(
        mut self,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_expires_at: OffsetDateTime,
    ) -> ExecutionResult<ExecutionLease> {
        self.lease_expires_at = Some(lease_expires_at);
        Ok(ExecutionLease {
            execution: self.into_execution()?,
            attempt_id,
            lease_token,
            lease_expires_at,
        })
    }

    /// The row started in memory as the claim's `UPDATE` starts it, then decoded once
    /// (decoding reads none of what starting changes).
    fn start(
        mut self,
        start: &Started,
        lease_expires_at: OffsetDateTime,
        worker_id: &str,
        now: OffsetDateTime,
    ) -> ExecutionResult<ExecutionLease> {
        self.status = ExecutionStatus::Running;
        self.attempts = start.attempt_no;
        self.lease_token = Some(start.lease_token);
        self.worker_id = Some(worker_id.to_string());
        self.started_at = self.started_at.or(Some(now));
        self.updated_at = now;
        self.version = self.version.saturating_add(1);
        self.into_claimed(start.attempt_id, start.lease_token, lease_expires_at)
    }
}

impl ClaimRow for ClaimedRow {
    type Claimed = ClaimedExecution;
    const ANSWER: ClaimAnswer = ClaimAnswer::ToRun;

    fn decode<D: Dialect>(row: &Row<D>) -> Result<Self, sqlx::Error> {
        crate::decode::claimed::<D>(row)
    }

    fn id(&self) -> Uuid {
        self.id
    }

    fn attempts(&self) -> i32 {
        self.attempts
    }

    fn claim_key(&self) -> ClaimKey {
        ClaimKey {
            available_at: self.available_at,
            created_at: self.created_at,
            id: self.id,
        }
    }

    fn lease_token(&self) -> Option<Uuid> {
        self.lease_token
    }

    fn claimed_at(&self) -> OffsetDateTime {
        self.updated_at
    }

    fn into_claimed(
        self,
        attempt_id: Uuid,
        lease_token: Uuid,
        lease_expires_at: OffsetDateTime,
    ) -> ExecutionResult<ClaimedExecution> {
        ClaimedRow::into_claimed(self, attempt_id, lease_token, lease_expires_at)
    }

    fn start(
        mut self,
        start: &Started,
        lease_expires_at: OffsetDateTime,
        _worker_id: &str,
        _now: OffsetDateTime,
    ) -> ExecutionResult<ClaimedExecution> {
        self.attempts = start.attempt_no;
        ClaimedRow::into_claimed(self, start.attempt_id, start.lease_token, lease_expires_at)
    }
}

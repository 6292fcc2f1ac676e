//! Where a claim in steps starts reading the claim index while a backlog lasts
//! ([`Dialect::claim_resume_index`](crate::Dialect::claim_resume_index): MariaDB).
//!
//! A claim reads the ready rows in claim order (`available_at, created_at, id`). On InnoDB each
//! row a claim starts leaves its old claim-index entry behind, delete-marked, until the purge
//! removes it, and a locking read looks every such entry up in the primary key. While a backlog
//! drains the purge falls behind, so each claim that starts from the front of the index walks
//! all the rows claimed since the last purge: in a burn-down of 20,000 a claim's locking
//! `SELECT` grew from ~1 to ~8 ms between purges, for the same 64 rows.
//!
//! So a claim that came back full remembers the claim key of its last row, and the next claims
//! of the same queue read only what comes after it. Rows behind that key that become claimable
//! later (a submit that committed after a claim passed its place, a release, a lease-lost retry
//! keeping its old `available_at`) are not lost, only read by a scan from the front:
//!
//! - a resumed claim that finds fewer rows than it asked for reads again from the front in the
//!   same transaction, so no claim answers fewer rows than are claimable, and the key is
//!   forgotten until a claim from the front comes back full;
//! - while every claim comes back full, one reads from the front every [`RESCAN_EVERY`].
//!
//! A resumed claim reads after the key in claim order, so while a backlog lasts the rows behind
//! it wait up to [`RESCAN_EVERY`] (about, with claims side by side) where a claim from the front
//! would have taken them first. At-least-once is not touched: this decides only which ready
//! rows a claim reads, never what it writes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use uuid::Uuid;

/// How long claims may keep resuming before one reads from the front of the index again: the
/// longest a claimable row behind the resume key waits for it while every claim comes back full.
pub(super) const RESCAN_EVERY: Duration = Duration::from_secs(1);

/// The condition a resumed claim adds after its `available_at` bound, with five placeholders:
/// the resume key's `available_at` twice, `created_at` twice and `id` (the claim order, as
/// nested comparisons the range optimizer turns into index ranges).
pub(super) const AFTER_KEY: &str = "(e.available_at > ? OR (e.available_at = ? AND \
(e.created_at > ? OR (e.created_at = ? AND e.id > ?))))";

/// Where, in a rendered claim in steps, a resumed claim adds [`AFTER_KEY`].
const AVAILABLE_BOUND: &str = "AND e.available_at <= ? AND ";

/// `claim` (a rendered claim in steps on `table`, quoted) reading only rows after a resume key,
/// through `index`: its parameters are the claim's, with the key's five
/// ([`ClaimKey::params`]) after the first time bound.
///
/// The index is forced because the optimizer would not start at the key by itself: while the
/// backlog after the key is most of what is claimable, it prefers the equality look-up on the
/// index's leading columns (`ref` on namespace and claim column), which reads from the front,
/// to the range that starts at the key. Forced, the same index is read as that range.
pub(super) fn resumed(claim: &str, table: &str, index: &str) -> String {
    debug_assert!(
        claim.contains(AVAILABLE_BOUND),
        "not a claim in steps: {claim}"
    );
    let from = format!("FROM {table} e ");
    debug_assert!(claim.contains(&from), "not a claim of {table}: {claim}");
    claim
        .replacen(&from, &format!("{from}FORCE INDEX (`{index}`) "), 1)
        .replacen(
            AVAILABLE_BOUND,
            &format!("{AVAILABLE_BOUND}{AFTER_KEY} AND "),
            1,
        )
}

/// A row's place in claim order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ClaimKey {
    pub(super) available_at: OffsetDateTime,
    pub(super) created_at: OffsetDateTime,
    pub(super) id: Uuid,
}

impl ClaimKey {
    /// The parameters of [`AFTER_KEY`], in its order.
    pub(super) fn params(&self) -> [crate::param::Param; 5] {
        [
            self.available_at.into(),
            self.available_at.into(),
            self.created_at.into(),
            self.created_at.into(),
            self.id.into(),
        ]
    }
}

/// What a claim of one queue resumes after, and when that queue was last read from the front.
#[derive(Debug, Clone, Copy)]
struct Resume {
    after: ClaimKey,
    rescanned_at: Instant,
}

/// The resume keys of a backend's queues (a queue: a namespace and its task names).
#[derive(Debug, Default)]
pub(super) struct ClaimResumes {
    queues: Mutex<HashMap<String, Resume>>,
}

/// How a claim read the index: from the front, or after a resume key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    FromFront,
    After(ClaimKey),
}

impl ClaimResumes {
    /// How the next claim of `queue` reads the index.
    pub(super) fn scan(&self, queue: &str) -> Scan {
        let queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        match queues.get(queue) {
            Some(r) if r.rescanned_at.elapsed() < RESCAN_EVERY => Scan::After(r.after),
            _ => Scan::FromFront,
        }
    }

    /// Records a claim of `queue` that read the index by `scan` and came back `full` (as many
    /// rows as it asked for) or not, `last` being its last row's key.
    pub(super) fn record(&self, queue: &str, scan: Scan, full: bool, last: Option<ClaimKey>) {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = last.filter(|_| full) else {
            // Short: the rows after the key are gone, and the next claim reads from the front.
            queues.remove(queue);
            return;
        };
        match scan {
            // A scan from the front may have found rows behind the old key; later claims go on
            // from where it stopped.
            Scan::FromFront => {
                queues.insert(
                    queue.to_string(),
                    Resume {
                        after: last,
                        rescanned_at: Instant::now(),
                    },
                );
            }
            // Claims run side by side: keep the furthest key (the rows before it were claimed
            // by one of them or skipped as locked). A resumed claim never starts a resume: the
            // key it read was forgotten meanwhile, and the next claim reads from the front.
            Scan::After(_) => {
                if let Some(resume) = queues.get_mut(queue) {
                    resume.after = resume.after.max(last);
                }
            }
        }
    }
}

/// The queue a claim is for: its namespace and task names.
pub(super) fn queue_of(namespace: &str, task_names: &[String]) -> String {
    let mut queue = namespace.to_string();
    for task in task_names {
        queue.push('\u{1f}');
        queue.push_str(task.trim());
    }
    queue
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seconds: i64, id: u128) -> ClaimKey {
        let at = OffsetDateTime::from_unix_timestamp(seconds).expect("a valid time");
        ClaimKey {
            available_at: at,
            created_at: at,
            id: Uuid::from_u128(id),
        }
    }

    #[test]
    fn a_full_claim_from_the_front_starts_a_resume() {
        let resumes = ClaimResumes::default();
        assert_eq!(resumes.scan("q"), Scan::FromFront);
        resumes.record("q", Scan::FromFront, true, Some(key(10, 1)));
        assert_eq!(resumes.scan("q"), Scan::After(key(10, 1)));
        assert_eq!(resumes.scan("other"), Scan::FromFront);
    }

    #[test]
    fn a_short_claim_sends_the_next_one_to_the_front() {
        let resumes = ClaimResumes::default();
        resumes.record("q", Scan::FromFront, true, Some(key(10, 1)));
        resumes.record("q", Scan::After(key(10, 1)), false, Some(key(11, 1)));
        assert_eq!(resumes.scan("q"), Scan::FromFront);
        resumes.record("q", Scan::FromFront, false, None);
        assert_eq!(resumes.scan("q"), Scan::FromFront);
    }

    #[test]
    fn resumed_claims_keep_the_furthest_key_and_a_front_scan_may_go_back() {
        let resumes = ClaimResumes::default();
        resumes.record("q", Scan::FromFront, true, Some(key(10, 1)));
        resumes.record("q", Scan::After(key(10, 1)), true, Some(key(30, 1)));
        resumes.record("q", Scan::After(key(10, 1)), true, Some(key(20, 1)));
        assert_eq!(resumes.scan("q"), Scan::After(key(30, 1)));
        resumes.record("q", Scan::FromFront, true, Some(key(5, 1)));
        assert_eq!(resumes.scan("q"), Scan::After(key(5, 1)));
    }

    #[test]
    fn a_resumed_claim_does_not_bring_back_a_forgotten_key() {
        let resumes = ClaimResumes::default();
        resumes.record("q", Scan::After(key(10, 1)), true, Some(key(20, 1)));
        assert_eq!(resumes.scan("q"), Scan::FromFront);
    }

    #[test]
    fn keys_order_as_the_claim_does() {
        assert!(key(10, 2) < key(11, 1));
        assert!(key(10, 1) < key(10, 2));
        let mut later_created = key(10, 1);
        later_created.created_at += Duration::from_secs(1);
        assert!(key(10, 2) < later_created);
    }

    #[test]
    fn the_resumed_claim_reads_the_index_after_the_key() {
        let claim = "SELECT e.id FROM `t` e WHERE e.namespace = ? AND e.task_name = ? \
AND e.available_at <= ? AND (e.expires_at IS NULL) ORDER BY e.available_at LIMIT ?";
        let resumed = resumed(claim, "`t`", "ix_t_claimable");
        assert_eq!(
            resumed,
            format!(
                "SELECT e.id FROM `t` e FORCE INDEX (`ix_t_claimable`) WHERE e.namespace = ? \
AND e.task_name = ? AND e.available_at <= ? AND {AFTER_KEY} AND (e.expires_at IS NULL) \
ORDER BY e.available_at LIMIT ?"
            )
        );
        assert_eq!(resumed.matches('?').count(), claim.matches('?').count() + 5);
    }
}

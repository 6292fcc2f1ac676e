//! The statements of the execution state machine, written once for every dialect.
//!
//! `{e}` is the executions table, `{a}` the attempts table, `{lock}` / `{skip}` the dialect's
//! row-lock clauses; `?` placeholders are adapted by the dialect.
//!
//! # Leased rows are found by id
//!
//! A statement that writes leased executions named by id states its lease checks inside
//! `CASE WHEN … THEN 1 ELSE 0 END = 1`, which means the same as the bare conditions (a `NULL`
//! check is not a match either way). Bare, `status IN ('running', 'cancel_requested')` states the
//! lease index's partial predicate, and PostgreSQL may then read the rows through that index:
//! every running execution's entry, for each statement, instead of one primary-key probe per id.
//! It does so when the table's statistics were taken before the running rows existed (the usual
//! state of a large table, analysed after a tenth of it changes): 10,000 long-running executions
//! made each batched completion of 125 rows read all 10,000 (8.6 of its 14.5 ms) and each
//! batched heartbeat too. Inside the `CASE` no index can answer the checks, so the id is the
//! only way in.

/// Every executions column, in table order (the dialects decode rows in this order).
pub const EXECUTION_COLUMNS: &str = "id, namespace, task_name, status, payload, metadata, result, error, \
idempotency_key, submission_digest, attempts, available_at, lease_token, lease_expires_at, worker_id, \
cancel_reason, cancel_requested_at, expires_at, created_at, updated_at, started_at, finished_at, version";

/// The executions columns a worker runs a claimed execution with, and its place in claim order
/// (`decode::claimed` reads them in this order; see `ClaimedExecution`): a claim that answers
/// only these sends and decodes 10 columns of each row instead of 23.
pub const CLAIMED_COLUMNS: &str = "id, namespace, task_name, payload, metadata, attempts, \
available_at, created_at, lease_token, updated_at";

/// Every attempts column, in table order.
pub const ATTEMPT_COLUMNS: &str = "id, execution_id, attempt_no, lease_token, worker_id, status, error, started_at, heartbeat_at, finished_at";

/// Inserts a queued execution (all columns).
pub const INSERT_EXECUTION: &str = "INSERT INTO {e} (id, namespace, task_name, status, payload, metadata, result, \
error, idempotency_key, submission_digest, attempts, available_at, lease_token, lease_expires_at, worker_id, \
cancel_reason, cancel_requested_at, expires_at, created_at, updated_at, started_at, finished_at, version) \
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// One execution in a namespace.
pub const GET: &str = "SELECT {cols} FROM {e} WHERE namespace = ? AND id = ?";

/// One execution by id, locked for the transaction.
pub const GET_FOR_UPDATE: &str = "SELECT {cols} FROM {e} WHERE id = ?{lock}";

/// One execution in a namespace, locked for the transaction.
pub const GET_IN_NAMESPACE_FOR_UPDATE: &str =
    "SELECT {cols} FROM {e} WHERE namespace = ? AND id = ?{lock}";

/// The execution holding an idempotency key.
pub const GET_BY_KEY: &str =
    "SELECT {cols} FROM {e} WHERE namespace = ? AND task_name = ? AND idempotency_key = ?";

/// `status = retrying` whose latest attempt lost its lease: claimable (and never expired) after
/// `expires_at`.
pub const LEASE_LOST_RETRY: &str = "(e.status = 'retrying' AND EXISTS (SELECT 1 FROM {a} la \
WHERE la.execution_id = e.id AND la.attempt_no = e.attempts AND la.status = 'lease_lost'))";

/// Maintenance 1: queued or handler-retrying work past `expires_at`.
pub const EXPIRE_CANDIDATES: &str = "SELECT e.id, e.version, e.lease_token FROM {e} e \
WHERE e.status IN ('queued', 'retrying') AND e.expires_at IS NOT NULL AND e.expires_at <= ? \
AND NOT {lease_lost_retry} ORDER BY e.expires_at, e.id LIMIT ?{skip}";

/// Expires one candidate if it did not change since it was selected.
pub const EXPIRE: &str = "UPDATE {e} SET status = 'expired', finished_at = ?, updated_at = ?, version = version + 1 \
WHERE id = ? AND version = ? AND status IN ('queued', 'retrying') AND expires_at <= ?";

/// Maintenance 2: cancel requests whose lease expired. The redundant `status IN (…)` repeats the
/// lease index's partial predicate word for word: SQLite uses a partial index only when the query
/// states its predicate, and otherwise scans the whole table, history included, on every pass.
pub const CANCEL_EXPIRY_CANDIDATES: &str = "SELECT e.id, e.version, e.lease_token FROM {e} e \
WHERE e.status IN ('running', 'cancel_requested') AND e.status = 'cancel_requested' \
AND e.lease_expires_at <= ? ORDER BY e.lease_expires_at, e.id LIMIT ?{skip}";

/// Cancels one candidate if it did not change since it was selected.
pub const CANCEL_EXPIRY: &str = "UPDATE {e} SET status = 'cancelled', finished_at = ?, updated_at = ?, \
lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, version = version + 1 \
WHERE id = ? AND version = ? AND lease_token = ? AND status = 'cancel_requested' AND lease_expires_at <= ?";

/// Maintenance 3: running work whose lease expired (the `status IN (…)` as in maintenance 2).
///
/// Every maintenance pass locks its candidates skipping rows another transaction holds (a
/// completion, a heartbeat, a session that locked a row by hand): the next pass takes them, and
/// a claim never waits behind someone else's row lock.
pub const RECLAIM_CANDIDATES: &str = "SELECT e.id, e.version, e.lease_token FROM {e} e \
WHERE e.status IN ('running', 'cancel_requested') AND e.status = 'running' \
AND e.lease_expires_at <= ? ORDER BY e.lease_expires_at, e.id LIMIT ?{skip}";

/// Returns one candidate to retrying if it did not change since it was selected.
pub const RECLAIM: &str = "UPDATE {e} SET status = 'retrying', available_at = ?, updated_at = ?, \
lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, version = version + 1 \
WHERE id = ? AND version = ? AND lease_token = ? AND status = 'running' AND lease_expires_at <= ?";

/// Ends the running attempt holding a token.
pub const FINISH_ATTEMPT_BY_TOKEN: &str = "UPDATE {a} SET status = ?, finished_at = ? WHERE execution_id = ? AND lease_token = ? AND status = 'running'";

/// Ready work of one task, oldest first, skipping rows other workers hold. `{tasks}` is
/// `= ?` for one task or `IN (?, …)`; `{now}` is the claim's time: a `?`, or
/// [`NOW_OR_TRANSACTION_TIME`] where a dialect's one-statement claim embeds this select
/// (`BatchPaths::claim`).
pub const CLAIM: &str = "SELECT {cols} FROM {e} e WHERE e.namespace = ? AND e.task_name {tasks} \
AND e.status IN ('queued', 'retrying') AND e.available_at <= {now} \
AND (e.expires_at IS NULL OR e.expires_at > {now} OR {lease_lost_retry}) \
ORDER BY e.available_at, e.created_at, e.id LIMIT ?{skip}";

/// `{now}` in a one-statement claim: the bound instant (an injected clock, or the time already
/// read for maintenance) or, when it is NULL, the transaction's time, which is what the claim in
/// steps reads with a `SELECT` of its own on a dialect that decides leases by database time.
pub const NOW_OR_TRANSACTION_TIME: &str =
    "COALESCE(CAST(? AS TIMESTAMP WITH TIME ZONE), CURRENT_TIMESTAMP)";

/// Renews a live lease (its checks in a `CASE`: see the module's docs).
pub const HEARTBEAT: &str = "UPDATE {e} SET lease_expires_at = ?, updated_at = ? WHERE id = ? \
AND CASE WHEN lease_token = ? AND status IN ('running', 'cancel_requested') \
AND lease_expires_at IS NOT NULL AND lease_expires_at > ? THEN 1 ELSE 0 END = 1";

/// Records the heartbeat on the attempt.
pub const HEARTBEAT_ATTEMPT: &str = "UPDATE {a} SET heartbeat_at = ? WHERE id = ? AND execution_id = ? \
AND lease_token = ? AND status = 'running'";

/// The running attempt of a lease.
pub const GET_RUNNING_ATTEMPT: &str = "SELECT {acols} FROM {a} WHERE id = ? AND execution_id = ? \
AND lease_token = ? AND status = 'running'";

/// Writes a completion (compare-and-set on version; the row is locked).
pub const COMPLETE: &str = "UPDATE {e} SET status = ?, updated_at = ?, version = version + 1, lease_token = NULL, \
lease_expires_at = NULL, worker_id = NULL, result = ?, error = ?, available_at = ?, finished_at = ? \
WHERE id = ? AND version = ?";

/// Ends the attempt of a completion.
pub const FINISH_ATTEMPT: &str = "UPDATE {a} SET status = ?, error = ?, finished_at = ? WHERE id = ? \
AND execution_id = ? AND lease_token = ? AND status = 'running'";

/// Returns a claim to the queue.
pub const RELEASE: &str = "UPDATE {e} SET status = 'queued', available_at = ?, lease_token = NULL, \
lease_expires_at = NULL, worker_id = NULL, updated_at = ?, version = version + 1 WHERE id = ? AND version = ?";

/// Applies a cancel request.
pub const CANCEL: &str = "UPDATE {e} SET status = ?, cancel_reason = ?, cancel_requested_at = ?, finished_at = ?, \
updated_at = ?, version = version + 1 WHERE id = ? AND version = ?";

/// The attempts of one execution, oldest first.
pub const ATTEMPTS: &str = "SELECT {acols} FROM {a} WHERE execution_id = ? ORDER BY attempt_no";

/// Locks a batch of executions for a batched completion or heartbeat, in id order
/// (deadlock-free against other batches), and reads with each whether one of the batch's
/// attempts (`{attempt_ids}`, an `IN (?, …)` list, bound first) is `running` under the
/// execution's lease token: all execution columns, then 1 or 0. `{ids}` is the dialect's id-list
/// match (`IN (?, …)` by default). A dialect with `BatchPaths::lock_leases` uses that instead.
pub const LOCK_LEASES_MANY: &str = "SELECT {cols}, CAST(EXISTS (SELECT 1 FROM {a} r \
WHERE r.id {attempt_ids} AND r.execution_id = {e}.id AND r.lease_token = {e}.lease_token \
AND r.status = 'running') AS SIGNED) FROM {e} WHERE id {ids} ORDER BY id{lock}";

/// Renews the leases of a batch of locked, held executions; `{ids}` as in [`LOCK_LEASES_MANY`]
/// (the status check in a `CASE`: see the module's docs).
pub const HEARTBEAT_MANY: &str = "UPDATE {e} SET lease_expires_at = ?, updated_at = ? \
WHERE id {ids} AND CASE WHEN status IN ('running', 'cancel_requested') THEN 1 ELSE 0 END = 1";

/// Records a heartbeat on a batch of running attempts; `{ids}` as in [`LOCK_LEASES_MANY`].
pub const HEARTBEAT_ATTEMPTS_MANY: &str =
    "UPDATE {a} SET heartbeat_at = ? WHERE id {ids} AND status = 'running'";

/// Fills in table names, column lists and the dialect's lock clauses.
pub fn render(template: &str, executions: &str, attempts: &str, lock: &str, skip: &str) -> String {
    template
        .replace("{now}", "?")
        .replace("{lease_lost_retry}", LEASE_LOST_RETRY)
        .replace("{cols}", EXECUTION_COLUMNS)
        .replace("{acols}", ATTEMPT_COLUMNS)
        .replace("{e}", executions)
        .replace("{a}", attempts)
        .replace("{lock}", lock)
        .replace("{skip}", skip)
}

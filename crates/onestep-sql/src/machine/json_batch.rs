//! MariaDB's batch statements of one shape: the batch travels as one JSON array, which
//! `JSON_TABLE` turns into rows the statement joins on the primary key.
//!
//! The statements every dialect runs grow with the batch (`IN (?, …)` lists, `CASE id WHEN ? …`
//! updates, multi-row `VALUES`), so on MySQL's protocol each is prepared, run and closed per
//! batch: two round trips and a parse each time. These have the same text at every batch size,
//! so each connection prepares them once. The server plans each execution anyway (MariaDB keeps
//! no generic plan), and the plan is the table function, then `eq_ref` on the primary key.
//!
//! Used only where [`Dialect::json_table_batches`] says so: a MariaDB server whose tables key
//! executions and attempts by its `UUID` type (which compares with the array's hex text by
//! value, whatever the tables' collation). MySQL 8 keeps the statements every dialect runs.

use serde_json::{Map, Value};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::dialect::Dialect;
use crate::sql;

/// Starts a batch of locked rows. Parameters: the batch (`i` id, `t` lease token), then
/// `lease_expires_at`, worker id, now, now.
const START: &str = "UPDATE {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS (i CHAR(36) PATH '$.i', \
t CHAR(36) PATH '$.t')) v ON e.id = v.i SET e.status = 'running', e.attempts = e.attempts + 1, \
e.lease_token = v.t, e.lease_expires_at = ?, e.worker_id = ?, \
e.started_at = COALESCE(e.started_at, ?), e.updated_at = ?, e.version = e.version + 1";

/// Inserts the started rows' attempts. Parameters: worker id, now, now, then the batch (`a`
/// attempt id, `i` execution id, `n` attempt number, `t` lease token).
const ATTEMPTS: &str = "INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, \
status, error, started_at, heartbeat_at, finished_at) SELECT v.a, v.i, v.n, v.t, ?, 'running', \
NULL, ?, ?, NULL FROM JSON_TABLE(?, '$[*]' COLUMNS (a CHAR(36) PATH '$.a', i CHAR(36) PATH '$.i', \
n INTEGER PATH '$.n', t CHAR(36) PATH '$.t')) v";

/// `sql::LOCK_LEASES_MANY` over the batch (`i` execution id, `a` attempt id), locking in the
/// array's order. Parameter: the batch.
const LOCK_LEASES: &str = "SELECT {cols}, CAST(EXISTS (SELECT 1 FROM {a} r WHERE r.id = v.a \
AND r.execution_id = e.id AND r.lease_token = e.lease_token AND r.status = 'running') AS SIGNED) \
FROM JSON_TABLE(?, '$[*]' COLUMNS (i CHAR(36) PATH '$.i', a CHAR(36) PATH '$.a')) v \
JOIN {e} e ON e.id = v.i{lock}";

/// Writes accepted completions to their locked executions. Parameters: the batch (`i` id, `s`
/// status, `r` result and `x` error as JSON texts, `v` available_at, `f` finished_at), then now.
const COMPLETE_EXECUTIONS: &str = "UPDATE {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS (\
i CHAR(36) PATH '$.i', s VARCHAR(32) PATH '$.s', r LONGTEXT PATH '$.r', x LONGTEXT PATH '$.x', \
v DATETIME(6) PATH '$.v', f DATETIME(6) PATH '$.f')) v ON e.id = v.i SET e.status = v.s, \
e.result = v.r, e.error = v.x, e.available_at = v.v, e.finished_at = v.f, e.updated_at = ?, \
e.version = e.version + 1, e.lease_token = NULL, e.lease_expires_at = NULL, e.worker_id = NULL";

/// Finishes the accepted completions' attempts still `running`. Parameters: the batch (`a`
/// attempt id, `s` status, `x` error as JSON text), then now.
const COMPLETE_ATTEMPTS: &str = "UPDATE {a} y JOIN JSON_TABLE(?, '$[*]' COLUMNS (\
a CHAR(36) PATH '$.a', s VARCHAR(32) PATH '$.s', x LONGTEXT PATH '$.x')) v ON y.id = v.a \
SET y.status = v.s, y.error = v.x, y.finished_at = ? WHERE y.status = 'running'";

/// Writes completions to the executions that still run under their leases, each fenced in
/// the `WHERE` (running, under the item's lease token `t`, the lease not ended); the rest are
/// left alone. Parameters: the batch (`i`, `t`, `s`, `r`, `x` as in [`COMPLETE_EXECUTIONS`],
/// `v` the retry's `available_at` or `NULL` to keep it, `f`), now, now.
const COMPLETE_RUNNING_EXECUTIONS: &str = "UPDATE {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS (\
i CHAR(36) PATH '$.i', t CHAR(36) PATH '$.t', s VARCHAR(32) PATH '$.s', r LONGTEXT PATH '$.r', \
x LONGTEXT PATH '$.x', v DATETIME(6) PATH '$.v', f DATETIME(6) PATH '$.f')) v ON e.id = v.i \
SET e.status = v.s, e.result = v.r, e.error = v.x, \
e.available_at = COALESCE(v.v, e.available_at), e.finished_at = v.f, e.updated_at = ?, \
e.version = e.version + 1, e.lease_token = NULL, e.lease_expires_at = NULL, e.worker_id = NULL \
WHERE e.status = 'running' AND e.lease_token = v.t AND e.lease_expires_at > ?";

/// Finishes the attempts of [`COMPLETE_RUNNING_EXECUTIONS`], each fenced by its execution `i`
/// and lease token `t`. Parameters: the batch (`a`, `i`, `t`, `s`, `x`), then now.
const COMPLETE_RUNNING_ATTEMPTS: &str = "UPDATE {a} y JOIN JSON_TABLE(?, '$[*]' COLUMNS (\
a CHAR(36) PATH '$.a', i CHAR(36) PATH '$.i', t CHAR(36) PATH '$.t', s VARCHAR(32) PATH '$.s', \
x LONGTEXT PATH '$.x')) v ON y.id = v.a SET y.status = v.s, y.error = v.x, y.finished_at = ? \
WHERE y.status = 'running' AND y.execution_id = v.i AND y.lease_token = v.t";

/// `sql::HEARTBEAT_MANY` over the batch (an array of ids). Parameters: the batch, then
/// `lease_expires_at`, now.
const HEARTBEAT: &str = "UPDATE {e} e JOIN JSON_TABLE(?, '$[*]' COLUMNS (i CHAR(36) PATH '$')) v \
ON e.id = v.i SET e.lease_expires_at = ?, e.updated_at = ? \
WHERE e.status IN ('running', 'cancel_requested')";

/// `sql::HEARTBEAT_ATTEMPTS_MANY` over the batch (an array of attempt ids). Parameters: the
/// batch, then now.
const HEARTBEAT_ATTEMPTS: &str = "UPDATE {a} y JOIN JSON_TABLE(?, '$[*]' COLUMNS \
(i CHAR(36) PATH '$')) v ON y.id = v.i SET y.heartbeat_at = ? WHERE y.status = 'running'";

/// The statements above, rendered for a backend's tables.
pub(super) struct JsonStatements {
    pub(super) start: String,
    pub(super) attempts: String,
    pub(super) lock_leases: String,
    pub(super) complete_executions: String,
    pub(super) complete_attempts: String,
    pub(super) complete_running_executions: String,
    pub(super) complete_running_attempts: String,
    pub(super) heartbeat: String,
    pub(super) heartbeat_attempts: String,
}

impl JsonStatements {
    /// The statements for `executions` and `attempts` (quoted names).
    pub(super) fn new<D: Dialect>(executions: &str, attempts: &str) -> Self {
        let r = |t: &str| {
            D::render(&sql::render(
                t,
                executions,
                attempts,
                D::FOR_UPDATE,
                D::SKIP_LOCKED,
            ))
        };
        Self {
            start: r(START),
            attempts: r(ATTEMPTS),
            lock_leases: r(LOCK_LEASES),
            complete_executions: r(COMPLETE_EXECUTIONS),
            complete_attempts: r(COMPLETE_ATTEMPTS),
            complete_running_executions: r(COMPLETE_RUNNING_EXECUTIONS),
            complete_running_attempts: r(COMPLETE_RUNNING_ATTEMPTS),
            heartbeat: r(HEARTBEAT),
            heartbeat_attempts: r(HEARTBEAT_ATTEMPTS),
        }
    }
}

/// A batch as the statements read it: one JSON array of `items`.
pub(super) fn batch(items: impl Iterator<Item = Value>) -> String {
    Value::Array(items.collect()).to_string()
}

/// One item of a batch: an object of `fields`.
pub(super) fn item<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<Map<_, _>>(),
    )
}

/// An id as the dialect binds ids: 32 lower-case hex digits.
pub(super) fn id(id: Uuid) -> Value {
    Value::String(id.simple().to_string())
}

/// A JSON document stored as its text, as the dialect binds one (`None`: SQL `NULL`).
pub(super) fn document(value: Option<&Value>) -> Value {
    value.map_or(Value::Null, |v| Value::String(v.to_string()))
}

/// An instant as a `DATETIME(6)` reads it, in UTC to the microsecond (`None`: SQL `NULL`).
pub(super) fn datetime(at: Option<OffsetDateTime>) -> Value {
    at.map_or(Value::Null, |at| {
        let t = onestep_core::clock::utc(at);
        Value::String(format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.microsecond()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_written_as_the_dialect_binds_them() {
        let at = time::macros::datetime!(2026-12-04 10:00:00.000_123 +02:00);
        assert_eq!(datetime(Some(at)), json!("2026-12-04 08:00:00.000123"));
        assert_eq!(datetime(None), Value::Null);
        let doc = json!({"s": "é 😀 \u{0}", "n": 1});
        assert_eq!(document(Some(&doc)), Value::String(doc.to_string()));
        assert_eq!(document(None), Value::Null);
        let u = Uuid::from_u128(0x0193_a0b0_c0d0_7e0f_8112_2334_4556_6778);
        assert_eq!(id(u), json!("0193a0b0c0d07e0f8112233445566778"));
        assert_eq!(
            batch([item([("i", id(u)), ("n", json!(2))])].into_iter()),
            r#"[{"i":"0193a0b0c0d07e0f8112233445566778","n":2}]"#
        );
    }
}

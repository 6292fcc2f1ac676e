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

use std::fmt::Write as _;

use serde_json::Value;
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

/// A batch as the statements read it: one JSON array with an object per item, each written by
/// `write` straight into the text (no `Value` tree per item).
pub(super) fn batch<T>(
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut Fields<'_>, T),
) -> String {
    let mut out = String::with_capacity(1024);
    out.push('[');
    for (n, x) in items.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('{');
        write(
            &mut Fields {
                out: &mut out,
                first: true,
            },
            x,
        );
        out.push('}');
    }
    out.push(']');
    out
}

/// A batch of bare ids: one JSON array of their texts (the statements read it with `PATH '$'`).
pub(super) fn ids(ids: impl IntoIterator<Item = Uuid>) -> String {
    let mut out = String::with_capacity(1024);
    out.push('[');
    for (n, id) in ids.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_id(&mut out, id);
    }
    out.push(']');
    out
}

/// The fields of one item of a [`batch`], each value written as the dialect binds it.
pub(super) struct Fields<'a> {
    out: &'a mut String,
    first: bool,
}

impl Fields<'_> {
    fn key(&mut self, key: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
        self.out
    }

    /// An id: 32 lower-case hex digits.
    pub(super) fn id(&mut self, key: &str, id: Uuid) -> &mut Self {
        push_id(self.key(key), id);
        self
    }

    /// An integer.
    pub(super) fn int(&mut self, key: &str, n: i64) -> &mut Self {
        let out = self.key(key);
        // Writing to a `String` cannot fail.
        let _ = write!(out, "{n}");
        self
    }

    /// A text (a status, a name).
    pub(super) fn text(&mut self, key: &str, text: &str) -> &mut Self {
        let out = self.key(key);
        out.push('"');
        escape_into(out, text);
        out.push('"');
        self
    }

    /// A JSON document stored as its compact text, as the dialect binds one (`None`: SQL
    /// `NULL`).
    pub(super) fn document(&mut self, key: &str, value: Option<&Value>) -> &mut Self {
        let out = self.key(key);
        match value {
            None => out.push_str("null"),
            Some(value) => {
                out.push('"');
                // The document's text, escaped as it is written (writing to a `String` cannot
                // fail, and `Value`'s `Display` writes the compact text `to_string` gives).
                let _ = write!(Escaped(out), "{value}");
                out.push('"');
            }
        }
        self
    }

    /// An instant as a `DATETIME(6)` reads it, in UTC to the microsecond (`None`: SQL `NULL`).
    pub(super) fn datetime(&mut self, key: &str, at: Option<OffsetDateTime>) -> &mut Self {
        let out = self.key(key);
        match at {
            None => out.push_str("null"),
            Some(at) => {
                let t = onestep_core::clock::utc(at);
                let _ = write!(
                    out,
                    "\"{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}\"",
                    t.year(),
                    u8::from(t.month()),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second(),
                    t.microsecond()
                );
            }
        }
        self
    }
}

/// `id` as a JSON string of 32 lower-case hex digits.
fn push_id(out: &mut String, id: Uuid) {
    let mut hex = [0u8; 32];
    out.push('"');
    out.push_str(id.simple().encode_lower(&mut hex));
    out.push('"');
}

/// A `fmt::Write` that escapes what it is given for the inside of a JSON string.
struct Escaped<'a>(&'a mut String);

impl std::fmt::Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        escape_into(self.0, s);
        Ok(())
    }
}

/// Appends `text` escaped for the inside of a JSON string: quote, backslash and the control
/// characters; everything else as it is (the server reads UTF-8).
fn escape_into(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest.find(|c: char| c == '"' || c == '\\' || c < ' ') {
        out.push_str(&rest[..at]);
        let c = rest[at..].chars().next().unwrap_or(' ');
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_batch_is_the_json_the_statements_read() {
        let at = time::macros::datetime!(2026-12-04 10:00:00.000_123 +02:00);
        let u = Uuid::from_u128(0x0193_a0b0_c0d0_7e0f_8112_2334_4556_6778);
        let doc = json!({"s": "é 😀 \u{0} \u{1f} \"q\" \\ \n\r\t", "n": [1, -2.5, null]});
        let text = batch([1, 2], |f, n| {
            f.id("i", u)
                .int("n", n)
                .text("s", "a\"b\\c\u{7}")
                .document("r", (n == 1).then_some(&doc))
                .datetime("v", (n == 1).then_some(at));
        });
        let read: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            read,
            json!([
                {"i": "0193a0b0c0d07e0f8112233445566778", "n": 1, "s": "a\"b\\c\u{7}",
                 "r": doc.to_string(), "v": "2026-12-04 08:00:00.000123"},
                {"i": "0193a0b0c0d07e0f8112233445566778", "n": 2, "s": "a\"b\\c\u{7}",
                 "r": null, "v": null},
            ])
        );
        assert_eq!(
            ids([u, Uuid::nil()]),
            r#"["0193a0b0c0d07e0f8112233445566778","00000000000000000000000000000000"]"#
        );
        assert_eq!(batch(std::iter::empty::<()>(), |_, ()| ()), "[]");
    }

    /// The MySQL dialect's start-up probe sends what this writer would send.
    #[cfg(feature = "mysql")]
    #[test]
    fn the_mysql_probe_is_written_as_the_batches_are() {
        use crate::mysql::{JSON_TABLE_PROBE_BATCH, JSON_TABLE_PROBE_TEXT};
        let doc: Value = serde_json::from_str(JSON_TABLE_PROBE_TEXT).unwrap();
        assert_eq!(doc.to_string(), JSON_TABLE_PROBE_TEXT);
        let written = batch([&doc], |f, doc| {
            f.document("r", Some(doc));
        });
        assert_eq!(written, JSON_TABLE_PROBE_BATCH);
    }
}

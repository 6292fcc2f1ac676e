//! Statement parameters in a dialect-neutral form; each dialect binds them in its own types.

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// One bound value of a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// An id (UUID column on PostgreSQL, `CHAR(32)` hex elsewhere).
    Id(Uuid),
    /// A nullable id.
    OptId(Option<Uuid>),
    /// Text.
    Text(String),
    /// Nullable text.
    OptText(Option<String>),
    /// A 32-bit integer column (`INTEGER`).
    Int(i32),
    /// A 64-bit integer (`BIGINT`, `LIMIT`).
    BigInt(i64),
    /// A JSON document.
    Json(Value),
    /// A nullable JSON document.
    OptJson(Option<Value>),
    /// An instant (bound in UTC; `From` converts it).
    Time(OffsetDateTime),
    /// A nullable instant.
    OptTime(Option<OffsetDateTime>),
}

impl From<Uuid> for Param {
    fn from(v: Uuid) -> Self {
        Self::Id(v)
    }
}

impl From<Option<Uuid>> for Param {
    fn from(v: Option<Uuid>) -> Self {
        Self::OptId(v)
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Self::Text(v.to_string())
    }
}

impl From<String> for Param {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<Option<String>> for Param {
    fn from(v: Option<String>) -> Self {
        Self::OptText(v)
    }
}

impl From<i32> for Param {
    fn from(v: i32) -> Self {
        Self::Int(v)
    }
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Self::BigInt(v)
    }
}

impl From<OffsetDateTime> for Param {
    /// Converted to UTC without panicking (see [`onestep_core::clock::utc`]).
    fn from(v: OffsetDateTime) -> Self {
        Self::Time(onestep_core::clock::utc(v))
    }
}

impl From<Option<OffsetDateTime>> for Param {
    /// Converted to UTC without panicking (see [`onestep_core::clock::utc`]).
    fn from(v: Option<OffsetDateTime>) -> Self {
        Self::OptTime(v.map(onestep_core::clock::utc))
    }
}

/// Whether a statement's text is the same from call to call, so it is worth keeping prepared.
/// Statements that grow with a batch (`CASE id WHEN …`, multi-row `VALUES`, long `IN` lists)
/// are not: caching each size would fill the driver's statement cache and, on MySQL, the
/// server's `max_prepared_stmt_count`.
///
/// A statement that starts with [`PLAN_PER_CALL`] is never kept prepared either: the server then
/// plans it for each call's parameter values and the table's size at that moment.
pub fn is_stable(sql: &str) -> bool {
    let placeholders = sql.bytes().filter(|b| *b == b'?' || *b == b'$').count();
    placeholders <= 24
        && !sql.contains("CASE id")
        && !sql.contains("), (")
        && !sql.starts_with(PLAN_PER_CALL)
}

/// Marks a statement whose plan must not be reused (see [`is_stable`]). A kept-prepared
/// statement switches to a generic plan after a few calls, and that plan is kept until the
/// table is next analyzed: one made while a table was still small and fast-growing can pick an
/// index that turns each call into a scan.
pub const PLAN_PER_CALL: &str = "/* planned per call */ ";

/// Rewrites `?` placeholders as `$1`, `$2`, … (PostgreSQL). Statements here never contain a
/// literal `?`.
pub fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_shaped_and_marked_statements_are_not_kept_prepared() {
        assert!(is_stable("SELECT a FROM t WHERE id = ?"));
        assert!(!is_stable("INSERT INTO t (a) VALUES (?), (?)"));
        assert!(!is_stable("UPDATE t SET a = CASE id WHEN ? THEN ? END"));
        assert!(!is_stable(&format!(
            "{PLAN_PER_CALL}SELECT a FROM t WHERE id = ?"
        )));
    }

    #[test]
    fn question_marks_become_numbered_placeholders() {
        assert_eq!(
            numbered_placeholders("a = ? AND b IN (?, ?)"),
            "a = $1 AND b IN ($2, $3)"
        );
    }
}

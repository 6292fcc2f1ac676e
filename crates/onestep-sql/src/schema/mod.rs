//! DDL, object names and DDL locks of the tracked-execution tables.
//!
//! The two tables (executions and attempts) must be byte-compatible with the
//! Python reference (`onestep-sql` 0.7.1) so that a Python API and a Rust worker
//! can share one database. This module ports the reference's rules:
//!
//! * table names are bare identifiers (`^[A-Za-z_][A-Za-z0-9_]*$`) of at most
//!   63 characters on PostgreSQL and 64 on MySQL/MariaDB ([`validate_table_name`]);
//! * index and constraint names are `{prefix}{table}_{suffix}`, hash-truncated
//!   to the dialect's identifier limit ([`derive_object_name`],
//!   [`object_names`]);
//! * the DDL is the reference's, rendered for each dialect from one
//!   definition of the two tables ([`render_ddl`]; the `migrations/` files are
//!   the same statements with `{placeholder}`s, checked against it by a test);
//! * concurrent creators serialize on a PostgreSQL advisory lock
//!   ([`postgres_advisory_lock_key`]) or on two MySQL `GET_LOCK` names
//!   ([`MYSQL_GLOBAL_DDL_LOCK_NAME`], then [`mysql_ddl_lock_name`]).
//!
//! SQLite: the reference has no SQLite backend; its unit suites run the
//! PostgreSQL schema on SQLite. [`Dialect::Sqlite`] is exactly that: the
//! PostgreSQL schema builder rendered for SQLite (`CHAR(32)` ids, `JSON`,
//! `DATETIME`, the same partial indexes and fixed CHECK names), and
//! PostgreSQL's 63-character limit for table names and derived names. SQLite
//! itself has no identifier length limit; 63 keeps a SQLite database
//! identical to the one the reference's PostgreSQL schema makes on SQLite, and
//! keeps every accepted name portable to PostgreSQL.
//!
//! MariaDB: with SQLAlchemy 2.1 the reference creates MariaDB's native `UUID`
//! type for the id columns once connected to MariaDB 10.7+ (even through a
//! `mysql://` URL), and its CHAR(32) binding no longer fits a `CHAR(32)`
//! column there ("Data too long"). [`Dialect::MariaDb`] renders that schema;
//! choose it with [`mysql_family_dialect`] from `SELECT VERSION()`.
//!
//! Identifier quoting: the DDL quotes every table and object name
//! (`"…"` on PostgreSQL and SQLite, `` `…` `` on MySQL). SQLAlchemy quotes a name
//! when it has an upper-case letter or is a reserved word of the dialect;
//! quoting a lower-case, non-reserved name changes nothing on any of these
//! databases, so always quoting names the same objects the reference names
//! (a `MyExecutions` table is `"MyExecutions"` on PostgreSQL for both).

use sha2::{Digest, Sha256};

/// Default name of the executions table (the reference's `table=` default).
pub const DEFAULT_EXECUTIONS_TABLE: &str = "onestep_executions";

/// Default name of the attempts table (the reference's `attempts_table=` default).
pub const DEFAULT_ATTEMPTS_TABLE: &str = "onestep_execution_attempts";

/// Fixed MySQL `GET_LOCK` name that every tracked-execution DDL takes first.
///
/// Two backends over one shared executions table but different attempts
/// tables derive different [`mysql_ddl_lock_name`]s, so the reference also
/// serializes all execution DDL on this one name: acquire it, then the pair
/// lock; release the pair lock, then this one.
pub const MYSQL_GLOBAL_DDL_LOCK_NAME: &str = "lock_onestep_execution_ddl";

/// Seconds the reference waits for each MySQL `GET_LOCK` before failing.
pub const MYSQL_DDL_LOCK_TIMEOUT_SECS: u32 = 10;

/// Number of hex digits of `sha256(base)` appended to a truncated name.
pub const NAME_HASH_LENGTH: usize = 12;

mod render;
mod table;

/// Line that separates two statements in [`Dialect::ddl_template`] and in the files of the
/// workspace's `migrations/` folder.
pub const STATEMENT_SEPARATOR: &str = "-- statement";

/// A SQL dialect that can hold the tracked-execution tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL (the reference's `onestep_sql.postgres` schema).
    Postgres,
    /// MySQL 8.0.16+, and MariaDB before 10.7 (the reference's
    /// `onestep_sql.mysql` schema with `CHAR(32)` hex ids).
    MySql,
    /// MariaDB 10.7+ reached through the MySQL protocol: the MySQL schema
    /// with MariaDB's native `UUID` type for the id columns, which is what the
    /// reference creates there (SQLAlchemy 2.1 maps `sa.Uuid` to `UUID` once it
    /// has connected to MariaDB 10.7+; SQLAlchemy 2.0 still used `CHAR(32)`).
    /// Names, limits and locks are MySQL's. Pick it with
    /// [`mysql_family_dialect`].
    MariaDb,
    /// SQLite: the PostgreSQL schema rendered for SQLite, as the reference's
    /// unit suites use it.
    Sqlite,
}

impl Dialect {
    /// Every dialect, in a fixed order.
    pub const ALL: [Dialect; 4] = [
        Dialect::Postgres,
        Dialect::MySql,
        Dialect::MariaDb,
        Dialect::Sqlite,
    ];

    /// Longest table name, and longest derived object name, in characters:
    /// 63 on PostgreSQL and SQLite, 64 on MySQL and MariaDB.
    pub const fn identifier_max_length(self) -> usize {
        match self {
            Dialect::Postgres | Dialect::Sqlite => 63,
            Dialect::MySql | Dialect::MariaDb => 64,
        }
    }

    /// Whether this is one of the MySQL-protocol dialects, which share
    /// per-table CHECK and FK names and the `GET_LOCK` DDL locks.
    pub const fn is_mysql_family(self) -> bool {
        matches!(self, Dialect::MySql | Dialect::MariaDb)
    }

    /// Column type of the UUID columns (`id`, `execution_id`, `lease_token`):
    /// `UUID` on PostgreSQL and MariaDB, `CHAR(32)` (32 lower-case hex digits,
    /// no dashes) on MySQL and SQLite.
    pub const fn uuid_type(self) -> &'static str {
        match self {
            Dialect::Postgres | Dialect::MariaDb => "UUID",
            Dialect::MySql | Dialect::Sqlite => "CHAR(32)",
        }
    }

    /// The DDL with `{placeholder}`s instead of names, statements separated by
    /// [`STATEMENT_SEPARATOR`] lines: the text of `migrations/<dialect>/execution_tables.sql`
    /// (without its comment header), for a person who creates the tables by hand. MySQL and
    /// MariaDB share one template, with `{uuid_type}` for the id columns' type.
    pub fn ddl_template(self) -> String {
        let placeholders: Vec<(&'static str, String)> = ObjectNames::FIELDS
            .iter()
            .map(|field| (*field, format!("{{{field}}}")))
            .collect();
        let uuid_type = if self.is_mysql_family() {
            "{uuid_type}"
        } else {
            self.uuid_type()
        };
        let names = render::Names {
            executions: "{executions}",
            attempts: "{attempts}",
            objects: placeholders
                .iter()
                .map(|(field, value)| (*field, value.as_str()))
                .collect(),
            uuid_type,
        };
        render::statements(self, &names).join(&format!("\n{STATEMENT_SEPARATOR}\n"))
    }
}

/// Choose [`Dialect::MariaDb`] or [`Dialect::MySql`] from the server's
/// `SELECT VERSION()` string, the way SQLAlchemy decides whether to use
/// MariaDB's native UUID type.
///
/// The string is split at `.`, `-` and `+`; numeric pieces (optionally
/// followed by `a`, `b` or `c`) are version numbers, and a piece starting
/// with `MariaDB` marks a MariaDB server whose version is the last three
/// numbers before it (which skips the `5.5.5-` prefix some MariaDB servers
/// report). MariaDB 10.7 or newer gives [`Dialect::MariaDb`]; anything else,
/// including an unparsable string, gives [`Dialect::MySql`].
pub fn mysql_family_dialect(server_version: &str) -> Dialect {
    let mut numbers: Vec<u64> = Vec::new();
    let mut mariadb_version: Option<Vec<u64>> = None;
    for piece in server_version.split(['.', '-', '+']) {
        if piece.starts_with("MariaDB") && piece.chars().all(|c| c.is_alphanumeric() || c == '_') {
            let start = numbers.len().saturating_sub(3);
            mariadb_version = Some(numbers[start..].to_vec());
        } else {
            let digits = piece.strip_suffix(['a', 'b', 'c']).unwrap_or(piece);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                // A number too large for u64 is no real version; saturate.
                numbers.push(digits.parse().unwrap_or(u64::MAX));
            }
        }
    }
    match mariadb_version {
        Some(version) if version.as_slice() >= [10, 7].as_slice() => Dialect::MariaDb,
        _ => Dialect::MySql,
    }
}

/// Why a pair of table names cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The name is empty or is not a bare `[A-Za-z_][A-Za-z0-9_]*` identifier
    /// (no schema qualifier, no quoting, ASCII only).
    #[error("{field} must be a non-empty SQL identifier")]
    NotAnIdentifier {
        /// The option that carried the name (`executions_table`, `attempts_table`).
        field: String,
    },
    /// The name is longer than the dialect's identifier limit.
    #[error("{field} must be at most {max_length} characters")]
    TooLong {
        /// The option that carried the name.
        field: String,
        /// The dialect's limit ([`Dialect::identifier_max_length`]).
        max_length: usize,
    },
    /// Both names designate one table (compared ignoring ASCII case, since
    /// SQLite and case-insensitive MySQL installations fold case). The
    /// reference fails here too, inside SQLAlchemy, with an unrelated message.
    #[error("executions_table and attempts_table must name different tables")]
    SameTable,
}

/// Check one table name the way the reference does.
///
/// `field` names the option in the message, e.g. `"executions_table"`. The
/// identifier shape is checked before the length, so an over-long name that is
/// also malformed reports "must be a non-empty SQL identifier".
pub fn validate_table_name(field: &str, name: &str, dialect: Dialect) -> Result<(), SchemaError> {
    if !is_bare_identifier(name) {
        return Err(SchemaError::NotAnIdentifier {
            field: field.to_owned(),
        });
    }
    let max_length = dialect.identifier_max_length();
    // Bare identifiers are ASCII, so bytes are characters here.
    if name.len() > max_length {
        return Err(SchemaError::TooLong {
            field: field.to_owned(),
            max_length,
        });
    }
    Ok(())
}

fn is_bare_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) if first.is_ascii_alphabetic() || first == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The names of the two tracked-execution tables.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableNames {
    /// The executions table (`table=` in the reference).
    pub executions: String,
    /// The attempts table (`attempts_table=` in the reference).
    pub attempts: String,
}

impl TableNames {
    /// Pair two table names (nothing is checked; see [`TableNames::validate`]).
    pub fn new(executions: impl Into<String>, attempts: impl Into<String>) -> Self {
        Self {
            executions: executions.into(),
            attempts: attempts.into(),
        }
    }

    /// Check both names for `dialect`: the executions table first (fields
    /// `executions_table`, then `attempts_table`, as the reference reports
    /// them), then that they are two different tables.
    pub fn validate(&self, dialect: Dialect) -> Result<(), SchemaError> {
        validate_table_name("executions_table", &self.executions, dialect)?;
        validate_table_name("attempts_table", &self.attempts, dialect)?;
        if self.executions.eq_ignore_ascii_case(&self.attempts) {
            return Err(SchemaError::SameTable);
        }
        Ok(())
    }
}

impl Default for TableNames {
    /// `onestep_executions` and `onestep_execution_attempts`.
    fn default() -> Self {
        Self::new(DEFAULT_EXECUTIONS_TABLE, DEFAULT_ATTEMPTS_TABLE)
    }
}

/// Derive an index, constraint or lock name from a table name.
///
/// Returns `{prefix}{table}_{suffix}` when it is at most `max_length`
/// characters; otherwise its first `max_length - 13` characters, `_`, and the
/// first [`NAME_HASH_LENGTH`] hex digits of its SHA-256, which keeps the
/// result unique, deterministic and exactly `max_length` long. Lengths count
/// characters, as the reference does; the hash is over the UTF-8 bytes (the
/// reference hashes ASCII, which validated names always are).
pub fn derive_object_name(table: &str, prefix: &str, suffix: &str, max_length: usize) -> String {
    let base = format!("{prefix}{table}_{suffix}");
    if base.chars().count() <= max_length {
        return base;
    }
    let digest = hex::encode(Sha256::digest(base.as_bytes()));
    let hash: String = digest.chars().take(NAME_HASH_LENGTH).collect();
    let stem_length = max_length.saturating_sub(NAME_HASH_LENGTH + 1);
    let stem: String = base.chars().take(stem_length).collect();
    format!("{stem}_{hash}")
}

/// Every index and constraint name of one pair of tables, in one dialect.
///
/// The field names are the template placeholders (`{uq_idempotency}`, …).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectNames {
    /// Unique index on executions `(namespace, task_name, idempotency_key)`
    /// (partial `WHERE idempotency_key IS NOT NULL` except on MySQL/MariaDB).
    pub uq_idempotency: String,
    /// Claim index on executions `(namespace, task_name, available_at,
    /// created_at, id)` (partial on `status IN ('queued', 'retrying')` except
    /// on MySQL/MariaDB).
    pub ix_claim: String,
    /// Lease index on executions `(lease_expires_at, id)` (partial on
    /// `status IN ('running', 'cancel_requested')` except on MySQL/MariaDB).
    pub ix_lease: String,
    /// Listing index on executions `(namespace, created_at DESC, id DESC)`.
    pub ix_list: String,
    /// Index on attempts `(execution_id, attempt_no DESC)`.
    pub ix_attempts_execution: String,
    /// Unique constraint on attempts `(execution_id, attempt_no)`.
    pub uq_attempts_execution_attempt: String,
    /// CHECK on the executions `status` values: fixed
    /// `ck_onestep_execution_status` on PostgreSQL and SQLite (CHECK names are
    /// per table there), `ck_{executions}_status` on MySQL/MariaDB
    /// (schema-global on MySQL 8).
    pub ck_status: String,
    /// CHECK that `idempotency_key` and `submission_digest` are both NULL or
    /// both set: fixed `ck_onestep_execution_idempotency` on PostgreSQL and
    /// SQLite, `ck_{executions}_idempotency` on MySQL/MariaDB.
    pub ck_idempotency: String,
    /// CHECK on the attempts `status` values: fixed `ck_onestep_attempt_status`
    /// on PostgreSQL and SQLite, `ck_{attempts}_status` on MySQL/MariaDB.
    pub ck_attempt_status: String,
    /// Name of the attempts → executions foreign key: `fk_{attempts}_execution`
    /// on MySQL/MariaDB (InnoDB's own `{attempts}_ibfk_1` would pass 64
    /// characters at a 58-character table name, and FK names are
    /// schema-global); `None` on
    /// PostgreSQL and SQLite, where the reference leaves it unnamed
    /// (PostgreSQL then calls it `{attempts}_execution_id_fkey`).
    pub fk_attempts_execution: Option<String>,
}

impl ObjectNames {
    /// Every field name, which is also each object's placeholder in [`Dialect::ddl_template`].
    pub const FIELDS: [&'static str; 10] = [
        "uq_idempotency",
        "ix_claim",
        "ix_lease",
        "ix_list",
        "ix_attempts_execution",
        "uq_attempts_execution_attempt",
        "ck_status",
        "ck_idempotency",
        "ck_attempt_status",
        "fk_attempts_execution",
    ];

    /// The derived names that exist in this dialect, as `(placeholder, name)`
    /// pairs in a fixed order.
    pub fn entries(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![
            ("uq_idempotency", self.uq_idempotency.as_str()),
            ("ix_claim", self.ix_claim.as_str()),
            ("ix_lease", self.ix_lease.as_str()),
            ("ix_list", self.ix_list.as_str()),
            ("ix_attempts_execution", self.ix_attempts_execution.as_str()),
            (
                "uq_attempts_execution_attempt",
                self.uq_attempts_execution_attempt.as_str(),
            ),
            ("ck_status", self.ck_status.as_str()),
            ("ck_idempotency", self.ck_idempotency.as_str()),
            ("ck_attempt_status", self.ck_attempt_status.as_str()),
        ];
        if let Some(fk) = &self.fk_attempts_execution {
            out.push(("fk_attempts_execution", fk.as_str()));
        }
        out
    }
}

/// Derive every index and constraint name for `tables` in `dialect`.
///
/// Index and UNIQUE names are derived per table on every dialect (limit 63 on
/// PostgreSQL and SQLite, 64 on MySQL and MariaDB). CHECK names are fixed
/// constants on PostgreSQL and SQLite and derived per table on MySQL and
/// MariaDB; the FK is named only on MySQL and MariaDB. Meant for validated
/// names ([`TableNames::validate`]); other input still yields a value, never
/// a panic.
pub fn object_names(dialect: Dialect, tables: &TableNames) -> ObjectNames {
    let max = dialect.identifier_max_length();
    let executions = tables.executions.as_str();
    let attempts = tables.attempts.as_str();
    let derive =
        |table: &str, prefix: &str, suffix: &str| derive_object_name(table, prefix, suffix, max);
    let (ck_status, ck_idempotency, ck_attempt_status, fk_attempts_execution) = match dialect {
        Dialect::Postgres | Dialect::Sqlite => (
            "ck_onestep_execution_status".to_owned(),
            "ck_onestep_execution_idempotency".to_owned(),
            "ck_onestep_attempt_status".to_owned(),
            None,
        ),
        Dialect::MySql | Dialect::MariaDb => (
            derive(executions, "ck_", "status"),
            derive(executions, "ck_", "idempotency"),
            derive(attempts, "ck_", "status"),
            Some(derive(attempts, "fk_", "execution")),
        ),
    };
    ObjectNames {
        uq_idempotency: derive(executions, "uq_", "idempotency"),
        ix_claim: derive(executions, "ix_", "claim"),
        ix_lease: derive(executions, "ix_", "lease"),
        ix_list: derive(executions, "ix_", "list"),
        ix_attempts_execution: derive(attempts, "ix_", "execution"),
        uq_attempts_execution_attempt: derive(attempts, "uq_", "execution_attempt"),
        ck_status,
        ck_idempotency,
        ck_attempt_status,
        fk_attempts_execution,
    }
}

/// MySQL/MariaDB: the additive generated column that stands in for the partial claim index
/// they cannot have. It holds `task_name` while the execution is `queued` or `retrying` and NULL
/// once it is anything else, so its index ([`MYSQL_CLAIM_INDEX_COLUMNS`]) lets a claim skip
/// finished history instead of walking it. `VIRTUAL`: nothing is stored in the row, and writers
/// that do not know the column (the Python reference) are unaffected.
pub const MYSQL_CLAIM_TASK_COLUMN: &str = "onestep_claim_task";

/// The columns of the claim column's index, in order.
///
/// `status` comes last although the claim never filters on it through the index: an entry of a
/// virtual column's index is purged only when the purge can tell it from the row's new
/// version, and without `status` InnoDB left the old entries of rows finished by a large
/// `UPDATE` behind (delete-marked, history list length 0). A locking read (`FOR UPDATE SKIP
/// LOCKED` under READ COMMITTED) looks each of them up in the primary key, so with 1,000,000
/// finished executions one claim took 7–30 s; with `status` in the index they are purged and a
/// claim takes milliseconds.
pub const MYSQL_CLAIM_INDEX_COLUMNS: [&str; 6] = [
    "namespace",
    MYSQL_CLAIM_TASK_COLUMN,
    "available_at",
    "created_at",
    "id",
    "status",
];

/// The columns of the expiry sweep's index, in order: the sweep looks for claimable executions
/// past `expires_at` in every namespace, and without it MySQL/MariaDB read the whole table (with
/// 1,000,000 finished executions, ~3 s every sweep). `expires_at` leads so that the claim, which
/// matches the claim column by equality, never prefers this index to the claim index: with the
/// claim column first, a table of one namespace and one task gave both the same selectivity and
/// the optimizer took this shorter one, sorting the whole backlog on every claim. The cost: the
/// sweep also steps over finished rows whose `expires_at` has passed (inside the index only,
/// filtering on the claim column there).
pub const MYSQL_EXPIRY_INDEX_COLUMNS: [&str; 3] = ["expires_at", MYSQL_CLAIM_TASK_COLUMN, "id"];

/// The indexes on the claim column: each one's name suffix (`ix_<executions>_<suffix>`) and
/// columns.
pub const MYSQL_CLAIM_COLUMN_INDEXES: [(&str, &[&str]); 2] = [
    ("claimable", &MYSQL_CLAIM_INDEX_COLUMNS),
    ("expirable", &MYSQL_EXPIRY_INDEX_COLUMNS),
];

/// The name of an index on the claim column: `ix_<executions>_<suffix>` (see
/// [`MYSQL_CLAIM_COLUMN_INDEXES`]), derived like the other names (shortened with a digest where
/// the dialect's limit needs it).
pub fn mysql_claim_index_name(dialect: Dialect, tables: &TableNames, suffix: &str) -> String {
    derive_object_name(
        &tables.executions,
        "ix_",
        suffix,
        dialect.identifier_max_length(),
    )
}

fn mysql_index_definition(
    dialect: Dialect,
    tables: &TableNames,
    suffix: &str,
    columns: &[&str],
) -> String {
    let columns: Vec<String> = columns.iter().map(|c| format!("`{c}`")).collect();
    format!(
        "INDEX `{}` ({})",
        mysql_claim_index_name(dialect, tables, suffix),
        columns.join(", ")
    )
}

/// The `ALTER TABLE` that adds [`MYSQL_CLAIM_TASK_COLUMN`] and its indexes
/// ([`MYSQL_CLAIM_COLUMN_INDEXES`]) to a MySQL/MariaDB executions table. The names are validated
/// first, because they are pasted into SQL text.
pub fn mysql_claim_column_ddl(
    dialect: Dialect,
    tables: &TableNames,
) -> Result<String, SchemaError> {
    tables.validate(dialect)?;
    let indexes: Vec<String> = MYSQL_CLAIM_COLUMN_INDEXES
        .iter()
        .map(|(suffix, columns)| {
            format!(
                ", ADD {}",
                mysql_index_definition(dialect, tables, suffix, columns)
            )
        })
        .collect();
    Ok(format!(
        "ALTER TABLE `{executions}` ADD COLUMN `{column}` VARCHAR(255) GENERATED ALWAYS AS \
         (CASE WHEN status IN ('queued', 'retrying') THEN task_name END) VIRTUAL{indexes}",
        executions = tables.executions,
        column = MYSQL_CLAIM_TASK_COLUMN,
        indexes = indexes.concat(),
    ))
}

/// The `ALTER TABLE` that (re)builds the claim column's index `suffix` with `columns` (one of
/// [`MYSQL_CLAIM_COLUMN_INDEXES`]) on a table that has the column: `had_index` says whether an
/// index of that name exists (an older definition, dropped in the same statement). The server
/// builds it online.
pub fn mysql_claim_index_ddl(
    dialect: Dialect,
    tables: &TableNames,
    (suffix, columns): (&str, &[&str]),
    had_index: bool,
) -> Result<String, SchemaError> {
    tables.validate(dialect)?;
    let drop = if had_index {
        format!(
            "DROP INDEX `{}`, ",
            mysql_claim_index_name(dialect, tables, suffix)
        )
    } else {
        String::new()
    };
    Ok(format!(
        "ALTER TABLE `{}` {drop}ADD {}",
        tables.executions,
        mysql_index_definition(dialect, tables, suffix, columns)
    ))
}

/// Render the `CREATE TABLE IF NOT EXISTS` / `CREATE INDEX IF NOT EXISTS`
/// statements for `tables`, in execution order (executions table, its
/// indexes, attempts table, its index), without terminators.
///
/// The statements come from one definition of the two tables (the private
/// `schema::table` module) and are the reference's SQLAlchemy text, except that
/// they say `IF NOT EXISTS` and quote every table and object name. Running them
/// again is harmless. On MySQL the indexes are declared inside `CREATE TABLE`
/// (MySQL 8 has no `CREATE INDEX IF NOT EXISTS`), so there are two statements
/// instead of seven. The names are validated first ([`TableNames::validate`])
/// because they are pasted into SQL text.
pub fn render_ddl(dialect: Dialect, tables: &TableNames) -> Result<Vec<String>, SchemaError> {
    tables.validate(dialect)?;
    let objects = object_names(dialect, tables);
    let names = render::Names {
        executions: &tables.executions,
        attempts: &tables.attempts,
        objects: objects.entries(),
        uuid_type: dialect.uuid_type(),
    };
    Ok(render::statements(dialect, &names))
}

/// Key of the PostgreSQL transaction advisory lock that serializes table
/// creation: `SELECT pg_advisory_xact_lock(key)` in the DDL transaction.
///
/// The key is the first 8 bytes of `sha256("{executions}\0{attempts}")` (UTF-8),
/// read as a signed big-endian 64-bit integer.
pub fn postgres_advisory_lock_key(tables: &TableNames) -> i64 {
    advisory_lock_key(&[
        tables.executions.as_bytes(),
        b"\0",
        tables.attempts.as_bytes(),
    ])
}

/// A PostgreSQL advisory-lock key: the first 8 bytes of the SHA-256 of `parts` (concatenated),
/// as a signed big-endian 64-bit integer.
pub(crate) fn advisory_lock_key(parts: &[&[u8]]) -> i64 {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The per-pair MySQL `GET_LOCK` name that serializes table creation:
/// `lock_{executions}_{attempts}`, hash-truncated to 64 characters (the
/// `GET_LOCK` limit). Taken after [`MYSQL_GLOBAL_DDL_LOCK_NAME`], each with a
/// [`MYSQL_DDL_LOCK_TIMEOUT_SECS`] timeout, and released first.
pub fn mysql_ddl_lock_name(tables: &TableNames) -> String {
    derive_object_name(&tables.executions, "lock_", &tables.attempts, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements of a `migrations/` file: comment lines dropped, cut at
    /// [`STATEMENT_SEPARATOR`] lines, trimmed.
    fn file_statements(text: &str) -> Vec<String> {
        text.split(&format!("\n{STATEMENT_SEPARATOR}\n"))
            .map(|piece| {
                let lines: Vec<&str> = piece
                    .lines()
                    .filter(|line| !line.trim_start().starts_with("--"))
                    .collect();
                lines.join("\n").trim().to_owned()
            })
            .collect()
    }

    #[test]
    fn the_migration_files_are_the_rendered_templates() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
        for (folder, dialect) in [
            ("postgres", Dialect::Postgres),
            ("mysql", Dialect::MySql),
            ("sqlite", Dialect::Sqlite),
        ] {
            let path = format!("{root}/{folder}/execution_tables.sql");
            let text = std::fs::read_to_string(&path).expect("migration file");
            let template = dialect.ddl_template();
            assert_eq!(
                file_statements(&text),
                file_statements(&template),
                "{path} differs from the table definition; its statements should read:\n{template}"
            );
        }
    }

    #[test]
    fn mariadb_shares_the_mysql_template() {
        assert_eq!(
            Dialect::MariaDb.ddl_template(),
            Dialect::MySql.ddl_template()
        );
    }
}

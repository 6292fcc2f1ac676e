//! The two tracked-execution tables, defined once.
//!
//! [`EXECUTIONS`] and [`ATTEMPTS`] describe the reference's tables (`onestep-sql` 0.7.1,
//! `execution_schema`) column by column, with their keys, CHECKs and indexes, in the order
//! SQLAlchemy emits them. [`super::render`] turns them into each dialect's DDL; nothing else in
//! the crate spells a column type or a constraint.

/// A column type, mapped per dialect by [`super::render`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `sa.Uuid`: `UUID` on PostgreSQL and MariaDB, `CHAR(32)` on MySQL and SQLite.
    Uuid,
    /// `sa.String(n)`: `VARCHAR(n)` everywhere.
    Varchar(u16),
    /// `sa.JSON` (`JSONB` on PostgreSQL through `postgresql.JSONB`).
    Json,
    /// `sa.Integer`.
    Integer,
    /// `sa.BigInteger`.
    BigInt,
    /// `sa.DateTime(timezone=True)`: `TIMESTAMP WITH TIME ZONE`, `DATETIME(6)` on MySQL,
    /// `DATETIME` on SQLite.
    Timestamp,
}

/// A column's server default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Default {
    /// The integer zero, which SQLAlchemy writes as the quoted literal `'0'`.
    Zero,
    /// An empty JSON object: the literal `'{}'`, or `(JSON_OBJECT())` on MySQL, which accepts
    /// no literal default on a JSON column.
    EmptyObject,
}

/// One column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Column {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) nullable: bool,
    pub(crate) default: Option<Default>,
}

/// Which of the two tables a name or a reference designates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Executions,
    Attempts,
}

/// A table-level constraint, named by its [`super::ObjectNames`] field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Constraint {
    /// `CONSTRAINT name CHECK (expression)`.
    Check {
        name: &'static str,
        expression: &'static str,
    },
    /// `CONSTRAINT name UNIQUE (columns)`.
    Unique {
        name: &'static str,
        columns: &'static [&'static str],
    },
    /// `FOREIGN KEY(column) REFERENCES table (id) ON DELETE CASCADE`; named `name` where the
    /// dialect names foreign keys ([`super::ObjectNames::fk_attempts_execution`]).
    CascadeForeignKey {
        name: &'static str,
        column: &'static str,
        references: Role,
    },
}

/// A secondary index, named by its [`super::ObjectNames`] field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Index {
    pub(crate) name: &'static str,
    pub(crate) unique: bool,
    /// Columns with their direction: `true` for `DESC`.
    pub(crate) columns: &'static [(&'static str, bool)],
    /// The partial-index predicate, on the dialects that have partial indexes.
    pub(crate) partial: Option<&'static str>,
}

/// One table: columns, primary key `id`, constraints and indexes, in emission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Table {
    pub(crate) role: Role,
    pub(crate) columns: &'static [Column],
    pub(crate) constraints: &'static [Constraint],
    pub(crate) indexes: &'static [Index],
}

const fn col(name: &'static str, kind: Kind, nullable: bool) -> Column {
    Column {
        name,
        kind,
        nullable,
        default: None,
    }
}

const fn with_default(name: &'static str, kind: Kind, default: Default) -> Column {
    Column {
        name,
        kind,
        nullable: false,
        default: Some(default),
    }
}

const NULL: bool = true;
const NOT_NULL: bool = false;

/// The executions table.
pub(crate) const EXECUTIONS: Table = Table {
    role: Role::Executions,
    columns: &[
        col("id", Kind::Uuid, NOT_NULL),
        col("namespace", Kind::Varchar(255), NOT_NULL),
        col("task_name", Kind::Varchar(255), NOT_NULL),
        col("status", Kind::Varchar(32), NOT_NULL),
        col("payload", Kind::Json, NOT_NULL),
        with_default("metadata", Kind::Json, Default::EmptyObject),
        col("result", Kind::Json, NULL),
        col("error", Kind::Json, NULL),
        col("idempotency_key", Kind::Varchar(255), NULL),
        col("submission_digest", Kind::Varchar(64), NULL),
        with_default("attempts", Kind::Integer, Default::Zero),
        col("available_at", Kind::Timestamp, NOT_NULL),
        col("lease_token", Kind::Uuid, NULL),
        col("lease_expires_at", Kind::Timestamp, NULL),
        col("worker_id", Kind::Varchar(255), NULL),
        col("cancel_reason", Kind::Varchar(500), NULL),
        col("cancel_requested_at", Kind::Timestamp, NULL),
        col("expires_at", Kind::Timestamp, NULL),
        col("created_at", Kind::Timestamp, NOT_NULL),
        col("updated_at", Kind::Timestamp, NOT_NULL),
        col("started_at", Kind::Timestamp, NULL),
        col("finished_at", Kind::Timestamp, NULL),
        with_default("version", Kind::BigInt, Default::Zero),
    ],
    constraints: &[
        Constraint::Check {
            name: "ck_status",
            expression: "status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', \
                         'cancel_requested', 'cancelled', 'expired')",
        },
        Constraint::Check {
            name: "ck_idempotency",
            expression: "(idempotency_key IS NULL AND submission_digest IS NULL) OR \
                         (idempotency_key IS NOT NULL AND submission_digest IS NOT NULL)",
        },
    ],
    indexes: &[
        Index {
            name: "uq_idempotency",
            unique: true,
            columns: &[
                ("namespace", false),
                ("task_name", false),
                ("idempotency_key", false),
            ],
            partial: Some("idempotency_key IS NOT NULL"),
        },
        Index {
            name: "ix_claim",
            unique: false,
            columns: &[
                ("namespace", false),
                ("task_name", false),
                ("available_at", false),
                ("created_at", false),
                ("id", false),
            ],
            partial: Some("status IN ('queued', 'retrying')"),
        },
        Index {
            name: "ix_lease",
            unique: false,
            columns: &[("lease_expires_at", false), ("id", false)],
            partial: Some("status IN ('running', 'cancel_requested')"),
        },
        Index {
            name: "ix_list",
            unique: false,
            columns: &[("namespace", false), ("created_at", true), ("id", true)],
            partial: None,
        },
    ],
};

/// The attempts table.
pub(crate) const ATTEMPTS: Table = Table {
    role: Role::Attempts,
    columns: &[
        col("id", Kind::Uuid, NOT_NULL),
        col("execution_id", Kind::Uuid, NOT_NULL),
        col("attempt_no", Kind::Integer, NOT_NULL),
        col("lease_token", Kind::Uuid, NOT_NULL),
        col("worker_id", Kind::Varchar(255), NOT_NULL),
        col("status", Kind::Varchar(32), NOT_NULL),
        col("error", Kind::Json, NULL),
        col("started_at", Kind::Timestamp, NOT_NULL),
        col("heartbeat_at", Kind::Timestamp, NOT_NULL),
        col("finished_at", Kind::Timestamp, NULL),
    ],
    constraints: &[
        Constraint::Unique {
            name: "uq_attempts_execution_attempt",
            columns: &["execution_id", "attempt_no"],
        },
        Constraint::Check {
            name: "ck_attempt_status",
            expression: "status IN ('running', 'succeeded', 'retrying', 'failed', 'cancelled', \
                         'lease_lost')",
        },
        Constraint::CascadeForeignKey {
            name: "fk_attempts_execution",
            column: "execution_id",
            references: Role::Executions,
        },
    ],
    indexes: &[Index {
        name: "ix_attempts_execution",
        unique: false,
        columns: &[("execution_id", false), ("attempt_no", true)],
        partial: None,
    }],
};

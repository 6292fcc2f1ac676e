#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The reference's schema unit tests, ported: spec §6.4
//! (`plugins/onestep-postgres/tests/test_execution_schema.py`) and the schema
//! unit list of §6.9 (`plugins/onestep-mysql/tests/test_mysql_execution_schema.py`),
//! plus the rules this port adds (SQLite, MariaDB, templates).

use std::collections::HashSet;

use onestep_sql::schema::{
    DEFAULT_ATTEMPTS_TABLE, DEFAULT_EXECUTIONS_TABLE, Dialect, MYSQL_CLAIM_COLUMN_INDEXES,
    ObjectNames, SchemaError, TableNames, derive_object_name, mysql_claim_column_ddl,
    mysql_claim_index_ddl, mysql_claim_index_name, mysql_ddl_lock_name, mysql_family_dialect,
    object_names, postgres_advisory_lock_key, render_ddl, validate_table_name,
};

fn pair(executions: &str, attempts: &str) -> TableNames {
    TableNames::new(executions, attempts)
}

fn ddl(dialect: Dialect, tables: &TableNames) -> Vec<String> {
    render_ddl(dialect, tables).expect("valid table names")
}

fn joined(dialect: Dialect, tables: &TableNames) -> String {
    ddl(dialect, tables).join("\n")
}

/// The CREATE TABLE statement of `table` (the one whose name is quoted right after the keywords).
fn create_table(dialect: Dialect, tables: &TableNames, table: &str) -> String {
    ddl(dialect, tables)
        .into_iter()
        .find(|s| {
            s.starts_with(&format!("CREATE TABLE IF NOT EXISTS \"{table}\" "))
                || s.starts_with(&format!("CREATE TABLE IF NOT EXISTS `{table}` "))
        })
        .expect("CREATE TABLE statement")
}

fn index_and_unique_names(names: &ObjectNames) -> Vec<&str> {
    vec![
        &names.uq_idempotency,
        &names.ix_claim,
        &names.ix_lease,
        &names.ix_list,
        &names.ix_attempts_execution,
        &names.uq_attempts_execution_attempt,
    ]
    .into_iter()
    .map(String::as_str)
    .collect()
}

fn check_names(names: &ObjectNames) -> [&str; 3] {
    [
        &names.ck_status,
        &names.ck_idempotency,
        &names.ck_attempt_status,
    ]
    .map(String::as_str)
}

// ---------------------------------------------------------------- §6.4 PostgreSQL

#[test]
fn custom_attempts_tables_get_distinct_deterministic_postgres_constraint_names() {
    let first_attempts = format!("{}1", "a".repeat(62));
    let second_attempts = format!("{}2", "a".repeat(62));
    let first = object_names(Dialect::Postgres, &pair("executions", &first_attempts));
    let second = object_names(Dialect::Postgres, &pair("executions", &second_attempts));
    let repeat = object_names(Dialect::Postgres, &pair("executions", &first_attempts));

    assert_ne!(
        first.uq_attempts_execution_attempt,
        second.uq_attempts_execution_attempt
    );
    assert_eq!(
        first.uq_attempts_execution_attempt,
        repeat.uq_attempts_execution_attempt
    );
    assert!(first.uq_attempts_execution_attempt.len() <= 63);
    assert!(second.uq_attempts_execution_attempt.len() <= 63);
}

#[test]
fn postgres_object_names_fit_the_identifier_limit_for_max_length_tables() {
    let tables = pair(&"e".repeat(63), &"a".repeat(63));
    let names = object_names(Dialect::Postgres, &tables);
    assert!(names.uq_attempts_execution_attempt.len() <= 63);
    let attempts_ddl = create_table(Dialect::Postgres, &tables, &tables.attempts);
    assert!(attempts_ddl.contains(&names.uq_attempts_execution_attempt));

    let index_names = index_and_unique_names(&names);
    assert!(index_names.iter().all(|name| name.len() <= 63));
    assert_eq!(
        index_names.iter().collect::<HashSet<_>>().len(),
        index_names.len()
    );
}

#[test]
fn table_names_over_the_postgres_identifier_limit_are_rejected() {
    let err = render_ddl(Dialect::Postgres, &pair("executions", &"a".repeat(64)))
        .expect_err("64 characters is too long on PostgreSQL");
    assert!(err.to_string().contains("at most 63 characters"), "{err}");
    assert_eq!(
        err.to_string(),
        "attempts_table must be at most 63 characters"
    );
}

// ----------------------------------------------------------------- §6.9 MySQL

#[test]
fn mysql_json_metadata_default_is_the_json_object_expression() {
    let executions = create_table(
        Dialect::MySql,
        &TableNames::default(),
        DEFAULT_EXECUTIONS_TABLE,
    );
    assert!(
        executions.contains("metadata JSON NOT NULL DEFAULT (JSON_OBJECT())"),
        "{executions}"
    );
}

#[test]
fn every_mysql_time_column_is_datetime_with_fsp_six() {
    let tables = TableNames::default();
    let executions = create_table(Dialect::MySql, &tables, DEFAULT_EXECUTIONS_TABLE);
    let attempts = create_table(Dialect::MySql, &tables, DEFAULT_ATTEMPTS_TABLE);
    let columns = [
        (&executions, "available_at"),
        (&executions, "lease_expires_at"),
        (&executions, "cancel_requested_at"),
        (&executions, "expires_at"),
        (&executions, "created_at"),
        (&executions, "updated_at"),
        (&executions, "started_at"),
        (&executions, "finished_at"),
        (&attempts, "started_at"),
        (&attempts, "heartbeat_at"),
        (&attempts, "finished_at"),
    ];
    for (source, column) in columns {
        let line = source
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{column} ")))
            .expect("column line");
        assert!(line.contains("DATETIME(6)"), "{line}");
    }
    // No bare DATETIME (fsp 0 rounds available_at into the next second).
    for source in [&executions, &attempts] {
        assert_eq!(
            source.matches("DATETIME").count(),
            source.matches("DATETIME(6)").count()
        );
    }
}

#[test]
fn mysql_uuid_and_json_types_follow_the_mysql_mapping() {
    let executions = create_table(
        Dialect::MySql,
        &TableNames::default(),
        DEFAULT_EXECUTIONS_TABLE,
    );
    assert!(executions.contains("id CHAR(32) NOT NULL"));
    assert!(executions.contains("payload JSON NOT NULL"));
    assert!(!executions.contains("JSONB"));
}

#[test]
fn mariadb_uses_the_native_uuid_type_and_otherwise_the_mysql_schema() {
    let tables = TableNames::default();
    let mariadb = joined(Dialect::MariaDb, &tables);
    assert_eq!(
        mariadb.replace(" UUID", " CHAR(32)"),
        joined(Dialect::MySql, &tables)
    );
    assert!(mariadb.contains("\tid UUID NOT NULL"));
    assert!(mariadb.contains("\texecution_id UUID NOT NULL"));
    assert!(mariadb.contains("\tlease_token UUID,"));
    assert!(!mariadb.contains(" CHAR(32)"));
    assert_eq!(
        object_names(Dialect::MariaDb, &tables),
        object_names(Dialect::MySql, &tables)
    );
    assert_eq!(
        mysql_family_dialect("10.11.19-MariaDB-0+deb12u1"),
        Dialect::MariaDb
    );
    assert_eq!(mysql_family_dialect("10.6.18-MariaDB"), Dialect::MySql);
    assert_eq!(mysql_family_dialect("8.0.36"), Dialect::MySql);
    assert_eq!(mysql_family_dialect(""), Dialect::MySql);
    assert_eq!(mysql_family_dialect("MariaDB"), Dialect::MySql);
    assert_eq!(
        mysql_family_dialect("99999999999999999999999.1-MariaDB"),
        Dialect::MariaDb
    );
}

#[test]
fn mysql_check_constraint_names_are_derived_per_table() {
    let first = object_names(
        Dialect::MySql,
        &pair("group_a_executions", "group_a_attempts"),
    );
    let second = object_names(
        Dialect::MySql,
        &pair("group_b_executions", "group_b_attempts"),
    );
    let shared = object_names(Dialect::MySql, &pair("shared_executions", "first_attempts"));
    let shared_other = object_names(
        Dialect::MySql,
        &pair("shared_executions", "second_attempts"),
    );

    // Every distinct table has its own schema-global CHECK names.
    let distinct = [
        first.ck_status.as_str(),
        first.ck_idempotency.as_str(),
        second.ck_status.as_str(),
        second.ck_idempotency.as_str(),
        first.ck_attempt_status.as_str(),
        second.ck_attempt_status.as_str(),
        shared.ck_attempt_status.as_str(),
        shared_other.ck_attempt_status.as_str(),
    ];
    assert_eq!(
        distinct.iter().collect::<HashSet<_>>().len(),
        distinct.len()
    );
    assert!(
        distinct
            .iter()
            .all(|n| n.starts_with("ck_") && n.len() <= 64)
    );

    // One physical executions table: the same CHECK names from both pairs.
    assert_eq!(shared.ck_status, shared_other.ck_status);
    assert_eq!(shared.ck_idempotency, shared_other.ck_idempotency);

    // Deterministic.
    let repeat = object_names(
        Dialect::MySql,
        &pair("group_a_executions", "group_a_attempts"),
    );
    assert_eq!(check_names(&repeat), check_names(&first));
}

#[test]
fn mysql_indexes_have_no_partial_where_predicate() {
    let statements = ddl(Dialect::MySql, &TableNames::default());
    assert!(!statements.is_empty());
    for statement in &statements {
        assert!(!statement.to_uppercase().contains("WHERE"), "{statement}");
    }
    let unique = statements
        .iter()
        .flat_map(|s| s.lines())
        .find(|line| line.contains("UNIQUE INDEX"))
        .expect("unique index");
    assert!(unique.contains("idempotency_key"), "{unique}");
}

#[test]
fn mysql_foreign_key_is_explicitly_named_and_fits_the_limit() {
    let long_attempts = format!("attempts_long_{}", "a".repeat(44));
    assert_eq!(long_attempts.len(), 58);
    let tables = pair(&"e".repeat(64), &long_attempts);
    let names = object_names(Dialect::MySql, &tables);
    let fk = names
        .fk_attempts_execution
        .as_deref()
        .expect("named FK on MySQL");
    assert!(fk.starts_with("fk_"));
    assert!(fk.len() <= 64);
    assert_ne!(fk, format!("{long_attempts}_ibfk_1"));
    assert!(
        create_table(Dialect::MySql, &tables, &long_attempts)
            .contains(&format!("CONSTRAINT `{fk}` FOREIGN KEY"))
    );
}

#[test]
fn two_mysql_attempts_tables_over_one_executions_table_get_distinct_fk_names() {
    let first = object_names(Dialect::MySql, &pair("shared_executions", "first_attempts"));
    let second = object_names(
        Dialect::MySql,
        &pair("shared_executions", "second_attempts"),
    );
    assert!(first.fk_attempts_execution.is_some());
    assert_ne!(first.fk_attempts_execution, second.fk_attempts_execution);
}

#[test]
fn mysql_index_and_unique_names_fit_the_limit_and_are_unique_for_max_length_tables() {
    let names = object_names(Dialect::MySql, &pair(&"e".repeat(64), &"a".repeat(64)));
    let index_names = index_and_unique_names(&names);
    assert!(
        index_names
            .iter()
            .all(|name| !name.is_empty() && name.len() <= 64)
    );
    assert_eq!(
        index_names.iter().collect::<HashSet<_>>().len(),
        index_names.len()
    );
}

/// The generated claim column (MySQL/MariaDB only) is one additive `ALTER TABLE`: a `VIRTUAL`
/// column and an index whose derived name fits the limit and differs from every other name.
#[test]
fn mysql_claim_column_ddl_is_additive_and_its_index_name_fits_the_limit() {
    for dialect in [Dialect::MySql, Dialect::MariaDb] {
        let tables = pair(&"e".repeat(64), &"a".repeat(64));
        let alter = mysql_claim_column_ddl(dialect, &tables).unwrap();
        assert!(alter.starts_with(&format!("ALTER TABLE `{}` ADD COLUMN", "e".repeat(64))));
        assert!(alter.contains("GENERATED ALWAYS AS (CASE WHEN status IN ('queued', 'retrying') THEN task_name END) VIRTUAL"));
        let index = alter
            .split("ADD INDEX `")
            .nth(1)
            .and_then(|rest| rest.split('`').next())
            .unwrap();
        assert!(!index.is_empty() && index.len() <= 64, "{index}");
        assert_eq!(mysql_claim_index_name(dialect, &tables, "claimable"), index);
        let expiry = mysql_claim_index_name(dialect, &tables, "expirable");
        assert!(
            alter.contains(&format!(
                "ADD INDEX `{index}` (`namespace`, `onestep_claim_task`, `available_at`, `created_at`, `id`, `status`), ADD INDEX `{expiry}` (`expires_at`, `onestep_claim_task`, `id`)"
            )),
            "{alter}"
        );
        assert_eq!(
            mysql_claim_index_ddl(dialect, &tables, MYSQL_CLAIM_COLUMN_INDEXES[0], true).unwrap(),
            format!(
                "ALTER TABLE `{}` DROP INDEX `{index}`, ADD INDEX `{index}` (`namespace`, `onestep_claim_task`, `available_at`, `created_at`, `id`, `status`)",
                "e".repeat(64)
            ),
            "an older index of that name is replaced in one statement"
        );
        assert!(
            !mysql_claim_index_ddl(dialect, &tables, MYSQL_CLAIM_COLUMN_INDEXES[1], false)
                .unwrap()
                .contains("DROP INDEX")
        );
        assert!(expiry.len() <= 64 && expiry != index, "{expiry}");
        let names = object_names(dialect, &tables);
        assert!(!index_and_unique_names(&names).contains(&index));
        assert!(!index_and_unique_names(&names).contains(&expiry.as_str()));
        assert!(
            mysql_claim_column_ddl(dialect, &pair("bad name", "a")).is_err(),
            "names are validated before they are pasted into SQL"
        );
    }
}

#[test]
fn table_names_over_the_mysql_identifier_limit_are_rejected() {
    for dialect in [Dialect::MySql, Dialect::MariaDb] {
        let err = render_ddl(dialect, &pair(&"e".repeat(65), "attempts")).expect_err("too long");
        assert_eq!(
            err.to_string(),
            "executions_table must be at most 64 characters"
        );
        let err = render_ddl(dialect, &pair("executions", &"a".repeat(65))).expect_err("too long");
        assert_eq!(
            err.to_string(),
            "attempts_table must be at most 64 characters"
        );
        assert!(render_ddl(dialect, &pair(&"e".repeat(64), &"a".repeat(64))).is_ok());
    }
}

#[test]
fn mysql_tables_declare_innodb_and_utf8mb4() {
    let statements = ddl(Dialect::MySql, &TableNames::default());
    let tables: Vec<_> = statements
        .iter()
        .filter(|s| s.starts_with("CREATE TABLE"))
        .collect();
    assert_eq!(tables.len(), 2);
    for statement in tables {
        assert!(statement.contains("ENGINE=InnoDB"));
        assert!(statement.contains("CHARSET=utf8mb4"));
    }
}

#[test]
fn mysql_ddl_lock_name_fits_the_get_lock_limit_and_is_stable() {
    let default = mysql_ddl_lock_name(&TableNames::default());
    assert_eq!(
        default,
        "lock_onestep_executions_onestep_execution_attempts"
    );
    assert!(default.len() <= 64);

    let long_pair = pair(&"e".repeat(64), &"a".repeat(64));
    let long = mysql_ddl_lock_name(&long_pair);
    assert_eq!(long.len(), 64);
    assert_eq!(mysql_ddl_lock_name(&long_pair), long);
    assert_ne!(long, default);
}

// ------------------------------------------------------------ rules of this port

#[test]
fn table_name_validation_reports_the_reference_messages() {
    for dialect in Dialect::ALL {
        for bad in [
            "",
            "1abc",
            "a-b",
            "public.executions",
            "\u{e4}bc",
            "abc\n",
            " abc",
        ] {
            assert_eq!(
                validate_table_name("executions_table", bad, dialect),
                Err(SchemaError::NotAnIdentifier {
                    field: "executions_table".into()
                })
            );
        }
        let limit = dialect.identifier_max_length();
        assert!(validate_table_name("attempts_table", &"a".repeat(limit), dialect).is_ok());
        assert_eq!(
            validate_table_name("attempts_table", &"a".repeat(limit + 1), dialect)
                .expect_err("too long")
                .to_string(),
            format!("attempts_table must be at most {limit} characters")
        );
        // Shape is checked before length.
        assert_eq!(
            validate_table_name("executions_table", &"9".repeat(70), dialect)
                .expect_err("bad")
                .to_string(),
            "executions_table must be a non-empty SQL identifier"
        );
    }
}

#[test]
fn the_executions_table_is_validated_before_the_attempts_table() {
    let err = render_ddl(Dialect::Postgres, &pair("1bad", &"a".repeat(70))).expect_err("bad");
    assert_eq!(
        err.to_string(),
        "executions_table must be a non-empty SQL identifier"
    );
}

#[test]
fn sqlite_uses_postgres_names_limits_and_partial_indexes() {
    let tables = TableNames::default();
    assert_eq!(Dialect::Sqlite.identifier_max_length(), 63);
    assert_eq!(
        object_names(Dialect::Sqlite, &tables),
        object_names(Dialect::Postgres, &tables)
    );
    let long = pair(&"e".repeat(63), &"a".repeat(63));
    assert_eq!(
        object_names(Dialect::Sqlite, &long),
        object_names(Dialect::Postgres, &long)
    );
    let sqlite = joined(Dialect::Sqlite, &tables);
    assert!(sqlite.contains("WHERE idempotency_key IS NOT NULL"));
    assert!(sqlite.contains("WHERE status IN ('queued', 'retrying')"));
    assert!(sqlite.contains("WHERE status IN ('running', 'cancel_requested')"));
    assert!(sqlite.contains("id CHAR(32) NOT NULL"));
    assert!(sqlite.contains("metadata JSON DEFAULT '{}' NOT NULL"));
    assert!(sqlite.contains("available_at DATETIME NOT NULL"));
    assert!(!sqlite.contains("JSONB") && !sqlite.contains("TIMESTAMP"));
}

#[test]
fn postgres_and_sqlite_use_fixed_check_names_and_an_unnamed_foreign_key() {
    for dialect in [Dialect::Postgres, Dialect::Sqlite] {
        let names = object_names(dialect, &pair("jobs", "job_attempts"));
        assert_eq!(
            check_names(&names),
            [
                "ck_onestep_execution_status",
                "ck_onestep_execution_idempotency",
                "ck_onestep_attempt_status"
            ]
        );
        assert_eq!(names.fk_attempts_execution, None);
        let text = joined(dialect, &pair("jobs", "job_attempts"));
        assert!(
            text.contains("\tFOREIGN KEY(execution_id) REFERENCES \"jobs\" (id) ON DELETE CASCADE")
        );
    }
}

#[test]
fn postgres_ddl_uses_jsonb_timestamptz_and_the_literal_json_default() {
    let text = joined(Dialect::Postgres, &TableNames::default());
    assert!(text.contains("metadata JSONB DEFAULT '{}' NOT NULL"));
    assert!(text.contains("available_at TIMESTAMP WITH TIME ZONE NOT NULL"));
    assert!(text.contains("id UUID NOT NULL"));
    assert!(!text.contains("DATETIME"));
}

#[test]
fn every_statement_is_idempotent_and_every_placeholder_is_filled() {
    for dialect in Dialect::ALL {
        let statements = ddl(dialect, &pair("MyExecutions", "order"));
        let expected = if dialect.is_mysql_family() { 2 } else { 7 };
        assert_eq!(statements.len(), expected, "{dialect:?}");
        for statement in &statements {
            assert!(
                statement.starts_with("CREATE TABLE IF NOT EXISTS ")
                    || statement.starts_with("CREATE INDEX IF NOT EXISTS ")
                    || statement.starts_with("CREATE UNIQUE INDEX IF NOT EXISTS "),
                "{statement}"
            );
            assert!(!statement.contains("--"), "{statement}");
            assert!(!statement.ends_with(';'));
            // The only brace text left is the JSON literal default.
            assert_eq!(
                statement.matches('{').count(),
                statement.matches("'{}'").count(),
                "{statement}"
            );
        }
    }
}

#[test]
fn every_user_supplied_identifier_is_quoted() {
    let tables = pair("MyExecutions", "order");
    for dialect in Dialect::ALL {
        let quote = if dialect.is_mysql_family() { '`' } else { '"' };
        let text = joined(dialect, &tables);
        let names = object_names(dialect, &tables);
        let mut identifiers = vec![tables.executions.as_str(), tables.attempts.as_str()];
        identifiers.extend(names.entries().into_iter().map(|(_, n)| n));
        for identifier in identifiers {
            assert!(
                text.contains(&format!("{quote}{identifier}{quote}")),
                "{identifier} on {dialect:?}"
            );
        }
    }
}

#[test]
fn derived_names_are_hash_truncated_to_exactly_the_limit() {
    let short = derive_object_name("jobs", "ix_", "claim", 63);
    assert_eq!(short, "ix_jobs_claim");
    let table = "t".repeat(60);
    let long = derive_object_name(&table, "ix_", "claim", 63);
    assert_eq!(long.len(), 63);
    assert!(long.starts_with(&format!("ix_{}", "t".repeat(47))));
    assert_eq!(long.as_bytes()[50], b'_');
    assert!(long[51..].bytes().all(|b| b.is_ascii_hexdigit()));
    // Exactly at the limit: unchanged.
    let exact = "b".repeat(54);
    assert_eq!(derive_object_name(&exact, "ix_", "claim", 63).len(), 63);
    assert_eq!(
        derive_object_name(&exact, "ix_", "claim", 63),
        format!("ix_{exact}_claim")
    );
    // Non-identifier input never panics.
    assert_eq!(
        derive_object_name(&"\u{e4}".repeat(70), "ix_", "x", 63)
            .chars()
            .count(),
        63
    );
}

#[test]
fn the_postgres_advisory_lock_key_depends_on_both_tables_in_order() {
    let default = postgres_advisory_lock_key(&TableNames::default());
    assert_eq!(default, -4_001_340_406_995_615_597);
    let swapped = pair(DEFAULT_ATTEMPTS_TABLE, DEFAULT_EXECUTIONS_TABLE);
    assert_ne!(postgres_advisory_lock_key(&swapped), default);
    // The NUL separator keeps "ab"+"c" and "a"+"bc" apart.
    assert_ne!(
        postgres_advisory_lock_key(&pair("ab", "c")),
        postgres_advisory_lock_key(&pair("a", "bc"))
    );
}

#[test]
fn identical_or_case_folded_identical_table_names_are_rejected() {
    for dialect in Dialect::ALL {
        assert_eq!(
            render_ddl(dialect, &pair("jobs", "jobs")),
            Err(SchemaError::SameTable)
        );
        assert_eq!(
            pair("Jobs", "jobs").validate(dialect),
            Err(SchemaError::SameTable)
        );
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Cross-checks against `schema_vectors.json`, which `gen_vectors.py` writes
//! from the real Python reference (onestep-sql 0.7.1 + SQLAlchemy).
//!
//! Names, error messages, the advisory lock key and the `GET_LOCK` names must
//! match exactly. The DDL is compared structurally (see `ddl_model`): columns,
//! types, nullability, defaults, every constraint and its name, table options,
//! and every index with its name, columns, direction and predicate must be the
//! same; `IF NOT EXISTS`, quoting that names the same object, whitespace and
//! inline-vs-separate MySQL indexes are allowed to differ. For the plainest
//! vectors the PostgreSQL and SQLite text is also compared byte for byte after
//! removing exactly those allowed differences.

mod ddl_model;

use ddl_model::{Rules, Schema};
use onestep_sql::schema::{
    Dialect, MYSQL_DDL_LOCK_TIMEOUT_SECS, MYSQL_GLOBAL_DDL_LOCK_NAME, SchemaError, TableNames,
    mysql_ddl_lock_name, mysql_family_dialect, object_names, postgres_advisory_lock_key,
    render_ddl, validate_table_name,
};
use serde_json::Value;

fn vectors() -> Value {
    let text = include_str!("data/schema_vectors.json");
    serde_json::from_str(text).expect("schema_vectors.json is valid JSON")
}

fn pairs() -> Vec<Value> {
    vectors()["pairs"].as_array().expect("pairs").clone()
}

fn key(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mysql",
        Dialect::MariaDb => "mariadb",
        Dialect::Sqlite => "sqlite",
    }
}

fn rules(dialect: Dialect) -> Rules {
    match dialect {
        Dialect::Postgres => Rules::Postgres,
        Dialect::MySql | Dialect::MariaDb | Dialect::Sqlite => Rules::AsWritten,
    }
}

fn tables_of(pair: &Value) -> TableNames {
    TableNames::new(
        pair["executions"].as_str().expect("executions"),
        pair["attempts"].as_str().expect("attempts"),
    )
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

#[test]
fn the_vector_file_covers_every_dialect_and_the_agreed_cases() {
    let doc = vectors();
    assert_eq!(doc["generator"]["onestep-sql"], "0.7.1");
    let pairs = pairs();
    assert_eq!(pairs.len(), 18);
    let valid = |d: &str| {
        pairs
            .iter()
            .filter(|p| p["dialects"][d]["error"].is_null())
            .count()
    };
    assert_eq!(
        (
            valid("postgres"),
            valid("mysql"),
            valid("mariadb"),
            valid("sqlite")
        ),
        (13, 15, 15, 13)
    );
    assert_eq!(
        doc["identifiers"].as_array().expect("identifiers").len(),
        14
    );
    assert_eq!(
        doc["server_versions"].as_array().expect("versions").len(),
        12
    );
}

#[test]
fn table_name_errors_match_the_reference_for_every_pair() {
    for pair in pairs() {
        let tables = tables_of(&pair);
        for dialect in Dialect::ALL {
            let expected = &pair["dialects"][key(dialect)]["error"];
            let got = render_ddl(dialect, &tables).err().map(|e| e.to_string());
            assert_eq!(
                got.as_deref(),
                expected.as_str(),
                "{} on {dialect:?}",
                pair["label"]
            );
        }
    }
}

#[test]
fn single_identifier_validation_matches_the_reference() {
    for case in vectors()["identifiers"].as_array().expect("identifiers") {
        let name = case["name"].as_str().expect("name");
        for dialect in Dialect::ALL {
            let got = validate_table_name("executions_table", name, dialect)
                .err()
                .map(|e| e.to_string());
            assert_eq!(
                got.as_deref(),
                case[key(dialect)].as_str(),
                "{name:?} on {dialect:?}"
            );
        }
    }
}

#[test]
fn derived_object_names_match_the_reference_exactly() {
    let mut checked = 0;
    for pair in pairs() {
        let tables = tables_of(&pair);
        for dialect in Dialect::ALL {
            let entry = &pair["dialects"][key(dialect)];
            if !entry["error"].is_null() {
                continue;
            }
            let names = object_names(dialect, &tables);
            let expected = &entry["names"];
            let ours = [
                ("uq_idempotency", Some(&names.uq_idempotency)),
                ("ix_claim", Some(&names.ix_claim)),
                ("ix_lease", Some(&names.ix_lease)),
                ("ix_list", Some(&names.ix_list)),
                ("ix_attempts_execution", Some(&names.ix_attempts_execution)),
                (
                    "uq_attempts_execution_attempt",
                    Some(&names.uq_attempts_execution_attempt),
                ),
                ("ck_status", Some(&names.ck_status)),
                ("ck_idempotency", Some(&names.ck_idempotency)),
                ("ck_attempt_status", Some(&names.ck_attempt_status)),
                (
                    "fk_attempts_execution",
                    names.fk_attempts_execution.as_ref(),
                ),
            ];
            assert_eq!(expected.as_object().expect("names").len(), ours.len());
            for (field, value) in ours {
                assert_eq!(
                    value.map(String::as_str),
                    expected[field].as_str(),
                    "{field} for {} on {dialect:?}",
                    pair["label"]
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 13 + 15 + 15 + 13);
}

#[test]
fn postgres_advisory_lock_keys_match_the_reference() {
    for pair in pairs() {
        let expected = pair["postgres_advisory_lock_key"]
            .as_i64()
            .expect("i64 key");
        assert_eq!(
            postgres_advisory_lock_key(&tables_of(&pair)),
            expected,
            "{}",
            pair["label"]
        );
    }
}

#[test]
fn mysql_lock_names_and_lock_order_match_the_reference() {
    let doc = vectors();
    assert_eq!(
        doc["mysql_global_ddl_lock_name"],
        MYSQL_GLOBAL_DDL_LOCK_NAME
    );
    assert_eq!(doc["mysql_ddl_lock_timeout_s"], MYSQL_DDL_LOCK_TIMEOUT_SECS);
    for pair in pairs() {
        let pair_lock = mysql_ddl_lock_name(&tables_of(&pair));
        assert_eq!(
            pair["mysql_ddl_lock_name"],
            pair_lock.as_str(),
            "{}",
            pair["label"]
        );
        assert!(pair_lock.len() <= 64);
        let timeout = Value::from(MYSQL_DDL_LOCK_TIMEOUT_SECS);
        let expected_calls = Value::from(vec![
            Value::from(vec![
                Value::from("get_lock"),
                Value::from(MYSQL_GLOBAL_DDL_LOCK_NAME),
                timeout.clone(),
            ]),
            Value::from(vec![
                Value::from("get_lock"),
                Value::from(pair_lock.as_str()),
                timeout,
            ]),
            Value::from(vec![Value::from("create_all")]),
            Value::from(vec![
                Value::from("release_lock"),
                Value::from(pair_lock.as_str()),
            ]),
            Value::from(vec![
                Value::from("release_lock"),
                Value::from(MYSQL_GLOBAL_DDL_LOCK_NAME),
            ]),
        ]);
        assert_eq!(
            pair["mysql_lock_calls"], expected_calls,
            "{}",
            pair["label"]
        );
    }
}

#[test]
fn rendered_ddl_is_structurally_the_reference_ddl_for_every_vector() {
    let mut compared = 0;
    for pair in pairs() {
        let tables = tables_of(&pair);
        for dialect in Dialect::ALL {
            let entry = &pair["dialects"][key(dialect)];
            if !entry["error"].is_null() {
                continue;
            }
            let ours = render_ddl(dialect, &tables).expect("valid names render");
            let our_model = Schema::from_statements(&ours, rules(dialect));
            let reference_model = Schema::from_statements(&strings(&entry["ddl"]), rules(dialect));
            assert_eq!(
                our_model, reference_model,
                "{} on {dialect:?}",
                pair["label"]
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 13 + 15 + 15 + 13);
}

/// Drop what we add on purpose (`IF NOT EXISTS`, quotes) and whitespace runs.
fn plain_text(statement: &str) -> String {
    statement
        .replace(" IF NOT EXISTS", "")
        .replace('"', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn postgres_and_sqlite_ddl_text_equals_the_reference_text_for_plain_names() {
    let mut compared = 0;
    for pair in pairs() {
        let tables = tables_of(&pair);
        let plain = |name: &str| {
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
        };
        let reserved = ["order", "user"];
        if !plain(&tables.executions)
            || !plain(&tables.attempts)
            || reserved.contains(&tables.executions.as_str())
        {
            continue;
        }
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            let entry = &pair["dialects"][key(dialect)];
            if !entry["error"].is_null() {
                continue;
            }
            let reference = strings(&entry["ddl"]);
            let mut ours: Vec<String> = render_ddl(dialect, &tables)
                .expect("valid")
                .iter()
                .map(|s| plain_text(s))
                .collect();
            let mut reference: Vec<String> = reference.iter().map(|s| plain_text(s)).collect();
            // The reference's index order within a table is a Python set order.
            ours.sort();
            reference.sort();
            assert_eq!(ours, reference, "{} on {dialect:?}", pair["label"]);
            compared += 1;
        }
    }
    assert!(compared >= 16, "compared {compared}");
}

#[test]
fn derived_names_of_one_pair_never_collide() {
    for pair in pairs() {
        let tables = tables_of(&pair);
        for dialect in Dialect::ALL {
            if tables.validate(dialect).is_err() {
                continue;
            }
            let names = object_names(dialect, &tables);
            let entries = names.entries();
            let mut all: Vec<&str> = entries.iter().map(|(_, n)| *n).collect();
            all.extend([tables.executions.as_str(), tables.attempts.as_str()]);
            let count = all.len();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), count, "{} on {dialect:?}", pair["label"]);
            assert!(
                entries
                    .iter()
                    .all(|(_, n)| n.len() <= dialect.identifier_max_length())
            );
        }
    }
}

#[test]
fn mariadb_with_native_uuid_is_detected_from_the_server_version_like_sqlalchemy() {
    for case in vectors()["server_versions"].as_array().expect("versions") {
        let version = case["version"].as_str().expect("version");
        assert_eq!(
            key(mysql_family_dialect(version)),
            case["dialect"].as_str().expect("dialect"),
            "{version}"
        );
    }
}

#[test]
fn identical_table_names_are_rejected_before_any_sql_is_built() {
    for dialect in Dialect::ALL {
        let err = render_ddl(dialect, &TableNames::new("jobs", "JOBS")).expect_err("same table");
        assert_eq!(err, SchemaError::SameTable);
    }
}

#[test]
fn the_structural_comparison_notices_every_kind_of_difference() {
    let doc = vectors();
    let pairs = doc["pairs"].as_array().expect("pairs");
    let mixed = pairs
        .iter()
        .find(|p| p["label"] == "mixed case names")
        .expect("mixed case pair");
    for dialect in [Dialect::Postgres, Dialect::MySql] {
        let reference = Schema::from_statements(
            &strings(&mixed["dialects"][key(dialect)]["ddl"]),
            rules(dialect),
        );
        let ours = render_ddl(dialect, &tables_of(mixed)).expect("valid");
        assert_eq!(Schema::from_statements(&ours, rules(dialect)), reference);
        let (q, other_default) = match dialect {
            Dialect::Postgres => ('"', ("DEFAULT '{}'", "DEFAULT '[]'")),
            _ => ('`', ("DEFAULT (JSON_OBJECT())", "DEFAULT (JSON_ARRAY())")),
        };
        let mutations: Vec<(&str, String, String)> = vec![
            ("index direction", "id DESC)".into(), "id)".into()),
            ("default", other_default.0.into(), other_default.1.into()),
            ("type", "VARCHAR(500)".into(), "VARCHAR(501)".into()),
            (
                "nullability",
                "worker_id VARCHAR(255),".into(),
                "worker_id VARCHAR(255) NOT NULL,".into(),
            ),
            ("check text", "'expired'".into(), "'gone'".into()),
            (
                "constraint name",
                "_execution_attempt".into(),
                "_exec_attempt".into(),
            ),
            ("column name", "\tresult".into(), "\tresult_".into()),
            (
                "fk action",
                "ON DELETE CASCADE".into(),
                "ON DELETE RESTRICT".into(),
            ),
            (
                "identifier case",
                format!("{q}MyExecutions{q}"),
                "MyExecutions".into(),
            ),
            (
                "table options",
                "CHARSET=utf8mb4".into(),
                "CHARSET=latin1".into(),
            ),
            (
                "partial index",
                " WHERE idempotency_key IS NOT NULL".into(),
                String::new(),
            ),
            ("unique index", "UNIQUE INDEX".into(), "INDEX".into()),
        ];
        let mut noticed = 0;
        for (what, from, to) in mutations {
            if !ours.iter().any(|s| s.contains(&from)) {
                continue; // not applicable to this dialect
            }
            let mutated: Vec<String> = ours.iter().map(|s| s.replacen(&from, &to, 1)).collect();
            let model = Schema::from_statements(&mutated, rules(dialect));
            // MySQL keeps identifier case, so unquoting changes nothing there.
            if what == "identifier case" && dialect != Dialect::Postgres {
                assert_eq!(model, reference);
                continue;
            }
            assert_ne!(model, reference, "{what} on {dialect:?} went unnoticed");
            noticed += 1;
        }
        assert!(
            noticed >= 9,
            "{dialect:?}: only {noticed} mutations applied"
        );
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Crash tests of the sources over a user's table, on PostgreSQL, MariaDB and SQLite: a worker
//! process (`examples/source_crash.rs`) is SIGKILLed a third of the way through a drain, a new
//! one finishes it, and the handler's effect rows show that no row was lost and that only what
//! at-least-once allows was done twice.
//!
//! - Table queue: the killed worker's claimed rows stay `working`; as the reference has no
//!   lease, the operator resets them (`UPDATE … SET status = 'new' WHERE status = 'working'`)
//!   before the restart. Only those rows may be handled twice.
//! - Incremental: nothing to reset; the restart reads on from the committed cursor, so only rows
//!   after the cursor committed at the kill may be handled twice (those acked while an older row
//!   was still running, and those in flight).
//! - Binlog (MariaDB writing a row-format log): the restart reads on from the saved log
//!   position, so only rows of events after it may be handled twice.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onestep_sql::SqlConnector;
use support::raw::Raw;

const ROWS: i64 = 400;

/// The worker binary, built once by this test process (cargo is free to run again once the
/// tests run).
fn worker_binary() -> PathBuf {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(build_worker).clone()
}

fn build_worker() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "onestep-sql", "--example", "source_crash"])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the source_crash example failed");
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile.join("examples/source_crash");
    assert!(binary.is_file(), "{} is missing", binary.display());
    binary
}

fn start(binary: &PathBuf, dsn: &str, table: &str, source: &str) -> Child {
    let mut child = Command::new(binary)
        .args(["--dsn", dsn, "--table", table, "--source", source])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the worker did not start");
    child
}

async fn wait_for<D: Raw>(connector: &SqlConnector<D>, sql: &str, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while D::count(connector, sql).await < at_least {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for `{sql}` >= {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn crash_and_restart<D: Raw>(connector: SqlConnector<D>, dsn: &str, source: &str) {
    let binary = worker_binary();
    let table = format!("crash_{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    D::exec(
        &connector,
        &format!(
            "CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, status VARCHAR(20) NOT NULL)"
        ),
    )
    .await;
    D::exec(
        &connector,
        &format!(
            "CREATE TABLE {table}_effects (id BIGINT NOT NULL, pos BIGINT NOT NULL DEFAULT 0)"
        ),
    )
    .await;
    if source == "binlog" {
        save_binlog_start(dsn, &table).await;
    }
    let values: Vec<String> = (1..=ROWS).map(|i| format!("({i}, 'new')")).collect();
    // One statement for the table sources; for the binlog, statements of ten rows, so that
    // the log position moves on as they are handled.
    let per_statement = if source == "binlog" { 10 } else { values.len() };
    for chunk in values.chunks(per_statement) {
        D::exec(
            &connector,
            &format!(
                "INSERT INTO {table} (id, status) VALUES {}",
                chunk.join(", ")
            ),
        )
        .await;
    }
    let effects = format!("SELECT COUNT(*) FROM {table}_effects");
    let distinct = format!("SELECT COUNT(DISTINCT id) FROM {table}_effects");

    let mut first = start(&binary, dsn, &table, source);
    wait_for(&connector, &effects, ROWS / 3).await;
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    // The committed position at the kill: rows up to it must never run twice.
    let committed = if source == "incremental" {
        let saved = D::pairs(
            &connector,
            &format!("SELECT COUNT(*), MAX(cursor_value) FROM {table}_cursor"),
        )
        .await;
        let cursor: serde_json::Value = serde_json::from_str(&saved[0].1).unwrap();
        cursor[0].as_i64().unwrap()
    } else if source == "binlog" {
        let saved = D::pairs(
            &connector,
            &format!("SELECT COUNT(*), MAX(cursor_value) FROM {table}_cursor"),
        )
        .await;
        let position: serde_json::Value = serde_json::from_str(&saved[0].1).unwrap();
        position["pos"].as_i64().unwrap()
    } else {
        0
    };
    let reset = if source == "table_queue" {
        let stuck = D::count(
            &connector,
            &format!("SELECT COUNT(*) FROM {table} WHERE status = 'working'"),
        )
        .await;
        D::exec(
            &connector,
            &format!("UPDATE {table} SET status = 'new' WHERE status = 'working'"),
        )
        .await;
        stuck
    } else {
        0
    };
    let mut second = start(&binary, dsn, &table, source);
    wait_for(&connector, &distinct, ROWS).await;
    if source == "table_queue" {
        let done = format!("SELECT COUNT(*) FROM {table} WHERE status = 'done'");
        wait_for(&connector, &done, ROWS).await;
    }
    second.kill().unwrap();
    second.wait().unwrap();

    let total = D::count(&connector, &effects).await;
    let unique = D::count(&connector, &distinct).await;
    let duplicated = total - unique;
    eprintln!(
        "{source} on {}: {ROWS} rows, {total} effects, {duplicated} duplicated, {reset} reset, \
         cursor {committed} at the kill",
        D::NAME
    );
    assert_eq!(unique, ROWS, "every row handled (nothing lost)");
    match source {
        "table_queue" => assert!(
            duplicated <= reset,
            "only rows the killed worker held may run twice: {duplicated} > {reset}"
        ),
        "binlog" => {
            let before_position = D::count(
                &connector,
                &format!(
                    "SELECT COUNT(*) FROM (SELECT id FROM {table}_effects GROUP BY id \
                     HAVING COUNT(*) > 1 AND MAX(pos) <= {committed}) twice"
                ),
            )
            .await;
            assert_eq!(
                before_position, 0,
                "rows of events up to the saved position ({committed}) ran twice"
            );
        }
        _ => {
            let before_cursor = D::count(
                &connector,
                &format!(
                    "SELECT COUNT(*) FROM (SELECT id FROM {table}_effects GROUP BY id \
                     HAVING COUNT(*) > 1 AND id <= {committed}) twice"
                ),
            )
            .await;
            assert_eq!(
                before_cursor, 0,
                "rows up to the committed cursor ({committed}) ran twice"
            );
        }
    }
}

/// Saves where the log ends as the worker's position (as its first open would), before the
/// rows are written.
async fn save_binlog_start(dsn: &str, table: &str) {
    use onestep_core::Resource;
    use onestep_sql::binlog::{BinlogOptions, BinlogSource, EventKind};
    use onestep_sql::state::{SqlCursorStore, StateTable};
    let connector = SqlConnector::<onestep_sql::mysql::MySql>::new(dsn).unwrap();
    let store = SqlCursorStore::new(
        connector.clone(),
        StateTable::cursor().with_table(format!("{table}_cursor")),
    )
    .unwrap();
    // The worker's options (examples/source_crash.rs): one position key.
    let options = BinlogOptions::new(7401)
        .with_tables([table])
        .with_events([EventKind::Insert]);
    let source = BinlogSource::new(connector, options, std::sync::Arc::new(store)).unwrap();
    source.open().await.unwrap();
    source.close().await.unwrap();
}

#[tokio::test]
async fn mysql_binlog_survives_a_sigkill() {
    let url = support::mysql_binlog_url();
    crash_and_restart(
        SqlConnector::<onestep_sql::mysql::MySql>::new(&url).unwrap(),
        &url,
        "binlog",
    )
    .await;
}

#[tokio::test]
async fn postgres_table_queue_survives_a_sigkill() {
    let url = support::postgres_url();
    crash_and_restart(
        SqlConnector::<onestep_sql::postgres::Postgres>::new(&url).unwrap(),
        &url,
        "table_queue",
    )
    .await;
}

#[tokio::test]
async fn postgres_incremental_survives_a_sigkill() {
    let url = support::postgres_url();
    crash_and_restart(
        SqlConnector::<onestep_sql::postgres::Postgres>::new(&url).unwrap(),
        &url,
        "incremental",
    )
    .await;
}

#[tokio::test]
async fn mysql_table_queue_survives_a_sigkill() {
    let url = support::mysql_url();
    crash_and_restart(
        SqlConnector::<onestep_sql::mysql::MySql>::new(&url).unwrap(),
        &url,
        "table_queue",
    )
    .await;
}

#[tokio::test]
async fn mysql_incremental_survives_a_sigkill() {
    let url = support::mysql_url();
    crash_and_restart(
        SqlConnector::<onestep_sql::mysql::MySql>::new(&url).unwrap(),
        &url,
        "incremental",
    )
    .await;
}

#[tokio::test]
async fn sqlite_table_queue_survives_a_sigkill() {
    let dir = support::sqlite_dir();
    let dsn = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("crash.db").display()
    );
    crash_and_restart(
        SqlConnector::<onestep_sql::sqlite::Sqlite>::new(&dsn).unwrap(),
        &dsn,
        "table_queue",
    )
    .await;
}

#[tokio::test]
async fn sqlite_incremental_survives_a_sigkill() {
    let dir = support::sqlite_dir();
    let dsn = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("crash.db").display()
    );
    crash_and_restart(
        SqlConnector::<onestep_sql::sqlite::Sqlite>::new(&dsn).unwrap(),
        &dsn,
        "incremental",
    )
    .await;
}

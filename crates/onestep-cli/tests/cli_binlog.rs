#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `onestep run` of a YAML worker over `mysql_binlog`, on a MariaDB writing a row-format binary
//! log (`ONESTEP_MYSQL_BINLOG_URL`, which `cargo xtask test` provides): each change to the
//! user's table is echoed into a `mysql_table_sink` audit table, the position kept in a
//! `mysql_cursor_store`; after SIGTERM and a restart, only the new changes arrive.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn binlog_url() -> String {
    std::env::var("ONESTEP_MYSQL_BINLOG_URL")
        .or_else(|_| std::env::var("ONESTEP_MYSQL_URL"))
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

fn start(yaml: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run", yaml.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn stop(worker: Child) -> String {
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = worker.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

#[test]
fn a_yaml_worker_copies_binlog_changes_into_a_table_sink() {
    let url = binlog_url();
    let suffix = &uuid_like();
    let (orders, audit, marks) = (
        format!("orders_{suffix}"),
        format!("audit_{suffix}"),
        format!("marks_{suffix}"),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = runtime.block_on(sqlx::MySqlPool::connect(&url)).unwrap();
    let exec = |sql: &str| {
        runtime
            .block_on(sqlx::raw_sql(sql).execute(&pool))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    };
    exec(&format!(
        "CREATE TABLE {orders} (id INT PRIMARY KEY, status VARCHAR(20));
         CREATE TABLE {audit} (seq BIGINT AUTO_INCREMENT PRIMARY KEY, `schema` VARCHAR(64),
           `table` VARCHAR(64), event VARCHAR(10), `binlog` TEXT, `values` TEXT,
           before_values TEXT)"
    ));
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("cdc.yaml");
    std::fs::write(
        &yaml,
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: cdc}}\nresources:\n  \
             db: {{type: mysql, dsn: \"{url}\"}}\n  \
             marks: {{type: mysql_cursor_store, connector: db, table: {marks}}}\n  \
             changes:\n    type: mysql_binlog\n    connector: db\n    server_id: 4711\n    \
             tables: [{orders}]\n    state: marks\n    poll_interval_s: 0.1\n    blocking: true\n  \
             audit: {{type: mysql_table_sink, connector: db, table: {audit}}}\n\
             tasks:\n  - {{name: copy, source: changes, handler: onestep:echo, emit: [audit]}}\n"
        ),
    )
    .unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["check", "--strict", yaml.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{check:?}");

    let audited = || -> Vec<(String, String)> {
        runtime
            .block_on(
                sqlx::query_as(&format!("SELECT event, `values` FROM {audit} ORDER BY seq"))
                    .fetch_all(&pool),
            )
            .unwrap()
    };
    let wait_for = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while audited().len() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let marks_rows = || -> i64 {
        runtime
            .block_on(
                sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {marks}"))
                    .fetch_one(&pool),
            )
            .unwrap_or(0)
    };
    let worker = start(&yaml);
    // The first open saves where the log ends; then the changes are made.
    let deadline = Instant::now() + Duration::from_secs(30);
    while marks_rows() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    exec(&format!(
        "INSERT INTO {orders} VALUES (1, 'new'), (2, 'new');
         UPDATE {orders} SET status = 'paid' WHERE id = 1; DELETE FROM {orders} WHERE id = 2"
    ));
    wait_for(4);
    let log = stop(worker);
    let rows = audited();
    let events: Vec<&str> = rows.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["insert", "insert", "update", "delete"], "{log}");
    let values: serde_json::Value = serde_json::from_str(&rows[2].1).unwrap();
    assert_eq!(values, serde_json::json!({"id": 1, "status": "paid"}));

    // Restarted, the worker reads on from the saved position: only the new change.
    exec(&format!("INSERT INTO {orders} VALUES (3, 'new')"));
    let worker = start(&yaml);
    wait_for(5);
    std::thread::sleep(Duration::from_millis(500));
    let log = stop(worker);
    let rows = audited();
    assert_eq!(rows.len(), 5, "{rows:?} {log}");
    let last: serde_json::Value = serde_json::from_str(&rows[4].1).unwrap();
    assert_eq!(last, serde_json::json!({"id": 3, "status": "new"}));
}

/// A short random suffix for table names.
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:08x}{:04x}", nanos, std::process::id() & 0xffff)
}

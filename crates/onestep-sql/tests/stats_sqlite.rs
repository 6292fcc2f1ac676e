//! `stats` on SQLite: the shared live case, on a database file of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use onestep_sql::sqlite::Sqlite;

#[tokio::test]
async fn stats_count_each_status_with_its_oldest_submission() {
    let dir = support::sqlite_dir();
    let dsn = format!(
        "sqlite://{}/stats-{}.db?mode=rwc",
        dir.path().display(),
        uuid::Uuid::new_v4().simple()
    );
    support::live::stats_count_each_status_with_its_oldest_submission::<Sqlite>(&dsn).await;
}

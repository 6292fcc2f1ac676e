//! Live tests on MySQL/MariaDB (spec §6.9): concurrency, sessions, precision, claim plans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use onestep_core::clock::ManualClock;
use onestep_core::execution::{
    ExecutionBackend, ExecutionRequest, LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::mysql::{MySql, MySqlExecutionBackend};
use sqlx::Row;
use support::live;
use time::macros::datetime;

macro_rules! live_cases {
    ($($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $case() {
            live::$case::<MySql>(&support::mysql_url()).await;
        }
    )*};
}

live_cases!(
    concurrent_auto_create_is_serialized,
    two_attempts_tables_can_share_one_executions_table,
    concurrent_submits_with_one_key_create_one_execution,
    concurrent_batches_with_overlapping_keys_create_one_execution_per_key,
    stats_count_each_status_with_its_oldest_submission,
    concurrent_claimers_never_claim_a_row_twice,
    heartbeat_prevents_takeover,
    a_worker_renews_its_leases_together,
    expired_lease_takeover_fences_the_old_worker,
    cancel_and_complete_race_has_one_terminal_winner,
    missing_tables_are_reported_by_name,
    a_rejected_completion_leaves_no_row_lock_behind,
);

#[tokio::test]
async fn dsn_passwords_never_appear_in_errors() {
    live::dsn_passwords_never_appear_in_errors::<MySql>("mysql").await;
}

fn request(task: &str, options: SubmitOptions) -> ExecutionRequest {
    ExecutionRequest::new("live", task, serde_json::json!(1), options).unwrap()
}

/// A JSON document the server refuses (MariaDB's `JSON_VALID` check on JSON columns, MySQL's
/// JSON parser) is a permanent error: the same write would fail again, so it is not retried as
/// transient.
#[tokio::test]
async fn a_refused_json_document_is_a_permanent_error() {
    use onestep_sql::Dialect;
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let e = b
        .submit(request("t", SubmitOptions::default()))
        .await
        .unwrap();
    let pool = b.connector().pool().unwrap();
    let update = format!(
        "UPDATE `{}` SET payload = ? WHERE id = ?",
        b.tables().executions
    );
    for refused in ["{", &format!("{}1{}", "[".repeat(120), "]".repeat(120))] {
        let err = sqlx::query(&update)
            .bind(refused)
            .bind(e.id.simple().to_string())
            .execute(&pool)
            .await
            .expect_err("the server refuses the document");
        assert_eq!(
            MySql::classify(&err),
            onestep_core::ConnectorErrorKind::Permanent,
            "{err}"
        );
    }
}

/// Sessions are pinned to UTC and READ COMMITTED.
#[tokio::test]
async fn sessions_are_utc_and_read_committed() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    b.open().await.unwrap();
    let pool = b.connector().pool().unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let zone: String = sqlx::query_scalar("SELECT @@session.time_zone")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(zone, "+00:00");
    // MySQL 8 and MariaDB 11.1+ call it transaction_isolation; older MariaDB, tx_isolation.
    let isolation: String = match sqlx::query_scalar("SELECT @@session.transaction_isolation")
        .fetch_one(&mut *conn)
        .await
    {
        Ok(level) => level,
        Err(_) => sqlx::query_scalar("SELECT @@session.tx_isolation")
            .fetch_one(&mut *conn)
            .await
            .unwrap(),
    };
    assert_eq!(isolation, "READ-COMMITTED");
}

/// DATETIME(6) keeps microseconds: a row available at .700000 is claimable one microsecond later.
#[tokio::test]
async fn datetime_columns_keep_microseconds() {
    let clock = ManualClock::new(datetime!(2026-03-01 10:00:00.7 UTC));
    let options = live::fresh_options().with_clock(Arc::new(clock.clone()));
    let b = MySqlExecutionBackend::new(&support::mysql_url(), options).unwrap();
    let e = b
        .submit(request("precise", SubmitOptions::default()))
        .await
        .unwrap();
    assert_eq!(
        b.get("live", e.id).await.unwrap().unwrap().created_at,
        datetime!(2026-03-01 10:00:00.7 UTC)
    );
    clock.advance(Duration::from_micros(1));
    assert_eq!(
        b.claim("live", &["precise".into()], 1, Duration::from_secs(5), "w")
            .await
            .unwrap()
            .len(),
        1
    );
}

/// An `expires_at` with an offset is stored as the same instant in UTC.
#[tokio::test]
async fn offset_expiry_is_stored_in_utc() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let e = b
        .submit(request(
            "tz",
            SubmitOptions::default().expires_at(datetime!(2030-01-01 08:00 +08:00)),
        ))
        .await
        .unwrap();
    let pool = b.connector().pool().unwrap();
    let sql = format!(
        "SELECT CAST(expires_at AS CHAR) FROM `{}` WHERE id = ?",
        b.tables().executions
    );
    let stored: String = sqlx::query_scalar(&sql)
        .bind(e.id.simple().to_string())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, "2030-01-01 00:00:00.000000");
    assert_eq!(e.expires_at, Some(datetime!(2030-01-01 00:00 UTC)));
}

/// A claim holding an empty index range open does not block a concurrent submit (no gap locks
/// under READ COMMITTED).
#[tokio::test]
async fn an_open_empty_claim_does_not_block_submits() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    b.open().await.unwrap();
    let pool = b.connector().pool().unwrap();
    let mut tx = pool.begin().await.unwrap();
    let claim_sql = b.claim_sql(1);
    let mut q = sqlx::query(&claim_sql);
    let now = time::OffsetDateTime::now_utc();
    let now = time::PrimitiveDateTime::new(now.date(), now.time());
    q = q.bind("live").bind("gap").bind(now).bind(now).bind(10_i64);
    assert!(q.fetch_all(&mut *tx).await.unwrap().is_empty());
    let started = std::time::Instant::now();
    tokio::time::timeout(
        Duration::from_secs(3),
        b.submit(request("gap", SubmitOptions::default())),
    )
    .await
    .expect("the submit is not blocked by the open claim")
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    tx.rollback().await.unwrap();
}

/// Submits `requests`, refreshes the table's statistics and returns the `EXPLAIN` rows of a
/// one-task claim of `task` (limit `limit`) as `(key, Extra)` pairs.
async fn claim_plan(
    b: &MySqlExecutionBackend,
    requests: Vec<ExecutionRequest>,
    task: &str,
    limit: i64,
) -> Vec<(Option<String>, String)> {
    b.submit_many(requests).await.unwrap();
    let pool = b.connector().pool().unwrap();
    sqlx::query(&format!("ANALYZE TABLE `{}`", b.tables().executions))
        .execute(&pool)
        .await
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    let now = time::PrimitiveDateTime::new(now.date(), now.time());
    sqlx::query(&format!("EXPLAIN {}", b.claim_sql(1)))
        .bind("live")
        .bind(task)
        .bind(now)
        .bind(now)
        .bind(limit)
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.try_get::<Option<String>, _>("key").unwrap(),
                r.try_get::<Option<String>, _>("Extra")
                    .unwrap()
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// The claim walks the claim index in order: no filesort, which would make SKIP LOCKED lock
/// every scanned row and starve other workers.
#[tokio::test]
async fn claim_plan_uses_the_index_without_filesort() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let requests = (0..200)
        .map(|n| {
            ExecutionRequest::new(
                "live",
                if n % 2 == 0 { "a" } else { "b" },
                serde_json::json!(n),
                SubmitOptions::default(),
            )
            .unwrap()
        })
        .collect();
    let rows = claim_plan(&b, requests, "a", 10).await;
    assert!(
        rows.iter().all(|(_, extra)| !extra.contains("filesort")),
        "claim plan uses a filesort: {rows:?}"
    );
    assert!(
        rows[0]
            .0
            .as_deref()
            .unwrap_or_default()
            .ends_with("_claimable"),
        "claim plan uses the claim index"
    );
}

/// With one namespace and one task, every index on the claim column matches the claim's
/// equalities equally well; the claim must still walk the claim index (in order, no filesort),
/// not the expiry sweep's index, which would sort the whole backlog on every claim.
#[tokio::test]
async fn claim_plan_prefers_the_claim_index_with_one_task() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let requests = (0..500)
        .map(|n| {
            let options = if n % 2 == 0 {
                SubmitOptions::default()
                    .expires_at(time::OffsetDateTime::now_utc() + time::Duration::hours(1))
            } else {
                SubmitOptions::default()
            };
            ExecutionRequest::new("live", "only", serde_json::json!(n), options).unwrap()
        })
        .collect();
    let rows = claim_plan(&b, requests, "only", 100).await;
    let (key, extra) = &rows[0];
    assert!(
        key.as_deref().unwrap_or_default().ends_with("_claimable"),
        "claim plan uses {key:?} ({extra:?})"
    );
    assert!(!extra.contains("filesort"), "claim plan sorts");
}

/// MySQL/MariaDB have no partial indexes, so the reference's claim index also holds every
/// finished row. The additive generated column `onestep_claim_task` (the task while claimable,
/// NULL otherwise) with its own index keeps claims off history: the claim filters on it, tables
/// without it (created by the reference, or opened without DDL rights) keep working on
/// `task_name`, and `auto_create` adds it to them.
#[tokio::test]
async fn the_claim_uses_the_generated_claim_column_and_tables_without_it_still_work() {
    let url = support::mysql_url();
    let options = live::fresh_options();
    let b = MySqlExecutionBackend::new(&url, options.clone()).unwrap();
    b.open().await.unwrap();
    assert!(
        b.claim_sql(1).contains("e.onestep_claim_task = ?"),
        "{}",
        b.claim_sql(1)
    );
    let first = b
        .submit(request("gen", SubmitOptions::default()))
        .await
        .unwrap();
    let second = b
        .submit(request("gen", SubmitOptions::default()))
        .await
        .unwrap();
    let claimed = b
        .claim("live", &["gen".into()], 1, Duration::from_secs(30), "w")
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let pool = b.connector().pool().unwrap();
    let table = &options.table;
    let values: Vec<(String, Option<String>)> = sqlx::query_as(&format!(
        "SELECT status, onestep_claim_task FROM `{table}` ORDER BY status"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        values,
        vec![
            ("queued".to_string(), Some("gen".to_string())),
            ("running".to_string(), None)
        ]
    );
    assert_eq!(claimed[0].execution.id, first.id, "oldest first");

    // A table as the reference creates it: no generated column.
    let index: String = sqlx::query_scalar(
        "SELECT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() \
         AND table_name = ? AND column_name = 'onestep_claim_task'",
    )
    .bind(table)
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "ALTER TABLE `{table}` DROP INDEX `{index}`, DROP COLUMN onestep_claim_task"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let plain = MySqlExecutionBackend::new(&url, options.clone().with_auto_create(false)).unwrap();
    plain.open().await.unwrap();
    assert!(plain.claim_sql(1).contains("e.task_name = ?"));
    let again = plain
        .claim("live", &["gen".into()], 5, Duration::from_secs(30), "w")
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "the queued one, claimed on task_name");
    assert_eq!(again[0].execution.id, second.id);

    // auto_create puts the column back on an existing table.
    let upgraded = MySqlExecutionBackend::new(&url, options.clone()).unwrap();
    upgraded.open().await.unwrap();
    assert!(upgraded.claim_sql(1).contains("e.onestep_claim_task = ?"));
    let count: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM `{table}` WHERE onestep_claim_task IS NOT NULL"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(count, 0, "both executions are running now");

    // The indexes of an older version (the claim index without `status` last, no expiry index)
    // are rebuilt by auto_create.
    let tables =
        onestep_sql::schema::TableNames::new(table.clone(), options.attempts_table.clone());
    let dialect = onestep_sql::schema::Dialect::MariaDb;
    let index = onestep_sql::schema::mysql_claim_index_name(dialect, &tables, "claimable");
    let expiry = onestep_sql::schema::mysql_claim_index_name(dialect, &tables, "expirable");
    sqlx::query(&format!(
        "ALTER TABLE `{table}` DROP INDEX `{index}`, DROP INDEX `{expiry}`, \
         ADD INDEX `{index}` (namespace, onestep_claim_task, available_at, created_at, id)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let columns = |pool: sqlx::MySqlPool, index: String| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT CAST(column_name AS CHAR) FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ? ORDER BY seq_in_index",
        )
        .bind(table)
        .bind(index)
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    assert_eq!(columns(pool.clone(), index.clone()).await.len(), 5);
    assert!(columns(pool.clone(), expiry.clone()).await.is_empty());
    let rebuilt = MySqlExecutionBackend::new(&url, options.clone()).unwrap();
    rebuilt.open().await.unwrap();
    assert_eq!(
        columns(pool.clone(), index.clone()).await,
        onestep_sql::schema::MYSQL_CLAIM_INDEX_COLUMNS.map(String::from),
        "the claim index now ends with status"
    );
    assert_eq!(
        columns(pool.clone(), expiry.clone()).await,
        onestep_sql::schema::MYSQL_EXPIRY_INDEX_COLUMNS.map(String::from),
        "the expiry index is added"
    );
    let claimed_after = rebuilt
        .claim("live", &["gen".into()], 5, Duration::from_secs(30), "w")
        .await
        .unwrap();
    assert!(
        claimed_after.is_empty(),
        "nothing is queued; the claim still runs"
    );
}

/// See [`live::a_connection_killed_while_idle_is_replaced_unseen`]. (`KILL` fails for a
/// session that is not there.)
#[tokio::test]
async fn a_connection_killed_while_idle_is_replaced_unseen() {
    use sqlx::Connection;
    live::a_connection_killed_while_idle_is_replaced_unseen::<MySql>(
        &support::mysql_url(),
        "SELECT CAST(CONNECTION_ID() AS SIGNED)",
        async |url: &str, ids: Vec<i64>| {
            let mut admin = sqlx::MySqlConnection::connect(url).await.unwrap();
            for id in ids {
                sqlx::query(&format!("KILL {id}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
            }
        },
    )
    .await;
}

/// `MySql::id` reads an id as bytes whatever the column's type: 32 hex digits, the hyphenated
/// form of MariaDB's `UUID` type, 16 raw bytes, NULL; text that is no id is a decode error that
/// names it.
#[tokio::test]
async fn stored_ids_read_from_every_column_type() {
    use onestep_sql::Dialect as _;
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let pool = b.connector().pool().unwrap();
    let id = uuid::Uuid::parse_str("0193a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b").unwrap();
    let row = sqlx::query(
        "SELECT CAST(? AS CHAR(32)), CAST(? AS CHAR(36)), UNHEX(?), CAST(NULL AS CHAR(32)), \
         CAST('not-an-id' AS CHAR(32))",
    )
    .bind(id.simple().to_string())
    .bind(id.hyphenated().to_string())
    .bind(id.simple().to_string())
    .fetch_one(&pool)
    .await
    .unwrap();
    for column in 0..3 {
        assert_eq!(
            MySql::id(&row, column).unwrap(),
            Some(id),
            "column {column}"
        );
    }
    assert_eq!(MySql::id(&row, 3).unwrap(), None);
    let err = MySql::id(&row, 4).unwrap_err().to_string();
    assert!(err.contains("not-an-id"), "{err}");
    // MariaDB's own UUID type (10.7 and later; the test servers are MariaDB).
    let row = sqlx::query("SELECT CAST(? AS UUID)")
        .bind(id.hyphenated().to_string())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(MySql::id(&row, 0).unwrap(), Some(id));
}

/// Claims `limit` executions of `task` in namespace `live`, answering their ids in claim order.
async fn claim_ids(b: &MySqlExecutionBackend, task: &str, limit: usize) -> Vec<uuid::Uuid> {
    b.claim(
        "live",
        &[task.to_string()],
        limit,
        Duration::from_secs(60),
        "w",
    )
    .await
    .unwrap()
    .into_iter()
    .map(|lease| lease.execution.id)
    .collect()
}

/// `n` requests for executions of `task` in namespace `live`.
fn backlog_requests(task: &str, n: usize) -> Vec<ExecutionRequest> {
    (0..n)
        .map(|i| {
            ExecutionRequest::new("live", task, serde_json::json!(i), SubmitOptions::default())
                .unwrap()
        })
        .collect()
}

/// Submits `n` executions of `task` at once, answering their ids in submit order.
async fn submit_backlog(b: &MySqlExecutionBackend, task: &str, n: usize) -> Vec<uuid::Uuid> {
    let submitted = b.submit_many(backlog_requests(task, n)).await.unwrap();
    submitted.into_iter().map(|s| s.unwrap().id).collect()
}

/// Submits `n` executions of `task` and then one more, `late`, stored with its times an hour
/// before the others: as if its submit had committed only after claims passed its place.
async fn backlog_and_a_late_row(
    b: &MySqlExecutionBackend,
    task: &str,
    n: usize,
) -> (Vec<uuid::Uuid>, uuid::Uuid) {
    let backlog = submit_backlog(b, task, n).await;
    (backlog, late_row(b, task, 1).await)
}

/// Submits one execution of `task`, stored with its times `hours` before they were.
async fn late_row(b: &MySqlExecutionBackend, task: &str, hours: u32) -> uuid::Uuid {
    let late = b
        .submit(request(task, SubmitOptions::default()))
        .await
        .unwrap()
        .id;
    let pool = b.connector().pool().unwrap();
    sqlx::query(&format!(
        "UPDATE `{}` SET available_at = available_at - INTERVAL ? HOUR, \
         created_at = created_at - INTERVAL ? HOUR WHERE id = ?",
        b.tables().executions
    ))
    .bind(hours)
    .bind(hours)
    .bind(late.simple().to_string())
    .execute(&pool)
    .await
    .unwrap();
    late
}

/// While a backlog lasts, a claim reads the claim index from where the last full claim stopped
/// (`machine::resume`); a row that became claimable behind that place is claimed, first, as
/// soon as the rows after it do not fill a claim, and no row is claimed twice or lost.
#[tokio::test]
async fn a_row_claimable_behind_a_resumed_claim_is_claimed_when_the_rest_is_short() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let first = submit_backlog(&b, "resume", 10).await;
    // A full claim from the front: the next ones resume after its last row.
    assert_eq!(claim_ids(&b, "resume", 10).await, first);
    let (backlog, late) = backlog_and_a_late_row(&b, "resume", 20).await;
    assert_eq!(
        claim_ids(&b, "resume", 10).await,
        backlog[..10],
        "a resumed claim reads after the key"
    );
    // 10 of 100 after the key: the claim reads again from the front and finds the late row too.
    let mut expected = vec![late];
    expected.extend(&backlog[10..]);
    assert_eq!(claim_ids(&b, "resume", 100).await, expected);
    assert!(claim_ids(&b, "resume", 100).await.is_empty());
}

/// While every claim comes back full, a claim reads from the front again once
/// `RESCAN_EVERY` (1 s) has passed since the last one that did: a row behind the key waits
/// that long at most.
#[tokio::test]
async fn a_row_claimable_behind_a_resumed_claim_is_claimed_by_the_next_rescan() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let (backlog, late) = backlog_and_a_late_row(&b, "rescan", 30).await;
    // From the front: the late row comes first, then the backlog in order.
    let mut expected = vec![late];
    expected.extend(&backlog[..9]);
    assert_eq!(claim_ids(&b, "rescan", 10).await, expected);
    let late = late_row(&b, "rescan", 2).await;
    assert_eq!(claim_ids(&b, "rescan", 10).await, backlog[9..19]);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let rescanned = claim_ids(&b, "rescan", 10).await;
    assert_eq!(rescanned[0], late, "the rescan reads from the front");
    assert_eq!(rescanned[1..], backlog[19..28]);
}

/// A resumed claim reads the claim index as a range that starts at the key (the optimizer
/// would otherwise look up the leading columns and read from the front), in order: no
/// filesort.
#[tokio::test]
async fn resumed_claim_plan_reads_the_claim_index_from_the_key() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    claim_plan(&b, backlog_requests("plan", 500), "plan", 10).await;
    let key = claim_ids(&b, "plan", 10).await[9];
    let pool = b.connector().pool().unwrap();
    let row = sqlx::query(&format!(
        "SELECT available_at, created_at FROM `{}` WHERE id = ?",
        b.tables().executions
    ))
    .bind(key.simple().to_string())
    .fetch_one(&pool)
    .await
    .unwrap();
    let (available_at, created_at): (time::PrimitiveDateTime, time::PrimitiveDateTime) =
        (row.get(0), row.get(1));
    let now = time::OffsetDateTime::now_utc();
    let now = time::PrimitiveDateTime::new(now.date(), now.time());
    let sql = b.resumed_claim_sql(1).expect("claims resume on MariaDB");
    let plan = sqlx::query(&format!("EXPLAIN {sql}"))
        .bind("live")
        .bind("plan")
        .bind(now)
        .bind(available_at)
        .bind(available_at)
        .bind(created_at)
        .bind(created_at)
        .bind(key.simple().to_string())
        .bind(now)
        .bind(100_i64)
        .fetch_all(&pool)
        .await
        .unwrap();
    let access: String = plan[0].try_get("type").unwrap();
    let index: Option<String> = plan[0].try_get("key").unwrap();
    let extra: Option<String> = plan[0].try_get("Extra").unwrap();
    assert_eq!(access, "range", "{sql}");
    assert!(index.unwrap_or_default().ends_with("_claimable"));
    assert!(!extra.unwrap_or_default().contains("filesort"));
}

/// A claim of several tasks resumes too: in claim order across the tasks, every row once.
#[tokio::test]
async fn a_claim_of_several_tasks_resumes_in_claim_order() {
    let b = MySqlExecutionBackend::new(&support::mysql_url(), live::fresh_options()).unwrap();
    let mut submitted = Vec::new();
    for task in ["a", "b", "a", "b"] {
        submitted.extend(submit_backlog(&b, task, 5).await);
    }
    let tasks = ["a".to_string(), "b".to_string()];
    let mut claimed = Vec::new();
    for limit in [5, 5, 100] {
        let leases = b
            .claim("live", &tasks, limit, Duration::from_secs(60), "w")
            .await
            .unwrap();
        claimed.extend(leases.into_iter().map(|lease| lease.execution.id));
    }
    assert_eq!(
        b.resumed_claim_sql(2)
            .map(|sql| sql.contains("FORCE INDEX")),
        Some(true)
    );
    assert_eq!(claimed, submitted, "each row once, in submit order");
}

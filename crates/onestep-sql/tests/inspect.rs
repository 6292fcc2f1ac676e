//! The inspector reads (counts per task and status, backlog, throughput buckets, active leases,
//! attempts, search) on PostgreSQL, MySQL/MariaDB and SQLite: one case, three real databases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use onestep_core::execution::inspect::{ExecutionInspector, ExecutionSearch};
use onestep_core::execution::{
    ExecutionBackend, ExecutionCompletion, ExecutionQuery, ExecutionRequest, ExecutionStatus,
    LeasedExecutionBackend, SubmitOptions,
};
use onestep_sql::{Dialect, SqlExecutionBackend};
use serde_json::json;
use support::raw::Raw;
use time::OffsetDateTime;

fn request(task: &str, tenant: serde_json::Value, delay: Option<f64>) -> ExecutionRequest {
    let mut options = SubmitOptions::default();
    options.metadata.insert("tenant".into(), tenant);
    options.delay_s = delay;
    ExecutionRequest::new("insp", task, json!({"t": task}), options).unwrap()
}

async fn reads_what_an_operator_needs<D: Dialect + Raw>(dsn: &str) {
    let b = SqlExecutionBackend::<D>::new(dsn, support::live::fresh_options()).unwrap();
    b.open().await.unwrap();
    // report: 3 ready, 1 delayed; mail: 2 ready (tenant 7, a number), one elsewhere.
    let mut report = Vec::new();
    for tenant in ["acme", "acme", "globex"] {
        report.push(
            b.submit(request("report", json!(tenant), None))
                .await
                .unwrap(),
        );
    }
    b.submit(request("report", json!("acme"), Some(3600.0)))
        .await
        .unwrap();
    for flag in [true, false] {
        b.submit(request("mail", json!(flag), None)).await.unwrap();
    }
    let elsewhere =
        ExecutionRequest::new("other", "report", json!(1), SubmitOptions::default()).unwrap();
    b.submit(elsewhere).await.unwrap();

    let backlog = b
        .backlog("insp", &["report".into(), "mail".into(), "none".into()])
        .await
        .unwrap()
        .expect("SQL backends sample their backlog");
    let of = |task: &str| backlog.iter().find(|r| r.task_name == task).unwrap();
    assert_eq!((of("report").depth, of("report").ready), (4, 3));
    assert_eq!((of("mail").depth, of("mail").ready), (2, 2));
    assert!(backlog.iter().all(|r| r.task_name != "none"));
    let oldest = of("report").oldest_ready_at.unwrap();
    let first = report[0].available_at;
    assert!(
        (oldest - first).abs() < time::Duration::milliseconds(2),
        "the oldest ready one is the first submitted: {oldest} vs {first}"
    );

    // Claim two reports: one succeeds, one stays running; cancel a mail.
    let leases = b
        .claim(
            "insp",
            &["report".into()],
            2,
            Duration::from_secs(60),
            "worker-7",
        )
        .await
        .unwrap();
    assert_eq!(leases.len(), 2);
    let done = &leases[0];
    b.complete(
        done.execution.id,
        done.attempt_id,
        done.lease_token,
        ExecutionCompletion::Succeeded {
            result: json!({"ok": true}),
        },
    )
    .await
    .unwrap();
    let mails = b
        .list(&ExecutionQuery {
            task_name: Some("mail".into()),
            ..ExecutionQuery::new("insp")
        })
        .await
        .unwrap();
    b.request_cancel("insp", mails.items[0].id, Some("no longer needed"))
        .await
        .unwrap();

    let counts = b.task_counts("insp").await.unwrap();
    let count = |task: &str, status| {
        counts
            .iter()
            .find(|c| c.task_name == task && c.status == status)
            .map_or(0, |c| c.count)
    };
    assert_eq!(count("report", ExecutionStatus::Queued), 2);
    assert_eq!(count("report", ExecutionStatus::Running), 1);
    assert_eq!(count("report", ExecutionStatus::Succeeded), 1);
    assert_eq!(count("mail", ExecutionStatus::Cancelled), 1);
    assert_eq!(count("mail", ExecutionStatus::Queued), 1);
    assert_eq!(counts.iter().map(|c| c.count).sum::<u64>(), 6, "{counts:?}");

    let now = OffsetDateTime::now_utc() + Duration::from_secs(1);
    let buckets = b
        .finished_per_bucket("insp", now, 60, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(buckets.len(), 60);
    assert_eq!(buckets.iter().map(|x| x.succeeded).sum::<u64>(), 1);
    assert_eq!(buckets.iter().map(|x| x.cancelled).sum::<u64>(), 1);
    assert_eq!(
        buckets[59].succeeded, 1,
        "the last minute holds it: {buckets:?}"
    );
    assert!(
        b.finished_per_bucket("insp", now, 0, Duration::from_secs(60))
            .await
            .unwrap_err()
            .to_string()
            .contains("buckets must be between 1 and 120, got 0")
    );

    let active = b.active_leases("insp", 50).await.unwrap();
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0].execution_id, leases[1].execution.id);
    assert_eq!(active[0].worker_id.as_deref(), Some("worker-7"));
    assert_eq!(active[0].attempt, 1);
    assert!(active[0].heartbeat_at.is_some() && active[0].started_at.is_some());

    // Progress: kept while the lease holds, read back by id, refused after the attempt ends.
    let running = &leases[1];
    assert_eq!(
        b.progress("insp", running.execution.id).await.unwrap(),
        None
    );
    let reported = json!({"done": 40, "total": 100, "stage": "rendering"});
    assert!(
        b.report_progress(
            running.execution.id,
            running.attempt_id,
            running.lease_token,
            &reported
        )
        .await
        .unwrap()
    );
    assert_eq!(
        b.progress("insp", running.execution.id).await.unwrap(),
        Some(reported.clone())
    );
    assert_eq!(
        b.progress("other", running.execution.id).await.unwrap(),
        None
    );
    assert!(
        !b.report_progress(
            done.execution.id,
            done.attempt_id,
            done.lease_token,
            &reported
        )
        .await
        .unwrap(),
        "a finished attempt's lease no longer admits progress"
    );

    let attempts = b.attempts_of("insp", done.execution.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert!(
        b.attempts_of("other", done.execution.id)
            .await
            .unwrap()
            .is_empty(),
        "another namespace sees no attempts"
    );

    // Search: metadata as text (strings, and booleans spelled as JSON), time range, paging.
    let by_tenant = |key: &str, value: &str| {
        let mut s = ExecutionSearch::new(ExecutionQuery::new("insp"));
        s.metadata = Some((key.into(), value.into()));
        s
    };
    let acme = b.search(&by_tenant("tenant", "acme")).await.unwrap();
    assert_eq!(acme.items.len(), 3, "{:?}", acme.items);
    let flagged = b.search(&by_tenant("tenant", "true")).await.unwrap();
    assert_eq!(flagged.items.len(), 1);
    assert_eq!(flagged.items[0].task_name, "mail");
    assert!(
        b.search(&by_tenant("missing", "acme"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let mut paged = by_tenant("tenant", "acme");
    paged.query.limit = 2;
    let first_page = b.search(&paged).await.unwrap();
    assert_eq!(first_page.items.len(), 2);
    paged.query.cursor = first_page.next_cursor.clone();
    let second = b.search(&paged).await.unwrap();
    assert_eq!(second.items.len(), 1);
    assert!(second.next_cursor.is_none());
    let mut recent = ExecutionSearch::new(ExecutionQuery::new("insp"));
    recent.created_after = Some(report[1].created_at);
    recent.created_before = Some(now);
    let recent = b.search(&recent).await.unwrap();
    assert_eq!(recent.items.len(), 5, "all but the first report");
    let bad = b.search(&by_tenant("a'b", "x")).await.unwrap_err();
    assert!(bad.to_string().starts_with("metadata_key must be"), "{bad}");

    // A table as the reference creates it (its DDL, no progress column), opened without
    // auto_create: progress is neither kept nor an error.
    let options = support::live::fresh_options();
    let tables = onestep_sql::schema::TableNames::new(&options.table, &options.attempts_table);
    for statement in onestep_sql::schema::render_ddl(D::SCHEMA, &tables).unwrap() {
        D::exec(b.connector(), &statement).await;
    }
    let strict =
        SqlExecutionBackend::<D>::new(dsn, options.clone().with_auto_create(false)).unwrap();
    strict.open().await.unwrap();
    let id = strict
        .submit(request("report", json!("x"), None))
        .await
        .unwrap()
        .id;
    let lease = strict
        .claim("insp", &["report".into()], 1, Duration::from_secs(60), "w")
        .await
        .unwrap()
        .remove(0);
    assert!(
        !strict
            .report_progress(id, lease.attempt_id, lease.lease_token, &json!(1))
            .await
            .unwrap()
    );
    assert_eq!(strict.progress("insp", id).await.unwrap(), None);
}

#[tokio::test]
async fn postgres_reads_what_an_operator_needs() {
    reads_what_an_operator_needs::<onestep_sql::postgres::Postgres>(&support::postgres_url()).await;
}

#[tokio::test]
async fn mysql_reads_what_an_operator_needs() {
    reads_what_an_operator_needs::<onestep_sql::mysql::MySql>(&support::mysql_url()).await;
}

#[tokio::test]
async fn sqlite_reads_what_an_operator_needs() {
    let dir = support::sqlite_dir();
    let dsn = format!("sqlite://{}/inspect.db?mode=rwc", dir.path().display());
    reads_what_an_operator_needs::<onestep_sql::sqlite::Sqlite>(&dsn).await;
}

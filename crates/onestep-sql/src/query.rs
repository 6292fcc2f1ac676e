//! The dynamic reads and the prune scan, built with sea-query: `list` (its filters and keyset
//! cursor vary per call), `stats` and `prune` (an optional namespace).
//!
//! The hot statements (submit, claim, heartbeat, complete) stay hand-written in `sql.rs` and the
//! dialects' fast paths: they are fixed texts prepared once, tuned per dialect, and measured by
//! the benchmark. Here a statement is built per call, rendered by the builder of the backend's
//! [`schema::Dialect`], and its values handed to the dialect's binder as [`Param`]s, so ids and
//! instants are bound exactly as everywhere else (hex `CHAR(32)` or native UUID, UTC).

use sea_query::{
    Alias, Asterisk, Condition, Expr, ExprTrait, Func, MysqlQueryBuilder, Order,
    PostgresQueryBuilder, Query, SelectStatement, SqliteQueryBuilder, Value,
};
use time::OffsetDateTime;
use uuid::Uuid;

use onestep_core::execution::{ExecutionError, ExecutionQuery, ExecutionResult, ExecutionStatus};

use crate::param::Param;
use crate::schema;
use crate::sql::EXECUTION_COLUMNS;

/// A statement ready for [`crate::dialect::Dialect::fetch`]: its text in the dialect's
/// placeholder style, and its parameters in order.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub(crate) sql: String,
    pub(crate) params: Vec<Param>,
}

/// `SELECT` of one page of `query`, newest first, one row more than the page to tell whether
/// another follows. `after` is the decoded cursor: the `(created_at, id)` of the previous page's
/// last row.
pub(crate) fn list(
    dialect: schema::Dialect,
    executions: &str,
    query: &ExecutionQuery,
    after: Option<(OffsetDateTime, Uuid)>,
) -> ExecutionResult<Built> {
    let mut select = Query::select();
    select
        .columns(EXECUTION_COLUMNS.split(',').map(|c| Alias::new(c.trim())))
        .from(Alias::new(executions))
        .and_where(Expr::col("namespace").eq(query.namespace.as_str()));
    if let Some(task) = &query.task_name {
        select.and_where(Expr::col("task_name").eq(task.as_str()));
    }
    if let Some(status) = query.status {
        select.and_where(Expr::col("status").eq(status.as_str()));
    }
    if let Some((created_at, id)) = after {
        select.cond_where(
            Condition::any()
                .add(Expr::col("created_at").lt(created_at))
                .add(
                    Condition::all()
                        .add(Expr::col("created_at").eq(created_at))
                        .add(Expr::col("id").lt(id)),
                ),
        );
    }
    select
        .order_by("created_at", Order::Desc)
        .order_by("id", Order::Desc)
        .limit(u64::from(query.limit) + 1);
    build(dialect, &select)
}

/// `SELECT status, COUNT(*), MIN(created_at)` per status, in `namespace` or in all of them: one
/// pass over the table whatever the number of statuses.
pub(crate) fn stats(
    dialect: schema::Dialect,
    executions: &str,
    namespace: Option<&str>,
) -> ExecutionResult<Built> {
    let mut select = Query::select();
    select
        .column("status")
        .expr(Func::count(Expr::col(Asterisk)))
        .expr(Func::min(Expr::col("created_at")))
        .from(Alias::new(executions));
    if let Some(namespace) = namespace {
        select.and_where(Expr::col("namespace").eq(namespace));
    }
    select.group_by_col("status");
    build(dialect, &select)
}

/// The next prune candidates: `(id, version, lease_token)` of at most `limit` terminal
/// executions finished before `before`, oldest first.
pub(crate) fn prune_candidates(
    dialect: schema::Dialect,
    executions: &str,
    namespace: Option<&str>,
    before: OffsetDateTime,
    limit: u64,
) -> ExecutionResult<Built> {
    let terminal = ExecutionStatus::ALL
        .into_iter()
        .filter(|status| status.is_terminal())
        .map(ExecutionStatus::as_str);
    let mut select = Query::select();
    select
        .columns(["id", "version", "lease_token"])
        .from(Alias::new(executions))
        .and_where(Expr::col("status").is_in(terminal))
        .and_where(Expr::col("finished_at").is_not_null())
        .and_where(Expr::col("finished_at").lt(before));
    if let Some(namespace) = namespace {
        select.and_where(Expr::col("namespace").eq(namespace));
    }
    select
        .order_by("finished_at", Order::Asc)
        .order_by("id", Order::Asc)
        .limit(limit);
    build(dialect, &select)
}

fn build(dialect: schema::Dialect, select: &SelectStatement) -> ExecutionResult<Built> {
    let (sql, values) = match dialect {
        schema::Dialect::Postgres => select.build(PostgresQueryBuilder),
        schema::Dialect::MySql | schema::Dialect::MariaDb => select.build(MysqlQueryBuilder),
        schema::Dialect::Sqlite => select.build(SqliteQueryBuilder),
    };
    let params = values
        .into_iter()
        .map(param)
        .collect::<ExecutionResult<_>>()?;
    Ok(Built { sql, params })
}

/// The [`Param`] of a value this module put into a statement. The builders above only use
/// text, ids, instants and the `LIMIT` count; anything else is a bug here, reported as a backend
/// error rather than bound wrongly.
fn param(value: Value) -> ExecutionResult<Param> {
    Ok(match value {
        Value::String(Some(text)) => Param::Text(text),
        Value::Uuid(Some(id)) => Param::Id(id),
        Value::TimeDateTimeWithTimeZone(Some(at)) => Param::from(at),
        Value::BigUnsigned(Some(count)) => Param::BigInt(i64::try_from(count).unwrap_or(i64::MAX)),
        other => {
            return Err(ExecutionError::Backend(
                format!("internal: query builder produced an unsupported value {other:?}").into(),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query() -> ExecutionQuery {
        ExecutionQuery {
            namespace: "default".into(),
            task_name: Some("report".into()),
            status: Some(ExecutionStatus::Queued),
            limit: 50,
            cursor: None,
        }
    }

    #[test]
    fn list_renders_each_dialect_placeholder_style_and_orders_the_params() {
        let at = time::macros::datetime!(2026-01-02 03:04:05 UTC);
        let id = Uuid::nil();
        let pg = list(schema::Dialect::Postgres, "jobs", &query(), Some((at, id))).unwrap();
        assert!(
            pg.sql.contains(r#"FROM "jobs" WHERE "namespace" = $1"#),
            "{}",
            pg.sql
        );
        assert!(
            pg.sql
                .ends_with(r#"ORDER BY "created_at" DESC, "id" DESC LIMIT $7"#),
            "{}",
            pg.sql
        );
        assert_eq!(
            pg.params,
            vec![
                Param::Text("default".into()),
                Param::Text("report".into()),
                Param::Text("queued".into()),
                Param::Time(at),
                Param::Time(at),
                Param::Id(id),
                Param::BigInt(51),
            ]
        );
        let mysql = list(schema::Dialect::MySql, "jobs", &query(), None).unwrap();
        assert!(
            mysql.sql.contains("FROM `jobs` WHERE `namespace` = ?"),
            "{}",
            mysql.sql
        );
        assert_eq!(mysql.params.len(), 4);
    }

    #[test]
    fn prune_selects_only_terminal_statuses() {
        let at = time::macros::datetime!(2026-01-02 03:04:05 UTC);
        let built = prune_candidates(schema::Dialect::Sqlite, "e", None, at, 10).unwrap();
        let statuses: Vec<&Param> = built.params.iter().take(4).collect();
        assert_eq!(
            statuses,
            [
                &Param::Text("succeeded".into()),
                &Param::Text("failed".into()),
                &Param::Text("cancelled".into()),
                &Param::Text("expired".into()),
            ]
        );
        assert!(
            built.sql.contains("\"finished_at\" IS NOT NULL"),
            "{}",
            built.sql
        );
    }
}

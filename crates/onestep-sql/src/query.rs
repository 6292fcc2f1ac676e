//! The statements built with sea-query: the dynamic reads and the prune scan of the executions
//! table (`list`, whose filters and keyset cursor vary per call, `stats` and `prune`, with an
//! optional namespace), and the state stores' upsert, whose spelling differs per dialect
//! (`ON CONFLICT … DO UPDATE`, MySQL's `ON DUPLICATE KEY UPDATE`).
//!
//! The hot statements (submit, claim, heartbeat, complete) stay hand-written in `sql.rs` and the
//! dialects' fast paths: they are fixed texts prepared once, tuned per dialect, and measured by
//! the benchmark. Here a statement is built per call, rendered by the builder of the backend's
//! [`schema::Dialect`], and its values handed to the dialect's binder as [`Param`]s, so ids and
//! instants are bound exactly as everywhere else (hex `CHAR(32)` or native UUID, UTC).

use sea_query::{
    Alias, Asterisk, Condition, Expr, ExprTrait, Func, MysqlQueryBuilder, OnConflict, Order,
    PostgresQueryBuilder, Query, QueryStatementWriter, SqliteQueryBuilder, Value,
};
use time::OffsetDateTime;
use uuid::Uuid;

use onestep_core::execution::inspect::ExecutionSearch;
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
    build(dialect, &page(executions, query, after))
}

/// [`list`] with a search's added filters: a `created_at` range and one metadata key's value,
/// compared as text (`->>` on PostgreSQL, `JSON_UNQUOTE(JSON_EXTRACT(…))` on MySQL/MariaDB,
/// `json_extract` on SQLite, where `true`/`false` are spelled out as the others spell them).
/// The key is validated ([`ExecutionSearch::validate`]) and bound, never pasted.
pub(crate) fn search(
    dialect: schema::Dialect,
    executions: &str,
    search: &ExecutionSearch,
    after: Option<(OffsetDateTime, Uuid)>,
) -> ExecutionResult<Built> {
    let mut select = page(executions, &search.query, after);
    if let Some(at) = search.created_after {
        select.and_where(Expr::col("created_at").gte(at));
    }
    if let Some(at) = search.created_before {
        select.and_where(Expr::col("created_at").lt(at));
    }
    if let Some((key, value)) = &search.metadata {
        let path = format!("$.\"{key}\"");
        let (key, value) = (key.clone(), value.clone());
        let matches = match dialect {
            schema::Dialect::Postgres => {
                Expr::cust_with_values("(metadata ->> $1) = $2", [key, value])
            }
            schema::Dialect::MySql | schema::Dialect::MariaDb => {
                Expr::cust_with_values("JSON_UNQUOTE(JSON_EXTRACT(metadata, ?)) = ?", [path, value])
            }
            schema::Dialect::Sqlite => Expr::cust_with_values(
                "(CASE json_type(metadata, ?) WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' \
                 ELSE CAST(json_extract(metadata, ?) AS TEXT) END) = ?",
                [path.clone(), path, value],
            ),
        };
        select.and_where(matches);
    }
    build(dialect, &select)
}

fn page(
    executions: &str,
    query: &ExecutionQuery,
    after: Option<(OffsetDateTime, Uuid)>,
) -> sea_query::SelectStatement {
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
    select
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

/// The table and columns of a key-value state table (`crate::state::StateTable`'s names).
pub(crate) struct KeyValueTable<'a> {
    pub(crate) table: &'a str,
    pub(crate) key: &'a str,
    pub(crate) value: &'a str,
    pub(crate) updated_at: &'a str,
}

/// `INSERT` of `key` with its value text and time into a state table, or `UPDATE` of the value
/// and time where the key is there already.
pub(crate) fn upsert_state(
    dialect: schema::Dialect,
    table: &KeyValueTable<'_>,
    key: &str,
    value: String,
    updated_at: OffsetDateTime,
) -> ExecutionResult<Built> {
    let (k, v, u) = (
        Alias::new(table.key),
        Alias::new(table.value),
        Alias::new(table.updated_at),
    );
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(table.table))
        .columns([k.clone(), v.clone(), u.clone()])
        .values([key.into(), value.into(), updated_at.into()])
        .map_err(|e| ExecutionError::Backend(format!("internal: state upsert: {e}").into()))?
        .on_conflict(OnConflict::column(k).update_columns([v, u]).to_owned());
    build(dialect, &insert)
}

fn build<S: QueryStatementWriter>(
    dialect: schema::Dialect,
    statement: &S,
) -> ExecutionResult<Built> {
    let (sql, values) = match dialect {
        schema::Dialect::Postgres => statement.build(PostgresQueryBuilder),
        schema::Dialect::MySql | schema::Dialect::MariaDb => statement.build(MysqlQueryBuilder),
        schema::Dialect::Sqlite => statement.build(SqliteQueryBuilder),
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

    #[test]
    fn the_state_upsert_is_spelled_per_dialect() {
        let at = time::macros::datetime!(2026-01-02 03:04:05 UTC);
        let table = KeyValueTable {
            table: "onestep_state",
            key: "state_key",
            value: "state_value",
            updated_at: "updated_at",
        };
        let pg = upsert_state(schema::Dialect::Postgres, &table, "k", "1".into(), at).unwrap();
        assert_eq!(
            pg.sql,
            r#"INSERT INTO "onestep_state" ("state_key", "state_value", "updated_at") VALUES ($1, $2, $3) ON CONFLICT ("state_key") DO UPDATE SET "state_value" = "excluded"."state_value", "updated_at" = "excluded"."updated_at""#
        );
        assert_eq!(
            pg.params,
            vec![
                Param::Text("k".into()),
                Param::Text("1".into()),
                Param::Time(at)
            ]
        );
        let mysql = upsert_state(schema::Dialect::MySql, &table, "k", "1".into(), at).unwrap();
        assert!(
            mysql.sql.ends_with(
                "ON DUPLICATE KEY UPDATE `state_value` = VALUES(`state_value`), `updated_at` = VALUES(`updated_at`)"
            ),
            "{}",
            mysql.sql
        );
    }

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

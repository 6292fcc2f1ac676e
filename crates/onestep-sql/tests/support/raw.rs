//! Raw statements on the test servers, for tests that set up tables of their own.

use std::future::Future;

use onestep_sql::{Dialect, SqlConnector};

/// What a test needs of a database besides the code under test.
pub trait Raw: Dialect {
    /// Runs `sql` (several statements allowed).
    fn exec(connector: &SqlConnector<Self>, sql: &str) -> impl Future<Output = ()> + Send;
    /// The `(BIGINT, text)` rows of `sql`.
    fn pairs(
        connector: &SqlConnector<Self>,
        sql: &str,
    ) -> impl Future<Output = Vec<(i64, String)>> + Send;
    /// The one `BIGINT` of `sql`.
    fn count(connector: &SqlConnector<Self>, sql: &str) -> impl Future<Output = i64> + Send;
}

macro_rules! raw {
    ($dialect:ty) => {
        impl Raw for $dialect {
            async fn exec(connector: &SqlConnector<Self>, sql: &str) {
                sqlx::raw_sql(sql)
                    .execute(&connector.pool().unwrap())
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }

            async fn pairs(connector: &SqlConnector<Self>, sql: &str) -> Vec<(i64, String)> {
                sqlx::query_as(sql)
                    .fetch_all(&connector.pool().unwrap())
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }

            async fn count(connector: &SqlConnector<Self>, sql: &str) -> i64 {
                sqlx::query_scalar(sql)
                    .fetch_one(&connector.pool().unwrap())
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
        }
    };
}

raw!(onestep_sql::postgres::Postgres);
raw!(onestep_sql::mysql::MySql);
raw!(onestep_sql::sqlite::Sqlite);

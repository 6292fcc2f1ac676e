//! Least-privilege fixtures on real servers: a throwaway runtime role (and on PostgreSQL a
//! database) with exactly the documented GRANTs, a log capture, and a record of everything shown.

use std::fmt::Write as _;
use std::str::FromStr;

use onestep_core::execution::ExecutionBackend;
use onestep_sql::mysql::MySql;
use onestep_sql::postgres::Postgres;
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use sqlx::ConnectOptions;

/// The runtime role's password: unmistakable, so any print of it is found.
pub const PASSWORD: &str = "pw-Sentinel-8f3kq";
/// What must never show: the distinctive part of [`PASSWORD`] (so a cut-off leak is found too).
pub const LEAK: &str = "Sentinel-8f3kq";

/// Every rendering of every error and value the test saw, by label.
#[derive(Default)]
pub struct Shown(Vec<(String, String)>);

impl Shown {
    /// An error's Display, Debug and `{:#?}`, and the same for each of its sources.
    pub fn error(&mut self, label: &str, err: &(dyn std::error::Error + 'static)) {
        self.text(label, format!("{err}"));
        self.text(label, format!("{err:?}"));
        self.text(label, format!("{err:#?}"));
        let mut chain = String::new();
        let mut cause = err.source();
        while let Some(c) = cause {
            write!(chain, ": {c}").unwrap();
            self.text(label, format!("{c}"));
            self.text(label, format!("{c:?}"));
            self.text(label, format!("{c:#?}"));
            cause = c.source();
        }
        // The way anyhow prints `{:#}`: the message and every cause.
        self.text(label, format!("{err}{chain}"));
    }

    pub fn debug(&mut self, label: &str, value: &dyn std::fmt::Debug) {
        self.text(label, format!("{value:?}"));
        self.text(label, format!("{value:#?}"));
    }

    pub fn text(&mut self, label: &str, shown: String) {
        self.0.push((label.to_string(), shown));
    }

    pub fn assert_no_leak(&self) {
        assert!(!self.0.is_empty(), "nothing was checked");
        for (label, shown) in &self.0 {
            assert!(
                !shown.contains(LEAK),
                "{label}: the password shows in {shown}"
            );
        }
    }
}

/// A process-wide TRACE subscriber writing into memory: everything every test of this binary
/// logs, from every thread and crate (sqlx included), ends up here.
/// Closes a backend and its pool (`close` alone leaves the pool of a backend that never opened).
pub async fn shut<D: Dialect>(b: &SqlExecutionBackend<D>) {
    b.close().await.unwrap();
    b.connector().close().await;
}

pub mod capture {
    use std::io::Write;
    use std::sync::{Arc, Mutex, OnceLock};

    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Installs the subscriber once for the process.
    pub fn install() {
        BUFFER.get_or_init(|| {
            let buffer = Arc::new(Mutex::new(Vec::new()));
            let writer = buffer.clone();
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || Sink(writer.clone()))
                .try_init()
                .expect("no other global subscriber in this test binary");
            buffer
        });
    }

    /// Checks the capture works (it holds sqlx's statement log and our own marker) and holds no
    /// password.
    pub fn assert_no_leak() {
        tracing::info!(marker = "least-privilege-capture", "checking captured logs");
        let text =
            String::from_utf8_lossy(&BUFFER.get().expect("installed").lock().unwrap()).into_owned();
        assert!(
            text.contains("least-privilege-capture"),
            "the capture misses our own events"
        );
        assert!(
            text.contains("sqlx::query"),
            "the capture misses sqlx's statement log"
        );
        if let Some(at) = text.find(super::LEAK) {
            let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
            panic!("the password shows in a log line: {}", &text[start..end]);
        }
    }
}

// --- Servers, roles and tables -----------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Postgres,
    MySql,
}

impl Server {
    pub fn scheme(self) -> &'static str {
        match self {
            Server::Postgres => "postgres",
            Server::MySql => "mysql",
        }
    }

    pub fn admin_url(self) -> String {
        match self {
            Server::Postgres => super::postgres_url(),
            Server::MySql => super::mysql_url(),
        }
    }
}

/// A connection pool of the test's own (admin, or the runtime role's) that never logs its
/// statements: the admin's hold the role's password.
#[derive(Clone)]
pub enum Session {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
}

impl Session {
    pub async fn connect(server: Server, url: &str) -> Self {
        let how =
            "Start one, set ONESTEP_POSTGRES_URL / ONESTEP_MYSQL_URL, or run `cargo xtask test`";
        match server {
            Server::Postgres => {
                let options = sqlx::postgres::PgConnectOptions::from_str(url)
                    .unwrap()
                    .disable_statement_logging();
                let pool = sqlx::pool::PoolOptions::new().max_connections(2);
                Session::Postgres(pool.connect_with(options).await.unwrap_or_else(|e| {
                    panic!("the PostgreSQL server is not reachable ({e}). {how}")
                }))
            }
            Server::MySql => {
                let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
                    .unwrap()
                    .disable_statement_logging();
                let pool = sqlx::pool::PoolOptions::new().max_connections(2);
                Session::MySql(pool.connect_with(options).await.unwrap_or_else(|e| {
                    panic!("the MySQL/MariaDB server is not reachable ({e}). {how}")
                }))
            }
        }
    }

    pub async fn run(&self, sql: &str) -> Result<(), sqlx::Error> {
        match self {
            Session::Postgres(p) => sqlx::query(sql).execute(p).await.map(drop),
            Session::MySql(p) => sqlx::query(sql).execute(p).await.map(drop),
        }
    }

    pub async fn strings(&self, sql: &str) -> Vec<String> {
        match self {
            Session::Postgres(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
            Session::MySql(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
        }
    }

    pub async fn close(&self) {
        match self {
            Session::Postgres(p) => p.close().await,
            Session::MySql(p) => p.close().await,
        }
    }
}

/// A runtime role (and on PostgreSQL a database) of one test, with its two tables.
#[derive(Clone)]
pub struct Fixture {
    pub server: Server,
    /// Admin connection to the test server's database.
    pub admin: Session,
    /// Admin URL of the database that holds the tables.
    pub url: String,
    pub database: String,
    pub role: String,
    pub executions: String,
    pub attempts: String,
}

impl Fixture {
    /// Names for a fresh role, database and tables; creates nothing yet.
    pub async fn new(server: Server) -> Self {
        let base = server.admin_url();
        let admin = Session::connect(server, &base).await;
        let suffix: String = uuid::Uuid::new_v4().simple().to_string()[..12].into();
        let (url, database) = match server {
            Server::Postgres => {
                let database = format!("lp_db_{suffix}");
                (rewrite(&base, None, None, Some(&database)), database)
            }
            Server::MySql => {
                let database = admin.strings("SELECT DATABASE()").await.remove(0);
                (base, database)
            }
        };
        Self {
            server,
            admin,
            url,
            database,
            role: format!("lp_role_{suffix}"),
            executions: format!("lp{suffix}_executions"),
            attempts: format!("lp{suffix}_attempts"),
        }
    }

    /// The runtime role's DSN with `password`.
    pub fn runtime_dsn(&self, password: &str) -> String {
        rewrite(&self.url, Some((&self.role, password)), None, None)
    }

    /// A new admin connection to the database holding the tables (close it when done).
    pub async fn admin_in_database(&self) -> Session {
        Session::connect(self.server, &self.url).await
    }

    /// The exact statements that give the runtime role what it needs, no more (the docs show
    /// the same with the default names).
    pub fn grants(&self) -> Vec<String> {
        let (role, e, a) = (&self.role, &self.executions, &self.attempts);
        match self.server {
            Server::Postgres => vec![
                format!(
                    "GRANT CONNECT ON DATABASE \"{}\" TO \"{role}\"",
                    self.database
                ),
                format!("GRANT USAGE ON SCHEMA public TO \"{role}\""),
                format!("GRANT SELECT, INSERT, UPDATE ON TABLE \"{e}\", \"{a}\" TO \"{role}\""),
            ],
            Server::MySql => [e, a]
                .iter()
                .map(|t| {
                    format!(
                        "GRANT SELECT, INSERT, UPDATE ON `{}`.`{t}` TO '{role}'@'%'",
                        self.database
                    )
                })
                .collect(),
        }
    }

    /// Creates the tables as admin (`auto_create`), then the role with only [`Self::grants`].
    pub async fn create(&self) {
        let need = match self.server {
            Server::Postgres => {
                "the admin role of ONESTEP_POSTGRES_URL needs CREATEDB and CREATEROLE"
            }
            Server::MySql => {
                "the admin account of ONESTEP_MYSQL_URL needs CREATE USER and GRANT OPTION"
            }
        };
        let run = |admin: Session, sql: String| async move {
            admin
                .run(&sql)
                .await
                .unwrap_or_else(|e| panic!("setting up the runtime role failed ({need}): {e}"));
        };
        if self.server == Server::Postgres {
            let db = &self.database;
            run(self.admin.clone(), format!("CREATE DATABASE \"{db}\"")).await;
            // Nothing through PUBLIC: only the explicit GRANTs below count.
            run(
                self.admin.clone(),
                format!("REVOKE ALL ON DATABASE \"{db}\" FROM PUBLIC"),
            )
            .await;
            let in_db = self.admin_in_database().await;
            run(
                in_db.clone(),
                "REVOKE ALL ON SCHEMA public FROM PUBLIC".into(),
            )
            .await;
            in_db.close().await;
        }
        let options = BackendOptions::default()
            .with_table(self.executions.clone())
            .with_attempts_table(self.attempts.clone())
            .with_auto_create(true);
        let tables = match self.server {
            Server::Postgres => {
                let b = SqlExecutionBackend::<Postgres>::new(&self.url, options).unwrap();
                let created = b.open().await;
                shut(&b).await;
                created
            }
            Server::MySql => {
                let b = SqlExecutionBackend::<MySql>::new(&self.url, options).unwrap();
                let created = b.open().await;
                shut(&b).await;
                created
            }
        };
        tables.unwrap_or_else(|e| panic!("creating the tables as admin failed: {e}"));
        let create_role = match self.server {
            Server::Postgres => {
                format!("CREATE ROLE \"{}\" LOGIN PASSWORD '{PASSWORD}'", self.role)
            }
            Server::MySql => format!("CREATE USER '{}'@'%' IDENTIFIED BY '{PASSWORD}'", self.role),
        };
        run(self.admin.clone(), create_role).await;
        let in_db = self.admin_in_database().await;
        for grant in self.grants() {
            run(in_db.clone(), grant).await;
        }
        if self.server == Server::MySql {
            let grants = in_db
                .strings(&format!("SHOW GRANTS FOR '{}'@'%'", self.role))
                .await;
            assert_eq!(
                grants.len(),
                3,
                "USAGE and the two table grants: {grants:?}"
            );
        }
        in_db.close().await;
    }

    /// Ends every other session of the runtime role, from a session of its own (a role may end
    /// its own sessions; the admin may not be allowed to end others').
    pub async fn kill_sessions(&self) {
        let own = Session::connect(self.server, &self.runtime_dsn(PASSWORD)).await;
        match self.server {
            Server::Postgres => {
                let killed = own
                    .strings(
                        "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity \
                         WHERE usename = current_user AND pid <> pg_backend_pid()",
                    )
                    .await;
                assert!(!killed.is_empty(), "the runtime role has other sessions");
            }
            Server::MySql => {
                let ids = own
                    .strings(
                        "SELECT CAST(id AS CHAR) FROM information_schema.processlist \
                         WHERE user = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) AND id <> CONNECTION_ID()",
                    )
                    .await;
                assert!(!ids.is_empty(), "the runtime role has other sessions");
                for id in ids {
                    let _ = own.run(&format!("KILL CONNECTION {id}")).await;
                }
            }
        }
        own.close().await;
    }

    /// Drops the role, the tables and (PostgreSQL) the database, whichever exist.
    pub async fn drop_all(&self) -> Result<(), sqlx::Error> {
        let statements = match self.server {
            Server::Postgres => vec![
                format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.database),
                format!("DROP ROLE IF EXISTS \"{}\"", self.role),
            ],
            Server::MySql => vec![
                format!("DROP USER IF EXISTS '{}'@'%'", self.role),
                format!(
                    "DROP TABLE IF EXISTS `{}`, `{}`",
                    self.attempts, self.executions
                ),
            ],
        };
        for sql in statements {
            self.admin.run(&sql).await?;
        }
        self.admin.close().await;
        Ok(())
    }
}

/// `url` with its user info, host:port and database replaced where given.
pub fn rewrite(
    url: &str,
    credentials: Option<(&str, &str)>,
    host_port: Option<&str>,
    database: Option<&str>,
) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with ://");
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u.to_string()), h),
        None => (None, authority),
    };
    let userinfo = credentials
        .map(|(user, password)| format!("{user}:{password}"))
        .or(userinfo);
    let host = host_port.unwrap_or(host);
    let tail = match database {
        Some(db) => {
            let query = tail.find('?').map_or("", |i| &tail[i..]);
            format!("/{db}{query}")
        }
        None => tail.to_string(),
    };
    match userinfo {
        Some(u) => format!("{scheme}://{u}@{host}{tail}"),
        None => format!("{scheme}://{host}{tail}"),
    }
}

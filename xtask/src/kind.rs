//! The kinds of database server the tests run on, and what a started one hands to the run.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{Context, Result};

use crate::url::DbUrl;
use crate::{mariadb, postgres, rabbitmq, redis, sqs};

/// A database server kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PostgreSQL.
    Postgres,
    /// MariaDB (for the MySQL tests).
    Mariadb,
    /// MariaDB writing a row-format binary log (for the binlog source's tests).
    MariadbBinlog,
    /// Redis (for onestep-redis's tests); no database is made per run: tests use keys of
    /// their own.
    Redis,
    /// RabbitMQ (for onestep-rabbitmq's tests); no database is made per run: tests use queues
    /// of their own.
    Rabbitmq,
    /// The SQS and SNS emulator moto (for onestep-sqs's tests); tests use queues and topics
    /// of their own.
    Sqs,
}

impl Kind {
    /// Every kind, in the order they are set up and reported.
    pub const ALL: [Kind; 6] = [
        Kind::Postgres,
        Kind::Mariadb,
        Kind::MariadbBinlog,
        Kind::Redis,
        Kind::Rabbitmq,
        Kind::Sqs,
    ];

    /// The plain database servers (benchmarks and the chaos suite need no binary log).
    pub const DATABASES: [Kind; 2] = [Kind::Postgres, Kind::Mariadb];

    /// A short stable name (messages, temp subdirectories, watchdog lines).
    pub fn id(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres",
            Kind::Mariadb => "mysql",
            Kind::MariadbBinlog => "mysql-binlog",
            Kind::Redis => "redis",
            Kind::Rabbitmq => "rabbitmq",
            Kind::Sqs => "sqs",
        }
    }

    /// The kind whose [`Kind::id`] is `id`.
    pub fn from_id(id: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.id() == id)
            .with_context(|| format!("unknown server kind {id:?}"))
    }

    /// The human name.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Postgres => "PostgreSQL",
            Kind::Mariadb => "MySQL/MariaDB",
            Kind::MariadbBinlog => "MariaDB (row-format binary log)",
            Kind::Redis => "Redis",
            Kind::Rabbitmq => "RabbitMQ",
            Kind::Sqs => "SQS (moto)",
        }
    }

    /// The variable that holds the server URL, for xtask and for the tests.
    pub fn url_var(self) -> &'static str {
        match self {
            Kind::Postgres => "ONESTEP_POSTGRES_URL",
            Kind::Mariadb => "ONESTEP_MYSQL_URL",
            Kind::MariadbBinlog => "ONESTEP_MYSQL_BINLOG_URL",
            Kind::Redis => "ONESTEP_REDIS_URL",
            Kind::Rabbitmq => "ONESTEP_RABBITMQ_URL",
            Kind::Sqs => "ONESTEP_SQS_URL",
        }
    }

    /// URL schemes (without `+driver`) that name this kind.
    pub fn schemes(self) -> &'static [&'static str] {
        match self {
            Kind::Postgres => &["postgres", "postgresql"],
            Kind::Mariadb | Kind::MariadbBinlog => &["mysql", "mariadb"],
            Kind::Redis => &["redis", "rediss"],
            Kind::Rabbitmq => &["amqp", "amqps"],
            Kind::Sqs => &["http", "https"],
        }
    }

    /// Where the local default server listens.
    pub fn local_addr(self) -> SocketAddr {
        let port = match self {
            Kind::Postgres => 5432,
            Kind::Mariadb | Kind::MariadbBinlog => 3306,
            Kind::Redis => 6379,
            Kind::Rabbitmq => 5672,
            Kind::Sqs => 5000,
        };
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    /// Admin connections to try on the local default server.
    pub fn local_admin_urls(self) -> Vec<DbUrl> {
        match self {
            Kind::Postgres => postgres::local_admin_urls(),
            Kind::Mariadb | Kind::MariadbBinlog => mariadb::local_admin_urls(),
            Kind::Redis => redis::local_admin_urls(),
            Kind::Rabbitmq => rabbitmq::local_admin_urls(),
            Kind::Sqs => sqs::local_admin_urls(),
        }
    }

    /// The client program's name (for messages).
    pub fn client_name(self) -> &'static str {
        match self {
            Kind::Postgres => "psql",
            Kind::Mariadb | Kind::MariadbBinlog => "mariadb",
            Kind::Redis => "redis-cli",
            Kind::Rabbitmq => "an AMQP handshake (no client program)",
            Kind::Sqs => "an HTTP request (no client program)",
        }
    }

    /// Whether the command-line client is installed.
    pub fn client_installed(self) -> bool {
        match self {
            Kind::Postgres => postgres::client().is_some(),
            Kind::Mariadb | Kind::MariadbBinlog => mariadb::client().is_some(),
            Kind::Redis => redis::client().is_some(),
            Kind::Rabbitmq | Kind::Sqs => true,
        }
    }

    /// Debian packages that bring the client.
    pub fn client_packages(self) -> &'static [&'static str] {
        match self {
            Kind::Postgres => &["postgresql-client"],
            Kind::Mariadb | Kind::MariadbBinlog => &["mariadb-client"],
            Kind::Redis => &["redis-tools"],
            Kind::Rabbitmq | Kind::Sqs => &[],
        }
    }

    /// Whether the server binaries (and client) for a throwaway server are installed.
    pub fn server_installed(self) -> bool {
        self.client_installed()
            && match self {
                Kind::Postgres => postgres::server_installed(),
                Kind::Mariadb | Kind::MariadbBinlog => mariadb::server_installed(),
                Kind::Redis => redis::server_installed(),
                Kind::Rabbitmq => rabbitmq::server().is_some(),
                // moto itself comes from PyPI when the emulator starts.
                Kind::Sqs => sqs::python().is_some(),
            }
    }

    /// Debian packages that bring the server and client.
    pub fn server_packages(self) -> &'static [&'static str] {
        match self {
            Kind::Postgres => &["postgresql", "postgresql-client"],
            Kind::Mariadb | Kind::MariadbBinlog => &["mariadb-server", "mariadb-client"],
            Kind::Redis => &["redis-server", "redis-tools"],
            Kind::Rabbitmq => &["rabbitmq-server"],
            Kind::Sqs => &["python3", "python3-venv"],
        }
    }

    /// The system user a throwaway server runs as.
    pub fn system_user(self) -> &'static str {
        match self {
            Kind::Postgres => postgres::SYSTEM_USER,
            Kind::Mariadb | Kind::MariadbBinlog => mariadb::SYSTEM_USER,
            Kind::Redis => redis::SYSTEM_USER,
            Kind::Rabbitmq => rabbitmq::SYSTEM_USER,
            Kind::Sqs => sqs::SYSTEM_USER,
        }
    }

    /// Checks that `admin` can log in (and, for [`Kind::MariadbBinlog`], that the server
    /// writes a row-format binary log).
    pub fn check(self, admin: &DbUrl) -> Result<()> {
        let probe = "SELECT 1;";
        match self {
            Kind::Postgres => postgres::query(admin, probe).map(drop),
            Kind::Mariadb => mariadb::query(admin, probe).map(drop),
            Kind::Redis => redis::ping(admin),
            Kind::Rabbitmq => rabbitmq::ping(admin),
            Kind::Sqs => sqs::ping(admin),
            Kind::MariadbBinlog => {
                let found = mariadb::query(admin, "SELECT @@log_bin, @@binlog_format;")?;
                let found = found.split_whitespace().collect::<Vec<_>>().join(" ");
                if found != "1 ROW" {
                    anyhow::bail!(
                        "its binary log is not on in row format (log_bin, binlog_format: {found})"
                    );
                }
                Ok(())
            }
        }
    }

    /// Whether each run gets a fresh database of its own on this kind's server.
    pub fn has_databases(self) -> bool {
        !matches!(self, Kind::Redis | Kind::Rabbitmq | Kind::Sqs)
    }

    /// Creates database `name` over `admin`.
    pub fn create_database(self, admin: &DbUrl, name: &str, owner: Option<&str>) -> Result<()> {
        match self {
            Kind::Postgres => postgres::create_database(admin, name, owner),
            Kind::Mariadb | Kind::MariadbBinlog => mariadb::create_database(admin, name),
            Kind::Redis | Kind::Rabbitmq | Kind::Sqs => Ok(()),
        }
    }

    /// Drops database `name` (if it exists) over the admin URL `admin`.
    pub fn drop_database(self, admin: &str, name: &str) -> Result<()> {
        let admin = DbUrl::parse(admin)?;
        match self {
            Kind::Postgres => postgres::drop_database(&admin, name),
            Kind::Mariadb | Kind::MariadbBinlog => mariadb::drop_database(&admin, name),
            Kind::Redis | Kind::Rabbitmq | Kind::Sqs => Ok(()),
        }
    }
}

/// A server to run the tests on.
pub struct Started {
    /// A connection that may create and drop databases.
    pub admin: DbUrl,
    /// The connection the tests use (its database is replaced by the run's fresh one).
    pub tests: DbUrl,
    /// The owner to give the fresh database, if not the admin user.
    pub owner: Option<String>,
    /// Which path produced the server, for the report line.
    pub description: String,
}

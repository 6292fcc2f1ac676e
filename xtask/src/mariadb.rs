//! MariaDB (the MySQL-protocol server): talking to a server with the `mariadb` client, fresh
//! databases, and throwaway servers (`mariadb-install-db` + `mariadbd` as the `mysql` user).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::sys;
use crate::url::DbUrl;

/// The system user a throwaway server runs as.
pub const SYSTEM_USER: &str = "mysql";

/// The user tests connect as on a throwaway server.
pub const TEST_USER: &str = "onestep";

/// How long a throwaway server gets to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The admin connections to try on the local default server (root without password).
pub fn local_admin_urls() -> Vec<DbUrl> {
    vec![DbUrl::new(
        "mysql",
        "root",
        None,
        "127.0.0.1",
        Some(3306),
        "",
    )]
}

/// Whether the server binaries are installed.
pub fn server_installed() -> bool {
    sys::find_program("mariadbd").is_some() && sys::find_program("mariadb-install-db").is_some()
}

/// The command-line client (`mariadb`, else `mysql`), if installed.
pub fn client() -> Option<PathBuf> {
    sys::find_program("mariadb").or_else(|| sys::find_program("mysql"))
}

/// Runs `sql` (fed on stdin) with the client over `admin`; returns the tab-separated output.
///
/// `admin` connects over TCP, or over the Unix socket in its `socket` query parameter.
pub fn query(admin: &DbUrl, sql: &str) -> Result<String> {
    let client = client().context("the mariadb client is not installed")?;
    let mut cmd = Command::new(client);
    // --no-defaults must come first: no option file may redirect the connection.
    cmd.args([
        "--no-defaults",
        "--batch",
        "--skip-column-names",
        "--connect-timeout=5",
    ]);
    match admin.query_param("socket") {
        Some(socket) => cmd
            .arg("--protocol=SOCKET")
            .arg(format!("--socket={socket}")),
        None => {
            let host = admin.host();
            let host = if host.is_empty() {
                "127.0.0.1".to_string()
            } else {
                host
            };
            cmd.arg("--protocol=TCP")
                .arg(format!("--host={host}"))
                .arg(format!("--port={}", admin.port().unwrap_or(3306)))
        }
    };
    let user = admin.user();
    if !user.is_empty() {
        cmd.arg(format!("--user={user}"));
    }
    if let Some(password) = admin.password() {
        cmd.env("MYSQL_PWD", password);
    }
    sys::run_with_input(&mut cmd, sql)
        .with_context(|| format!("the mariadb client on {} failed", admin.redacted()))
}

/// Creates database `name` (utf8mb4, as the throwaway server's default).
pub fn create_database(admin: &DbUrl, name: &str) -> Result<()> {
    query(
        admin,
        &format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"),
    )?;
    Ok(())
}

/// Drops database `name` if it exists.
pub fn drop_database(admin: &DbUrl, name: &str) -> Result<()> {
    query(admin, &format!("DROP DATABASE IF EXISTS `{name}`;"))?;
    Ok(())
}

/// Stops the throwaway server with process id `pid` (a no-op when it is gone).
pub fn stop(admin: &str, pid: u32) -> Result<()> {
    if !sys::pid_alive(pid) || !is_mariadbd(pid) {
        return Ok(());
    }
    // A clean shutdown over the socket; the connection drops as the server goes away, so the
    // client's verdict does not matter. Signals follow if it does not exit.
    if let Ok(admin) = DbUrl::parse(admin) {
        let _ = query(&admin, "SHUTDOWN;");
    }
    sys::stop_pid(pid, Duration::from_secs(30))
}

/// Whether `pid` runs `mariadbd` (so a recycled process id is never signalled).
fn is_mariadbd(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline
            .split(|b| *b == 0)
            .next()
            .is_some_and(|argv0| argv0.ends_with(b"mariadbd"))
    })
}

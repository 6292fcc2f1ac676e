//! PostgreSQL: talking to a server with `psql`, fresh databases, and throwaway clusters
//! (`initdb` + `pg_ctl` as the `postgres` user, tuned for speed rather than durability).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::sys::{self, command_as};
use crate::url::DbUrl;

/// Where Debian installs the server binaries (one `<version>/bin` per major version).
pub const LIB_DIR: &str = "/usr/lib/postgresql";

/// The system user a throwaway cluster runs as.
pub const SYSTEM_USER: &str = "postgres";

/// The role tests connect as on a throwaway cluster.
pub const TEST_ROLE: &str = "onestep";

/// The admin connections to try on the local default server (trust auth, user `postgres`).
pub fn local_admin_urls() -> Vec<DbUrl> {
    ["postgres", "test"]
        .map(|db| DbUrl::new("postgres", "postgres", None, "127.0.0.1", Some(5432), db))
        .to_vec()
}

/// The newest `/usr/lib/postgresql/<version>/bin` that has a server, if any.
pub fn bin_dir() -> Option<PathBuf> {
    let entries = std::fs::read_dir(LIB_DIR).ok()?;
    entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|dir| sys::is_executable(&dir.join("bin/postgres")))
        .max_by_key(|dir| version_key(dir))
        .map(|dir| dir.join("bin"))
}

/// Sorts `15` < `16` < `9.6`-style directory names numerically.
fn version_key(dir: &Path) -> Vec<u32> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

/// Whether the server binaries are installed.
pub fn server_installed() -> bool {
    bin_dir().is_some_and(|bin| {
        ["initdb", "pg_ctl"]
            .iter()
            .all(|p| sys::is_executable(&bin.join(p)))
    })
}

/// The `psql` client, if installed.
pub fn client() -> Option<PathBuf> {
    sys::find_program("psql").or_else(|| {
        bin_dir()
            .map(|bin| bin.join("psql"))
            .filter(|p| sys::is_executable(p))
    })
}

/// Runs `sql` (fed on stdin) with `psql` over `admin`; returns the unaligned, tuples-only output.
pub fn query(admin: &DbUrl, sql: &str) -> Result<String> {
    let psql = client().context("psql is not installed")?;
    let mut cmd = Command::new(psql);
    cmd.args(["-X", "-q", "-A", "-t", "-w", "-v", "ON_ERROR_STOP=1"])
        .env("PGCONNECT_TIMEOUT", "5");
    let host = admin.host();
    if !host.is_empty() {
        cmd.args(["-h", &host]);
    }
    if let Some(port) = admin.port() {
        cmd.args(["-p", &port.to_string()]);
    }
    let user = admin.user();
    if !user.is_empty() {
        cmd.args(["-U", &user]);
    }
    let database = admin.database();
    if !database.is_empty() {
        cmd.args(["-d", &database]);
    }
    if let Some(password) = admin.password() {
        cmd.env("PGPASSWORD", password);
    }
    if let Some(mode) = admin.query_param("sslmode") {
        cmd.env("PGSSLMODE", mode);
    }
    sys::run_with_input(&mut cmd, sql)
        .with_context(|| format!("psql on {} failed", admin.redacted()))
}

/// Creates database `name` (owned by `owner`, if given).
pub fn create_database(admin: &DbUrl, name: &str, owner: Option<&str>) -> Result<()> {
    let owner = owner.map(|o| format!(" OWNER \"{o}\"")).unwrap_or_default();
    query(admin, &format!("CREATE DATABASE \"{name}\"{owner};"))?;
    Ok(())
}

/// Drops database `name` if it exists, closing leftover connections (PostgreSQL 13+).
pub fn drop_database(admin: &DbUrl, name: &str) -> Result<()> {
    match query(
        admin,
        &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE);"),
    ) {
        Ok(_) => Ok(()),
        // Older servers lack WITH (FORCE).
        Err(forced) => query(admin, &format!("DROP DATABASE IF EXISTS \"{name}\";"))
            .map(drop)
            .with_context(|| format!("{forced:#}")),
    }
}

/// Stops the throwaway cluster in `data_dir` (a no-op when it is not running).
pub fn stop(bin_dir: &Path, data_dir: &Path) -> Result<()> {
    let pid_file = data_dir.join("postmaster.pid");
    if !pid_file.exists() {
        return Ok(());
    }
    let root = sys::is_root()?;
    let mut stop = command_as(SYSTEM_USER, bin_dir.join("pg_ctl"), root);
    stop.current_dir("/")
        .arg("-D")
        .arg(data_dir)
        .args(["-m", "fast", "-w", "-t", "30", "stop"]);
    let Err(err) = sys::run(&mut stop) else {
        return Ok(());
    };
    // pg_ctl failed: fall back to signals, if the postmaster is still there at all.
    let pid = std::fs::read_to_string(&pid_file).ok().and_then(|text| {
        text.lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok())
    });
    match pid {
        Some(pid) if sys::pid_alive(pid) => {
            sys::signal(pid, "INT"); // fast shutdown
            sys::stop_pid(pid, std::time::Duration::from_secs(10))
                .with_context(|| format!("{err:#}"))
        }
        _ => Ok(()),
    }
}

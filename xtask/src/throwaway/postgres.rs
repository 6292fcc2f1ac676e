//! A throwaway PostgreSQL cluster: initialised in a temp directory, started on a free port of
//! 127.0.0.1 as the `postgres` system user, stopped through the run's cleanup.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::cleanup::{Action, Cleanup};
use crate::kind::Started;
use crate::postgres::{LIB_DIR, SYSTEM_USER, TEST_ROLE, bin_dir, client, create_database, query};
use crate::sys::{self, command_as};
use crate::url::DbUrl;

/// Starts a throwaway cluster in `dir` (created here) on a free port of 127.0.0.1.
pub fn start_throwaway(dir: &Path, root: bool, cleanup: &Cleanup) -> Result<Started> {
    let bin = bin_dir().with_context(|| format!("no PostgreSQL server under {LIB_DIR}/*/bin"))?;
    client().context("psql is not installed")?;
    let dir_text = dir
        .to_str()
        .filter(|d| !d.contains(['\'', '"', ' ']))
        .with_context(|| format!("unusable directory {} for a socket", dir.display()))?;
    std::fs::create_dir(dir).with_context(|| format!("could not create {}", dir.display()))?;
    sys::chown_to(dir, SYSTEM_USER, root)?;
    sys::set_mode(dir, 0o700)?;
    let data = dir.join("data");
    let log = dir.join("server.log");

    // The server must be able to enter its working directory, hence current_dir(dir).
    let mut initdb = command_as(SYSTEM_USER, bin.join("initdb"), root);
    initdb
        .current_dir(dir)
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ])
        .args(["-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]);
    sys::run(&mut initdb).context("initdb failed")?;
    cleanup.push(Action::StopPostgres {
        bin_dir: bin.clone(),
        data_dir: data.clone(),
    })?;

    let mut attempt = 0;
    let port = loop {
        attempt += 1;
        let port = sys::free_port()?;
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k '{dir_text}' -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        );
        let mut start = command_as(SYSTEM_USER, bin.join("pg_ctl"), root);
        start
            .current_dir(dir)
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "-o", &options, "start"])
            // Its own process group: Ctrl-C in the terminal must not reach the server; the
            // cleanup watchdog stops it instead.
            .process_group(0);
        match sys::run(&mut start) {
            Ok(_) => break port,
            Err(err) => {
                let tail = sys::file_tail(&log, 20);
                // Another process may have taken the port since we picked it.
                if attempt < 3 && tail.contains("could not bind") {
                    continue;
                }
                bail!(
                    "pg_ctl start failed: {err:#}\nserver log ({}):\n{tail}",
                    log.display()
                );
            }
        }
    };

    let admin = DbUrl::new(
        "postgres",
        "postgres",
        None,
        dir_text,
        Some(port),
        "postgres",
    );
    let password = sys::random_hex(16)?;
    query(
        &admin,
        &format!("CREATE ROLE {TEST_ROLE} LOGIN CREATEDB CREATEROLE PASSWORD '{password}';"),
    )
    .context("could not create the test role")?;
    let version = std::fs::read_to_string(data.join("PG_VERSION"))
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    Ok(Started {
        tests: DbUrl::new(
            "postgres",
            TEST_ROLE,
            Some(&password),
            "127.0.0.1",
            Some(port),
            "postgres",
        ),
        admin,
        owner: Some(TEST_ROLE.to_string()),
        description: format!("throwaway PostgreSQL {version}"),
    })
}

/// A throwaway cluster owned by one caller (the chaos suite), which may restart it.
pub struct Throwaway {
    /// The server binaries.
    bin_dir: PathBuf,
    /// The cluster's data directory.
    data_dir: PathBuf,
    /// The test role's connection to its own database.
    url: DbUrl,
    /// Stops the server and removes its files, even if xtask dies.
    cleanup: Cleanup,
}

impl Throwaway {
    /// Starts a cluster with its files in `dir` (which must not exist yet).
    pub fn start(dir: &Path) -> Result<Self> {
        let cleanup = Cleanup::new()?;
        let started = start_throwaway(dir, sys::is_root()?, &cleanup)?;
        // PostgreSQL 15 gives no CREATE on `postgres.public` to other roles: a database of the
        // test role's own.
        create_database(&started.admin, "onestep_chaos", started.owner.as_deref())?;
        Ok(Self {
            bin_dir: bin_dir().context("the PostgreSQL server binaries disappeared")?,
            data_dir: dir.join("data"),
            url: started.tests.with_database("onestep_chaos"),
            cleanup,
        })
    }

    /// The connection URL (with its password).
    pub fn url(&self) -> String {
        self.url.to_string()
    }

    /// Stops the server (`-m fast`: every connection is cut), leaves it down for `down`, and
    /// starts it again on the same port with the same options.
    pub fn restart(&self, down: std::time::Duration) -> Result<()> {
        let root = sys::is_root()?;
        let dir = self.data_dir.parent().unwrap_or(Path::new("/"));
        // The options it was started with, each double-quoted after the binary's path.
        let opts_file = self.data_dir.join("postmaster.opts");
        let opts = std::fs::read_to_string(&opts_file)
            .with_context(|| format!("could not read {}", opts_file.display()))?;
        let mut args: Vec<&str> = opts.split('"').skip(1).step_by(2).collect();
        if let Some(at) = args.iter().position(|a| *a == "-D") {
            args.drain(at..(at + 2).min(args.len()));
        }
        let options = args
            .iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ");

        let pg_ctl = self.bin_dir.join("pg_ctl");
        let mut stop = command_as(SYSTEM_USER, &pg_ctl, root);
        stop.current_dir(dir)
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", "fast", "-w", "-t", "60", "stop"]);
        sys::run(&mut stop).context("pg_ctl stop failed")?;
        std::thread::sleep(down);
        // `-l`: the server must log to its file; on pg_ctl's stdout it would hold our pipe open
        // forever.
        let mut start = command_as(SYSTEM_USER, &pg_ctl, root);
        start
            .current_dir(dir)
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .process_group(0);
        sys::run(&mut start).context("pg_ctl start (after the planned outage) failed")?;
        Ok(())
    }

    /// Stops the server and removes its files.
    pub fn stop(self) -> Result<()> {
        self.cleanup.run()
    }
}

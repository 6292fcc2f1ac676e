//! A throwaway MariaDB server: installed into a temp directory, started on a free port of
//! 127.0.0.1 as the `mysql` system user, stopped through the run's cleanup.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cleanup::{Action, Cleanup};
use crate::kind::Started;
use crate::mariadb::{START_TIMEOUT, SYSTEM_USER, TEST_USER, client, create_database, query, stop};
use crate::sys;
use crate::url::DbUrl;

/// Where a throwaway server keeps its files.
struct Files {
    /// The server's directory (its working directory too).
    dir: PathBuf,
    /// The data directory.
    data: PathBuf,
    /// The Unix socket.
    socket: String,
    /// The error log.
    log: PathBuf,
    /// Whether the server writes a row-format binary log.
    binlog: bool,
}

impl Files {
    /// Creates `dir` and its data directory, owned by the server's user.
    fn create(dir: &Path, root: bool) -> Result<Self> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data)
            .with_context(|| format!("could not create {}", data.display()))?;
        sys::chown_to(dir, SYSTEM_USER, root)?;
        let socket = dir.join("mysqld.sock");
        let socket = socket
            .to_str()
            .with_context(|| format!("socket path {} is not UTF-8", socket.display()))?
            .to_string();
        Ok(Self {
            dir: dir.to_path_buf(),
            data,
            socket,
            log: dir.join("error.log"),
            binlog: false,
        })
    }
}

/// Starts a throwaway server in `dir` (created here) on a free port of 127.0.0.1; with
/// `binlog`, writing a row-format binary log.
pub fn start_throwaway(dir: &Path, root: bool, cleanup: &Cleanup, binlog: bool) -> Result<Started> {
    start_throwaway_with_files(dir, root, cleanup, binlog).map(|(started, ..)| started)
}

/// [`start_throwaway`], also returning what a restart needs: the server binary, its files and
/// its port.
fn start_throwaway_with_files(
    dir: &Path,
    root: bool,
    cleanup: &Cleanup,
    binlog: bool,
) -> Result<(Started, PathBuf, Files, u16)> {
    let mariadbd = sys::find_program("mariadbd").context("mariadbd is not installed")?;
    // Needed to see whether the server is up, so checked before starting it.
    client().context("the mariadb client is not installed")?;
    let mut files = Files::create(dir, root)?;
    files.binlog = binlog;
    // The admin account authenticates by the OS user over the socket (root, or whoever runs xtask).
    let admin_user = if root {
        "root".to_string()
    } else {
        sys::current_user()?
    };
    install(&files, root, &admin_user)?;
    let admin = DbUrl::new("mysql", &admin_user, None, "localhost", None, "")
        .with_query("socket", &files.socket);
    let port = serve(&mariadbd, &files, root, &admin, cleanup)?;

    let password = sys::random_hex(16)?;
    query(
        &admin,
        &format!(
            "CREATE USER '{TEST_USER}'@'%' IDENTIFIED BY '{password}';
             GRANT ALL PRIVILEGES ON *.* TO '{TEST_USER}'@'%' WITH GRANT OPTION;"
        ),
    )
    .context("could not create the test user")?;
    let version = query(&admin, "SELECT VERSION();")?;
    let version = version.trim().split('-').next().unwrap_or_default();
    let started = Started {
        tests: DbUrl::new(
            "mysql",
            TEST_USER,
            Some(&password),
            "127.0.0.1",
            Some(port),
            "",
        ),
        admin,
        owner: None,
        description: format!("throwaway MariaDB {version}"),
    };
    Ok((started, mariadbd, files, port))
}

/// A throwaway server owned by one caller (the chaos suite), which may restart it.
pub struct Throwaway {
    mariadbd: PathBuf,
    files: Files,
    port: u16,
    root: bool,
    admin: DbUrl,
    /// The test user's connection to its own database.
    url: DbUrl,
    /// Stops the server (every incarnation) and removes its files, even if xtask dies.
    cleanup: Cleanup,
}

impl Throwaway {
    /// Starts a server with its files in `dir` (which must not exist yet); with `binlog`,
    /// writing a row-format binary log.
    pub fn start(dir: &Path, binlog: bool) -> Result<Self> {
        let cleanup = Cleanup::new()?;
        let root = sys::is_root()?;
        let (started, mariadbd, files, port) =
            start_throwaway_with_files(dir, root, &cleanup, binlog)?;
        create_database(&started.admin, "onestep_chaos")?;
        Ok(Self {
            mariadbd,
            files,
            port,
            root,
            admin: started.admin,
            url: started.tests.with_database("onestep_chaos"),
            cleanup,
        })
    }

    /// The connection URL (with its password).
    pub fn url(&self) -> String {
        self.url.to_string()
    }

    /// Shuts the server down (every connection is cut), leaves it down for `down`, and starts
    /// it again on the same port.
    pub fn restart(&self, down: Duration) -> Result<()> {
        let pid_file = self.files.dir.join("mysqld.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .with_context(|| format!("no process id in {}", pid_file.display()))?;
        stop(&self.admin.to_string(), pid)?;
        std::thread::sleep(down);
        serve_on(
            &self.mariadbd,
            &self.files,
            self.root,
            &self.admin,
            &self.cleanup,
            Some(self.port),
        )
        .context("could not start MariaDB again after the planned outage")?;
        Ok(())
    }

    /// Stops the server and removes its files.
    pub fn stop(self) -> Result<()> {
        self.cleanup.run()
    }
}

/// Creates the system tables with `mariadb-install-db`.
fn install(files: &Files, root: bool, admin_user: &str) -> Result<()> {
    let install_db =
        sys::find_program("mariadb-install-db").context("mariadb-install-db is not installed")?;
    let mut install = Command::new(install_db);
    install.current_dir(&files.dir).arg("--no-defaults");
    if root {
        install.arg(format!("--user={SYSTEM_USER}"));
    } else {
        install.arg(format!("--auth-root-socket-user={admin_user}"));
    }
    install
        .arg(format!("--datadir={}", files.data.display()))
        // Its own temp directory: two servers set up at once (the plain and the binlog one)
        // would otherwise collide on temporary tables in /tmp.
        .arg(format!("--tmpdir={}", files.dir.display()))
        .args(["--skip-test-db", "--auth-root-authentication-method=socket"]);
    sys::run(&mut install).context("mariadb-install-db failed")?;
    Ok(())
}

/// Runs `mariadbd` on a free port until it accepts connections over `admin`; returns the port.
/// Tries another port when the chosen one was taken in the meantime.
fn serve(
    mariadbd: &Path,
    files: &Files,
    root: bool,
    admin: &DbUrl,
    cleanup: &Cleanup,
) -> Result<u16> {
    serve_on(mariadbd, files, root, admin, cleanup, None)
}

/// [`serve`] on `fixed_port` when given (a restart must come back where its clients look).
fn serve_on(
    mariadbd: &Path,
    files: &Files,
    root: bool,
    admin: &DbUrl,
    cleanup: &Cleanup,
    fixed_port: Option<u16>,
) -> Result<u16> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = match fixed_port {
            Some(port) => port,
            None => sys::free_port()?,
        };
        let mut child = server_command(mariadbd, files, root, port)
            .spawn()
            .with_context(|| format!("could not start {}", mariadbd.display()))?;
        let recorded = cleanup.push(Action::StopMariadb {
            admin: admin.to_string(),
            pid: child.id(),
        });
        if let Err(err) = recorded {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        // Ready when it answers; done waiting early when it exits.
        let answered = sys::wait_until(START_TIMEOUT, Duration::from_millis(100), || {
            !matches!(child.try_wait(), Ok(None)) || query(admin, "SELECT 1;").is_ok()
        });
        let exited = child.try_wait().ok().flatten();
        cleanup.adopt(child);
        let tail = || sys::file_tail(&files.log, 20);
        match exited {
            // Another process may have taken the port since we picked it.
            Some(_)
                if fixed_port.is_none()
                    && attempt < 3
                    && tail().contains("Bind on TCP/IP port") => {}
            Some(status) => bail!(
                "mariadbd exited ({status}); error log ({}):\n{}",
                files.log.display(),
                tail()
            ),
            None if answered => return Ok(port),
            None => bail!(
                "mariadbd did not accept connections within {}s; error log ({}):\n{}",
                START_TIMEOUT.as_secs(),
                files.log.display(),
                tail()
            ),
        }
    }
}

/// The `mariadbd` command line for a throwaway server on `port`.
fn server_command(mariadbd: &Path, files: &Files, root: bool, port: u16) -> Command {
    let mut server = Command::new(mariadbd);
    server.arg("--no-defaults");
    if root {
        server.arg(format!("--user={SYSTEM_USER}"));
    }
    server
        .arg(format!("--datadir={}", files.data.display()))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--port={port}"))
        .arg(format!("--socket={}", files.socket))
        .arg(format!(
            "--pid-file={}",
            files.dir.join("mysqld.pid").display()
        ))
        .arg(format!("--log-error={}", files.log.display()))
        .arg(format!("--tmpdir={}", files.dir.display()))
        .args([
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            // Throwaway data: trade durability for speed.
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-doublewrite=0",
            "--innodb-buffer-pool-size=256M",
            "--max-connections=300",
        ]);
    if files.binlog {
        server.args([
            "--log-bin=mysql-bin",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--server-id=1",
        ]);
    }
    server
        .current_dir(&files.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: Ctrl-C in the terminal must not reach the server; the cleanup
        // watchdog stops it instead.
        .process_group(0);
    server
}

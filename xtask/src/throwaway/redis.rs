//! A throwaway Redis server: started on a free port of 127.0.0.1 in a temp directory, keeping
//! nothing on disk (as `../shared/reference/server-scripts/redis-start.sh` starts it), stopped
//! through the run's cleanup.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cleanup::{Action, Cleanup};
use crate::kind::Started;
use crate::redis::{SYSTEM_USER, ping};
use crate::sys::{self, command_as};
use crate::url::DbUrl;

/// Starts a throwaway server in `dir` (created here), keeping nothing on disk.
pub fn start_throwaway(dir: &Path, root: bool, cleanup: &Cleanup) -> Result<Started> {
    start_on_free_port(dir, root, cleanup, false).map(|(started, ..)| started)
}

/// A throwaway server that keeps every write (`appendonly yes`, `appendfsync always`) and can
/// be restarted on its port, for the chaos suite's broker restart.
pub struct Throwaway {
    dir: std::path::PathBuf,
    port: u16,
    root: bool,
    pid: std::sync::Mutex<u32>,
    url: DbUrl,
    /// Stops the server and removes its files, even if xtask dies.
    cleanup: Cleanup,
}

impl Throwaway {
    /// Starts a persistent server with its files in `dir`.
    pub fn start(dir: &Path) -> Result<Self> {
        let cleanup = Cleanup::new()?;
        let root = sys::is_root()?;
        cleanup.push(Action::RemoveDir {
            path: dir.to_path_buf(),
        })?;
        let (started, port, pid) = start_on_free_port(dir, root, &cleanup, true)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            port,
            root,
            pid: std::sync::Mutex::new(pid),
            url: started.tests,
            cleanup,
        })
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.url.to_string()
    }

    /// Stops the server (SIGTERM: it flushes its append-only file), waits `down`, and starts it
    /// again on the same port from the same files.
    pub fn restart(&self, down: Duration) -> Result<()> {
        let mut pid = self
            .pid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        crate::redis::stop(*pid)?;
        std::thread::sleep(down);
        *pid = spawn(&self.dir, self.port, self.root, &self.cleanup, true)?.1;
        Ok(())
    }

    /// Stops the server and removes its files.
    pub fn stop(self) -> Result<()> {
        self.cleanup.run()
    }
}

/// Starts a server in `dir` on a free port (trying again when another process took the port
/// first); its `Started` and port.
fn start_on_free_port(
    dir: &Path,
    root: bool,
    cleanup: &Cleanup,
    persistent: bool,
) -> Result<(Started, u16, u32)> {
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    sys::chown_to(dir, SYSTEM_USER, root)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = sys::free_port()?;
        match spawn(dir, port, root, cleanup, persistent) {
            Ok((started, pid)) => return Ok((started, port, pid)),
            Err(err) if attempt < 3 && format!("{err:#}").contains("Address already in use") => {}
            Err(err) => return Err(err),
        }
    }
}

/// Starts `redis-server` in `dir` on `port` and waits until it answers.
/// Its `Started` and process id.
fn spawn(
    dir: &Path,
    port: u16,
    root: bool,
    cleanup: &Cleanup,
    persistent: bool,
) -> Result<(Started, u32)> {
    let server = sys::find_program("redis-server").context("redis-server is not installed")?;
    let log = dir.join("redis.log");
    let mut cmd = command_as(SYSTEM_USER, &server, root);
    cmd.current_dir(dir)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--daemonize", "no"])
        .args(if persistent {
            ["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            ["--appendonly", "no", "--appendfsync", "everysec"]
        })
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start {}", server.display()))?;
    if let Err(err) = cleanup.push(Action::StopRedis { pid: child.id() }) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(err);
    }
    let pid = child.id();
    let url = DbUrl::new("redis", "", None, "127.0.0.1", Some(port), "");
    let answered = sys::wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        !matches!(child.try_wait(), Ok(None)) || ping(&url).is_ok()
    });
    let exited = child.try_wait().ok().flatten();
    cleanup.adopt(child);
    match exited {
        Some(status) => bail!(
            "redis-server exited ({status}); log ({}):\n{}",
            log.display(),
            sys::file_tail(&log, 20)
        ),
        None if answered => Ok((
            Started {
                admin: url.clone(),
                tests: url,
                owner: None,
                description: "throwaway Redis".into(),
            },
            pid,
        )),
        None => bail!(
            "redis-server did not answer within 20 s; log ({}):\n{}",
            log.display(),
            sys::file_tail(&log, 20)
        ),
    }
}

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

/// Starts a throwaway server in `dir` (created here).
pub fn start_throwaway(dir: &Path, root: bool, cleanup: &Cleanup) -> Result<Started> {
    let server = sys::find_program("redis-server").context("redis-server is not installed")?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    sys::chown_to(dir, SYSTEM_USER, root)?;
    let log = dir.join("redis.log");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = sys::free_port()?;
        let mut cmd = command_as(SYSTEM_USER, &server, root);
        cmd.current_dir(dir)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
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
        let url = DbUrl::new("redis", "", None, "127.0.0.1", Some(port), "");
        let answered = sys::wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
            !matches!(child.try_wait(), Ok(None)) || ping(&url).is_ok()
        });
        let exited = child.try_wait().ok().flatten();
        cleanup.adopt(child);
        match exited {
            Some(_)
                if attempt < 3 && sys::file_tail(&log, 20).contains("Address already in use") => {}
            Some(status) => bail!(
                "redis-server exited ({status}); log ({}):\n{}",
                log.display(),
                sys::file_tail(&log, 20)
            ),
            None if answered => {
                return Ok(Started {
                    admin: url.clone(),
                    tests: url,
                    owner: None,
                    description: "throwaway Redis".into(),
                });
            }
            None => bail!(
                "redis-server did not answer within 20 s; log ({}):\n{}",
                log.display(),
                sys::file_tail(&log, 20)
            ),
        }
    }
}

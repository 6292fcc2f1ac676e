//! Redis (for onestep-redis's tests): asking a server with `redis-cli`, and stopping throwaway
//! servers (`redis-server` as the `redis` user, nothing kept on disk).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::sys;
use crate::url::DbUrl;

/// The system user a throwaway server runs as.
pub const SYSTEM_USER: &str = "redis";

/// The local default server.
pub fn local_admin_urls() -> Vec<DbUrl> {
    vec![DbUrl::new("redis", "", None, "127.0.0.1", Some(6379), "")]
}

/// Whether the server binary is installed.
pub fn server_installed() -> bool {
    sys::find_program("redis-server").is_some()
}

/// The command-line client, if installed.
pub fn client() -> Option<PathBuf> {
    sys::find_program("redis-cli")
}

/// Checks the server at `url` answers `PING`.
pub fn ping(url: &DbUrl) -> Result<()> {
    let client = client().context("redis-cli is not installed")?;
    let mut cmd = Command::new(client);
    cmd.args(["-u", &url.to_string(), "PING"]);
    let out = sys::run(&mut cmd)?;
    if out.trim() != "PONG" {
        bail!("PING answered {:?}", out.trim());
    }
    Ok(())
}

/// Stops throwaway server `pid` (it keeps nothing, so SIGTERM is a clean stop).
pub fn stop(pid: u32) -> Result<()> {
    sys::signal(pid, "TERM");
    sys::stop_pid(pid, Duration::from_secs(10))
}

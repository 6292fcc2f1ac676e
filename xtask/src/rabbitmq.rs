//! RabbitMQ (for onestep-rabbitmq's tests): asking a broker whether it speaks AMQP 0-9-1, and
//! stopping throwaway brokers (`rabbitmq-server` as the `rabbitmq` user).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::sys;
use crate::url::DbUrl;

/// The system user a throwaway broker runs as.
pub const SYSTEM_USER: &str = "rabbitmq";

/// Where Debian's package puts the real server script (not the `/usr/sbin` wrapper that
/// switches users itself).
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// The local default broker, as the guest user on the default vhost.
pub fn local_admin_urls() -> Vec<DbUrl> {
    vec![url(5672)]
}

/// `amqp://guest:guest@127.0.0.1:<port>/%2f`.
pub fn url(port: u16) -> DbUrl {
    DbUrl::new("amqp", "guest", Some("guest"), "127.0.0.1", Some(port), "/")
}

/// The server script, if installed.
pub fn server() -> Option<PathBuf> {
    let path = PathBuf::from(SERVER);
    path.exists().then_some(path)
}

/// Checks the broker at `url` answers the AMQP 0-9-1 protocol header with `connection.start`
/// (the credentials are the tests' to use; a refusal there fails loudly in the tests).
pub fn ping(url: &DbUrl) -> Result<()> {
    let addr = (url.host(), url.port().unwrap_or(5672))
        .to_socket_addrs()
        .context("could not resolve the broker's host")?
        .next()
        .context("the broker's host has no address")?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("could not connect to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"AMQP\x00\x00\x09\x01")?;
    let mut head = [0u8; 7];
    stream
        .read_exact(&mut head)
        .context("no answer to the AMQP protocol header")?;
    // A method frame (type 1) on channel 0: connection.start.
    if head[0] != 1 || head[1..3] != [0, 0] {
        bail!("{addr} does not speak AMQP 0-9-1 (answered {head:02x?})");
    }
    Ok(())
}

/// Stops throwaway broker `pid` (SIGTERM is a clean `init:stop()`), then its private epmd.
pub fn stop(pid: u32, epmd_port: u16) -> Result<()> {
    sys::signal(pid, "TERM");
    let stopped = sys::stop_pid(pid, Duration::from_secs(20));
    if let Some(epmd) = sys::find_program("epmd") {
        let _ = std::process::Command::new(epmd)
            .args(["-port", &epmd_port.to_string(), "-kill"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    stopped
}

//! SQS (for onestep-sqs's tests): the moto emulator, asked over HTTP, and stopping throwaway
//! ones (`moto_server` from PyPI in a virtualenv of xtask's own).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::sys;
use crate::url::DbUrl;

/// The system user a throwaway emulator runs as.
pub const SYSTEM_USER: &str = "onestep-moto";

/// The moto release the tests run against (its server needs flask and flask-cors).
pub const MOTO_REQUIREMENTS: &[&str] = &["moto==5.2.5", "flask==3.1.3", "flask-cors==6.0.5"];

/// moto's default address.
pub fn local_admin_urls() -> Vec<DbUrl> {
    vec![url(5000)]
}

/// `http://127.0.0.1:<port>`.
pub fn url(port: u16) -> DbUrl {
    DbUrl::new("http", "", None, "127.0.0.1", Some(port), "")
}

/// A Python 3 with the `venv` module that every user can run: Debian's, else the one on PATH.
pub fn python() -> Option<std::path::PathBuf> {
    let system = std::path::PathBuf::from("/usr/bin/python3");
    if system.exists() {
        return Some(system);
    }
    sys::find_program("python3")
}

/// Checks the server at `url` is moto: `GET /moto-api/data.json` answers 200.
pub fn ping(url: &DbUrl) -> Result<()> {
    let host = url.host();
    let port = url.port().unwrap_or(80);
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .context("could not resolve the emulator's host")?
        .next()
        .context("the emulator's host has no address")?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("could not connect to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /moto-api/data.json HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .context("no answer to GET /moto-api/data.json")?;
    let head = String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned();
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "{addr} is not a moto server (GET /moto-api/data.json answered {:?})",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(())
}

/// Stops throwaway emulator `pid` (it keeps nothing, so SIGTERM is a clean stop).
pub fn stop(pid: u32) -> Result<()> {
    sys::signal(pid, "TERM");
    sys::stop_pid(pid, Duration::from_secs(10))
}

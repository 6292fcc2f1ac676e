//! Small operating-system helpers: running programs, users, packages, ports, processes, randomness.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Runs `cmd` to completion with no input and captured output; returns its stdout.
///
/// A non-zero exit becomes an error carrying the command line and the tail of its output.
pub fn run(cmd: &mut Command) -> Result<String> {
    run_with_input(cmd, "")
}

/// Runs `cmd` to completion with `input` on its stdin (used for SQL, so that no statement or
/// password shows up on a command line); returns its stdout.
pub fn run_with_input(cmd: &mut Command, input: &str) -> Result<String> {
    let what = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{what}`"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A program that exits without reading its input is judged by its exit status below.
        let _ = stdin.write_all(input.as_bytes());
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("could not wait for `{what}`"))?;
    if !out.status.success() {
        bail!("`{what}` failed ({}): {}", out.status, output_tail(&out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The program and arguments of `cmd`, for messages (callers keep secrets out of arguments).
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// The last lines of a finished program's stderr (or stdout when stderr is empty).
fn output_tail(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = if stderr.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout)
    } else {
        stderr
    };
    last_lines(&text, 15)
}

/// The last `n` non-empty lines of `text`, joined by newlines (`"(no output)"` when empty).
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "(no output)".to_string();
    }
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last lines of a log file, or a note saying why it could not be read.
pub fn file_tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => last_lines(&text, n),
        Err(err) => format!("(could not read {}: {err})", path.display()),
    }
}

/// Whether xtask runs as root (then servers run as their system users via `runuser`).
pub fn is_root() -> Result<bool> {
    let uid =
        run(Command::new("id").arg("-u")).context("could not find out the current user id")?;
    Ok(uid.trim() == "0")
}

/// The name of the user xtask runs as.
pub fn current_user() -> Result<String> {
    let name = run(Command::new("id").arg("-un")).context("could not find out the current user")?;
    Ok(name.trim().to_string())
}

/// Makes sure the system user `name` exists, creating it (as root) when missing.
pub fn ensure_system_user(name: &str) -> Result<()> {
    if Command::new("id")
        .args(["-u", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return Ok(());
    }
    if !is_root()? {
        bail!("the system user {name:?} is missing and only root can create it");
    }
    eprintln!("xtask: creating system user {name}");
    run(Command::new("useradd").args([
        "--system",
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        name,
    ]))
    .with_context(|| format!("could not create the system user {name:?}"))?;
    Ok(())
}

/// A command that runs `program` as `user`: through `runuser` when xtask is root (database
/// servers refuse to run as root), directly otherwise (they then run as the current user).
pub fn command_as(user: &str, program: impl AsRef<OsStr>, root: bool) -> Command {
    if root {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", user, "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// Hands `path` (recursively) to `user` and its login group; a no-op unless xtask is root.
pub fn chown_to(path: &Path, user: &str, root: bool) -> Result<()> {
    if root {
        run(Command::new("chown")
            .arg("-R")
            .arg(format!("{user}:"))
            .arg(path))
        .with_context(|| format!("could not hand {} to user {user}", path.display()))?;
    }
    Ok(())
}

/// Sets the Unix permission bits of `path`.
pub fn set_mode(path: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("could not set the permissions of {}", path.display()))
}

/// Installs Debian `packages` with `apt-get install -y`, refreshing the package lists once if the
/// first attempt fails (a fresh machine may have none). `why` says what needs them.
pub fn apt_install(packages: &[&str], why: &str) -> Result<()> {
    let list = packages.join(" ");
    if find_program("apt-get").is_none() {
        bail!("{why}; install the packages {list} (apt-get is not available here)");
    }
    if !is_root()? {
        bail!("{why}; install the packages {list} (`apt-get install` needs root)");
    }
    let started = Instant::now();
    eprintln!("xtask: {why}: installing {list} with apt-get");
    let install = || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut cmd)
    };
    if let Err(first) = install() {
        eprintln!("xtask: apt-get install failed; refreshing package lists and trying again");
        run(Command::new("apt-get").args(["update", "-q"])).with_context(|| {
            format!("apt-get install {list} failed ({first:#}); apt-get update failed too")
        })?;
        install().with_context(|| format!("could not install {list}"))?;
    }
    eprintln!(
        "xtask: installed {list} in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Finds an executable named `name` on `PATH` or in the `sbin` directories (where Debian puts
/// server binaries, which a non-root `PATH` may lack).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file with an execute bit set.
pub fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it for a bind to port 0).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("could not bind 127.0.0.1:0")?;
    let port = listener
        .local_addr()
        .context("could not read the bound address")?
        .port();
    Ok(port)
}

/// Whether something accepts TCP connections at `addr` (within a second).
pub fn tcp_answers(addr: SocketAddr) -> Result<(), String> {
    TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map(drop)
        .map_err(|err| err.to_string())
}

/// `bytes` random bytes from the kernel, as lowercase hex.
pub fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("could not read random bytes from /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain anything.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Sends `signal` (e.g. `TERM`, `KILL`) to `pid` with the `kill` program; failures are ignored
/// (the process may already be gone).
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Calls `check` every `every` until it returns true or `limit` has passed; returns its last answer.
pub fn wait_until(limit: Duration, every: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if check() {
            return true;
        }
        if started.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Stops process `pid`: waits up to `grace` for it to exit by itself (after a polite request the
/// caller already made), then sends SIGTERM, then SIGKILL.
pub fn stop_pid(pid: u32, grace: Duration) -> Result<()> {
    let step = Duration::from_millis(50);
    if wait_until(grace, step, || !pid_alive(pid)) {
        return Ok(());
    }
    signal(pid, "TERM");
    if wait_until(Duration::from_secs(15), step, || !pid_alive(pid)) {
        return Ok(());
    }
    signal(pid, "KILL");
    if wait_until(Duration::from_secs(5), step, || !pid_alive(pid)) {
        return Ok(());
    }
    bail!("process {pid} is still running after SIGKILL")
}

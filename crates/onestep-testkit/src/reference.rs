//! Python tools for tests: the reference for interop tests (and schemathesis for the HTTP API),
//! each in a virtualenv with pinned packages, and a long-lived helper process that answers one
//! JSON line per request.
//!
//! The reference's virtualenv is `<workspace>/.venv-ref` (or `$ONESTEP_REFERENCE_VENV`),
//! schemathesis's `<workspace>/.venv-schemathesis`. [`python`] and [`Venv::python`] create and
//! fill one from PyPI when it is missing or does not hold the pinned versions, once per process
//! and under a lock file across processes (test runners that start one process per test).
//! python3 with the `venv` module must be installed: without it the calling test fails with a
//! message saying so; it never skips.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

/// What `pip install` puts into the reference virtualenv: the reference itself with its YAML
/// loader (its `onestep check` reads the YAML tests hand it), its SQL backends with both drivers
/// (and SQLite's, a base requirement), the replication client its binlog source needs, its
/// Redis plugin, and hypothesis for the property tests.
pub const REQUIREMENTS: [&str; 8] = [
    "onestep[yaml]==1.15.0",
    "onestep-sql[postgres,mysql]==0.7.1",
    "mysql-replication==1.0.17",
    "onestep-redis==0.2.2",
    "onestep-mq==0.2.3",
    "onestep-sqs==0.2.4",
    "boto3==1.44.8",
    "hypothesis==6.170.17",
];

/// Succeeds only in a virtualenv that holds [`REQUIREMENTS`].
const READY_CHECK: &str = "import onestep_sql.postgres, onestep_sql.mysql, onestep_sql.sqlite, psycopg, asyncmy, aiosqlite, hypothesis, yaml, pymysqlreplication, onestep_redis, onestep_rabbitmq, onestep_sqs, boto3\n\
from importlib.metadata import version\n\
assert version('onestep') == '1.15.0', version('onestep')\n\
assert version('onestep-sql') == '0.7.1', version('onestep-sql')\n\
assert version('hypothesis') == '6.170.17', version('hypothesis')\n\
assert version('mysql-replication') == '1.0.17', version('mysql-replication')\n\
assert version('onestep-redis') == '0.2.2', version('onestep-redis')\n\
assert version('onestep-mq') == '0.2.3', version('onestep-mq')\n\
assert version('onestep-sqs') == '0.2.4', version('onestep-sqs')\n\
assert version('boto3') == '1.44.8', version('boto3')\n";

/// The workspace root (this crate lives in `crates/onestep-testkit`).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A virtualenv of pinned Python packages.
#[derive(Debug, Clone, Copy)]
pub struct Venv {
    /// Its directory under the workspace root.
    pub dir: &'static str,
    /// An environment variable that names another directory instead.
    pub env: &'static str,
    /// What `pip install` puts into it.
    pub requirements: &'static [&'static str],
    /// Python code that succeeds only when the requirements are installed.
    pub check: &'static str,
}

/// The reference's virtualenv.
pub const REFERENCE: Venv = Venv {
    dir: ".venv-ref",
    env: "ONESTEP_REFERENCE_VENV",
    requirements: &REQUIREMENTS,
    check: READY_CHECK,
};

/// schemathesis, which fuzzes the HTTP API against its OpenAPI document.
pub const SCHEMATHESIS: Venv = Venv {
    dir: ".venv-schemathesis",
    env: "ONESTEP_SCHEMATHESIS_VENV",
    requirements: &["schemathesis==4.32.5"],
    check: "from importlib.metadata import version\n\
            assert version('schemathesis') == '4.32.5', version('schemathesis')\n",
};

/// The reference's `onestep` command (`python -c "…main()"` in its virtualenv), to which a test
/// adds the arguments.
pub fn cli() -> Command {
    let mut command = Command::new(python());
    command.args([
        "-c",
        "import sys; from onestep.cli import main; sys.exit(main())",
    ]);
    command
}

/// The reference virtualenv's python, created and filled on first use.
///
/// # Panics
///
/// When the virtualenv cannot be created or filled; the message says why and what to install.
pub fn python() -> &'static Path {
    REFERENCE.python()
}

impl Venv {
    /// The virtualenv's directory.
    pub fn path(&self) -> PathBuf {
        std::env::var_os(self.env).map_or_else(|| workspace().join(self.dir), PathBuf::from)
    }

    /// Its python, created and filled on first use.
    ///
    /// # Panics
    ///
    /// When the virtualenv cannot be created or filled; the message says why.
    pub fn python(&self) -> &'static Path {
        static READY: OnceLock<Mutex<Vec<(&'static str, &'static Path)>>> = OnceLock::new();
        let ready = READY.get_or_init(Mutex::default);
        let mut ready = ready.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, path)) = ready.iter().find(|(dir, _)| *dir == self.dir) {
            return path;
        }
        match ensure_venv(self) {
            Ok(path) => {
                let path: &'static Path = Box::leak(path.into_boxed_path());
                ready.push((self.dir, path));
                path
            }
            Err(message) => panic!("{message}"),
        }
    }

    /// A program the virtualenv installed (`bin/<name>`), the virtualenv created first.
    pub fn program(&self, name: &str) -> PathBuf {
        let python = self.python();
        python.with_file_name(name)
    }
}

fn ready(python: &Path, check: &str) -> bool {
    Command::new(python)
        .args(["-c", check])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ensure_venv(spec: &Venv) -> Result<PathBuf, String> {
    let venv = spec.path();
    let python = venv.join("bin").join("python");
    if ready(&python, spec.check) {
        return Ok(python);
    }
    let mut lock_path = venv.clone().into_os_string();
    lock_path.push(".lock");
    let _lock = LockFile::acquire(Path::new(&lock_path))?;
    if ready(&python, spec.check) {
        return Ok(python);
    }
    let runs = Command::new(&python)
        .args(["-c", "pass"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        eprintln!("reference: creating {}", venv.display());
        let mut create = Command::new("python3");
        create.args(["-m", "venv", "--clear"]).arg(&venv);
        run_setup(&mut create, "python3 -m venv").map_err(|e| {
            format!(
                "the Python interop tests need python3 with the venv module (Debian: apt-get \
                 install python3 python3-venv) to create {}: {e}",
                venv.display()
            )
        })?;
    }
    eprintln!(
        "reference: installing {} into {}",
        spec.requirements.join(" "),
        venv.display()
    );
    let mut install = Command::new(&python);
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(spec.requirements);
    run_setup(&mut install, "pip install").map_err(|e| {
        format!(
            "could not install {} into {} (PyPI must be reachable): {e}",
            spec.requirements.join(" "),
            venv.display()
        )
    })?;
    if !ready(&python, spec.check) {
        return Err(format!(
            "{} still does not hold {} after pip install; delete the directory and run the \
             tests again",
            venv.display(),
            spec.requirements.join(" ")
        ));
    }
    Ok(python)
}

fn run_setup(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("{what} could not be started: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A lock file created with `create_new`; removed on drop. A lock older than 15 minutes is
/// taken to be left over from a killed run.
struct LockFile(PathBuf);

impl LockFile {
    fn acquire(path: &Path) -> Result<Self, String> {
        let deadline = Instant::now() + Duration::from_secs(20 * 60);
        loop {
            match OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut file) => {
                    let _ = writeln!(file, "{}", std::process::id());
                    return Ok(Self(path.to_path_buf()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .is_some_and(|age| age > Duration::from_secs(15 * 60));
                    if stale {
                        let _ = std::fs::remove_file(path);
                    } else if Instant::now() > deadline {
                        return Err(format!("timed out waiting for {}", path.display()));
                    } else {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A long-lived helper process run by the reference's python: `SCRIPT session` reads one
/// request per line (`{"command": …, "args": {…}}`) and answers each with one JSON line, so a
/// test pays for the imports once. Dropping it closes its standard input and waits for it.
pub struct PySession {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<String>>,
}

impl PySession {
    /// Starts `script session` with the reference's python.
    ///
    /// # Panics
    ///
    /// When the process cannot be started.
    pub fn start(script: &Path) -> Self {
        let mut child = Command::new(python())
            .arg(script)
            .arg("session")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the Python helper {}: {e}", script.display()));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap_or_else(|| unreachable!("piped")));
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let sink = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
        }
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    /// Runs one command; returns its JSON line and the session's standard error so far.
    ///
    /// # Panics
    ///
    /// When the session died or answered something that is not one JSON line.
    pub fn call(&mut self, command: &str, args: &Value) -> (Value, String) {
        let request = json!({"command": command, "args": args}).to_string();
        let sent = match self.stdin.as_mut() {
            Some(stdin) => writeln!(stdin, "{request}").and_then(|()| stdin.flush()),
            None => Err(std::io::Error::other("stdin closed")),
        };
        let mut line = String::new();
        let read = self.stdout.read_line(&mut line);
        let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        match (sent, read, serde_json::from_str::<Value>(&line)) {
            (Ok(()), Ok(n), Ok(value)) if n > 0 => (value, stderr),
            (sent, read, _) => panic!(
                "the Python helper session died on `{command}` (write: {sent:?}, read: {read:?}):\n\
                 args: {args}\nstdout: {line}\nstderr: {stderr}"
            ),
        }
    }
}

impl Drop for PySession {
    fn drop(&mut self) {
        drop(self.stdin.take()); // EOF ends the session loop
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `script COMMAND` once with the reference's python, `args` as JSON on standard input;
/// returns its last output line as JSON, and its standard error.
///
/// # Panics
///
/// When the process fails or its last line is not JSON.
pub fn run_once(script: &Path, command: &str, args: &Value) -> (Value, String) {
    let mut child = Command::new(python())
        .arg(script)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the Python helper {}: {e}", script.display()));
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(args.to_string().as_bytes());
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("the Python helper `{command}` was lost: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    match stdout.lines().last().map(serde_json::from_str::<Value>) {
        Some(Ok(value)) if output.status.success() => (value, stderr),
        _ => panic!(
            "the Python helper `{command}` failed ({}):\nargs: {args}\nstdout: {stdout}\nstderr: {stderr}",
            output.status
        ),
    }
}

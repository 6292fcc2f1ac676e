//! Undoing what a test run set up (databases, throwaway servers, the temp directory), even when
//! xtask does not get to do it itself.
//!
//! Every undo step is recorded in a [`Cleanup`] stack and also sent, as one line, to a watchdog:
//! a second xtask process in its own process group (so Ctrl-C in the terminal does not reach it)
//! that reads the steps from a pipe. When xtask finishes normally it undoes the steps itself and
//! tells the watchdog `done`. When xtask dies first (Ctrl-C, a kill, a crash), the pipe closes
//! without `done`, and the watchdog undoes the steps instead. Every step is idempotent.

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::kind::Kind;
use crate::{mariadb, postgres, rabbitmq, redis, sqs};

/// The hidden xtask command that runs the watchdog.
pub const WATCHDOG_COMMAND: &str = "__cleanup-watchdog";

/// The line that tells the watchdog xtask cleaned up by itself.
const DONE: &str = "done";

/// One idempotent undo step.
#[derive(Clone, Debug)]
pub enum Action {
    /// Drop a database this run created on a shared server.
    DropDatabase {
        /// Which server kind.
        kind: Kind,
        /// The admin connection URL (with password, if any).
        admin: String,
        /// The database to drop.
        name: String,
    },
    /// Stop a throwaway PostgreSQL cluster.
    StopPostgres {
        /// The PostgreSQL `bin` directory (for `pg_ctl`).
        bin_dir: PathBuf,
        /// The cluster's data directory.
        data_dir: PathBuf,
    },
    /// Stop a throwaway MariaDB server.
    StopMariadb {
        /// The admin connection URL (over the server's socket).
        admin: String,
        /// The server's process id.
        pid: u32,
    },
    /// Stop a throwaway Redis server.
    StopRedis {
        /// The server's process id.
        pid: u32,
    },
    /// Stop a throwaway RabbitMQ broker and its private epmd.
    StopRabbitmq {
        /// The server's process id.
        pid: u32,
        /// The port of the node's private epmd.
        epmd_port: u16,
    },
    /// Stop a throwaway moto emulator.
    StopMoto {
        /// The server's process id.
        pid: u32,
    },
    /// Remove this run's temporary directory.
    RemoveDir {
        /// The directory.
        path: PathBuf,
    },
}

impl Action {
    /// Performs the step.
    pub fn run(&self) -> Result<()> {
        match self {
            Action::DropDatabase { kind, admin, name } => kind.drop_database(admin, name),
            Action::StopPostgres { bin_dir, data_dir } => postgres::stop(bin_dir, data_dir),
            Action::StopMariadb { admin, pid } => mariadb::stop(admin, *pid),
            Action::StopRedis { pid } => redis::stop(*pid),
            Action::StopRabbitmq { pid, epmd_port } => rabbitmq::stop(*pid, *epmd_port),
            Action::StopMoto { pid } => sqs::stop(*pid),
            Action::RemoveDir { path } => match std::fs::remove_dir_all(path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    Err(err).with_context(|| format!("could not remove {}", path.display()))
                }
                _ => Ok(()),
            },
        }
    }

    /// What the step does, for messages.
    pub fn describe(&self) -> String {
        match self {
            Action::DropDatabase { kind, name, .. } => {
                format!("drop database {name} on {}", kind.label())
            }
            Action::StopPostgres { data_dir, .. } => {
                format!("stop throwaway PostgreSQL in {}", data_dir.display())
            }
            Action::StopMariadb { pid, .. } => format!("stop throwaway MariaDB (pid {pid})"),
            Action::StopRedis { pid } => format!("stop throwaway Redis (pid {pid})"),
            Action::StopRabbitmq { pid, .. } => format!("stop throwaway RabbitMQ (pid {pid})"),
            Action::StopMoto { pid } => format!("stop throwaway moto (pid {pid})"),
            Action::RemoveDir { path } => format!("remove {}", path.display()),
        }
    }

    /// The step as one tab-separated line for the watchdog.
    fn encode(&self) -> Result<String> {
        let fields: Vec<String> = match self {
            Action::DropDatabase { kind, admin, name } => vec![
                "drop-database".into(),
                kind.id().into(),
                admin.clone(),
                name.clone(),
            ],
            Action::StopPostgres { bin_dir, data_dir } => vec![
                "stop-postgres".into(),
                path_field(bin_dir)?,
                path_field(data_dir)?,
            ],
            Action::StopMariadb { admin, pid } => {
                vec!["stop-mariadb".into(), admin.clone(), pid.to_string()]
            }
            Action::StopRedis { pid } => vec!["stop-redis".into(), pid.to_string()],
            Action::StopRabbitmq { pid, epmd_port } => vec![
                "stop-rabbitmq".into(),
                pid.to_string(),
                epmd_port.to_string(),
            ],
            Action::StopMoto { pid } => vec!["stop-moto".into(), pid.to_string()],
            Action::RemoveDir { path } => vec!["remove-dir".into(), path_field(path)?],
        };
        if fields.iter().any(|f| f.contains(['\t', '\n'])) {
            bail!(
                "cannot record `{}`: a field contains a tab or newline",
                self.describe()
            );
        }
        Ok(fields.join("\t"))
    }

    /// Reads a line written by [`Action::encode`].
    fn decode(line: &str) -> Result<Self> {
        let fields: Vec<&str> = line.split('\t').collect();
        let action = match fields.as_slice() {
            ["drop-database", kind, admin, name] => Action::DropDatabase {
                kind: Kind::from_id(kind)?,
                admin: (*admin).to_string(),
                name: (*name).to_string(),
            },
            ["stop-postgres", bin_dir, data_dir] => Action::StopPostgres {
                bin_dir: bin_dir.into(),
                data_dir: data_dir.into(),
            },
            ["stop-mariadb", admin, pid] => Action::StopMariadb {
                admin: (*admin).to_string(),
                pid: pid.parse().context("bad pid")?,
            },
            ["stop-redis", pid] => Action::StopRedis {
                pid: pid.parse().context("bad pid")?,
            },
            ["stop-rabbitmq", pid, epmd_port] => Action::StopRabbitmq {
                pid: pid.parse().context("bad pid")?,
                epmd_port: epmd_port.parse().context("bad epmd port")?,
            },
            ["stop-moto", pid] => Action::StopMoto {
                pid: pid.parse().context("bad pid")?,
            },
            ["remove-dir", path] => Action::RemoveDir { path: path.into() },
            _ => bail!("unknown cleanup step {:?}", fields.first().unwrap_or(&"")),
        };
        Ok(action)
    }
}

/// A path as a UTF-8 line field.
fn path_field(path: &std::path::Path) -> Result<String> {
    path.to_str()
        .map(str::to_string)
        .with_context(|| format!("path {} is not UTF-8", path.display()))
}

/// The undo steps of this run, the server processes xtask started directly, and the watchdog.
pub struct Cleanup {
    /// Mutable state (steps are recorded from the threads that start servers).
    inner: Mutex<Inner>,
}

/// The state behind [`Cleanup`]'s lock.
struct Inner {
    /// Steps in the order they were recorded; undone in reverse.
    actions: Vec<Action>,
    /// Server processes that are xtask's children, reaped after the steps ran.
    children: Vec<Child>,
    /// The watchdog process and the pipe to it (None once cleaned up).
    watchdog: Option<(Child, ChildStdin)>,
}

impl Cleanup {
    /// Starts the watchdog and returns an empty stack.
    pub fn new() -> Result<Self> {
        let exe = std::env::current_exe().context("could not find the xtask executable")?;
        let mut child = Command::new(&exe)
            .arg(WATCHDOG_COMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .with_context(|| format!("could not start the cleanup watchdog {}", exe.display()))?;
        let stdin = child
            .stdin
            .take()
            .context("the cleanup watchdog has no stdin pipe")?;
        Ok(Self {
            inner: Mutex::new(Inner {
                actions: Vec::new(),
                children: Vec::new(),
                watchdog: Some((child, stdin)),
            }),
        })
    }

    /// Records an undo step (locally and with the watchdog).
    pub fn push(&self, action: Action) -> Result<()> {
        let line = action.encode()?;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, pipe)) = inner.watchdog.as_mut() {
            writeln!(pipe, "{line}")
                .and_then(|()| pipe.flush())
                .context("the cleanup watchdog is gone")?;
        }
        inner.actions.push(action);
        Ok(())
    }

    /// Keeps a server process that xtask spawned itself, to reap it after the steps ran.
    pub fn adopt(&self, child: Child) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.children.push(child);
    }

    /// Undoes every recorded step (newest first), reaps adopted processes and dismisses the
    /// watchdog. Runs every step even when some fail; reports all failures.
    pub fn run(&self) -> Result<()> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failures = run_all(&std::mem::take(&mut inner.actions), false);
        for mut child in inner.children.drain(..) {
            if let Ok(None) = child.try_wait() {
                // Steps already asked it to stop; it should be gone or nearly so.
                let gone = crate::sys::wait_until(
                    Duration::from_secs(10),
                    Duration::from_millis(50),
                    || !matches!(child.try_wait(), Ok(None)),
                );
                if !gone {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        if let Some((mut watchdog, mut pipe)) = inner.watchdog.take() {
            if let Err(err) = writeln!(pipe, "{DONE}") {
                failures.push(format!("could not dismiss the cleanup watchdog: {err}"));
            }
            drop(pipe);
            if let Err(err) = watchdog.wait() {
                failures.push(format!("could not wait for the cleanup watchdog: {err}"));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            bail!("cleanup failed:\n  {}", failures.join("\n  "))
        }
    }
}

impl Drop for Cleanup {
    /// Cleans up on early returns and panics too.
    fn drop(&mut self) {
        if let Err(err) = self.run() {
            eprintln!("xtask: {err:#}");
        }
    }
}

/// Runs `actions` newest first (saying what each does when `announce`); returns the failures.
fn run_all(actions: &[Action], announce: bool) -> Vec<String> {
    actions
        .iter()
        .rev()
        .filter_map(|action| {
            if announce {
                eprintln!("xtask: {}", action.describe());
            }
            action
                .run()
                .err()
                .map(|err| format!("{}: {err:#}", action.describe()))
        })
        .collect()
}

/// The watchdog: records steps read from stdin; when stdin closes without `done`, undoes them.
pub fn watchdog() -> Result<()> {
    let mut actions = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line == DONE {
            return Ok(());
        }
        match Action::decode(&line) {
            Ok(action) => actions.push(action),
            Err(err) => eprintln!("xtask watchdog: ignoring a cleanup step: {err:#}"),
        }
    }
    if actions.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: interrupted; cleaning up the test databases and servers");
    let failures = run_all(&actions, true);
    if failures.is_empty() {
        eprintln!("xtask: cleanup after interruption finished");
        Ok(())
    } else {
        bail!(
            "cleanup after interruption failed:\n  {}",
            failures.join("\n  ")
        )
    }
}

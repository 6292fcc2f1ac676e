//! A throwaway RabbitMQ broker: one node on free ports of 127.0.0.1 with its own HOME, Mnesia
//! directory, node name and private epmd (as `../shared/reference/server-scripts/
//! rabbitmq-start.sh` starts it), guest allowed from the loopback, stopped through the run's
//! cleanup.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cleanup::{Action, Cleanup};
use crate::kind::Started;
use crate::rabbitmq::{self, SYSTEM_USER, ping};
use crate::sys::{self, command_as};

/// Starts a throwaway broker in `dir` (created here).
pub fn start_throwaway(dir: &Path, root: bool, cleanup: &Cleanup) -> Result<Started> {
    start_on_free_ports(dir, root, cleanup).map(|(started, ..)| started)
}

/// The ports of one node: AMQP, its private epmd, distribution.
#[derive(Clone, Copy)]
struct Ports {
    amqp: u16,
    epmd: u16,
    dist: u16,
}

/// A throwaway broker that can be restarted on its ports from its Mnesia directory (durable
/// queues and persistent messages survive), for the chaos suite's broker restart.
pub struct Throwaway {
    dir: std::path::PathBuf,
    ports: Ports,
    root: bool,
    pid: std::sync::Mutex<u32>,
    url: crate::url::DbUrl,
    /// Stops the broker and removes its files, even if xtask dies.
    cleanup: Cleanup,
}

impl Throwaway {
    /// Starts a broker with its files in `dir`.
    pub fn start(dir: &Path) -> Result<Self> {
        let cleanup = Cleanup::new()?;
        let root = sys::is_root()?;
        cleanup.push(Action::RemoveDir {
            path: dir.to_path_buf(),
        })?;
        let (started, ports, pid) = start_on_free_ports(dir, root, &cleanup)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            ports,
            root,
            pid: std::sync::Mutex::new(pid),
            url: started.tests,
            cleanup,
        })
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/%2f`.
    pub fn url(&self) -> String {
        self.url.to_string()
    }

    /// Stops the node (SIGTERM, a clean stop), waits `down`, and starts it again.
    pub fn restart(&self, down: Duration) -> Result<()> {
        let mut pid = self
            .pid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rabbitmq::stop(*pid, self.ports.epmd)?;
        std::thread::sleep(down);
        *pid = spawn(&self.dir, self.ports, self.root, &self.cleanup)?.1;
        Ok(())
    }

    /// Stops the broker and removes its files.
    pub fn stop(self) -> Result<()> {
        self.cleanup.run()
    }
}

/// Starts a node in `dir` on free ports (trying again when one was taken meanwhile).
fn start_on_free_ports(dir: &Path, root: bool, cleanup: &Cleanup) -> Result<(Started, Ports, u32)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let ports = Ports {
            amqp: sys::free_port()?,
            epmd: sys::free_port()?,
            dist: sys::free_port()?,
        };
        std::fs::create_dir_all(dir.join("log"))
            .and_then(|()| std::fs::create_dir_all(dir.join("mnesia")))
            .with_context(|| format!("could not create {}", dir.display()))?;
        write_config(dir, ports.amqp)?;
        sys::chown_to(dir, SYSTEM_USER, root)?;
        match spawn(dir, ports, root, cleanup) {
            Ok((started, pid)) => return Ok((started, ports, pid)),
            Err(err) if attempt < 3 && format!("{err:#}").contains("eaddrinuse") => {}
            Err(err) => return Err(err),
        }
    }
}

/// Starts `rabbitmq-server` in `dir` on `ports` and waits until it answers; its `Started` and
/// process id.
fn spawn(dir: &Path, ports: Ports, root: bool, cleanup: &Cleanup) -> Result<(Started, u32)> {
    let server = rabbitmq::server().context("rabbitmq-server is not installed")?;
    let port = ports.amqp;
    let log = dir.join("server.log");
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("could not open {}", log.display()))?;
    let mut cmd = command_as(SYSTEM_USER, "/usr/bin/env", root);
    cmd.current_dir(dir)
        .arg(format!("HOME={}", dir.display()))
        .arg(&server)
        .env("RABBITMQ_NODENAME", format!("onestep{port}@localhost"))
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", port.to_string())
        .env("RABBITMQ_DIST_PORT", ports.dist.to_string())
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .env("ERL_EPMD_PORT", ports.epmd.to_string())
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_PID_FILE", dir.join("rabbit.pid"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
        .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
        .env(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}",
        )
        .env(
            "PATH",
            "/usr/lib/rabbitmq/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start {}", server.display()))?;
    let pid = child.id();
    if let Err(err) = cleanup.push(Action::StopRabbitmq {
        pid,
        epmd_port: ports.epmd,
    }) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(err);
    }
    let url = rabbitmq::url(port);
    let answered = sys::wait_until(Duration::from_secs(90), Duration::from_millis(200), || {
        !matches!(child.try_wait(), Ok(None)) || ping(&url).is_ok()
    });
    let exited = child.try_wait().ok().flatten();
    cleanup.adopt(child);
    let tail = || sys::file_tail(&log, 30);
    match exited {
        Some(status) => bail!(
            "rabbitmq-server exited ({status}); log ({}):\n{}",
            log.display(),
            tail()
        ),
        None if answered => Ok((
            Started {
                admin: url.clone(),
                tests: url,
                owner: None,
                description: "throwaway RabbitMQ".into(),
            },
            pid,
        )),
        None => bail!(
            "rabbitmq-server did not answer within 90 s; log ({}):\n{}",
            log.display(),
            tail()
        ),
    }
}

/// The node's configuration: the listener, guest allowed from the loopback, and limits that
/// suit a small machine.
fn write_config(dir: &Path, port: u16) -> Result<()> {
    let files = [
        ("enabled_plugins", "[].\n".to_string()),
        ("advanced.config", "[].\n".to_string()),
        ("rabbitmq-env.conf", String::new()),
        (
            "rabbitmq.conf",
            format!(
                "listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n\
                 default_user = guest\ndefault_pass = guest\n\
                 vm_memory_high_watermark.relative = 0.2\ndisk_free_limit.absolute = 50MB\n"
            ),
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .with_context(|| format!("could not write {}", path.display()))?;
    }
    Ok(())
}

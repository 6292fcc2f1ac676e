//! A throwaway SQS and SNS emulator: moto's server (from PyPI, as `../shared/reference/
//! server-scripts/moto-start.sh` starts it) on a free port of 127.0.0.1, stopped through the
//! run's cleanup. Its virtualenv is made once per moto release under the temp directory and
//! shared by later runs (made in a fresh directory, then renamed into place, so two runs never
//! see a half-made one).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cleanup::{Action, Cleanup};
use crate::kind::Started;
use crate::sqs::{self, MOTO_REQUIREMENTS, SYSTEM_USER, ping};
use crate::sys::{self, command_as};

/// Starts a throwaway emulator with its log in `dir` (created here).
pub fn start_throwaway(dir: &Path, root: bool, cleanup: &Cleanup) -> Result<Started> {
    let venv = ensure_venv()?;
    let server = venv.join("bin").join("python");
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    sys::chown_to(dir, SYSTEM_USER, root)?;
    let log = dir.join("moto.log");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = sys::free_port()?;
        let log_file = std::fs::File::create(&log)
            .with_context(|| format!("could not create {}", log.display()))?;
        let mut cmd = command_as(SYSTEM_USER, "/usr/bin/env", root);
        cmd.current_dir(dir)
            .arg(format!("HOME={}", dir.display()))
            .arg(&server)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("could not start {}", server.display()))?;
        if let Err(err) = cleanup.push(Action::StopMoto { pid: child.id() }) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        let url = sqs::url(port);
        let answered = sys::wait_until(Duration::from_secs(60), Duration::from_millis(100), || {
            !matches!(child.try_wait(), Ok(None)) || ping(&url).is_ok()
        });
        let exited = child.try_wait().ok().flatten();
        cleanup.adopt(child);
        let tail = || sys::file_tail(&log, 20);
        match exited {
            Some(_) if attempt < 3 && tail().contains("Address already in use") => {}
            Some(status) => bail!(
                "moto_server exited ({status}); log ({}):\n{}",
                log.display(),
                tail()
            ),
            None if answered => {
                return Ok(Started {
                    admin: url.clone(),
                    tests: url,
                    owner: None,
                    description: format!("throwaway moto ({})", MOTO_REQUIREMENTS[0]),
                });
            }
            None => bail!(
                "moto_server did not answer within 60 s; log ({}):\n{}",
                log.display(),
                tail()
            ),
        }
    }
}

/// The shared virtualenv with moto's server, made when missing.
fn ensure_venv() -> Result<PathBuf> {
    let tag: String = MOTO_REQUIREMENTS[0]
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let venv = std::env::temp_dir().join(format!("onestep-xtask-{tag}"));
    if has_moto(&venv) {
        return Ok(venv);
    }
    let python = sqs::python().context(
        "the SQS emulator needs python3 with the venv module (Debian: apt-get install python3 \
         python3-venv)",
    )?;
    let fresh = std::env::temp_dir().join(format!("onestep-xtask-{tag}.{}", sys::random_hex(4)?));
    eprintln!(
        "xtask: sqs: installing {} into {}",
        MOTO_REQUIREMENTS.join(" "),
        venv.display()
    );
    let made = (|| -> Result<()> {
        sys::run(Command::new(&python).args(["-m", "venv"]).arg(&fresh))
            .context("python3 -m venv failed (Debian: apt-get install python3-venv)")?;
        sys::run(
            Command::new(fresh.join("bin").join("python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(MOTO_REQUIREMENTS),
        )
        .context("pip could not install moto from PyPI")?;
        // Every user runs it (the emulator runs as its own user when xtask is root).
        sys::set_mode(&fresh, 0o755)?;
        Ok(())
    })();
    if let Err(err) = made {
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(err);
    }
    // Renamed into place (its python finds the venv by `pyvenv.cfg` beside it, so it runs from
    // anywhere; the scripts in bin/ are not used); another run that got there first wins.
    if std::fs::rename(&fresh, &venv).is_err() {
        let _ = std::fs::remove_dir_all(&fresh);
    }
    if !has_moto(&venv) {
        bail!("{} has no moto server", venv.display());
    }
    Ok(venv)
}

/// Whether `venv` holds a finished install (the module is the last thing pip writes).
fn has_moto(venv: &Path) -> bool {
    venv.join("bin").join("python").exists()
        && std::fs::read_dir(venv.join("lib"))
            .ok()
            .and_then(|mut dirs| dirs.next())
            .and_then(Result::ok)
            .is_some_and(|dir| dir.path().join("site-packages/moto/server.py").exists())
}

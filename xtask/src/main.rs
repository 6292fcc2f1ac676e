//! `cargo xtask`: what CI runs, runnable locally.
//!
//! - `cargo xtask ci [--throwaway-servers]`: format check, clippy with `-D warnings`, docs with
//!   `-D warnings`, `release-check`, `cargo deny check licenses bans sources` (installing
//!   cargo-deny first when it is missing), all tests, then the fault suite in its short form
//!   (`chaos --short`); one closing line says what passed and how long each step took.
//! - `cargo xtask test [--throwaway-servers] [ARGS…]`: all tests (extra arguments go to
//!   `cargo test`), with real PostgreSQL and MariaDB servers (see [`servers`]).
//! - `cargo xtask lint`: format check, clippy and docs only.
//! - `cargo xtask release-check [--no-verify] [--no-package]`: whether the workspace can be
//!   released (see [`release`]); `cargo xtask release-plan`: the ordered plan for a human.
//! - `cargo xtask bench [--throwaway-servers] [--peers] [--n N]`: the side-by-side benchmark
//!   (see [`mod@bench`]).
//! - `cargo xtask chaos [--throwaway-servers] [--short]`: the fault suite (see [`chaos`]).
//! - `cargo xtask fuzz [--cases N]`: the fuzz suites (codec, cursor, YAML, env) at length.
//! - `cargo xtask deny [CHECKS…]`: cargo-deny (see [`deny`]); `cargo xtask install-tools`
//!   installs it.

mod bench;
mod chaos;
mod cleanup;
mod deny;
mod kind;
mod mariadb;
mod postgres;
mod rabbitmq;
mod redis;
mod release;
mod scratch;
mod servers;
mod sqs;
mod sys;
mod throwaway;
mod url;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use servers::{Options, Servers};

/// The usage text of `cargo xtask help`.
const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  ci [--throwaway-servers]            lint, release-check, deny (installed when missing),
                                      test, then chaos --short
  lint                                fmt check, clippy -D warnings, docs -D warnings
  test [--throwaway-servers] [ARGS]   cargo test --workspace [ARGS] against real servers
  release-check [--no-verify] [--no-package]
                                      publish order, version requirements, changelog, release
                                      tags, Cargo.lock, and `cargo publish --dry-run` of every
                                      published crate in order (--no-verify: do not build the
                                      packages; --no-package: skip packaging)
  release-plan                        the ordered release plan: crate, old -> new version, why
  bench [--throwaway-servers] [--peers] [--n N] [--reference-n N] [--concurrency N] [--batch N]
        [--prefetch N] [--steady-rate N] [--steady-seconds N] [--history N] [--running N] [--rounds N]
        [--scale-out]                 burn-down benchmark on PostgreSQL, MariaDB and SQLite
                                      (--peers: also the Python reference and graphile-worker;
                                      --rounds: paired ceiling/drain rounds, default 3;
                                      --scale-out: 1, 2, 4 and 8 workers)
  chaos [--throwaway-servers] [--short] [--n N] [--only FAULT]
                                      the fault suite (docs/reliability.md): kill -9, server
                                      restart, 4 workers, connection kills, cancels, clock skew
  fuzz [--cases N]                    the proptest fuzz suites with N cases per property
                                      (default 20000; CI runs them with 256 inside `test`)
  deny [CHECKS]                       cargo deny check (default: licenses bans sources)
  install-tools                       cargo install cargo-deny (what `deny` does when missing)
  help                                this text

Servers for the tests, per kind: ONESTEP_POSTGRES_URL / ONESTEP_MYSQL_URL if set; else the local
default servers (127.0.0.1:5432, 127.0.0.1:3306) if they answer; else throwaway servers started
(and installed, if needed) by xtask. --throwaway-servers always starts throwaway servers. Each run
uses a fresh database on each server and drops it afterwards.";

/// The steps of `ci`, timed, for the closing summary line.
#[derive(Default)]
struct Steps {
    started: Option<Instant>,
    done: Vec<(&'static str, std::time::Duration)>,
}

impl Steps {
    /// Runs one step; on failure prints which steps passed and which one failed.
    fn run(&mut self, name: &'static str, step: impl FnOnce() -> Result<()>) -> Result<()> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let at = Instant::now();
        match step() {
            Ok(()) => {
                self.done.push((name, at.elapsed()));
                Ok(())
            }
            Err(err) => {
                eprintln!(
                    "xtask ci: FAILED at {name} after {}; passed before it: {}",
                    minutes(started.elapsed()),
                    self.listing()
                );
                Err(err)
            }
        }
    }

    fn listing(&self) -> String {
        if self.done.is_empty() {
            return "nothing".to_owned();
        }
        self.done
            .iter()
            .map(|(name, took)| format!("{name} ({})", minutes(*took)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The closing line of a run where every step passed.
    fn passed(&self) {
        let total = self.started.map(|s| s.elapsed()).unwrap_or_default();
        eprintln!("xtask ci: PASSED in {}: {}", minutes(total), self.listing());
    }
}

/// `1 min 23 s`, or `23.4 s` under a minute.
fn minutes(took: std::time::Duration) -> String {
    let seconds = took.as_secs_f64();
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{} min {} s", took.as_secs() / 60, took.as_secs() % 60)
    }
}

/// Runs the command and turns its outcome into the exit code.
fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Dispatches on the first argument.
fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_else(|| "help".to_string());
    let (options, rest) = Options::from_args(args.collect());
    match command.as_str() {
        "ci" => {
            let mut steps = Steps::default();
            steps.run("lint", lint)?;
            steps.run("release-check", || {
                release::check(&release::CheckOptions::default())
            })?;
            steps.run("deny", || deny::check(&[]))?;
            steps.run("test", || test(options, &rest))?;
            let short = chaos::ChaosOptions::from_args(&["--short".into()])?;
            steps.run("chaos --short", || chaos::run(options, &short))?;
            steps.passed();
            Ok(())
        }
        "lint" => {
            if options.throwaway {
                bail!("{} is for `test` and `ci`", servers::THROWAWAY_FLAG);
            }
            lint()
        }
        "test" => test(options, &rest),
        "bench" => bench::run(options, &bench::BenchOptions::from_args(&rest)?),
        "chaos" => chaos::run(options, &chaos::ChaosOptions::from_args(&rest)?),
        "fuzz" => {
            no_throwaway(&options, &command)?;
            fuzz(&rest)
        }
        "release-check" => {
            no_throwaway(&options, &command)?;
            release::check(&release::CheckOptions::from_args(&rest)?)
        }
        "release-plan" => {
            no_throwaway(&options, &command)?;
            no_arguments(&rest, &command)?;
            release::plan()
        }
        "deny" => {
            no_throwaway(&options, &command)?;
            deny::check(&rest)
        }
        "install-tools" => {
            no_throwaway(&options, &command)?;
            no_arguments(&rest, &command)?;
            deny::install_tools()
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        cleanup::WATCHDOG_COMMAND => cleanup::watchdog(),
        other => bail!("unknown command {other:?}; try `cargo xtask help`"),
    }
}

/// `cargo xtask fuzz [--cases N]`: the proptest suites of onestep-core and onestep-cli with
/// `PROPTEST_CASES=N` (release build: minutes, not hours).
fn fuzz(args: &[String]) -> Result<()> {
    let cases = match args {
        [] => "20000".to_string(),
        [flag, n] if flag == "--cases" && n.parse::<u32>().is_ok_and(|n| n > 0) => n.clone(),
        _ => bail!("`fuzz` takes `--cases N` (a positive integer), got {args:?}"),
    };
    cargo(
        &[
            "test",
            "--release",
            "-p",
            "onestep-core",
            "-p",
            "onestep-cli",
            "--test",
            "fuzz",
        ],
        &[("PROPTEST_CASES", &cases)],
    )
}

/// Fails when `--throwaway-servers` was given to a command that starts no servers.
fn no_throwaway(options: &Options, command: &str) -> Result<()> {
    if options.throwaway {
        bail!(
            "{} is for `test` and `ci`, not `{command}`",
            servers::THROWAWAY_FLAG
        );
    }
    Ok(())
}

/// Fails when a command that takes no arguments got some.
fn no_arguments(rest: &[String], command: &str) -> Result<()> {
    if let Some(first) = rest.first() {
        bail!("`{command}` takes no arguments (got {first:?})");
    }
    Ok(())
}

/// `cargo xtask lint`: format check, clippy (the CLI also without its default features) and docs,
/// all with warnings as errors.
fn lint() -> Result<()> {
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // The binary without its optional OpenTelemetry export still builds, warning-free.
    cargo(
        &[
            "clippy",
            "-p",
            "onestep-cli",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    Ok(())
}

/// `cargo xtask test`: `cargo test --workspace [extra]` with database servers provided, which
/// are cleaned up afterwards whatever the outcome.
fn test(options: Options, extra: &[String]) -> Result<()> {
    let chromedriver = browser()?;
    let servers = Servers::provide(options, &kind::Kind::ALL)?;
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    let scratch = scratch::Scratch::new()?;
    let tmpdir = scratch.path().to_string_lossy().into_owned();
    let mut env: Vec<(&str, &str)> = servers
        .env()
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    env.push(("TMPDIR", &tmpdir));
    let chromedriver = chromedriver.to_string_lossy().into_owned();
    env.push(("ONESTEP_CHROMEDRIVER", &chromedriver));
    // The passwords of the URLs handed to the tests (throwaway servers have random ones; the
    // local default servers use trust auth and have none; RabbitMQ's `guest` is public, and
    // the word is too common to withhold lines for).
    let secrets: Vec<String> = servers
        .env()
        .iter()
        .filter_map(|(_, url)| url::DbUrl::parse(url).ok()?.password())
        .filter(|p| !p.is_empty() && p != "guest")
        .collect();
    let tested = cargo_scanned(&args, &env, &secrets).and_then(|()| scratch.finish());
    let cleaned = servers.finish();
    match (tested, cleaned) {
        (Err(tests), Err(cleanup)) => {
            eprintln!("xtask: {cleanup:#}");
            Err(tests)
        }
        (tested, cleaned) => tested.and(cleaned),
    }
}

/// chromedriver for the dashboard's browser tests: Debian's `chromium` and `chromium-driver`,
/// installed when missing.
fn browser() -> Result<PathBuf> {
    let found =
        || sys::find_program("chromedriver").filter(|_| sys::find_program("chromium").is_some());
    if let Some(path) = found() {
        return Ok(path);
    }
    sys::apt_install(
        &["chromium", "chromium-driver"],
        "the dashboard's browser tests need Chromium and chromedriver",
    )?;
    found().ok_or_else(|| {
        anyhow::anyhow!("chromedriver is still missing after installing chromium-driver")
    })
}

/// [`cargo`], with its output passed through line by line and scanned for `secrets` (DSN
/// passwords): one in the output — a failing test's captured logs, a panic message, anything
/// printed — fails the run without echoing that line.
fn cargo_scanned(args: &[&str], env: &[(&str, &str)], secrets: &[String]) -> Result<()> {
    if secrets.is_empty() {
        eprintln!(
            "xtask: the servers use no passwords; the password leak scan has nothing to find"
        );
        return cargo(args, env);
    }
    let started = Instant::now();
    eprintln!(
        "xtask: cargo {} (output scanned for DSN passwords)",
        args.join(" ")
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut child = Command::new(cargo)
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start cargo {}", args.join(" ")))?;
    let leaks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pass = |pipe: Box<dyn std::io::Read + Send>, to_stdout: bool| {
        let secrets = secrets.to_vec();
        let leaks = leaks.clone();
        std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let line = if secrets.iter().any(|s| line.contains(s.as_str())) {
                    leaks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    "xtask: [line withheld: it holds a DSN password]".to_string()
                } else {
                    line
                };
                let _ = if to_stdout {
                    writeln!(std::io::stdout(), "{line}")
                } else {
                    writeln!(std::io::stderr(), "{line}")
                };
            }
        })
    };
    let out = child.stdout.take().map(|p| pass(Box::new(p), true));
    let err = child.stderr.take().map(|p| pass(Box::new(p), false));
    let status = child.wait().context("could not wait for cargo")?;
    for thread in [out, err].into_iter().flatten() {
        let _ = thread.join();
    }
    eprintln!(
        "xtask: cargo {} finished in {:.1}s",
        args[0],
        started.elapsed().as_secs_f64()
    );
    let leaked = leaks.load(std::sync::atomic::Ordering::Relaxed);
    if leaked > 0 {
        bail!("{leaked} line(s) of the test output held a DSN password");
    }
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Writes `lines` (one JSON value each) to `target/<dir>/<unix-seconds>.jsonl`; returns the path.
pub fn write_jsonl(dir: &str, lines: &[serde_json::Value]) -> Result<PathBuf> {
    let out_dir = target_dir().join(dir);
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("could not create {}", out_dir.display()))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let file = out_dir.join(format!("{stamp}.jsonl"));
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(&file, text).with_context(|| format!("could not write {}", file.display()))?;
    Ok(file)
}

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `<root>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Runs `cargo <args>` with extra environment variables; fails if it fails.
fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let started = Instant::now();
    eprintln!("xtask: cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd
        .status()
        .with_context(|| format!("could not start cargo {}", args.join(" ")))?;
    eprintln!(
        "xtask: cargo {} finished in {:.1}s",
        args[0],
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

//! `cargo xtask`: what CI runs, runnable locally.
//!
//! - `cargo xtask ci [--throwaway-servers]`: format check, clippy with `-D warnings`, docs with
//!   `-D warnings`, all tests.
//! - `cargo xtask test [--throwaway-servers] [ARGS…]`: all tests (extra arguments go to
//!   `cargo test`), with real PostgreSQL and MariaDB servers (see [`servers`]).
//! - `cargo xtask lint`: format check, clippy and docs only.

mod cleanup;
mod mariadb;
mod postgres;
mod servers;
mod sys;
mod url;

use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use servers::{Options, Servers};

/// The usage text of `cargo xtask help`.
const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  ci [--throwaway-servers]            lint, then test
  lint                                fmt check, clippy -D warnings, docs -D warnings
  test [--throwaway-servers] [ARGS]   cargo test --workspace [ARGS] against real servers
  help                                this text

Servers for the tests, per kind: ONESTEP_POSTGRES_URL / ONESTEP_MYSQL_URL if set; else the local
default servers (127.0.0.1:5432, 127.0.0.1:3306) if they answer; else throwaway servers started
(and installed, if needed) by xtask. --throwaway-servers always starts throwaway servers. Each run
uses a fresh database on each server and drops it afterwards.";

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
            lint()?;
            test(options, &rest)
        }
        "lint" => {
            if options.throwaway {
                bail!("{} is for `test` and `ci`", servers::THROWAWAY_FLAG);
            }
            lint()
        }
        "test" => test(options, &rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        cleanup::WATCHDOG_COMMAND => cleanup::watchdog(),
        other => bail!("unknown command {other:?}; try `cargo xtask help`"),
    }
}

/// `cargo xtask lint`: format check, clippy and docs, all with warnings as errors.
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
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    Ok(())
}

/// `cargo xtask test`: `cargo test --workspace [extra]` with database servers provided, which
/// are cleaned up afterwards whatever the outcome.
fn test(options: Options, extra: &[String]) -> Result<()> {
    let servers = Servers::provide(options)?;
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    let env: Vec<(&str, &str)> = servers
        .env()
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    let tested = cargo(&args, &env);
    let cleaned = servers.finish();
    match (tested, cleaned) {
        (Err(tests), Err(cleanup)) => {
            eprintln!("xtask: {cleanup:#}");
            Err(tests)
        }
        (tested, cleaned) => tested.and(cleaned),
    }
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

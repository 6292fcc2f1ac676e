//! `cargo xtask`: what CI runs, runnable locally.
//!
//! - `cargo xtask ci`: format check, clippy with `-D warnings`, docs with `-D warnings`, all tests.
//! - `cargo xtask test [ARGS…]`: all tests (extra arguments go to `cargo test`).
//! - `cargo xtask lint`: format check, clippy and docs only.

use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_else(|| "help".to_string());
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "ci" => {
            lint()?;
            test(&rest)
        }
        "lint" => lint(),
        "test" => test(&rest),
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <ci|lint|test> [args]");
            Ok(())
        }
        other => bail!("unknown command {other:?}; try `cargo xtask help`"),
    }
}

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

fn test(extra: &[String]) -> Result<()> {
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args, &[])
}

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

//! Supply-chain checks with [cargo-deny](https://github.com/EmbarkStudios/cargo-deny), configured
//! by the top-level `deny.toml`.
//!
//! `cargo xtask ci` runs `cargo deny check licenses bans sources`, installing cargo-deny first
//! (`cargo install`, once per cargo home) when it is missing; a check that cannot run fails the
//! run, it is never skipped. `cargo xtask install-tools` installs it alone. `advisories` is not in
//! the default set because it fetches the RustSec database, which the build machines cannot
//! reach; run `cargo xtask deny advisories` where they can.

use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The checks `ci` and `cargo xtask deny` run by default.
pub const DEFAULT_CHECKS: &[&str] = &["licenses", "bans", "sources"];

/// Whether `cargo deny` runs.
pub fn installed() -> bool {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    Command::new(cargo)
        .args(["deny", "--version"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The cargo-deny release `install-tools` installs: one that reads `deny.toml`'s format.
pub const VERSION: &str = "0.18.9";

/// `cargo deny check <checks>` (the default set when `checks` is empty), installing cargo-deny
/// first when it is missing.
pub fn check(checks: &[String]) -> Result<()> {
    let mut args = vec!["deny", "check"];
    if checks.is_empty() {
        args.extend(DEFAULT_CHECKS);
    } else {
        args.extend(checks.iter().map(String::as_str));
    }
    install_tools().context("cargo-deny is missing and could not be installed")?;
    crate::cargo(&args, &[])
}

/// The release profile cargo-deny is built with: less optimization, no link-time optimization,
/// many codegen units. In a fresh cargo home (every CI run) the build is most of the deny step:
/// 156 s against 239 s with cargo-deny's own profile, measured one after the other on 2026-12-05,
/// while `cargo deny check licenses bans sources` took 4.3 s with either binary.
const QUICK_BUILD: &[(&str, &str)] = &[
    ("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1"),
    ("CARGO_PROFILE_RELEASE_LTO", "off"),
    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256"),
    ("CARGO_PROFILE_RELEASE_DEBUG", "0"),
];

/// `cargo xtask install-tools`: installs cargo-deny unless it is there.
pub fn install_tools() -> Result<()> {
    if installed() {
        return Ok(());
    }
    eprintln!(
        "xtask: cargo-deny is not installed; installing cargo-deny {VERSION} (once per cargo home)"
    );
    crate::cargo(
        &["install", "cargo-deny", "--locked", "--version", VERSION],
        QUICK_BUILD,
    )?;
    if !installed() {
        bail!(
            "cargo install cargo-deny succeeded, but `cargo deny` still does not run (is the cargo bin directory on PATH?)"
        );
    }
    Ok(())
}

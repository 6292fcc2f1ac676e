//! Supply-chain checks with [cargo-deny](https://github.com/EmbarkStudios/cargo-deny), configured
//! by the top-level `deny.toml`.
//!
//! `cargo xtask ci` runs `cargo deny check licenses bans sources` when cargo-deny is installed and
//! says it skipped it when not; `cargo xtask install-tools` installs it. `advisories` is not in
//! the default set because it fetches the RustSec database, which the build machines cannot
//! reach; run `cargo xtask deny advisories` where they can.

use std::process::{Command, Stdio};

use anyhow::Result;

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

/// `cargo deny check <checks>` (the default set when `checks` is empty); a printed note and
/// success when cargo-deny is not installed.
pub fn check(checks: &[String]) -> Result<()> {
    let mut args = vec!["deny", "check"];
    if checks.is_empty() {
        args.extend(DEFAULT_CHECKS);
    } else {
        args.extend(checks.iter().map(String::as_str));
    }
    if !installed() {
        eprintln!(
            "xtask: cargo-deny is not installed; skipped `cargo {}` (install it with `cargo \
             xtask install-tools`)",
            args.join(" ")
        );
        return Ok(());
    }
    crate::cargo(&args, &[])
}

/// `cargo xtask install-tools`: installs cargo-deny unless it is there.
pub fn install_tools() -> Result<()> {
    if installed() {
        eprintln!("xtask: cargo-deny is already installed");
        return Ok(());
    }
    crate::cargo(&["install", "cargo-deny", "--locked"], &[])
}

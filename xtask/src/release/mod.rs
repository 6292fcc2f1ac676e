//! `cargo xtask release-check` and `cargo xtask release-plan`: whether the workspace can be
//! released as it stands, and in which order.
//!
//! What is published: every member whose `publish` allows crates.io. `xtask` and
//! `onestep-testkit` are `publish = false` (the test kit is a dev-dependency of our own crates
//! and its API is not a promise yet); a published crate may use them only as path-only
//! dev-dependencies, which `cargo package` strips.
//!
//! The checks ([`checks`]):
//!
//! - **requirements**: every published path dependency between members carries a `version`
//!   requirement that admits the dependency's current version and no version older than its
//!   [`FLOORS`] entry; no published crate needs an unpublished one.
//! - **metadata**: `description` and `license` are set (crates.io refuses a crate without them).
//! - **changelog**: `CHANGELOG.md` has a non-empty `## <crate> <version>` section for every
//!   published crate's current version.
//! - **tags**: a crate whose files changed since its last release tag `<crate>-v<version>` has a
//!   higher version than that tag (no tags yet: every crate is unreleased and this passes).
//! - **include paths**: no `include_str!`/`include_bytes!`/`include!` in a crate's sources
//!   reaches outside the crate directory (`cargo package` would leave the file out).
//! - **lockfile**: `cargo metadata --locked` succeeds, i.e. `Cargo.lock` needs no update.
//! - **packaging** (`release-check` only, not the unit tests): `cargo publish --dry-run` of every
//!   published crate in publish order, in one cargo invocation, so that each crate is packaged,
//!   then built from its packaged sources with its workspace dependencies taken from the other
//!   freshly packaged `.crate` files (cargo's local-registry overlay) — not from the workspace and
//!   not from crates.io, where they do not exist yet.

pub mod checks;
pub mod git;
pub mod package;
pub mod plan;
pub mod workspace;

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use workspace::Workspace;

/// The first version of a member that has what its dependents use. Requirements on it must not
/// admit anything older, even where the current version is newer.
#[derive(Clone, Copy, Debug)]
pub struct Floor {
    /// The member.
    pub krate: &'static str,
    /// The first version with [`Floor::feature`].
    pub version: &'static str,
    /// What appeared in that version, for messages.
    pub feature: &'static str,
}

/// The recorded floors. Add a line when a dependent starts using something a later version
/// introduced (and raise its requirement).
pub const FLOORS: &[Floor] = &[Floor {
    krate: "onestep-core",
    version: "0.1.0",
    feature: "tracked execution (`onestep_core::execution`)",
}];

/// Where the checks run and how they call cargo.
#[derive(Clone, Debug)]
pub struct Env {
    /// The workspace root.
    pub root: PathBuf,
    /// The cargo program.
    pub cargo: OsString,
    /// Run cargo with `--offline` (the tests do; the real check uses the network if it must).
    pub offline: bool,
}

impl Env {
    /// The workspace xtask belongs to, with the cargo that runs xtask.
    pub fn this_workspace() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        Self {
            root,
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            offline: false,
        }
    }

    /// `cargo` in the workspace root, reading the root manifest.
    pub fn cargo(&self) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.current_dir(&self.root);
        if self.offline {
            cmd.arg("--offline");
        }
        cmd
    }

    /// `git -C <root>`.
    pub fn git(&self) -> Command {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(&self.root);
        cmd
    }
}

/// One thing that blocks a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The check that found it.
    pub check: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// What the checks found: problems, and notes on what passed.
#[derive(Debug, Default)]
pub struct Report {
    /// Blocking problems.
    pub problems: Vec<Problem>,
    /// One line per check that passed or was skipped, saying what it verified.
    pub notes: Vec<String>,
}

impl Report {
    /// Records a problem.
    pub fn problem(&mut self, check: &'static str, message: impl Into<String>) {
        self.problems.push(Problem {
            check,
            message: message.into(),
        });
    }

    /// Records a note.
    pub fn note(&mut self, check: &'static str, message: impl Into<String>) {
        self.notes.push(format!("{check}: {}", message.into()));
    }

    /// The problems of one check.
    #[cfg(test)]
    pub fn of(&self, check: &str) -> Vec<&str> {
        self.problems
            .iter()
            .filter(|p| p.check == check)
            .map(|p| p.message.as_str())
            .collect()
    }
}

/// Options of `release-check`.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Package without building the packaged sources (`--no-verify`).
    pub no_verify: bool,
    /// Skip packaging altogether (`--no-package`).
    pub no_package: bool,
}

impl CheckOptions {
    /// Parses `release-check`'s arguments.
    pub fn from_args(args: &[String]) -> Result<Self> {
        let mut options = Self::default();
        for arg in args {
            match arg.as_str() {
                "--no-verify" => options.no_verify = true,
                "--no-package" => options.no_package = true,
                other => bail!("release-check: unknown argument {other:?}"),
            }
        }
        Ok(options)
    }
}

/// Runs every check but packaging against the workspace at `env.root`.
pub fn static_checks(env: &Env, ws: &Workspace) -> Report {
    let mut report = Report::default();
    checks::requirements(ws, &mut report);
    checks::metadata(ws, &mut report);
    checks::changelog(ws, &mut report);
    checks::tags(env, ws, &mut report);
    checks::include_paths(ws, &mut report);
    checks::lockfile(env, &mut report);
    report
}

/// `cargo xtask release-check`.
pub fn check(options: &CheckOptions) -> Result<()> {
    let env = Env::this_workspace();
    let ws = Workspace::load(&env)?;
    let order = ws.publish_order()?;
    let names: Vec<&str> = order.iter().map(|c| c.name.as_str()).collect();
    eprintln!("release-check: publish order: {}", names.join(" → "));
    let mut report = static_checks(&env, &ws);
    if report.problems.is_empty() && !options.no_package {
        package::package(&env, &order, options.no_verify, &mut report);
    } else if options.no_package {
        report.note("packaging", "skipped (--no-package)");
    } else {
        report.note(
            "packaging",
            "skipped: fix the problems below first (packaging would only repeat them)",
        );
    }
    for note in &report.notes {
        eprintln!("release-check: {note}");
    }
    if report.problems.is_empty() {
        eprintln!("release-check: ok");
        return Ok(());
    }
    for p in &report.problems {
        eprintln!("release-check: FAIL {}: {}", p.check, p.message);
    }
    bail!(
        "release-check found {} problem(s); see above",
        report.problems.len()
    )
}

/// `cargo xtask release-plan`.
pub fn plan() -> Result<()> {
    let env = Env::this_workspace();
    let ws = Workspace::load(&env)?;
    let report = static_checks(&env, &ws);
    print!("{}", plan::render(&env, &ws, &report)?);
    Ok(())
}

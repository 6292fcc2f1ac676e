//! Packaging: `cargo publish --dry-run` of the published crates, in publish order, in one cargo
//! invocation.
//!
//! Why one invocation: a crate's workspace dependencies are not on crates.io yet, so packaging
//! `onestep-sql` alone fails to resolve `onestep-core`. When several crates are packaged together
//! (cargo 1.90+), cargo puts the freshly packaged `.crate` files in a temporary local registry
//! laid over crates.io, and verifies each crate by unpacking its `.crate` under `target/package/`
//! and building it there against those `.crate` files. So the build uses exactly the files that
//! would be uploaded, and the dependencies' packaged sources rather than the workspace's.
//! `--dry-run` stops before uploading; cargo also warns when a version is already on crates.io.
//!
//! The verification builds use `debug = false` (they only have to compile) and share `target/`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Instant;

use super::workspace::Crate;
use super::{Env, Report, git};

/// The check name.
pub const PACKAGING: &str = "packaging";

/// Removes earlier unpacked copies of our crates from cargo's temporary local registries.
///
/// Cargo unpacks the overlay registry's `.crate` files under
/// `$CARGO_HOME/registry/src/<hash of the registry path>/<name>-<version>/` and does not unpack
/// again when that directory exists. The registry path is `target/package/…` of the checkout, so
/// a later check from a checkout at the same path (CI clones to the same place) would build
/// against the *previous* run's sources of an unreleased version, e.g. a dependent crate would
/// not see a function just added to `onestep-core`. Only directories of local registries (their
/// names start with `-`; crates.io's start with `index.`) and only our crates' current versions
/// are removed; cargo unpacks them again from the fresh packages.
fn clear_stale_overlay_sources(order: &[&Crate], report: &mut Report) {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return;
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for krate in order {
            let stale = registry
                .path()
                .join(format!("{}-{}", krate.name, krate.version));
            if stale.is_dir()
                && let Err(err) = std::fs::remove_dir_all(&stale)
            {
                report.problem(
                    PACKAGING,
                    format!(
                        "could not remove the stale unpacked package {}: {err}",
                        stale.display()
                    ),
                );
            }
        }
    }
}

/// Removes the build fingerprints of our crates built from an overlay registry.
///
/// Cargo takes a registry package as immutable: once `onestep-core 0.1.0` from the overlay
/// registry is built, its fingerprint never looks at the sources again, so a later check would
/// link the dependent crates against the *previous* run's build of an unreleased version (a
/// function just added to `onestep-core` would be missing). Such a build is found by its
/// dep-info file (`deps/<crate>-<hash>.d`), which names sources under a local registry
/// (`registry/src/-…`); removing `.fingerprint/<name>-<hash>` makes cargo build it again.
fn clear_stale_overlay_builds(env: &Env, order: &[&Crate], report: &mut Report) {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env.root.join("target"));
    let profile = target.join("debug");
    let Ok(deps) = std::fs::read_dir(profile.join("deps")) else {
        return;
    };
    for entry in deps.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = file.strip_suffix(".d") else {
            continue;
        };
        let Some((lib, hash)) = stem.rsplit_once('-') else {
            continue;
        };
        let Some(krate) = order.iter().find(|c| c.name.replace('-', "_") == lib) else {
            continue;
        };
        let from_overlay =
            std::fs::read_to_string(entry.path()).is_ok_and(|text| text.contains("registry/src/-"));
        let fingerprint = profile
            .join(".fingerprint")
            .join(format!("{}-{hash}", krate.name));
        if from_overlay
            && fingerprint.is_dir()
            && let Err(err) = std::fs::remove_dir_all(&fingerprint)
        {
            report.problem(
                PACKAGING,
                format!(
                    "could not remove the stale build {}: {err}",
                    fingerprint.display()
                ),
            );
        }
    }
}

/// Packages (and unless `no_verify`, builds from the packages) every crate of `order`.
pub fn package(env: &Env, order: &[&Crate], no_verify: bool, report: &mut Report) {
    if order.is_empty() {
        report.note(PACKAGING, "nothing to package");
        return;
    }
    if git::is_repository(env)
        && let Ok(dirty) = git::dirty_paths(env)
        && !dirty.is_empty()
    {
        report.note(
            PACKAGING,
            format!(
                "note: {} uncommitted path(s) were packaged as they are on disk; publish from a \
                 clean checkout",
                dirty.len()
            ),
        );
    }
    clear_stale_overlay_sources(order, report);
    clear_stale_overlay_builds(env, order, report);
    let mut cmd = env.cargo();
    cmd.args(["publish", "--dry-run", "--allow-dirty", "--locked"]);
    if no_verify {
        cmd.arg("--no-verify");
    }
    cmd.args(["--config", "profile.dev.debug=false"]);
    for krate in order {
        cmd.args(["--package", &krate.name]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let started = Instant::now();
    eprintln!("release-check: {}", crate::sys::describe(&cmd));
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) => {
            report.problem(PACKAGING, format!("could not run cargo publish: {err}"));
            return;
        }
    };
    // Echo cargo's progress and remember which crate it was on and its error lines.
    let mut current = String::new();
    let mut errors = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            let trimmed = line.trim_start();
            for step in ["Packaging ", "Verifying ", "Uploading "] {
                if let Some(rest) = trimmed.strip_prefix(step) {
                    current = format!("{}{}", step.to_lowercase(), crate_of(rest));
                }
            }
            if trimmed.starts_with("error") {
                errors.push(trimmed.to_string());
            }
        }
    }
    let status = match child.wait() {
        Ok(status) => status,
        Err(err) => {
            report.problem(
                PACKAGING,
                format!("could not wait for cargo publish: {err}"),
            );
            return;
        }
    };
    let names: Vec<&str> = order.iter().map(|c| c.name.as_str()).collect();
    if status.success() {
        report.note(
            PACKAGING,
            format!(
                "ok: `cargo publish --dry-run` {} {} in {:.0}s",
                if no_verify {
                    "packaged (without building)"
                } else {
                    "packaged and built from the packages"
                },
                names.join(", "),
                started.elapsed().as_secs_f64()
            ),
        );
    } else {
        let first = errors.first().map_or("(no error line)", String::as_str);
        report.problem(
            PACKAGING,
            format!(
                "`cargo publish --dry-run` failed ({status}) while {}: {first} (cargo's output \
                 is above)",
                if current.is_empty() {
                    "resolving"
                } else {
                    current.as_str()
                }
            ),
        );
    }
}

/// `onestep-sql v0.1.0 (/path)` → `onestep-sql v0.1.0`.
fn crate_of(rest: &str) -> &str {
    rest.split(" (").next().unwrap_or(rest).trim()
}

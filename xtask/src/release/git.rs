//! Release tags (`<crate>-v<version>`) and what changed since them.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use semver::Version;

use super::Env;
use super::workspace::{Crate, Workspace, normalize};

/// The tag name of a release.
pub fn tag_name(krate: &str, version: &Version) -> String {
    format!("{krate}-v{version}")
}

/// A crate's state relative to its last release tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseState {
    /// No `<crate>-v*` tag: never released.
    Unreleased,
    /// Released at the current version and unchanged since: nothing to publish.
    Unchanged {
        /// The tag.
        tag: String,
    },
    /// The version is higher than the last tag's.
    Bumped {
        /// The tag.
        tag: String,
        /// The tag's version.
        from: Version,
        /// Files changed since the tag.
        changed: Vec<String>,
    },
    /// Files changed since the tag, the version did not: the mistake the check catches.
    ChangedWithoutBump {
        /// The tag.
        tag: String,
        /// Files changed since the tag.
        changed: Vec<String>,
    },
    /// The version is lower than the last tag's.
    Backwards {
        /// The tag.
        tag: String,
        /// The tag's version.
        from: Version,
    },
}

/// Whether `env.root` is inside a git work tree.
pub fn is_repository(env: &Env) -> bool {
    let mut cmd = env.git();
    cmd.args(["rev-parse", "--is-inside-work-tree"]);
    crate::sys::run(&mut cmd).is_ok_and(|out| out.trim() == "true")
}

/// All tags of the repository.
pub fn tags(env: &Env) -> Result<Vec<String>> {
    let mut cmd = env.git();
    cmd.args(["tag", "--list"]);
    Ok(crate::sys::run(&mut cmd)?
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect())
}

/// The highest released version of `krate` among `tags`, with its tag.
pub fn last_release(krate: &str, tags: &[String]) -> Option<(Version, String)> {
    let prefix = format!("{krate}-v");
    tags.iter()
        .filter_map(|tag| {
            let version = Version::parse(tag.strip_prefix(&prefix)?).ok()?;
            Some((version, tag.clone()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
}

/// The state of `krate` given the repository's `tags`.
pub fn release_state(
    env: &Env,
    ws: &Workspace,
    krate: &Crate,
    tags: &[String],
) -> Result<ReleaseState> {
    let Some((from, tag)) = last_release(&krate.name, tags) else {
        return Ok(ReleaseState::Unreleased);
    };
    if krate.version < from {
        return Ok(ReleaseState::Backwards { tag, from });
    }
    let changed = changed_since(env, ws, krate, &tag)?;
    Ok(if krate.version > from {
        ReleaseState::Bumped { tag, from, changed }
    } else if changed.is_empty() {
        ReleaseState::Unchanged { tag }
    } else {
        ReleaseState::ChangedWithoutBump { tag, changed }
    })
}

/// The files of `krate` that differ between `tag` and the working tree (committed or not, and
/// untracked files that are not ignored).
///
/// A crate's files are its directory, its readme when that lives elsewhere (onestep-core uses the
/// top-level README), and the targets of symlinks inside its directory (onestep-sql's
/// `migrations` points at the top-level `migrations/`). Changes to the top-level `Cargo.toml`
/// (shared metadata, `[workspace.dependencies]`) are not attributed to any crate.
pub fn changed_since(env: &Env, ws: &Workspace, krate: &Crate, tag: &str) -> Result<Vec<String>> {
    let paths = crate_paths(ws, krate);
    let mut diff = env.git();
    diff.args(["diff", "--name-only", tag, "--"]).args(&paths);
    let mut untracked = env.git();
    untracked
        .args(["ls-files", "--others", "--exclude-standard", "--"])
        .args(&paths);
    let mut changed = BTreeSet::new();
    for mut cmd in [diff, untracked] {
        let out = crate::sys::run(&mut cmd)
            .with_context(|| format!("could not compare {} with {tag}", krate.name))?;
        changed.extend(
            out.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
    }
    Ok(changed.into_iter().collect())
}

/// The git path specs (relative to the root) holding `krate`'s files.
pub fn crate_paths(ws: &Workspace, krate: &Crate) -> Vec<PathBuf> {
    let mut paths = BTreeSet::new();
    paths.insert(ws.relative(&krate.dir).to_path_buf());
    if let Some(readme) = &krate.readme
        && !readme.starts_with(&krate.dir)
        && readme.starts_with(&ws.root)
    {
        paths.insert(ws.relative(readme).to_path_buf());
    }
    for target in symlink_targets(&krate.dir) {
        if target.starts_with(&ws.root) && !target.starts_with(&krate.dir) {
            paths.insert(ws.relative(&target).to_path_buf());
        }
    }
    paths.into_iter().collect()
}

/// Where the symlinks under `dir` point (lexically resolved), skipping `target/` and dot
/// directories.
pub fn symlink_targets(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                if let Ok(link) = fs::read_link(&path) {
                    found.push(normalize(&current.join(link)));
                }
            } else if kind.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The paths with uncommitted changes (tracked or untracked), from `git status --porcelain`.
pub fn dirty_paths(env: &Env) -> Result<Vec<String>> {
    let mut cmd = env.git();
    cmd.args(["status", "--porcelain"]);
    Ok(crate::sys::run(&mut cmd)?
        .lines()
        .filter(|l| l.len() > 3)
        .map(|l| l[3..].to_string())
        .collect())
}
